/* Kernels of the reference (unfused) backend. CLBlast does the two GEMMs
 * (S = scale * Q K^T and O' = P V); these kernels do everything around them:
 *
 *   ref_pack     strided Q/K/V of the caller's dtype -> packed real_t scratch
 *   ref_softmax  softcap, ALiBi, bias, masks, softmax of each row of S in
 *                place (unnormalised P), row factor 1/sum and LSE
 *   ref_store    O = factor * O' in the caller's dtype and strides, O' the
 *                compensated sum of the partial products P V of the key
 *                chunks when seqlen_k is cut into several
 *
 * A chunk covers `count` consecutive (batch, head) pairs bh0 .. bh0+count-1
 * (bh = b * heads_q + h) and `rows` query rows starting at row0. Scratch
 * matrices are packed [chunk head][row][column]; the partial products are
 * [key chunk][chunk head][row][column].
 *
 * Sums over keys are compensated so that their error does not grow with
 * seqlen_k: each work-item of ref_softmax keeps its share of the row sum as
 * a pair hi + lo (TwoSum per term, errors summed in lo: Ogita, Rump and
 * Oishi's Sum2), and the work-group combines the pairs the same way;
 * ref_store adds the key chunks' partial products likewise. */
/* Storage type (FLASHCL_DTYPE), real_t (fp32, or fp64 for fp64 storage)
 * and the variants' score modifiers (-D FLASHCL_SOFTCAP, ...), shared with
 * the fused kernels. */
#include "flashcl_common.clh"
#include "kernel_args.clh"

#ifndef REF_WG
#define REF_WG 64
#endif
#if REF_WG < 1 || REF_WG > 1024 || (REF_WG & (REF_WG - 1)) != 0
#error "REF_WG must be a power of two in 1..1024"
#endif

/* global = (dim, rows, count). `group` is heads_q / heads_kv for K and V
 * (the chunk's query head h reads kv head h / group) and 1 for Q. */
__kernel void ref_pack(__global const STORAGE_T *src, const ulong base,
                       const ulong4 stride, __global real_t *dst,
                       const int rows, const int dim, const int row0,
                       const long bh0, const int heads_q, const int group)
{
    const int d = (int)get_global_id(0);
    const int r = (int)get_global_id(1);
    const int c = (int)get_global_id(2);
    if (d >= dim || r >= rows)
        return;
    const long bh = bh0 + c;
    const ulong b = (ulong)(bh / heads_q);
    const ulong h = (ulong)((bh % heads_q) / group);
    const ulong index = base + b * stride.s0 + h * stride.s1 +
                        (ulong)(row0 + r) * stride.s2 + (ulong)d * stride.s3;
    dst[((ulong)c * (ulong)rows + (ulong)r) * (ulong)dim + (ulong)d] =
        load_elem(src, index);
}

/* The visible band: i + diag - left <= j <= i + diag + right, -1 meaning
 * unbounded (causal is already folded into right by the host). */
inline bool ref_visible(long centre, long left, long right, long j)
{
    return (left < 0 || j >= centre - left) &&
           (right < 0 || j <= centre + right);
}

inline real_t ref_reduce_max(__local real_t *scratch, real_t value)
{
    const int lid = (int)get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_width = REF_WG / 2; half_width > 0; half_width /= 2) {
        if (lid < half_width)
            scratch[lid] = fmax(scratch[lid], scratch[lid + half_width]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const real_t result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

/* *hi + *lo += x, compensated: *hi <- fl(*hi + x) and its exact rounding
 * error (Knuth's TwoSum, branch-free, no condition on the magnitudes) goes
 * into *lo. Additions only, so -cl-mad-enable has nothing to contract. */
inline void ref_add_compensated(real_t *hi, real_t *lo, real_t x)
{
    const real_t s = *hi + x;
    const real_t b = s - *hi;
    *lo += (*hi - (s - b)) + (x - b);
    *hi = s;
}

/* The sum of every work-item's pair hi + lo, combined pairwise with the
 * same compensation. */
inline real_t ref_reduce_sum(__local real_t *scratch, real_t hi, real_t lo)
{
    const int lid = (int)get_local_id(0);
    __local real_t *scratch_lo = scratch + REF_WG;
    scratch[lid] = hi;
    scratch_lo[lid] = lo;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_width = REF_WG / 2; half_width > 0; half_width /= 2) {
        if (lid < half_width) {
            real_t h = scratch[lid], l = scratch_lo[lid];
            ref_add_compensated(&h, &l, scratch[lid + half_width]);
            scratch[lid] = h;
            scratch_lo[lid] = l + scratch_lo[lid + half_width];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const real_t result = scratch[0] + scratch_lo[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

/* One work-group per row: global = (REF_WG, rows, count). S holds the
 * scaled products on entry and exp(score - max) on exit; factor gets
 * 1 / sum (0 for a row that sees nothing, so O becomes 0, never NaN). */
__kernel __attribute__((reqd_work_group_size(REF_WG, 1, 1))) void
ref_softmax(__global real_t *s, __global real_t *factor, __global float *lse,
            const ulong lse_base, const ulong4 lse_stride, const int rows,
            const int nk, const int row0, const long bh0, const int heads_q,
            const long diag, const long left, const long right,
            const int write_lse FLASHCL_VARIANT_ARGS(FLASHCL_KPARAM))
{
    __local real_t reduce[2 * REF_WG];
    const int lid = (int)get_local_id(0);
    const int r = (int)get_global_id(1);
    const int c = (int)get_global_id(2);
    const long bh = bh0 + c;
    const long i = row0 + r, b = bh / heads_q, h = bh % heads_q;
    const score_row row =
        score_row_init(b, h, i, diag, (real_t)1 FLASHCL_VARIANT_NAMES);
    __global real_t *srow = s + ((ulong)c * (ulong)rows + (ulong)r) * (ulong)nk;

    real_t row_max = -INFINITY;
    for (int j = lid; j < nk; j += REF_WG) {
        const real_t x =
            ref_visible(row.diag_row, left, right, j)
                ? score_apply(&row, j, srow[j] FLASHCL_VARIANT_NAMES)
                : -INFINITY;
        srow[j] = x;
        row_max = fmax(row_max, x);
    }
    row_max = ref_reduce_max(reduce, row_max);
    const real_t sink = sink_logit(h, (real_t)1 FLASHCL_VARIANT_NAMES);
    row_max = fmax(row_max, sink);
    /* Nothing visible (and no finite sink): P = 0 everywhere, no NaN. */
    const bool empty = isinf(row_max) && row_max < 0;
    real_t sum_hi = 0, sum_lo = 0;
    for (int j = lid; j < nk; j += REF_WG) {
        const real_t p = empty ? (real_t)0 : exp(srow[j] - row_max);
        srow[j] = p;
        ref_add_compensated(&sum_hi, &sum_lo, p);
    }
    real_t sum = ref_reduce_sum(reduce, sum_hi, sum_lo);
    if (lid != 0)
        return;
    if (!empty && sink != -INFINITY)
        sum += exp(sink - row_max);
    factor[(ulong)c * (ulong)rows + (ulong)r] = sum > 0 ? (real_t)1 / sum : 0;
    if (write_lse)
        lse[lse_base + (ulong)b * lse_stride.s0 + (ulong)h * lse_stride.s1 +
            (ulong)i * lse_stride.s2] =
            sum > 0 ? (float)(row_max + log(sum)) : -INFINITY;
}

/* global = (dim_v, rows, count). has_keys 0 (seqlen_k == 0): O' was never
 * computed, write zeros. O' is the sum of `parts` partial products (one per
 * key chunk), `part_stride` elements apart; 1 when the keys were not cut. */
__kernel void ref_store(__global const real_t *o_scratch,
                        __global const real_t *factor, __global STORAGE_T *o,
                        const ulong base, const ulong4 stride, const int rows,
                        const int dim, const int row0, const long bh0,
                        const int heads_q, const int has_keys,
                        const int parts, const ulong part_stride)
{
    const int d = (int)get_global_id(0);
    const int r = (int)get_global_id(1);
    const int c = (int)get_global_id(2);
    if (d >= dim || r >= rows)
        return;
    const ulong row_index = (ulong)c * (ulong)rows + (ulong)r;
    const real_t f = has_keys ? factor[row_index] : (real_t)0;
    real_t value = 0;
    if (f != 0) {
        __global const real_t *part =
            o_scratch + row_index * (ulong)dim + (ulong)d;
        real_t hi = part[0], lo = 0;
        for (int i = 1; i < parts; ++i)
            ref_add_compensated(&hi, &lo, part[(ulong)i * part_stride]);
        value = (hi + lo) * f;
    }
    const long bh = bh0 + c;
    const ulong index = base + (ulong)(bh / heads_q) * stride.s0 +
                        (ulong)(bh % heads_q) * stride.s1 +
                        (ulong)(row0 + r) * stride.s2 + (ulong)d * stride.s3;
    store_elem(o, index, value);
}

/* ---- the backward (src/reference/reference_backward.c) -------------- */

/* One work-item per query row: global = (rows). On entry s holds the
 * scaled products scale * q.k and dp holds dO V^T of the chunk's rows; on
 * exit s holds P (recomputed from the forward's LSE) and dp holds dS =
 * P (dP - Delta), times softcap's 1 - tanh^2. Delta = rowsum(dO * O) comes
 * from the packed dO and the caller's O; sink_term gets the row's share of
 * d_sinks, -P_sink Delta. A row that saw no key (LSE -inf) gets P = 0. */
__kernel void ref_bwd_ds(__global real_t *s, __global real_t *dp,
                         __global const real_t *d_o,
                         __global const STORAGE_T *o, const ulong o_base,
                         const ulong4 o_stride, __global const float *lse,
                         const ulong lse_base, const ulong4 lse_stride,
                         __global real_t *sink_term, const int rows,
                         const int nk, const int dim_v, const int row0,
                         const long bh, const int heads_q, const long diag,
                         const long left, const long right
                             FLASHCL_VARIANT_ARGS(FLASHCL_KPARAM))
{
    const int r = (int)get_global_id(0);
    if (r >= rows)
        return;
    const long i = row0 + r, b = bh / heads_q, h = bh % heads_q;
    const score_row row =
        score_row_init(b, h, i, diag, (real_t)1 FLASHCL_VARIANT_NAMES);
    real_t delta = 0;
    for (int d = 0; d < dim_v; ++d)
        delta += d_o[(ulong)r * (ulong)dim_v + (ulong)d] *
                 load_elem(o, o_base + (ulong)b * o_stride.s0 +
                                  (ulong)h * o_stride.s1 +
                                  (ulong)i * o_stride.s2 +
                                  (ulong)d * o_stride.s3);
    const real_t row_lse = lse[lse_base + (ulong)b * lse_stride.s0 +
                               (ulong)h * lse_stride.s1 +
                               (ulong)i * lse_stride.s2];
    const bool empty = isinf(row_lse) && row_lse < 0;
    __global real_t *srow = s + (ulong)r * (ulong)nk;
    __global real_t *dprow = dp + (ulong)r * (ulong)nk;
    for (int j = 0; j < nk; ++j) {
        const real_t raw = srow[j];
        const real_t d_cap = softcap_slope(&row, raw);
        const real_t score =
            ref_visible(row.diag_row, left, right, j)
                ? score_apply(&row, j, raw FLASHCL_VARIANT_NAMES)
                : -INFINITY;
        const real_t p =
            empty || score == -INFINITY ? (real_t)0 : exp(score - row_lse);
        srow[j] = p;
        dprow[j] = p * (dprow[j] - delta) * d_cap;
    }
    const real_t sink = sink_logit(h, (real_t)1 FLASHCL_VARIANT_NAMES);
    sink_term[r] = empty || sink == -INFINITY
                       ? (real_t)0
                       : -exp(sink - row_lse) * delta;
}

/* global = (dim, rows): rows [row0, row0 + rows) of head (b, h) of `dst`
 * from the packed src, times `factor`. */
__kernel void ref_bwd_store(__global const real_t *src,
                            __global STORAGE_T *dst, const ulong base,
                            const ulong4 stride, const int rows,
                            const int dim, const int row0, const long b,
                            const long h, const real_t factor)
{
    const int d = (int)get_global_id(0);
    const int r = (int)get_global_id(1);
    if (d >= dim || r >= rows)
        return;
    store_elem(dst,
               base + (ulong)b * stride.s0 + (ulong)h * stride.s1 +
                   (ulong)(row0 + r) * stride.s2 + (ulong)d * stride.s3,
               src[(ulong)r * (ulong)dim + (ulong)d] * factor);
}

/* global = (1). finish 0: acc[h] += the chunk's sink terms, in row order
 * (one work-item: a fixed order, deterministic); finish 1: global =
 * (heads_q), d_sinks[h] = acc[h]. */
__kernel void ref_bwd_dsinks(__global const real_t *sink_term,
                             __global real_t *acc, __global float *d_sinks,
                             const ulong base, const ulong stride,
                             const int rows, const int h, const int heads_q,
                             const int finish)
{
    const int g = (int)get_global_id(0);
    if (finish) {
        if (g < heads_q)
            d_sinks[base + (ulong)g * stride] = (float)acc[g];
        return;
    }
    if (g != 0)
        return;
    real_t sum = acc[h];
    for (int r = 0; r < rows; ++r)
        sum += sink_term[r];
    acc[h] = sum;
}
