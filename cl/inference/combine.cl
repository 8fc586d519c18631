/* flashcl_combine_partials: P partial outputs (fp32) and LSEs of the same
 * query rows over disjoint key ranges merged into O (storage type) and
 * LSE. One work-item per output element (d, row, batch x head): each
 * recomputes its row's max and weights, which costs P exponentials per
 * element but needs no local memory or second pass; P is small (splits,
 * devices, prefix chunks). */
#include "flashcl_common.clh"
#include "combine.clh"

__kernel void flashcl_combine(
    __global const float *o_part, const ulong4 op_stride, const ulong op_base,
    const ulong op_step, __global const float *lse_part,
    const ulong4 lp_stride, const ulong lp_base, const ulong lp_step,
    __global STORAGE_T *o, const ulong4 o_stride, const ulong o_base,
    __global float *lse, const ulong4 lse_stride, const ulong lse_base,
    const int write_lse, const int parts, const int heads,
    const int seqlen_q, const int head_dim_v)
{
    const int d = get_global_id(0), i = get_global_id(1);
    const int bh = get_global_id(2);
    if (d >= head_dim_v || i >= seqlen_q)
        return;
    const ulong b = (ulong)(bh / heads), h = (ulong)(bh % heads);
    const ulong lrow = lp_base + b * lp_stride.s0 + h * lp_stride.s1 +
                       (ulong)i * lp_stride.s2;
    const ulong orow = op_base + b * op_stride.s0 + h * op_stride.s1 +
                       (ulong)i * op_stride.s2 + (ulong)d * op_stride.s3;
    float m = -INFINITY;
    for (int p = 0; p < parts; ++p)
        m = fmax(m, lse_part[lrow + (ulong)p * lp_step]);
    float sum = 0, acc = 0;
    if (m != -INFINITY)
        for (int p = 0; p < parts; ++p) {
            const float w = combine_weight(lse_part[lrow + (ulong)p * lp_step], m);
            if (w != 0) {
                sum += w;
                acc += w * o_part[orow + (ulong)p * op_step];
            }
        }
    store_elem(o, o_base + b * o_stride.s0 + h * o_stride.s1 +
                      (ulong)i * o_stride.s2 + (ulong)d * o_stride.s3,
               sum > 0 ? acc / sum : 0);
    if (write_lse && d == 0)
        lse[lse_base + b * lse_stride.s0 + h * lse_stride.s1 +
            (ulong)i * lse_stride.s2] = combine_lse(m, sum);
}
