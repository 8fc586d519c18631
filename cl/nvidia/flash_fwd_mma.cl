/*
 * flashcl: FlashAttention-2-class forward kernel for NVIDIA GPUs of compute
 * capability >= 8.0, written in OpenCL C with inline PTX (mma.sync m16n8k16,
 * ldmatrix, cp.async, shfl.sync). The host compiles this file only on NVIDIA
 * cc >= 8.0 and passes -DFLASHCL_NV_MMA=1; anywhere else the file
 * preprocesses to nothing (PoCL rejects asm).
 *
 * Work split (FlashAttention-2): a work-group owns FLASHCL_BLOCK_M query rows
 * of one (batch, head); each warp owns BLOCK_M / warps rows (16 or 32, i.e.
 * NV_MT m16 tiles). Q is read once: FLASHCL_NV_QREG of its D/16 k-slices
 * stay in registers as mma A fragments for the whole kernel, the others in
 * local memory (re-read by ldmatrix per key tile), so that 32 rows per warp
 * fit in 255 registers at D = 128. K and V stream through local memory in
 * tiles of FLASHCL_BLOCK_N keys, copied with cp.async:
 *   FLASHCL_NV_STAGES 1: one K and one V buffer; V[j] loads while S = Q K[j]^T
 *                        and the softmax run, K[j+1] loads while O += P V[j].
 *   FLASHCL_NV_STAGES 2: two buffers of each, one barrier per tile; tile
 *                        j+1 loads while tile j is computed.
 * See docs/nvidia-path.md for the measured tile table.
 * S stays in registers; the online softmax works in the exp2 domain with the
 * scale folded into one FMA, row max and sum reduce across the quad with
 * shuffles; P is repacked to 16-bit in registers as the A operand of P V.
 * Local rows are padded by 16 bytes so that ldmatrix is free of bank
 * conflicts for every head dim.
 *
 * Causal (bottom-right: query i sees key j iff j <= i + seqlen_k - seqlen_q;
 * top-left alignment, diag = 0: iff j <= i):
 * key tiles past a block's last visible key are never loaded; only tiles
 * that cross the diagonal (or the seqlen_k edge) are masked; a warp skips the
 * arithmetic of a tile none of its rows sees. Blocks run heaviest-first.
 * A row that sees no key writes O = 0 and LSE = -inf.
 *
 * Head dims: FLASHCL_HEAD_DIM / FLASHCL_HEAD_DIM_V are the padded sizes
 * (multiples of 16: the k16 step of Q K^T and the n16 pairs of P V), and
 * FLASHCL_NV_DQ / FLASHCL_NV_DV the real ones: loads zero-fill the padding
 * in local memory and registers, stores write only real columns, so the
 * caller's memory is never padded.
 *
 * Variants (cl/common/variants.clh): a band (causal, or a window bounded on
 * either side; only tiles crossing a band edge run mask code, tiles outside
 * it are never loaded); softcap, ALiBi, bias and mask through the shared
 * score code on scores scaled first (NV_PRESCALE, then the softmax runs
 * with unit scale, which also serves scale <= 0); sinks in the epilogue.
 *
 * Packed batches (FLASHCL_NV_VARLEN, FlashAttention's varlen): sequence b
 * of the grid owns the rows and keys its prefix sums give (read on the
 * device, clamped as the split-KV kernels clamp them: starts and ends to
 * [0, total], lengths to the maxima the grid was sized for); its blocks
 * past its rows return at once, and its diagonal is its own (bottom-right,
 * or top-left with FLASHCL_NV_VARLEN_TOP_LEFT). No bias or mask there.
 *
 * Host guarantees on this path: stride_dim == 1, every row start 16-byte
 * aligned (seq/head/batch strides and base offsets multiples of 8
 * elements), fp16 or bf16 storage.
 */
#ifndef FLASHCL_NV_MMA
#define FLASHCL_NV_MMA 0
#endif

#if FLASHCL_NV_MMA

#include "nv_mma.clh"

/* The switches' defaults and ranges: flash_fwd_mma_switches.clh. */
#include "flash_fwd_mma_defaults.clh"
#if FLASHCL_NV_SEQ_FIRST != 0 && !(FLASHCL_NV_SEQ_FIRST == 1 && FLASHCL_NV_VARLEN)
#error "flash_fwd_mma: FLASHCL_NV_SEQ_FIRST is 0, or 1 with FLASHCL_NV_VARLEN"
#endif
#if FLASHCL_NV_VARLEN && (FLASHCL_BIAS || FLASHCL_MASK)
#error "flash_fwd_mma: packed batches (FLASHCL_NV_VARLEN) take no bias or mask"
#endif
/* FLASHCL_NV_FIXUP 0: the fast pass, exponent 2^(fma(s, c, -m*c)); it marks blocks whose
 * rows had |m*c| >= 2^12 (where the rounding of m*c starts to show in P)
 * or a non-finite row sum with a NaN in O[row][0]. 1: the fix-up pass run
 * after it: marked blocks are recomputed with 2^((s - m) * c), exact
 * whatever the magnitude (bf16 inputs of magnitude 1e5 gave NaN in the
 * fast pass alone); the others return at once. A guard inside the fast
 * loop cost 6-13% on the H200 (bench/results/h200-2026-12-01-checks.md). */
/* FLASHCL_NV_QREG: k16 slices of Q (out of HEAD_DIM/16) held in registers;
 * the rest stays in local memory and is re-read by ldmatrix for every key
 * tile. Fewer registers let a warp own 32 rows (halving K/V local-memory
 * traffic per mma) at D = 128. FLASHCL_NV_STAGES: 1 or 2 K/V buffers.
 * Both default below, once the tile sizes are known. */
#if FLASHCL_NV_DQ > FLASHCL_HEAD_DIM || FLASHCL_NV_DQ + 16 <= FLASHCL_HEAD_DIM
#error "flash_fwd_mma: FLASHCL_HEAD_DIM must be FLASHCL_NV_DQ rounded up to 16"
#endif
#if FLASHCL_NV_DV > FLASHCL_HEAD_DIM_V ||                                      \
    FLASHCL_NV_DV + 16 <= FLASHCL_HEAD_DIM_V
#error "flash_fwd_mma: FLASHCL_HEAD_DIM_V must be FLASHCL_NV_DV rounded up to 16"
#endif
/* fp32 storage reaches this kernel only when the caller allowed TF32: Q
 * and P are rounded to TF32 (cvt.rna), K and V enter the mma as stored (it
 * reads their top 19 bits), accumulation stays fp32. */
#define NV_TF32 (FLASHCL_DTYPE == 0)
#define NV_ESZ (NV_TF32 ? 4 : 2)         /* bytes per stored element */
#define NV_CHUNK_ELEMS (16 / NV_ESZ)     /* elements per 16-byte chunk */
/* One mma k-step reads 32 bytes of a row: 16 fp16/bf16 (m16n8k16) or 8
 * fp32 (m16n8k8 tf32); the fragment byte layouts then coincide, so Q, K
 * and the ldmatrix addressing below serve both. */
#define NV_KSTEP_ELEMS (32 / NV_ESZ)
/* The shared argument list and score code. Storage is raw 16-bit words,
 * arithmetic fp32; softcap's tanh is MUFU.TANH (sm_75+). */
#if FLASHCL_DTYPE == 0
#define STORAGE_T uint
#else
#define STORAGE_T ushort
#endif
typedef float real_t;
#define FLASHCL_TANH(x) nv_tanh(x)
#define FLASHCL_SCORE_KEY_T int /* seqlen_q/k are ints on this path */
#define FLASHCL_HALF_BITS_TO_FLOAT(bits) nv_half_bits_to_float(bits)
#include "kernel_args.clh"
#define NV_WARPS (FLASHCL_WG_SIZE / 32)
#if FLASHCL_BLOCK_M != NV_WARPS * 16 && FLASHCL_BLOCK_M != NV_WARPS * 32
#error "flash_fwd_mma: FLASHCL_BLOCK_M must be 16 or 32 rows per warp"
#endif

/* Local memory per work-group that NVIDIA's OpenCL allows (a hard limit:
 * CL_DEVICE_LOCAL_MEM_SIZE, 48 KiB on every NVIDIA GPU seen so far; see
 * ../shared/notes/opencl-on-h200.md); its default is in the switch list. */
#define NV_LOCAL_LIMIT FLASHCL_LOCAL_MEM_BYTES
#define NV_D FLASHCL_HEAD_DIM    /* padded Q/K head dim */
#define NV_DVP FLASHCL_HEAD_DIM_V /* padded V/O head dim */
#define NV_DQ FLASHCL_NV_DQ
#define NV_DV FLASHCL_NV_DV
#define NV_PRESCALE (FLASHCL_NV_PRESCALE || FLASHCL_NEEDS_SCORE_PASS)
#define NV_BM FLASHCL_BLOCK_M
#define NV_BN FLASHCL_BLOCK_N
#define NV_WROWS (NV_BM / NV_WARPS) /* rows per warp */
#define NV_MT (NV_WROWS / 16)       /* m16 tiles per warp */
#define NV_NT (NV_BN / 8)           /* n8 tiles of S per warp */
#define NV_KC (NV_D / NV_KSTEP_ELEMS) /* k-steps of Q K^T */
#define NV_DT (NV_DVP / 8)          /* n8 tiles of O */
#define NV_CPR (NV_D / NV_CHUNK_ELEMS)   /* 16-byte chunks per K row */
#define NV_CPRV (NV_DVP / NV_CHUNK_ELEMS) /* 16-byte chunks per V row */
#define NV_WSTRIDE NV_WROWS /* rows between warps */
#define NV_MSTRIDE 16       /* rows between a warp's m16 tiles */
#define NV_ROWB (NV_D * NV_ESZ + 16)     /* padded local K row, bytes */
#define NV_ROWBV (NV_DVP * NV_ESZ + 16)  /* padded local V row, bytes */
#define NV_TILEB (NV_BN * NV_ROWB)  /* one K tile, bytes */
#define NV_TILEBV (NV_BN * NV_ROWBV) /* one V tile, bytes */
#define NV_STAGEB (NV_TILEB + NV_TILEBV) /* one K and one V tile */
/* Bias and mask: what the score pass reads besides S. */
#define NV_EXTRAS (FLASHCL_BIAS || FLASHCL_MASK)
/* FLASHCL_NV_KEY_PERM 1: the K and V rows of a tile are stored permuted,
 * so that the 2 * NV_NT S columns a lane holds (n8 tile n, element e) are
 * consecutive keys, t4 * 2 * NV_NT + 2n + e, instead of n * 8 + 2 * t4 + e.
 * Q K^T and P V do not change (P's columns and V's rows move together);
 * what changes is that a lane's bias and mask terms of a row are one
 * contiguous run of 2 * NV_NT elements, read with vector loads
 * (FLASHCL_NV_EXTRAS_VEC) instead of NV_NT pair loads. On by default
 * with bias or mask; the host may turn it off for comparisons. */
/* Key of S column (n8 tile n, element e) of this lane in the tile at n0,
 * and the tile row where key r of the tile is stored. */
#if FLASHCL_NV_KEY_PERM
#define NV_COL(n, e) (n0 + t4 * (2 * NV_NT) + (n) * 2 + (e))
#define NV_TILE_ROW(r)                                                         \
    ((((r) % (2 * NV_NT)) >> 1) * 8 + ((r) / (2 * NV_NT)) * 2 + ((r) & 1))
#else
#define NV_COL(n, e) (n0 + (n) * 8 + t4 * 2 + (e))
#define NV_TILE_ROW(r) (r)
#endif
/* FLASHCL_NV_EXTRAS_VEC 1 (set by the host): bias and mask rows are
 * contiguous (key stride 1) and every row start is aligned to a lane's
 * run of keys (16 bytes at most), so a full tile's terms load as vectors
 * through per-row pointers set up before the key loop. Needs the key
 * permutation. FLASHCL_NV_EXTRAS_AHEAD 1: the vector runs are loaded one
 * key tile ahead of their use; 0: at the start of their tile, before its
 * Q K^T. */
#if FLASHCL_NV_EXTRAS_VEC && !(FLASHCL_NV_KEY_PERM && NV_EXTRAS)
#error "flash_fwd_mma: FLASHCL_NV_EXTRAS_VEC needs bias or mask and FLASHCL_NV_KEY_PERM"
#endif
/* FLASHCL_NV_HEADS_FIRST 1: work-group dimension 0 runs over heads and 1
 * over query blocks, so that the blocks running at once share query rows
 * across heads: a bias or mask broadcast over heads is then read from
 * HBM about once and from L2 after (set by the host for such tensors). */
/* Defaults measured on the H200 (bench/results/): all of Q in registers
 * when a warp owns 16 rows, D <= 64 with BLOCK_N <= 64, or D <= 96; with 32 rows
 * per warp at D = 128, O alone takes 128 registers, so only 6 of Q's 8
 * k16 slices stay in registers (2 with single-buffered tiles). */
#ifndef FLASHCL_NV_QREG
#if NV_WROWS == 16 || (NV_D <= 64 && NV_BN <= 64) || NV_KC <= 6
#define FLASHCL_NV_QREG NV_KC
#elif NV_D <= 64
#define FLASHCL_NV_QREG 2
#elif 2 * NV_STAGEB + NV_BM * ((NV_KC - 6) * 32 + 16) <= NV_LOCAL_LIMIT
#define FLASHCL_NV_QREG 6
#else
#define FLASHCL_NV_QREG 2
#endif
#endif
#if FLASHCL_NV_QREG < 0 || FLASHCL_NV_QREG > NV_KC
#error "flash_fwd_mma: FLASHCL_NV_QREG must be in 0..NV_KC (k-steps of Q)"
#endif
/* Double-buffer K and V whenever two stages fit next to Q's local slices. */
#ifndef FLASHCL_NV_STAGES
#if 2 * NV_STAGEB + (FLASHCL_NV_QREG < NV_KC ? NV_BM * ((NV_KC - FLASHCL_NV_QREG) * 32 + 16) : 0) <= NV_LOCAL_LIMIT
#define FLASHCL_NV_STAGES 2
#else
#define FLASHCL_NV_STAGES 1
#endif
#endif
#if FLASHCL_NV_STAGES != 1 && FLASHCL_NV_STAGES != 2
#error "flash_fwd_mma: FLASHCL_NV_STAGES must be 1 or 2"
#endif
#define NV_KV_BYTES (FLASHCL_NV_STAGES * NV_STAGEB)
#define NV_QREG FLASHCL_NV_QREG
#define NV_QS_KC (NV_KC - NV_QREG) /* k16 slices of Q in local memory */
#if NV_QS_KC > 0
#define NV_QS_ROWB (NV_QS_KC * 32 + 16)
#define NV_QS_BYTES (NV_BM * NV_QS_ROWB)
#else
#define NV_QS_ROWB 16
#define NV_QS_BYTES 0
#endif
#define NV_SMEM_BYTES (NV_KV_BYTES + NV_QS_BYTES)
#if NV_SMEM_BYTES > NV_LOCAL_LIMIT
#error "flash_fwd_mma: K/V tiles exceed the device's local memory"
#endif

#if FLASHCL_DTYPE == 0
#define NV_MMA NV_MMA_TF32
#elif FLASHCL_DTYPE == 1
#define NV_MMA NV_MMA_F16
#define NV_PACK nv_pack_f16
#else
#define NV_MMA NV_MMA_BF16
#define NV_PACK nv_pack_bf16
#endif

/* Bytes of the 16-byte chunk at column `col` that lie before column `dlim`
 * (the rest is zero-filled: head-dim padding). */
#define NV_CHUNK_BYTES(col, dlim)                                              \
    ((uint)clamp(((dlim) - (col)) * NV_ESZ, 0, 16))
/* Issue the cp.async copies of NROWS rows x CPR 16-byte chunks (rows r0..
 * of `src`, row stride `rs` elements, starting at element COL0) into local
 * memory at byte address `dst` with row pitch ROWB; rows at or past `rmax`
 * and columns at or past DLIM are zero-filled. */
#define NV_LOAD_ROWS_(dst, src, rs, r0, rmax, NROWS, CPR, ROWB, COL0, DLIM,    \
                      CHECK, PERM)                                             \
    do {                                                                       \
        /* when CPR divides the group size a thread keeps its column and  \
         * steps WG/CPR rows per copy: one pointer and one local address \
         * per tensor stay live instead of one per copy */                \
        const bool even_ = FLASHCL_WG_SIZE % (CPR) == 0;                      \
        const int rt_ = tid / (CPR), ct_ = tid % (CPR);                        \
        const uint lt_ = (dst) + (uint)(rt_ * (ROWB) + ct_ * 16);              \
        __global const STORAGE_T *gt_ = (src) + (ulong)((r0) + rt_) * (rs) +   \
                                        (ulong)((COL0) + ct_ * NV_CHUNK_ELEMS);\
        _Pragma("unroll") for (int ci_ = 0;                                    \
                               ci_ < ((NROWS) * (CPR) + FLASHCL_WG_SIZE - 1) / \
                                         FLASHCL_WG_SIZE;                      \
                               ++ci_)                                          \
        {                                                                      \
            const int c_ = tid + ci_ * FLASHCL_WG_SIZE;                        \
            if (((NROWS) * (CPR)) % FLASHCL_WG_SIZE == 0 ||                    \
                c_ < (NROWS) * (CPR)) {                                        \
                const int r_ = even_ ? rt_ + ci_ * (FLASHCL_WG_SIZE / (CPR))   \
                                     : c_ / (CPR);                             \
                const int cc_ = even_ ? ct_ : c_ % (CPR);                      \
                const int row_ = (r0) + r_;                                    \
                const bool ok_ = !(CHECK) || row_ < (rmax);                    \
                __global const STORAGE_T *g_;                                  \
                if (even_ && !(CHECK))                                         \
                    g_ = gt_ + (ulong)(ci_ * (FLASHCL_WG_SIZE / (CPR))) * (rs); \
                else                                                           \
                    g_ = (src) + (ok_ ? (ulong)row_ * (rs) : (ulong)0) +       \
                         (ulong)((COL0) + cc_ * NV_CHUNK_ELEMS);               \
                const uint l_ =                                                \
                    (PERM) ? (dst) + (uint)(NV_TILE_ROW(r_) * (ROWB) +         \
                                            cc_ * 16)                          \
                    : even_ ? lt_ + (uint)(ci_ * (FLASHCL_WG_SIZE / (CPR)) *   \
                                           (ROWB))                             \
                            : (dst) + (uint)(r_ * (ROWB) + cc_ * 16);          \
                const uint bytes_ =                                            \
                    (COL0) + (CPR) * NV_CHUNK_ELEMS <= (DLIM)                  \
                        ? 16u                                                  \
                        : NV_CHUNK_BYTES((COL0) + cc_ * NV_CHUNK_ELEMS, DLIM); \
                NV_CP_ASYNC16(l_, g_, ok_ ? bytes_ : 0u);                      \
            }                                                                  \
        }                                                                      \
    } while (0)
/* Full tiles (the common case) skip the row checks. PERM: rows go where
 * NV_TILE_ROW puts them (K and V tiles). */
#define NV_LOAD_ROWS(dst, src, rs, r0, rmax, NROWS, CPR, ROWB, COL0, DLIM,     \
                     PERM)                                                     \
    do {                                                                       \
        if ((r0) + (NROWS) <= (rmax))                                          \
            NV_LOAD_ROWS_(dst, src, rs, r0, rmax, NROWS, CPR, ROWB, COL0,      \
                          DLIM, 0, PERM);                                      \
        else                                                                   \
            NV_LOAD_ROWS_(dst, src, rs, r0, rmax, NROWS, CPR, ROWB, COL0,      \
                          DLIM, 1, PERM);                                      \
    } while (0)
#define NV_LOAD_TILE(dst, src, rs, n0, nmax)                                   \
    NV_LOAD_ROWS(dst, src, rs, n0, nmax, NV_BN, NV_CPR, NV_ROWB, 0, NV_DQ,     \
                 FLASHCL_NV_KEY_PERM)
#define NV_LOAD_VTILE(dst, src, rs, n0, nmax)                                  \
    NV_LOAD_ROWS(dst, src, rs, n0, nmax, NV_BN, NV_CPRV, NV_ROWBV, 0, NV_DV,   \
                 FLASHCL_NV_KEY_PERM)

/* The 32-bit word of a Q row that holds element `col` (fp16/bf16: the
 * pair col, col + 1 with col even; fp32: col itself), zero past NV_DQ. */
static inline uint nv_q_word(__global const STORAGE_T *row, int col)
{
#if NV_TF32
    return col < NV_DQ ? row[col] : 0u;
#else
    if (col + 1 < NV_DQ)
        return *(__global const uint *)(row + col);
    return col < NV_DQ ? (uint)row[col] : 0u;
#endif
}
/* A fragment word of Q: as stored (TF32: rounded to nearest). */
#if NV_TF32
#define NV_Q_WORD(row, col, ok) nv_tf32(NV_Q_RAW(row, col, ok))
#else
#define NV_Q_WORD(row, col, ok) NV_Q_RAW(row, col, ok)
#endif
#define NV_Q_RAW(row, col, ok)                                                 \
    (!(ok) ? 0u                                                                \
           : (NV_DQ % NV_KSTEP_ELEMS == 0                                      \
                  ? *(__global const uint *)((row) + (col))                    \
                  : nv_q_word(row, col)))

/* A NaN of the storage type in raw form (the fix-up pass's marker). */
static inline bool nv_is_nan_bits(STORAGE_T bits)
{
#if NV_TF32
    return (bits & 0x7fffffffu) > 0x7f800000u;
#else
    return (bits & 0x7fffu) > (FLASHCL_DTYPE == 1 ? 0x7c00u : 0x7f80u);
#endif
}
#define NV_NAN_BITS (NV_TF32 ? 0x7fc00000u : 0x7fffu) /* NaN in each type */

/* Row max is known (mnew): P = 2^(EXPR) in place of S, row sums updated.
 * EXPR sees s (the raw score), m0 (the row max, 0 while none) and msc
 * (m0 * scale_log2). mx == -inf means nothing seen yet: arguments stay
 * finite-minus-inf, never inf - inf. */
#define NV_SOFTMAX_EXP(EXPR)                                                   \
    do {                                                                       \
        _Pragma("unroll") for (int mt = 0; mt < NV_MT; ++mt) {                 \
            _Pragma("unroll") for (int hh = 0; hh < 2; ++hh) {                 \
                const float mx = mnew[mt][hh];                                 \
                row_max[mt][hh] = mx;                                          \
                const float m0 = mx == -INFINITY ? 0.f : mx;                   \
                const float msc = m0 * sl2;                                    \
                float sum = 0.f;                                               \
                _Pragma("unroll") for (int n = 0; n < NV_NT; ++n) {            \
                    float s = sc[mt][n][hh * 2];                               \
                    const float p0 = nv_ex2(EXPR);                             \
                    s = sc[mt][n][hh * 2 + 1];                                 \
                    const float p1 = nv_ex2(EXPR);                             \
                    sc[mt][n][hh * 2] = p0;                                    \
                    sc[mt][n][hh * 2 + 1] = p1;                                \
                    sum += p0 + p1;                                            \
                }                                                              \
                row_sum[mt][hh] += sum;                                        \
                (void)msc;                                                     \
                (void)m0;                                                      \
            }                                                                  \
        }                                                                      \
    } while (0)

/* Bias and mask are read from global memory into registers: the loads of
 * a tile are issued before its Q K^T (NV_FETCH_EXTRAS), so that their
 * latency hides behind the mma, and consumed by NV_SCORE_PASS. With the
 * key permutation and FLASHCL_NV_EXTRAS_VEC, a lane's terms of a row are
 * one run of NV_XRUN bytes read in NV_XCH-byte vectors; otherwise they go
 * pair by pair through the shared score code. */
#if FLASHCL_MASK && NV_NT * 2 > 32
#error "flash_fwd_mma: the mask bits of a row need BLOCK_N <= 128"
#endif
#if FLASHCL_NV_EXTRAS_VEC
/* Loads the run of `BYTES` bytes at `ptr` (aligned to min(16, BYTES))
 * into the uint words W[0 .. BYTES / 4). */
#define NV_LOAD_RUN(W, ptr, BYTES)                                             \
    do {                                                                       \
        __global const uchar *p_ = (__global const uchar *)(ptr);              \
        if ((BYTES) >= 16) {                                                   \
            _Pragma("unroll") for (int i_ = 0; i_ < (BYTES) / 16; ++i_) {      \
                const uint4 v_ = ((__global const uint4 *)p_)[i_];             \
                W[4 * i_] = v_.x;                                              \
                W[4 * i_ + 1] = v_.y;                                          \
                W[4 * i_ + 2] = v_.z;                                          \
                W[4 * i_ + 3] = v_.w;                                          \
            }                                                                  \
        } else if ((BYTES) == 8) {                                             \
            const uint2 v_ = *(__global const uint2 *)p_;                      \
            W[0] = v_.x;                                                       \
            W[((BYTES) / 4) - 1] = v_.y;                                       \
        } else {                                                               \
            W[0] = *(__global const uint *)p_;                                 \
        }                                                                      \
    } while (0)
/* A bias word's element i of a run (raw storage to float). */
#if FLASHCL_BIAS == 1
#define NV_BIAS_ESZ 4
#define NV_BIAS_ELEM(W, i) as_float(W[i])
#elif FLASHCL_BIAS == 2
#define NV_BIAS_ESZ 2
#define NV_BIAS_ELEM(W, i)                                                     \
    nv_half_bits_to_float((ushort)(W[(i) >> 1] >> (((i)&1) * 16)))
#else
#define NV_BIAS_ESZ 2
#define NV_BIAS_ELEM(W, i)                                                     \
    as_float(((i)&1) ? (W[(i) >> 1] & 0xffff0000u) : (W[(i) >> 1] << 16))
#endif
#define NV_BIAS_RUN (2 * NV_NT * NV_BIAS_ESZ) /* bytes of a lane's run */
#define NV_MASK_RUN (2 * NV_NT)
#define NV_RUN_OK(b) ((b) == 4 || (b) == 8 || (b) % 16 == 0)
#if (FLASHCL_BIAS && !NV_RUN_OK(NV_BIAS_RUN)) ||                              \
    (FLASHCL_MASK && !NV_RUN_OK(NV_MASK_RUN))
#error "flash_fwd_mma: FLASHCL_NV_EXTRAS_VEC needs runs of 4, 8 or 16k bytes"
#endif
#endif

#if FLASHCL_NV_EXTRAS_VEC
/* The raw runs of the tile at key nn0 go into xb_next / xm_next, one tile
 * ahead of their use (a whole tile of latency hidden; converted only in
 * the score pass, so nothing waits on them before). Full tiles of real
 * rows: vectors; the last tile (past seqlen_k) and rows past seqlen_q:
 * element by element, bounds checked, 0 (no bias; hidden) outside. */
#define NV_FETCH_RUNS(nn0)                                                     \
    do {                                                                       \
        const bool full_ = (nn0) + NV_BN <= seqlen_k;                          \
        const int key0_ = (nn0) + t4 * (2 * NV_NT);                            \
        _Pragma("unroll") for (int mt = 0; mt < NV_MT; ++mt) {                 \
            _Pragma("unroll") for (int hh = 0; hh < 2; ++hh) {                 \
                const int row = wr0 + mt * NV_MSTRIDE + g + hh * 8;            \
                const bool row_ok = row < seqlen_q;                            \
                if (FLASHCL_BIAS && row_ok && full_) {                         \
                    NV_LOAD_RUN(xb_next[mt][hh], xbias[mt][hh] + (nn0),        \
                                NV_BIAS_RUN);                                  \
                } else if (FLASHCL_BIAS) {                                     \
                    _Pragma("unroll") for (int w_ = 0; w_ < NV_BIAS_WORDS;     \
                                           ++w_) {                             \
                        const int per_ = 4 / NV_BIAS_ESZ; /* elements */       \
                        uint word_ = 0;                                        \
                        _Pragma("unroll") for (int i_ = 0; i_ < per_; ++i_) {  \
                            const int k_ = w_ * per_ + i_;                     \
                            if (row_ok && key0_ + k_ < seqlen_k)               \
                                word_ |= (uint)NV_BIAS_RAW(                    \
                                             xbias[mt][hh][(nn0) + k_])        \
                                         << (i_ * 16);                         \
                        }                                                      \
                        xb_next[mt][hh][w_] = word_;                           \
                    }                                                          \
                }                                                              \
                if (FLASHCL_MASK && row_ok && full_) {                         \
                    NV_LOAD_RUN(xm_next[mt][hh], xmask[mt][hh] + (nn0),        \
                                NV_MASK_RUN);                                  \
                } else if (FLASHCL_MASK) {                                     \
                    _Pragma("unroll") for (int w_ = 0; w_ < NV_MASK_WORDS;     \
                                           ++w_) {                             \
                        uint word_ = 0;                                        \
                        _Pragma("unroll") for (int i_ = 0; i_ < 4; ++i_) {     \
                            const int k_ = w_ * 4 + i_;                        \
                            if (row_ok && k_ < NV_MASK_RUN &&                  \
                                key0_ + k_ < seqlen_k &&                       \
                                xmask[mt][hh][(nn0) + k_] != 0)                \
                                word_ |= 1u << (i_ * 8);                       \
                        }                                                      \
                        xm_next[mt][hh][w_] = word_;                           \
                    }                                                          \
                }                                                              \
            }                                                                  \
        }                                                                      \
    } while (0)
#if FLASHCL_BIAS == 1
#define NV_BIAS_RAW(x) as_uint(x)
#else
#define NV_BIAS_RAW(x) (x)
#endif
#define NV_BIAS_WORDS (NV_BIAS_RUN >= 4 ? NV_BIAS_RUN / 4 : 1)
#define NV_MASK_WORDS (NV_MASK_RUN >= 4 ? NV_MASK_RUN / 4 : 1)
/* Terms of S column (n, e): element 2n + e of the lane's runs. */
#define NV_BIAS_TERM(mt, hh, n, e)                                             \
    (NV_BIAS_ELEM(xb_cur[mt][hh], 2 * (n) + (e)) * M_LOG2E_F)
#define NV_VISIBLE(mt, hh, n, e)                                               \
    (((xm_cur[mt][hh][(2 * (n) + (e)) >> 2] >>                                 \
       (((2 * (n) + (e)) & 3) * 8)) & 0xffu) != 0)
#else
/* Pair by pair (no vector runs): the terms of tile n0, fetched at the
 * tile, through the shared score code. */
#define NV_FETCH_EXTRAS()                                                      \
    do {                                                                       \
        _Pragma("unroll") for (int mt = 0; mt < NV_MT; ++mt) {                 \
            _Pragma("unroll") for (int hh = 0; hh < 2; ++hh) {                 \
                const int row = wr0 + mt * NV_MSTRIDE + g + hh * 8;            \
                uint bits_ = 0;                                                \
                _Pragma("unroll") for (int n = 0; n < NV_NT; ++n) {            \
                    const int col = NV_COL(n, 0);                              \
                    const bool in = row < seqlen_q && col < seqlen_k;          \
                    const bool both = col + 1 < seqlen_k;                      \
                    float t0 = 0.f, t1 = 0.f;                                  \
                    if (in) {                                                  \
                        if (FLASHCL_BIAS)                                      \
                            score_bias_pair(&srow[mt][hh], col, both, &t0,     \
                                            &t1 FLASHCL_VARIANT_NAMES);        \
                        if (FLASHCL_MASK)                                      \
                            bits_ |= score_visible_pair(                       \
                                         &srow[mt][hh], col,                   \
                                         both FLASHCL_VARIANT_NAMES)           \
                                     << (n * 2);                               \
                    }                                                          \
                    if (FLASHCL_BIAS) {                                        \
                        bias_term[mt][n][hh * 2] = t0;                         \
                        bias_term[mt][n][hh * 2 + 1] = t1;                     \
                    }                                                          \
                }                                                              \
                visible_bits[mt][hh] = bits_;                                  \
            }                                                                  \
        }                                                                      \
    } while (0)
#define NV_BIAS_TERM(mt, hh, n, e) bias_term[mt][n][(hh) * 2 + (e)]
#define NV_VISIBLE(mt, hh, n, e) ((visible_bits[mt][hh] >> ((n) * 2 + (e))) & 1u)
#endif

/* Scores of one m16 x BLOCK_N tile, scaled, through the variants' score
 * code (softcap, ALiBi, bias, mask), in exp2 units. The mask bit of S
 * column (n, e) is bit 2n + e: with the key permutation that is also the
 * key's place in the lane's run. */
#define NV_SCORE_PASS()                                                        \
    do {                                                                       \
        _Pragma("unroll") for (int mt = 0; mt < NV_MT; ++mt) {                 \
            _Pragma("unroll") for (int hh = 0; hh < 2; ++hh) {                 \
                _Pragma("unroll") for (int n = 0; n < NV_NT; ++n) {            \
                    _Pragma("unroll") for (int e = 0; e < 2; ++e) {            \
                        const float s0 = sc[mt][n][hh * 2 + e] * scale_log2;   \
                        sc[mt][n][hh * 2 + e] = score_apply_with(              \
                            &srow[mt][hh], NV_COL(n, e), s0,                   \
                            FLASHCL_BIAS ? NV_BIAS_TERM(mt, hh, n, e) : 0.f,   \
                            !FLASHCL_MASK || NV_VISIBLE(mt, hh, n, e));        \
                    }                                                          \
                }                                                              \
            }                                                                  \
        }                                                                      \
    } while (0)

#if FLASHCL_NV_VARLEN
#include "packed_span.clh"
#define NV_VARLEN_PARAMS FLASHCL_VARLEN_ARGS(FLASHCL_KPARAM)
#else
#define NV_VARLEN_PARAMS
#endif

__kernel __attribute__((reqd_work_group_size(FLASHCL_WG_SIZE, 1, 1))) void
flashcl_attention_fwd(FLASHCL_FWD_PARAMS NV_VARLEN_PARAMS)
{
    __local uint4 smem[NV_SMEM_BYTES / 16] __attribute__((aligned(16)));
#if FLASHCL_NV_FIXUP
    __local int nv_marked;
#endif
    (void)head_dim; /* == FLASHCL_NV_DQ on this path */
    (void)head_dim_v;

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2; /* row within an m16 tile (and +8) */
    const int t4 = lane & 3; /* column pair within an n8 tile */

    /* Heaviest causal blocks (largest query index) first. A causal packed
     * batch runs sequences fastest (FLASHCL_NV_SEQ_FIRST: grid (batch,
     * heads, blocks)), so that the heaviest blocks of every sequence go
     * out before any lighter one: sequences of mixed lengths otherwise
     * leave the longest one's heavy blocks for the tail. */
#if FLASHCL_NV_SEQ_FIRST
    const int nqb = (int)get_num_groups(2);
    const int qb = nqb - 1 - (int)get_group_id(2);
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(0);
#elif FLASHCL_NV_HEADS_FIRST
    const int nqb = (int)get_num_groups(1);
    const int qb = nqb - 1 - (int)get_group_id(1);
    const int h = (int)get_group_id(0);
    const int b = (int)get_group_id(2);
#else
    const int nqb = (int)get_num_groups(0);
    const int qb = nqb - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
#endif
    const int hk = h / group_size;
#if FLASHCL_NV_VARLEN
    /* Sequence b's rows and keys; the lengths, the diagonal and the
     * tensors' sequence offsets below are its own (the grid's seqlen_q
     * and seqlen_k are the maxima). */
    const packed_span q_span = packed_span_of(cu_q, len_base.s0,
                                              len_stride.s0, b, total_q,
                                              seqlen_q);
    const packed_span k_span = packed_span_of(cu_k, len_base.s1,
                                              len_stride.s1, b, total_k,
                                              seqlen_k);
    if (qb * NV_BM >= q_span.count)
        return; /* uniform: the block is past this sequence's rows */
    {
    const int seqlen_q = q_span.count, seqlen_k = k_span.count;
    const long diag =
        aligned_diag(FLASHCL_NV_VARLEN_TOP_LEFT, seqlen_q, seqlen_k);
    const ulong q_seq = (ulong)q_span.first * q_stride.z;
    const ulong k_seq = (ulong)k_span.first * k_stride.z;
    const ulong v_seq = (ulong)k_span.first * v_stride.z;
    const ulong o_seq = (ulong)q_span.first * o_stride.z;
    const ulong lse_seq = (ulong)q_span.first * lse_stride.z;
#else
    const ulong q_seq = (ulong)b * q_stride.x, k_seq = (ulong)b * k_stride.x;
    const ulong v_seq = (ulong)b * v_stride.x, o_seq = (ulong)b * o_stride.x;
    const ulong lse_seq = (ulong)b * lse_stride.x;
#endif

    const int m0 = qb * NV_BM;
    const int wr0 = m0 + warp * NV_WSTRIDE; /* first row of this warp */
    /* Row i sees key j iff j in [i + diag - left, i + diag + right]; the
     * host clamps the bounds to the sequences, so ints hold them. */
    const int nv_diag = (int)diag;
#if FLASHCL_CAUSAL
    const int right = (int)window_right;
#endif
#if FLASHCL_WINDOW_LEFT
    const int left = (int)window_left;
#endif
    /* After NV_PRESCALE the scores are in exp2 units already. */
    const float sl2 = NV_PRESCALE ? 1.f : scale_log2;

    __global const STORAGE_T *qp = q + base.x + q_seq + (ulong)h * q_stride.y;
    __global const STORAGE_T *kp = k + base.y + k_seq + (ulong)hk * k_stride.y;
    __global const STORAGE_T *vp = v + base.z + v_seq + (ulong)hk * v_stride.y;
    __global STORAGE_T *op = o + base.w + o_seq + (ulong)h * o_stride.y;
    const ulong qs = q_stride.z, ks = k_stride.z, vs = v_stride.z,
                os = o_stride.z;
#if FLASHCL_NV_FIXUP
    /* Only the blocks the fast pass marked (a NaN in O[row][0]). */
    if (tid == 0)
        nv_marked = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = tid; r < NV_BM; r += FLASHCL_WG_SIZE)
        if (m0 + r < seqlen_q && nv_is_nan_bits(op[(ulong)(m0 + r) * os]))
            nv_marked = 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!nv_marked)
        return;
#endif

    /* ---- key range of this block ------------------------------------- */
    const int mlast = min(m0 + NV_BM, seqlen_q); /* exclusive */
    /* last row of this warp (inclusive) */
    const int warp_last = min(wr0 + (NV_MT - 1) * NV_MSTRIDE + 16, seqlen_q) - 1;
#if FLASHCL_CAUSAL
    const int n_end = clamp(mlast - 1 + nv_diag + right + 1, 0, seqlen_k);
    /* keys past this one are hidden from some row of the block */
    const int free_hi = m0 + nv_diag + right;
    const int warp_last_key = warp_last + nv_diag + right;
#else
    const int n_end = seqlen_k;
#endif
#if FLASHCL_WINDOW_LEFT
    const int n_begin = clamp(m0 + nv_diag - left, 0, n_end);
    /* keys before this one are hidden from some row of the block */
    const int free_lo = mlast - 1 + nv_diag - left;
    const int warp_first_key = wr0 + nv_diag - left;
#else
    const int n_begin = 0;
#endif
    const int j_begin = n_begin / NV_BN;
    const int j_end = n_end > n_begin ? (n_end + NV_BN - 1) / NV_BN : j_begin;
    const bool warp_rows = wr0 < seqlen_q;

    /* ---- Q fragments straight from global memory into registers ------- */
    uint qf[NV_MT][NV_QREG > 0 ? NV_QREG : 1][4];
#pragma unroll
    for (int mt = 0; mt < NV_MT; ++mt) {
        const int r0 = wr0 + mt * NV_MSTRIDE + g, r1 = r0 + 8;
        __global const STORAGE_T *q0 = qp + (ulong)r0 * qs;
        __global const STORAGE_T *q1 = qp + (ulong)r1 * qs;
        const bool ok0 = r0 < seqlen_q, ok1 = r1 < seqlen_q;
        /* word t4 of the k-step's first and second 16 bytes */
        const int kstep_half = NV_KSTEP_ELEMS / 2;
#pragma unroll
        for (int c = 0; c < NV_QREG; ++c) {
            const int col = c * NV_KSTEP_ELEMS + t4 * (4 / NV_ESZ);
            qf[mt][c][0] = NV_Q_WORD(q0, col, ok0);
            qf[mt][c][1] = NV_Q_WORD(q1, col, ok1);
            qf[mt][c][2] = NV_Q_WORD(q0, col + kstep_half, ok0);
            qf[mt][c][3] = NV_Q_WORD(q1, col + kstep_half, ok1);
        }
    }

#if NV_PRESCALE
    /* What each row's score code needs, once (not per key tile). */
    score_row srow[NV_MT][2];
#if FLASHCL_NV_EXTRAS_VEC
    /* Each row's bias and mask at this lane's run of keys in tile 0. */
    __global const BIAS_T *xbias[NV_MT][2];
    __global const uchar *xmask[NV_MT][2];
#endif
#pragma unroll
    for (int mt = 0; mt < NV_MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int row = wr0 + mt * NV_MSTRIDE + g + hh * 8;
            srow[mt][hh] = score_row_init(b, h, row, diag,
                                          M_LOG2E_F FLASHCL_VARIANT_NAMES);
#if FLASHCL_NV_EXTRAS_VEC
#if FLASHCL_BIAS
            xbias[mt][hh] = bias + srow[mt][hh].bias_row + t4 * (2 * NV_NT);
#endif
#if FLASHCL_MASK
            xmask[mt][hh] = mask + srow[mt][hh].mask_row + t4 * (2 * NV_NT);
#endif
#endif
        }
#endif

    float acc[NV_MT][NV_DT][4];
    float row_max[NV_MT][2]; /* running max of the raw scores */
    float row_sum[NV_MT][2]; /* this thread's partial sum (quad-reduced at end) */
#pragma unroll
    for (int mt = 0; mt < NV_MT; ++mt) {
#pragma unroll
        for (int d = 0; d < NV_DT; ++d)
            acc[mt][d][0] = acc[mt][d][1] = acc[mt][d][2] = acc[mt][d][3] = 0.f;
        row_max[mt][0] = row_max[mt][1] = -INFINITY;
        row_sum[mt][0] = row_sum[mt][1] = 0.f;
    }

    /* ---- local memory: K and V tiles, padded rows --------------------- */
    const uint sbase = (uint)(size_t)smem;
    /* ldmatrix row addresses of this lane inside a tile: lanes 8i..8i+7
     * point at rows of matrix i. */
    const int mi = lane >> 3, mr = lane & 7;
    /* K (no trans): matrix i = keys +8*(i>>1), dims +8*(i&1). */
    const uint k_lane = (uint)((((mi >> 1) << 3) + mr) * NV_ROWB + ((mi & 1) << 4));
    /* V (trans): matrix i = keys +8*(i&1), dims +8*(i>>1). */
    const uint v_lane = (uint)((((mi & 1) << 3) + mr) * NV_ROWBV + ((mi >> 1) << 4));

#if FLASHCL_NV_STAGES == 1
#define NV_KBUF(j) sbase
#define NV_VBUF(j) (sbase + NV_TILEB)
#else
#define NV_KBUF(j) (sbase + (uint)(((j)&1) * NV_STAGEB))
#define NV_VBUF(j) (sbase + (uint)(((j)&1) * NV_STAGEB + NV_TILEB))
#endif

    float sc[NV_MT][NV_NT][4];
#if NV_QS_KC > 0
    /* Q slices kept in local memory (rows of the block, zero past seqlen_q) */
    const uint sQ = sbase + NV_KV_BYTES;
    const uint q_lane = sQ + (uint)((warp * NV_WSTRIDE + ((mi & 1) << 3) + mr) *
                                        NV_QS_ROWB + ((mi >> 1) << 4));
#endif

    if (j_end > j_begin) {
#if NV_QS_KC > 0
        NV_LOAD_ROWS(sQ, qp, qs, m0, seqlen_q, NV_BM, NV_QS_KC * 2, NV_QS_ROWB,
                     NV_QREG * NV_KSTEP_ELEMS, NV_DQ, 0);
#endif
        NV_LOAD_TILE(NV_KBUF(j_begin), kp, ks, j_begin * NV_BN, seqlen_k);
#if FLASHCL_NV_STAGES == 2
        NV_LOAD_VTILE(NV_VBUF(j_begin), vp, vs, j_begin * NV_BN, seqlen_k);
#endif
        NV_CP_COMMIT();
    }

#if FLASHCL_NV_EXTRAS_VEC
    uint xb_next[NV_MT][2][NV_BIAS_WORDS], xm_next[NV_MT][2][NV_MASK_WORDS];
    (void)xb_next;
    (void)xm_next;
    if (FLASHCL_NV_EXTRAS_AHEAD && j_end > j_begin)
        NV_FETCH_RUNS(j_begin * NV_BN);
#endif
    for (int j = j_begin; j < j_end; ++j) {
        const int n0 = j * NV_BN;
#if FLASHCL_NV_STAGES == 1
        NV_CP_WAIT_ALL();
        barrier(CLK_LOCAL_MEM_FENCE); /* K[j] landed; V buffer free */
        NV_LOAD_VTILE(NV_VBUF(j), vp, vs, n0, seqlen_k);
        NV_CP_COMMIT();
#else
        /* One barrier per tile: after it, tile j has landed for everyone
         * and every warp has finished tile j-1, whose buffers then take
         * tile j+1 while tile j is computed. */
        NV_CP_WAIT_ALL();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (j + 1 < j_end) {
            NV_LOAD_TILE(NV_KBUF(j + 1), kp, ks, n0 + NV_BN, seqlen_k);
            NV_LOAD_VTILE(NV_VBUF(j + 1), vp, vs, n0 + NV_BN, seqlen_k);
            NV_CP_COMMIT();
        }
#endif

        /* a warp skips the arithmetic of a tile none of its rows sees */
        bool active = warp_rows;
#if FLASHCL_CAUSAL
        active = active && n0 <= warp_last_key;
#endif
#if FLASHCL_WINDOW_LEFT
        active = active && n0 + NV_BN - 1 >= warp_first_key;
#endif
        /* tiles inside the band for every row of the block skip the mask */
        bool edge = n0 + NV_BN > seqlen_k;
#if FLASHCL_CAUSAL
        edge = edge || n0 + NV_BN - 1 > free_hi;
#endif
#if FLASHCL_WINDOW_LEFT
        edge = edge || n0 < free_lo;
#endif
        /* what the score pass reads besides S (dummies when unused) */
        float bias_term[NV_MT][FLASHCL_BIAS ? NV_NT : 1][4];
        uint visible_bits[NV_MT][2];
        (void)bias_term;
        (void)visible_bits;
#if FLASHCL_NV_EXTRAS_VEC
        /* this tile's runs arrived during the last tile; the next's go
         * (FLASHCL_NV_EXTRAS_AHEAD 0: this tile's, now) */
        if (!FLASHCL_NV_EXTRAS_AHEAD)
            NV_FETCH_RUNS(n0);
        uint xb_cur[NV_MT][2][NV_BIAS_WORDS], xm_cur[NV_MT][2][NV_MASK_WORDS];
#pragma unroll
        for (int mt = 0; mt < NV_MT; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
                for (int w = 0; w < NV_BIAS_WORDS; ++w)
                    xb_cur[mt][hh][w] = xb_next[mt][hh][w];
#pragma unroll
                for (int w = 0; w < NV_MASK_WORDS; ++w)
                    xm_cur[mt][hh][w] = xm_next[mt][hh][w];
            }
        if (FLASHCL_NV_EXTRAS_AHEAD && j + 1 < j_end)
            NV_FETCH_RUNS(n0 + NV_BN);
        (void)xb_cur;
        (void)xm_cur;
#endif
        if (active) {
#if NV_EXTRAS && !FLASHCL_NV_EXTRAS_VEC
            NV_FETCH_EXTRAS();
#endif
            /* ---- S = Q K^T ------------------------------------------- */
            const uint kb = NV_KBUF(j) + k_lane;
#pragma unroll
            for (int mt = 0; mt < NV_MT; ++mt)
#pragma unroll
                for (int n = 0; n < NV_NT; ++n)
                    sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.f;
#pragma unroll
            for (int c = 0; c < NV_KC; ++c) {
                uint qa[NV_MT][4];
#pragma unroll
                for (int mt = 0; mt < NV_MT; ++mt) {
                    if (c < NV_QREG) {
                        qa[mt][0] = qf[mt][c < NV_QREG ? c : 0][0];
                        qa[mt][1] = qf[mt][c < NV_QREG ? c : 0][1];
                        qa[mt][2] = qf[mt][c < NV_QREG ? c : 0][2];
                        qa[mt][3] = qf[mt][c < NV_QREG ? c : 0][3];
                    }
#if NV_QS_KC > 0
                    else {
                        NV_LDSM_X4(qa[mt], q_lane + (uint)(mt * NV_MSTRIDE * NV_QS_ROWB +
                                                           (c - NV_QREG) * 32));
                    }
#endif
                }
#pragma unroll
                for (int p = 0; p < NV_NT / 2; ++p) {
                    uint kf[4];
                    NV_LDSM_X4(kf, kb + (uint)(p * 16 * NV_ROWB + c * 32));
#pragma unroll
                    for (int mt = 0; mt < NV_MT; ++mt) {
                        NV_MMA(sc[mt][2 * p], qa[mt][0], qa[mt][1], qa[mt][2],
                               qa[mt][3], kf[0], kf[1]);
                        NV_MMA(sc[mt][2 * p + 1], qa[mt][0], qa[mt][1],
                               qa[mt][2], qa[mt][3], kf[2], kf[3]);
                    }
                }
            }

#if NV_PRESCALE
            NV_SCORE_PASS();
#endif
            /* ---- band mask: only on tiles crossing an edge ------------ */
            if (edge) {
#pragma unroll
                for (int mt = 0; mt < NV_MT; ++mt) {
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int row = wr0 + mt * NV_MSTRIDE + g + hh * 8;
#if FLASHCL_CAUSAL
                        const int hi = min(row + nv_diag + right, seqlen_k - 1);
#else
                        const int hi = seqlen_k - 1;
#endif
#if FLASHCL_WINDOW_LEFT
                        const int lo = row + nv_diag - left;
#else
                        const int lo = 0;
#endif
#pragma unroll
                        for (int n = 0; n < NV_NT; ++n) {
                            const int col = NV_COL(n, 0);
                            if (col > hi || col < lo)
                                sc[mt][n][hh * 2] = -INFINITY;
                            if (col + 1 > hi || col + 1 < lo)
                                sc[mt][n][hh * 2 + 1] = -INFINITY;
                        }
                    }
                }
            }

            /* ---- online softmax (exp2 domain, scale folded) ---------- */
            float mnew[NV_MT][2];
            bool grew = false;
#pragma unroll
            for (int mt = 0; mt < NV_MT; ++mt) {
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    float mx = row_max[mt][hh];
#pragma unroll
                    for (int n = 0; n < NV_NT; ++n)
                        mx = fmax(mx, fmax(sc[mt][n][hh * 2], sc[mt][n][hh * 2 + 1]));
                    mx = fmax(mx, nv_shfl_xor(mx, 1));
                    mx = fmax(mx, nv_shfl_xor(mx, 2));
                    mnew[mt][hh] = mx;
                    grew |= mx > row_max[mt][hh];
                }
            }
            /* Rescale O only when some row of the warp got a new maximum:
             * after the first tiles that is rare, and alpha would be 1. */
            if (nv_warp_any(grew))
            {
#pragma unroll
                for (int mt = 0; mt < NV_MT; ++mt) {
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const float mx = mnew[mt][hh];
                        const float alpha =
                            mx == -INFINITY ? 1.f : nv_ex2((row_max[mt][hh] - mx) * sl2);
                        row_sum[mt][hh] *= alpha;
#pragma unroll
                        for (int d = 0; d < NV_DT; ++d) {
                            acc[mt][d][hh * 2] *= alpha;
                            acc[mt][d][hh * 2 + 1] *= alpha;
                        }
                    }
                }
            }
            /* p = 2^(s*c - m*c): see FLASHCL_NV_FIXUP. */
#if FLASHCL_NV_FIXUP
            NV_SOFTMAX_EXP((s - m0) * sl2);
#else
            NV_SOFTMAX_EXP(fma(s, sl2, -msc));
#endif
        }

#if FLASHCL_NV_STAGES == 1
        NV_CP_WAIT_ALL();
        barrier(CLK_LOCAL_MEM_FENCE); /* V[j] landed; K buffer free */
        if (j + 1 < j_end) {
            NV_LOAD_TILE(NV_KBUF(j + 1), kp, ks, n0 + NV_BN, seqlen_k);
            NV_CP_COMMIT();
        }
#endif

        if (active) {
#if NV_TF32
            /* ---- O += P V, TF32: one k8 step per n8 tile of S. Lane
             * (g, t4) holds P at keys 2t4, 2t4 + 1, which it uses as the
             * A elements k = t4 and t4 + 4; B is then V at keys 2t4 and
             * 2t4 + 1 (32-bit loads: ldmatrix would split fp32 words). */
            __local const uint *vt = (__local const uint *)smem +
                                     (NV_VBUF(j) - sbase) / 4 +
                                     (2 * t4) * (NV_ROWBV / 4) + g;
#pragma unroll
            for (int n = 0; n < NV_NT; ++n) {
                uint pa[NV_MT][4];
#pragma unroll
                for (int mt = 0; mt < NV_MT; ++mt) {
                    pa[mt][0] = nv_tf32(as_uint(sc[mt][n][0]));
                    pa[mt][1] = nv_tf32(as_uint(sc[mt][n][2]));
                    pa[mt][2] = nv_tf32(as_uint(sc[mt][n][1]));
                    pa[mt][3] = nv_tf32(as_uint(sc[mt][n][3]));
                }
#pragma unroll
                for (int d = 0; d < NV_DT; ++d) {
                    const uint b0 = vt[n * 8 * (NV_ROWBV / 4) + d * 8];
                    const uint b1 = vt[(n * 8 + 1) * (NV_ROWBV / 4) + d * 8];
#pragma unroll
                    for (int mt = 0; mt < NV_MT; ++mt)
                        NV_MMA(acc[mt][d], pa[mt][0], pa[mt][1], pa[mt][2],
                               pa[mt][3], b0, b1);
                }
            }
#else
            /* ---- O += P V: P repacked from the S accumulators -------- */
            const uint vb = NV_VBUF(j) + v_lane;
#pragma unroll
            for (int kk = 0; kk < NV_BN / 16; ++kk) {
                uint pa[NV_MT][4];
#pragma unroll
                for (int mt = 0; mt < NV_MT; ++mt) {
                    pa[mt][0] = NV_PACK(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
                    pa[mt][1] = NV_PACK(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
                    pa[mt][2] = NV_PACK(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
                    pa[mt][3] = NV_PACK(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < NV_DT / 2; ++dp) {
                    uint vf[4];
                    NV_LDSM_X4_TRANS(vf, vb + (uint)(kk * 16 * NV_ROWBV + dp * 32));
#pragma unroll
                    for (int mt = 0; mt < NV_MT; ++mt) {
                        NV_MMA(acc[mt][2 * dp], pa[mt][0], pa[mt][1], pa[mt][2],
                               pa[mt][3], vf[0], vf[1]);
                        NV_MMA(acc[mt][2 * dp + 1], pa[mt][0], pa[mt][1],
                               pa[mt][2], pa[mt][3], vf[2], vf[3]);
                    }
                }
            }
#endif
        }
    }

    /* ---- epilogue: normalise, write O (and LSE) ----------------------- */
    bool marked[NV_MT][2];
#if FLASHCL_SINKS
    /* The sink is one more logit in the denominator, with no value row. */
    const float sink = sink_logit(h, M_LOG2E_F FLASHCL_VARIANT_NAMES);
#endif
#pragma unroll
    for (int mt = 0; mt < NV_MT; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float l = row_sum[mt][hh];
            l += nv_shfl_xor(l, 1);
            l += nv_shfl_xor(l, 2);
            const int row = wr0 + mt * NV_MSTRIDE + g + hh * 8;
            const bool seen = l > 0.f;
            marked[mt][hh] = !isfinite(l) ||
                             (seen && fabs(row_max[mt][hh] * sl2) >= 0x1p12f);
            /* row max in exp2 units (-inf when the row saw nothing) */
            float mexp = seen ? row_max[mt][hh] * sl2 : -INFINITY;
            float oscale = 1.f;
#if FLASHCL_SINKS
            {
                const float mall = fmax(mexp, sink);
                oscale = seen ? exp2(mexp - mall) : 0.f;
                l = l * oscale + exp2(sink - mall);
                mexp = mall;
            }
#endif
            const bool any = l > 0.f;
            const float inv = any ? oscale / l : 0.f;
            if (row < seqlen_q) {
                __global STORAGE_T *orow = op + (ulong)row * os;
#pragma unroll
                for (int d = 0; d < NV_DT; ++d) {
                    const int col = d * 8 + t4 * 2;
                    const float o0 = acc[mt][d][hh * 2] * inv;
                    const float o1 = acc[mt][d][hh * 2 + 1] * inv;
#if NV_TF32
                    if (col + 1 < NV_DV)
                        *(__global float2 *)(orow + col) = (float2)(o0, o1);
                    else if (col < NV_DV)
                        orow[col] = as_uint(o0);
#else
                    const uint pair = NV_PACK(o0, o1);
                    if (col + 1 < NV_DV)
                        *(__global uint *)(orow + col) = pair;
                    else if (col < NV_DV)
                        orow[col] = (ushort)pair;
#endif
                }
                if (write_lse && t4 == 0) {
                    const float lv =
                        any ? (mexp + log2(l)) * 0.69314718055994530942f
                            : -INFINITY;
                    lse[lse_base + lse_seq + (ulong)h * lse_stride.y +
                        (ulong)row * lse_stride.z] = lv;
                }
            }
        }
    }
#if !FLASHCL_NV_FIXUP
#pragma unroll
    for (int mt = 0; mt < NV_MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int row = wr0 + mt * NV_MSTRIDE + g + hh * 8;
            if (marked[mt][hh] && t4 == 0 && row < seqlen_q)
                op[(ulong)row * os] = (STORAGE_T)NV_NAN_BITS;
        }
#endif
#if FLASHCL_NV_VARLEN
    } /* sequence b */
#endif
}

#endif /* FLASHCL_NV_MMA */
