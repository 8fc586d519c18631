/* One attention problem for the flashcl tool: random inputs on the host
 * and the device, its descriptor, a run on either backend, and the check
 * against the shared float64 oracle (support/oracle.h). */
#ifndef FLASHCL_CLI_PROBLEM_H
#define FLASHCL_CLI_PROBLEM_H

#include "flashcl.h"
#include "timing.h"

#include <stdbool.h>
#include <stddef.h>

/* Shape and variant fields; tensors are packed BNHD. The optional inputs
 * are generated: ALiBi slopes per head, sinks per head, an fp32 bias and a
 * uint8 mask of [seqlen_q, seqlen_k] broadcast over batch and heads. */
typedef struct problem_spec {
    const char *name;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v;
    int causal, top_left;
    int window;
    long window_left, window_right;
    int alibi, bias, mask, sinks;
    float softcap;
    /* K and V as a KV cache that every sequence attends seqlen_k keys of,
     * stored as the dtype or, where k_storage / v_storage
     * (flashcl_kv_storage) is set, quantized on the host
     * (docs/kv-quantization.md's layouts; fp8 with a per-tensor scale).
     * page_size > 0: paged, in pages of that many rows under a shuffled
     * block table. append > 0: the last `append` keys of each sequence
     * come as k_new / v_new, which the call writes (and quantizes) into
     * the cache, whose cache_seqlens is then seqlen_k - append. A dense
     * cache has room for seqlen_k + append rows (no append: full), a paged
     * one for whole pages; the rows past the keys are poison. A quantized
     * type, page_size or append implies kv_cache. */
    int kv_cache;
    int k_storage, v_storage;
    int page_size, append;
} problem_spec;

/* One side (K or V) of the cache: its device rows (the dtype's, or a
 * quantized type's bytes with their scales and zero points), the rows to
 * append (k_new / v_new, in the dtype) and, when quantized, the values
 * the kernel must read, as doubles packed like the unquantized tensor
 * (what the oracle reads instead; appended rows as the documented append
 * quantizes them). */
typedef struct problem_kv_side {
    int type; /* flashcl_kv_storage; 0: the dtype (no scales, no values) */
    cl_mem bytes_buf, scale_buf, zero_buf, new_buf;
    double *values;
    float fp8_scale;
} problem_kv_side;

/* Where a cache's rows live: `slots` rows of each of `kv_batch` cache rows
 * (dense: capacity; paged: page_size, and `table` [batch, max_pages] maps
 * each sequence's pages). */
typedef struct problem_kv_layout {
    int capacity, slots, kv_batch, max_pages, cache_len;
    int *table;
} problem_kv_layout;

/* Host inputs (quantised to the dtype), device buffers and outputs. */
typedef struct problem {
    problem_spec spec;
    flashcl_dtype dtype;
    size_t q_count, k_count, v_count, o_count, lse_count;
    void *q, *k, *v; /* storage */
    float *slopes, *sinks, *bias;
    unsigned char *mask;
    cl_mem q_buf, k_buf, v_buf, o_buf, lse_buf, slopes_buf, sinks_buf,
        bias_buf, mask_buf;
    void *o; /* storage, read back */
    float *lse;
    /* spec.kv_cache: cache_seqlens (int32 [batch], all layout.cache_len)
     * and the block table when paged */
    cl_mem seqlens_buf, table_buf;
    problem_kv_layout layout;
    problem_kv_side kv[2]; /* K, V */
} problem;

/* Random inputs (seeded) on host and device. On failure the problem is
 * released and the reason is in `why`. */
flashcl_status problem_create(flashcl_context *ctx, const problem_spec *spec,
                              flashcl_dtype dtype, unsigned seed, problem *p,
                              char *why, size_t why_cap);
void problem_release(problem *p);
/* The descriptor of the problem for `backend`. */
flashcl_attention_desc problem_desc(const problem *p, flashcl_backend backend);
/* Enqueues one call and waits for it (clFinish). */
flashcl_status problem_enqueue(flashcl_context *ctx, const problem *p,
                               flashcl_backend backend);
/* Reads O and LSE back after a call. */
flashcl_status problem_read(flashcl_context *ctx, problem *p);
/* problem_enqueue + problem_read. */
flashcl_status problem_run(flashcl_context *ctx, problem *p,
                           flashcl_backend backend);

/* Median (and minimum) host-clock time of `reps` calls of `desc`, each
 * enqueue + clFinish, after `warmup` calls. */
flashcl_status time_forward(flashcl_context *ctx,
                            const flashcl_attention_desc *desc, int warmup,
                            int reps, timing_result *out);

/* The oracle's O (packed BNHD, like the device's) and LSE [b][h][n] of the
 * problem's quantised inputs. Arrays of o_count and lse_count doubles,
 * NULL when memory ran out; free() both. */
typedef struct reference_result {
    double *o, *lse;
} reference_result;
reference_result problem_reference(const problem *p);
void reference_free(reference_result *r);

/* The oracle over the unquantized K and V (the dtype's values before the
 * host quantized them): the quantization error's reference. Equal to
 * problem_reference() when nothing is quantized. */
reference_result problem_reference_unquantized(const problem *p);

/* KV-cache mode (cli_kvcache.c): the cache's device buffers, quantized
 * where asked, paged and appended to where asked; 0, or -1 with the
 * reason in `why`. */
int problem_kv_create(flashcl_context *ctx, problem *p, char *why,
                      size_t why_cap);
void problem_kv_release(problem *p);
/* The cache fields of the descriptor (cache_seqlens, the cache's K/V,
 * quantized, paged and appended to as asked). */
void problem_kv_desc(const problem *p, flashcl_attention_desc *d);
/* After a call with --append: the appended rows read back from the
 * device, each value compared exactly with the host's (quantized: the
 * value its code and scales decode to, against the host quantizer's;
 * else the dtype's bytes). Counts values that differ and values checked;
 * 0, or -1 with the reason in `why`. */
int problem_kv_check_append(flashcl_context *ctx, const problem *p,
                            size_t *differing, size_t *checked, char *why,
                            size_t why_cap);
/* Whether K or V is stored quantized. */
bool problem_kv_quantized(const problem *p);

/* Max |a - b| / max |b| over O, and max |a - b| / max(1, |b|) over LSE,
 * where -inf must match -inf exactly (else the error is infinite). */
typedef struct error_pair {
    double o, lse;
} error_pair;
error_pair problem_error(const problem *p, const double *ref_o,
                         const double *ref_lse);
/* The problem's current O/LSE as doubles, to compare a later run with. */
void problem_snapshot(const problem *p, double *o, double *lse);

/* Tolerances against float64 (and between backends): O relative to
 * max|O|, LSE relative to max(1, |LSE|). */
double o_tolerance(flashcl_dtype dtype);
double lse_tolerance(flashcl_dtype dtype);
bool within_tolerance(error_pair e, flashcl_dtype dtype);

/* Query-key pairs the causal mask and window leave, over all rows of one
 * head: what the FLOP count of a call should be based on. */
double problem_visible_pairs(const problem_spec *spec);

#endif /* FLASHCL_CLI_PROBLEM_H */
