/* The host's quantizer and float64 dequantizer (kv_quant_oracle.h). */
#include "kv_quant_oracle.h"

#include <math.h>
#include <string.h>

const char *kvq_type_name(int type)
{
    switch (type) {
    case FLASHCL_KV_FP8_E4M3:
        return "e4m3";
    case FLASHCL_KV_FP8_E5M2:
        return "e5m2";
    case FLASHCL_KV_INT8:
        return "int8";
    case FLASHCL_KV_INT4:
        return "int4";
    default:
        return "same";
    }
}

int kvq_type_parse(const char *name)
{
    static const struct {
        const char *name;
        int type;
    } names[] = {{"same", 0},          {"e4m3", 1},     {"fp8_e4m3", 1},
                 {"fp8", 1},           {"e5m2", 2},     {"fp8_e5m2", 2},
                 {"int8", 3},          {"q8", 3},       {"int4", 4},
                 {"q4", 4}};
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; ++i)
        if (!strcmp(name, names[i].name))
            return names[i].type;
    return -1;
}

/* fp8 layouts: e4m3 (4 exponent bits, bias 7, no infinity, S.1111.111
 * NaN) and e5m2 (5 exponent bits, bias 15, IEEE infinities and NaNs). */
double kvq_fp8_value(int type, unsigned code)
{
    const int e4m3 = type == FLASHCL_KV_FP8_E4M3;
    const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const unsigned exp_max = e4m3 ? 15 : 31;
    const unsigned exponent = (code >> man_bits) & exp_max;
    const unsigned mantissa = code & ((1u << man_bits) - 1);
    const double sign = code & 0x80 ? -1.0 : 1.0;
    if (e4m3 && exponent == 15 && mantissa == 7)
        return NAN;
    if (!e4m3 && exponent == 31)
        return mantissa ? NAN : sign * INFINITY;
    const double fraction = (double)mantissa / (double)(1u << man_bits);
    if (exponent == 0)
        return sign * ldexp(fraction, 1 - bias);
    return sign * ldexp(1.0 + fraction, (int)exponent - bias);
}

double kvq_fp8_max(int type)
{
    return type == FLASHCL_KV_FP8_E4M3 ? 448.0 : 57344.0;
}

unsigned kvq_fp8_nearest(int type, double x)
{
    if (isnan(x))
        return 0x7f;
    unsigned best = 0;
    double best_err = INFINITY;
    for (unsigned code = 0; code < 256; ++code) {
        const double value = kvq_fp8_value(type, code);
        if (!isfinite(value))
            continue;
        const double err = fabs(value - x);
        /* ties: the even code; +0 before -0 */
        if (err < best_err ||
            (err == best_err && (best & 1) && !(code & 1))) {
            best = code;
            best_err = err;
        }
    }
    return best;
}

size_t kvq_row_bytes(int type, size_t dim)
{
    return type == FLASHCL_KV_INT4 ? dim / 2 : dim;
}

size_t kvq_row_scales(int type, size_t dim)
{
    return type == FLASHCL_KV_INT8   ? 1
           : type == FLASHCL_KV_INT4 ? dim / KVQ_GROUP
                                     : 0;
}

static void quantize_int4(const float *x, size_t dim, unsigned char *bytes,
                          float *scales, float *zeros)
{
    memset(bytes, 0, dim / 2);
    for (size_t g = 0; g < dim / KVQ_GROUP; ++g) {
        const float *group = x + g * KVQ_GROUP;
        float lo = group[0], hi = group[0];
        for (size_t i = 1; i < KVQ_GROUP; ++i) {
            lo = group[i] < lo ? group[i] : lo;
            hi = group[i] > hi ? group[i] : hi;
        }
        const float scale = hi > lo ? (hi - lo) / 15.0f : 1.0f;
        scales[g] = scale;
        zeros[g] = -lo / scale;
        for (size_t i = 0; i < KVQ_GROUP; ++i) {
            /* fp32, as the page says: in double a quotient near a half
             * could round the other way, and an fp16 row lands there
             * often */
            const float shifted = group[i] / scale + zeros[g];
            double q = nearbyint((double)shifted);
            q = q < 0 ? 0 : q > 15 ? 15 : q;
            const size_t d = g * KVQ_GROUP + i;
            bytes[d / 2] |= (unsigned char)((unsigned)q << (4 * (d % 2)));
        }
    }
}

void kvq_quantize_row(int type, const float *x, size_t dim, float fp8_scale,
                      unsigned char *bytes, float *scales, float *zeros)
{
    if (type == FLASHCL_KV_INT4) {
        quantize_int4(x, dim, bytes, scales, zeros);
        return;
    }
    if (type == FLASHCL_KV_INT8) {
        float amax = 0;
        for (size_t d = 0; d < dim; ++d)
            amax = fabsf(x[d]) > amax ? fabsf(x[d]) : amax;
        scales[0] = amax / 127.0f;
        for (size_t d = 0; d < dim; ++d) {
            const float quotient = scales[0] > 0 ? x[d] / scales[0] : 0;
            const double q = nearbyint((double)quotient);
            bytes[d] = (unsigned char)(signed char)(q > 127    ? 127
                                                    : q < -127 ? -127
                                                               : q);
        }
        return;
    }
    for (size_t d = 0; d < dim; ++d) {
        const float quotient = x[d] / fp8_scale;
        bytes[d] = (unsigned char)kvq_fp8_nearest(type, (double)quotient);
    }
}

double kvq_dequant(int type, const unsigned char *bytes, size_t d,
                   const float *scales, const float *zeros, float fp8_scale)
{
    if (type == FLASHCL_KV_INT4) {
        const unsigned q = (bytes[d / 2] >> (4 * (d % 2))) & 15u;
        return (double)scales[d / KVQ_GROUP] *
               ((double)q - (double)zeros[d / KVQ_GROUP]);
    }
    if (type == FLASHCL_KV_INT8)
        return (double)scales[0] * (double)(signed char)bytes[d];
    return (double)fp8_scale * kvq_fp8_value(type, bytes[d]);
}
