/*
 * Quantized KV-cache storage on the host (issue 45), for the tests, the
 * `flashcl` tool and the benchmark: a quantizer that writes rows the way
 * docs/kv-quantization.md lays them out, and a float64 dequantizer. Both
 * are written from that page and include/flashcl.h, not from the kernels
 * (cl/common/kv_load.clh), so that the two can disagree: fp8 is encoded
 * by a search over the 256 codes, decoded by the formula of the format.
 * Types are flashcl_kv_storage values.
 */
#ifndef FLASHCL_SUPPORT_KV_QUANT_ORACLE_H
#define FLASHCL_SUPPORT_KV_QUANT_ORACLE_H

#include "flashcl.h"

#include <stddef.h>

#define KVQ_GROUP 32 /* int4 values per scale and zero point */

/* "e4m3", "e5m2", "int8", "int4", or the dtype's ("same"). */
const char *kvq_type_name(int type);
/* Type from such a name (also "fp8_e4m3", "fp8", "q8", "q4"); -1 if none. */
int kvq_type_parse(const char *name);

/* Exact value of fp8 `code` of `type` (NaN and infinities included). */
double kvq_fp8_value(int type, unsigned code);
/* The finite fp8 code of `type` nearest to x (ties to the even code),
 * saturating; NaN gives 0x7f. */
unsigned kvq_fp8_nearest(int type, double x);
/* Largest finite value of an fp8 type. */
double kvq_fp8_max(int type);

/* Bytes of one quantized row of `dim` values (int4: dim / 2). */
size_t kvq_row_bytes(int type, size_t dim);
/* Scale (and zero-point) entries of one row: int8 1, int4 dim / 32, fp8 0
 * (its scales are per tensor or head). */
size_t kvq_row_scales(int type, size_t dim);

/* Quantizes one row of `dim` values into `bytes`: int8 writes scales[0]
 * (symmetric, amax / 127), int4 scales[g] and zeros[g] per group (min/max
 * over the group, 15 steps), fp8 divides by `fp8_scale`; every step in
 * fp32 before the rounding to a code, as an append does it. */
void kvq_quantize_row(int type, const float *x, size_t dim, float fp8_scale,
                      unsigned char *bytes, float *scales, float *zeros);
/* Value of element d of a quantized row, in float64: scale * q (fp8,
 * int8) or scale * (q - zero) (int4), from the row's scales / zeros (int8:
 * scales[0]; int4: group d / 32) or `fp8_scale`. */
double kvq_dequant(int type, const unsigned char *bytes, size_t d,
                   const float *scales, const float *zeros, float fp8_scale);

#endif
