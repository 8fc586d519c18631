/* Portable attention backward (OpenCL C 1.2, any vendor): dQ, dK, dV and
 * d_sinks of the forward in flash_fwd.cl, for every variant.
 *
 * Four kernels, enqueued in this order by src/api/backward.c:
 *   flashcl_bwd_delta   Delta_i = rowsum(dO * O), one work-item per row;
 *   flashcl_bwd_dkdv    one work-item per key j of a KV head: loops over
 *                       the query heads of its group, then over the rows
 *                       that see j (in local-memory tiles), recomputing
 *                       P_ij = exp(s_ij - LSE_i);
 *                       dV_j = sum P dO, dK_j = scale * sum dS q;
 *   flashcl_bwd_dq      one work-item per query row: loops over the keys
 *                       it sees; dQ_i = scale * sum dS k;
 *   flashcl_bwd_dsinks  one work-item per head: -sum_{b,i} P_sink Delta.
 * with dS = P (dP - Delta) times softcap's 1 - tanh^2. Each output element
 * is written by exactly one work-item, which sums in a fixed order: no
 * atomics, no reductions across work-items, so the bits do not depend on
 * timing or on how the runtime schedules work-groups (deterministic).
 *
 * Accumulation in real_t (fp32; fp64 for fp64 storage). FLASHCL_HEAD_DIM
 * and FLASHCL_HEAD_DIM_V are the head dims padded (to 8 by the host); the
 * actual dims are arguments.
 * Score modifiers: cl/common/variants.clh, with unit 1 (natural log). */
/* The switches' defaults and ranges: flash_bwd_switches.clh. */
#include "flash_bwd_defaults.clh"
#include "flashcl_common.clh"
#include "kernel_args.clh"
#include "flash_bwd_args.clh"
#include "packed_span.clh"

/* Padded head dims: private rows and tile columns; the actual dims are
 * arguments and the padding holds zeros. */
#define DQK FLASHCL_HEAD_DIM
#define DVP FLASHCL_HEAD_DIM_V

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

/* Sequence b: rows [q0, q0 + nq) of batch entry qb of q, o, dO, dQ and
 * LSE, keys [k0, k0 + nk) of entry kb of k, v, dK and dV, and its own
 * diagonal. A packed (varlen) side reads cu_seqlens as the forward's
 * split-KV kernels do (packed_span.clh clamps it); Delta, bias, mask and
 * ALiBi stay indexed by (b, h, row in the sequence). */
typedef struct bwd_seq {
    long qb, q0, nq, kb, k0, nk, diag;
} bwd_seq;

inline bwd_seq bwd_sequence(int b, int seqlen_q, int seqlen_k, long diag,
                            __global const int *cu_q,
                            __global const int *cu_k, ulong4 len_base,
                            ulong4 len_stride, int total_q, int total_k,
                            int top_left)
{
    bwd_seq s = {b, 0, seqlen_q, b, 0, seqlen_k, diag};
#if FLASHCL_BWD_VARLEN_Q
    const packed_span rows = packed_span_of(cu_q, len_base.s0, len_stride.s0,
                                            b, total_q, seqlen_q);
    s.qb = 0;
    s.q0 = rows.first;
    s.nq = rows.count;
#endif
#if FLASHCL_BWD_VARLEN_K
    const packed_span keys = packed_span_of(cu_k, len_base.s1, len_stride.s1,
                                            b, total_k, seqlen_k);
    s.kb = 0;
    s.k0 = keys.first;
    s.nk = keys.count;
#endif
#if FLASHCL_BWD_VARLEN_Q || FLASHCL_BWD_VARLEN_K
    s.diag = aligned_diag(top_left, s.nq, s.nk);
#endif
    return s;
}
#define BWD_SEQUENCE(b)                                                        \
    bwd_sequence(b, seqlen_q, seqlen_k, diag, cu_q, cu_k, len_base,           \
                 len_stride, total_q, total_k, top_left)

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
    const bwd_seq s = BWD_SEQUENCE(b);
    if (i >= s.nq)
        return;
    real_t sum = 0;
    for (int d = 0; d < head_dim_v; ++d)
        sum += load_elem(d_o, at4(out_base.s0, d_o_stride, s.qb, h, s.q0 + i,
                                  d)) *
               load_elem(o, at4(in_base.s3, o_stride, s.qb, h, s.q0 + i, d));
    delta[((ulong)b * heads_q + h) * seqlen_q + i] = sum;
}

/* Tiles: the other side's rows (query rows for dK/dV, keys for dQ) are
 * staged through local memory FLASHCL_BWD_TILE at a time, zero-padded to
 * DQK / DVP columns, and every work-item of the group reads the same
 * element at the same time (a broadcast; on CPUs the runtime vectorises
 * across work-items). Visibility and padding are applied by selecting
 * P = 0, so control flow stays uniform in the group. */
#define TILE FLASHCL_BWD_TILE
#define WG FLASHCL_BWD_WG

/* Rows [r0, r0 + TILE) of one head of `src` into tile[r * cols + d]; zero
 * past `last` and past `width`. */
inline void load_tile(__local real_t *tile, __global const STORAGE_T *src,
                      ulong base, ulong4 stride, long b, long h, long r0,
                      long last, int width, int cols)
{
    for (int idx = get_local_id(0); idx < TILE * cols; idx += WG) {
        const int r = idx / cols, d = idx % cols;
        tile[idx] = r0 + r <= last && d < width
                        ? load_elem(src, at4(base, stride, b, h, r0 + r, d))
                        : 0;
    }
}

/* A work-item's own rows are vectors of 8 over the head dim (the padded
 * dims are multiples of 8): each dot product and each accumulation is
 * then D / 8 vector FMAs, which PoCL and other CPU runtimes do not get
 * from scalar loops inside a work-item. */
#define vec8_t FLASHCL_CONCAT(FLASHCL_REAL, 8)
#define vec4_t FLASHCL_CONCAT(FLASHCL_REAL, 4)
#define vec2_t FLASHCL_CONCAT(FLASHCL_REAL, 2)

inline real_t sum8(vec8_t v)
{
    const vec4_t x = v.lo + v.hi;
    const vec2_t y = x.lo + x.hi;
    return y.x + y.y;
}

/* Elements [8c, 8c + 8) of row `row` of one head, zero past `width`. */
inline vec8_t load_row8(__global const STORAGE_T *src, ulong base,
                        ulong4 stride, long b, long h, long row, int c,
                        int width)
{
    real_t lanes[8];
    for (int e = 0; e < 8; ++e)
        lanes[e] = c * 8 + e < width
                       ? load_elem(src, at4(base, stride, b, h, row, c * 8 + e))
                       : 0;
    return vload8(0, lanes);
}

/* Stores elements [8c, 8c + 8) of `value` below `width`. */
inline void store_row8(__global STORAGE_T *dst, ulong base, ulong4 stride,
                       long b, long h, long row, int c, int width,
                       vec8_t value)
{
    real_t lanes[8];
    vstore8(value, 0, lanes);
    for (int e = 0; e < 8 && c * 8 + e < width; ++e)
        store_elem(dst, at4(base, stride, b, h, row, c * 8 + e), lanes[e]);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
flashcl_bwd_dkdv(FLASHCL_BWD_PARAMS)
{
    __local real_t q_t[TILE * DQK], d_o_t[TILE * DVP];
    __local real_t lse_t[TILE], delta_t[TILE];
    const int lid = get_local_id(0), hk = get_group_id(1),
              b = get_group_id(2);
    const long j0 = (long)get_group_id(0) * WG, j = j0 + lid;
    const bwd_seq s = BWD_SEQUENCE(b);
    if (j0 >= s.nk) /* the whole group: past its sequence's keys */
        return;
    const bool key_valid = j < s.nk;
    const long key = min(j, s.nk - 1);
    vec8_t k_row[DQK / 8], v_row[DVP / 8], acc_k[DQK / 8], acc_v[DVP / 8];
    for (int c = 0; c < DQK / 8; ++c) {
        k_row[c] = load_row8(k, in_base.s1, k_stride, s.kb, hk, s.k0 + key, c,
                             head_dim);
        acc_k[c] = (vec8_t)(0);
    }
    for (int c = 0; c < DVP / 8; ++c) {
        v_row[c] = load_row8(v, in_base.s2, v_stride, s.kb, hk, s.k0 + key, c,
                             head_dim_v);
        acc_v[c] = (vec8_t)(0);
    }
    /* Rows that see any key of this group, then per key. */
    const long j1 = min(j0 + WG, s.nk) - 1;
    const long row_lo =
        window_right < 0 ? 0 : max(0L, j0 - s.diag - window_right);
    const long row_hi = window_left < 0
                            ? s.nq - 1
                            : min(s.nq - 1, j1 - s.diag + window_left);
    const long mine_lo = window_right < 0 ? 0 : key - s.diag - window_right;
    const long mine_hi = window_left < 0 ? s.nq - 1
                                         : key - s.diag + window_left;
    for (int g = 0; g < group_size; ++g) {
        const int h = hk * group_size + g;
        for (long r0 = row_lo; r0 <= row_hi; r0 += TILE) {
            barrier(CLK_LOCAL_MEM_FENCE);
            load_tile(q_t, q, in_base.s0, q_stride, s.qb, h, s.q0 + r0,
                      s.q0 + row_hi, head_dim, DQK);
            load_tile(d_o_t, d_o, out_base.s0, d_o_stride, s.qb, h,
                      s.q0 + r0, s.q0 + row_hi, head_dim_v, DVP);
            for (int r = lid; r < TILE; r += WG) {
                const long i = min(r0 + r, s.nq - 1);
                lse_t[r] = r0 + r <= row_hi
                               ? lse[lse_at(lse_base, lse_stride, s.qb, h,
                                            s.q0 + i)]
                               : -INFINITY;
                delta_t[r] = delta[((ulong)b * heads_q + h) * seqlen_q + i];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* Copies that do not live across a barrier, so that they can
             * stay in registers (flash_fwd.cl's note on PoCL). */
            vec8_t key_c[DQK / 8], value_c[DVP / 8], sum_k[DQK / 8],
                sum_v[DVP / 8];
#pragma unroll
            for (int c = 0; c < DQK / 8; ++c) {
                key_c[c] = k_row[c];
                sum_k[c] = acc_k[c];
            }
#pragma unroll
            for (int c = 0; c < DVP / 8; ++c) {
                value_c[c] = v_row[c];
                sum_v[c] = acc_v[c];
            }
            for (int r = 0; r < TILE; ++r) {
                const long i = r0 + r;
                const bool visible = key_valid && lse_t[r] != -INFINITY &&
                                     i >= mine_lo && i <= mine_hi;
                const score_row sr =
                    score_row_init(b, h, min(i, s.nq - 1), s.diag,
                                   1 FLASHCL_VARIANT_NAMES);
                vec8_t s8 = (vec8_t)(0), d_p8 = (vec8_t)(0);
                real_t d_cap;
#pragma unroll
                for (int c = 0; c < DQK / 8; ++c)
                    s8 = fma(vload8(c, q_t + r * DQK), key_c[c], s8);
                const real_t p_any =
                    probability(&sr, key, sum8(s8) * scale, lse_t[r],
                                &d_cap FLASHCL_VARIANT_NAMES);
                const real_t p = visible ? p_any : 0;
#pragma unroll
                for (int c = 0; c < DVP / 8; ++c) {
                    const vec8_t g = vload8(c, d_o_t + r * DVP);
                    d_p8 = fma(g, value_c[c], d_p8);
                    sum_v[c] = fma((vec8_t)(p), g, sum_v[c]);
                }
                const real_t d_s =
                    visible ? p * (sum8(d_p8) - delta_t[r]) * d_cap : 0;
#pragma unroll
                for (int c = 0; c < DQK / 8; ++c)
                    sum_k[c] =
                        fma((vec8_t)(d_s), vload8(c, q_t + r * DQK), sum_k[c]);
            }
#pragma unroll
            for (int c = 0; c < DQK / 8; ++c)
                acc_k[c] = sum_k[c];
#pragma unroll
            for (int c = 0; c < DVP / 8; ++c)
                acc_v[c] = sum_v[c];
        }
    }
    if (!key_valid)
        return;
    for (int c = 0; c < DQK / 8; ++c)
        store_row8(d_k, out_base.s2, d_k_stride, s.kb, hk, s.k0 + j, c,
                   head_dim, acc_k[c] * scale);
    for (int c = 0; c < DVP / 8; ++c)
        store_row8(d_v, out_base.s3, d_v_stride, s.kb, hk, s.k0 + j, c,
                   head_dim_v, acc_v[c]);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
flashcl_bwd_dq(FLASHCL_BWD_PARAMS)
{
    __local real_t k_t[TILE * DQK], v_t[TILE * DVP];
    const int lid = get_local_id(0), h = get_group_id(1),
              b = get_group_id(2);
    const int hk = h / group_size;
    const long i0 = (long)get_group_id(0) * WG, i = i0 + lid;
    const bwd_seq s = BWD_SEQUENCE(b);
    if (i0 >= s.nq) /* the whole group: past its sequence's rows */
        return;
    const bool row_valid = i < s.nq;
    const long row = min(i, s.nq - 1);
    vec8_t q_row[DQK / 8], g_row[DVP / 8], acc[DQK / 8];
    for (int c = 0; c < DQK / 8; ++c) {
        q_row[c] = load_row8(q, in_base.s0, q_stride, s.qb, h, s.q0 + row, c,
                             head_dim);
        acc[c] = (vec8_t)(0);
    }
    for (int c = 0; c < DVP / 8; ++c)
        g_row[c] = load_row8(d_o, out_base.s0, d_o_stride, s.qb, h,
                             s.q0 + row, c, head_dim_v);
    const real_t row_lse =
        lse[lse_at(lse_base, lse_stride, s.qb, h, s.q0 + row)];
    const real_t row_delta = delta[((ulong)b * heads_q + h) * seqlen_q + row];
    const bool live = row_valid && row_lse != -INFINITY;
    const score_row sr =
        score_row_init(b, h, row, s.diag, 1 FLASHCL_VARIANT_NAMES);
    const long i1 = min(i0 + WG, s.nq) - 1;
    const long key_lo =
        window_left < 0 ? 0 : max(0L, i0 + s.diag - window_left);
    const long key_hi = window_right < 0
                            ? s.nk - 1
                            : min(s.nk - 1, i1 + s.diag + window_right);
    const long mine_lo = window_left < 0 ? 0 : row + s.diag - window_left;
    const long mine_hi = window_right < 0 ? s.nk - 1
                                          : row + s.diag + window_right;
    for (long n0 = key_lo; n0 <= key_hi; n0 += TILE) {
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(k_t, k, in_base.s1, k_stride, s.kb, hk, s.k0 + n0,
                  s.k0 + key_hi, head_dim, DQK);
        load_tile(v_t, v, in_base.s2, v_stride, s.kb, hk, s.k0 + n0,
                  s.k0 + key_hi, head_dim_v, DVP);
        barrier(CLK_LOCAL_MEM_FENCE);
        vec8_t query_c[DQK / 8], grad_c[DVP / 8], sum[DQK / 8]; /* as above */
#pragma unroll
        for (int e = 0; e < DQK / 8; ++e) {
            query_c[e] = q_row[e];
            sum[e] = acc[e];
        }
#pragma unroll
        for (int e = 0; e < DVP / 8; ++e)
            grad_c[e] = g_row[e];
        for (int c = 0; c < TILE; ++c) {
            const long j = n0 + c;
            const bool visible =
                live && j <= key_hi && j >= mine_lo && j <= mine_hi;
            vec8_t s8 = (vec8_t)(0), d_p8 = (vec8_t)(0);
            real_t d_cap;
#pragma unroll
            for (int e = 0; e < DQK / 8; ++e)
                s8 = fma(query_c[e], vload8(e, k_t + c * DQK), s8);
            const real_t p_any =
                probability(&sr, min(j, s.nk - 1), sum8(s8) * scale,
                            row_lse, &d_cap FLASHCL_VARIANT_NAMES);
#pragma unroll
            for (int e = 0; e < DVP / 8; ++e)
                d_p8 = fma(grad_c[e], vload8(e, v_t + c * DVP), d_p8);
            const real_t d_s =
                visible ? p_any * (sum8(d_p8) - row_delta) * d_cap : 0;
#pragma unroll
            for (int e = 0; e < DQK / 8; ++e)
                sum[e] = fma((vec8_t)(d_s), vload8(e, k_t + c * DQK), sum[e]);
        }
#pragma unroll
        for (int e = 0; e < DQK / 8; ++e)
            acc[e] = sum[e];
    }
    if (!row_valid)
        return;
    for (int c = 0; c < DQK / 8; ++c)
        store_row8(d_q, out_base.s1, d_q_stride, s.qb, h, s.q0 + i, c,
                   head_dim, acc[c] * scale);
}

__kernel void flashcl_bwd_dsinks(FLASHCL_BWD_PARAMS)
{
    const int h = get_global_id(0);
    if (h >= heads_q)
        return;
    const real_t sink = sink_logit(h, 1 FLASHCL_VARIANT_NAMES);
    real_t sum = 0;
    for (int b = 0; b < batch; ++b) {
        const bwd_seq s = BWD_SEQUENCE(b);
        for (int i = 0; i < s.nq; ++i) {
            const real_t row_lse =
                lse[lse_at(lse_base, lse_stride, s.qb, h, s.q0 + i)];
            if (row_lse != -INFINITY && sink != -INFINITY)
                sum += exp(sink - row_lse) *
                       delta[((ulong)b * heads_q + h) * seqlen_q + i];
        }
    }
    d_sinks[d_sinks_base + (ulong)h * d_sinks_stride] = (float)-sum;
}
