/*
 * The float64 oracle: attention as include/flashcl.h defines it, computed on
 * the host in double precision, for the tests, the `flashcl` tool and the
 * benchmark. It is written from the header's "semantics", not from the
 * library's code, so that the two can disagree.
 *
 * It reads host copies of the bytes the device reads (fp32, fp16, bf16 or
 * fp64 storage) through the same kind of strided view, converts every input
 * tensor to double once when an oracle is created, and then computes O and
 * LSE in double: GQA/MQA, both causal alignments, sliding windows, softcap,
 * ALiBi, additive bias, boolean mask, sinks and D_v != D.
 *
 * Not thread-safe per oracle object (each holds one row of scratch); use one
 * object per thread.
 */
#ifndef FLASHCL_SUPPORT_ORACLE_H
#define FLASHCL_SUPPORT_ORACLE_H

#include "flashcl.h"

#include <stddef.h>
#include <stdint.h>

/* ---- storage ------------------------------------------------------- */

/* IEEE binary16 and bfloat16, round to nearest even; NaN stays NaN,
 * overflow goes to infinity, fp16 subnormals are exact. Exhaustively
 * checked by tests/test_reference.c. */
uint16_t oracle_float_to_half(float value);
float oracle_half_to_float(uint16_t bits);
uint16_t oracle_float_to_bf16(float value);
float oracle_bf16_to_float(uint16_t bits);

/* Bytes of one element of a storage dtype (fp32, fp16, bf16, fp64). */
size_t oracle_dtype_size(flashcl_dtype dtype);
const char *oracle_dtype_name(flashcl_dtype dtype);
/* Element `index` (in elements, from `base`) as a double. */
double oracle_load(const void *base, size_t index, flashcl_dtype dtype);
/* `value` stored as `dtype`; fp16/bf16 go through fp32 first, as a host
 * program converting floats would. */
void oracle_store(void *base, size_t index, flashcl_dtype dtype, double value);
/* `value` rounded to `dtype` and read back: what the device would see. */
double oracle_quantize(double value, flashcl_dtype dtype);

/* ---- the problem --------------------------------------------------- */

/* Element (b, h, s, d) of a view lives at byte
 * offset + elem_size * (b*stride[0] + h*stride[1] + s*stride[2] +
 * d*stride[3]) from base. Strides are literal: 0 repeats an axis. */
typedef struct oracle_view {
    const void *base; /* NULL: this optional input is off */
    size_t offset;    /* bytes */
    size_t stride[4]; /* elements */
    flashcl_dtype dtype;
} oracle_view;

/* Everything resolved: no "0 means default" left, so the oracle has one
 * meaning for each field. Build it by hand or with
 * oracle_problem_from_desc(). */
typedef struct oracle_problem {
    size_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v;
    double scale; /* used as given, 0 and negative included */
    int causal;
    flashcl_causal_align causal_align;
    int64_t q_position, k_position; /* FLASHCL_CAUSAL_ABSOLUTE's */
    int window; /* 0: window_left/right ignored */
    int64_t window_left, window_right; /* -1: unbounded */
    double softcap;                    /* 0: off */
    oracle_view q, k, v;
    /* Optional inputs (base NULL: off). alibi and sinks are fp32; alibi's
     * slope of (b, h) is at stride[0]*b + stride[1]*h, a sink of h at
     * stride[1]*h. bias is indexed (b, h, i, j) in its own dtype; mask
     * likewise, one byte per element (its dtype is not read). */
    oracle_view alibi, bias, mask, sinks;
} oracle_problem;

/* Host copies of the buffers a descriptor names, each pointing at the
 * start of its cl_mem's contents (the view offsets are applied). */
typedef struct oracle_inputs {
    const void *q, *k, *v;
    const float *alibi_slopes;
    const void *bias;
    const unsigned char *mask;
    const float *sinks;
} oracle_inputs;

/* Strides of a tensor packed in `layout` with these extents (b, h, s, d). */
void oracle_packed_strides(flashcl_layout layout, size_t heads, size_t seq,
                           size_t dim, size_t stride[4]);

/* The scale a descriptor asks for: `scale` when explicit_scale is set or
 * scale is non-zero, else 1/sqrt(head_dim). */
double oracle_desc_scale(const flashcl_attention_desc *desc);

/* Reads `desc` as flashcl_attention_forward would (defaults, packed
 * strides, optional inputs on when their buffer is set) over the host
 * copies in `in`. An optional input whose buffer is set must have a host
 * copy and vice versa. Returns 0, or -1 with the reason in `why`. */
int oracle_problem_from_desc(const flashcl_attention_desc *desc,
                             const oracle_inputs *in, oracle_problem *out,
                             char *why, size_t why_cap);

/* Keys row i sees through the causal mask and the window alone (bias and
 * mask not applied): [*first, *first + count). Returns count. */
size_t oracle_band(const oracle_problem *p, size_t i, size_t *first);

/* ---- computing ----------------------------------------------------- */

typedef struct oracle oracle;

/* Decodes every input of `p` to double and copies the mask, so the views'
 * memory may be freed after this call. NULL when memory runs out. */
oracle *oracle_create(const oracle_problem *p);
void oracle_release(oracle *o);

/* One query row: O[b, h, i, 0..head_dim_v) into o_row, LSE (natural log)
 * into *lse. A row that sees no key gets O = 0 and LSE = -inf (LSE = the
 * sink with sinks). */
void oracle_row(oracle *o, size_t b, size_t h, size_t i, double *o_row,
                double *lse);

/* Every row. O element (b, h, i, d) goes to o[b*o_stride[0] + h*o_stride[1]
 * + i*o_stride[2] + d*o_stride[3]] (o_stride NULL: packed [batch][heads_q]
 * [seqlen_q][head_dim_v]); LSE packed [batch][heads_q][seqlen_q]. Either
 * output may be NULL. */
void oracle_compute(oracle *o, double *out_o, const size_t o_stride[4],
                    double *out_lse);

/* oracle_create + oracle_compute + oracle_release. 0, or -1 when memory
 * runs out. */
int oracle_attention(const oracle_problem *p, double *out_o,
                     const size_t o_stride[4], double *out_lse);

/* ---- what the gradient oracle (oracle_bwd.h) reads ------------------ */

/* The decoded inputs, packed [batch][heads][seq][dim] doubles. */
void oracle_decoded(const oracle *o, const double **q, const double **k,
                    const double **v);
/* Score (b, h, i, j) exactly as oracle_row uses it (band not applied; a
 * masked key gives -inf), and into *d_product (may be NULL) its derivative
 * with respect to scale * q.k: softcap's 1 - tanh^2, else 1. */
double oracle_score(const oracle *o, size_t b, size_t h, size_t i, size_t j,
                    double *d_product);
/* The sink logit of head h, -inf without sinks. */
double oracle_sink(const oracle *o, size_t h);

#endif /* FLASHCL_SUPPORT_ORACLE_H */
