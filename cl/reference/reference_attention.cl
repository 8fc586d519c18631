/* Kernels of the reference (unfused) backend. CLBlast does the two GEMMs
 * (S = scale * Q K^T and O' = P V); these kernels do everything around them:
 *
 *   ref_pack     strided Q/K/V of the caller's dtype -> packed real_t scratch
 *   ref_softmax  softcap, ALiBi, bias, masks, softmax of each row of S in
 *                place (unnormalised P), row factor 1/sum and LSE
 *   ref_store    O = factor * O' in the caller's dtype and strides
 *
 * A chunk covers `count` consecutive (batch, head) pairs bh0 .. bh0+count-1
 * (bh = b * heads_q + h) and `rows` query rows starting at row0. Scratch
 * matrices are packed [chunk head][row][column]. */
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

inline real_t ref_reduce_sum(__local real_t *scratch, real_t value)
{
    const int lid = (int)get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_width = REF_WG / 2; half_width > 0; half_width /= 2) {
        if (lid < half_width)
            scratch[lid] += scratch[lid + half_width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const real_t result = scratch[0];
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
    __local real_t reduce[REF_WG];
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
    real_t sum = 0;
    for (int j = lid; j < nk; j += REF_WG) {
        const real_t p = empty ? (real_t)0 : exp(srow[j] - row_max);
        srow[j] = p;
        sum += p;
    }
    sum = ref_reduce_sum(reduce, sum);
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
 * computed, write zeros. */
__kernel void ref_store(__global const real_t *o_scratch,
                        __global const real_t *factor, __global STORAGE_T *o,
                        const ulong base, const ulong4 stride, const int rows,
                        const int dim, const int row0, const long bh0,
                        const int heads_q, const int has_keys)
{
    const int d = (int)get_global_id(0);
    const int r = (int)get_global_id(1);
    const int c = (int)get_global_id(2);
    if (d >= dim || r >= rows)
        return;
    const ulong row_index = (ulong)c * (ulong)rows + (ulong)r;
    const real_t f = has_keys ? factor[row_index] : (real_t)0;
    const real_t value =
        f != 0 ? o_scratch[row_index * (ulong)dim + (ulong)d] * f : (real_t)0;
    const long bh = bh0 + c;
    const ulong index = base + (ulong)(bh / heads_q) * stride.s0 +
                        (ulong)(bh % heads_q) * stride.s1 +
                        (ulong)(row0 + r) * stride.s2 + (ulong)d * stride.s3;
    store_elem(o, index, value);
}
