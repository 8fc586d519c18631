/* flashcl_combine_partials: P partial outputs (fp32, 16-bit or fp64) and LSEs of the same
 * query rows over disjoint key ranges merged into O (storage type) and
 * LSE. One work-item per COMBINE_DIMS consecutive output elements of a
 * row (d, row, batch x head): each recomputes its row's max and weights,
 * which costs P exponentials per work-item but needs no local memory or
 * second pass; P is small (splits, devices, prefix chunks). */
#include "combine_defaults.clh"
#include "flashcl_common.clh"
#include "combine.clh"

#if (FLASHCL_PARTIAL_DTYPE == 3 || FLASHCL_LSE_FP64) && FLASHCL_DTYPE != 3
#error "fp64 partials and an fp64 LSE need FLASHCL_DTYPE 3 (fp64 o)"
#endif
#if FLASHCL_LSE_FP64 && FLASHCL_PARTIAL_DTYPE != 3
#error "an fp64 merged LSE needs fp64 partials"
#endif

/* The partials' storage: fp32, or the O a 16-bit forward writes (ring
 * attention's steps), widened here so the merge still sums in fp32; or
 * fp64 with fp64 LSEs, merged in fp64 (fp32 weights would cut an fp64
 * merge to fp32 accuracy). */
#if FLASHCL_PARTIAL_DTYPE == 3
#define MERGE_T double
inline double merge_weight(double lse, double m)
{
    return lse == -INFINITY ? 0.0 : exp(lse - m);
}
inline double merge_lse(double m, double weight_sum)
{
    return weight_sum > 0 ? m + log(weight_sum) : -INFINITY;
}
#else
#define MERGE_T float
#define merge_weight combine_weight
#define merge_lse combine_lse
#endif
#if FLASHCL_LSE_FP64
#define MERGED_LSE_T double
#else
#define MERGED_LSE_T float
#endif

#if FLASHCL_PARTIAL_DTYPE == 0
#define PARTIAL_T float
inline float load_partial(__global const float *base, ulong index)
{
    return base[index];
}
#elif FLASHCL_PARTIAL_DTYPE == 3
#define PARTIAL_T double
inline double load_partial(__global const double *base, ulong index)
{
    return base[index];
}
#elif FLASHCL_PARTIAL_DTYPE == 1
#define PARTIAL_T ushort
inline float load_partial(__global const ushort *base, ulong index)
{
    return vload_half(0, (__global const half *)(base + index));
}
#else
#define PARTIAL_T ushort
inline float load_partial(__global const ushort *base, ulong index)
{
    return bf16_bits_to_float(base[index]);
}
#endif

__kernel void flashcl_combine(
    __global const PARTIAL_T *o_part, const ulong4 op_stride, const ulong op_base,
    const ulong op_step, __global const MERGE_T *lse_part,
    const ulong4 lp_stride, const ulong lp_base, const ulong lp_step,
    __global STORAGE_T *o, const ulong4 o_stride, const ulong o_base,
    __global MERGED_LSE_T *lse, const ulong4 lse_stride, const ulong lse_base,
    const int write_lse, const int parts, const int heads,
    const int seqlen_q, const int head_dim_v)
{
    const int d0 = get_global_id(0) * FLASHCL_COMBINE_DIMS;
    const int i = get_global_id(1), bh = get_global_id(2);
    if (d0 >= head_dim_v || i >= seqlen_q)
        return;
    const int dims = min(FLASHCL_COMBINE_DIMS, head_dim_v - d0);
    const ulong b = (ulong)(bh / heads), h = (ulong)(bh % heads);
    const ulong lrow = lp_base + b * lp_stride.s0 + h * lp_stride.s1 +
                       (ulong)i * lp_stride.s2;
    const ulong orow = op_base + b * op_stride.s0 + h * op_stride.s1 +
                       (ulong)i * op_stride.s2 + (ulong)d0 * op_stride.s3;
    MERGE_T m = -INFINITY;
    for (int p = 0; p < parts; ++p)
        m = fmax(m, lse_part[lrow + (ulong)p * lp_step]);
    MERGE_T sum = 0, acc[FLASHCL_COMBINE_DIMS];
    for (int e = 0; e < FLASHCL_COMBINE_DIMS; ++e)
        acc[e] = 0;
    if (m != -INFINITY)
        for (int p = 0; p < parts; ++p) {
            const MERGE_T w =
                merge_weight(lse_part[lrow + (ulong)p * lp_step], m);
            if (w == 0)
                continue;
            sum += w;
            const ulong at = orow + (ulong)p * op_step;
            for (int e = 0; e < dims; ++e)
                acc[e] += w * load_partial(o_part, at + (ulong)e * op_stride.s3);
        }
    const ulong out = o_base + b * o_stride.s0 + h * o_stride.s1 +
                      (ulong)i * o_stride.s2 + (ulong)d0 * o_stride.s3;
    for (int e = 0; e < dims; ++e)
        store_elem(o, out + (ulong)e * o_stride.s3, sum > 0 ? acc[e] / sum : 0);
    if (write_lse && d0 == 0)
        lse[lse_base + b * lse_stride.s0 + h * lse_stride.s1 +
            (ulong)i * lse_stride.s2] = (MERGED_LSE_T)merge_lse(m, sum);
}
