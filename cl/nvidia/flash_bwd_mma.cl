/*
 * flashcl: attention backward on NVIDIA tensor cores (mma.sync m16n8k16,
 * compute capability >= 8.0), fp16/bf16 storage, fp32 accumulation. The
 * dK/dV and dQ kernels of the Triton-tutorial structure; Delta and d_sinks
 * come from the portable program (cl/portable/flash_bwd.cl), whose argument
 * list (flash_bwd_args.clh) these kernels share, so one host fills both.
 *
 *   flashcl_bwd_dkdv  a work-group owns FLASHCL_NVB_WARPS * 16 keys of one
 *                     KV head (16 per warp, the mma's M side); it loops
 *                     over the query heads of the group in order, then over
 *                     FLASHCL_NVB_ROWS query rows at a time that see the
 *                     block, recomputing S^T = K Q^T and dP^T = V dO^T,
 *                     P^T = exp(S^T - LSE), dS^T = P^T (dP^T - Delta), and
 *                     accumulating dV += P^T dO and dK += dS^T Q in
 *                     registers;
 *   flashcl_bwd_dq    a work-group owns FLASHCL_NVB_WARPS * 16 query rows of
 *                     one head (Q and dO stay in registers as A fragments);
 *                     it loops over FLASHCL_NVB_KEYS keys at a time:
 *                     dQ += dS K.
 * (Two 16-key or 16-row tiles a warp, each B fragment read once for both,
 * ran 2-17 % slower on an H200: docs/experiments.md.) With two stages (FLASHCL_NVB_ROW_STAGES, FLASHCL_NVB_KEY_STAGES) the
 * next step's rows or keys are copied by cp.async while a step computes.
 * Every output element is summed by one lane in a fixed order: no atomics,
 * so the bits do not depend on scheduling (deterministic).
 *
 * Fragments are read from local memory by ldmatrix (.trans where the mma
 * wants the other layout); FLASHCL_NV_EMULATE runs the kernel on Intel's
 * CPU runtime (cl/nvidia/nv_mma.clh, and ldmatrix emulated below) so that
 * the tests check its lane logic without a GPU. Local rows are padded by
 * 16 bytes: ldmatrix's eight row addresses then fall in distinct banks.
 *
 * Variants through cl/common/variants.clh in natural units (unit 1), as
 * the portable backward: softcap's derivative 1 - tanh^2 multiplies dS.
 *
 * Host guarantees: stride_dim == 1 and 16-byte-aligned rows for q, k, v,
 * d_o, d_q, d_k, d_v; fp16 or bf16; padded head dims (multiples of 16) of
 * at most 128; local memory within FLASHCL_LOCAL_MEM_BYTES.
 */
#include "flash_bwd_mma_defaults.clh"

#if FLASHCL_NV_MMA

#include "nv_mma.clh"
#include "band.clh"

#define STORAGE_T ushort
typedef float real_t;
#define FLASHCL_SCORE_KEY_T int /* seqlen_q/k are ints on this path */
#define FLASHCL_HALF_BITS_TO_FLOAT(bits) nv_half_bits_to_float(bits)
#include "kernel_args.clh"
#include "flash_bwd_args.clh"

#define DQK FLASHCL_HEAD_DIM
#define DVP FLASHCL_HEAD_DIM_V
#define PQ (DQK + 8) /* local row pitches in elements: 16 bytes of padding */
#define PV (DVP + 8)
#define WARPS FLASHCL_NVB_WARPS
#define WG (WARPS * 32)
#define BLOCK (WARPS * 16) /* keys (dK/dV) or query rows (dQ) per group */
#define ROWS FLASHCL_NVB_ROWS
#define KEYS FLASHCL_NVB_KEYS
#define ROW_STAGES FLASHCL_NVB_ROW_STAGES
#define KEY_STAGES FLASHCL_NVB_KEY_STAGES

#if 2 * BLOCK * (PQ + PV) +                                                \
        ROW_STAGES * (2 * ROWS * (PQ + PV) + 8 * ROWS) >                       \
    FLASHCL_LOCAL_MEM_BYTES
#error "flash_bwd_mma: the dK/dV kernel's tiles exceed local memory"
#endif
#if KEY_STAGES * 2 * KEYS * (PQ + PV) > FLASHCL_LOCAL_MEM_BYTES
#error "flash_bwd_mma: the dQ kernel's tiles exceed local memory"
#endif

#if FLASHCL_DTYPE == 1
#define MMA(C, A, B) NV_MMA_F16((C), (A)[0], (A)[1], (A)[2], (A)[3], (B)[0], (B)[1])
#define PACK(lo, hi) nv_pack_f16((lo), (hi))
#else
#define MMA(C, A, B) NV_MMA_BF16((C), (A)[0], (A)[1], (A)[2], (A)[3], (B)[0], (B)[1])
#define PACK(lo, hi) nv_pack_bf16((lo), (hi))
#endif

inline ulong row_at(ulong base, ulong4 stride, int b, int h, long row)
{
    return base + (ulong)b * stride.s0 + (ulong)h * stride.s1 +
           (ulong)row * stride.s2;
}

/* ldmatrix .x4 (.trans) at element OFFSET of TILE, lane l giving row
 * l % 8 of matrix l / 8. Emulated (FLASHCL_NV_EMULATE) with the same
 * addresses, shuffled to the lanes that read each row, so that the tests
 * on Intel's CPU runtime check the addressing the GPU runs. */
#if FLASHCL_NV_EMULATE
inline void emul_ldsm_x4(uint r[4], __local const ushort *tile, int offset,
                         bool trans)
{
    const uint lane = get_sub_group_local_id();
    const uint g = lane >> 2, t = lane & 3;
    for (uint i = 0; i < 4; ++i) {
        if (!trans) { /* row g, columns 2t, 2t + 1 */
            const int row = intel_sub_group_shuffle(offset, 8 * i + g);
            r[i] = (uint)tile[row + 2 * t] | (uint)tile[row + 2 * t + 1] << 16;
        } else { /* rows 2t, 2t + 1, column g */
            const int r0 = intel_sub_group_shuffle(offset, 8 * i + 2 * t);
            const int r1 = intel_sub_group_shuffle(offset, 8 * i + 2 * t + 1);
            r[i] = (uint)tile[r0 + g] | (uint)tile[r1 + g] << 16;
        }
    }
}
#define LDSM_X4(R, TILE, OFFSET) emul_ldsm_x4((R), (TILE), (OFFSET), false)
#define LDSM_X4_T(R, TILE, OFFSET) emul_ldsm_x4((R), (TILE), (OFFSET), true)
#else
#define LDSM_X4(R, TILE, OFFSET)                                               \
    NV_LDSM_X4((R), (uint)(size_t)((TILE) + (OFFSET)))
#define LDSM_X4_T(R, TILE, OFFSET)                                             \
    NV_LDSM_X4_TRANS((R), (uint)(size_t)((TILE) + (OFFSET)))
#endif

/* A (16 x 16, row major) at rows r0.., cols c0.. of a row-major tile:
 * matrices (r0, c0), (r0 + 8, c0), (r0, c0 + 8), (r0 + 8, c0 + 8). */
inline void frag_a_ld(uint a[4], __local const ushort *tile, int pitch,
                      int r0, int c0, int g, int t)
{
    const int lane = 4 * g + t, m = lane >> 3;
    LDSM_X4(a, tile, (r0 + (lane & 7) + (m & 1) * 8) * pitch + c0 +
                         (m & 2) * 4);
}

/* Two B fragments (k16 x n8), n tiles n0 and n0 + 8 into b[0..1] and
 * b[2..3], with B[k][n] = tile[n0 + n][k0 + k] (k contiguous). */
inline void frag_b_nk2(uint b[4], __local const ushort *tile, int pitch,
                       int n0, int k0, int g, int t)
{
    const int lane = 4 * g + t, m = lane >> 3;
    LDSM_X4(b, tile, (n0 + (lane & 7) + (m & 2) * 4) * pitch + k0 +
                         (m & 1) * 8);
}

/* The same with B[k][n] = tile[k0 + k][n0 + n] (n contiguous): .trans. */
inline void frag_b_kn2(uint b[4], __local const ushort *tile, int pitch,
                       int k0, int n0, int g, int t)
{
    const int lane = 4 * g + t, m = lane >> 3;
    LDSM_X4_T(b, tile, (k0 + (lane & 7) + (m & 1) * 8) * pitch + n0 +
                           (m & 2) * 4);
}

/* A from two n8 accumulator tiles (cols 16c.. of a 16-row block): the C
 * layout of m16n8 pairs is the A layout of m16k16. */
inline void frag_a_of(uint a[4], const float lo[4], const float hi[4])
{
    a[0] = PACK(lo[0], lo[1]);
    a[1] = PACK(lo[2], lo[3]);
    a[2] = PACK(hi[0], hi[1]);
    a[3] = PACK(hi[2], hi[3]);
}

/* ACC[n] = 0 for the n8 tiles n < TILES (a macro, as MMA_TILES). */
#define ZERO_TILES(ACC, TILES)                                                 \
    _Pragma("unroll") for (int n = 0; n < (TILES); ++n)                        \
        (ACC)[n][0] = (ACC)[n][1] = (ACC)[n][2] = (ACC)[n][3] = 0;

/* Row i's LSE and Delta (head h, batch b), from the kernel's arguments. */
#define ROW_LSE(b, h, i)                                                       \
    lse[lse_base + (ulong)(b) * lse_stride.s0 + (ulong)(h) * lse_stride.s1 +   \
        (ulong)(i) * lse_stride.s2]
#define ROW_DELTA(b, h, i) delta[((ulong)(b) * heads_q + (h)) * seqlen_q + (i)]

/* 8 elements (16 bytes) of a global row into local memory, zeros past
 * the first `valid` (0..8): cp.async on the GPU, so that a step's loads
 * fly while the step before computes; `src` is a readable address even
 * when `valid` is 0. */
inline void stage16(__local ushort *dst, __global const ushort *src,
                    int valid)
{
#if FLASHCL_NV_EMULATE
    for (int e = 0; e < 8; ++e)
        dst[e] = e < valid ? src[e] : 0;
#else
    NV_CP_ASYNC16((uint)(size_t)dst, src, 2 * valid);
#endif
}

/* Rows [r0, r0 + rows) of one head into a local tile of `cols` (padded)
 * columns, zero past row `end` (exclusive) and past column `width`;
 * asynchronous: NV_CP_COMMIT and a wait (and a barrier) before reading. */
inline void load_tile(__local ushort *dst, int pitch, int rows, int cols,
                      __global const ushort *src, ulong base, ulong4 stride,
                      int b, int h, long r0, long end, int width)
{
    const int chunks = cols / 8;
    for (int idx = get_local_id(0); idx < rows * chunks; idx += WG) {
        const int r = idx / chunks, c = idx % chunks;
        const long row = min(r0 + r, end - 1);
        const int valid = r0 + r < end ? clamp(width - 8 * c, 0, 8) : 0;
        stage16(dst + r * pitch + 8 * c,
                src + row_at(base, stride, b, h, max(row, 0L)) +
                    (valid ? 8 * c : 0),
                valid);
    }
}

/* One 32-bit pair of a global row (zeros past `width`, col even). */
inline uint global_pair(__global const ushort *src, ulong at, int col,
                        int width)
{
    if (col + 1 < width)
        return *(__global const uint *)(src + at + col);
    return col < width ? (uint)src[at + col] : 0u;
}

inline void store_pair(__global ushort *dst, ulong at, int col, int width,
                       float x, float y)
{
    const uint bits = PACK(x, y);
    if (col + 1 < width)
        *(__global uint *)(dst + at + col) = bits;
    else if (col < width)
        dst[at + col] = (ushort)bits;
}

/* P and dS of one score: p = exp(score - lse) where visible, else 0;
 * returns dS = P (dP - Delta) times softcap's 1 - tanh^2. */
inline float grad_score(float *p, float s, float d_p, float lse_i,
                        float delta_i, bool visible, int b, int h, int row,
                        int key, long diag, float scale
                            FLASHCL_VARIANT_ARGS(FLASHCL_KPARAM))
{
    const float scaled = s * scale;
    const score_row sr =
        score_row_init(b, h, row, diag, 1 FLASHCL_VARIANT_NAMES);
    const float d_cap = softcap_slope(&sr, scaled);
    const float score = score_apply(&sr, key, scaled FLASHCL_VARIANT_NAMES);
    const float prob =
        visible && score != -INFINITY ? exp(score - lse_i) : 0.0f;
    *p = prob;
    return prob * (d_p - delta_i) * d_cap;
}

/* FRAG[kk], kk < TILES: A fragments of two rows of SRC (at LO: the lane's
 * row g, at HI: g + 8), columns kk * 16 + 2t.. of WIDTH; a row whose
 * flag (W_LO, W_HI) is 0 reads as zeros. */
#define ROW_FRAGS(FRAG, TILES, SRC, LO, HI, W_LO, W_HI, WIDTH)                 \
    _Pragma("unroll") for (int kk = 0; kk < (TILES); ++kk) {                   \
        const int c = kk * 16 + 2 * t;                                         \
        (FRAG)[kk][0] = global_pair(SRC, LO, c, (W_LO) * (WIDTH));             \
        (FRAG)[kk][1] = global_pair(SRC, HI, c, (W_HI) * (WIDTH));             \
        (FRAG)[kk][2] = global_pair(SRC, LO, c + 8, (W_LO) * (WIDTH));         \
        (FRAG)[kk][3] = global_pair(SRC, HI, c + 8, (W_HI) * (WIDTH));         \
    }

/* Whether row i sees key j: `live` (the row and key exist) and inside
 * the band. */
#define SEES(LIVE, I, J)                                                       \
    ((LIVE) && band_visible(J, I, diag, window_left, window_right, seqlen_k))
/* grad_score of row i's score of key j; the kernel's arguments (b, h, the
 * diagonal, scale) name the rest. */
#define GRAD_SCORE(P, S, D_P, LSE_I, DELTA_I, VISIBLE, I, J)                    \
    grad_score(P, S, D_P, LSE_I, DELTA_I, VISIBLE, b, h,                       \
               (int)min(I, (long)seqlen_q - 1),                                \
               (int)min(J, (long)seqlen_k - 1), diag,                          \
               scale FLASHCL_VARIANT_NAMES)

/* ACC[n] += A B over the n8 tiles n < TILES; LOAD_B(bf, n0) reads the B
 * fragments of n tiles n0, n0 + 8. A macro: as a function it compiled to
 * other PTX. */
#define MMA_TILES(ACC, TILES, A, LOAD_B)                                       \
    _Pragma("unroll") for (int n = 0; n < (TILES); n += 2) {                   \
        uint bf[4];                                                            \
        LOAD_B(bf, n * 8);                                                     \
        MMA((ACC)[n], A, bf);                                                  \
        MMA((ACC)[n + 1], A, bf + 2);                                          \
    }

/* One dK/dV step's query rows, [r0, r0 + ROWS) of head h, into stage
 * buffers q_s, do_s; rows past row_hi read as zeros. */
#define STAGE_ROWS(Q_S, DO_S, H, R0)                                           \
    do {                                                                       \
        load_tile(Q_S, PQ, ROWS, DQK, q, in_base.s0, q_stride, b, H, R0,      \
                  row_hi + 1, head_dim);                                       \
        load_tile(DO_S, PV, ROWS, DVP, d_o, out_base.s0, d_o_stride, b, H,    \
                  R0, row_hi + 1, head_dim_v);                                 \
        NV_CP_COMMIT();                                                        \
    } while (0)

/* Row r of a step (thread r < ROWS): its LSE (-inf past row_hi: the row
 * sees nothing) and Delta. */
#define ROW_STATS(LSE_OUT, DELTA_OUT, H, R0, R)                                \
    do {                                                                       \
        const long i_ = min((R0) + (R), (long)seqlen_q - 1);                   \
        const bool live_ = (R0) + (R) <= row_hi;                               \
        LSE_OUT = live_ ? ROW_LSE(b, H, i_) : -INFINITY;                       \
        DELTA_OUT = live_ ? ROW_DELTA(b, H, i_) : 0;                           \
    } while (0)

/* The dK/dV kernel's work on one staged step (q_s, do_s, lse_s, delta_s
 * hold rows r0.. of head h): S^T, dP^T, P^T, dS^T of the warp's 16 keys,
 * then dV += P^T dO and dK += dS^T Q. */
#define DKDV_STEP(q_s, do_s, lse_s, delta_s, h, r0)                            \
    do {                                                                       \
        float s[ROWS / 8][4], d_p[ROWS / 8][4];                                \
        ZERO_TILES(s, ROWS / 8)                                                \
        ZERO_TILES(d_p, ROWS / 8)                                              \
        _Pragma("unroll") for (int kk = 0; kk < DQK / 16; ++kk) {              \
            uint a[4];                                                         \
            frag_a_ld(a, k_s, PQ, key0, kk * 16, g, t);                        \
            MMA_TILES(s, ROWS / 8, a, LOAD_Q_NK)                               \
        }                                                                      \
        _Pragma("unroll") for (int kk = 0; kk < DVP / 16; ++kk) {              \
            uint a[4];                                                         \
            frag_a_ld(a, v_s, PV, key0, kk * 16, g, t);                        \
            MMA_TILES(d_p, ROWS / 8, a, LOAD_DO_NK)                            \
        }                                                                      \
        _Pragma("unroll") for (int n = 0; n < ROWS / 8; ++n)                   \
        _Pragma("unroll") for (int e = 0; e < 4; ++e) {                        \
            const long j = j0 + key0 + g + (e >= 2 ? 8 : 0);                   \
            const int il = n * 8 + 2 * t + (e & 1);                            \
            const long i = (r0) + il;                                          \
            const bool visible = SEES(lse_s[il] != -INFINITY, i, j);           \
            float p;                                                           \
            d_p[n][e] = GRAD_SCORE(&p, s[n][e], d_p[n][e], lse_s[il],          \
                                   delta_s[il], visible, i, j);                \
            s[n][e] = p;                                                       \
        }                                                                      \
        _Pragma("unroll") for (int ks = 0; ks < ROWS / 16; ++ks) {             \
            uint a_p[4], a_ds[4];                                              \
            frag_a_of(a_p, s[2 * ks], s[2 * ks + 1]);                          \
            frag_a_of(a_ds, d_p[2 * ks], d_p[2 * ks + 1]);                     \
            MMA_TILES(dv, DVP / 8, a_p, LOAD_DO_KN)                            \
            MMA_TILES(dk, DQK / 8, a_ds, LOAD_Q_KN)                            \
        }                                                                      \
    } while (0)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) NV_KERNEL_ATTR void
flashcl_bwd_dkdv(FLASHCL_BWD_PARAMS)
{
    __local ushort k_s[BLOCK * PQ] __attribute__((aligned(16)));
    __local ushort v_s[BLOCK * PV] __attribute__((aligned(16)));
    __local ushort q_s[ROW_STAGES][ROWS * PQ] __attribute__((aligned(16)));
    __local ushort do_s[ROW_STAGES][ROWS * PV] __attribute__((aligned(16)));
    __local float lse_s[ROW_STAGES][ROWS], delta_s[ROW_STAGES][ROWS];
    const int tid = get_local_id(0), warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int hk = get_group_id(1), b = get_group_id(2);
    const int key0 = warp * 16; /* the warp's keys in the block */
    const long j0 = (long)get_group_id(0) * BLOCK;
    float dk[DQK / 8][4], dv[DVP / 8][4];
    ZERO_TILES(dk, DQK / 8)
    ZERO_TILES(dv, DVP / 8)
    /* The query rows that see any key of the block, in steps of ROWS over
     * each query head of the group in order. */
    const band_range rows =
        band_rows(j0, min(j0 + BLOCK, (long)seqlen_k) - 1, diag,
                  window_left, window_right, seqlen_q);
    const long row_lo = rows.begin, row_hi = rows.end - 1;
    const int per_head = row_hi >= row_lo ? (row_hi - row_lo) / ROWS + 1 : 0;
    const int steps = per_head * group_size;
    load_tile(k_s, PQ, BLOCK, DQK, k, in_base.s1, k_stride, b, hk, j0,
              seqlen_k, head_dim);
    load_tile(v_s, PV, BLOCK, DVP, v, in_base.s2, v_stride, b, hk, j0,
              seqlen_k, head_dim_v);
    if (steps > 0) {
        STAGE_ROWS(q_s[0], do_s[0], hk * group_size, row_lo);
        if (tid < ROWS)
            ROW_STATS(lse_s[0][tid], delta_s[0][tid], hk * group_size,
                      row_lo, tid);
    } else { /* no row sees the block: no copy may outlive the kernel */
        NV_CP_COMMIT();
        NV_CP_WAIT_ALL();
    }
#define LOAD_Q_NK(BF, N0) frag_b_nk2(BF, q_s[cur], PQ, N0, kk * 16, g, t)
#define LOAD_DO_NK(BF, N0) frag_b_nk2(BF, do_s[cur], PV, N0, kk * 16, g, t)
#define LOAD_Q_KN(BF, N0) frag_b_kn2(BF, q_s[cur], PQ, ks * 16, N0, g, t)
#define LOAD_DO_KN(BF, N0) frag_b_kn2(BF, do_s[cur], PV, ks * 16, N0, g, t)
    for (int step = 0; step < steps; ++step) {
        const int cur = step % ROW_STAGES, nxt = (step + 1) % ROW_STAGES;
        const int h = hk * group_size + step / per_head;
        const long r0 = row_lo + (long)(step % per_head) * ROWS;
        const int h_next = hk * group_size + (step + 1) / per_head;
        const long r0_next = row_lo + (long)((step + 1) % per_head) * ROWS;
        const bool more = step + 1 < steps;
        float lse_next = 0, delta_next = 0;
        if (ROW_STAGES > 1 && more) {
            /* the next step's rows fly while this one computes */
            STAGE_ROWS(q_s[nxt], do_s[nxt], h_next, r0_next);
            if (tid < ROWS)
                ROW_STATS(lse_next, delta_next, h_next, r0_next, tid);
            NV_CP_WAIT_1();
        } else {
            NV_CP_WAIT_ALL();
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        DKDV_STEP(q_s[cur], do_s[cur], lse_s[cur], delta_s[cur], h, r0);
        if (ROW_STAGES > 1 && more && tid < ROWS) {
            lse_s[nxt][tid] = lse_next;
            delta_s[nxt][tid] = delta_next;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with cur */
        if (ROW_STAGES == 1 && more) {
            STAGE_ROWS(q_s[0], do_s[0], h_next, r0_next);
            if (tid < ROWS)
                ROW_STATS(lse_s[0][tid], delta_s[0][tid], h_next, r0_next,
                          tid);
        }
    }
#undef LOAD_Q_NK
#undef LOAD_DO_NK
#undef LOAD_Q_KN
#undef LOAD_DO_KN
#pragma unroll
    for (int side = 0; side < 2; ++side) {
        const long j = j0 + key0 + g + 8 * side;
        if (j >= seqlen_k)
            continue;
        const ulong at_k = row_at(out_base.s2, d_k_stride, b, hk, j);
        const ulong at_v = row_at(out_base.s3, d_v_stride, b, hk, j);
#pragma unroll
        for (int n = 0; n < DQK / 8; ++n)
            store_pair(d_k, at_k, n * 8 + 2 * t, head_dim,
                       dk[n][2 * side] * scale, dk[n][2 * side + 1] * scale);
#pragma unroll
        for (int n = 0; n < DVP / 8; ++n)
            store_pair(d_v, at_v, n * 8 + 2 * t, head_dim_v, dv[n][2 * side],
                       dv[n][2 * side + 1]);
    }
}

/* One dQ step's keys, [n0, n0 + KEYS), into stage buffers k_s, v_s; keys
 * past key_hi read as zeros. */
#define STAGE_KEYS(K_S, V_S, N0)                                               \
    do {                                                                       \
        load_tile(K_S, PQ, KEYS, DQK, k, in_base.s1, k_stride, b, hk, N0,     \
                  key_hi + 1, head_dim);                                       \
        load_tile(V_S, PV, KEYS, DVP, v, in_base.s2, v_stride, b, hk, N0,     \
                  key_hi + 1, head_dim_v);                                     \
        NV_CP_COMMIT();                                                        \
    } while (0)

/* The dQ kernel's work on one staged step (k_s, v_s hold keys n0..):
 * S, dP, dS of the warp's 16 rows, then dQ += dS K. */
#define DQ_STEP(k_s, v_s, n0)                                                  \
    do {                                                                       \
        float s[KEYS / 8][4], d_p[KEYS / 8][4];                                \
        ZERO_TILES(s, KEYS / 8)                                                \
        ZERO_TILES(d_p, KEYS / 8)                                              \
        _Pragma("unroll") for (int kk = 0; kk < DQK / 16; ++kk)                \
            MMA_TILES(s, KEYS / 8, qf[kk], LOAD_K_NK)                          \
        _Pragma("unroll") for (int kk = 0; kk < DVP / 16; ++kk)                \
            MMA_TILES(d_p, KEYS / 8, of[kk], LOAD_V_NK)                        \
        _Pragma("unroll") for (int n = 0; n < KEYS / 8; ++n)                   \
        _Pragma("unroll") for (int e = 0; e < 4; ++e) {                        \
            const int side = e >> 1;                                           \
            const long i = rows[side];                                         \
            const long j = (n0) + n * 8 + 2 * t + (e & 1);                     \
            const bool visible =                                               \
                SEES(j <= key_hi && row_lse[side] != -INFINITY, i, j);         \
            float p;                                                           \
            s[n][e] = GRAD_SCORE(&p, s[n][e], d_p[n][e], row_lse[side],        \
                                 row_delta[side], visible, i, j);              \
        }                                                                      \
        _Pragma("unroll") for (int ks = 0; ks < KEYS / 16; ++ks) {             \
            uint a_ds[4];                                                      \
            frag_a_of(a_ds, s[2 * ks], s[2 * ks + 1]);                         \
            MMA_TILES(dq, DQK / 8, a_ds, LOAD_K_KN)                            \
        }                                                                      \
    } while (0)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) NV_KERNEL_ATTR void
flashcl_bwd_dq(FLASHCL_BWD_PARAMS)
{
    __local ushort k_s[KEY_STAGES][KEYS * PQ] __attribute__((aligned(16)));
    __local ushort v_s[KEY_STAGES][KEYS * PV] __attribute__((aligned(16)));
    const int tid = get_local_id(0), warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int h = get_group_id(1), b = get_group_id(2);
    const int hk = h / group_size;
    const long i0 = (long)get_group_id(0) * BLOCK;
    /* This lane's two rows (g and g + 8 of the warp's 16). */
    long rows[2];
    float row_lse[2], row_delta[2];
#pragma unroll
    for (int side = 0; side < 2; ++side) {
        rows[side] = i0 + warp * 16 + g + 8 * side;
        const long i = min(rows[side], (long)seqlen_q - 1);
        const float l = ROW_LSE(b, h, i);
        row_lse[side] = rows[side] < seqlen_q ? l : -INFINITY;
        row_delta[side] = ROW_DELTA(b, h, i);
    }
    /* Q and dO of the warp's rows as A fragments, for the whole kernel. */
    uint qf[DQK / 16][4], of[DVP / 16][4];
    const long lo = min(rows[0], (long)seqlen_q - 1),
               hi = min(rows[1], (long)seqlen_q - 1);
    const ulong q_lo = row_at(in_base.s0, q_stride, b, h, lo);
    const ulong q_hi = row_at(in_base.s0, q_stride, b, h, hi);
    const ulong o_lo = row_at(out_base.s0, d_o_stride, b, h, lo);
    const ulong o_hi = row_at(out_base.s0, d_o_stride, b, h, hi);
    const int w_lo = rows[0] < seqlen_q, w_hi = rows[1] < seqlen_q;
    ROW_FRAGS(qf, DQK / 16, q, q_lo, q_hi, w_lo, w_hi, head_dim)
    ROW_FRAGS(of, DVP / 16, d_o, o_lo, o_hi, w_lo, w_hi, head_dim_v)
    float dq[DQK / 8][4];
    ZERO_TILES(dq, DQK / 8)
    /* The keys any row of the block sees, KEYS a step. */
    const band_range keys =
        band_keys(i0, min(i0 + BLOCK, (long)seqlen_q) - 1, diag,
                  window_left, window_right, seqlen_k);
    const long key_lo = keys.begin, key_hi = keys.end - 1;
    const int steps = key_hi >= key_lo ? (key_hi - key_lo) / KEYS + 1 : 0;
    if (steps > 0)
        STAGE_KEYS(k_s[0], v_s[0], key_lo);
#define LOAD_K_NK(BF, N0) frag_b_nk2(BF, k_s[cur], PQ, N0, kk * 16, g, t)
#define LOAD_V_NK(BF, N0) frag_b_nk2(BF, v_s[cur], PV, N0, kk * 16, g, t)
#define LOAD_K_KN(BF, N0) frag_b_kn2(BF, k_s[cur], PQ, ks * 16, N0, g, t)
    for (int step = 0; step < steps; ++step) {
        const int cur = step % KEY_STAGES, nxt = (step + 1) % KEY_STAGES;
        const long n0 = key_lo + (long)step * KEYS;
        const bool more = step + 1 < steps;
        if (KEY_STAGES > 1 && more) {
            /* the next step's keys fly while this one computes */
            STAGE_KEYS(k_s[nxt], v_s[nxt], n0 + KEYS);
            NV_CP_WAIT_1();
        } else {
            NV_CP_WAIT_ALL();
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        DQ_STEP(k_s[cur], v_s[cur], n0);
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with cur */
        if (KEY_STAGES == 1 && more)
            STAGE_KEYS(k_s[0], v_s[0], n0 + KEYS);
    }
#undef LOAD_K_NK
#undef LOAD_V_NK
#undef LOAD_K_KN
#pragma unroll
    for (int side = 0; side < 2; ++side) {
        if (rows[side] >= seqlen_q)
            continue;
        const ulong at = row_at(out_base.s1, d_q_stride, b, h, rows[side]);
#pragma unroll
        for (int n = 0; n < DQK / 8; ++n)
            store_pair(d_q, at, n * 8 + 2 * t, head_dim,
                       dq[n][2 * side] * scale, dq[n][2 * side + 1] * scale);
    }
}

#endif /* FLASHCL_NV_MMA */
