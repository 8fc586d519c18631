/*
 * The tests' view of the float64 oracle (support/oracle.h): the ref_* names
 * the suites were written against, mapped onto the one oracle the tests,
 * the `flashcl` tool and the benchmark share. Plain attention only (GQA,
 * bottom-right causal, any scale); variant cases build an oracle_problem
 * themselves.
 */
#ifndef FLASHCL_TESTS_REFERENCE_H
#define FLASHCL_TESTS_REFERENCE_H

#include "oracle.h"

#include <stddef.h>
#include <stdint.h>

/* Same values as flashcl_dtype, so a ref_dtype converts by a cast. */
typedef enum ref_dtype {
    REF_FP32 = FLASHCL_DTYPE_FP32,
    REF_FP16 = FLASHCL_DTYPE_FP16,
    REF_BF16 = FLASHCL_DTYPE_BF16
} ref_dtype;

size_t ref_dtype_size(ref_dtype dtype);
/* Value of element `index` (in elements) of an array of `dtype` at `base`. */
double ref_load(const void *base, size_t index, ref_dtype dtype);
/* Stores `value` rounded to `dtype` (via fp32 first, as a host would). */
void ref_store(void *base, size_t index, ref_dtype dtype, double value);

/* A 4-D strided view: element (b, h, s, d) lives at byte
 * offset + size * (b*stride[0] + h*stride[1] + s*stride[2] + d*stride[3]). */
typedef struct ref_view {
    const void *base;
    size_t offset; /* bytes */
    size_t stride[4];
} ref_view;

typedef struct ref_problem {
    size_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    ref_dtype dtype;
    double scale;
    int causal; /* query i sees key j iff j <= i + seqlen_k - seqlen_q */
    ref_view q, k, v;
} ref_problem;

/* Computes O packed as [batch][heads_q][seqlen_q][head_dim] and LSE packed
 * as [batch][heads_q][seqlen_q] (either may be NULL). A row that sees no key
 * gets O = 0 and LSE = -inf. Returns 0, or -1 if memory ran out. */
int ref_attention(const ref_problem *problem, double *o, double *lse);

/* The oracle problem of `problem` (no variants). */
oracle_problem ref_oracle_problem(const ref_problem *problem);

#endif
