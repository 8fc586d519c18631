#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- */
/* Conversions                                                       */
/* ---------------------------------------------------------------- */

static uint32_t float_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static float bits_float(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* Shifts `mantissa` right by `shift` (1..31) rounding to nearest even. */
static uint32_t shift_right_rne(uint32_t mantissa, unsigned shift)
{
    uint32_t kept = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (kept & 1u)))
        kept++;
    return kept;
}

uint16_t ref_float_to_half(float value)
{
    uint32_t bits = float_bits(value);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;

    if (magnitude > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)(sign | 0x7e00u);
    if (magnitude >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (magnitude >= 0x38800000u) { /* normal half (>= 2^-14) */
        uint32_t exponent = (magnitude >> 23) - 127u + 15u;
        uint32_t mantissa = (magnitude & 0x7fffffu) | (exponent << 23);
        /* Rounding may carry into the exponent, which is what we want. */
        return (uint16_t)(sign | shift_right_rne(mantissa, 13));
    }
    /* Subnormal half: units of 2^-24. value = m * 2^(e - 150). */
    uint32_t exponent = magnitude >> 23;
    if (exponent < 102u) /* below 2^-25: rounds to zero */
        return sign;
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | shift_right_rne(mantissa, 126u - exponent));
}

float ref_half_to_float(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exponent = (bits >> 10) & 0x1fu;
    uint32_t mantissa = bits & 0x3ffu;

    if (exponent == 0) {
        float magnitude = ldexpf((float)mantissa, -24);
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31)
        return bits_float(sign | 0x7f800000u | (mantissa << 13));
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t ref_float_to_bf16(float value)
{
    uint32_t bits = float_bits(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u);
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

float ref_bf16_to_float(uint16_t bits)
{
    return bits_float((uint32_t)bits << 16);
}

/* ---------------------------------------------------------------- */
/* Element access                                                    */
/* ---------------------------------------------------------------- */

size_t ref_dtype_size(ref_dtype dtype)
{
    return dtype == REF_FP32 ? 4 : 2;
}

double ref_load(const void *base, size_t index, ref_dtype dtype)
{
    const unsigned char *bytes = base;
    if (dtype == REF_FP32) {
        float value;
        memcpy(&value, bytes + 4 * index, 4);
        return value;
    }
    uint16_t bits;
    memcpy(&bits, bytes + 2 * index, 2);
    return dtype == REF_FP16 ? ref_half_to_float(bits)
                             : ref_bf16_to_float(bits);
}

void ref_store(void *base, size_t index, ref_dtype dtype, double value)
{
    unsigned char *bytes = base;
    float single = (float)value;
    if (dtype == REF_FP32) {
        memcpy(bytes + 4 * index, &single, 4);
        return;
    }
    uint16_t bits = dtype == REF_FP16 ? ref_float_to_half(single)
                                      : ref_float_to_bf16(single);
    memcpy(bytes + 2 * index, &bits, 2);
}

double ref_quantize(double value, ref_dtype dtype)
{
    unsigned char storage[4];
    ref_store(storage, 0, dtype, value);
    return ref_load(storage, 0, dtype);
}

/* ---------------------------------------------------------------- */
/* Attention                                                         */
/* ---------------------------------------------------------------- */

/* Decodes rows [0, rows) x [0, dim) of head (b, h) of a view into a packed
 * double matrix. */
static void decode_head(const ref_view *view, ref_dtype dtype, size_t b,
                        size_t h, size_t rows, size_t dim, double *out)
{
    const unsigned char *start = (const unsigned char *)view->base +
                                 view->offset;
    size_t head_base = b * view->stride[0] + h * view->stride[1];
    for (size_t s = 0; s < rows; s++)
        for (size_t d = 0; d < dim; d++) {
            size_t index = head_base + s * view->stride[2] + d * view->stride[3];
            out[s * dim + d] = ref_load(start, index, dtype);
        }
}

/* Number of keys query row i sees: all of them, or under the bottom-right
 * causal mask those j <= i + seqlen_k - seqlen_q. */
static size_t visible_keys(const ref_problem *p, size_t i)
{
    if (!p->causal)
        return p->seqlen_k;
    long long last = (long long)i + (long long)p->seqlen_k -
                     (long long)p->seqlen_q;
    if (last < 0)
        return 0;
    return (size_t)last + 1 < p->seqlen_k ? (size_t)last + 1 : p->seqlen_k;
}

/* One query row: writes o_row[dim] and returns the LSE. */
static double attend_row(const ref_problem *p, const double *q_row,
                         const double *k_head, const double *v_head,
                         size_t keys, double *scores, double *o_row)
{
    size_t dim = p->head_dim;
    memset(o_row, 0, dim * sizeof *o_row);
    if (keys == 0)
        return -INFINITY;

    double row_max = -INFINITY;
    for (size_t j = 0; j < keys; j++) {
        double dot = 0.0;
        for (size_t d = 0; d < dim; d++)
            dot += q_row[d] * k_head[j * dim + d];
        scores[j] = p->scale * dot;
        if (scores[j] > row_max)
            row_max = scores[j];
    }
    double sum = 0.0;
    for (size_t j = 0; j < keys; j++) {
        double weight = exp(scores[j] - row_max);
        sum += weight;
        for (size_t d = 0; d < dim; d++)
            o_row[d] += weight * v_head[j * dim + d];
    }
    for (size_t d = 0; d < dim; d++)
        o_row[d] /= sum;
    return row_max + log(sum);
}

typedef struct ref_scratch {
    double *q, *k, *v, *scores, *o_row;
} ref_scratch;

static void free_scratch(ref_scratch *s)
{
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->scores);
    free(s->o_row);
}

static int alloc_scratch(const ref_problem *p, ref_scratch *s)
{
    size_t dim = p->head_dim ? p->head_dim : 1;
    s->q = malloc((p->seqlen_q + 1) * dim * sizeof(double));
    s->k = malloc((p->seqlen_k + 1) * dim * sizeof(double));
    s->v = malloc((p->seqlen_k + 1) * dim * sizeof(double));
    s->scores = malloc((p->seqlen_k + 1) * sizeof(double));
    s->o_row = malloc(dim * sizeof(double));
    if (s->q && s->k && s->v && s->scores && s->o_row)
        return 0;
    free_scratch(s);
    return -1;
}

static void attend_head(const ref_problem *p, ref_scratch *s, size_t b,
                        size_t h, double *o, double *lse)
{
    size_t group = p->heads_q / p->heads_kv;
    size_t dim = p->head_dim;
    decode_head(&p->q, p->dtype, b, h, p->seqlen_q, dim, s->q);
    decode_head(&p->k, p->dtype, b, h / group, p->seqlen_k, dim, s->k);
    decode_head(&p->v, p->dtype, b, h / group, p->seqlen_k, dim, s->v);

    size_t row0 = (b * p->heads_q + h) * p->seqlen_q;
    for (size_t i = 0; i < p->seqlen_q; i++) {
        double row_lse = attend_row(p, s->q + i * dim, s->k, s->v,
                                    visible_keys(p, i), s->scores, s->o_row);
        if (o)
            memcpy(o + (row0 + i) * dim, s->o_row, dim * sizeof(double));
        if (lse)
            lse[row0 + i] = row_lse;
    }
}

int ref_attention(const ref_problem *p, double *o, double *lse)
{
    ref_scratch scratch;
    if (alloc_scratch(p, &scratch) != 0)
        return -1;
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->heads_q; h++)
            attend_head(p, &scratch, b, h, o, lse);
    free_scratch(&scratch);
    return 0;
}
