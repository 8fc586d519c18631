/*
 * flashcl: forward attention for Hopper (sm_90a) with warpgroup MMA
 * (wgmma.mma_async), written in OpenCL C with inline PTX. The host
 * compiles this file only on NVIDIA compute capability 9.x with
 * -DFLASHCL_NV_WGMMA=1, then patches the PTX (cl/nvidia/nv_wgmma.clh says
 * how); anywhere else the file preprocesses to nothing.
 *
 * A work-group of one or two warpgroups (FLASHCL_WG_SIZE 128 or 256; with
 * the warp-specialized schedule a producer and up to 3 consumers) owns
 * 64 query rows per warpgroup of one (batch, head), each warp 16 of them;
 * two warpgroups share every K/V tile (half the copies and barriers per
 * row) and run the same loop. Q lives in registers as the A operand of
 * S = Q K^T (m64nBNk16, one per 16 head-dim columns); the online softmax
 * runs on the S accumulators; P is repacked to 16 bits in registers as the
 * A operand of O += P V (m64nDk16, one per 16 keys). K and V tiles of
 * BN = 64 (or, at D = 64, 128) keys stream through local memory with
 * cp.async in the wgmma "interleave" (no swizzle) layout: core matrices of
 * 8 keys x 8 head-dim elements, 128 contiguous bytes each, key-major
 * inside, so one layout serves K (K-major B) and V (MN-major B, transpose
 * flag). Plain schedule: K and V double-buffered when two stages fit (D =
 * 64, BN = 64: 32 KiB), else single-buffered with FlashAttention-2's split
 * (V[j] loads during S = Q K[j]^T, K[j+1] during P V[j]); the overlapped
 * schedule (FLASHCL_NV_WGMMA_OVERLAP), the ring of K/V slots
 * (FLASHCL_NV_WGMMA_RING, with LAG and SAHEAD) and 32-key tiles are
 * described at their loops and tunables. Local memory: 48 KiB per
 * work-group on NVIDIA's OpenCL.
 *
 * What the host plans by default (src/paths/nv_wgmma_tiles.h): the
 * warp-specialized schedule (FLASHCL_NV_WGMMA_WS: a producer warpgroup
 * and two consumer warpgroups, mbarriers, setmaxnreg) with 128-byte-
 * swizzled tiles of 128 keys (64 at D = 256) in 128-224 KiB of local
 * memory that the PTX patch provides; at D = 256 Q sits in local memory
 * too. Any head dim that is a multiple of 8 runs in the 64-, 128- or
 * 256-column tiles (FLASHCL_HEAD_DIM) with its own columns
 * (FLASHCL_NV_DQ) zero-padded there.
 *
 * Semantics as the mma.sync kernel (docs/nvidia-path.md): a band (query i
 * sees key j iff i + diag - window_left <= j <= i + diag + window_right,
 * each bound optional; diag = seqlen_k - seqlen_q, or 0 top-left), GQA
 * through group_size, natural-log LSE, rows that see no key write O = 0
 * and LSE = -inf. The exponent is one FMA, s sl2 - m sl2, except for the
 * rows whose max is so large that the rounding of m sl2 would overflow
 * it: the host's build marks them and their warp redoes them exactly at
 * the end, a build without the host's options takes (s - m) sl2 for them
 * in the loop (FLASHCL_NV_WGMMA_EXP_GUARD). Variants (cl/common/variants.clh):
 * softcap, ALiBi, bias and mask through the shared score code in a pass
 * over each tile's scores, sinks in the epilogue; tiles wholly outside
 * the band are never loaded.
 *
 * Packed batches (FLASHCL_NV_VARLEN, FlashAttention's varlen), as on the
 * mma.sync kernel: sequence b of the grid owns the rows and keys its
 * prefix sums give (read on the device and clamped, packed_span.clh), its
 * own lengths and diagonal; a work-group whose block lies past its
 * sequence's rows returns before its first barrier. No bias or mask, no
 * persistent grid.
 *
 * Host guarantees on this path: D = D_v (a multiple of 8 up to 256, in
 * its class's tiles), fp16 or bf16, dim stride 1, 16-byte-aligned rows.
 */
#ifndef FLASHCL_NV_WGMMA
#define FLASHCL_NV_WGMMA 0
#endif

#if FLASHCL_NV_WGMMA

/* ---------------------------------------------------------------- tunables */
#ifndef FLASHCL_HEAD_DIM
#define FLASHCL_HEAD_DIM 128
#endif
#ifndef FLASHCL_HEAD_DIM_V
#define FLASHCL_HEAD_DIM_V FLASHCL_HEAD_DIM
#endif
#ifndef FLASHCL_DTYPE
#define FLASHCL_DTYPE 1
#endif
#ifndef FLASHCL_CAUSAL
#define FLASHCL_CAUSAL 0
#endif
#ifndef FLASHCL_WG_SIZE
#define FLASHCL_WG_SIZE 128
#endif
#ifndef FLASHCL_BLOCK_M
#define FLASHCL_BLOCK_M 64
#endif
#ifndef FLASHCL_BLOCK_N
#define FLASHCL_BLOCK_N 64
#endif
/* 1: scale the scores before the softmax (the host sets it for scale <= 0,
 * where the row max of the raw scores is not the max of the scaled ones). */
#ifndef FLASHCL_NV_PRESCALE
#define FLASHCL_NV_PRESCALE 0
#endif
#ifndef FLASHCL_LOCAL_MEM_BYTES
#define FLASHCL_LOCAL_MEM_BYTES 49152
#endif
/* Accepted for ABI compatibility with the base options. */
#ifndef FLASHCL_DIM_CONTIGUOUS
#define FLASHCL_DIM_CONTIGUOUS 1
#endif

#if FLASHCL_HEAD_DIM != 64 && FLASHCL_HEAD_DIM != 128 && FLASHCL_HEAD_DIM != 256
#error "flash_fwd_wgmma: FLASHCL_HEAD_DIM must be 64, 128 or 256"
#endif
#if FLASHCL_HEAD_DIM_V != FLASHCL_HEAD_DIM
#error "flash_fwd_wgmma: FLASHCL_HEAD_DIM_V must equal FLASHCL_HEAD_DIM"
#endif
#if FLASHCL_DTYPE != 1 && FLASHCL_DTYPE != 2
#error "flash_fwd_wgmma: FLASHCL_DTYPE must be 1 (fp16) or 2 (bf16)"
#endif
#if FLASHCL_CAUSAL != 0 && FLASHCL_CAUSAL != 1
#error "flash_fwd_wgmma: FLASHCL_CAUSAL must be 0 or 1"
#endif
/* The warp-specialized schedule (0: off): warpgroup 0 of the work-group
 * only copies K/V tiles into a ring of slots (FLASHCL_NV_WGMMA_RING) and
 * the other warpgroups only compute; slots pass between them through
 * mbarriers, so no work-group barrier couples the warpgroups in the key
 * loop, and each consumer warpgroup's softmax can run under the other's
 * wgmma. 2: also the register split (setmaxnreg): the producer drops to
 * FLASHCL_NV_WGMMA_REGS_PRODUCER registers, the consumers rise to
 * FLASHCL_NV_WGMMA_REGS_CONSUMER. See the loop. */
#ifndef FLASHCL_NV_WGMMA_WS
#define FLASHCL_NV_WGMMA_WS 0
#endif
#if FLASHCL_NV_WGMMA_WS < 0 || FLASHCL_NV_WGMMA_WS > 2
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_WS must be 0, 1 or 2"
#endif
#define WG_WS FLASHCL_NV_WGMMA_WS
#if WG_WS
#if FLASHCL_WG_SIZE != 256 && FLASHCL_WG_SIZE != 384 && FLASHCL_WG_SIZE != 512
#error "flash_fwd_wgmma: FLASHCL_WG_SIZE must be 256, 384 or 512 (a producer and 1 to 3 consumer warpgroups)"
#endif
#define WG_CONSUMER_THREADS (FLASHCL_WG_SIZE - 128)
#else
#if FLASHCL_WG_SIZE != 128 && FLASHCL_WG_SIZE != 256
#error "flash_fwd_wgmma: FLASHCL_WG_SIZE must be 128 or 256 (1 or 2 warpgroups)"
#endif
#define WG_CONSUMER_THREADS FLASHCL_WG_SIZE
#endif
#if FLASHCL_BLOCK_M != WG_CONSUMER_THREADS / 2
#error "flash_fwd_wgmma: FLASHCL_BLOCK_M must be 64 rows (the wgmma M) per computing warpgroup"
#endif
#if FLASHCL_BLOCK_N != 32 && FLASHCL_BLOCK_N != 64 && FLASHCL_BLOCK_N != 128
#error "flash_fwd_wgmma: FLASHCL_BLOCK_N must be 32, 64 or 128 (the N of S = Q K^T)"
#endif
#if FLASHCL_NV_PRESCALE != 0 && FLASHCL_NV_PRESCALE != 1
#error "flash_fwd_wgmma: FLASHCL_NV_PRESCALE must be 0 or 1"
#endif
/* 1: skip the O rescale of a tile when no row of the warp got a new max
 * (alpha is then exactly 1 for all of them). */
#ifndef FLASHCL_NV_LAZY_RESCALE
#define FLASHCL_NV_LAZY_RESCALE 1
#endif
#if FLASHCL_NV_LAZY_RESCALE != 0 && FLASHCL_NV_LAZY_RESCALE != 1
#error "flash_fwd_wgmma: FLASHCL_NV_LAZY_RESCALE must be 0 or 1"
#endif
/* The band's left edge (a window bounded on the left): key tiles wholly
 * left of it are never loaded (K/V and key indices start at the block's
 * first visible tile), only tiles crossing an edge run mask code. */
#ifndef FLASHCL_WINDOW_LEFT
#define FLASHCL_WINDOW_LEFT 0
#endif
#if FLASHCL_WINDOW_LEFT != 0 && FLASHCL_WINDOW_LEFT != 1
#error "flash_fwd_wgmma: FLASHCL_WINDOW_LEFT must be 0 or 1"
#endif
/* Top-left causal: the host passes diag = 0; nothing else changes here. */
#ifndef FLASHCL_TOP_LEFT
#define FLASHCL_TOP_LEFT 0
#endif
#if FLASHCL_TOP_LEFT != 0 && FLASHCL_TOP_LEFT != 1
#error "flash_fwd_wgmma: FLASHCL_TOP_LEFT must be 0 or 1"
#endif

/* cp.async, shuffles, ex2 and the 16-bit packs of the mma.sync path; the
 * wgmma helpers (their operand types follow FLASHCL_DTYPE) */
#ifndef FLASHCL_NV_MMA
#define FLASHCL_NV_MMA 1
#endif
#include "nv_mma.clh"
#include "nv_wgmma.clh"
#include "ex2_poly.clh"

/* The shared argument list and score code (cl/common/variants.clh), as
 * on the mma.sync path: softcap's tanh is MUFU.TANH, key positions ints. */
#define STORAGE_T ushort
typedef float real_t;
#define FLASHCL_TANH(x) nv_tanh(x)
#define FLASHCL_SCORE_KEY_T int
#define FLASHCL_HALF_BITS_TO_FLOAT(bits) nv_half_bits_to_float(bits)
#include "kernel_args.clh"
/* 1: the mask arrives packed into bits (the host's flashcl_pack_mask
 * pass, cl/common/mask_bits.cl), fetched a tile ahead; 0: the call's
 * bytes. */
#ifndef FLASHCL_NV_WGMMA_MASK_BITS
#define FLASHCL_NV_WGMMA_MASK_BITS 0
#endif
#if FLASHCL_NV_WGMMA_MASK_BITS != 0 && FLASHCL_NV_WGMMA_MASK_BITS != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_MASK_BITS must be 0 or 1"
#endif
/* 1: a packed mask without softcap, ALiBi or bias hides keys as the band's
 * edges do, on the scores as they come (the exponent's FMA scales them),
 * where a score pass would first scale every score; 0: it goes through
 * the score pass, as the other variants (to measure both). */
#ifndef FLASHCL_NV_WGMMA_MASK_UNSCALED
#define FLASHCL_NV_WGMMA_MASK_UNSCALED 1
#endif
#if FLASHCL_NV_WGMMA_MASK_UNSCALED != 0 && FLASHCL_NV_WGMMA_MASK_UNSCALED != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_MASK_UNSCALED must be 0 or 1"
#endif
#define WG_MASK_ALONE_BITS                                                     \
    (FLASHCL_NV_WGMMA_MASK_BITS && FLASHCL_NV_WGMMA_MASK_UNSCALED &&           \
     !FLASHCL_SOFTCAP && !FLASHCL_ALIBI && !FLASHCL_BIAS)
/* 1 (the default): a warp whose rows see every key of a tile (one vote
 * on the tile's words) skips that tile's per-score tests. Measured on an
 * H100 (bench/results/h100-2026-12-05.md, s26; bf16, D 64/128, N 4096
 * and 16384): key-padding masks 1.12-1.14x and prefix-LM masks
 * 1.06-1.14x the unvoted kernel, the bench's mask with hidden keys in
 * every tile 0.98-1.01x (the vote's few instructions a tile), plain
 * calls unchanged. 0: every tile is tested. */
#ifndef FLASHCL_NV_WGMMA_MASK_VOTE
#define FLASHCL_NV_WGMMA_MASK_VOTE 1
#endif
#if FLASHCL_NV_WGMMA_MASK_VOTE != 0 && FLASHCL_NV_WGMMA_MASK_VOTE != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_MASK_VOTE must be 0 or 1"
#endif
/* Softcap, ALiBi, bias or mask: a pass over each tile's scores before the
 * softmax, which scales them (exp2 units) and applies the terms. */
#define WG_SCORED (FLASHCL_NEEDS_SCORE_PASS && !WG_MASK_ALONE_BITS)
/* the softmax's scores are in exp2 units already (no scale at ex2). Two
 * other forms measured no faster on the H200 and were removed
 * (h200-2026-12-03-v6): softcap leaving tanh for the softmax to scale,
 * and the terms in the scores' own units. */
#define WG_PRESCALED (FLASHCL_NV_PRESCALE || WG_SCORED)

#define WG_D FLASHCL_HEAD_DIM /* the tiles' width: 64, 128 or 256 columns */
/* The real head dim, FLASHCL_NV_DQ: a multiple of 8 above half the tiles'
 * width (any up to 64 in the 64-column class). The copies zero-fill the
 * columns past it (no global read), S = Q K^T takes its k16 steps only,
 * P V the smallest wgmma N of 64, 96, 128, 192, 256 that covers it, and O
 * is stored for its columns only. */
#ifndef FLASHCL_NV_DQ
#define FLASHCL_NV_DQ FLASHCL_HEAD_DIM
#endif
#define WG_DQ FLASHCL_NV_DQ
/* The real head dim of V and O, FLASHCL_NV_DV (D_v != D: the tiles' width
 * is the larger one's class; K and Q copies zero-fill past D, V copies
 * past D_v, P V takes the N that covers D_v, O is stored for D_v
 * columns). */
#ifndef FLASHCL_NV_DV
#define FLASHCL_NV_DV FLASHCL_NV_DQ
#endif
#define WG_DV FLASHCL_NV_DV
#define WG_DMAX (WG_DQ > WG_DV ? WG_DQ : WG_DV)
#if WG_DQ % 8 || WG_DQ < 8 || WG_DQ > WG_D || WG_DV % 8 || WG_DV < 8 ||     \
    WG_DV > WG_D || (WG_D > 64 && 2 * WG_DMAX <= WG_D)
#error "flash_fwd_wgmma: FLASHCL_NV_DQ and FLASHCL_NV_DV must be multiples of 8 up to FLASHCL_HEAD_DIM, the larger above half of it (8 .. 64 at 64)"
#endif
/* The N of P V: 1 (default) the smallest of 32, 40, 48, 56, 64, 80, 96,
 * 112, 128, 160, 192, 224, 256 that covers D_v (the padded head dims 40,
 * 80, 112, 160 then multiply no zero columns of V); 0 the smallest of 64,
 * 96, 128, 192, 256 (before 2026-12-02's third session), to measure it. */
#ifndef FLASHCL_NV_WGMMA_EXACT_N
#define FLASHCL_NV_WGMMA_EXACT_N 1
#endif
#if FLASHCL_NV_WGMMA_EXACT_N != 0 && FLASHCL_NV_WGMMA_EXACT_N != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_EXACT_N must be 0 or 1"
#endif
#if FLASHCL_NV_WGMMA_EXACT_N
#if WG_DV <= 32
#define WG_DN 32
#elif WG_DV <= 56
#define WG_DN WG_DV /* 40, 48, 56 */
#elif WG_DV <= 64
#define WG_DN 64
#elif WG_DV <= 80
#define WG_DN 80
#elif WG_DV <= 96
#define WG_DN 96
#elif WG_DV <= 112
#define WG_DN 112
#elif WG_DV <= 128
#define WG_DN 128
#elif WG_DV <= 160
#define WG_DN 160
#elif WG_DV <= 192
#define WG_DN 192
#elif WG_DV <= 224
#define WG_DN 224
#else
#define WG_DN 256
#endif
#else
#if WG_DV <= 64
#define WG_DN 64
#elif WG_DV <= 96
#define WG_DN 96
#elif WG_DV <= 128
#define WG_DN 128
#elif WG_DV <= 192
#define WG_DN 192
#else
#define WG_DN 256
#endif
#endif
#define WG_BM FLASHCL_BLOCK_M
#define WG_BN FLASHCL_BLOCK_N
#define WG_THREADS FLASHCL_WG_SIZE /* 64 rows per warpgroup of 128 */
#define WG_KC ((WG_DQ + 15) / 16) /* k16 steps of Q K^T */
#define WG_PC (WG_BN / 16)  /* k16 steps of P V */
#define WG_SN (WG_BN / 2)   /* S accumulators per thread */
#define WG_ON (WG_DN / 2)   /* O accumulators per thread */
#define WG_CPR (WG_D / 8)   /* 16-byte chunks per K/V row */
#define WG_CPQ (WG_DQ / 8)  /* of them, Q's and K's real columns' */
#define WG_CPV (WG_DV / 8)  /* of them, V's */
#define WG_TILEB (WG_BN * WG_D * 2) /* one K or V tile, bytes */
#define WG_GROUPB (WG_CPR * 128)    /* 8 keys x D: one row of core matrices */
/* 1: FlashAttention-3's intra-warpgroup overlap (the softmax of tile j
 * runs while the tensor cores do P V of tile j-1; see the loop); 0: each
 * tile's S, softmax and P V in turn. */
#ifndef FLASHCL_NV_WGMMA_OVERLAP
#define FLASHCL_NV_WGMMA_OVERLAP 0
#endif
#if FLASHCL_NV_WGMMA_OVERLAP != 0 && FLASHCL_NV_WGMMA_OVERLAP != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_OVERLAP must be 0 or 1"
#endif
#define WG_OVERLAP FLASHCL_NV_WGMMA_OVERLAP
#ifndef FLASHCL_NV_STAGES
#if 4 * WG_TILEB <= FLASHCL_LOCAL_MEM_BYTES
#define FLASHCL_NV_STAGES 2
#else
#define FLASHCL_NV_STAGES 1
#endif
#endif
#if FLASHCL_NV_STAGES != 1 && FLASHCL_NV_STAGES != 2
#error "flash_fwd_wgmma: FLASHCL_NV_STAGES must be 1 or 2"
#endif
/* The ring schedule (0: off): K and V tiles, in the order K_0, V_0, K_1,
 * V_1, ..., stream through FLASHCL_NV_WGMMA_RING tile slots of local
 * memory, so that loads run up to RING - 1 - LAG tiles ahead of the tile in
 * use instead of one. FLASHCL_NV_WGMMA_LAG = 1 keeps the P V of tile j in
 * flight across the next barrier and S = Q K_{j+1}^T is issued behind it
 * (the tensor cores go from one to the other without the gap of a wait,
 * a barrier and the issue); a slot is then refilled two steps after its
 * tile's use, not one. See the loop. */
#ifndef FLASHCL_NV_WGMMA_RING
#define FLASHCL_NV_WGMMA_RING 0
#endif
#ifndef FLASHCL_NV_WGMMA_LAG
#define FLASHCL_NV_WGMMA_LAG 0
#endif
#define WG_RING FLASHCL_NV_WGMMA_RING
#define WG_LAG FLASHCL_NV_WGMMA_LAG
#if WG_LAG != 0 && WG_LAG != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_LAG must be 0 or 1"
#endif
#ifndef FLASHCL_NV_WGMMA_XSTAGE /* staged bias and mask: see WG_XS */
#define FLASHCL_NV_WGMMA_XSTAGE 0
#endif
/* (up to 16 slots with staged bias and mask, FLASHCL_NV_WGMMA_XSTAGE,
 * whose tiles take slots of their own) */
#if WG_RING != 0 &&                                                            \
    (WG_RING < 2 + WG_LAG ||                                                   \
     WG_RING > (FLASHCL_NV_WGMMA_XSTAGE && FLASHCL_NV_WGMMA_WS ? 16 : 8))
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_RING must be 0 or 2 + LAG .. 8 slots (16 with XSTAGE)"
#endif
#if WG_RING && WG_OVERLAP
#error "flash_fwd_wgmma: the ring and the overlapped schedule are exclusive"
#endif
#if WG_WS && (!WG_RING || WG_LAG || WG_OVERLAP)
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_WS needs the ring (RING >= 2) with LAG 0 (its P V always stays in flight into the next S)"
#endif
#if WG_WS && WG_RING < 2
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_WS needs at least 2 ring slots"
#endif
/* 1: the two consumer warpgroups take turns to issue their wgmma (S of a
 * tile, then its P V): FlashAttention-3's ping-pong, so that one's
 * softmax runs while the other's products keep the tensor cores busy.
 * Without it both wait for the same tile and run their softmax at the
 * same time. Two named barriers (1 and 2) pass the turn. */
#ifndef FLASHCL_NV_WGMMA_PINGPONG
#define FLASHCL_NV_WGMMA_PINGPONG 0
#endif
#if FLASHCL_NV_WGMMA_PINGPONG != 0 && FLASHCL_NV_WGMMA_PINGPONG != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_PINGPONG must be 0 or 1"
#endif
#if FLASHCL_NV_WGMMA_PINGPONG && (!WG_WS || FLASHCL_WG_SIZE != 384)
#error "flash_fwd_wgmma: ping-pong needs the warp-specialized schedule with 2 consumer warpgroups"
#endif
/* The register split: 384 threads start at 168 registers (the 64 K of an
 * SM, .maxnreg from the host); the producer's 128 threads hand back 128
 * each, which the 256 consumer threads take, 64 each: 40 and 232. With 3
 * consumer warpgroups 512 threads start at 128; the producer hands back
 * 96, the consumers take 32: 32 and 160 (FlashAttention-3's split for 3
 * consumer warpgroups). */
#if WG_WS == 2 && FLASHCL_WG_SIZE != 384 && FLASHCL_WG_SIZE != 512
#error "flash_fwd_wgmma: the register split (FLASHCL_NV_WGMMA_WS=2) is for 2 or 3 consumer warpgroups"
#endif
/* (literals: the counts are spelled into the PTX by WG_STR) */
#if FLASHCL_WG_SIZE == 512
#ifndef FLASHCL_NV_WGMMA_REGS_PRODUCER
#define FLASHCL_NV_WGMMA_REGS_PRODUCER 32
#endif
#ifndef FLASHCL_NV_WGMMA_REGS_CONSUMER
#define FLASHCL_NV_WGMMA_REGS_CONSUMER 160
#endif
#else
#ifndef FLASHCL_NV_WGMMA_REGS_PRODUCER
#define FLASHCL_NV_WGMMA_REGS_PRODUCER 40
#endif
#ifndef FLASHCL_NV_WGMMA_REGS_CONSUMER
#define FLASHCL_NV_WGMMA_REGS_CONSUMER 232
#endif
#endif
#if FLASHCL_NV_WGMMA_REGS_PRODUCER % 8 || FLASHCL_NV_WGMMA_REGS_CONSUMER % 8 || \
    FLASHCL_NV_WGMMA_REGS_PRODUCER < 24 || FLASHCL_NV_WGMMA_REGS_CONSUMER > 256
#error "flash_fwd_wgmma: setmaxnreg counts are multiples of 8 in 24 .. 256"
#endif
#if WG_WS == 2 && 128 * FLASHCL_NV_WGMMA_REGS_PRODUCER +                       \
                      (FLASHCL_WG_SIZE - 128) * FLASHCL_NV_WGMMA_REGS_CONSUMER > \
                  65536
#error "flash_fwd_wgmma: the setmaxnreg split exceeds an SM's 64 K registers"
#endif
/* 1: FlashAttention-3's intra-warpgroup overlap on the ring: S = Q K_{j+1}^T
 * is issued before the softmax of tile j and runs under it; P V_j runs
 * under the next barrier and S issue. Needs the ring with LAG 1 (slots are
 * refilled two steps after use) and a second S accumulator. */
#ifndef FLASHCL_NV_WGMMA_SAHEAD
#define FLASHCL_NV_WGMMA_SAHEAD 0
#endif
#if FLASHCL_NV_WGMMA_SAHEAD != 0 && FLASHCL_NV_WGMMA_SAHEAD != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_SAHEAD must be 0 or 1"
#endif
#if FLASHCL_NV_WGMMA_SAHEAD && !WG_WS && (!WG_RING || !WG_LAG)
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_SAHEAD needs the ring with LAG 1"
#endif
/* 1: a persistent grid (FlashAttention-3's): as many work-groups as the
 * device runs at once, each looping over (query block, head, batch) work
 * items, heaviest query blocks first, in a static stride; the producer
 * runs on into the next item's K/V tiles while the consumers store this
 * item's O, and the ring and its mbarrier phases carry on across items
 * (tile numbers count from wt0). heads_q and batch follow the forward
 * arguments (FLASHCL_PERSIST_ARGS). Warp-specialized schedule without
 * ping-pong or S ahead only. */
#ifndef FLASHCL_NV_WGMMA_PERSIST
#define FLASHCL_NV_WGMMA_PERSIST 0
#endif
#if FLASHCL_NV_WGMMA_PERSIST != 0 && FLASHCL_NV_WGMMA_PERSIST != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_PERSIST must be 0 or 1"
#endif
#define WG_PERSIST FLASHCL_NV_WGMMA_PERSIST
#ifndef FLASHCL_NV_HEADS_FIRST
#define FLASHCL_NV_HEADS_FIRST 0
#endif
#if FLASHCL_NV_HEADS_FIRST != 0 && FLASHCL_NV_HEADS_FIRST != 1
#error "flash_fwd_wgmma: FLASHCL_NV_HEADS_FIRST must be 0 or 1"
#endif
#if FLASHCL_NV_HEADS_FIRST && WG_PERSIST
#error "flash_fwd_wgmma: FLASHCL_NV_HEADS_FIRST is for the plain grid, not the persistent one"
#endif
#ifndef FLASHCL_NV_VARLEN
#define FLASHCL_NV_VARLEN 0
#endif
#ifndef FLASHCL_NV_VARLEN_TOP_LEFT
#define FLASHCL_NV_VARLEN_TOP_LEFT 0
#endif
#ifndef FLASHCL_NV_SEQ_FIRST
#define FLASHCL_NV_SEQ_FIRST 0 /* 1: grid (batch, heads, query blocks) */
#endif
#if FLASHCL_NV_VARLEN != 0 && FLASHCL_NV_VARLEN != 1
#error "flash_fwd_wgmma: FLASHCL_NV_VARLEN must be 0 or 1"
#endif
#if FLASHCL_NV_VARLEN_TOP_LEFT != 0 && FLASHCL_NV_VARLEN_TOP_LEFT != 1
#error "flash_fwd_wgmma: FLASHCL_NV_VARLEN_TOP_LEFT must be 0 or 1"
#endif
#if FLASHCL_NV_SEQ_FIRST != 0 &&                                               \
    !(FLASHCL_NV_SEQ_FIRST == 1 && FLASHCL_NV_VARLEN && !FLASHCL_NV_HEADS_FIRST)
#error "flash_fwd_wgmma: FLASHCL_NV_SEQ_FIRST is 0, or 1 with FLASHCL_NV_VARLEN (not with FLASHCL_NV_HEADS_FIRST)"
#endif
#if FLASHCL_NV_VARLEN && (FLASHCL_BIAS || FLASHCL_MASK || WG_PERSIST)
#error "flash_fwd_wgmma: packed batches (FLASHCL_NV_VARLEN) take no bias, mask or persistent grid"
#endif
#if WG_PERSIST && (!WG_WS || FLASHCL_NV_WGMMA_PINGPONG || FLASHCL_NV_WGMMA_SAHEAD)
#error "flash_fwd_wgmma: the persistent grid is written for the warp-specialized schedule without ping-pong or S ahead"
#endif
/* .maxnreg of the patched PTX (src/paths/nv_wgmma.c puts it there; the
 * define only keys the program cache): checked here for its range. */
#if defined(FLASHCL_NV_WGMMA_MAXNREG) &&                                       \
    (FLASHCL_NV_WGMMA_MAXNREG < 0 || FLASHCL_NV_WGMMA_MAXNREG > 255)
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_MAXNREG must be 0 .. 255"
#endif
/* Immediates spelled by the preprocessor: the mma.sync path's inline asm
 * uses no "n" constraints on NVIDIA's compiler, so neither does this. */
#define WG_STR_(x) #x
#define WG_STR(x) WG_STR_(x)
/* 1 (warp-specialized schedule): Q in local memory, S = Q K^T with both
 * operands from there (SS), as FlashAttention-3 does, instead of Q as
 * register A fragments (32 registers a thread fewer at D = 128: S ahead
 * with the swizzled tiles then fits the consumers' 232 registers, which
 * it does not with Q in registers, ptxas C7512). Measured unswizzled
 * only (no gain, 2026-12-02); an experiment: FLASHCL_NV_WGMMA_DEFINES,
 * with a ring that leaves the 32 KiB (FLASHCL_NV_WGMMA_RING=5 at D = 128
 * in 128 KiB; the host does not count Q). */
/* D = 256 needs it: O takes 128 accumulator registers a thread, S 32 and
 * P 16, so Q's 64 A-fragment registers would not fit beside them. */
#ifndef FLASHCL_NV_WGMMA_QSMEM
#define FLASHCL_NV_WGMMA_QSMEM (WG_D == 256)
#endif
#if FLASHCL_NV_WGMMA_QSMEM && (!WG_WS || WG_BN != 64)
#error "flash_fwd_wgmma: Q in local memory is written for the warp-specialized schedule with 64-key tiles"
#endif
/* 3 consumers get 160 registers each: O of D_v = 160 takes 80 of them
 * beside S and P (no spills, scripts/wgmma_isa_check.sh); D_v = 176
 * spilled 44-92 bytes and D = 256's O alone takes 128 */
#if FLASHCL_NV_WGMMA_QSMEM && WG_CONSUMER_THREADS > 256 && WG_DMAX > 160
#error "flash_fwd_wgmma: Q in local memory with 3 consumer warpgroups serves head dims up to 160"
#endif
#if WG_D == 256 && !FLASHCL_NV_WGMMA_QSMEM
#error "flash_fwd_wgmma: D = 256 keeps Q in local memory (FLASHCL_NV_WGMMA_QSMEM=1, the warp-specialized schedule, 64-key tiles)"
#endif
#define WG_QB (FLASHCL_NV_WGMMA_QSMEM ? WG_CONSUMER_THREADS / 2 * WG_D * 2 : 0)
#if WG_RING && WG_WS
/* the slots, Q (QSMEM), then a full and an empty mbarrier per slot */
#define WG_SMEM_BYTES (WG_RING * WG_TILEB + WG_QB + 16 * WG_RING)
#elif WG_RING
#define WG_SMEM_BYTES (WG_RING * WG_TILEB)
/* cp.async.wait_group RING - 2 - LAG (0 .. 6) */
#if WG_RING - 2 - WG_LAG == 0
#define WG_RING_WAIT_N 0
#elif WG_RING - 2 - WG_LAG == 1
#define WG_RING_WAIT_N 1
#elif WG_RING - 2 - WG_LAG == 2
#define WG_RING_WAIT_N 2
#elif WG_RING - 2 - WG_LAG == 3
#define WG_RING_WAIT_N 3
#elif WG_RING - 2 - WG_LAG == 4
#define WG_RING_WAIT_N 4
#elif WG_RING - 2 - WG_LAG == 5
#define WG_RING_WAIT_N 5
#else
#define WG_RING_WAIT_N 6
#endif
#define WG_RING_CP_WAIT()                                                      \
    __asm__ volatile("cp.async.wait_group " WG_STR(WG_RING_WAIT_N) ";" :::     \
                         "memory")
#elif WG_OVERLAP
#define WG_SMEM_BYTES (3 * WG_TILEB) /* one K, two V buffers */
#else
#define WG_SMEM_BYTES (FLASHCL_NV_STAGES * 2 * WG_TILEB)
#endif
#if WG_SMEM_BYTES > FLASHCL_LOCAL_MEM_BYTES
#error "flash_fwd_wgmma: K/V tiles exceed the device's local memory"
#endif
/* The experiment of FLASHCL_NV_WGMMA_LOCAL_MEM above the device's limit
 * (src/paths/nv_wgmma.c): the source declares only what the driver's
 * compiler accepts, the host's PTX patch enlarges the .shared array to
 * FLASHCL_LOCAL_MEM_BYTES. Every local access here is an inline-asm
 * address, so the compiler never sees the declared bound. */
#if defined(FLASHCL_NV_WGMMA_DECLARED_SMEM) &&                                 \
    FLASHCL_NV_WGMMA_DECLARED_SMEM < WG_SMEM_BYTES
#define WG_DECLARED_SMEM FLASHCL_NV_WGMMA_DECLARED_SMEM
#else
#define WG_DECLARED_SMEM WG_SMEM_BYTES
#endif

#if FLASHCL_DTYPE == 1
#define WG_PACK nv_pack_f16
#else
#define WG_PACK nv_pack_bf16
#endif
/* The low and high elements of a packed 16-bit pair, as floats. */
static inline float wg_lo(uint pair)
{
#if FLASHCL_DTYPE == 1
    return nv_half_bits_to_float((ushort)pair);
#else
    return as_float(pair << 16);
#endif
}
static inline float wg_hi(uint pair)
{
#if FLASHCL_DTYPE == 1
    return nv_half_bits_to_float((ushort)(pair >> 16));
#else
    return as_float(pair & 0xffff0000u);
#endif
}
#if WG_DN == 32
#define WG_MMA_PV NV_WG_MMA_N32
#elif WG_DN == 40
#define WG_MMA_PV NV_WG_MMA_N40
#elif WG_DN == 48
#define WG_MMA_PV NV_WG_MMA_N48
#elif WG_DN == 56
#define WG_MMA_PV NV_WG_MMA_N56
#elif WG_DN == 64
#define WG_MMA_PV NV_WG_MMA_N64
#elif WG_DN == 80
#define WG_MMA_PV NV_WG_MMA_N80
#elif WG_DN == 96
#define WG_MMA_PV NV_WG_MMA_N96
#elif WG_DN == 112
#define WG_MMA_PV NV_WG_MMA_N112
#elif WG_DN == 128
#define WG_MMA_PV NV_WG_MMA_N128
#elif WG_DN == 160
#define WG_MMA_PV NV_WG_MMA_N160
#elif WG_DN == 192
#define WG_MMA_PV NV_WG_MMA_N192
#elif WG_DN == 224
#define WG_MMA_PV NV_WG_MMA_N224
#else
#define WG_MMA_PV NV_WG_MMA_N256
#endif
#if WG_BN == 32
#define WG_MMA_S NV_WG_MMA_N32
#define WG_MMA0_S NV_WG_MMA0_N32
#elif WG_BN == 64
#define WG_MMA_S NV_WG_MMA_N64
#define WG_MMA0_S NV_WG_MMA0_N64
#else
#define WG_MMA_S NV_WG_MMA_N128
#define WG_MMA0_S NV_WG_MMA0_N128
#endif

/* cp.async writes go through the generic proxy, wgmma reads local memory
 * through the async proxy: each thread fences its own copies before the
 * barrier that publishes the tile. */
#define WG_FENCE_PROXY()                                                       \
    __asm__ volatile("/*SM90A { fence.proxy.async.shared::cta; } */" :::       \
                         "memory")
#define WG_TILE_READY()                                                        \
    do {                                                                       \
        NV_CP_WAIT_ALL();                                                      \
        WG_FENCE_PROXY();                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                          \
    } while (0)

/* The tile layout (FLASHCL_NV_WGMMA_SWIZZLE): 0 the no-swizzle
 * ("interleave") core matrices below; 1 the 128-byte swizzle: per 64
 * head-dim columns a region of BN rows x 128 bytes, in atoms of 8 rows
 * (1024 bytes), the 16-byte chunk c of row r stored at chunk c ^ (r % 8).
 * The same bytes serve K (K-major) and V (MN-major, transposed), as in
 * the interleave layout. The descriptors (SBO 1024; V's LBO the region)
 * and the copy mapping are checked against each other by
 * scripts/wgmma_layout_model.py. */
#ifndef FLASHCL_NV_WGMMA_SWIZZLE /* measured with the ws schedule only */
#define FLASHCL_NV_WGMMA_SWIZZLE (WG_WS ? 1 : 0)
#endif
#if FLASHCL_NV_WGMMA_SWIZZLE != 0 && FLASHCL_NV_WGMMA_SWIZZLE != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_SWIZZLE must be 0 or 1"
#endif
#define WG_SWIZZLE FLASHCL_NV_WGMMA_SWIZZLE
#define WG_SW_REGION (WG_BN * 128) /* bytes of one 64-column region */
#if WG_SWIZZLE
/* K-major k16 step c: region c / 4, 32 bytes a step inside the 128-byte
 * row (the hardware swizzles the address it forms). */
#define WG_K_DESC(kbuf, c)                                                     \
    nv_wg_desc_sw128((kbuf) + (uint)(((c) >> 2) * WG_SW_REGION + ((c)&3) * 32), \
                     16, 1024)
/* MN-major k16 step kk: two atoms of 8 keys on; 64-column regions apart
 * by LBO */
#define WG_V_DESC(vbuf, kk)                                                    \
    nv_wg_desc_sw128((vbuf) + (uint)((kk) * 2048), WG_SW_REGION, 1024)
#else
#define WG_K_DESC(kbuf, c) nv_wg_desc((kbuf) + (uint)((c) * 256), 128, WG_GROUPB)
#define WG_V_DESC(vbuf, kk)                                                    \
    nv_wg_desc((vbuf) + (uint)((kk) * 2 * WG_GROUPB), WG_GROUPB, 128)
#endif

/* WG_LOAD_TILE copies rows n0 .. n0 + BN - 1 of `src` (row stride rs)
 * into the tile at local byte address `dst`, in the tile layout
 * (WG_CHUNK: interleaved, chunk (key r, 16-byte column chunk c) at
 * ((r / 8) * CPR + c) * 128 + (r % 8) * 16; or swizzled). Thread t of the
 * WG_LOADERS copying threads takes chunks t, t + WG_LOADERS, ... Rows at
 * or past nmax, and column chunks past `real` (K: WG_CPQ, V: WG_CPV;
 * WG_LOAD_TILE and WG_LOAD_V_TILE pass them), are zero-filled. */
#if WG_WS
#define WG_LOADERS 128 /* the producer warpgroup */
#else
#define WG_LOADERS WG_THREADS
#endif
#if (WG_BN * WG_CPR) % WG_LOADERS
#error "flash_fwd_wgmma: a K/V tile must split evenly over the copying threads"
#endif
/* Chunk CI (0, 1, ...) of copying thread T (of LOADERS) in a tile of
 * ROWS rows: its row R, its 16-byte column chunk C and its byte offset AT
 * in the tile's layout; the threads take chunks T + CI * LOADERS in turn.
 * Swizzled: a warp copies 4 rows x 128 bytes (whole lines) of one
 * 64-column region; chunk c8 of row r goes to chunk c8 ^ (r % 8) of its
 * 128-byte row in the atom, so the warp's 512 bytes land contiguous.
 * Written with CI's part (the region kb_, the row step rs_) apart from
 * T's, so that AT is T's offset plus a constant for each unrolled CI: the
 * producer's 40 registers then need not hold one offset per chunk (at D =
 * 256, 16 of them, they spilled). Needs LOADERS % 64 == 0 and 8 * ROWS %
 * LOADERS == 0 (checked below); scripts/wgmma_layout_model.py checks it
 * against the chunk numbering T + CI * LOADERS. Interleaved: a warp
 * copies 8 rows x 64 bytes into 512 contiguous bytes. */
#if WG_SWIZZLE
#define WG_CHUNK(T, CI, LOADERS, ROWS, R, C, AT)                               \
    do {                                                                       \
        const int per_ = 8 * (ROWS) / (LOADERS); /* steps of a region */       \
        const int kb_ = (CI) / per_, rs_ = (CI) % per_;                        \
        const int tr_ = (T) >> 3, tc_ = (T)&7;                                 \
        R = tr_ + rs_ * ((LOADERS) / 8);                                       \
        C = kb_ * 8 + tc_;                                                     \
        AT = (uint)(kb_ * (ROWS)*128 + rs_ * ((LOADERS) / 64) * 1024) +        \
             (uint)((tr_ >> 3) * 1024 + (tr_ & 7) * 128 +                      \
                    ((tc_ ^ (tr_ & 7)) << 4));                                 \
    } while (0)
#if WG_LOADERS % 64 || (8 * WG_BN) % WG_LOADERS || 512 % WG_LOADERS
#error "flash_fwd_wgmma: the swizzled copy needs 64 | copying threads | 8 x tile rows (and 8 x 64 Q rows)"
#endif
#else
#define WG_CHUNK(T, CI, LOADERS, ROWS, R, C, AT)                               \
    do {                                                                       \
        const int l_ = (T) + (CI) * (LOADERS);                                 \
        R = (l_ / (8 * WG_CPR)) * 8 + (l_ & 7);                                \
        C = (l_ >> 3) % WG_CPR;                                                \
        AT = (uint)(l_ * 16);                                                  \
    } while (0)
#endif
/* Column chunk C of Q or K holds real columns (a padded head dim
 * zero-fills the rest); WG_REAL_CHUNK_OF for a tile of REAL real chunks
 * (K: WG_CPQ, V: WG_CPV). */
#if WG_CPQ < WG_CPR
#define WG_REAL_CHUNK(C) ((C) < WG_CPQ)
#else
#define WG_REAL_CHUNK(C) true
#endif
#if WG_CPQ < WG_CPR || WG_CPV < WG_CPR
#define WG_REAL_CHUNK_OF(C, REAL) ((C) < (REAL))
#else
#define WG_REAL_CHUNK_OF(C, REAL) true
#endif
/* 1 (default; the warp-specialized schedule, padded head dims in 128- or
 * 256-column tiles): the ring's column chunks past max(D, D_v) are zeroed
 * once when the work-group starts and never copied again, so the producer
 * issues copies for the real chunks only (at D = 80 or 160 a tile's pad
 * is 3/8 of it); 0 zero-fills them with every tile. H200, fp16, N = 2048
 * / 8192: D = 80 +5 / +9 % non-causal, +-1 % causal; D = 160 +1..8 %; but
 * D = 40 (64-column tiles, 3 consumer warpgroups) -5..9 %, so the
 * 64-column class keeps the zero-fill (bench/results/
 * h200-2026-12-02-wgmma-v4.md). */
#ifndef FLASHCL_NV_WGMMA_SKIP_PAD
#define FLASHCL_NV_WGMMA_SKIP_PAD 1
#endif
#if FLASHCL_NV_WGMMA_SKIP_PAD != 0 && FLASHCL_NV_WGMMA_SKIP_PAD != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_SKIP_PAD must be 0 or 1"
#endif
#define WG_CPMAX (WG_CPQ > WG_CPV ? WG_CPQ : WG_CPV)
#define WG_SKIP_PAD                                                            \
    (FLASHCL_NV_WGMMA_SKIP_PAD && WG_WS && WG_CPMAX < WG_CPR && WG_D > 64)
#define WG_LOAD_TILE(dst, src, rs, n0, nmax)                                   \
    WG_LOAD_TILE_(dst, src, rs, n0, nmax, WG_CPQ)
#define WG_LOAD_V_TILE(dst, src, rs, n0, nmax)                                 \
    WG_LOAD_TILE_(dst, src, rs, n0, nmax, WG_CPV)
#define WG_LOAD_TILE_(dst, src, rs, n0, nmax, real)                           \
    do {                                                                       \
        const bool full_ = (n0) + WG_BN <= (nmax);                             \
        _Pragma("unroll") for (int ci_ = 0;                                    \
                               ci_ < WG_BN * WG_CPR / WG_LOADERS; ++ci_)       \
        {                                                                      \
            int r_, c_;                                                        \
            uint at_;                                                          \
            WG_CHUNK(tid, ci_, WG_LOADERS, WG_BN, r_, c_, at_);              \
            const bool ok_ =                                                   \
                (full_ || (n0) + r_ < (nmax)) && WG_REAL_CHUNK_OF(c_, real);   \
            __global const STORAGE_T *g_ =                                     \
                (src) + (ok_ ? (ulong)((n0) + r_) * (rs) : (ulong)0) +         \
                (ulong)(c_ * 8);                                               \
            if (!WG_SKIP_PAD || c_ < WG_CPMAX)                                 \
                NV_CP_ASYNC16((dst) + at_, g_, ok_ ? 16u : 0u);                \
        }                                                                      \
    } while (0)

/* The steps of one key tile, shared by both schedules. They use the
 * kernel's locals (sc, acc, qf, pa, alpha, row_max, row_sum, ...). */

/* The A fragments' register fences (NV_WG_FENCE_AREGS), on in the
 * warp-specialized schedule, where the driver's compiler was seen to sink
 * the packing of P past the fence (C7519/C7520 in the first run). */
#if WG_WS && FLASHCL_NV_WGMMA_QSMEM
#define WG_FENCE_Q() ((void)0)
#define WG_FENCE_P() NV_WG_FENCE_AREGS(pa, WG_PC)
#elif WG_WS
#define WG_FENCE_Q() NV_WG_FENCE_AREGS(qf, WG_KC)
#define WG_FENCE_P() NV_WG_FENCE_AREGS(pa, WG_PC)
#else
#define WG_FENCE_Q() ((void)0)
#define WG_FENCE_P() ((void)0)
#endif

/* S = Q K^T into sc (issued and committed; the caller waits). */
#define WG_S_ISSUE(kbuf)                                                       \
    do {                                                                       \
        _Pragma("unroll") for (int i_ = 0; i_ < WG_SN; ++i_) sc[i_] = 0.f;     \
        NV_WG_FENCE_REGS(sc, WG_SN);                                           \
        NV_WG_FENCE();                                                         \
        _Pragma("unroll") for (int c_ = 0; c_ < WG_KC; ++c_)                   \
            WG_MMA_S(sc, qf[c_], WG_K_DESC(kbuf, c_), "0");                    \
        NV_WG_COMMIT();                                                        \
    } while (0)

/* S = Q K^T as above, the first k16 step writing S (no zeroing: see
 * NV_WG_MMA0_N64). */
#if FLASHCL_NV_WGMMA_QSMEM
#define WG_S0_ISSUE_(S, kbuf)                                                  \
    do {                                                                       \
        NV_WG_FENCE();                                                         \
        NV_WG_MMA0_SS_N64(S, WG_Q_DESC(0), WG_K_DESC(kbuf, 0));                \
        _Pragma("unroll") for (int c_ = 1; c_ < WG_KC; ++c_)                   \
            NV_WG_MMA_SS_N64(S, WG_Q_DESC(c_), WG_K_DESC(kbuf, c_));           \
        NV_WG_COMMIT();                                                        \
    } while (0)
#else
#define WG_S0_ISSUE_(S, kbuf)                                                  \
    do {                                                                       \
        WG_FENCE_Q();                                                          \
        NV_WG_FENCE();                                                         \
        WG_MMA0_S(S, qf[0], WG_K_DESC(kbuf, 0), "0");                          \
        _Pragma("unroll") for (int c_ = 1; c_ < WG_KC; ++c_)                   \
            WG_MMA_S(S, qf[c_], WG_K_DESC(kbuf, c_), "0");                     \
        NV_WG_COMMIT();                                                        \
    } while (0)
#endif
#define WG_S0_ISSUE(kbuf) WG_S0_ISSUE_(sc, kbuf)

/* O += P V from pa (issued and committed; the caller waits). */
#define WG_PV_ISSUE(vbuf)                                                      \
    do {                                                                       \
        NV_WG_FENCE_REGS(acc, WG_ON);                                          \
        WG_FENCE_P();                                                          \
        NV_WG_FENCE();                                                         \
        _Pragma("unroll") for (int kk_ = 0; kk_ < WG_PC; ++kk_)                \
            WG_MMA_PV(acc, pa[kk_], WG_V_DESC(vbuf, kk_), "1");                \
        NV_WG_COMMIT();                                                        \
    } while (0)

/* Mask (tiles crossing a band edge or the end only), the online softmax
 * of the tile starting at key n0: sc becomes P (fp32), the row max and
 * sum move on, alpha[] gets the factor O must be rescaled by. O itself is
 * not touched (a P V may still be writing it). Key indices here count
 * from key_base (the block's first tile, 0 without a left edge): nk keys
 * in all, the diagonal at kdiag. */
#if FLASHCL_CAUSAL
#define WG_EDGE_HI(n0) ((n0) + WG_BN > nk || (n0) + WG_BN - 1 > free_hi)
#define WG_ROW_HI(row) min((row) + kdiag + right, nk - 1)
#else
#define WG_EDGE_HI(n0) ((n0) + WG_BN > nk)
#define WG_ROW_HI(row) (nk - 1)
#endif
#if FLASHCL_WINDOW_LEFT
#define WG_EDGE(n0) (WG_EDGE_HI(n0) || (n0) < free_lo)
#define WG_HIDDEN(col, lo, hi) ((col) > (hi) || (col) < (lo))
#define WG_ROW_LO(row) ((row) + kdiag - left)
#else
#define WG_EDGE(n0) WG_EDGE_HI(n0)
#define WG_HIDDEN(col, lo, hi) ((col) > (hi))
#define WG_ROW_LO(row) 0
#endif
/* Bias and mask staged by the producer (FLASHCL_NV_WGMMA_XSTAGE=1, set by
 * the host where their rows allow 16-byte copies: a key stride of 1 and
 * 16-byte-aligned rows): each key tile j's bias and mask for the block's
 * rows ride the K/V ring as WG_XPARTS more tiles between K_j and V_j,
 * copied with cp.async like K and V, so the consumers read them from
 * local memory in their score pass instead of holding a global fetch in
 * registers (FLASHCL_NV_WGMMA_XPF). A part is WG_XROWS rows (a power of
 * two that fits a slot) of the tile's keys: bias rows first, then mask
 * rows. The consumers read in the accumulator layout (rows g and g + 8 of
 * their warp, keys 8n + 2t4 and + 1), so eight rows of a read would fall
 * in the same banks: the copy XORs each row's 16-byte chunk index with a
 * function of the row (WG_XSWZ_*), spreading a read's eight rows over
 * distinct chunks. */
#if FLASHCL_NV_WGMMA_XSTAGE != 0 && FLASHCL_NV_WGMMA_XSTAGE != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_XSTAGE must be 0 or 1"
#endif
#define WG_XS (FLASHCL_NV_WGMMA_XSTAGE && (FLASHCL_BIAS || FLASHCL_MASK))
#if WG_XS
#if !WG_WS || FLASHCL_NV_WGMMA_SAHEAD || FLASHCL_NV_WGMMA_PINGPONG ||           \
    FLASHCL_NV_VARLEN || FLASHCL_NV_WGMMA_PERSIST
#error "flash_fwd_wgmma: staged bias and mask need the warp-specialized schedule without S ahead, ping-pong, packed batches or the persistent grid"
#endif
#if WG_BN != 64 && WG_BN != 128
#error "flash_fwd_wgmma: staged bias and mask need 64- or 128-key tiles"
#endif
#define WG_XB (FLASHCL_BIAS == 0 ? 0 : FLASHCL_BIAS == 1 ? 4 : 2) /* bytes */
#define WG_XM (FLASHCL_MASK ? 1 : 0)
#define WG_XB_ROW (WG_BN * WG_XB) /* a bias row of the tile, bytes */
#define WG_XM_ROW (WG_BN * WG_XM)
#define WG_X_FIT (WG_TILEB / (WG_XB_ROW + WG_XM_ROW)) /* rows a slot holds */
#define WG_XROWS_                                                              \
    (WG_X_FIT >= 128 ? 128 : WG_X_FIT >= 64 ? 64 : WG_X_FIT >= 32 ? 32 : 16)
#define WG_XROWS (WG_XROWS_ < WG_BM ? WG_XROWS_ : WG_BM)
#define WG_XPARTS (WG_BM / WG_XROWS)
#if WG_X_FIT < 16 || WG_BM % WG_XROWS
#error "flash_fwd_wgmma: staged bias and mask: a slot must hold 16 rows, and the block whole parts"
#endif
#if WG_RING < 2 + WG_XPARTS
#error "flash_fwd_wgmma: staged bias and mask need a ring of a whole key step (K, its parts, V)"
#endif
/* the 16-byte chunk C of row R of a part's bias (mask) rows lands at
 * chunk C ^ WG_XSWZ_B(R) (WG_XSWZ_M(R)): fp32 reads take 32 bytes of a
 * row (two chunks), 16-bit ones 16, mask ones 8 */
#define WG_XSWZ_B(R) (WG_XB == 4 ? ((R)&7) << 1 : (R)&7)
#define WG_XSWZ_M(R) (WG_XM_ROW >= 128 ? (R)&7 : ((R) >> 1) & 3)
#define WG_XCHUNKS (WG_XROWS * (WG_XB_ROW + WG_XM_ROW) / 16) /* per part */
#define WG_T (2 + WG_XPARTS) /* ring tiles per key step: K, parts, V */
/* The producer's: the item's bias and mask at (row 0, its key_base) */
#define WG_XS_POINTERS(it)                                                     \
    const ulong xb_row0_ =                                                     \
        FLASHCL_BIAS ? bias_base + (ulong)(it).b * bias_stride.s0 +            \
                           (ulong)(it).h * bias_stride.s1 + (ulong)(it).key_base \
                     : 0;                                                      \
    const ulong xm_row0_ =                                                     \
        FLASHCL_MASK ? mask_base + (ulong)(it).b * mask_stride.s0 +            \
                           (ulong)(it).h * mask_stride.s1 + (ulong)(it).key_base \
                     : 0;                                                      \
    (void)xb_row0_;                                                            \
    (void)xm_row0_
/* Part PART (rows PART * WG_XROWS on) of the staged tile of keys N0 ..
 * N0 + BN - 1 (from key_base) into the slot at local address DST: the
 * bias rows, then the mask rows, each row's 16-byte chunks over the
 * producer's 128 threads. A thread keeps one chunk column c and takes
 * rows r0, r0 + 128 / chunks-per-row, ...: its key and its byte count are
 * the same for all, and its addresses step by a constant (the producer
 * has 40 registers; the swizzle folds too where the row step is a
 * multiple of 8). Rows
 * past seqlen_q and keys past the item's are zero-filled (a chunk that
 * crosses the last key copies its real bytes only). */
#define WG_XCB (WG_XB_ROW / 16) /* chunks of a bias row */
#define WG_XCM (WG_XM_ROW / 16)
#if (WG_XCB && (128 % WG_XCB || WG_XROWS * WG_XCB % 128)) ||                   \
    (WG_XCM && (128 % WG_XCM || WG_XROWS * WG_XCM % 128))
#error "flash_fwd_wgmma: staged bias and mask rows must split evenly over the producer's 128 threads"
#endif
#define WG_XS_COPY_ROWS(DST, AT0, ROW_BYTES, CPR, ESZ, SWZ, BUF, ROW0, STRIDE,  \
                        N0, it)                                                \
    do {                                                                       \
        const int c_ = tid % (CPR), r0_ = tid / (CPR);                         \
        const int key_ = (N0) + c_ * (16 / (ESZ));                             \
        const uint bytes_ =                                                    \
            key_ < (it).nk ? (uint)min(16, ((it).nk - key_) * (ESZ)) : 0u;     \
        const uint at_ = (DST) + (AT0) + (uint)(r0_ * (ROW_BYTES));            \
        const int row_ = (it).m0 + (PART_) * WG_XROWS + r0_;                  \
        const ulong g_ = (ROW0) + (ulong)row_ * (STRIDE) + (ulong)key_;        \
        _Pragma("unroll") for (int ci_ = 0; ci_ < WG_XROWS * (CPR) / 128;      \
                               ++ci_)                                          \
        {                                                                      \
            const int step_ = ci_ * (128 / (CPR));                             \
            const bool ok_ = row_ + step_ < seqlen_q && bytes_ != 0u;          \
            NV_CP_ASYNC16(at_ + (uint)(step_ * (ROW_BYTES) +                   \
                                       ((c_ ^ SWZ(r0_ + step_)) << 4)),        \
                          (BUF) + (ok_ ? g_ + (ulong)step_ * (STRIDE)          \
                                       : (ulong)0),                            \
                          ok_ ? bytes_ : 0u);                                  \
        }                                                                      \
    } while (0)
#define WG_XS_COPY(DST, PART, N0, it)                                          \
    do {                                                                       \
        const int PART_ = (PART);                                              \
        if (FLASHCL_BIAS)                                                      \
            WG_XS_COPY_ROWS(DST, 0, WG_XB_ROW, WG_XCB, WG_XB, WG_XSWZ_B, bias, \
                            xb_row0_, bias_stride.s2, N0, it);                 \
        if (FLASHCL_MASK)                                                      \
            WG_XS_COPY_ROWS(DST, WG_XROWS * WG_XB_ROW, WG_XM_ROW, WG_XCM, 1,    \
                            WG_XSWZ_M, mask, xm_row0_, mask_stride.s2, N0,     \
                            it);                                               \
    } while (0)
#else
#define WG_T 2
#endif

/* Bias and mask fetched a tile ahead (FLASHCL_NV_WGMMA_XPF, the
 * warp-specialized loop without S ahead): their loads for tile j + 1 are
 * issued as soon as tile j's score pass has read its own, and land in
 * registers while that warpgroup finishes the softmax, rescales O, runs
 * P V_j and waits for S_{j+1}. Read when
 * the scores are (the old way, XPF=0), every tile stalled the warpgroup
 * on a global load between its S and its softmax: 80 TFLOP/s with a bias
 * against 509 plain (bf16 D = 128, N = 4096; results wgmma-v3). Values
 * are kept as loaded (a 16-bit pair's bits, a mask pair's two bytes) so
 * that nothing waits on them before the scores need them. */
#ifndef FLASHCL_NV_WGMMA_XPF
#define FLASHCL_NV_WGMMA_XPF 1
#endif
#if FLASHCL_NV_WGMMA_XPF < 0 || FLASHCL_NV_WGMMA_XPF > 2
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_XPF must be 0 (off), 1 (where the registers allow) or 2 (always, to measure)"
#endif
/* Where the registers allow (ptxas for sm_90a, scripts/wgmma_isa_check.sh,
 * 2026-12-03): 2 consumer warpgroups (232 registers each) at D <= 128,
 * except bias and mask together at D = 128 (116 bytes of spills); 3
 * consumers (160 registers) spilled 52 bytes with a bias, D = 256 148.
 * A packed mask alone (its bits: 2 registers a row and 64 keys) fits 3
 * consumers at D = 64 (no spill in 64-key tiles; in 128-key tiles none
 * without causal masking, 212 bytes with it; 2026-12-04), and at D = 128
 * in 64-key tiles without a band (none; 124 bytes causal; 2026-12-04,
 * tenth session: the softcap entry's schedule, for measuring). */
#define WG_XPF_ROOM                                                            \
    ((WG_CONSUMER_THREADS == 256 &&                                            \
      (WG_D == 64 || (WG_D == 128 && !(FLASHCL_BIAS && FLASHCL_MASK)))) ||     \
     (WG_CONSUMER_THREADS == 384 && FLASHCL_NV_WGMMA_MASK_BITS &&              \
      !FLASHCL_BIAS &&                                                         \
      (WG_D == 64 || (WG_D == 128 && WG_BN == 64 && !FLASHCL_CAUSAL &&         \
                      !FLASHCL_WINDOW_LEFT))))
#define WG_XPF                                                                 \
    (FLASHCL_NV_WGMMA_XPF && (FLASHCL_BIAS || FLASHCL_MASK) && WG_WS &&        \
     !FLASHCL_NV_WGMMA_SAHEAD && !WG_XS &&                                     \
     (FLASHCL_NV_WGMMA_XPF == 2 || WG_XPF_ROOM))
#if FLASHCL_NV_WGMMA_MASK_BITS && !(FLASHCL_MASK && !FLASHCL_BIAS && WG_XPF)
#error "flash_fwd_wgmma: the packed mask (FLASHCL_NV_WGMMA_MASK_BITS) needs a mask without a bias, fetched a tile ahead (FLASHCL_NV_WGMMA_XPF: the warp-specialized schedule on 2 consumer warpgroups at D = 64 or 128, or 3 at D = 64, without S ahead or staging)"
#endif
/* The two bias terms in score units from a pair's raw value (fp32: two
 * floats; 16-bit: the pair's 32 bits in .x), fetched (wg_bias_fetch) or
 * staged. */
inline void wg_bias_terms(float2 raw, float unit, float *t0, float *t1)
{
#if FLASHCL_BIAS == 1
    *t0 = raw.x * unit;
    *t1 = raw.y * unit;
#elif FLASHCL_BIAS
    const float2 pair = bias_pair_of_bits(as_uint(raw.x));
    *t0 = pair.x * unit;
    *t1 = pair.y * unit;
#else
    (void)raw;
    (void)unit;
    *t0 = *t1 = 0.f;
#endif
}
/* Visible bits (1: key, 2: key + 1) of a mask pair's two bytes (key's
 * the low one), fetched or staged. */
inline uint wg_mask_bits(uint pair)
{
    return ((pair & 0xffu) != 0 ? 1u : 0u) | ((pair & 0xff00u) != 0 ? 2u : 0u);
}
#if WG_XS
/* The staged pair of this thread's row half hh, n8 tile n: x_at is the
 * byte offset of the warp's part in local memory (the kernel's per-tile
 * local), x_r the warp's first row in it. */
#define WG_XS_ROW(hh) (x_r + g + (hh)*8)
#define WG_XS_COL(n) ((n)*8 + t4 * 2)
#define WG_XS_BIAS_AT(hh, n)                                                   \
    (x_at + WG_XS_ROW(hh) * WG_XB_ROW +                                        \
     (((WG_XS_COL(n) * WG_XB) >> 4) ^ WG_XSWZ_B(WG_XS_ROW(hh))) * 16 +         \
     ((WG_XS_COL(n) * WG_XB) & 15))
#define WG_XS_MASK_AT(hh, n)                                                   \
    (x_at + WG_XROWS * WG_XB_ROW + WG_XS_ROW(hh) * WG_XM_ROW +                 \
     ((WG_XS_COL(n) >> 4) ^ WG_XSWZ_M(WG_XS_ROW(hh))) * 16 +                   \
     (WG_XS_COL(n) & 15))
#define WG_XS_LOCAL(T, at) (*(__local const T *)((__local const uchar *)smem + (at)))
/* the raw pair as wg_bias_terms takes it */
#if FLASHCL_BIAS == 1
#define WG_XS_BIAS_RAW(hh, n) WG_XS_LOCAL(float2, WG_XS_BIAS_AT(hh, n))
#else
#define WG_XS_BIAS_RAW(hh, n)                                                  \
    ((float2)(as_float(WG_XS_LOCAL(uint, WG_XS_BIAS_AT(hh, n))), 0.f))
#endif
#define WG_XPF_BIAS(hh, n, t0, t1)                                             \
    wg_bias_terms(WG_XS_BIAS_RAW(hh, n), srow[hh].unit, t0, t1)
#define WG_XPF_MASK(hh, n)                                                     \
    wg_mask_bits(WG_XS_LOCAL(ushort, WG_XS_MASK_AT(hh, n)))
#define WG_XPF_FETCH(n0) ((void)0)
#define WG_XPF_NEXT(n0) ((void)0)
#elif WG_XPF && FLASHCL_NV_WGMMA_MASK_BITS
/* The packed mask (FLASHCL_NV_WGMMA_MASK_BITS): the host packed the call's
 * boolean mask into bits (cl/common/mask_bits.cl: bit k % 32 of word k /
 * 32 of a row is key k, 0 from seqlen_k on; rows of a whole number of
 * 16-byte groups) and passes them as `mask`, with strides in bytes. A
 * row's bits of a tile are WG_BN / 32 words at one aligned vector load
 * (against a 16-bit load a key pair for the bytes: WG_BN / 4 loads a
 * row), fetched a tile ahead as the bytes are. A thread's pairs are the
 * bits 8 i + 2 t4 of each word (n8 tile n: word n / 4, i = n % 4). */
#if WG_BN == 128
#define WG_MASK_WORDS_T uint4
#elif WG_BN == 64
#define WG_MASK_WORDS_T uint2
#else
#define WG_MASK_WORDS_T uint
#endif
/* FLASHCL_NV_WGMMA_MASK_PRESHIFT 1: each word is shifted right by the
 * thread's 2 t4 once, when fetched, so that a pair's bits sit at the
 * constant 8 i, 8 i + 1 (a test against an immediate each) rather than
 * behind a shift by a register per pair: 4 shifts a row half and tile
 * instead of 16. 0 keeps the shift per pair (to measure both). */
#ifndef FLASHCL_NV_WGMMA_MASK_PRESHIFT
#define FLASHCL_NV_WGMMA_MASK_PRESHIFT 1
#endif
#if FLASHCL_NV_WGMMA_MASK_PRESHIFT != 0 && FLASHCL_NV_WGMMA_MASK_PRESHIFT != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_MASK_PRESHIFT must be 0 or 1"
#endif
#define WG_MASK_THREAD_SHIFT (FLASHCL_NV_WGMMA_MASK_PRESHIFT ? 2 * t4 : 0)
#define WG_MASK_PAIR_SHIFT (FLASHCL_NV_WGMMA_MASK_PRESHIFT ? 0 : 2 * t4)
#define WG_XPF_FETCH(n0)                                                       \
    do {                                                                       \
        _Pragma("unroll") for (int hh_ = 0; hh_ < 2; ++hh_) {                  \
            WG_MASK_WORDS_T w_ = (WG_MASK_WORDS_T)(~0u);                       \
            if (row0 + hh_ * 8 < seqlen_q)                                     \
                w_ = *(__global const WG_MASK_WORDS_T *)(                      \
                    mask + srow[hh_].mask_row + (ulong)(key_base + (n0)) / 8); \
            xw[hh_] = w_ >> (uint)WG_MASK_THREAD_SHIFT;                        \
        }                                                                      \
    } while (0)
/* (word i of the tile's bits of row half hh; i is a constant once the
 * score pass is unrolled) */
#if WG_BN == 128
#define WG_MASK_WORD(hh, i) ((i) == 0   ? xw[hh].x                            \
                             : (i) == 1 ? xw[hh].y                            \
                             : (i) == 2 ? xw[hh].z                            \
                                        : xw[hh].w)
#elif WG_BN == 64
#define WG_MASK_WORD(hh, i) ((i) == 0 ? xw[hh].x : xw[hh].y)
#else
#define WG_MASK_WORD(hh, i) xw[hh]
#endif
#define WG_XPF_BIAS(hh, n, t0, t1) ((void)0)
#define WG_XPF_MASK(hh, n)                                                     \
    ((WG_MASK_WORD(hh, (n) >> 2) >> (8 * ((n)&3) + WG_MASK_PAIR_SHIFT)) & 3u)
/* The bits of the thread's pairs in each word, and whether all of them
 * are set in every word of both row halves (rows past the sequence
 * fetched all ones) */
#define WG_MASK_PAIR_BITS (0x03030303u << WG_MASK_PAIR_SHIFT)
#if WG_BN == 128
#define WG_MASK_AND(w) ((w).x & (w).y & (w).z & (w).w)
#elif WG_BN == 64
#define WG_MASK_AND(w) ((w).x & (w).y)
#else
#define WG_MASK_AND(w) (w)
#endif
#define WG_MASK_ALL_SEEN()                                                     \
    ((WG_MASK_AND(xw[0]) & WG_MASK_AND(xw[1]) & WG_MASK_PAIR_BITS) ==          \
     WG_MASK_PAIR_BITS)
#elif WG_XPF
/* Raw bias of keys key, key + 1 of row r (0 where absent): fp32 as two
 * floats, 16-bit as the pair's 32 bits in .x. */
inline float2 wg_bias_fetch(const score_row *r, int key, bool in, bool both
                                FLASHCL_VARIANT_ARGS(FLASHCL_KPARAM))
{
#if FLASHCL_BIAS
    if (!in)
        return (float2)(0.f, 0.f);
    const ulong i0 = r->bias_row + (ulong)key * bias_stride.s3;
    const bool pair = both && bias_stride.s3 == 1 && (i0 & 1) == 0;
#if FLASHCL_BIAS == 1
    if (pair)
        return *(__global const float2 *)(bias + i0);
    return (float2)(bias[i0], both ? bias[i0 + bias_stride.s3] : 0.f);
#else
    if (pair)
        return (float2)(as_float(*(__global const uint *)(bias + i0)), 0.f);
    return (float2)(as_float((uint)bias[i0] |
                             (both ? (uint)bias[i0 + bias_stride.s3] << 16
                                   : 0u)),
                    0.f);
#endif
#else
    (void)r;
    (void)key;
    (void)in;
    (void)both;
    return (float2)(0.f, 0.f);
#endif
}
/* Raw mask bytes of keys key (low byte) and key + 1 (high byte); 0x0101
 * (both visible) where absent, which the scores never use. */
inline uint wg_mask_fetch(const score_row *r, int key, bool in, bool both
                              FLASHCL_VARIANT_ARGS(FLASHCL_KPARAM))
{
#if FLASHCL_MASK
    if (!in)
        return 0x0101u;
    const ulong i0 = r->mask_row + (ulong)key * mask_stride.s3;
    if (both && mask_stride.s3 == 1 && (i0 & 1) == 0)
        return *(__global const ushort *)(mask + i0);
    return (uint)mask[i0] | (both ? (uint)mask[i0 + mask_stride.s3] << 8 : 0u);
#else
    (void)r;
    (void)key;
    (void)in;
    (void)both;
    return 0x0101u;
#endif
}
/* Tile n0's bias and mask into xb / xm, pair i = 2 n + hh (the n8 tile n
 * of S, row half hh), with the same bounds the score pass uses. */
#define WG_XPF_FETCH(n0)                                                       \
    do {                                                                       \
        _Pragma("unroll") for (int hh_ = 0; hh_ < 2; ++hh_) {                  \
            const bool rin_ = row0 + hh_ * 8 < seqlen_q;                       \
            _Pragma("unroll") for (int n_ = 0; n_ < WG_BN / 8; ++n_) {         \
                const int col_ = (n0) + n_ * 8 + t4 * 2;                       \
                const bool in_ = rin_ && col_ < nk;                            \
                const bool both_ = col_ + 1 < nk;                              \
                if (FLASHCL_BIAS)                                              \
                    xb[2 * n_ + hh_] =                                         \
                        wg_bias_fetch(&srow[hh_], key_base + col_, in_,        \
                                      both_ FLASHCL_VARIANT_NAMES);            \
                if (FLASHCL_MASK)                                              \
                    xm[2 * n_ + hh_] =                                         \
                        wg_mask_fetch(&srow[hh_], key_base + col_, in_,        \
                                      both_ FLASHCL_VARIANT_NAMES);            \
            }                                                                  \
        }                                                                      \
    } while (0)
#define WG_XPF_BIAS(hh, n, t0, t1)                                             \
    wg_bias_terms(xb[2 * (n) + (hh)], srow[hh].unit, t0, t1)
#define WG_XPF_MASK(hh, n) wg_mask_bits(xm[2 * (n) + (hh)])
#else
#define WG_XPF_FETCH(n0) ((void)0)
#define WG_XPF_NEXT(n0) ((void)0)
#define WG_XPF_BIAS(hh, n, t0, t1)                                             \
    score_bias_pair(&srow[hh], key_, both_, t0, t1 FLASHCL_VARIANT_NAMES)
#define WG_XPF_MASK(hh, n)                                                     \
    score_visible_pair(&srow[hh], key_, both_ FLASHCL_VARIANT_NAMES)
#endif
#if WG_XPF
/* The next tile's fetch: FLASHCL_NV_WGMMA_XPF_AT 1 as soon as the score
 * pass has read this tile's (the row max, the exponents and the sums run
 * while it loads, but its registers are live beside S: ptxas spilled 64
 * bytes with an fp32 bias at D = 128 causal), 0 after the softmax. */
#ifndef FLASHCL_NV_WGMMA_XPF_AT
#define FLASHCL_NV_WGMMA_XPF_AT 1
#endif
#if FLASHCL_NV_WGMMA_XPF_AT != 0 && FLASHCL_NV_WGMMA_XPF_AT != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_XPF_AT must be 0 or 1"
#endif
#define WG_XPF_FETCH_NEXT(n0)                                                  \
    do {                                                                       \
        if ((n0) + WG_BN < j_own * WG_BN)                                      \
            WG_XPF_FETCH((n0) + WG_BN);                                        \
    } while (0)
#if FLASHCL_NV_WGMMA_XPF_AT
#define WG_XPF_NEXT(n0) WG_XPF_FETCH_NEXT(n0)
#else
#define WG_XPF_NEXT(n0) ((void)0)
#endif
#endif

#if WG_SCORED
/* Each score through the shared score code (softcap, ALiBi, bias, mask),
 * scaled to exp2 units; bias and mask read a pair of keys at once, only
 * for keys and rows that exist. Keys are absolute there (key_base + n).
 * ALiBi's distance to the diagonal, diag_row - key, is one float per row
 * and tile (dist_) less a constant per score: exact, as both are
 * integers below 2^24. */
#define WG_SCORES(S, n0)                                                       \
    do {                                                                       \
        _Pragma("unroll") for (int hh_ = 0; hh_ < 2; ++hh_) {                  \
            const bool rin_ = row0 + hh_ * 8 < seqlen_q;                       \
            const float dist_ =                                                \
                (float)(srow[hh_].diag_row - key_base - (n0) - t4 * 2);        \
            (void)dist_;                                                       \
            _Pragma("unroll") for (int n_ = 0; n_ < WG_BN / 8; ++n_) {         \
                const int col_ = (n0) + n_ * 8 + t4 * 2;                       \
                const int key_ = key_base + col_;                              \
                const bool in_ = rin_ && col_ < nk;                            \
                const bool both_ = col_ + 1 < nk;                              \
                float t0_ = 0.f, t1_ = 0.f;                                    \
                uint vis_ = 3u;                                                \
                (void)key_;                                                    \
                (void)both_;                                                   \
                if (FLASHCL_BIAS && in_)                                       \
                    WG_XPF_BIAS(hh_, n_, &t0_, &t1_);                          \
                if (FLASHCL_MASK && in_)                                       \
                    vis_ = WG_XPF_MASK(hh_, n_);                               \
                float *s_ = &(S)[4 * n_ + 2 * hh_];                            \
                s_[0] = score_apply_dist(&srow[hh_], dist_ - (float)(n_ * 8),  \
                                         s_[0] * scale_log2, t0_,              \
                                         (vis_ & 1u) != 0);                    \
                s_[1] = score_apply_dist(                                      \
                    &srow[hh_], dist_ - (float)(n_ * 8 + 1),                   \
                    s_[1] * scale_log2, t1_, (vis_ & 2u) != 0);                \
            }                                                                  \
        }                                                                      \
    } while (0)
#elif WG_MASK_ALONE_BITS
/* The packed mask alone: its hidden keys' scores become -inf before the
 * row max, as past a band's edge (rows past the sequence fetched all
 * ones, keys past it are 0 in the words and past the edge too) */
#define WG_SCORES(S, n0)                                                       \
    do {                                                                       \
        _Pragma("unroll") for (int i_ = 0; i_ < WG_SN; ++i_)                   \
            (S)[i_] *= FLASHCL_NV_PRESCALE ? scale_log2 : 1.f;                 \
        if (!FLASHCL_NV_WGMMA_MASK_VOTE || !nv_warp_all(WG_MASK_ALL_SEEN())) { \
            _Pragma("unroll") for (int hh_ = 0; hh_ < 2; ++hh_) {              \
                _Pragma("unroll") for (int n_ = 0; n_ < WG_BN / 8; ++n_) {     \
                    const uint vis_ = WG_XPF_MASK(hh_, n_);                    \
                    if (!(vis_ & 1u))                                          \
                        (S)[4 * n_ + 2 * hh_] = -INFINITY;                     \
                    if (!(vis_ & 2u))                                          \
                        (S)[4 * n_ + 2 * hh_ + 1] = -INFINITY;                 \
                }                                                              \
            }                                                                  \
        }                                                                      \
    } while (0)
#elif FLASHCL_NV_PRESCALE
#define WG_SCORES(S, n0)                                                       \
    do {                                                                       \
        _Pragma("unroll") for (int i_ = 0; i_ < WG_SN; ++i_)                   \
            (S)[i_] *= scale_log2;                                             \
    } while (0)
#else
#define WG_SCORES(S, n0) ((void)0)
#endif
/* The exponent of a score s against the row max m (msc = m sl2): one FMA,
 * s sl2 - m sl2, as FlashAttention does, instead of a subtraction and a
 * multiplication: at D = 64 the softmax limits the kernel (ablation in
 * docs/nvidia-path.md), and the FP32 pipe then runs one instruction a
 * score fewer. FLASHCL_NV_WGMMA_EXP_FMA=0 keeps (s - m) sl2, to measure
 * it. */
#ifndef FLASHCL_NV_WGMMA_EXP_FMA
#define FLASHCL_NV_WGMMA_EXP_FMA 1
#endif
#if FLASHCL_NV_WGMMA_EXP_FMA != 0 && FLASHCL_NV_WGMMA_EXP_FMA != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_EXP_FMA must be 0 or 1"
#endif
#if FLASHCL_NV_WGMMA_EXP_FMA
/* (contracted to one fma: OpenCL C contracts by default; the fma()
 * builtin would be a libclc call in the offline check) */
#define WG_EXP_ARG(s, m, msc) ((s) * sl2 - (msc))
#else
#define WG_EXP_ARG(s, m, msc) (((s) - (m)) * sl2)
#endif
#define WG_EXP_EXACT(s, m, msc) (((s) - (m)) * sl2)
/* The FMA form's exponent at the row's own max is m sl2 - round(m sl2),
 * up to half an ulp of m sl2: 2^8 at |m sl2| ~ 2^32 (bf16 inputs of 1e5),
 * which overflows 2^x (test_variants' extreme cases did, in a form since
 * removed that kept the scored variants unscaled). Below |m sl2| = 2^12
 * the error is under 2^-12. FLASHCL_NV_WGMMA_EXP_GUARD says what a row
 * beyond that bound gets:
 *   1 (the default of a kernel compiled alone): a warp whose row has
 *     |m sl2| >= 2^12 takes the exact form (s - m) sl2 for that row of
 *     the tile, a vote per row and tile. It cost 5-9 % at D = 64 on the
 *     H200 (h200-2026-12-03-v7: the branch keeps the two rows' max and
 *     exponent chains from overlapping; one vote for both rows after both
 *     maxima measured 6 % slower at D = 128 too, v6).
 *   2 (what the host asks for, with the fix-up pass after the kernel):
 *     each row keeps the largest |m sl2| it used, one max per row and
 *     tile, and a row that reached 2^12 gets a NaN in O[row][0]; the
 *     mma.sync kernel's exact fix-up pass (flash_fwd_mma.cl,
 *     FLASHCL_NV_FIXUP) then recomputes the blocks holding such rows.
 *     0-1 % at D = 64 and 128 (v7).
 *   3 (what the host asks for by default): the same marks, and at its
 *     end the warp recomputes its marked rows itself, one at a time, with
 *     the exact form from global memory (WG_REDO_ROW; extreme inputs
 *     only): no second launch. The fix-up pass of 2 cost 3-7 % at D = 64
 *     (mostly its launch over mma.sync's grid: 6 % at N = 1024, v7).
 *   0: nothing (wrong for such inputs), to measure what the others cost.
 * (Scaling the row's scores in place on the vote, one exponent loop,
 * measured slower than 1, v7, and was removed.) With unit scale
 * (WG_PRESCALED) s - m sl2 is the exact form and none of this applies. */
#ifndef FLASHCL_NV_WGMMA_EXP_GUARD
#define FLASHCL_NV_WGMMA_EXP_GUARD 1
#endif
#if FLASHCL_NV_WGMMA_EXP_GUARD < 0 || FLASHCL_NV_WGMMA_EXP_GUARD > 3
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_EXP_GUARD must be 0, 1, 2 or 3"
#endif
#if WG_MASK_ALONE_BITS && FLASHCL_NV_WGMMA_EXP_GUARD == 2
#error "flash_fwd_wgmma: the packed mask alone takes the vote (EXP_GUARD 1) or its warps' own redo (3), which reads the bits; the fix-up pass reads no packed mask"
#endif
#define WG_EXP_MARK                                                            \
    (FLASHCL_NV_WGMMA_EXP_GUARD >= 2 && !WG_PRESCALED && FLASHCL_NV_WGMMA_EXP_FMA)
#define WG_EXP_REDO (WG_EXP_MARK && FLASHCL_NV_WGMMA_EXP_GUARD == 3)
#define WG_EXP_FMA_SAFE(msc)                                                   \
    (WG_PRESCALED || !FLASHCL_NV_WGMMA_EXP_FMA ||                              \
     FLASHCL_NV_WGMMA_EXP_GUARD != 1 || !nv_warp_any(fabs(msc) >= 4096.f))
/* How many of each 8 of a thread's scores in a row take the FP32-pipe
 * exponent (ex2_poly.clh) instead of MUFU.EX2: 0 (none) to 8 (all),
 * chosen by column position, fixed at compile time once the tile loop is
 * unrolled. On the H200 every k > 0 measured slower (h200-2026-12-03-v5:
 * the softmax is bound by issue slots, not by MUFU), so the host never
 * sets it; FLASHCL_NV_WGMMA_DEFINES does, to measure on other GPUs. */
#ifndef FLASHCL_NV_WGMMA_EXP_POLY
#define FLASHCL_NV_WGMMA_EXP_POLY 0
#endif
#if FLASHCL_NV_WGMMA_EXP_POLY < 0 || FLASHCL_NV_WGMMA_EXP_POLY > 8
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_EXP_POLY must be 0..8"
#endif
#define WG_EX2_AT(i, a)                                                        \
    (((i) & 7) < FLASHCL_NV_WGMMA_EXP_POLY ? nv_ex2_poly(a) : nv_ex2(a))
/* P = 2^(exponent) over one row's scores of the tile, into S, and their
 * sum; FORM: WG_EXP_ARG or WG_EXP_EXACT */
#define WG_EXP_ROW(S, hh, mref, msc, sum, FORM)                                \
    do {                                                                       \
        _Pragma("unroll") for (int n_ = 0; n_ < WG_BN / 8; ++n_) {             \
            const float p0_ =                                                  \
                WG_EX2_AT(2 * n_, FORM((S)[4 * n_ + 2 * (hh)], mref, msc));    \
            const float p1_ = WG_EX2_AT(                                       \
                2 * n_ + 1, FORM((S)[4 * n_ + 2 * (hh) + 1], mref, msc));      \
            (S)[4 * n_ + 2 * (hh)] = p0_;                                      \
            (S)[4 * n_ + 2 * (hh) + 1] = p1_;                                  \
            (sum) += p0_ + p1_;                                                \
        }                                                                      \
    } while (0)
#define WG_SOFTMAX_(S, n0)                                                     \
    do {                                                                       \
        WG_SCORES(S, n0);                                                      \
        WG_XPF_NEXT(n0);                                                       \
        if (WG_EDGE(n0)) {                                                     \
            _Pragma("unroll") for (int hh_ = 0; hh_ < 2; ++hh_) {              \
                const int hi_ = WG_ROW_HI(row0 + hh_ * 8);                     \
                const int lo_ = WG_ROW_LO(row0 + hh_ * 8);                     \
                (void)lo_;                                                     \
                _Pragma("unroll") for (int n_ = 0; n_ < WG_BN / 8; ++n_) {     \
                    const int col_ = (n0) + n_ * 8 + t4 * 2;                   \
                    if (WG_HIDDEN(col_, lo_, hi_))                             \
                        (S)[4 * n_ + 2 * hh_] = -INFINITY;                     \
                    if (WG_HIDDEN(col_ + 1, lo_, hi_))                         \
                        (S)[4 * n_ + 2 * hh_ + 1] = -INFINITY;                 \
                }                                                              \
            }                                                                  \
        }                                                                      \
        _Pragma("unroll") for (int hh_ = 0; hh_ < 2; ++hh_) {                  \
            float mx_ = row_max[hh_];                                          \
            _Pragma("unroll") for (int n_ = 0; n_ < WG_BN / 8; ++n_)           \
                mx_ = fmax(mx_, fmax((S)[4 * n_ + 2 * hh_],                    \
                                     (S)[4 * n_ + 2 * hh_ + 1]));              \
            mx_ = fmax(mx_, nv_shfl_xor(mx_, 1));                              \
            mx_ = fmax(mx_, nv_shfl_xor(mx_, 2));                              \
            /* mx_ == -inf: nothing seen yet; keep the arguments finite */     \
            alpha[hh_] = mx_ == -INFINITY                                      \
                             ? 1.f                                             \
                             : nv_ex2((row_max[hh_] - mx_) * sl2);             \
            const float mref_ = mx_ == -INFINITY ? 0.f : mx_;                  \
            const float msc_ = mref_ * sl2;                                    \
            row_max[hh_] = mx_;                                                \
            float sum_ = 0.f;                                                  \
            if (WG_EXP_MARK)                                                   \
                exp_big[hh_] = fmax(exp_big[hh_], fabs(msc_));                 \
            if (WG_EXP_FMA_SAFE(msc_)) {                                       \
                WG_EXP_ROW(S, hh_, mref_, msc_, sum_, WG_EXP_ARG);             \
            } else {                                                           \
                WG_EXP_ROW(S, hh_, mref_, msc_, sum_, WG_EXP_EXACT);           \
            }                                                                  \
            row_sum[hh_] = row_sum[hh_] * alpha[hh_] + sum_;                   \
            grew = grew || alpha[hh_] != 1.f;                                  \
        }                                                                      \
    } while (0)
#define WG_SOFTMAX(n0) WG_SOFTMAX_(sc, n0)
/* Measurements only (wrong results): FLASHCL_NV_WGMMA_DEBUG_NOSOFTMAX
 * leaves S as it is (the products and loads alone), ..._NOLOAD makes the
 * producer hand over its slots without copying (the products and the
 * softmax alone). Passed through FLASHCL_NV_WGMMA_DEFINES. */
#ifndef FLASHCL_NV_WGMMA_DEBUG_NOSOFTMAX
#define FLASHCL_NV_WGMMA_DEBUG_NOSOFTMAX 0
#endif
#ifndef FLASHCL_NV_WGMMA_DEBUG_NOLOAD
#define FLASHCL_NV_WGMMA_DEBUG_NOLOAD 0
#endif
#if FLASHCL_NV_WGMMA_DEBUG_NOSOFTMAX
#undef WG_SOFTMAX_
#define WG_SOFTMAX_(S, n0) ((void)(n0))
#endif

/* O *= alpha; skipped (FLASHCL_NV_LAZY_RESCALE) when every alpha of the
 * warp is 1, i.e. no row got a new max: after the first tiles, most. */
#define WG_RESCALE_O()                                                         \
    do {                                                                       \
        if (!FLASHCL_NV_LAZY_RESCALE || nv_warp_any(grew)) {                   \
            _Pragma("unroll") for (int d_ = 0; d_ < WG_DN / 8; ++d_) {         \
                acc[4 * d_ + 0] *= alpha[0];                                   \
                acc[4 * d_ + 1] *= alpha[0];                                   \
                acc[4 * d_ + 2] *= alpha[1];                                   \
                acc[4 * d_ + 3] *= alpha[1];                                   \
            }                                                                  \
        }                                                                      \
        grew = false;                                                          \
    } while (0)

/* P (in sc) as 16-bit A fragments: keys 16kk + 2t, +1 and 16kk + 8 + 2t,
 * +1 of rows g and g + 8, i.e. n8 tiles 2kk and 2kk + 1 of S. */
#define WG_PACK_P_(S)                                                          \
    do {                                                                       \
        _Pragma("unroll") for (int kk_ = 0; kk_ < WG_PC; ++kk_) {              \
            pa[kk_][0] = WG_PACK((S)[8 * kk_ + 0], (S)[8 * kk_ + 1]);          \
            pa[kk_][1] = WG_PACK((S)[8 * kk_ + 2], (S)[8 * kk_ + 3]);          \
            pa[kk_][2] = WG_PACK((S)[8 * kk_ + 4], (S)[8 * kk_ + 5]);          \
            pa[kk_][3] = WG_PACK((S)[8 * kk_ + 6], (S)[8 * kk_ + 7]);          \
        }                                                                      \
    } while (0)
#define WG_PACK_P() WG_PACK_P_(sc)

/* ---- work items ----------------------------------------------------- */
/* What a work item (query block qb of head h, batch b) needs to know of
 * its keys. Row i sees key j iff j in [i + diag - left, i + diag + right]
 * (right: FLASHCL_CAUSAL, left: FLASHCL_WINDOW_LEFT); the host clamps the
 * bounds to the sequences, so ints hold them. Keys count from key_base,
 * the block's first visible tile: the K/V pointers start there, so every
 * schedule's tile and ring numbering starts at 0 as without a left edge.
 * scripts/wgmma_band_model.py checks these formulas against the band. */
typedef struct wg_item {
    int h, b, m0;
    int len_q;    /* the sequence's rows (the grid's seqlen_q if not packed) */
    int q_first;  /* packed batches: the sequence's first row and key */
    int k_first;
    int diag;     /* the sequence's diagonal */
    int key_base; /* first key of tile 0 */
    int nk;       /* keys from key_base on */
    int kdiag;    /* the diagonal, from key_base */
    int j_end;    /* key tiles of the block (the producer's) */
    int j_own;    /* of them, the ones this warpgroup's rows see, */
    int j_first;  /* from this one on (a window's left edge) */
    int free_hi;  /* last key every row of the warpgroup sees */
    int free_lo;  /* first key every row of the warpgroup sees */
} wg_item;

/* 1: with a causal window (both edges), each consumer warpgroup of the
 * warp-specialized schedule starts at its own rows' first key tile and
 * runs the mask code only on tiles that cross its own rows' band
 * (wg_item_of); 0: the block's, as before 2026-12-03 v9 (to measure). */
#ifndef FLASHCL_NV_WGMMA_OWN_BAND
#define FLASHCL_NV_WGMMA_OWN_BAND 1
#endif
#if FLASHCL_NV_WGMMA_OWN_BAND != 0 && FLASHCL_NV_WGMMA_OWN_BAND != 1
#error "flash_fwd_wgmma: FLASHCL_NV_WGMMA_OWN_BAND must be 0 or 1"
#endif

static inline wg_item wg_item_of(int qb, int h, int b, int warp, int seqlen_q,
                                 int seqlen_k, int diag, int left, int right)
{
    wg_item it;
    it.len_q = seqlen_q;
    it.q_first = it.k_first = 0;
    it.diag = diag;
    it.h = h;
    it.b = b;
    it.m0 = qb * WG_BM;
    const int mlast = min(it.m0 + WG_BM, seqlen_q); /* exclusive */
#if FLASHCL_CAUSAL
    const int n_stop = clamp(mlast - 1 + diag + right + 1, 0, seqlen_k);
#else
    const int n_stop = seqlen_k;
#endif
#if FLASHCL_WINDOW_LEFT
    it.key_base = clamp(it.m0 + diag - left, 0, n_stop) / WG_BN * WG_BN;
#else
    it.key_base = 0;
#endif
    it.nk = seqlen_k - it.key_base;
    it.kdiag = diag - it.key_base;
    it.j_end = (n_stop - it.key_base + WG_BN - 1) / WG_BN;
#if WG_WS
    /* per consumer warpgroup: its own rows' range (the block's is the
     * producer's); the lower one's last tiles are only handed back */
    const int m0_own = it.m0 + (warp >> 2) * 64;
#else
    const int m0_own = it.m0;
#endif
#if FLASHCL_CAUSAL && WG_WS
    const int n_end_own = clamp(min(m0_own + 64, seqlen_q) - 1 + it.kdiag +
                                    right + 1, 0, it.nk);
    it.j_own = (n_end_own + WG_BN - 1) / WG_BN;
#else
    it.j_own = it.j_end;
#endif
#if FLASHCL_WINDOW_LEFT && FLASHCL_CAUSAL && WG_WS &&                        \
    !FLASHCL_NV_WGMMA_SAHEAD && FLASHCL_NV_WGMMA_OWN_BAND
    /* the higher warpgroups' band starts later: the tiles before their
     * own rows' first key are only handed back (a 192-row block of a
     * 512-key band spans 6 tiles of 128 keys, each warpgroup's rows 5).
     * With both edges (j_own ends the lower warpgroups early) each
     * warpgroup then has about as many tiles: 1.02-1.09x at D = 64 and
     * with softcap and sinks, equal at D = 128 window 1024 and 2048. With
     * the left edge alone the lowest warpgroup still runs every tile and
     * the others ahead of it measured 0.93-0.98x (h200-2026-12-03-v9,
     * run 3), so those keep the block's range. */
    it.j_first = min(max(m0_own + it.kdiag - left, 0) / WG_BN, it.j_own);
    const int mlast_own = min(m0_own + 64, mlast);
#else
    it.j_first = 0;
    const int mlast_own = mlast;
#endif
    it.free_hi = m0_own + it.kdiag + right;
    it.free_lo = mlast_own - 1 + it.kdiag - left;
    return it;
}

/* WG_ITEMS_BEGIN(it) ... WG_ITEMS_END(it): the body once per work item of
 * this work-group, `it` its wg_item; wt0 moves past its ring tiles.
 * Without FLASHCL_NV_WGMMA_PERSIST: one item, (block, head, batch) from
 * the group ids, heaviest causal blocks (largest query index) first.
 * Persistent: item i is query block n_qb - 1 - i / (heads_q batch)
 * (heaviest first across heads and batch), then head and batch;
 * work-group w takes items w, w + groups, ... */
#if FLASHCL_NV_VARLEN
#include "packed_span.clh"
/* Sequence b of a packed batch: its item over its own lengths and
 * diagonal (the grid's seqlen_q and seqlen_k are the maxima), and where
 * its rows and keys start. */
static inline wg_item wg_packed_item(int qb, int h, int b, int warp,
                                     packed_span qspan, packed_span kspan,
                                     int left, int right)
{
    const int diag = (int)aligned_diag(FLASHCL_NV_VARLEN_TOP_LEFT,
                                       qspan.count, kspan.count);
    wg_item it = wg_item_of(qb, h, b, warp, qspan.count, kspan.count, diag,
                            left, right);
    it.q_first = qspan.first;
    it.k_first = kspan.first;
    return it;
}
#define WG_SPAN_Q(b)                                                           \
    packed_span_of(cu_q, len_base.s0, len_stride.s0, (b), total_q, seqlen_q)
#define WG_SPAN_K(b)                                                           \
    packed_span_of(cu_k, len_base.s1, len_stride.s1, (b), total_k, seqlen_k)
/* (b is the work-group's sequence: packed batches take the plain grid,
 * whose spans the kernel read at its start) */
#define WG_ITEM_AT(qb, h, b)                                                   \
    wg_packed_item((qb), (h), (b), warp, qspan_, kspan_, left, right)
#define WG_VARLEN_PARAMS FLASHCL_VARLEN_ARGS(FLASHCL_KPARAM)
/* the body sees its sequence's rows as seqlen_q */
#define WG_ITEM_LENGTHS(it)                                                    \
    const int seqlen_q = (it).len_q;                                           \
    (void)seqlen_q;
/* element offset of the item's sequence in a tensor: its first row */
#define WG_SEQ_AT(it, stride, first) ((ulong)(it).first * (stride).z)
#else
#define WG_ITEM_AT(qb, h, b)                                                   \
    wg_item_of((qb), (h), (b), warp, seqlen_q, seqlen_k, nv_diag, left, right)
#define WG_VARLEN_PARAMS
#define WG_ITEM_LENGTHS(it)
#define WG_SEQ_AT(it, stride, first) ((ulong)(it).b * (stride).x)
#endif
#if WG_PERSIST
#define WG_PERSIST_PARAMS FLASHCL_PERSIST_ARGS(FLASHCL_KPARAM)
#define WG_ITEMS_BEGIN(it)                                                     \
    for (int item_ = (int)get_group_id(0); item_ < n_qb * n_hb;                \
         item_ += (int)get_num_groups(0)) {                                    \
        const wg_item it = WG_ITEM_AT(n_qb - 1 - item_ / n_hb,                 \
                                      (item_ % n_hb) % heads_q,                \
                                      (item_ % n_hb) / heads_q);
#else
/* Query blocks heaviest first. FLASHCL_NV_HEADS_FIRST: dimension 0 over
 * heads, 1 over query blocks, so that the work-groups in flight share
 * query rows across heads and a bias or mask broadcast over heads comes
 * from HBM about once and from L2 after (the host sets it for such
 * tensors, as for the mma.sync kernel). */
#if FLASHCL_NV_SEQ_FIRST
/* A causal packed batch runs sequences fastest (grid (batch, heads,
 * blocks)): the heaviest blocks of every sequence go out before any
 * lighter one (the mma.sync kernel's measured reason) */
#define WG_QB_AXIS 2
#define WG_HEADS_AXIS 1
#define WG_BATCH_AXIS 0
#else
#define WG_QB_AXIS (FLASHCL_NV_HEADS_FIRST ? 1 : 0)
#define WG_HEADS_AXIS (FLASHCL_NV_HEADS_FIRST ? 0 : 1)
#define WG_BATCH_AXIS 2
#endif
#define WG_GRID_QB()                                                           \
    ((int)get_num_groups(WG_QB_AXIS) - 1 - (int)get_group_id(WG_QB_AXIS))
#define WG_PERSIST_PARAMS
#define WG_ITEMS_BEGIN(it)                                                     \
    {                                                                          \
        const wg_item it =                                                     \
            WG_ITEM_AT(WG_GRID_QB(), (int)get_group_id(WG_HEADS_AXIS),         \
                       (int)get_group_id(WG_BATCH_AXIS));                      \
        WG_ITEM_LENGTHS(it)
#endif
#define WG_ITEMS_END(it)                                                       \
    wt0 += WG_T * (it).j_end;                                                  \
    }
/* The item's Q, K, V and O (K and V from its key_base), declared under
 * the names given (HK: its KV head). */
#define WG_ITEM_POINTERS_AS(it, HK, QP, KP, VP, OP)                            \
    const int HK = (it).h / group_size;                                        \
    __global const STORAGE_T *QP = q + base.x +                                \
                                   WG_SEQ_AT(it, q_stride, q_first) +          \
                                   (ulong)(it).h * q_stride.y;                 \
    __global const STORAGE_T *KP = k + base.y +                                \
                                   WG_SEQ_AT(it, k_stride, k_first) +          \
                                   (ulong)HK * k_stride.y +                    \
                                   (ulong)(it).key_base * k_stride.z;          \
    __global const STORAGE_T *VP = v + base.z +                                \
                                   WG_SEQ_AT(it, v_stride, k_first) +          \
                                   (ulong)HK * v_stride.y +                    \
                                   (ulong)(it).key_base * v_stride.z;          \
    __global STORAGE_T *OP = o + base.w + WG_SEQ_AT(it, o_stride, q_first) +   \
                             (ulong)(it).h * o_stride.y
/* ... as qp, kp, vp, op, with their row strides */
#define WG_ITEM_POINTERS(it)                                                   \
    WG_ITEM_POINTERS_AS(it, hk_, qp, kp, vp, op);                              \
    const ulong qs = q_stride.z, ks = k_stride.z, vs = v_stride.z,             \
                os = o_stride.z;                                               \
    (void)qp;                                                                  \
    (void)op;                                                                  \
    (void)qs;                                                                  \
    (void)os

#if WG_EXP_REDO
/* Query row ROW of the item, exactly, by one warp from global memory: the
 * keys one at a time (each lane a column pair of the dot product, then a
 * warp sum), an online softmax with the exact exponent (s - m) sl2, each
 * lane accumulating its column pairs of O (c = 2 lane + 64 k). Only the
 * kernels that mark rows come here: no bias, ALiBi or softcap, and a mask
 * only packed into bits and alone, whose hidden keys the redo skips (the
 * bit of key j at byte j / 8 of the row's words; the whole warp reads the
 * same byte, so the skip is uniform). */
#define WG_REDO_PAIRS ((WG_DV + 63) / 64)
#if WG_MASK_ALONE_BITS
#define WG_REDO_MASK_ROW(ROW)                                                  \
    const ulong mrow_ =                                                        \
        score_row_init(b, h, ROW, it.diag, M_LOG2E_F FLASHCL_VARIANT_NAMES)    \
            .mask_row
#define WG_REDO_HIDDEN(j)                                                      \
    ((mask[mrow_ + (ulong)(key_base + (j)) / 8] >> ((key_base + (j)) & 7) &   \
      1) == 0)
#else
#define WG_REDO_MASK_ROW(ROW) ((void)0)
#define WG_REDO_HIDDEN(j) false
#endif
#define WG_REDO_ROW(ROW)                                                       \
    do {                                                                       \
        __asm__ volatile("// flashcl: wg_redo_row"); /* (for the checks) */ \
        const int lo_ = max(WG_ROW_LO(ROW), 0), hi_ = WG_ROW_HI(ROW);          \
        /* (from the arguments again: the consumers keep no K/V pointer     \
         * live through the loop for this) */                              \
        WG_ITEM_POINTERS_AS(it, rhk_, rq_, rk_, rv_, ro_);                     \
        __global const STORAGE_T *qr_ = rq_ + (ulong)(ROW)*q_stride.z;         \
        float m_ = -INFINITY, l_ = 0.f;                                        \
        float o_[WG_REDO_PAIRS][2];                                            \
        _Pragma("unroll") for (int k_ = 0; k_ < WG_REDO_PAIRS; ++k_)           \
            o_[k_][0] = o_[k_][1] = 0.f;                                       \
        WG_REDO_MASK_ROW(ROW);                                                 \
        for (int j_ = lo_; j_ <= hi_; ++j_) {                                  \
            if (WG_REDO_HIDDEN(j_))                                            \
                continue;                                                      \
            __global const STORAGE_T *kr_ = rk_ + (ulong)j_ * k_stride.z;      \
            float s_ = 0.f;                                                    \
            for (int d_ = 2 * lane; d_ < WG_DQ; d_ += 64) {                    \
                const uint qq_ = *(__global const uint *)(qr_ + d_);           \
                const uint kk_ = *(__global const uint *)(kr_ + d_);           \
                s_ += wg_lo(qq_) * wg_lo(kk_) + wg_hi(qq_) * wg_hi(kk_);       \
            }                                                                  \
            s_ += nv_shfl_xor(s_, 16);                                         \
            s_ += nv_shfl_xor(s_, 8);                                          \
            s_ += nv_shfl_xor(s_, 4);                                          \
            s_ += nv_shfl_xor(s_, 2);                                          \
            s_ += nv_shfl_xor(s_, 1);                                          \
            if (s_ > m_) {                                                     \
                const float a_ = exp2((m_ - s_) * sl2);                        \
                l_ *= a_;                                                      \
                _Pragma("unroll") for (int k_ = 0; k_ < WG_REDO_PAIRS; ++k_) { \
                    o_[k_][0] *= a_;                                           \
                    o_[k_][1] *= a_;                                           \
                }                                                              \
                m_ = s_;                                                       \
            }                                                                  \
            const float p_ = exp2((s_ - m_) * sl2);                            \
            l_ += p_;                                                          \
            __global const STORAGE_T *vr_ = rv_ + (ulong)j_ * v_stride.z;      \
            _Pragma("unroll") for (int k_ = 0; k_ < WG_REDO_PAIRS; ++k_) {     \
                const int c_ = 2 * lane + 64 * k_;                             \
                if (c_ < WG_DV) {                                              \
                    const uint vv_ = *(__global const uint *)(vr_ + c_);       \
                    o_[k_][0] += p_ * wg_lo(vv_);                              \
                    o_[k_][1] += p_ * wg_hi(vv_);                              \
                }                                                              \
            }                                                                  \
        }                                                                      \
        float mexp_ = l_ > 0.f ? m_ * sl2 : -INFINITY;                         \
        float oscale_ = 1.f;                                                   \
        WG_REDO_SINK(mexp_, l_, oscale_);                                      \
        const bool any_ = l_ > 0.f;                                            \
        const float inv_ = any_ ? oscale_ / l_ : 0.f;                          \
        __global STORAGE_T *orow_ = ro_ + (ulong)(ROW)*o_stride.z;             \
        _Pragma("unroll") for (int k_ = 0; k_ < WG_REDO_PAIRS; ++k_) {         \
            const int c_ = 2 * lane + 64 * k_;                                 \
            if (c_ < WG_DV)                                                    \
                *(__global uint *)(orow_ + c_) =                               \
                    WG_PACK(o_[k_][0] * inv_, o_[k_][1] * inv_);               \
        }                                                                      \
        if (write_lse && lane == 0)                                            \
            lse[lse_base + WG_SEQ_AT(it, lse_stride, q_first) +                \
                (ulong)h * lse_stride.y + (ulong)(ROW)*lse_stride.z] =         \
                any_ ? (mexp_ + log2(l_)) * 0.69314718055994530942f            \
                     : -INFINITY;                                              \
    } while (0)
#if FLASHCL_SINKS
/* the sink: one more logit in the denominator (as the epilogue) */
#define WG_REDO_SINK(mexp, l, oscale)                                          \
    do {                                                                       \
        const float mall_ = fmax(mexp, sink);                                  \
        oscale = l > 0.f ? exp2(mexp - mall_) : 0.f;                           \
        l = l * oscale + exp2(sink - mall_);                                   \
        mexp = mall_;                                                          \
    } while (0)
#else
#define WG_REDO_SINK(mexp, l, oscale) ((void)0)
#endif
#endif

__kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void
flashcl_attention_fwd(FLASHCL_FWD_PARAMS WG_PERSIST_PARAMS WG_VARLEN_PARAMS)
{
    __local uint4 smem[WG_DECLARED_SMEM / 16]
        __attribute__((aligned(WG_SWIZZLE ? 1024 : 128)));
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
#if WG_WS
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
#else
    const int tid = (int)get_local_id(0);
#endif
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

#if WG_WS
    /* Ring slot of tile t (K_j = 2j, V_j = 2j + 1 of a work item, counted
     * on from wt0) and its two mbarriers: `full` completes a phase when
     * the producer's 128 threads' copies of the slot's tile have landed,
     * `empty` when the consumers' warps have all finished reading it (one
     * arrival per warp). Use u = (wt0 + t) / RING of a slot is phase u of
     * both. */
#define WG_WS_T(t) (wt0 + (t))
#define WG_WS_SLOT(t) (sbase + (uint)(WG_WS_T(t) % WG_RING) * WG_TILEB)
#define WG_WS_FULL(t)                                                          \
    (sbase + WG_RING * WG_TILEB + WG_QB + 8u * (uint)(WG_WS_T(t) % WG_RING))
#define WG_WS_EMPTY(t) (WG_WS_FULL(t) + 8u * WG_RING)
#define WG_WS_PHASE(t) ((uint)(WG_WS_T(t) / WG_RING) & 1u)
    if (tid == 0 && producer) {
        for (int sl = 0; sl < WG_RING; ++sl) {
            NV_MB_INIT(WG_WS_FULL(sl), 128u);
            NV_MB_INIT(WG_WS_EMPTY(sl), (uint)(WG_CONSUMER_THREADS / 32));
        }
    }
#if WG_SKIP_PAD
    /* the ring's pad chunks (FLASHCL_NV_WGMMA_SKIP_PAD): zero-filling
     * copies of the whole ring, once; the tiles' copies then write only
     * the real chunks */
    for (int z = (int)get_local_id(0); z < WG_RING * WG_TILEB / 16;
         z += WG_THREADS)
        NV_CP_ASYNC16(sbase + 16u * (uint)z, k, 0u);
    NV_CP_COMMIT();
    NV_CP_WAIT_ALL();
    WG_FENCE_PROXY();
#endif
    barrier(CLK_LOCAL_MEM_FENCE); /* the last work-group barrier */
    /* Each role loops over the work items on its own: setmaxnreg needs
     * all code after the producer's to be the producer's. */
    if (producer) {
#if WG_WS == 2
        NV_SETMAXNREG_DEC(WG_STR(FLASHCL_NV_WGMMA_REGS_PRODUCER));
#endif
        WG_ITEMS_BEGIN(it)
        WG_ITEM_POINTERS(it);
        /* Tile t waits for its slot's previous use to be handed back; the
         * copies are zero-filled past the keys. In the persistent grid
         * the next item's tiles follow at once, under this one's
         * epilogue. */
#if WG_XS
        WG_XS_POINTERS(it);
#endif
        for (int t = 0; t < WG_T * it.j_end; ++t) {
            if (WG_WS_T(t) >= WG_RING)
                NV_MB_WAIT(WG_WS_EMPTY(t), WG_WS_PHASE(t - WG_RING));
#if FLASHCL_NV_WGMMA_DEBUG_NOLOAD /* a measurement: wrong results */
            NV_MB_ARRIVE(WG_WS_FULL(t));
#else
            const int kind = t % WG_T; /* 0: K, WG_T - 1: V, else a part */
            const int jt = t / WG_T;
#if WG_XS
            if (kind != 0 && kind != WG_T - 1) {
                WG_XS_COPY(WG_WS_SLOT(t), kind - 1, jt * WG_BN, it);
                NV_MB_ARRIVE_CP(WG_WS_FULL(t));
                continue;
            }
#endif
            const bool isv = kind != 0;
            WG_LOAD_TILE_(WG_WS_SLOT(t), isv ? vp : kp, isv ? vs : ks,
                          jt * WG_BN, it.nk, isv ? WG_CPV : WG_CPQ);
            NV_MB_ARRIVE_CP(WG_WS_FULL(t));
#endif
        }
        WG_ITEMS_END(it)
        NV_CP_WAIT_ALL(); /* no copy outlives its thread */
        return;
    }
#if WG_WS == 2
    NV_SETMAXNREG_INC(WG_STR(FLASHCL_NV_WGMMA_REGS_CONSUMER));
#endif
#endif

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

#if FLASHCL_NV_WGMMA_QSMEM
    /* ---- Q: this warpgroup's 64 rows into local memory (the K tile
     * layout), copied by its own threads; its warps meet once at a named
     * barrier (3 + warpgroup: 1 and 2 are the ping-pong's) before the
     * first S */
    const uint qbuf = sbase + WG_RING * WG_TILEB + (uint)(warp >> 2) * 64 * WG_D * 2;
    const int m0_q = m0 + (warp >> 2) * 64;
    {
        const int qt = tid & 127;
        _Pragma("unroll") for (int ci = 0; ci < 64 * WG_CPR / 128; ++ci) {
            int r, c;
            uint at;
            WG_CHUNK(qt, ci, 128, 64, r, c, at);
            const int row = m0_q + r;
            const bool ok = row < seqlen_q && WG_REAL_CHUNK(c);
            __global const STORAGE_T *gq =
                qp + (ok ? (ulong)row * qs : (ulong)0) + (ulong)(c * 8);
            NV_CP_ASYNC16(qbuf + at, gq, ok ? 16u : 0u);
        }
        NV_CP_COMMIT();
        NV_CP_WAIT_ALL();
        WG_FENCE_PROXY();
        if ((warp >> 2) == 0)
            NV_BAR_SYNC("3", "128");
        else if ((warp >> 2) == 1)
            NV_BAR_SYNC("4", "128");
        else
            NV_BAR_SYNC("5", "128");
    }
#if WG_SWIZZLE
#define WG_Q_DESC(c) WG_K_DESC(qbuf, c) /* BN = 64: the same regions */
#else
    const ulong qdesc = nv_wg_desc(qbuf, 128, WG_GROUPB);
#define WG_Q_DESC(c) NV_WG_DESC_ADD(qdesc, (c) * 256)
#endif
#else
    /* ---- Q: A fragments straight from global memory ------------------ */
    uint qf[WG_KC][4];
    {
        const int r1 = row0 + 8;
        const bool ok0 = row0 < seqlen_q, ok1 = r1 < seqlen_q;
        __global const uint *q0 =
            (__global const uint *)(qp + (ok0 ? (ulong)row0 * qs : 0));
        __global const uint *q1 =
            (__global const uint *)(qp + (ok1 ? (ulong)r1 * qs : 0));
#pragma unroll
        for (int c = 0; c < WG_KC; ++c) {
            const int w = c * 8 + t4; /* 32-bit word of columns 16c + 2t4 */
            /* columns 16c + 2t4 (+1) and 16c + 8 + 2t4 (+1): real when
             * their 8-column group is (WG_DQ is a multiple of 8) */
            const bool lo = 16 * c < WG_DQ, hi = 16 * c + 8 < WG_DQ;
            qf[c][0] = ok0 && lo ? q0[w] : 0u;
            qf[c][1] = ok1 && lo ? q1[w] : 0u;
            qf[c][2] = ok0 && hi ? q0[w + 4] : 0u;
            qf[c][3] = ok1 && hi ? q1[w + 4] : 0u;
        }
    }
#endif

#if WG_SCORED || FLASHCL_MASK
    /* What each row's score code needs, once (not per key tile). */
    score_row srow[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
        srow[hh] = score_row_init(b, h, row0 + hh * 8, it.diag,
                                  M_LOG2E_F FLASHCL_VARIANT_NAMES);
#endif
    float acc[WG_ON];
    float sc[WG_SN];
    float row_max[2] = {-INFINITY, -INFINITY}; /* raw scores */
    float row_sum[2] = {0.f, 0.f}; /* this thread's part (quad-reduced last) */
    float exp_big[2] = {0.f, 0.f}; /* WG_EXP_MARK: largest |m sl2| used */
    (void)exp_big;
#pragma unroll
    for (int i = 0; i < WG_ON; ++i)
        acc[i] = 0.f;

    /* ---- local memory ------------------------------------------------- */
#if WG_OVERLAP
#define WG_KBUF(j) sbase
#define WG_VBUF(j) (sbase + (uint)((1 + ((j)&1)) * WG_TILEB))
#elif FLASHCL_NV_STAGES == 1
#define WG_KBUF(j) sbase
#define WG_VBUF(j) (sbase + WG_TILEB)
#else
#define WG_KBUF(j) (sbase + (uint)(((j)&1) * 2 * WG_TILEB))
#define WG_VBUF(j) (sbase + (uint)(((j)&1) * 2 * WG_TILEB + WG_TILEB))
#endif
    /* K: K-major B, k16 step c starts 2 core matrices (256 bytes) on.
     * V: MN-major B, k16 step kk starts 2 rows of core matrices on. */
    float alpha[2];
    bool grew = false; /* some alpha != 1 since the last rescale */
    uint pa[WG_PC][4]; /* P of the last softmax, as A fragments */

#if WG_WS
    /* Consumer warpgroup, tile j: wait for K_j, S_j = Q K_j^T, hand K_j
     * back (lane 0 of each warp: every lane has passed the aligned wgmma
     * wait), softmax, rescale O, pack P, wait for V_j, O += P V_j, hand
     * V_j back. Within a warpgroup everything is in turn; the tensor cores
     * stay busy because the other consumer warpgroup runs its own tiles
     * meanwhile (nothing makes them wait for each other), and the loads
     * run ahead in the producer. A P V kept in flight across the loop's
     * back edge made ptxas copy the accumulators at the loop head and wait
     * (C7517). The slots' data came through the generic proxy (cp.async),
     * wgmma reads through the async proxy: a proxy fence after each wait. */
#define WG_WS_TAKE(t)                                                          \
    do {                                                                       \
        NV_MB_WAIT(WG_WS_FULL(t), WG_WS_PHASE(t));                             \
        WG_FENCE_PROXY();                                                      \
    } while (0)
#define WG_WS_GIVE(t)                                                          \
    do {                                                                       \
        if (lane == 0)                                                         \
            NV_MB_ARRIVE(WG_WS_EMPTY(t));                                      \
    } while (0)
#if FLASHCL_NV_WGMMA_PINGPONG
    /* Turn k of warpgroup w (2 per key tile: S, P V; the same count for
     * both, the lower one taking empty turns past its rows): wait on
     * barrier 1 + w, issue, arrive on the other's. Warpgroup 1 gives the
     * first turn away, and gives none after its last. */
    const int wg_me = warp >> 2;
    const int turns = FLASHCL_NV_WGMMA_SAHEAD ? (j_end > 0 ? j_end + 1 : 0)
                                              : 2 * j_end;
    int turn = 0;
#define WG_TURN_BEGIN()                                                        \
    do {                                                                       \
        if (wg_me == 0)                                                        \
            NV_BAR_SYNC("1", "256");                                           \
        else                                                                   \
            NV_BAR_SYNC("2", "256");                                           \
    } while (0)
#define WG_TURN_END()                                                          \
    do {                                                                       \
        if (wg_me == 0)                                                        \
            NV_BAR_ARRIVE("2", "256");                                         \
        else if (turn + 1 < turns)                                             \
            NV_BAR_ARRIVE("1", "256");                                         \
        ++turn;                                                                \
    } while (0)
    if (wg_me == 1 && turns > 0)
        NV_BAR_ARRIVE("1", "256");
#else
#define WG_TURN_BEGIN() ((void)0)
#define WG_TURN_END() ((void)0)
#endif
#if FLASHCL_NV_WGMMA_SAHEAD
    /* S ahead, in FlashAttention-3's order: S_{j+1} and P V_j are issued
     * together (one turn), S_{j+1} is waited for alone and its softmax
     * runs under P V_j; O is rescaled and P_{j+1} packed only once P V_j
     * is done, so no ordinary instruction writes an accumulator of a
     * wgmma still in its pipeline stage (C7515: rescaling O before issuing
     * P V made ptxas serialize everything). Turn 0 is S_0; turn j + 1 is
     * S_{j+1} with P V_j. K_{j+1} (tile 2j + 2) is taken before V_j: both
     * are in the ring by then (2 slots suffice, the producer fills in
     * order). */
    float sc2[WG_SN];
    if (j_own > 0) {
        WG_WS_TAKE(0);
        WG_TURN_BEGIN();
        WG_S0_ISSUE(WG_WS_SLOT(0));
        WG_TURN_END();
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(sc, WG_SN);
        WG_WS_GIVE(0);
        WG_SOFTMAX(0);
        WG_PACK_P();
        grew = false; /* O is still zero: nothing to rescale */
    }
/* Tile j (P_j in pa) with a next one: S_{j+1} into NXT, P V_j. */
#define WG_WSA_TILE(NXT, j)                                                    \
    do {                                                                       \
        WG_WS_TAKE(2 * (j) + 2);                                               \
        WG_WS_TAKE(2 * (j) + 1);                                               \
        WG_TURN_BEGIN();                                                       \
        WG_S0_ISSUE_(NXT, WG_WS_SLOT(2 * (j) + 2));                            \
        WG_PV_ISSUE(WG_WS_SLOT(2 * (j) + 1));                                  \
        WG_TURN_END();                                                         \
        NV_WG_WAIT1(); /* S_{j+1} done, P V_j in flight */                     \
        NV_WG_FENCE_REGS(NXT, WG_SN);                                          \
        WG_WS_GIVE(2 * (j) + 2);                                               \
        WG_SOFTMAX_(NXT, ((j) + 1) * WG_BN);                                   \
        NV_WG_WAIT0();                                                         \
        NV_WG_FENCE_REGS(acc, WG_ON);                                          \
        WG_WS_GIVE(2 * (j) + 1);                                               \
        WG_RESCALE_O();                                                        \
        WG_PACK_P_(NXT);                                                       \
    } while (0)
    /* No branch inside a tile's pipeline stage: with S_{j+1} issued under
     * an `if`, ptxas could not pair the wait with its group and
     * serialized the wgmma (C7514). The loop is unrolled by two (S_j and
     * S_{j+1} keep their registers), the last tile (P V only) peeled. */
    int jt = 0;
    for (; jt + 2 < j_own; jt += 2) {
        WG_WSA_TILE(sc2, jt);
        WG_WSA_TILE(sc, jt + 1);
    }
    if (jt + 1 < j_own) {
        WG_WSA_TILE(sc2, jt);
        ++jt;
    }
    if (j_own > 0) { /* the last tile, jt = j_own - 1 */
        WG_WS_TAKE(2 * jt + 1);
        WG_TURN_BEGIN();
        WG_PV_ISSUE(WG_WS_SLOT(2 * jt + 1));
        WG_TURN_END();
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(acc, WG_ON);
        WG_WS_GIVE(2 * jt + 1);
    }
    /* tiles past this warpgroup's rows (causal): handed back unread, each
     * after its copy, two a turn, in the order the other warpgroup's turns
     * need them (so neither waits on the other in a circle) */
    for (int t = 2 * j_own; t < 2 * j_end; t += 2) {
        NV_MB_WAIT(WG_WS_FULL(t), WG_WS_PHASE(t));
        WG_WS_GIVE(t);
        NV_MB_WAIT(WG_WS_FULL(t + 1), WG_WS_PHASE(t + 1));
        WG_WS_GIVE(t + 1);
        WG_TURN_BEGIN();
        WG_TURN_END();
    }
    /* a warpgroup without keys still takes the first turn */
    if (j_own == 0 && j_end > 0) {
        WG_TURN_BEGIN();
        WG_TURN_END();
    }
#else
#if WG_XPF
#if FLASHCL_NV_WGMMA_MASK_BITS
    WG_MASK_WORDS_T xw[2]; /* tile j's mask bits of both row halves */
#else
    float2 xb[WG_SN / 2]; /* tile j's bias, fetched in tile j - 1's softmax */
    uint xm[WG_SN / 2];   /* and its mask bytes */
#endif
    if (j_own > j_first)
        WG_XPF_FETCH(j_first * WG_BN);
#endif
#if WG_XS
    /* the warp's part of each step's staged tiles, and its rows there */
    const int x_part = warp * 16 / WG_XROWS;
    const int x_r = warp * 16 % WG_XROWS;
#endif
    /* tiles before this warpgroup's rows' band: handed back unread, as
     * those past its rows below */
    for (int t = 0; t < WG_T * j_first; ++t) {
        NV_MB_WAIT(WG_WS_FULL(t), WG_WS_PHASE(t));
        WG_WS_GIVE(t);
        WG_TURN_BEGIN();
        WG_TURN_END();
    }
    for (int j = j_first; j < j_own; ++j) {
        const int n0 = j * WG_BN;
        WG_WS_TAKE(WG_T * j);
        WG_TURN_BEGIN();
        WG_S0_ISSUE(WG_WS_SLOT(WG_T * j));
        WG_TURN_END();
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(sc, WG_SN);
        WG_WS_GIVE(WG_T * j);
#if WG_XS
        /* every part is waited for and handed back by every warp (the
         * slots' empty barriers count all consumer warps); only the
         * warp's own is read */
        _Pragma("unroll") for (int p_ = 0; p_ < WG_XPARTS; ++p_)
            NV_MB_WAIT(WG_WS_FULL(WG_T * j + 1 + p_),
                       WG_WS_PHASE(WG_T * j + 1 + p_));
        const uint x_at = WG_WS_SLOT(WG_T * j + 1 + x_part) - sbase;
#endif
        WG_SOFTMAX(n0); /* (XPF_AT 1: fetches tile j + 1's bias and mask) */
#if WG_XS
        _Pragma("unroll") for (int p_ = 0; p_ < WG_XPARTS; ++p_)
            WG_WS_GIVE(WG_T * j + 1 + p_);
#endif
#if WG_XPF && !FLASHCL_NV_WGMMA_XPF_AT
        WG_XPF_FETCH_NEXT(n0);
#endif
        WG_RESCALE_O();
        WG_PACK_P();
        WG_WS_TAKE(WG_T * j + WG_T - 1);
        WG_TURN_BEGIN();
        WG_PV_ISSUE(WG_WS_SLOT(WG_T * j + WG_T - 1));
        WG_TURN_END();
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(acc, WG_ON);
        WG_WS_GIVE(WG_T * j + WG_T - 1);
    }
    /* tiles past this warpgroup's rows (causal): handed back unread, each
     * after its copy, so that no arrival runs a phase ahead */
    for (int t = WG_T * j_own; t < WG_T * j_end; ++t) {
        NV_MB_WAIT(WG_WS_FULL(t), WG_WS_PHASE(t));
        WG_WS_GIVE(t);
        WG_TURN_BEGIN();
        WG_TURN_END();
    }
#endif
#elif WG_OVERLAP
    /* FlashAttention-3's intra-warpgroup overlap: in step j the tensor
     * cores run S_j = Q K_j^T and then O += P_{j-1} V_{j-1} while the
     * softmax of S_j runs; O is rescaled by step j's alpha once that P V
     * is done, and P_j goes into registers only then (the P V in flight
     * reads the previous P). One K buffer, two V buffers (3 tiles; 48 KiB
     * at D = 128). cp.async groups, in order: K_0, V_0, then per step j
     * K_{j+1} (issued once every S_j is done) and V_{j+1} (once every
     * P V_{j-1} is done; empty groups past the end keep the count), so
     * waiting for all but the newest group at step j's start finds K_j
     * and V_{j-1} landed. */
    if (j_end > 0) {
        WG_LOAD_TILE(WG_KBUF(0), kp, ks, 0, nk);
        NV_CP_COMMIT();
        WG_LOAD_V_TILE(WG_VBUF(0), vp, vs, 0, nk);
        NV_CP_COMMIT();
    }
    for (int j = 0; j < j_end; ++j) {
        const int n0 = j * WG_BN;
        NV_CP_WAIT_1();
        WG_FENCE_PROXY();
        barrier(CLK_LOCAL_MEM_FENCE); /* K_j and V_{j-1} landed */
        WG_S_ISSUE(WG_KBUF(j));
        if (j > 0) {
            WG_PV_ISSUE(WG_VBUF(j - 1));
            NV_WG_WAIT1();
        } else {
            NV_WG_WAIT0();
        }
        NV_WG_FENCE_REGS(sc, WG_SN);
        barrier(CLK_LOCAL_MEM_FENCE); /* every S_j done: K buffer free */
        if (j + 1 < j_end)
            WG_LOAD_TILE(WG_KBUF(j + 1), kp, ks, n0 + WG_BN, nk);
        NV_CP_COMMIT();
        WG_SOFTMAX(n0);
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(acc, WG_ON);
        WG_RESCALE_O();
        WG_PACK_P();
        barrier(CLK_LOCAL_MEM_FENCE); /* every P V_{j-1} done: its V free */
        if (j + 1 < j_end)
            WG_LOAD_V_TILE(WG_VBUF(j + 1), vp, vs, n0 + WG_BN, nk);
        NV_CP_COMMIT();
    }
    if (j_end > 0) { /* the last P V */
        WG_TILE_READY();
        WG_PV_ISSUE(WG_VBUF(j_end - 1));
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(acc, WG_ON);
    }
#elif WG_RING
    /* Tile t of the sequence K_0, V_0, K_1, ... (K_j = 2j, V_j = 2j + 1)
     * lives in slot t % RING. Step t: wait for tile t (each load is one
     * cp.async group, empty ones past the end keep the count: RING - 2 -
     * LAG newer groups may still fly), publish it with the barrier, which
     * also says every thread is done with tile t - 1 - LAG (its S waited
     * for before the softmax; its P V waited for before this barrier, or
     * with LAG 1 before the step after), and refill that tile's slot with
     * tile t + RING - 1 - LAG. */
    const int n_tiles = 2 * j_end;
#define WG_RING_SLOT(t) (sbase + (uint)((t) % WG_RING) * WG_TILEB)
#define WG_RING_LOAD(t)                                                        \
    do {                                                                       \
        const int tl_ = (t);                                                   \
        if (tl_ < n_tiles) {                                                   \
            const bool isv_ = (tl_ & 1) != 0;                                  \
            WG_LOAD_TILE_(WG_RING_SLOT(tl_), isv_ ? vp : kp, isv_ ? vs : ks,   \
                          (tl_ >> 1) * WG_BN, nk,                              \
                          isv_ ? WG_CPV : WG_CPQ);                             \
        }                                                                      \
        NV_CP_COMMIT();                                                        \
    } while (0)
#define WG_RING_STEP(t)                                                        \
    do {                                                                       \
        WG_RING_CP_WAIT();                                                     \
        WG_FENCE_PROXY();                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                          \
        WG_RING_LOAD((t) + WG_RING - 1 - WG_LAG);                              \
    } while (0)
#if FLASHCL_NV_WGMMA_SAHEAD
    /* Tiles in the order of use: K_0, then per j: K_{j+1} (u = 2j + 1, a
     * hole when j + 1 = j_end: an empty group), V_j (u = 2j + 2). The ring
     * steps, waits and refills as above with LAG 1: S of tile u is waited
     * for by the end of step u + 1, P V of tile u within step u + 1. */
    const int n_seq = j_end > 0 ? 2 * j_end + 1 : 0;
#undef WG_RING_LOAD
#define WG_RING_LOAD(t)                                                        \
    do {                                                                       \
        const int tl_ = (t);                                                   \
        if (tl_ < n_seq && tl_ != n_seq - 2) {                                 \
            const bool isv_ = tl_ > 0 && (tl_ & 1) == 0;                       \
            const int kt_ = isv_ ? tl_ / 2 - 1 : (tl_ + 1) / 2;                \
            WG_LOAD_TILE_(WG_RING_SLOT(tl_), isv_ ? vp : kp, isv_ ? vs : ks,   \
                          kt_ * WG_BN, nk, isv_ ? WG_CPV : WG_CPQ);            \
        }                                                                      \
        NV_CP_COMMIT();                                                        \
    } while (0)
    /* One key tile j: S_j is in CUR (done), S_{j+1} goes to NXT. */
#define WG_SA_TILE(CUR, NXT, j)                                                \
    do {                                                                       \
        const bool more_ = (j) + 1 < j_end;                                    \
        WG_RING_STEP(2 * (j) + 1);                                             \
        if (more_) {                                                           \
            WG_S0_ISSUE_(NXT, WG_RING_SLOT(2 * (j) + 1));                      \
            NV_WG_WAIT1(); /* P V_{j-1} done, S_{j+1} in flight */             \
        } else {                                                               \
            NV_WG_WAIT0();                                                     \
        }                                                                      \
        NV_WG_FENCE_REGS(acc, WG_ON);                                          \
        WG_SOFTMAX_(CUR, (j) * WG_BN);                                         \
        WG_RESCALE_O();                                                        \
        WG_PACK_P_(CUR);                                                       \
        WG_RING_STEP(2 * (j) + 2);                                             \
        WG_PV_ISSUE(WG_RING_SLOT(2 * (j) + 2));                                \
        if (more_) {                                                           \
            NV_WG_WAIT1(); /* S_{j+1} done, P V_j in flight */                 \
            NV_WG_FENCE_REGS(NXT, WG_SN);                                      \
        } else {                                                               \
            NV_WG_WAIT0();                                                     \
            NV_WG_FENCE_REGS(acc, WG_ON);                                      \
        }                                                                      \
    } while (0)
    float sc2[WG_SN];
#pragma unroll 1
    for (int t = 0; t < WG_RING - 2; ++t)
        WG_RING_LOAD(t);
    if (j_end > 0) {
        WG_RING_STEP(0);
        WG_S0_ISSUE(WG_RING_SLOT(0));
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(sc, WG_SN);
    }
    /* unrolled by two, so that S_j and S_{j+1} keep their registers */
    for (int j = 0; j < j_end; j += 2) {
        WG_SA_TILE(sc, sc2, j);
        if (j + 1 < j_end)
            WG_SA_TILE(sc2, sc, j + 1);
    }
#else
#pragma unroll 1
    for (int t = 0; t < WG_RING - 1 - WG_LAG; ++t)
        WG_RING_LOAD(t);
    for (int j = 0; j < j_end; ++j) {
        const int n0 = j * WG_BN;
        WG_RING_STEP(2 * j);
        WG_S0_ISSUE(WG_RING_SLOT(2 * j));
        NV_WG_WAIT0(); /* with LAG 1 also the P V of tile j - 1 */
        NV_WG_FENCE_REGS(sc, WG_SN);
        NV_WG_FENCE_REGS(acc, WG_ON);
        WG_SOFTMAX(n0);
        WG_RESCALE_O();
        WG_PACK_P();
        WG_RING_STEP(2 * j + 1);
        WG_PV_ISSUE(WG_RING_SLOT(2 * j + 1));
        /* With LAG 1 the last P V is waited for inside the loop: an
         * accumulator in flight at the loop's exit meets the j_end = 0
         * path's zeros there, and the copy that merges them makes ptxas
         * serialize every wgmma (C7515). */
        if (!WG_LAG || j + 1 == j_end) {
            NV_WG_WAIT0();
            NV_WG_FENCE_REGS(acc, WG_ON);
        }
    }
#endif /* FLASHCL_NV_WGMMA_SAHEAD */
    NV_CP_WAIT_ALL(); /* only empty groups left; none outlives the kernel */
#else
    if (j_end > 0) {
        WG_LOAD_TILE(WG_KBUF(0), kp, ks, 0, nk);
#if FLASHCL_NV_STAGES == 2
        WG_LOAD_V_TILE(WG_VBUF(0), vp, vs, 0, nk);
#endif
        NV_CP_COMMIT();
    }

    for (int j = 0; j < j_end; ++j) {
        const int n0 = j * WG_BN;
        WG_TILE_READY(); /* tile j's K (and V) landed; the others' buffers free */
#if FLASHCL_NV_STAGES == 1
        WG_LOAD_V_TILE(WG_VBUF(j), vp, vs, n0, nk);
        NV_CP_COMMIT();
#else
        if (j + 1 < j_end) {
            WG_LOAD_TILE(WG_KBUF(j + 1), kp, ks, n0 + WG_BN, nk);
            WG_LOAD_V_TILE(WG_VBUF(j + 1), vp, vs, n0 + WG_BN, nk);
            NV_CP_COMMIT();
        }
#endif
        WG_S_ISSUE(WG_KBUF(j));
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(sc, WG_SN);
        WG_SOFTMAX(n0);
        WG_RESCALE_O();
        WG_PACK_P();
#if FLASHCL_NV_STAGES == 1
        WG_TILE_READY(); /* V[j] landed; every S of tile j done: K free */
        if (j + 1 < j_end) {
            WG_LOAD_TILE(WG_KBUF(j + 1), kp, ks, n0 + WG_BN, nk);
            NV_CP_COMMIT();
        }
#endif
        WG_PV_ISSUE(WG_VBUF(j));
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(acc, WG_ON);
    }
#endif

    /* ---- epilogue: normalise, write O (and LSE) ----------------------- */
#if FLASHCL_SINKS
    /* The sink is one more logit in the denominator, with no value row. */
    const float sink = sink_logit(h, M_LOG2E_F FLASHCL_VARIANT_NAMES);
#endif
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float l = row_sum[hh];
        l += nv_shfl_xor(l, 1);
        l += nv_shfl_xor(l, 2);
        const int row = row0 + hh * 8;
        /* row max in exp2 units (-inf when the row saw nothing) */
        float mexp = l > 0.f ? row_max[hh] * sl2 : -INFINITY;
        float oscale = 1.f;
#if FLASHCL_SINKS
        {
            const float mall = fmax(mexp, sink);
            oscale = l > 0.f ? exp2(mexp - mall) : 0.f;
            l = l * oscale + exp2(sink - mall);
            mexp = mall;
        }
#endif
        const bool any = l > 0.f;
        const float inv = any ? oscale / l : 0.f;
        /* (a row to redo is written by WG_REDO_ROW below only) */
        if (row < seqlen_q && !(WG_EXP_REDO && exp_big[hh] >= 4096.f)) {
            __global STORAGE_T *orow = op + (ulong)row * os;
#pragma unroll
            for (int d = 0; d < WG_DV / 8; ++d)
                *(__global uint *)(orow + d * 8 + t4 * 2) =
                    WG_PACK(acc[4 * d + 2 * hh] * inv,
                            acc[4 * d + 2 * hh + 1] * inv);
            /* (after this thread's own store of columns 0 and 1) */
#if WG_EXP_MARK && !WG_EXP_REDO
            if (t4 == 0 && exp_big[hh] >= 4096.f)
                orow[0] = (STORAGE_T)0x7fffu; /* NaN in fp16 and bf16 */
#endif
            if (write_lse && t4 == 0)
                lse[lse_base + WG_SEQ_AT(it, lse_stride, q_first) +
                    (ulong)h * lse_stride.y + (ulong)row * lse_stride.z] =
                    any ? (mexp + log2(l)) * 0.69314718055994530942f
                        : -INFINITY;
        }
    }
#if WG_EXP_REDO
    /* rows whose max reached |m sl2| >= 2^12, one at a time (warp-uniform:
     * a row's four lanes share its max) */
    if (nv_warp_any(exp_big[0] >= 4096.f || exp_big[1] >= 4096.f)) {
        for (int rr = 0; rr < 16; ++rr) {
            const int row = row0 - g + rr;
            const float big = rr < 8 ? exp_big[0] : exp_big[1];
            if (nv_warp_any(g == (rr & 7) && big >= 4096.f) &&
                row < seqlen_q)
                WG_REDO_ROW(row);
        }
    }
#endif
    WG_ITEMS_END(it)
}

#endif /* FLASHCL_NV_WGMMA */
