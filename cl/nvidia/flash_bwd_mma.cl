/*
 * flashcl: attention backward on NVIDIA tensor cores (mma.sync m16n8k16,
 * compute capability >= 8.0), fp16/bf16 storage, fp32 accumulation. The
 * dK/dV and dQ kernels of the Triton-tutorial structure; Delta and d_sinks
 * come from the portable program (cl/portable/flash_bwd.cl), whose argument
 * list (flash_bwd_args.clh) these kernels share, so one host fills both.
 *
 *   flashcl_bwd_dkdv  a work-group owns FLASHCL_NVB_WARPS * 16 keys of one
 *                     KV head (16 per warp, the mma's M side); it loops over
 *                     the query heads of the group in order, then over
 *                     FLASHCL_NVB_ROWS query rows at a time that see the
 *                     block, recomputing S^T = K Q^T and dP^T = V dO^T,
 *                     P^T = exp(S^T - LSE), dS^T = P^T (dP^T - Delta), and
 *                     accumulating dV += P^T dO and dK += dS^T Q in
 *                     registers;
 *   flashcl_bwd_dq    a work-group owns FLASHCL_NVB_WARPS * 16 query rows of
 *                     one head (Q and dO stay in registers as A fragments);
 *                     it loops over FLASHCL_NVB_KEYS keys at a time:
 *                     dQ += dS K.
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

#if 2 * BLOCK * (PQ + PV) + 2 * ROWS * (PQ + PV) + 8 * ROWS >                  \
    FLASHCL_LOCAL_MEM_BYTES
#error "flash_bwd_mma: the dK/dV kernel's tiles exceed local memory"
#endif
#if 2 * KEYS * (PQ + PV) > FLASHCL_LOCAL_MEM_BYTES
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

/* ACC[n] += A B for the n8 tiles n < TILES, B[k][n] = TILE[n][K0 + k]
 * (frag_b_nk2: k contiguous), in a kernel that names its lane g, t. A
 * macro: as a function like mma_tiles_kn it compiled to other PTX. */
#define MMA_TILES_NK(ACC, TILES, A, TILE, PITCH, K0)                           \
    _Pragma("unroll") for (int n = 0; n < (TILES); n += 2) {                   \
        uint bf[4];                                                            \
        frag_b_nk2(bf, TILE, PITCH, n * 8, K0, g, t);                          \
        MMA((ACC)[n], A, bf);                                                  \
        MMA((ACC)[n + 1], A, bf + 2);                                          \
    }

/* ACC[n] = 0 for the n8 tiles n < TILES (a macro, as MMA_TILES_NK). */
#define ZERO_TILES(ACC, TILES)                                                 \
    _Pragma("unroll") for (int n = 0; n < (TILES); ++n)                        \
        (ACC)[n][0] = (ACC)[n][1] = (ACC)[n][2] = (ACC)[n][3] = 0;

/* Row i's LSE and Delta (head h, batch b), from the kernel's arguments. */
#define ROW_LSE(b, h, i)                                                       \
    lse[lse_base + (ulong)(b) * lse_stride.s0 + (ulong)(h) * lse_stride.s1 +   \
        (ulong)(i) * lse_stride.s2]
#define ROW_DELTA(b, h, i) delta[((ulong)(b) * heads_q + (h)) * seqlen_q + (i)]

/* acc[n] += a B for the n8 tiles n < tiles, B[k][n] = tile[k0 + k][n]
 * (frag_b_kn2: n contiguous). */
inline void mma_tiles_kn(float acc[][4], int tiles, const uint a[4],
                         __local const ushort *tile, int pitch, int k0, int g,
                         int t)
{
#pragma unroll
    for (int n = 0; n < tiles; n += 2) {
        uint bf[4];
        frag_b_kn2(bf, tile, pitch, k0, n * 8, g, t);
        MMA(acc[n], a, bf);
        MMA(acc[n + 1], a, bf + 2);
    }
}

/* Rows [r0, r0 + rows) of one head into a local tile of `cols` (padded)
 * columns, zero past row `end` (exclusive) and past column `width`. */
inline void load_tile(__local ushort *dst, int pitch, int rows, int cols,
                      __global const ushort *src, ulong base, ulong4 stride,
                      int b, int h, long r0, long end, int width)
{
    const int chunks = cols / 8;
    for (int idx = get_local_id(0); idx < rows * chunks; idx += WG) {
        const int r = idx / chunks, c = idx % chunks;
        __local ushort *out = dst + r * pitch + 8 * c;
        const long row = r0 + r;
        if (row < end && 8 * c + 8 <= width) {
            *(__local uint4 *)out = *(__global const uint4 *)(
                src + row_at(base, stride, b, h, row) + 8 * c);
            continue;
        }
#pragma unroll
        for (int e = 0; e < 8; ++e)
            out[e] = row < end && 8 * c + e < width
                         ? src[row_at(base, stride, b, h, row) + 8 * c + e]
                         : 0;
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

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) NV_KERNEL_ATTR void
flashcl_bwd_dkdv(FLASHCL_BWD_PARAMS)
{
    __local ushort k_s[BLOCK * PQ] __attribute__((aligned(16)));
    __local ushort v_s[BLOCK * PV] __attribute__((aligned(16)));
    __local ushort q_s[ROWS * PQ] __attribute__((aligned(16)));
    __local ushort do_s[ROWS * PV] __attribute__((aligned(16)));
    __local float lse_s[ROWS], delta_s[ROWS];
    const int tid = get_local_id(0), warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int hk = get_group_id(1), b = get_group_id(2);
    const long j0 = (long)get_group_id(0) * BLOCK;
    load_tile(k_s, PQ, BLOCK, DQK, k, in_base.s1, k_stride, b, hk, j0,
              seqlen_k, head_dim);
    load_tile(v_s, PV, BLOCK, DVP, v, in_base.s2, v_stride, b, hk, j0,
              seqlen_k, head_dim_v);
    float dk[DQK / 8][4], dv[DVP / 8][4];
    ZERO_TILES(dk, DQK / 8)
    ZERO_TILES(dv, DVP / 8)
    /* The query rows that see any key of the block. */
    const band_range rows =
        band_rows(j0, min(j0 + BLOCK, (long)seqlen_k) - 1, diag, window_left,
                  window_right, seqlen_q);
    const long row_lo = rows.begin, row_hi = rows.end - 1;
    for (int member = 0; member < group_size; ++member) {
        const int h = hk * group_size + member;
        for (long r0 = row_lo; r0 <= row_hi; r0 += ROWS) {
            barrier(CLK_LOCAL_MEM_FENCE);
            load_tile(q_s, PQ, ROWS, DQK, q, in_base.s0, q_stride, b, h, r0,
                      row_hi + 1, head_dim);
            load_tile(do_s, PV, ROWS, DVP, d_o, out_base.s0, d_o_stride, b,
                      h, r0, row_hi + 1, head_dim_v);
            for (int r = tid; r < ROWS; r += WG) {
                const long i = min(r0 + r, (long)seqlen_q - 1);
                const bool live = r0 + r <= row_hi;
                lse_s[r] = live ? ROW_LSE(b, h, i) : -INFINITY;
                delta_s[r] = live ? ROW_DELTA(b, h, i) : 0;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* S^T and dP^T: 16 keys of this warp x ROWS query rows. */
            float s[ROWS / 8][4], d_p[ROWS / 8][4];
            ZERO_TILES(s, ROWS / 8)
            ZERO_TILES(d_p, ROWS / 8)
#pragma unroll
            for (int kk = 0; kk < DQK / 16; ++kk) {
                uint a[4];
                frag_a_ld(a, k_s, PQ, warp * 16, kk * 16, g, t);
                MMA_TILES_NK(s, ROWS / 8, a, q_s, PQ, kk * 16)
            }
#pragma unroll
            for (int kk = 0; kk < DVP / 16; ++kk) {
                uint a[4];
                frag_a_ld(a, v_s, PV, warp * 16, kk * 16, g, t);
                MMA_TILES_NK(d_p, ROWS / 8, a, do_s, PV, kk * 16)
            }
#pragma unroll
            for (int n = 0; n < ROWS / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const long j = j0 + warp * 16 + g + (e >= 2 ? 8 : 0);
                    const int il = n * 8 + 2 * t + (e & 1);
                    const long i = r0 + il;
                    const bool visible = SEES(lse_s[il] != -INFINITY, i, j);
                    float p;
                    d_p[n][e] = GRAD_SCORE(&p, s[n][e], d_p[n][e], lse_s[il],
                                           delta_s[il], visible, i, j);
                    s[n][e] = p;
                }
            /* dV += P^T dO and dK += dS^T Q over the ROWS rows. */
#pragma unroll
            for (int ks = 0; ks < ROWS / 16; ++ks) {
                uint a_p[4], a_ds[4];
                frag_a_of(a_p, s[2 * ks], s[2 * ks + 1]);
                frag_a_of(a_ds, d_p[2 * ks], d_p[2 * ks + 1]);
                mma_tiles_kn(dv, DVP / 8, a_p, do_s, PV, ks * 16, g, t);
                mma_tiles_kn(dk, DQK / 8, a_ds, q_s, PQ, ks * 16, g, t);
            }
        }
    }
#pragma unroll
    for (int side = 0; side < 2; ++side) {
        const long j = j0 + warp * 16 + g + 8 * side;
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

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) NV_KERNEL_ATTR void
flashcl_bwd_dq(FLASHCL_BWD_PARAMS)
{
    __local ushort k_s[KEYS * PQ] __attribute__((aligned(16)));
    __local ushort v_s[KEYS * PV] __attribute__((aligned(16)));
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
    const ulong q_lo = row_at(in_base.s0, q_stride, b, h,
                              min(rows[0], (long)seqlen_q - 1));
    const ulong q_hi = row_at(in_base.s0, q_stride, b, h,
                              min(rows[1], (long)seqlen_q - 1));
    const ulong o_lo = row_at(out_base.s0, d_o_stride, b, h,
                              min(rows[0], (long)seqlen_q - 1));
    const ulong o_hi = row_at(out_base.s0, d_o_stride, b, h,
                              min(rows[1], (long)seqlen_q - 1));
    const int w_lo = rows[0] < seqlen_q, w_hi = rows[1] < seqlen_q;
    ROW_FRAGS(qf, DQK / 16, q, q_lo, q_hi, w_lo, w_hi, head_dim)
    ROW_FRAGS(of, DVP / 16, d_o, o_lo, o_hi, w_lo, w_hi, head_dim_v)
    float dq[DQK / 8][4];
    ZERO_TILES(dq, DQK / 8)
    /* The keys any row of the block sees. */
    const band_range keys =
        band_keys(i0, min(i0 + BLOCK, (long)seqlen_q) - 1, diag, window_left,
                  window_right, seqlen_k);
    const long key_lo = keys.begin, key_hi = keys.end - 1;
    for (long n0 = key_lo; n0 <= key_hi; n0 += KEYS) {
        barrier(CLK_LOCAL_MEM_FENCE);
        load_tile(k_s, PQ, KEYS, DQK, k, in_base.s1, k_stride, b, hk, n0,
                  key_hi + 1, head_dim);
        load_tile(v_s, PV, KEYS, DVP, v, in_base.s2, v_stride, b, hk, n0,
                  key_hi + 1, head_dim_v);
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[KEYS / 8][4], d_p[KEYS / 8][4];
        ZERO_TILES(s, KEYS / 8)
        ZERO_TILES(d_p, KEYS / 8)
#pragma unroll
        for (int kk = 0; kk < DQK / 16; ++kk)
            MMA_TILES_NK(s, KEYS / 8, qf[kk], k_s, PQ, kk * 16)
#pragma unroll
        for (int kk = 0; kk < DVP / 16; ++kk)
            MMA_TILES_NK(d_p, KEYS / 8, of[kk], v_s, PV, kk * 16)
#pragma unroll
        for (int n = 0; n < KEYS / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int side = e >> 1;
                const long i = rows[side];
                const long j = n0 + n * 8 + 2 * t + (e & 1);
                const bool visible =
                    SEES(j <= key_hi && row_lse[side] != -INFINITY, i, j);
                float p;
                s[n][e] = GRAD_SCORE(&p, s[n][e], d_p[n][e], row_lse[side],
                                     row_delta[side], visible, i, j);
            }
        /* dQ += dS K over the KEYS keys. */
#pragma unroll
        for (int ks = 0; ks < KEYS / 16; ++ks) {
            uint a_ds[4];
            frag_a_of(a_ds, s[2 * ks], s[2 * ks + 1]);
            mma_tiles_kn(dq, DQK / 8, a_ds, k_s, PQ, ks * 16, g, t);
        }
    }
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
