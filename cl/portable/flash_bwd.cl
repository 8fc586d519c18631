/* Portable attention backward (OpenCL C 1.2, any vendor): dQ, dK, dV and
 * d_sinks of the forward in flash_fwd.cl, for every variant.
 *
 * Four kernels, enqueued in this order by src/api/backward.c:
 *   flashcl_bwd_delta   Delta_i = rowsum(dO * O), one work-item per row;
 *   flashcl_bwd_dkdv    one work-item per BWD_ROWS keys j of a KV head:
 *                       loops over the query heads of its group, then
 *                       over the rows that see j (in local-memory tiles),
 *                       recomputing
 *                       P_ij = exp(s_ij - LSE_i);
 *                       dV_j = sum P dO, dK_j = scale * sum dS q;
 *   flashcl_bwd_dq      one work-item per BWD_ROWS query rows: loops over
 *                       the keys they see; dQ_i = scale * sum dS k;
 *                       (how the two are shaped for speed: "Tiles" below)
 *   flashcl_bwd_dq_sum  with BWD_FUSED_DQ (CPUs), in flashcl_bwd_dq's
 *                       place: the dK/dV pass also wrote each key
 *                       block's part of dQ; one work-item per row adds
 *                       them in block order;
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
#include "band.clh"

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
 * row-major ([row][d]) for the accumulations. A work-item owns ROWS keys
 * (dK/dV) or query rows (dQ), whose rows stay private.
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
#if FLASHCL_BWD_PREFETCH && defined(__clang__)
            /* The next tile's row: a head's rows lie a row of all heads
             * apart, farther than the hardware prefetcher follows (perf:
             * the first use of each row missed, ~10 % of both passes). */
            __builtin_prefetch(
                src + at4(base, stride, b, h, r0 + TILE + r, d0));
#endif
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
 * 16-wide vectors: two vectors of a tile, two products, and two own rows
 * or, with one own row, two halves of the sum: PARTS); each sum still
 * adds in a fixed order. A work-item owns ROWS keys or query rows: each
 * tile vector it loads from local memory serves ROWS FMAs, which the
 * loads (two a cycle, as the FMAs) had bounded at one FMA each
 * (docs/experiments.md, "Portable backward"). */
#define ROWS FLASHCL_BWD_ROWS
/* The dK/dV pass's LSE tile: natural units for the score pass
 * (probability()), log2 units for the exp2 of the plain one. */
#if FLASHCL_NEEDS_SCORE_PASS
#define LSE_UNIT ((real_t)1)
#else
#define LSE_UNIT REAL_LOG2E
#endif
#define PARTS (ROWS == 1 ? 2 : 1)

/* s[m][t] = sum_d a_own[m][d] * a_by_dim[d][t-th vector of the tile] and
 * d_p likewise from b, for each own row m (a_own: ROWS rows of DQK, b_own:
 * ROWS rows of DVP; s, d_p: [ROWS][TILE_VECS]): the two products that make
 * a tile's scores. */
inline void tile_scores(vec_t *s, vec_t *d_p, const real_t *a_own,
                        __local const real_t *a_by_dim, const real_t *b_own,
                        __local const real_t *b_by_dim)
{
    vec_t s_part[PARTS][ROWS * TILE_VECS], p_part[PARTS][ROWS * TILE_VECS];
#pragma unroll
    for (int e = 0; e < PARTS; ++e)
#pragma unroll
        for (int x = 0; x < ROWS * TILE_VECS; ++x)
            s_part[e][x] = p_part[e][x] = (vec_t)(0);
    /* The padded dims are multiples of the vector width (2 or more). */
    const int both = DQK < DVP ? DQK : DVP;
    for (int d = 0; d < both; d += PARTS) {
#pragma unroll
        for (int e = 0; e < PARTS; ++e)
#pragma unroll
            for (int t = 0; t < TILE_VECS; ++t) {
                const vec_t a = vload_vec(t, a_by_dim + (d + e) * TILE);
                const vec_t g = vload_vec(t, b_by_dim + (d + e) * TILE);
#pragma unroll
                for (int m = 0; m < ROWS; ++m) {
                    const int x = m * TILE_VECS + t;
                    s_part[e][x] =
                        fma((vec_t)(a_own[m * DQK + d + e]), a, s_part[e][x]);
                    p_part[e][x] =
                        fma((vec_t)(b_own[m * DVP + d + e]), g, p_part[e][x]);
                }
            }
    }
    for (int d = both; d < DQK; d += PARTS) {
#pragma unroll
        for (int e = 0; e < PARTS; ++e)
#pragma unroll
            for (int t = 0; t < TILE_VECS; ++t) {
                const vec_t a = vload_vec(t, a_by_dim + (d + e) * TILE);
#pragma unroll
                for (int m = 0; m < ROWS; ++m) {
                    const int x = m * TILE_VECS + t;
                    s_part[e][x] =
                        fma((vec_t)(a_own[m * DQK + d + e]), a, s_part[e][x]);
                }
            }
    }
    for (int d = both; d < DVP; d += PARTS) {
#pragma unroll
        for (int e = 0; e < PARTS; ++e)
#pragma unroll
            for (int t = 0; t < TILE_VECS; ++t) {
                const vec_t g = vload_vec(t, b_by_dim + (d + e) * TILE);
#pragma unroll
                for (int m = 0; m < ROWS; ++m) {
                    const int x = m * TILE_VECS + t;
                    p_part[e][x] =
                        fma((vec_t)(b_own[m * DVP + d + e]), g, p_part[e][x]);
                }
            }
    }
#pragma unroll
    for (int x = 0; x < ROWS * TILE_VECS; ++x) {
        s[x] = PARTS == 1 ? s_part[0][x] : s_part[0][x] + s_part[PARTS - 1][x];
        d_p[x] =
            PARTS == 1 ? p_part[0][x] : p_part[0][x] + p_part[PARTS - 1][x];
    }
}

/* acc[m][c] += sum_r w[m][r] * by_row[r][c-th vector] for each own row m
 * (acc: [ROWS][COLS / VEC], w: [ROWS][TILE], by_row: [TILE][COLS]), r in
 * order within each of the PARTS sums. One function per width, so that
 * COLS is a constant: PoCL keeps these functions as calls, and the sums
 * must be fully unrolled to stay in registers (private arrays that live
 * across barriers stay in memory: flash_fwd.cl's note). */
#define DEFINE_ACCUMULATE(name, COLS)                                          \
    inline void name(vec_t *acc, const real_t *w,                              \
                     __local const real_t *by_row)                             \
    {                                                                          \
        vec_t part[PARTS][ROWS * (COLS / VEC)];                                \
        _Pragma("unroll") for (int e = 0; e < PARTS; ++e)                      \
            _Pragma("unroll") for (int x = 0; x < ROWS * (COLS / VEC); ++x)    \
                part[e][x] = (vec_t)(0);                                       \
        for (int r = 0; r < TILE; r += PARTS) {                                \
            _Pragma("unroll") for (int e = 0; e < PARTS; ++e)                  \
                _Pragma("unroll") for (int c = 0; c < COLS / VEC; ++c) {       \
                const vec_t row = vload_vec(c, by_row + (r + e) * COLS);       \
                _Pragma("unroll") for (int m = 0; m < ROWS; ++m)               \
                    part[e][m * (COLS / VEC) + c] =                            \
                        fma((vec_t)(w[m * TILE + r + e]), row,                 \
                            part[e][m * (COLS / VEC) + c]);                    \
            }                                                                  \
        }                                                                      \
        _Pragma("unroll") for (int x = 0; x < ROWS * (COLS / VEC); ++x)        \
            acc[x] += PARTS == 1 ? part[0][x]                                  \
                                 : part[0][x] + part[PARTS - 1][x];            \
    }
DEFINE_ACCUMULATE(accumulate_dqk, DQK)
DEFINE_ACCUMULATE(accumulate_dvp, DVP)

/* BWD_FUSED_DQ: the dK/dV pass also makes dQ's part from its block of
 * keys, dQ_i += sum_j dS_ij k_j, from dS and K staged in local memory,
 * and flashcl_bwd_dq_sum adds the blocks' parts in block order. The
 * second pass's two recomputed products (QK^T and dO V^T, 4 of 14 FLOP
 * units) go; what is added is a store of dS and, per key block, one
 * [rows, D] part in scratch. A work-item makes FUSED_ROWS rows of a
 * tile's part: 16 sums in flight (FMA latency, as PARTS above), each K
 * vector read from local memory serving FUSED_ROWS FMAs. Only TILE /
 * FUSED_ROWS work-items have work, which CPUs (a work-group runs on one
 * thread) do not mind and GPUs would: the planner sets it on CPUs. */
#define FUSED_ROWS (DQK / VEC <= 4 ? 4 : DQK / VEC <= 8 ? 2 : 1)
#define KEY_BLOCK (WG * ROWS)

/* Index of element 0 of row i of head h of batch entry b in key block
 * kb's part: Delta's row order, DQK columns. */
inline ulong part_row(int kb, int b, int h, long i, int heads_q,
                      int batch, int seqlen_q)
{
    return ((((ulong)kb * batch + b) * heads_q + h) * seqlen_q + i) * DQK;
}

/* Tile rows [r0, r0 + TILE) (those up to row_hi) of key block kb's part
 * of dQ for head h: dS ([key][TILE], first `keys` live) times the
 * block's K ([key][DQK]). */
inline void fused_dq_tile(__global real_t *dq_part, ulong part0,
                          __local const real_t *ds_t,
                          __local const real_t *k_blk, int keys, long r0,
                          long row_hi)
{
    for (int g = get_local_id(0); g < TILE / FUSED_ROWS; g += WG) {
        const int r_first = g * FUSED_ROWS;
        vec_t acc[FUSED_ROWS * (DQK / VEC)];
#pragma unroll
        for (int x = 0; x < FUSED_ROWS * (DQK / VEC); ++x)
            acc[x] = (vec_t)(0);
        for (int j = 0; j < keys; ++j) {
#pragma unroll
            for (int c = 0; c < DQK / VEC; ++c) {
                const vec_t key_vec = vload_vec(c, k_blk + j * DQK);
#pragma unroll
                for (int f = 0; f < FUSED_ROWS; ++f)
                    acc[f * (DQK / VEC) + c] =
                        fma((vec_t)(ds_t[j * TILE + r_first + f]), key_vec,
                            acc[f * (DQK / VEC) + c]);
            }
        }
        for (int f = 0; f < FUSED_ROWS && r0 + r_first + f <= row_hi; ++f)
#pragma unroll
            for (int c = 0; c < DQK / VEC; ++c)
                vstore_vec(acc[f * (DQK / VEC) + c], c,
                           dq_part + part0 + (ulong)(r0 + r_first + f) * DQK);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
flashcl_bwd_dkdv(FLASHCL_BWD_PARAMS)
{
    __local real_t q_by_dim[DQK * TILE], q_by_row[TILE * DQK];
    __local real_t g_by_dim[DVP * TILE], g_by_row[TILE * DVP];
    /* +inf for rows that see no key and for padding rows: P = 0 there. */
    __local real_t lse_t[TILE], delta_t[TILE];
#if FLASHCL_BWD_FUSED_DQ
    __local real_t ds_t[KEY_BLOCK * TILE], k_blk[KEY_BLOCK * DQK];
#endif
    const int lid = get_local_id(0), hk = get_group_id(1),
              b = get_group_id(2);
    /* The group's keys j0 + [0, KEY_BLOCK), a work-item's ROWS adjacent. */
    const long j0 = (long)get_group_id(0) * KEY_BLOCK;
    const bwd_seq sq = BWD_SEQUENCE(b);
    if (j0 >= sq.nk) /* the whole group: past its sequence's keys */
        return;
    real_t k_own[ROWS * DQK], v_own[ROWS * DVP];
    long key[ROWS], mine_lo[ROWS], mine_hi[ROWS];
    for (int m = 0; m < ROWS; ++m) {
        key[m] = min(j0 + lid * ROWS + m, sq.nk - 1);
        load_own_row(k_own + m * DQK, k, in_base.s1, k_stride, sq.kb, hk,
                     sq.k0 + key[m], head_dim, DQK);
        load_own_row(v_own + m * DVP, v, in_base.s2, v_stride, sq.kb, hk,
                     sq.k0 + key[m], head_dim_v, DVP);
        const band_range mine = band_rows(key[m], key[m], sq.diag,
                                          window_left, window_right, sq.nq);
        mine_lo[m] = mine.begin;
        mine_hi[m] = mine.end - 1;
#if FLASHCL_BWD_FUSED_DQ
        for (int d = 0; d < DQK; ++d)
            k_blk[(lid * ROWS + m) * DQK + d] = k_own[m * DQK + d];
#endif
    }
    vec_t acc_k[ROWS * DQK / VEC], acc_v[ROWS * DVP / VEC];
    for (int c = 0; c < ROWS * DQK / VEC; ++c)
        acc_k[c] = (vec_t)(0);
    for (int c = 0; c < ROWS * DVP / VEC; ++c)
        acc_v[c] = (vec_t)(0);
    /* Rows that see any key of this group. */
    const band_range rows =
        band_rows(j0, min(j0 + KEY_BLOCK, sq.nk) - 1, sq.diag, window_left,
                  window_right, sq.nq);
    const long row_lo = rows.begin, row_hi = rows.end - 1;
    for (int g = 0; g < group_size; ++g) {
        const int h = hk * group_size + g;
#if FLASHCL_BWD_FUSED_DQ
        const ulong part0 = part_row(get_group_id(0), b, h, 0, heads_q, batch,
                                     seqlen_q);
#endif
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
                lse_t[r] = live ? row_lse * LSE_UNIT : INFINITY;
                delta_t[r] =
                    live ? delta[((ulong)b * heads_q + h) * seqlen_q + i] : 0;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            vec_t s[ROWS * TILE_VECS], d_p[ROWS * TILE_VECS];
            tile_scores(s, d_p, k_own, q_by_dim, v_own, g_by_dim);
            real_t p_r[ROWS * TILE], d_s_r[ROWS * TILE];
#if FLASHCL_NEEDS_SCORE_PASS
            real_t s_r[ROWS * TILE], d_p_r[ROWS * TILE];
#pragma unroll
            for (int x = 0; x < ROWS * TILE_VECS; ++x) {
                vstore_vec(s[x] * scale, x, s_r);
                vstore_vec(d_p[x], x, d_p_r);
            }
            for (int r = 0; r < TILE; ++r) {
                const score_row sr =
                    score_row_init(b, h, min(r0 + r, sq.nq - 1), sq.diag,
                                   1 FLASHCL_VARIANT_NAMES);
                for (int m = 0; m < ROWS; ++m) {
                    const int x = m * TILE + r;
                    real_t d_cap;
                    p_r[x] = probability(&sr, key[m], s_r[x], lse_t[r],
                                         &d_cap FLASHCL_VARIANT_NAMES);
                    d_s_r[x] = p_r[x] * (d_p_r[x] - delta_t[r]) * d_cap;
                }
            }
#else
            /* exp2 with log2(e) folded into the scale, as the forward
             * does: lse_t holds LSE in log2 units here. */
#pragma unroll
            for (int x = 0; x < ROWS * TILE_VECS; ++x) {
                const int t = x % TILE_VECS;
                const vec_t p = exp2(fma(s[x], (vec_t)(scale * REAL_LOG2E),
                                         -vload_vec(t, lse_t)));
                vstore_vec(p, x, p_r);
                vstore_vec(p * (d_p[x] - vload_vec(t, delta_t)), x, d_s_r);
            }
#endif
            /* The band's edges (causal, window) inside this tile. */
            for (int m = 0; m < ROWS; ++m)
                if (r0 < mine_lo[m] || r0 + TILE - 1 > mine_hi[m])
                    for (int r = 0; r < TILE; ++r)
                        if (r0 + r < mine_lo[m] || r0 + r > mine_hi[m])
                            p_r[m * TILE + r] = d_s_r[m * TILE + r] = 0;
            accumulate_dvp(acc_v, p_r, g_by_row);
            accumulate_dqk(acc_k, d_s_r, q_by_row);
#if FLASHCL_BWD_FUSED_DQ
#pragma unroll
            for (int x = 0; x < ROWS * TILE_VECS; ++x)
                vstore_vec(vload_vec(x, d_s_r), x, ds_t + lid * ROWS * TILE);
            barrier(CLK_LOCAL_MEM_FENCE);
            /* Padding keys (clamped to the last one) stay out of the sum. */
            fused_dq_tile(dq_part, part0, ds_t, k_blk,
                          (int)min((long)KEY_BLOCK, sq.nk - j0), r0, row_hi);
#endif
        }
    }
    for (int m = 0; m < ROWS; ++m) {
        const long j = j0 + lid * ROWS + m;
        if (j >= sq.nk)
            break;
        store_own_row(d_k, out_base.s2, d_k_stride, sq.kb, hk, sq.k0 + j,
                      head_dim, acc_k + m * (DQK / VEC), scale);
        store_own_row(d_v, out_base.s3, d_v_stride, sq.kb, hk, sq.k0 + j,
                      head_dim_v, acc_v + m * (DVP / VEC), 1);
    }
}

/* LSE and Delta of own row m of the dQ pass (+inf for a row that sees no
 * key: P = 0 there), read again at each tile: kept in private arrays
 * across the tile loop, they came out wrong for ROWS > 1 under Intel's
 * CPU runtime (dQ off by 10-100 %; PoCL was right). */
#define ROW_TERMS(m, row_lse, row_delta)                                       \
    do {                                                                       \
        const long row_ = min(i0 + lid * ROWS + (m), sq.nq - 1);               \
        const real_t stored_ =                                                 \
            lse[lse_at(lse_base, lse_stride, sq.qb, h, sq.q0 + row_)];         \
        row_lse = stored_ == -INFINITY ? INFINITY : stored_;                   \
        row_delta = delta[((ulong)b * heads_q + h) * seqlen_q + row_];         \
    } while (0)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
flashcl_bwd_dq(FLASHCL_BWD_PARAMS)
{
    __local real_t k_by_dim[DQK * TILE], k_by_row[TILE * DQK];
    __local real_t v_by_dim[DVP * TILE];
    const int lid = get_local_id(0), h = get_group_id(1),
              b = get_group_id(2);
    const int hk = h / group_size;
    /* The group's rows i0 + [0, WG * ROWS), a work-item's ROWS adjacent. */
    const long i0 = (long)get_group_id(0) * (WG * ROWS);
    const bwd_seq sq = BWD_SEQUENCE(b);
    if (i0 >= sq.nq) /* the whole group: past its sequence's rows */
        return;
    real_t q_own[ROWS * DQK], g_own[ROWS * DVP];
    long mine_lo[ROWS], mine_hi[ROWS];
#if FLASHCL_NEEDS_SCORE_PASS
    score_row sr[ROWS];
#endif
    for (int m = 0; m < ROWS; ++m) {
        const long row = min(i0 + lid * ROWS + m, sq.nq - 1);
        load_own_row(q_own + m * DQK, q, in_base.s0, q_stride, sq.qb, h,
                     sq.q0 + row, head_dim, DQK);
        load_own_row(g_own + m * DVP, d_o, out_base.s0, d_o_stride, sq.qb, h,
                     sq.q0 + row, head_dim_v, DVP);
        mine_lo[m] = band_row_lo(row + sq.diag, window_left);
        mine_hi[m] = band_row_hi(row + sq.diag, window_right, sq.nk);
#if FLASHCL_NEEDS_SCORE_PASS
        sr[m] = score_row_init(b, h, row, sq.diag, 1 FLASHCL_VARIANT_NAMES);
#endif
    }
    vec_t acc_mem[ROWS * DQK / VEC + FLASHCL_BWD_DQ_IN_MEMORY];
#if FLASHCL_BWD_DQ_IN_MEMORY
    /* PoCL kept these sums in registers across the tile loop and copied
     * all of them between two per-work-item arrays at every barrier (perf:
     * 7 % of the pass); an offset it cannot prove zero (abi_version is
     * never negative) keeps them in memory, updated in place. */
    vec_t *const acc = acc_mem + (abi_version < 0 ? 1 : 0);
#else
    vec_t *const acc = acc_mem;
#endif
    for (int c = 0; c < ROWS * DQK / VEC; ++c)
        acc[c] = (vec_t)(0);
    const band_range keys =
        band_keys(i0, min(i0 + WG * ROWS, sq.nq) - 1, sq.diag, window_left,
                  window_right, sq.nk);
    const long key_lo = keys.begin, key_hi = keys.end - 1;
    for (long n0 = key_lo; n0 <= key_hi; n0 += TILE) {
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(k_by_dim, k_by_row, true, k, in_base.s1, k_stride, sq.kb,
                  hk, sq.k0 + n0, sq.k0 + key_hi, head_dim, DQK);
        load_tile(v_by_dim, v_by_dim, false, v, in_base.s2, v_stride, sq.kb,
                  hk, sq.k0 + n0, sq.k0 + key_hi, head_dim_v, DVP);
        barrier(CLK_LOCAL_MEM_FENCE);
        vec_t s[ROWS * TILE_VECS], d_p[ROWS * TILE_VECS];
        tile_scores(s, d_p, q_own, k_by_dim, g_own, v_by_dim);
        real_t d_s_c[ROWS * TILE];
#if FLASHCL_NEEDS_SCORE_PASS
        real_t s_c[ROWS * TILE], d_p_c[ROWS * TILE];
#pragma unroll
        for (int x = 0; x < ROWS * TILE_VECS; ++x) {
            vstore_vec(s[x] * scale, x, s_c);
            vstore_vec(d_p[x], x, d_p_c);
        }
        for (int m = 0; m < ROWS; ++m) {
            real_t row_lse, row_delta;
            ROW_TERMS(m, row_lse, row_delta);
            for (int c = 0; c < TILE; ++c) {
                const int x = m * TILE + c;
                real_t d_cap;
                const real_t p =
                    probability(&sr[m], min(n0 + c, sq.nk - 1), s_c[x],
                                row_lse, &d_cap FLASHCL_VARIANT_NAMES);
                d_s_c[x] = p * (d_p_c[x] - row_delta) * d_cap;
            }
        }
#else
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            real_t row_lse, row_delta;
            ROW_TERMS(m, row_lse, row_delta);
            const real_t row_lse2 = row_lse * REAL_LOG2E;
#pragma unroll
            for (int t = 0; t < TILE_VECS; ++t) {
                const int x = m * TILE_VECS + t;
                const vec_t p = exp2(
                    fma(s[x], (vec_t)(scale * REAL_LOG2E), (vec_t)(-row_lse2)));
                vstore_vec(p * (d_p[x] - (vec_t)(row_delta)), x, d_s_c);
            }
        }
#endif
        /* The band's edges and the last tile's padding keys. */
        for (int m = 0; m < ROWS; ++m)
            if (band_outside(n0, mine_lo[m], mine_hi[m]) ||
                band_outside(n0 + TILE - 1, mine_lo[m], mine_hi[m]))
                for (int c = 0; c < TILE; ++c)
                    if (band_outside(n0 + c, mine_lo[m], mine_hi[m]))
                        d_s_c[m * TILE + c] = 0;
        accumulate_dqk(acc, d_s_c, k_by_row);
    }
    for (int m = 0; m < ROWS; ++m) {
        const long i = i0 + lid * ROWS + m;
        if (i >= sq.nq)
            break;
        store_own_row(d_q, out_base.s1, d_q_stride, sq.qb, h, sq.q0 + i,
                      head_dim, acc + m * (DQK / VEC), scale);
    }
}

/* BWD_FUSED_DQ: dQ_i = scale * the parts of the key blocks that wrote
 * row i (those whose rows band_rows gives contain it, as the dK/dV pass
 * walks them), added in block order: deterministic. */
__kernel void flashcl_bwd_dq_sum(FLASHCL_BWD_PARAMS)
{
    const int i = get_global_id(0), h = get_global_id(1),
              b = get_global_id(2);
    const bwd_seq sq = BWD_SEQUENCE(b);
    if (i >= sq.nq)
        return;
    vec_t acc[DQK / VEC];
    for (int c = 0; c < DQK / VEC; ++c)
        acc[c] = (vec_t)(0);
#if FLASHCL_BWD_FUSED_DQ
    for (long j0 = 0, kb = 0; j0 < sq.nk; j0 += KEY_BLOCK, ++kb) {
        const band_range rows =
            band_rows(j0, min(j0 + KEY_BLOCK, sq.nk) - 1, sq.diag,
                      window_left, window_right, sq.nq);
        if (i < rows.begin || i >= rows.end)
            continue;
        const ulong at = part_row((int)kb, b, h, i, heads_q, batch, seqlen_q);
        for (int c = 0; c < DQK / VEC; ++c)
            acc[c] += vload_vec(c, dq_part + at);
    }
#endif
    store_own_row(d_q, out_base.s1, d_q_stride, sq.qb, h, sq.q0 + i,
                  head_dim, acc, scale);
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
