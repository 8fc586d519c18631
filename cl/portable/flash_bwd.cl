/* Portable attention backward (OpenCL C 1.2, any vendor): dQ, dK, dV and
 * d_sinks of the forward in flash_fwd.cl, for every variant.
 *
 * Four kernels, enqueued in this order by src/api/backward.c:
 *   flashcl_bwd_delta   Delta_i = rowsum(dO * O), one work-item per row;
 *   flashcl_bwd_dkdv    one work-item per key j of a KV head: loops over
 *                       the query heads of its group, then over the rows
 *                       that see j, recomputing P_ij = exp(s_ij - LSE_i);
 *                       dV_j = sum P dO, dK_j = scale * sum dS q;
 *   flashcl_bwd_dq      one work-item per query row: loops over the keys
 *                       it sees; dQ_i = scale * sum dS k;
 *   flashcl_bwd_dsinks  one work-item per head: -sum_{b,i} P_sink Delta.
 * with dS = P (dP - Delta) times softcap's 1 - tanh^2. Each output element
 * is written by exactly one work-item, which sums in a fixed order: no
 * atomics, no reductions across work-items, so the bits do not depend on
 * timing or on how the runtime schedules work-groups (deterministic).
 *
 * Accumulation in real_t (fp32; fp64 for fp64 storage). FLASHCL_BWD_DMAX
 * bounds head_dim and head_dim_v (the private rows' length); the actual
 * dims are arguments, so one program serves a bucket of head dims.
 * Score modifiers: cl/common/variants.clh, with unit 1 (natural log). */
#include "flashcl_common.clh"
#include "kernel_args.clh"
#include "flash_bwd_args.clh"

#ifndef FLASHCL_BWD_DMAX
#define FLASHCL_BWD_DMAX 64
#endif
#if FLASHCL_BWD_DMAX < 1 || FLASHCL_BWD_DMAX > 256
#error "FLASHCL_BWD_DMAX must be in 1..256"
#endif
#define DMAX FLASHCL_BWD_DMAX

inline ulong at4(ulong base, ulong4 stride, long b, long h, long s, long d)
{
    return base + (ulong)b * stride.s0 + (ulong)h * stride.s1 +
           (ulong)s * stride.s2 + (ulong)d * stride.s3;
}

inline ulong lse_at(ulong base, ulong4 stride, long b, long h, long i)
{
    return base + (ulong)b * stride.s0 + (ulong)h * stride.s1 +
           (ulong)i * stride.s2;
}

/* P_ij and dS_ij / (dP_ij - Delta_i) (softcap's derivative, 1 without)
 * from the scaled product s = scale * q.k. */
inline real_t probability(const score_row *r, long key, real_t s, real_t lse,
                          real_t *d_cap FLASHCL_VARIANT_ARGS(FLASHCL_KPARAM))
{
#if FLASHCL_SOFTCAP
    const real_t t = FLASHCL_TANH(s * r->softcap_inv);
    *d_cap = 1 - t * t;
#else
    *d_cap = 1;
#endif
    const real_t score = score_apply(r, key, s FLASHCL_VARIANT_NAMES);
    return score == -INFINITY ? 0 : exp(score - lse);
}

__kernel void flashcl_bwd_delta(FLASHCL_BWD_PARAMS)
{
    const int i = get_global_id(0), h = get_global_id(1),
              b = get_global_id(2);
    if (i >= seqlen_q)
        return;
    real_t sum = 0;
    for (int d = 0; d < head_dim_v; ++d)
        sum += load_elem(d_o, at4(out_base.s0, d_o_stride, b, h, i, d)) *
               load_elem(o, at4(in_base.s3, o_stride, b, h, i, d));
    delta[((ulong)b * heads_q + h) * seqlen_q + i] = sum;
}

__kernel void flashcl_bwd_dkdv(FLASHCL_BWD_PARAMS)
{
    const int j = get_global_id(0), hk = get_global_id(1),
              b = get_global_id(2);
    if (j >= seqlen_k)
        return;
    real_t key[DMAX], value[DMAX], acc_k[DMAX], acc_v[DMAX];
    for (int d = 0; d < head_dim; ++d) {
        key[d] = load_elem(k, at4(in_base.s1, k_stride, b, hk, j, d));
        acc_k[d] = 0;
    }
    for (int d = 0; d < head_dim_v; ++d) {
        value[d] = load_elem(v, at4(in_base.s2, v_stride, b, hk, j, d));
        acc_v[d] = 0;
    }
    /* Rows that see key j (the band read from the key's side). */
    const long row_lo = window_right < 0 ? 0 : max(0L, j - diag - window_right);
    const long row_hi = window_left < 0
                            ? seqlen_q - 1
                            : min((long)seqlen_q - 1, j - diag + window_left);
    for (int g = 0; g < group_size; ++g) {
        const int h = hk * group_size + g;
        for (long i = row_lo; i <= row_hi; ++i) {
            const real_t row_lse = lse[lse_at(lse_base, lse_stride, b, h, i)];
            if (row_lse == -INFINITY)
                continue; /* the row sees nothing: no gradient */
            const score_row r = score_row_init(b, h, i, diag,
                                               1 FLASHCL_VARIANT_NAMES);
            real_t s = 0, d_p = 0, d_cap;
            for (int d = 0; d < head_dim; ++d)
                s += load_elem(q, at4(in_base.s0, q_stride, b, h, i, d)) *
                     key[d];
            const real_t p = probability(&r, j, s * scale, row_lse,
                                         &d_cap FLASHCL_VARIANT_NAMES);
            if (p == 0)
                continue;
            for (int d = 0; d < head_dim_v; ++d) {
                const real_t g_o =
                    load_elem(d_o, at4(out_base.s0, d_o_stride, b, h, i, d));
                d_p += g_o * value[d];
                acc_v[d] += p * g_o;
            }
            const real_t d_s =
                p * (d_p - delta[((ulong)b * heads_q + h) * seqlen_q + i]) *
                d_cap;
            for (int d = 0; d < head_dim; ++d)
                acc_k[d] += d_s *
                            load_elem(q, at4(in_base.s0, q_stride, b, h, i, d));
        }
    }
    for (int d = 0; d < head_dim; ++d)
        store_elem(d_k, at4(out_base.s2, d_k_stride, b, hk, j, d),
                   acc_k[d] * scale);
    for (int d = 0; d < head_dim_v; ++d)
        store_elem(d_v, at4(out_base.s3, d_v_stride, b, hk, j, d), acc_v[d]);
}

__kernel void flashcl_bwd_dq(FLASHCL_BWD_PARAMS)
{
    const int i = get_global_id(0), h = get_global_id(1),
              b = get_global_id(2);
    if (i >= seqlen_q)
        return;
    const int hk = h / group_size;
    real_t query[DMAX], grad_o[DMAX], acc[DMAX];
    for (int d = 0; d < head_dim; ++d) {
        query[d] = load_elem(q, at4(in_base.s0, q_stride, b, h, i, d));
        acc[d] = 0;
    }
    for (int d = 0; d < head_dim_v; ++d)
        grad_o[d] = load_elem(d_o, at4(out_base.s0, d_o_stride, b, h, i, d));
    const real_t row_lse = lse[lse_at(lse_base, lse_stride, b, h, i)];
    const real_t row_delta = delta[((ulong)b * heads_q + h) * seqlen_q + i];
    const long key_lo = window_left < 0 ? 0 : max(0L, i + diag - window_left);
    const long key_hi = window_right < 0
                            ? seqlen_k - 1
                            : min((long)seqlen_k - 1, i + diag + window_right);
    const score_row r =
        score_row_init(b, h, i, diag, 1 FLASHCL_VARIANT_NAMES);
    for (long j = key_lo; row_lse != -INFINITY && j <= key_hi; ++j) {
        real_t s = 0, d_p = 0, d_cap;
        for (int d = 0; d < head_dim; ++d)
            s += query[d] *
                 load_elem(k, at4(in_base.s1, k_stride, b, hk, j, d));
        const real_t p = probability(&r, j, s * scale, row_lse,
                                     &d_cap FLASHCL_VARIANT_NAMES);
        if (p == 0)
            continue;
        for (int d = 0; d < head_dim_v; ++d)
            d_p += grad_o[d] *
                   load_elem(v, at4(in_base.s2, v_stride, b, hk, j, d));
        const real_t d_s = p * (d_p - row_delta) * d_cap;
        for (int d = 0; d < head_dim; ++d)
            acc[d] += d_s *
                      load_elem(k, at4(in_base.s1, k_stride, b, hk, j, d));
    }
    for (int d = 0; d < head_dim; ++d)
        store_elem(d_q, at4(out_base.s1, d_q_stride, b, h, i, d),
                   acc[d] * scale);
}

__kernel void flashcl_bwd_dsinks(FLASHCL_BWD_PARAMS)
{
    const int h = get_global_id(0);
    if (h >= heads_q)
        return;
    const real_t sink = sink_logit(h, 1 FLASHCL_VARIANT_NAMES);
    real_t sum = 0;
    for (int b = 0; b < batch; ++b)
        for (int i = 0; i < seqlen_q; ++i) {
            const real_t row_lse = lse[lse_at(lse_base, lse_stride, b, h, i)];
            if (row_lse != -INFINITY && sink != -INFINITY)
                sum += exp(sink - row_lse) *
                       delta[((ulong)b * heads_q + h) * seqlen_q + i];
        }
    d_sinks[d_sinks_base + (ulong)h * d_sinks_stride] = (float)-sum;
}
