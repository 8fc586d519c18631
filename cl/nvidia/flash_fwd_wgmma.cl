/*
 * flashcl: forward attention for Hopper (sm_90a) with warpgroup MMA
 * (wgmma.mma_async), written in OpenCL C with inline PTX. The host
 * compiles this file only on NVIDIA compute capability 9.x with
 * -DFLASHCL_NV_WGMMA=1, then patches the PTX (cl/nvidia/nv_wgmma.clh says
 * how); anywhere else the file preprocesses to nothing.
 *
 * The kernel is FlashAttention-3's warp-specialized forward pass: a
 * work-group of one producer warpgroup and two or three consumer
 * warpgroups (FLASHCL_WG_SIZE 384 or 512) owns 64 query rows per consumer
 * warpgroup of one (batch, head). The producer copies K/V tiles into a
 * ring of local-memory slots handed over through mbarriers; each consumer
 * computes S = Q K^T (m64nBNk16, Q as register A fragments, or from local
 * memory at D = 256), the online softmax on the S accumulators, and
 * O += P V (P repacked to 16 bits in registers). Its parts, one file a
 * role (docs/wgmma-kernel.md):
 *   wgmma_knobs.clh     every -D switch: default, legal values (#error)
 *   wgmma_producer.clh  tile layout, copies, staged bias/mask, the ring
 *   wgmma_consumer.clh  S, the score pass's variant hooks, softmax, P V
 *   wgmma_schedule.clh  work items: the plain or the persistent grid
 *   wgmma_epilogue.clh  O, LSE, sinks, the exact redo of extreme rows
 *
 * Semantics as the mma.sync kernel (docs/nvidia-path.md): a band (query i
 * sees key j iff i + diag - window_left <= j <= i + diag + window_right,
 * each bound optional; diag = seqlen_k - seqlen_q, or 0 top-left), GQA
 * through group_size, natural-log LSE, rows that see no key write O = 0
 * and LSE = -inf. Variants (cl/common/variants.clh): softcap, ALiBi, bias
 * and mask through the shared score code in a pass over each tile's
 * scores, sinks in the epilogue; tiles wholly outside the band are never
 * loaded. Packed batches (FLASHCL_NV_VARLEN) as on the mma.sync kernel.
 *
 * Host guarantees on this path: D and D_v multiples of 8 up to 256, in
 * their class's tiles, fp16 or bf16, dim stride 1, 16-byte-aligned rows.
 */
#ifndef FLASHCL_NV_WGMMA
#define FLASHCL_NV_WGMMA 0
#endif

#if FLASHCL_NV_WGMMA

#include "wgmma_knobs.clh"
#include "wgmma_producer.clh"
#include "wgmma_consumer.clh"
#include "wgmma_schedule.clh"
#include "wgmma_epilogue.clh"

__kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void
flashcl_attention_fwd(FLASHCL_FWD_PARAMS WG_PERSIST_PARAMS WG_VARLEN_PARAMS)
{
    __local uint4 smem[WG_DECLARED_SMEM / 16]
        __attribute__((aligned(1024)));
    (void)head_dim;
    (void)head_dim_v;
    (void)window_left;

#if defined(FLASHCL_NV_WGMMA_DECLARED_SMEM) &&                                 \
    FLASHCL_NV_WGMMA_DECLARED_SMEM < FLASHCL_LOCAL_MEM_BYTES
    /* src/paths/nv_wgmma.c grows the PTX's .shared array to this size */
    __asm__ volatile("// SM90A_SHARED_BYTES " WG_STR(FLASHCL_LOCAL_MEM_BYTES));
#endif
#if defined(FLASHCL_NV_WGMMA_MAXNREG) && FLASHCL_NV_WGMMA_MAXNREG > 0
    /* src/paths/sm90a_patch.c turns this into the .entry's .maxnreg */
    __asm__ volatile("// SM90A_MAXNREG " WG_STR(FLASHCL_NV_WGMMA_MAXNREG));
#endif
    /* warpgroup 0 copies; the others compute, with thread ids from 0 */
    /* the role through a shuffle from lane 0: ptxas then knows it is the
     * same for the whole warp, and a role branch is not divergent control
     * flow around wgmma (which it would serialize, C7518) */
    uint role_;
    __asm__ volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;"
                     : "=r"(role_)
                     : "r"((uint)get_local_id(0) >> 7));
    const bool producer = role_ == 0;
    const int tid = (int)get_local_id(0) - (producer ? 0 : 128);
    const uint sbase = (uint)(size_t)smem;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t4 = lane & 3;

#if FLASHCL_NV_VARLEN
    /* The sequence's rows and keys, once: the four prefix-sum loads go
     * out together, one round trip before the first tile. A block past
     * its sequence's rows: the whole work-group leaves before its first
     * barrier. */
    const packed_span qspan_ = WG_SPAN_Q((int)get_group_id(WG_BATCH_AXIS));
    const packed_span kspan_ = WG_SPAN_K((int)get_group_id(WG_BATCH_AXIS));
    if (WG_GRID_QB() * WG_BM >= qspan_.count)
        return;
#endif
    const int nv_diag = (int)diag;
    (void)nv_diag;
#if FLASHCL_CAUSAL
    const int right = (int)window_right;
#else
    const int right = 0; /* no right edge: unused */
#endif
#if FLASHCL_WINDOW_LEFT
    const int left = (int)window_left;
#else
    const int left = 0; /* no left edge: unused */
#endif
#if WG_PRESCALED
    const float sl2 = 1.f;
#else
    const float sl2 = scale_log2;
#endif
#if WG_PERSIST
    const int n_qb = (seqlen_q + WG_BM - 1) / WG_BM;
    const int n_hb = heads_q * batch;
#endif
    int wt0 = 0; /* ring tiles of this work-group's earlier items */

    WG_RING_INIT();
    WG_RING_ZERO_PAD();
    barrier(CLK_LOCAL_MEM_FENCE); /* the last work-group barrier */
    /* Each role loops over the work items on its own: setmaxnreg needs
     * all code after the producer's to be the producer's. */
    if (producer) {
        WG_PRODUCER();
        return;
    }
    NV_SETMAXNREG_INC(WG_STR(WG_REGS_CONSUMER));

    WG_ITEMS_BEGIN(it)
    WG_ITEM_POINTERS(it);
    const int h = it.h, b = it.b, m0 = it.m0;
    const int nk = it.nk, kdiag = it.kdiag, key_base = it.key_base;
    const int j_end = it.j_end, j_own = it.j_own, j_first = it.j_first;
    const int free_hi = it.free_hi, free_lo = it.free_lo;
    (void)nk;
    (void)kdiag;
    (void)key_base;
    (void)free_hi;
    (void)free_lo;
    (void)j_own;
    (void)j_first;
    /* warp w of warpgroup v owns rows 64v + 16w: 16 * (4v + w) */
    const int row0 = m0 + warp * 16 + g; /* this thread's rows: row0, +8 */
    WG_Q_LOAD();
    WG_SCORE_ROWS();
    float acc[WG_ON];
    float sc[WG_SN];
    float row_max[2] = {-INFINITY, -INFINITY}; /* raw scores */
    float row_sum[2] = {0.f, 0.f}; /* this thread's part (quad-reduced last) */
    float exp_big[2] = {0.f, 0.f}; /* WG_EXP_MARK: largest |m sl2| used */
    (void)exp_big;
#pragma unroll
    for (int i = 0; i < WG_ON; ++i)
        acc[i] = 0.f;
    float alpha[2];
    bool grew = false; /* some alpha != 1 since the last rescale */
    uint pa[WG_PC][4]; /* P of the last softmax, as A fragments */
    WG_X_KEEP();
    WG_CONSUME_TILES();
    WG_EPILOGUE();
    WG_ITEMS_END(it)
}

#endif /* FLASHCL_NV_WGMMA */
