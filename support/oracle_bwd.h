/*
 * The float64 gradient oracle: dQ, dK, dV and d_sinks of the loss
 * sum(dO . O) for every problem the forward oracle (oracle.h) computes,
 * from the same score function (oracle_score), so the two share one
 * reading of the header's semantics. GQA/MQA: dK and dV of a KV head sum
 * over its query heads. Rows that see no key contribute nothing.
 *
 * It also computes FlashAttention-2's low-precision reference for the
 * "2x" criterion (tests/test_flash_attn.py's attention_ref with
 * upcast=False, reorder_ops=True): the same math with every intermediate
 * rounded to the input dtype, K pre-scaled, Delta taken as sum_j P dP (as
 * autograd's softmax backward does) and matrix products accumulated in
 * high precision and rounded once (as fp32-accumulating GEMMs do).
 */
#ifndef FLASHCL_SUPPORT_ORACLE_BWD_H
#define FLASHCL_SUPPORT_ORACLE_BWD_H

#include "oracle.h"

/* Packed [batch][heads][seq][dim] doubles (heads_kv for dk, dv); d_sinks
 * [heads_q], NULL when not wanted. The caller allocates; every element is
 * overwritten. */
typedef struct oracle_grads {
    double *dq, *dk, *dv;
    double *d_sinks;
} oracle_grads;

/* Gradients of sum(d_o . O) with d_o packed [batch][heads_q][seqlen_q]
 * [head_dim_v]. `rounding` FLASHCL_DTYPE_FP64: exact math in double with
 * Delta = dO . O (the oracle); FP16 or BF16 (or FP32): FA2's reference in
 * that dtype. 0, or -1 when memory runs out. */
int oracle_backward(const oracle_problem *p, const double *d_o,
                    flashcl_dtype rounding, oracle_grads *g);

/* A packed (varlen) batch of `batch` sequences, one dense problem each:
 * sequence b is query rows [cu_q[b], cu_q[b + 1]) of p's q and keys
 * [cu_k[b], cu_k[b + 1]) of k and v, with its own causal diagonal; bias, mask and ALiBi are read
 * at batch entry b, rows and keys counted from the sequence's start (the
 * library's reading, include/flashcl.h). p->batch is 1 and seqlen_q /
 * seqlen_k are the packed totals; the prefix sums must be monotonic and
 * within them. d_o and the gradients are packed as in oracle_backward
 * (batch 1, the totals); rows outside every sequence get 0; d_sinks sums
 * over the sequences. 0, or -1 when memory runs out. */
int oracle_backward_varlen(const oracle_problem *p, size_t batch,
                           const int *cu_q, const int *cu_k,
                           const double *d_o, flashcl_dtype rounding,
                           oracle_grads *g);

#endif /* FLASHCL_SUPPORT_ORACLE_BWD_H */
