/* Kernels of the reference (unfused) backend. CLBlast does the two GEMMs
 * (S = scale * Q K^T and O' = P V); these kernels do everything around them:
 *
 *   ref_pack     strided Q/K/V of the caller's dtype -> packed REAL scratch
 *   ref_softmax  softcap, ALiBi, bias, masks, softmax of each row of S in
 *                place (unnormalised P), row factor 1/sum and LSE
 *   ref_store    O = factor * O' in the caller's dtype and strides
 *
 * A chunk covers `count` consecutive (batch, head) pairs bh0 .. bh0+count-1
 * (bh = b * heads_q + h) and `rows` query rows starting at row0. Scratch
 * matrices are packed [chunk head][row][column]. */
#include "reference_common.clh"

#ifndef REF_WG
#define REF_WG 64
#endif

/* Bits of ref_softmax's `flags`. */
#define REF_WRITE_LSE 1
#define REF_ALIBI 2
#define REF_BIAS 4
#define REF_MASK 8
#define REF_SINKS 16
#define REF_SOFTCAP 32

/* global = (dim, rows, count). `group` is heads_q / heads_kv for K and V
 * (the chunk's query head h reads kv head h / group) and 1 for Q. */
__kernel void ref_pack(__global const STORAGE_T *src, const ulong base,
                       const ulong4 stride, __global REAL *dst,
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
        ref_load_elem(src, index);
}

/* Everything the row's scores need besides S itself. */
typedef struct ref_row {
    long i;  /* query row in the whole problem */
    long b, h;
    long diag, left, right;
    float softcap;
    int flags;
    REAL slope;
} ref_row;

/* The visible band: i + diag - left <= j <= i + diag + right, -1 meaning
 * unbounded (causal is already folded into right by the host). */
inline bool ref_visible(const ref_row *row, long j)
{
    const long centre = row->i + row->diag;
    return (row->left < 0 || j >= centre - row->left) &&
           (row->right < 0 || j <= centre + row->right);
}

/* Score of key j from the scaled product x: softcap, then ALiBi and bias,
 * then the masks (-inf). */
inline REAL ref_score(const ref_row *row, long j, REAL x,
                      __global const uchar *bias, const ulong bias_base,
                      const ulong4 bias_stride, const int bias_dtype,
                      __global const uchar *mask, const ulong mask_base,
                      const ulong4 mask_stride)
{
    if (!ref_visible(row, j))
        return -INFINITY;
    if (row->flags & REF_SOFTCAP)
        x = (REAL)row->softcap * tanh(x / (REAL)row->softcap);
    if (row->flags & REF_ALIBI)
        x -= row->slope * fabs((REAL)(row->i + row->diag - j));
    if (row->flags & REF_BIAS)
        x += ref_load_bias(bias,
                           bias_base + (ulong)row->b * bias_stride.s0 +
                               (ulong)row->h * bias_stride.s1 +
                               (ulong)row->i * bias_stride.s2 +
                               (ulong)j * bias_stride.s3,
                           bias_dtype);
    if ((row->flags & REF_MASK) &&
        !mask[mask_base + (ulong)row->b * mask_stride.s0 +
              (ulong)row->h * mask_stride.s1 + (ulong)row->i * mask_stride.s2 +
              (ulong)j * mask_stride.s3])
        return -INFINITY;
    return x;
}

inline REAL ref_reduce_max(__local REAL *scratch, REAL value)
{
    const int lid = (int)get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_width = REF_WG / 2; half_width > 0; half_width /= 2) {
        if (lid < half_width)
            scratch[lid] = fmax(scratch[lid], scratch[lid + half_width]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const REAL result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

inline REAL ref_reduce_sum(__local REAL *scratch, REAL value)
{
    const int lid = (int)get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_width = REF_WG / 2; half_width > 0; half_width /= 2) {
        if (lid < half_width)
            scratch[lid] += scratch[lid + half_width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const REAL result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

/* One work-group per row: global = (REF_WG, rows, count). S holds the
 * scaled products on entry and exp(score - max) on exit; factor gets
 * 1 / sum (0 for a row that sees nothing, so O becomes 0, never NaN). */
__kernel __attribute__((reqd_work_group_size(REF_WG, 1, 1))) void
ref_softmax(__global REAL *s, __global REAL *factor, __global float *lse,
            const ulong lse_base, const ulong4 lse_stride, const int rows,
            const int nk, const int row0, const long bh0, const int heads_q,
            const long diag, const long left, const long right,
            const float softcap, __global const float *alibi,
            const ulong alibi_base, const ulong2 alibi_stride,
            __global const uchar *bias, const ulong bias_base,
            const ulong4 bias_stride, const int bias_dtype,
            __global const uchar *mask, const ulong mask_base,
            const ulong4 mask_stride, __global const float *sinks,
            const ulong sinks_base, const ulong sinks_stride, const int flags)
{
    __local REAL reduce[REF_WG];
    const int lid = (int)get_local_id(0);
    const int r = (int)get_global_id(1);
    const int c = (int)get_global_id(2);
    const long bh = bh0 + c;
    ref_row row;
    row.i = row0 + r;
    row.b = bh / heads_q;
    row.h = bh % heads_q;
    row.diag = diag;
    row.left = left;
    row.right = right;
    row.softcap = softcap;
    row.flags = flags;
    row.slope = (flags & REF_ALIBI)
                    ? (REAL)alibi[alibi_base + (ulong)row.b * alibi_stride.s0 +
                                  (ulong)row.h * alibi_stride.s1]
                    : (REAL)0;
    __global REAL *srow = s + ((ulong)c * (ulong)rows + (ulong)r) * (ulong)nk;

    REAL row_max = -INFINITY;
    for (int j = lid; j < nk; j += REF_WG) {
        const REAL x = ref_score(&row, j, srow[j], bias, bias_base,
                                 bias_stride, bias_dtype, mask, mask_base,
                                 mask_stride);
        srow[j] = x;
        row_max = fmax(row_max, x);
    }
    row_max = ref_reduce_max(reduce, row_max);
    const REAL sink = (flags & REF_SINKS)
                          ? (REAL)sinks[sinks_base + (ulong)row.h * sinks_stride]
                          : -INFINITY;
    row_max = fmax(row_max, sink);
    /* Nothing visible (and no finite sink): P = 0 everywhere, no NaN. */
    const bool empty = isinf(row_max) && row_max < 0;
    REAL sum = 0;
    for (int j = lid; j < nk; j += REF_WG) {
        const REAL p = empty ? (REAL)0 : exp(srow[j] - row_max);
        srow[j] = p;
        sum += p;
    }
    sum = ref_reduce_sum(reduce, sum);
    if (lid != 0)
        return;
    if (!empty && (flags & REF_SINKS))
        sum += exp(sink - row_max);
    factor[(ulong)c * (ulong)rows + (ulong)r] = sum > 0 ? (REAL)1 / sum : 0;
    if (flags & REF_WRITE_LSE)
        lse[lse_base + (ulong)row.b * lse_stride.s0 +
            (ulong)row.h * lse_stride.s1 + (ulong)row.i * lse_stride.s2] =
            sum > 0 ? (float)(row_max + log(sum)) : -INFINITY;
}

/* global = (dim_v, rows, count). has_keys 0 (seqlen_k == 0): O' was never
 * computed, write zeros. */
__kernel void ref_store(__global const REAL *o_scratch,
                        __global const REAL *factor, __global STORAGE_T *o,
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
    const REAL f = has_keys ? factor[row_index] : (REAL)0;
    const REAL value =
        f != 0 ? o_scratch[row_index * (ulong)dim + (ulong)d] * f : (REAL)0;
    const long bh = bh0 + c;
    const ulong index = base + (ulong)(bh / heads_q) * stride.s0 +
                        (ulong)(bh % heads_q) * stride.s1 +
                        (ulong)(row0 + r) * stride.s2 + (ulong)d * stride.s3;
    ref_store_elem(o, index, value);
}
