/* flashcl_mpi: one long sequence's attention across MPI ranks (context
 * parallelism), each rank holding a shard of the queries, keys and values
 * on its own OpenCL device. An optional library (libflashcl_mpi), built
 * when CMake finds MPI; libflashcl itself never needs MPI.
 *
 * Every rank calls the same function with its own shard: collective over
 * `comm`. Buffers travel through host memory. The result equals the
 * single-device call on the whole sequence, to the dtype's rounding, and
 * is bitwise repeatable at a fixed rank count (every rank merges its
 * partial results in a fixed order).
 *
 * Self-attention over one sequence of seqlen_total rows (queries and keys
 * alike), split into equal shards: rank r holds rows [r n, (r + 1) n) with
 * FLASHCL_CP_CONTIGUOUS, n = seqlen_total / ranks, or two chunks of n / 2
 * rows, chunk r and chunk 2 ranks - 1 - r, with FLASHCL_CP_ZIGZAG (the
 * load-balanced layout for causal calls: every rank does the same work);
 * flashcl_cp_shard_rows says which rows a rank holds. */
#ifndef FLASHCL_MPI_H
#define FLASHCL_MPI_H

#include <mpi.h>

#include "flashcl.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How the keys and values reach every rank. */
typedef enum flashcl_cp_mode {
    /** Ring: each step sends the K/V block in hand to the next rank and
     *  receives the previous rank's (non-blocking, during the step's
     *  attention); the partial results (in the storage type, summed in
     *  fp32) merged by flashcl_combine_partials. Every dtype: fp64
     *  steps write fp64 partials and fp64 LSEs (the core's lse_dtype),
     *  merged in fp64, as fp32 LSEs would cut fp64 to fp32 accuracy. */
    FLASHCL_CP_RING = 0,
    /** All-gather: every rank gathers the whole K and V, then one call per
     *  local query chunk (for GQA, where K/V are small). Every dtype. */
    FLASHCL_CP_ALLGATHER = 1
} flashcl_cp_mode;

/** Which rows a rank's shard holds. */
typedef enum flashcl_cp_layout {
    FLASHCL_CP_CONTIGUOUS = 0,
    FLASHCL_CP_ZIGZAG = 1
} flashcl_cp_layout;

/** The distribution of a context-parallel call. */
typedef struct flashcl_cp_desc {
    size_t struct_size; /* sizeof(flashcl_cp_desc) */
    flashcl_cp_mode mode;
    flashcl_cp_layout layout;
    int64_t seqlen_total; /* rows of the whole sequence: ranks * shard rows */
} flashcl_cp_desc;

#define FLASHCL_CP_DESC_INIT {sizeof(flashcl_cp_desc), FLASHCL_CP_RING, \
                              FLASHCL_CP_CONTIGUOUS, 0}

/** Attention over the whole sequence for this rank's query rows: `local`
 *  is an ordinary forward descriptor of the shard (batch, heads, head
 *  dims, dtype, variants; q, k, v, o and optional lse views of seqlen_q =
 *  seqlen_k = shard rows, in any layout or strides the core takes, but K
 *  and V, which go through host memory, need rows of head_dim contiguous
 *  elements: stride_dim 1 (or all-zero strides)), computed on
 *  `ctx` and `queue` (NULL: the context's queue), blocking until done.
 *  Causal, windows, ALiBi, softcap and sinks mean what they mean for the
 *  whole sequence (bottom-right alignment, which is top-left here).
 *  Bias and mask: the shard's query rows (in its order) against
 *  the whole sequence's keys at their positions, [batch, heads_q, shard
 *  rows, seqlen_total] with the core's literal strides; each call takes
 *  its key chunk's columns. fp64 in ring mode merges the steps through
 *  fp64 LSEs (the core's lse_dtype), so it keeps fp64 accuracy; the
 *  shard's own lse may be fp32 or, with lse_dtype, fp64. Not yet: the
 *  inference fields, K/V views whose rows are not contiguous
 *  (FLASHCL_ERROR_UNSUPPORTED).
 *
 *  Collective: every rank returns the same status class. A rank whose
 *  own check or call fails makes every rank fail (the others with
 *  FLASHCL_ERROR_INVALID_VALUE naming that rank), and shards that disagree
 *  in shape or options fail on every rank; nothing is written then.
 *  flashcl_cp_last_error() has the message. */
flashcl_status flashcl_cp_attention_forward(MPI_Comm comm,
                                            flashcl_context *ctx,
                                            cl_command_queue queue,
                                            const flashcl_attention_desc *local,
                                            const flashcl_cp_desc *cp);

/** Gradients of flashcl_cp_attention_forward: `local` as for the forward,
 *  with its o and lse (the forward's outputs, lse required); `bwd` names
 *  the shard's dO and its dQ, dK, dV outputs (any strides, as q, k and
 *  v; dQ, dK and dV, written from host memory, with K's rule). fp32, fp16 or bf16 storage, summed in fp32 on the host;
 *  fp64 storage, summed in fp64 (O and an fp32 LSE from either
 *  forward; an fp64 lse, lse_dtype, is refused).
 *  FLASHCL_CP_RING: each step computes the
 *  shard's backward against the K/V block in hand, and the block's dK/dV
 *  sum travels around the ring with it, taking each rank's contribution,
 *  back to its owner. FLASHCL_CP_ALLGATHER: every rank gathers K and V,
 *  computes its query rows' dQ and their dK/dV contributions over every
 *  key, and each rank's dK/dV rows are the sum of the ranks'
 *  contributions in rank order. Either way the result is bitwise
 *  repeatable at a fixed rank count. d_sinks (with sinks) is the whole
 *  sequence's, the ranks' sums added in rank order, on every rank.
 *  Collective, with the forward's failure rules. */
flashcl_status flashcl_cp_attention_backward(
    MPI_Comm comm, flashcl_context *ctx, cl_command_queue queue,
    const flashcl_attention_desc *local, const flashcl_backward_desc *bwd,
    const flashcl_cp_desc *cp);

/** The rows of the whole sequence that shard `rank` of `ranks` holds, in
 *  the shard's order: first[0] .. first[0] + count - 1, then (zig-zag)
 *  first[1] .. first[1] + count - 1. Returns the number of chunks (1 or 2),
 *  0 when seqlen_total does not split evenly. */
int flashcl_cp_shard_rows(const flashcl_cp_desc *cp, int rank, int ranks,
                          int64_t first[2], int64_t *count);

/** This thread's message for the last failed flashcl_cp_* call. */
const char *flashcl_cp_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCL_MPI_H */
