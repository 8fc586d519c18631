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
 *                       (how the two are shaped for speed: "Tiles" below)
 *   flashcl_bwd_dsinks  one work-item per head: -sum_{b,i} P_sink Delta.
 * with dS = P (dP - Delta) times softcap's 1 - tanh^2. Each output element
 * is written by exactly one work-item, which sums in a fixed order: no
 * atomics, no reductions across work-items, so the bits do not depend on
 * timing or on how the runtime schedules work-groups (deterministic).
 *
 * Accumulation in real_t (fp32; fp64 for fp64 storage). FLASHCL_HEAD_DIM
 * and FLASHCL_HEAD_DIM_V are the head dims padded (to a multiple of
 * FLASHCL_BWD_VEC by the host); the actual dims are arguments.
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
 * staged through local memory TILE at a time, zero-padded to DQK / DVP
 * columns, transposed ([d][row]) for the products that make a score and
 * row-major ([row][d]) for the accumulations. A work-item owns one key
 * (dK/dV) or one query row (dQ), whose rows stay private.
 *
 * Shaped like the forward (flash_fwd.cl), which PoCL runs at several
 * times the speed of dot products: a tile's scores are vectors over the
 * tile's rows, each FMA a broadcast element of the work-item's own row
 * times a vector of the transposed tile (no horizontal sums); P and dS are
 * computed VEC at a time (a vector exp); dK, dV and dQ are vectors over D
 * that take a broadcast P or dS times a row of the row-major tile. The
 * previous design (a dot product per pair, vectors of 8 over D, a scalar
 * exp per pair) took 10-26x the forward's time on PoCL, this one about
 * 3x (docs/experiments.md, "Portable backward"). */
#define TILE FLASHCL_BWD_TILE
#define WG FLASHCL_BWD_WG
#define VEC FLASHCL_BWD_VEC
#define TILE_VECS (TILE / VEC)
#if TILE % VEC != 0 || DQK % VEC != 0 || DVP % VEC != 0
#error "FLASHCL_BWD_TILE, FLASHCL_HEAD_DIM and FLASHCL_HEAD_DIM_V must be multiples of FLASHCL_BWD_VEC"
#endif
#define vec_t FLASHCL_CONCAT(FLASHCL_REAL, VEC)
#define vload_vec FLASHCL_CONCAT(vload, VEC)
#define vstore_vec FLASHCL_CONCAT(vstore, VEC)

/* Full tiles of unpadded rows of contiguous fp32 (fp64) words are read a
 * vector at a time: one word a step, the index arithmetic and the loads
 * took about a third of the dK/dV kernel's time under PoCL (perf, fp32 D =
 * 64 N = 1024), as they had in the forward (flash_fwd.cl). */
#define VECTOR_TILE_LOADS                                                      \
    (FLASHCL_DIM_CONTIGUOUS && (FLASHCL_DTYPE == 0 || FLASHCL_DTYPE == 3))

/* Rows [r0, r0 + TILE) of one head of `src`, zero past `last` and past
 * `width`: transposed into by_dim[d * TILE + r] and, when row_major is
 * set, row-major into by_row[r * cols + d]. */
inline void load_tile(__local real_t *by_dim, __local real_t *by_row,
                      bool row_major, __global const STORAGE_T *src,
                      ulong base, ulong4 stride, long b, long h, long r0,
                      long last, int width, int cols)
{
#if VECTOR_TILE_LOADS
    if (width == cols && r0 + TILE - 1 <= last) {
        const int vecs = cols / VEC;
        for (int idx = get_local_id(0); idx < TILE * vecs; idx += WG) {
            const int r = idx / vecs, d0 = idx % vecs * VEC;
            const vec_t value =
                vload_vec(0, src + at4(base, stride, b, h, r0 + r, d0));
            if (row_major)
                vstore_vec(value, 0, by_row + r * cols + d0);
            real_t lanes[VEC];
            vstore_vec(value, 0, lanes);
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                by_dim[(d0 + e) * TILE + r] = lanes[e];
        }
        return;
    }
#endif
    for (int idx = get_local_id(0); idx < TILE * cols; idx += WG) {
        const int r = idx / cols, d = idx % cols;
        const real_t value =
            r0 + r <= last && d < width
                ? load_elem(src, at4(base, stride, b, h, r0 + r, d))
                : 0;
        by_dim[d * TILE + r] = value;
        if (row_major)
            by_row[idx] = value;
    }
}

/* Row `row` of one head into own[0, cols), zero past `width`. */
inline void load_own_row(real_t *own, __global const STORAGE_T *src,
                         ulong base, ulong4 stride, long b, long h, long row,
                         int width, int cols)
{
    for (int d = 0; d < cols; ++d)
        own[d] = d < width ? load_elem(src, at4(base, stride, b, h, row, d))
                           : 0;
}

/* Stores own[0, width) as row `row` of one head of `dst`, times `factor`. */
inline void store_own_row(__global STORAGE_T *dst, ulong base, ulong4 stride,
                          long b, long h, long row, int width,
                          const vec_t *acc, real_t factor)
{
    for (int c = 0; c * VEC < width; ++c) {
        real_t lanes[VEC];
        vstore_vec(acc[c] * factor, 0, lanes);
        for (int e = 0; e < VEC && c * VEC + e < width; ++e)
            store_elem(dst, at4(base, stride, b, h, row, c * VEC + e),
                       lanes[e]);
    }
}

/* An FMA's result is ready 4 cycles later on current x86 cores, which
 * start two a cycle: a chain of dependent FMAs runs at 1/8 of the peak.
 * The loops below so keep at least 8 independent sums (at D = 64 and
 * 16-wide vectors: two vectors of a tile, two products, two halves of
 * the sum, or two weights); each sum still adds in a fixed order. */

/* s[t] = sum_d a_own[d] * a_by_dim[d][t-th vector of the tile] and d_p
 * likewise from b: the two products that make a tile's scores, the sums
 * over even and odd d kept apart until the end. */
inline void tile_scores(vec_t *s, vec_t *d_p, const real_t *a_own,
                        __local const real_t *a_by_dim, const real_t *b_own,
                        __local const real_t *b_by_dim)
{
    vec_t s0[TILE_VECS], s1[TILE_VECS], p0[TILE_VECS], p1[TILE_VECS];
#pragma unroll
    for (int t = 0; t < TILE_VECS; ++t)
        s0[t] = s1[t] = p0[t] = p1[t] = (vec_t)(0);
    /* The padded dims are multiples of the vector width (2 or more). */
    const int both = DQK < DVP ? DQK : DVP;
    for (int d = 0; d < both; d += 2) {
        const vec_t a0 = (vec_t)(a_own[d]), a1 = (vec_t)(a_own[d + 1]);
        const vec_t b0 = (vec_t)(b_own[d]), b1 = (vec_t)(b_own[d + 1]);
#pragma unroll
        for (int t = 0; t < TILE_VECS; ++t) {
            s0[t] = fma(a0, vload_vec(t, a_by_dim + d * TILE), s0[t]);
            s1[t] = fma(a1, vload_vec(t, a_by_dim + (d + 1) * TILE), s1[t]);
            p0[t] = fma(b0, vload_vec(t, b_by_dim + d * TILE), p0[t]);
            p1[t] = fma(b1, vload_vec(t, b_by_dim + (d + 1) * TILE), p1[t]);
        }
    }
    for (int d = both; d < DQK; d += 2) {
        const vec_t a0 = (vec_t)(a_own[d]), a1 = (vec_t)(a_own[d + 1]);
#pragma unroll
        for (int t = 0; t < TILE_VECS; ++t) {
            s0[t] = fma(a0, vload_vec(t, a_by_dim + d * TILE), s0[t]);
            s1[t] = fma(a1, vload_vec(t, a_by_dim + (d + 1) * TILE), s1[t]);
        }
    }
    for (int d = both; d < DVP; d += 2) {
        const vec_t b0 = (vec_t)(b_own[d]), b1 = (vec_t)(b_own[d + 1]);
#pragma unroll
        for (int t = 0; t < TILE_VECS; ++t) {
            p0[t] = fma(b0, vload_vec(t, b_by_dim + d * TILE), p0[t]);
            p1[t] = fma(b1, vload_vec(t, b_by_dim + (d + 1) * TILE), p1[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < TILE_VECS; ++t) {
        s[t] = s0[t] + s1[t];
        d_p[t] = p0[t] + p1[t];
    }
}

/* acc_a[c] += sum_r w_a[r] * a_by_row[r][c-th vector] (a: D_v wide) and
 * acc_b likewise (b: D wide), r in order, in one loop. The sums are
 * copied to fully unrolled local arrays: PoCL keeps private arrays that
 * live across barriers in memory (flash_fwd.cl's note). */
inline void accumulate_two(vec_t *acc_a, const real_t *w_a,
                           __local const real_t *a_by_row, vec_t *acc_b,
                           const real_t *w_b, __local const real_t *b_by_row)
{
    vec_t sum_a[DVP / VEC], sum_b[DQK / VEC];
#pragma unroll
    for (int c = 0; c < DVP / VEC; ++c)
        sum_a[c] = acc_a[c];
#pragma unroll
    for (int c = 0; c < DQK / VEC; ++c)
        sum_b[c] = acc_b[c];
    for (int r = 0; r < TILE; ++r) {
        const vec_t x = (vec_t)(w_a[r]), y = (vec_t)(w_b[r]);
#pragma unroll
        for (int c = 0; c < DVP / VEC; ++c)
            sum_a[c] = fma(x, vload_vec(c, a_by_row + r * DVP), sum_a[c]);
#pragma unroll
        for (int c = 0; c < DQK / VEC; ++c)
            sum_b[c] = fma(y, vload_vec(c, b_by_row + r * DQK), sum_b[c]);
    }
#pragma unroll
    for (int c = 0; c < DVP / VEC; ++c)
        acc_a[c] = sum_a[c];
#pragma unroll
    for (int c = 0; c < DQK / VEC; ++c)
        acc_b[c] = sum_b[c];
}

/* acc[c] += sum_r w[r] * by_row[r][c-th vector] (D wide): the even rows'
 * and the odd rows' terms in two sums, added to acc at the end. */
inline void accumulate_one(vec_t *acc, const real_t *w,
                           __local const real_t *by_row)
{
    vec_t even[DQK / VEC], odd[DQK / VEC];
#pragma unroll
    for (int c = 0; c < DQK / VEC; ++c)
        even[c] = odd[c] = (vec_t)(0);
    for (int r = 0; r < TILE; r += 2) {
        const vec_t x = (vec_t)(w[r]), y = (vec_t)(w[r + 1]);
#pragma unroll
        for (int c = 0; c < DQK / VEC; ++c) {
            even[c] = fma(x, vload_vec(c, by_row + r * DQK), even[c]);
            odd[c] = fma(y, vload_vec(c, by_row + (r + 1) * DQK), odd[c]);
        }
    }
#pragma unroll
    for (int c = 0; c < DQK / VEC; ++c)
        acc[c] += even[c] + odd[c];
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
flashcl_bwd_dkdv(FLASHCL_BWD_PARAMS)
{
    __local real_t q_by_dim[DQK * TILE], q_by_row[TILE * DQK];
    __local real_t g_by_dim[DVP * TILE], g_by_row[TILE * DVP];
    /* +inf for rows that see no key and for padding rows: P = 0 there. */
    __local real_t lse_t[TILE], delta_t[TILE];
    const int lid = get_local_id(0), hk = get_group_id(1),
              b = get_group_id(2);
    const long j0 = (long)get_group_id(0) * WG, j = j0 + lid;
    const bwd_seq sq = BWD_SEQUENCE(b);
    if (j0 >= sq.nk) /* the whole group: past its sequence's keys */
        return;
    const bool key_valid = j < sq.nk;
    const long key = min(j, sq.nk - 1);
    real_t k_own[DQK], v_own[DVP];
    load_own_row(k_own, k, in_base.s1, k_stride, sq.kb, hk, sq.k0 + key,
                 head_dim, DQK);
    load_own_row(v_own, v, in_base.s2, v_stride, sq.kb, hk, sq.k0 + key,
                 head_dim_v, DVP);
    vec_t acc_k[DQK / VEC], acc_v[DVP / VEC];
    for (int c = 0; c < DQK / VEC; ++c)
        acc_k[c] = (vec_t)(0);
    for (int c = 0; c < DVP / VEC; ++c)
        acc_v[c] = (vec_t)(0);
    /* Rows that see any key of this group, then per key. */
    const long j1 = min(j0 + WG, sq.nk) - 1;
    const long row_lo =
        window_right < 0 ? 0 : max(0L, j0 - sq.diag - window_right);
    const long row_hi = window_left < 0
                            ? sq.nq - 1
                            : min(sq.nq - 1, j1 - sq.diag + window_left);
    const long mine_lo = window_right < 0 ? LONG_MIN / 2
                                          : key - sq.diag - window_right;
    const long mine_hi = window_left < 0 ? LONG_MAX / 2
                                         : key - sq.diag + window_left;
    for (int g = 0; g < group_size; ++g) {
        const int h = hk * group_size + g;
        for (long r0 = row_lo; r0 <= row_hi; r0 += TILE) {
            barrier(CLK_LOCAL_MEM_FENCE);
            load_tile(q_by_dim, q_by_row, true, q, in_base.s0, q_stride,
                      sq.qb, h, sq.q0 + r0, sq.q0 + row_hi, head_dim, DQK);
            load_tile(g_by_dim, g_by_row, true, d_o, out_base.s0, d_o_stride,
                      sq.qb, h, sq.q0 + r0, sq.q0 + row_hi, head_dim_v, DVP);
            for (int r = lid; r < TILE; r += WG) {
                const long i = min(r0 + r, sq.nq - 1);
                const real_t row_lse =
                    lse[lse_at(lse_base, lse_stride, sq.qb, h, sq.q0 + i)];
                const bool live = r0 + r <= row_hi && row_lse != -INFINITY;
                lse_t[r] = live ? row_lse : INFINITY;
                delta_t[r] =
                    live ? delta[((ulong)b * heads_q + h) * seqlen_q + i] : 0;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            vec_t s[TILE_VECS], d_p[TILE_VECS];
            tile_scores(s, d_p, k_own, q_by_dim, v_own, g_by_dim);
            real_t p_r[TILE], d_s_r[TILE];
#if FLASHCL_NEEDS_SCORE_PASS
            real_t s_r[TILE], d_p_r[TILE];
#pragma unroll
            for (int t = 0; t < TILE_VECS; ++t) {
                vstore_vec(s[t] * scale, t, s_r);
                vstore_vec(d_p[t], t, d_p_r);
            }
            for (int r = 0; r < TILE; ++r) {
                const score_row sr =
                    score_row_init(b, h, min(r0 + r, sq.nq - 1), sq.diag,
                                   1 FLASHCL_VARIANT_NAMES);
                real_t d_cap;
                p_r[r] = probability(&sr, key, s_r[r], lse_t[r],
                                     &d_cap FLASHCL_VARIANT_NAMES);
                d_s_r[r] = p_r[r] * (d_p_r[r] - delta_t[r]) * d_cap;
            }
#else
#pragma unroll
            for (int t = 0; t < TILE_VECS; ++t) {
                const vec_t p =
                    exp(fma(s[t], (vec_t)(scale), -vload_vec(t, lse_t)));
                vstore_vec(p, t, p_r);
                vstore_vec(p * (d_p[t] - vload_vec(t, delta_t)), t, d_s_r);
            }
#endif
            /* The band's edges (causal, window) inside this tile. */
            if (r0 < mine_lo || r0 + TILE - 1 > mine_hi)
                for (int r = 0; r < TILE; ++r)
                    if (r0 + r < mine_lo || r0 + r > mine_hi)
                        p_r[r] = d_s_r[r] = 0;
            accumulate_two(acc_v, p_r, g_by_row, acc_k, d_s_r, q_by_row);
        }
    }
    if (!key_valid)
        return;
    store_own_row(d_k, out_base.s2, d_k_stride, sq.kb, hk, sq.k0 + j, head_dim,
                  acc_k, scale);
    store_own_row(d_v, out_base.s3, d_v_stride, sq.kb, hk, sq.k0 + j,
                  head_dim_v, acc_v, 1);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
flashcl_bwd_dq(FLASHCL_BWD_PARAMS)
{
    __local real_t k_by_dim[DQK * TILE], k_by_row[TILE * DQK];
    __local real_t v_by_dim[DVP * TILE];
    const int lid = get_local_id(0), h = get_group_id(1),
              b = get_group_id(2);
    const int hk = h / group_size;
    const long i0 = (long)get_group_id(0) * WG, i = i0 + lid;
    const bwd_seq sq = BWD_SEQUENCE(b);
    if (i0 >= sq.nq) /* the whole group: past its sequence's rows */
        return;
    const bool row_valid = i < sq.nq;
    const long row = min(i, sq.nq - 1);
    real_t q_own[DQK], g_own[DVP];
    load_own_row(q_own, q, in_base.s0, q_stride, sq.qb, h, sq.q0 + row,
                 head_dim, DQK);
    load_own_row(g_own, d_o, out_base.s0, d_o_stride, sq.qb, h, sq.q0 + row,
                 head_dim_v, DVP);
    vec_t acc[DQK / VEC];
    for (int c = 0; c < DQK / VEC; ++c)
        acc[c] = (vec_t)(0);
    const real_t stored_lse =
        lse[lse_at(lse_base, lse_stride, sq.qb, h, sq.q0 + row)];
    /* +inf for a row that sees no key: P = 0 there. */
    const real_t row_lse = stored_lse == -INFINITY ? INFINITY : stored_lse;
    const real_t row_delta = delta[((ulong)b * heads_q + h) * seqlen_q + row];
#if FLASHCL_NEEDS_SCORE_PASS
    const score_row sr =
        score_row_init(b, h, row, sq.diag, 1 FLASHCL_VARIANT_NAMES);
#endif
    const long i1 = min(i0 + WG, sq.nq) - 1;
    const long key_lo =
        window_left < 0 ? 0 : max(0L, i0 + sq.diag - window_left);
    const long key_hi = window_right < 0
                            ? sq.nk - 1
                            : min(sq.nk - 1, i1 + sq.diag + window_right);
    const long mine_lo = window_left < 0 ? 0 : row + sq.diag - window_left;
    const long mine_hi = min(key_hi, window_right < 0
                                         ? LONG_MAX / 2
                                         : row + sq.diag + window_right);
    for (long n0 = key_lo; n0 <= key_hi; n0 += TILE) {
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(k_by_dim, k_by_row, true, k, in_base.s1, k_stride, sq.kb,
                  hk, sq.k0 + n0, sq.k0 + key_hi, head_dim, DQK);
        load_tile(v_by_dim, v_by_dim, false, v, in_base.s2, v_stride, sq.kb,
                  hk, sq.k0 + n0, sq.k0 + key_hi, head_dim_v, DVP);
        barrier(CLK_LOCAL_MEM_FENCE);
        vec_t s[TILE_VECS], d_p[TILE_VECS];
        tile_scores(s, d_p, q_own, k_by_dim, g_own, v_by_dim);
        real_t d_s_c[TILE];
#if FLASHCL_NEEDS_SCORE_PASS
        real_t s_c[TILE], d_p_c[TILE];
#pragma unroll
        for (int t = 0; t < TILE_VECS; ++t) {
            vstore_vec(s[t] * scale, t, s_c);
            vstore_vec(d_p[t], t, d_p_c);
        }
        for (int c = 0; c < TILE; ++c) {
            real_t d_cap;
            const real_t p =
                probability(&sr, min(n0 + c, sq.nk - 1), s_c[c],
                            row_lse, &d_cap FLASHCL_VARIANT_NAMES);
            d_s_c[c] = p * (d_p_c[c] - row_delta) * d_cap;
        }
#else
#pragma unroll
        for (int t = 0; t < TILE_VECS; ++t) {
            const vec_t p = exp(fma(s[t], (vec_t)(scale), (vec_t)(-row_lse)));
            vstore_vec(p * (d_p[t] - (vec_t)(row_delta)), t, d_s_c);
        }
#endif
        /* The band's edges and the last tile's padding keys. */
        if (n0 < mine_lo || n0 + TILE - 1 > mine_hi)
            for (int c = 0; c < TILE; ++c)
                if (n0 + c < mine_lo || n0 + c > mine_hi)
                    d_s_c[c] = 0;
        accumulate_one(acc, d_s_c, k_by_row);
    }
    if (!row_valid)
        return;
    store_own_row(d_q, out_base.s1, d_q_stride, sq.qb, h, sq.q0 + i, head_dim,
                  acc, scale);
}

__kernel void flashcl_bwd_dsinks(FLASHCL_BWD_PARAMS)
{
    const int h = get_global_id(0);
    if (h >= heads_q)
        return;
    const real_t sink = sink_logit(h, 1 FLASHCL_VARIANT_NAMES);
    real_t sum = 0;
    for (int b = 0; b < batch; ++b) {
        const bwd_seq sq = BWD_SEQUENCE(b);
        for (int i = 0; i < sq.nq; ++i) {
            const real_t row_lse =
                lse[lse_at(lse_base, lse_stride, sq.qb, h, sq.q0 + i)];
            if (row_lse != -INFINITY && sink != -INFINITY)
                sum += exp(sink - row_lse) *
                       delta[((ulong)b * heads_q + h) * seqlen_q + i];
        }
    }
    d_sinks[d_sinks_base + (ulong)h * d_sinks_stride] = (float)-sum;
}
