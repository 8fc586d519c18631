/* The float64 oracle (see oracle.h). */
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- storage ------------------------------------------------------- */

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

uint16_t oracle_float_to_half(float value)
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

float oracle_half_to_float(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exponent = (bits >> 10) & 0x1fu;
    uint32_t mantissa = bits & 0x3ffu;

    if (exponent == 0) {
        /* mantissa * 2^-24 is exact in fp32: a multiply, not ldexpf, which
         * used to dominate the tool's host time. */
        float magnitude = (float)mantissa * 5.9604644775390625e-08f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31)
        return bits_float(sign | 0x7f800000u | (mantissa << 13));
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t oracle_float_to_bf16(float value)
{
    uint32_t bits = float_bits(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u);
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

float oracle_bf16_to_float(uint16_t bits)
{
    return bits_float((uint32_t)bits << 16);
}

size_t oracle_dtype_size(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP64: return 8;
    case FLASHCL_DTYPE_FP32: return 4;
    default: return 2;
    }
}

const char *oracle_dtype_name(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP32: return "fp32";
    case FLASHCL_DTYPE_FP16: return "fp16";
    case FLASHCL_DTYPE_BF16: return "bf16";
    case FLASHCL_DTYPE_FP64: return "fp64";
    }
    return "?";
}

double oracle_load(const void *base, size_t index, flashcl_dtype dtype)
{
    const unsigned char *bytes = base;
    switch (dtype) {
    case FLASHCL_DTYPE_FP64: {
        double value;
        memcpy(&value, bytes + 8 * index, 8);
        return value;
    }
    case FLASHCL_DTYPE_FP32: {
        float value;
        memcpy(&value, bytes + 4 * index, 4);
        return value;
    }
    default: {
        uint16_t bits;
        memcpy(&bits, bytes + 2 * index, 2);
        return dtype == FLASHCL_DTYPE_FP16 ? oracle_half_to_float(bits)
                                           : oracle_bf16_to_float(bits);
    }
    }
}

void oracle_store(void *base, size_t index, flashcl_dtype dtype, double value)
{
    unsigned char *bytes = base;
    float single = (float)value;
    switch (dtype) {
    case FLASHCL_DTYPE_FP64:
        memcpy(bytes + 8 * index, &value, 8);
        return;
    case FLASHCL_DTYPE_FP32:
        memcpy(bytes + 4 * index, &single, 4);
        return;
    default: {
        uint16_t bits = dtype == FLASHCL_DTYPE_FP16
                            ? oracle_float_to_half(single)
                            : oracle_float_to_bf16(single);
        memcpy(bytes + 2 * index, &bits, 2);
        return;
    }
    }
}

double oracle_quantize(double value, flashcl_dtype dtype)
{
    unsigned char storage[8];
    oracle_store(storage, 0, dtype, value);
    return oracle_load(storage, 0, dtype);
}

/* ---- reading a descriptor ------------------------------------------ */

void oracle_packed_strides(flashcl_layout layout, size_t heads, size_t seq,
                           size_t dim, size_t stride[4])
{
    stride[3] = 1;
    if (layout == FLASHCL_LAYOUT_BHND) {
        stride[2] = dim;
        stride[1] = seq * dim;
        stride[0] = heads * seq * dim;
    } else {
        stride[1] = dim;
        stride[2] = heads * dim;
        stride[0] = seq * heads * dim;
    }
}

double oracle_desc_scale(const flashcl_attention_desc *desc)
{
    if (desc->explicit_scale || desc->scale != 0.0f)
        return (double)desc->scale;
    return 1.0 / sqrt((double)desc->head_dim);
}

static void literal_strides(const flashcl_tensor *t, size_t stride[4])
{
    stride[0] = t->stride_batch;
    stride[1] = t->stride_head;
    stride[2] = t->stride_seq;
    stride[3] = t->stride_dim;
}

/* Q, K or V: all-zero strides mean packed in the descriptor's layout. */
static oracle_view main_view(const flashcl_attention_desc *desc,
                             const flashcl_tensor *t, const void *host,
                             size_t heads, size_t seq, size_t dim)
{
    oracle_view view = {host, t->offset, {0, 0, 0, 0}, desc->dtype};
    literal_strides(t, view.stride);
    if (!view.stride[0] && !view.stride[1] && !view.stride[2] &&
        !view.stride[3])
        oracle_packed_strides(desc->layout, heads, seq, dim, view.stride);
    return view;
}

/* An optional input is on when its buffer is; a host copy must match. */
static int optional_view(const char *name, const flashcl_tensor *t,
                         const void *host, flashcl_dtype dtype,
                         oracle_view *view, char *why, size_t why_cap)
{
    memset(view, 0, sizeof *view);
    if ((t->buffer != NULL) != (host != NULL)) {
        snprintf(why, why_cap, "%s: the descriptor %s a buffer but the host "
                               "copy is %s",
                 name, t->buffer ? "has" : "has no",
                 host ? "there" : "missing");
        return -1;
    }
    if (!host)
        return 0;
    view->base = host;
    view->offset = t->offset;
    view->dtype = dtype;
    literal_strides(t, view->stride);
    return 0;
}

static int shape_from_desc(const flashcl_attention_desc *d, oracle_problem *p,
                           char *why, size_t why_cap)
{
    const int64_t sizes[7] = {d->batch,    d->heads_q,  d->heads_kv,
                              d->seqlen_q, d->seqlen_k, d->head_dim,
                              d->head_dim_v};
    for (int i = 0; i < 7; ++i)
        if (sizes[i] < 0) {
            snprintf(why, why_cap, "negative size in the descriptor");
            return -1;
        }
    p->batch = (size_t)d->batch;
    p->heads_q = (size_t)d->heads_q;
    p->heads_kv = d->heads_kv ? (size_t)d->heads_kv : p->heads_q;
    p->seqlen_q = (size_t)d->seqlen_q;
    p->seqlen_k = (size_t)d->seqlen_k;
    p->head_dim = (size_t)d->head_dim;
    p->head_dim_v = d->head_dim_v ? (size_t)d->head_dim_v : p->head_dim;
    if (p->heads_kv == 0 || p->heads_q % p->heads_kv != 0) {
        snprintf(why, why_cap, "heads_q is not a multiple of heads_kv");
        return -1;
    }
    return 0;
}

int oracle_problem_from_desc(const flashcl_attention_desc *d,
                             const oracle_inputs *in, oracle_problem *p,
                             char *why, size_t why_cap)
{
    memset(p, 0, sizeof *p);
    if (shape_from_desc(d, p, why, why_cap) != 0)
        return -1;
    p->scale = oracle_desc_scale(d);
    p->causal = d->causal;
    p->causal_align = d->causal_align;
    p->q_position = d->q_position;
    p->k_position = d->k_position;
    p->window = d->window;
    p->window_left = d->window_left;
    p->window_right = d->window_right;
    p->softcap = d->softcap;
    p->q = main_view(d, &d->q, in->q, p->heads_q, p->seqlen_q, p->head_dim);
    p->k = main_view(d, &d->k, in->k, p->heads_kv, p->seqlen_k, p->head_dim);
    p->v = main_view(d, &d->v, in->v, p->heads_kv, p->seqlen_k,
                     p->head_dim_v);
    if (optional_view("alibi_slopes", &d->alibi_slopes, in->alibi_slopes,
                      FLASHCL_DTYPE_FP32, &p->alibi, why, why_cap) ||
        optional_view("bias", &d->bias, in->bias, d->bias_dtype, &p->bias,
                      why, why_cap) ||
        optional_view("mask", &d->mask, in->mask, FLASHCL_DTYPE_FP32,
                      &p->mask, why, why_cap) ||
        optional_view("sinks", &d->sinks, in->sinks, FLASHCL_DTYPE_FP32,
                      &p->sinks, why, why_cap))
        return -1;
    /* Slopes: both strides zero means packed [heads_q] for every batch;
     * sinks: stride_head zero means packed. */
    if (p->alibi.base && !p->alibi.stride[0] && !p->alibi.stride[1])
        p->alibi.stride[1] = 1;
    if (p->sinks.base && !p->sinks.stride[1])
        p->sinks.stride[1] = 1;
    return 0;
}

/* ---- the oracle object --------------------------------------------- */

struct oracle {
    oracle_problem p;
    /* Packed [batch][heads][seq][dim] copies of Q, K and V. */
    double *q, *k, *v;
    /* Slopes [batch][heads_q], sinks [heads_q]. */
    double *slopes, *sinks;
    /* Bias and mask over the span of their views, indexed with the views'
     * own strides (so broadcast axes cost nothing). */
    double *bias;
    unsigned char *mask;
    double *scores; /* one row of scores */
    double *row;    /* one row of O, for oracle_compute */
};

static void *alloc_array(size_t count, size_t size)
{
    return malloc((count ? count : 1) * size);
}

/* One past the farthest element index a view reaches over `extent`. */
static size_t view_span(const oracle_view *view, const size_t extent[4])
{
    size_t last = 0;
    for (int axis = 0; axis < 4; ++axis) {
        if (extent[axis] == 0)
            return 0;
        last += (extent[axis] - 1) * view->stride[axis];
    }
    return last + 1;
}

static const unsigned char *view_start(const oracle_view *view)
{
    return (const unsigned char *)view->base + view->offset;
}

/* Gathers a (batch, heads, seq, dim) view into packed doubles. */
static double *decode_packed(const oracle_view *view, const size_t extent[4])
{
    const size_t count = extent[0] * extent[1] * extent[2] * extent[3];
    double *out = alloc_array(count, sizeof *out);
    if (!out)
        return NULL;
    const unsigned char *start = view_start(view);
    double *next = out;
    for (size_t b = 0; b < extent[0]; ++b)
        for (size_t h = 0; h < extent[1]; ++h)
            for (size_t s = 0; s < extent[2]; ++s) {
                size_t row = b * view->stride[0] + h * view->stride[1] +
                             s * view->stride[2];
                for (size_t d = 0; d < extent[3]; ++d)
                    *next++ = oracle_load(start, row + d * view->stride[3],
                                          view->dtype);
            }
    return out;
}

/* Every element the view can reach, decoded in place of its storage. */
static double *decode_span(const oracle_view *view, const size_t extent[4])
{
    const size_t span = view_span(view, extent);
    double *out = alloc_array(span, sizeof *out);
    for (size_t e = 0; out && e < span; ++e)
        out[e] = oracle_load(view_start(view), e, view->dtype);
    return out;
}

static unsigned char *copy_mask(const oracle_view *view,
                                const size_t extent[4])
{
    const size_t span = view_span(view, extent);
    unsigned char *out = alloc_array(span, 1);
    if (out && span)
        memcpy(out, view_start(view), span);
    return out;
}

/* Slopes per (b, h) and sinks per h, through their strides. */
static int decode_head_scalars(oracle *o)
{
    const oracle_problem *p = &o->p;
    if (p->alibi.base) {
        o->slopes = alloc_array(p->batch * p->heads_q, sizeof *o->slopes);
        if (!o->slopes)
            return -1;
        for (size_t b = 0; b < p->batch; ++b)
            for (size_t h = 0; h < p->heads_q; ++h)
                o->slopes[b * p->heads_q + h] = oracle_load(
                    view_start(&p->alibi),
                    b * p->alibi.stride[0] + h * p->alibi.stride[1],
                    FLASHCL_DTYPE_FP32);
    }
    if (p->sinks.base) {
        o->sinks = alloc_array(p->heads_q, sizeof *o->sinks);
        if (!o->sinks)
            return -1;
        for (size_t h = 0; h < p->heads_q; ++h)
            o->sinks[h] = oracle_load(view_start(&p->sinks),
                                      h * p->sinks.stride[1],
                                      FLASHCL_DTYPE_FP32);
    }
    return 0;
}

static int decode_inputs(oracle *o)
{
    const oracle_problem *p = &o->p;
    const size_t q_ext[4] = {p->batch, p->heads_q, p->seqlen_q, p->head_dim};
    const size_t k_ext[4] = {p->batch, p->heads_kv, p->seqlen_k, p->head_dim};
    const size_t v_ext[4] = {p->batch, p->heads_kv, p->seqlen_k,
                             p->head_dim_v};
    const size_t s_ext[4] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k};
    o->q = decode_packed(&p->q, q_ext);
    o->k = decode_packed(&p->k, k_ext);
    o->v = decode_packed(&p->v, v_ext);
    o->scores = alloc_array(p->seqlen_k, sizeof *o->scores);
    o->row = alloc_array(p->head_dim_v, sizeof *o->row);
    if (!o->q || !o->k || !o->v || !o->scores || !o->row)
        return -1;
    if (p->bias.base && !(o->bias = decode_span(&p->bias, s_ext)))
        return -1;
    if (p->mask.base && !(o->mask = copy_mask(&p->mask, s_ext)))
        return -1;
    return decode_head_scalars(o);
}

oracle *oracle_create(const oracle_problem *p)
{
    oracle *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->p = *p;
    if (p->heads_kv == 0 || p->heads_q % p->heads_kv != 0 ||
        decode_inputs(o) != 0) {
        oracle_release(o);
        return NULL;
    }
    return o;
}

void oracle_release(oracle *o)
{
    if (!o)
        return;
    free(o->q);
    free(o->k);
    free(o->v);
    free(o->slopes);
    free(o->sinks);
    free(o->bias);
    free(o->mask);
    free(o->scores);
    free(o->row);
    free(o);
}

/* ---- one row ------------------------------------------------------- */

/* Keys [*lo, *hi] of row i inside the causal/window band; *lo > *hi when
 * none. diag = seqlen_k - seqlen_q (bottom-right), 0 (top-left) or
 * q_position - k_position (absolute); causal
 * caps the right side at the diagonal. Written to avoid overflow for any
 * window bound the API accepts. */
static void band(const oracle_problem *p, int64_t i, int64_t diag,
                 int64_t *lo, int64_t *hi)
{
    const int64_t centre = i + diag;
    *lo = 0;
    *hi = (int64_t)p->seqlen_k - 1;
    if (p->causal && centre < *hi)
        *hi = centre;
    if (!p->window)
        return;
    if (p->window_left >= 0 && p->window_left < centre)
        *lo = centre - p->window_left;
    if (p->window_right >= 0 && p->window_right < *hi - centre)
        *hi = centre + p->window_right;
}

static int64_t diagonal(const oracle_problem *p)
{
    if (p->causal_align == FLASHCL_CAUSAL_ABSOLUTE)
        return p->q_position - p->k_position;
    return p->causal_align == FLASHCL_CAUSAL_TOP_LEFT
               ? 0
               : (int64_t)p->seqlen_k - (int64_t)p->seqlen_q;
}

size_t oracle_band(const oracle_problem *p, size_t i, size_t *first)
{
    int64_t lo, hi;
    band(p, (int64_t)i, diagonal(p), &lo, &hi);
    *first = (size_t)lo;
    return hi >= lo ? (size_t)(hi - lo + 1) : 0;
}

static double dot(const double *a, const double *b, size_t n)
{
    double sum = 0.0;
    for (size_t d = 0; d < n; ++d)
        sum += a[d] * b[d];
    return sum;
}

static size_t score_index(const oracle_view *view, size_t b, size_t h,
                          size_t i, size_t j)
{
    return b * view->stride[0] + h * view->stride[1] + i * view->stride[2] +
           j * view->stride[3];
}

/* Score of (i, j) in the order the header gives: scale, softcap, ALiBi,
 * bias, then the boolean mask (the band is applied by the caller). */
static double score(const oracle *o, size_t b, size_t h, size_t i, size_t j,
                    const double *q_row, const double *k_head, int64_t diag)
{
    const oracle_problem *p = &o->p;
    double s = p->scale * dot(q_row, k_head + j * p->head_dim, p->head_dim);
    if (p->softcap > 0)
        s = p->softcap * tanh(s / p->softcap);
    if (o->slopes)
        s -= o->slopes[b * p->heads_q + h] *
             fabs((double)((int64_t)i + diag - (int64_t)j));
    if (o->bias)
        s += o->bias[score_index(&p->bias, b, h, i, j)];
    if (o->mask && !o->mask[score_index(&p->mask, b, h, i, j)])
        s = -INFINITY;
    return s;
}

/* Fills o->scores[lo..hi] and returns the row maximum (sink included). */
static double row_scores(oracle *o, size_t b, size_t h, size_t i, int64_t lo,
                         int64_t hi, int64_t diag)
{
    const oracle_problem *p = &o->p;
    const size_t hk = h / (p->heads_q / p->heads_kv);
    const double *q_row =
        o->q + ((b * p->heads_q + h) * p->seqlen_q + i) * p->head_dim;
    const double *k_head =
        o->k + (b * p->heads_kv + hk) * p->seqlen_k * p->head_dim;
    double row_max = o->sinks ? o->sinks[h] : -INFINITY;
    for (int64_t j = lo; j <= hi; ++j) {
        o->scores[j] = score(o, b, h, i, (size_t)j, q_row, k_head, diag);
        row_max = fmax(row_max, o->scores[j]);
    }
    return row_max;
}

void oracle_row(oracle *o, size_t b, size_t h, size_t i, double *o_row,
                double *lse)
{
    const oracle_problem *p = &o->p;
    const int64_t diag = diagonal(p);
    int64_t lo, hi;
    band(p, (int64_t)i, diag, &lo, &hi);
    const double row_max = row_scores(o, b, h, i, lo, hi, diag);
    memset(o_row, 0, p->head_dim_v * sizeof *o_row);
    if (row_max == -INFINITY) { /* no key, and no sink above -inf */
        *lse = -INFINITY;
        return;
    }
    const size_t hk = h / (p->heads_q / p->heads_kv);
    const double *v_head =
        o->v + (b * p->heads_kv + hk) * p->seqlen_k * p->head_dim_v;
    double sum = o->sinks ? exp(o->sinks[h] - row_max) : 0.0;
    for (int64_t j = lo; j <= hi; ++j) {
        const double w = exp(o->scores[j] - row_max);
        const double *v_row = v_head + (size_t)j * p->head_dim_v;
        sum += w;
        for (size_t d = 0; d < p->head_dim_v; ++d)
            o_row[d] += w * v_row[d];
    }
    for (size_t d = 0; d < p->head_dim_v; ++d)
        o_row[d] /= sum;
    *lse = row_max + log(sum);
}

void oracle_compute(oracle *o, double *out_o, const size_t o_stride[4],
                    double *out_lse)
{
    const oracle_problem *p = &o->p;
    size_t packed[4] = {p->heads_q * p->seqlen_q * p->head_dim_v,
                        p->seqlen_q * p->head_dim_v, p->head_dim_v, 1};
    const size_t *stride = o_stride ? o_stride : packed;
    double *row = o->row;
    for (size_t b = 0; b < p->batch; ++b)
        for (size_t h = 0; h < p->heads_q; ++h)
            for (size_t i = 0; i < p->seqlen_q; ++i) {
                double lse;
                oracle_row(o, b, h, i, row, &lse);
                if (out_lse)
                    out_lse[(b * p->heads_q + h) * p->seqlen_q + i] = lse;
                if (!out_o)
                    continue;
                double *dst = out_o + b * stride[0] + h * stride[1] +
                              i * stride[2];
                for (size_t d = 0; d < p->head_dim_v; ++d)
                    dst[d * stride[3]] = row[d];
            }
}

int oracle_attention(const oracle_problem *p, double *out_o,
                     const size_t o_stride[4], double *out_lse)
{
    oracle *o = oracle_create(p);
    if (!o)
        return -1;
    oracle_compute(o, out_o, o_stride, out_lse);
    oracle_release(o);
    return 0;
}

/* ---- what the gradient oracle reads -------------------------------- */

void oracle_decoded(const oracle *o, const double **q, const double **k,
                    const double **v)
{
    *q = o->q;
    *k = o->k;
    *v = o->v;
}

double oracle_score(const oracle *o, size_t b, size_t h, size_t i, size_t j,
                    double *d_product)
{
    const oracle_problem *p = &o->p;
    const size_t hk = h / (p->heads_q / p->heads_kv);
    const double *q_row =
        o->q + ((b * p->heads_q + h) * p->seqlen_q + i) * p->head_dim;
    const double *k_head =
        o->k + (b * p->heads_kv + hk) * p->seqlen_k * p->head_dim;
    if (d_product) {
        double t = 0;
        if (p->softcap > 0)
            t = tanh(p->scale *
                     dot(q_row, k_head + j * p->head_dim, p->head_dim) /
                     p->softcap);
        *d_product = 1 - t * t;
    }
    return score(o, b, h, i, j, q_row, k_head, diagonal(p));
}

double oracle_sink(const oracle *o, size_t h)
{
    return o->sinks ? o->sinks[h] : -INFINITY;
}
