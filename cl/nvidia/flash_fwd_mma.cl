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
 *
 * Its parts, one file a role (cl/nvidia/mma/; the last four are
 * fragments of the kernel's body, included where they run, so that the
 * compiled kernel is the one written inline: scripts/nv_kernel_check.sh's
 * NV_PTX_DUMP compares the PTX):
 *   mma_knobs.clh        every -D switch, the tile geometry, local memory
 *   mma_loads.clh        cp.async copies of K/V/Q rows, Q words
 *   mma_scores.clh       the softmax step, bias/mask fetches, score pass
 *   mma_q_setup.clh      Q fragments, score rows, zeroed accumulators
 *   mma_tile_scores.clh  S = Q K^T, band mask, online softmax of a tile
 *   mma_tile_pv.clh      O += P V of a tile
 *   mma_epilogue.clh     O and LSE written, rows marked for the fix-up
 */
#ifndef FLASHCL_NV_MMA
#define FLASHCL_NV_MMA 0
#endif

#if FLASHCL_NV_MMA

#include "mma_knobs.clh"
#include "mma_loads.clh"
#include "mma_scores.clh"
#if FLASHCL_NV_VARLEN
#include "packed_span.clh"
#define NV_VARLEN_PARAMS FLASHCL_VARLEN_ARGS(FLASHCL_KPARAM)
#else
#define NV_VARLEN_PARAMS
#endif

__kernel __attribute__((reqd_work_group_size(FLASHCL_WG_SIZE, 1, 1)))
NV_KERNEL_ATTR void flashcl_attention_fwd(FLASHCL_FWD_PARAMS NV_VARLEN_PARAMS)
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
    const int right = (int)window_right, left = (int)window_left;
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
    const int n_end = band_key_end(mlast - 1, nv_diag, right, seqlen_k);
    const int n_begin = band_key_begin(m0, nv_diag, left, n_end);
    /* keys past free_hi or before free_lo are hidden from some row of the
     * block */
    const int free_hi = band_free_hi(m0, nv_diag, right, seqlen_k);
    const int free_lo = band_free_lo(mlast - 1, nv_diag, left);
    /* the last and the first key the warp's rows see */
    const int warp_last_key = band_free_hi(warp_last, nv_diag, right, seqlen_k);
    const int warp_first_key = band_free_lo(wr0, nv_diag, left);
    const int j_begin = band_tile_first(n_begin, NV_BN);
    const int j_end = band_tile_end(n_begin, n_end, NV_BN);
    const bool warp_rows = wr0 < seqlen_q;

#include "mma_q_setup.clh"

    /* ---- local memory: K and V tiles, padded rows --------------------- */
#if FLASHCL_NV_EMULATE
    /* emulated ldmatrix and cp.async take offsets into smem */
#define NV_EMUL_SMEM ((__local uchar *)smem)
    const uint sbase = 0;
#else
    const uint sbase = (uint)(size_t)smem;
#endif
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
        const bool edge =
            band_tile_crosses_free(n0, NV_BN, free_hi, free_lo, seqlen_k);
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
#include "mma_tile_scores.clh"
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
#include "mma_tile_pv.clh"
        }
    }

#include "mma_epilogue.clh"
#if FLASHCL_NV_VARLEN
    } /* sequence b */
#endif
}

#endif /* FLASHCL_NV_MMA */
