/*
 * Float64 CPU reference attention for the flashcl tests.
 *
 * Independent of the library: it reads the same bytes the device reads
 * (fp32, fp16 or bf16, decoded on the host) through the same kind of strided
 * view, and computes softmax(scale * Q K^T) V in double precision with GQA,
 * bottom-right aligned causal masking and the natural-log LSE.
 */
#ifndef FLASHCL_TESTS_REFERENCE_H
#define FLASHCL_TESTS_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

typedef enum ref_dtype { REF_FP32 = 0, REF_FP16 = 1, REF_BF16 = 2 } ref_dtype;

/* IEEE binary16 and bfloat16 conversions, round-to-nearest-even; NaN stays
 * NaN, overflow goes to infinity, fp16 subnormals are handled. */
uint16_t ref_float_to_half(float value);
float ref_half_to_float(uint16_t bits);
uint16_t ref_float_to_bf16(float value);
float ref_bf16_to_float(uint16_t bits);

size_t ref_dtype_size(ref_dtype dtype);
/* Value of element `index` (in elements) of an array of `dtype` at `base`. */
double ref_load(const void *base, size_t index, ref_dtype dtype);
/* Stores `value` rounded to `dtype` (via fp32 first, as a host would). */
void ref_store(void *base, size_t index, ref_dtype dtype, double value);
/* `value` rounded to `dtype` and back: what the device would read. */
double ref_quantize(double value, ref_dtype dtype);

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

#endif
