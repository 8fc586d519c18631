/*
 * flashcl: forward attention for Hopper (sm_90a) with warpgroup MMA
 * (wgmma.mma_async), written in OpenCL C with inline PTX. The host
 * compiles this file only on NVIDIA compute capability 9.x with
 * -DFLASHCL_NV_WGMMA=1, then patches the PTX (cl/nvidia/nv_wgmma.clh says
 * how); anywhere else the file preprocesses to nothing.
 *
 * First version, kept simple: a work-group of one or two warpgroups
 * (FLASHCL_WG_SIZE 128 or 256) owns 64 query rows per warpgroup of one
 * (batch, head), each warp 16 of them; two warpgroups share every K/V tile
 * (half the copies and barriers per row) and run the same loop. Q lives in registers as
 * the A operand of S = Q K^T (m64n64k16, one per 16 head-dim columns); the
 * online softmax runs on the S accumulators; P is repacked to 16 bits in
 * registers as the A operand of O += P V (m64nDk16, one per 16 keys). K and
 * V tiles of 64 keys stream through local memory with cp.async in the
 * wgmma "interleave" (no swizzle) layout: core matrices of 8 keys x 8
 * head-dim elements, 128 contiguous bytes each, key-major inside, so one
 * layout serves K (K-major B) and V (MN-major B, transpose flag). At D = 64
 * K and V are double-buffered (32 KiB), at D = 128 single-buffered with
 * FlashAttention-2's split (V[j] loads during S = Q K[j]^T, K[j+1] during
 * P V[j]; 32 KiB). Local memory: 48 KiB per work-group on NVIDIA's OpenCL.
 *
 * Semantics as the mma.sync kernel (docs/nvidia-path.md): bottom-right
 * causal (query i sees key j iff j <= i + diag + window_right, diag =
 * seqlen_k - seqlen_q), GQA through group_size, natural-log LSE, rows that
 * see no key write O = 0 and LSE = -inf. The exponent is the exact form
 * 2^((s - m) * scale log2 e), so no fix-up pass is needed.
 *
 * Host guarantees on this path: D = D_v = 64 or 128, fp16 or bf16, dim
 * stride 1, 16-byte-aligned rows, no score variant, no window, bottom-right
 * causal or none.
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

#if FLASHCL_HEAD_DIM != 64 && FLASHCL_HEAD_DIM != 128
#error "flash_fwd_wgmma: FLASHCL_HEAD_DIM must be 64 or 128"
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
#if FLASHCL_WG_SIZE != 128 && FLASHCL_WG_SIZE != 256
#error "flash_fwd_wgmma: FLASHCL_WG_SIZE must be 128 or 256 (1 or 2 warpgroups)"
#endif
#if FLASHCL_BLOCK_M != FLASHCL_WG_SIZE / 2
#error "flash_fwd_wgmma: FLASHCL_BLOCK_M must be 64 rows (the wgmma M) per warpgroup"
#endif
#if FLASHCL_BLOCK_N != 64
#error "flash_fwd_wgmma: FLASHCL_BLOCK_N must be 64"
#endif
#if FLASHCL_NV_PRESCALE != 0 && FLASHCL_NV_PRESCALE != 1
#error "flash_fwd_wgmma: FLASHCL_NV_PRESCALE must be 0 or 1"
#endif
#if FLASHCL_SOFTCAP || FLASHCL_ALIBI || FLASHCL_BIAS || FLASHCL_MASK ||        \
    FLASHCL_SINKS
#error "flash_fwd_wgmma: score variants run on the mma.sync kernel"
#endif

/* cp.async, shuffles, ex2 and the 16-bit packs of the mma.sync path; the
 * wgmma helpers (their operand types follow FLASHCL_DTYPE) */
#ifndef FLASHCL_NV_MMA
#define FLASHCL_NV_MMA 1
#endif
#include "nv_mma.clh"
#include "nv_wgmma.clh"

#define STORAGE_T ushort
typedef float real_t;
#include "kernel_args.clh"

#define WG_D FLASHCL_HEAD_DIM
#define WG_BM FLASHCL_BLOCK_M
#define WG_BN FLASHCL_BLOCK_N
#define WG_THREADS FLASHCL_WG_SIZE /* 64 rows per warpgroup of 128 */
#define WG_KC (WG_D / 16)   /* k16 steps of Q K^T */
#define WG_PC (WG_BN / 16)  /* k16 steps of P V */
#define WG_SN (WG_BN / 2)   /* S accumulators per thread */
#define WG_ON (WG_D / 2)    /* O accumulators per thread */
#define WG_CPR (WG_D / 8)   /* 16-byte chunks per K/V row */
#define WG_TILEB (WG_BN * WG_D * 2) /* one K or V tile, bytes */
#define WG_GROUPB (WG_CPR * 128)    /* 8 keys x D: one row of core matrices */
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
#define WG_SMEM_BYTES (FLASHCL_NV_STAGES * 2 * WG_TILEB)
#if WG_SMEM_BYTES > FLASHCL_LOCAL_MEM_BYTES
#error "flash_fwd_wgmma: K/V tiles exceed the device's local memory"
#endif

#if FLASHCL_DTYPE == 1
#define WG_PACK nv_pack_f16
#else
#define WG_PACK nv_pack_bf16
#endif
#if WG_D == 64
#define WG_MMA_PV NV_WG_MMA_N64
#else
#define WG_MMA_PV NV_WG_MMA_N128
#endif

/* cp.async writes go through the generic proxy, wgmma reads local memory
 * through the async proxy: each thread fences its own copies before the
 * barrier that publishes the tile. */
#define WG_FENCE_PROXY()                                                       \
    __asm__ volatile("/*SM90A { fence.proxy.async.shared::cta; } */" ::: \
                         "memory")
#define WG_TILE_READY()                                                        \
    do {                                                                       \
        NV_CP_WAIT_ALL();                                                      \
        WG_FENCE_PROXY();                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                          \
    } while (0)

/* Copies rows n0 .. n0 + BN - 1 of `src` (row stride rs) into the tile at
 * local byte address `dst`, in the core-matrix layout: chunk (key r, 16-byte
 * column chunk c) at ((r / 8) * CPR + c) * 128 + (r % 8) * 16. Thread t
 * writes the consecutive 16-byte slots t, t + WG_SIZE, ...: a warp fills 512
 * contiguous bytes. Rows at or past nmax are zero-filled. */
#define WG_LOAD_TILE(dst, src, rs, n0, nmax)                                   \
    do {                                                                       \
        const bool full_ = (n0) + WG_BN <= (nmax);                             \
        _Pragma("unroll") for (int ci_ = 0;                                    \
                               ci_ < WG_BN * WG_CPR / WG_THREADS; ++ci_)       \
        {                                                                      \
            const int l_ = tid + ci_ * WG_THREADS;                             \
            const int r_ = (l_ / (8 * WG_CPR)) * 8 + (l_ & 7);                 \
            const int c_ = (l_ >> 3) % WG_CPR;                                 \
            const bool ok_ = full_ || (n0) + r_ < (nmax);                      \
            __global const STORAGE_T *g_ =                                     \
                (src) + (ok_ ? (ulong)((n0) + r_) * (rs) : (ulong)0) +         \
                (ulong)(c_ * 8);                                               \
            NV_CP_ASYNC16((dst) + (uint)(l_ * 16), g_, ok_ ? 16u : 0u);        \
        }                                                                      \
    } while (0)

__kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void
flashcl_attention_fwd(FLASHCL_FWD_PARAMS)
{
    __local uint4 smem[WG_SMEM_BYTES / 16] __attribute__((aligned(128)));
    (void)head_dim;
    (void)head_dim_v;
    (void)window_left;

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t4 = lane & 3;

    /* Heaviest causal blocks (largest query index) first. */
    const int qb = (int)get_num_groups(0) - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
    const int hk = h / group_size;
    const int m0 = qb * WG_BM;
    /* warp w of warpgroup v owns rows 64v + 16w: 16 * (4v + w) */
    const int row0 = m0 + warp * 16 + g; /* this thread's rows: row0, +8 */
    const int nv_diag = (int)diag;
#if FLASHCL_CAUSAL
    const int right = (int)window_right;
#endif
#if FLASHCL_NV_PRESCALE
    const float sl2 = 1.f;
#else
    const float sl2 = scale_log2;
#endif

    __global const STORAGE_T *qp = q + base.x + (ulong)b * q_stride.x +
                                   (ulong)h * q_stride.y;
    __global const STORAGE_T *kp = k + base.y + (ulong)b * k_stride.x +
                                   (ulong)hk * k_stride.y;
    __global const STORAGE_T *vp = v + base.z + (ulong)b * v_stride.x +
                                   (ulong)hk * v_stride.y;
    __global STORAGE_T *op = o + base.w + (ulong)b * o_stride.x +
                             (ulong)h * o_stride.y;
    const ulong qs = q_stride.z, ks = k_stride.z, vs = v_stride.z,
                os = o_stride.z;

    /* ---- key range of this block ------------------------------------- */
    const int mlast = min(m0 + WG_BM, seqlen_q); /* exclusive */
#if FLASHCL_CAUSAL
    const int n_end = clamp(mlast - 1 + nv_diag + right + 1, 0, seqlen_k);
    const int free_hi = m0 + nv_diag + right; /* last key every row sees */
#else
    const int n_end = seqlen_k;
#endif
    const int j_end = (n_end + WG_BN - 1) / WG_BN;

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
            qf[c][0] = ok0 ? q0[w] : 0u;
            qf[c][1] = ok1 ? q1[w] : 0u;
            qf[c][2] = ok0 ? q0[w + 4] : 0u;
            qf[c][3] = ok1 ? q1[w + 4] : 0u;
        }
    }

    float acc[WG_ON];
    float sc[WG_SN];
    float row_max[2] = {-INFINITY, -INFINITY}; /* raw scores */
    float row_sum[2] = {0.f, 0.f}; /* this thread's part (quad-reduced last) */
#pragma unroll
    for (int i = 0; i < WG_ON; ++i)
        acc[i] = 0.f;

    /* ---- local memory ------------------------------------------------- */
    const uint sbase = (uint)(size_t)smem;
#if FLASHCL_NV_STAGES == 1
#define WG_KBUF(j) sbase
#define WG_VBUF(j) (sbase + WG_TILEB)
#else
#define WG_KBUF(j) (sbase + (uint)(((j)&1) * 2 * WG_TILEB))
#define WG_VBUF(j) (sbase + (uint)(((j)&1) * 2 * WG_TILEB + WG_TILEB))
#endif
    /* K: K-major B, k16 step c starts 2 core matrices (256 bytes) on.
     * V: MN-major B, k16 step kk starts 2 rows of core matrices on. */
    const uint k_lbo = 128, k_sbo = WG_GROUPB;
    const uint v_lbo = WG_GROUPB, v_sbo = 128;

    if (j_end > 0) {
        WG_LOAD_TILE(WG_KBUF(0), kp, ks, 0, seqlen_k);
#if FLASHCL_NV_STAGES == 2
        WG_LOAD_TILE(WG_VBUF(0), vp, vs, 0, seqlen_k);
#endif
        NV_CP_COMMIT();
    }

    for (int j = 0; j < j_end; ++j) {
        const int n0 = j * WG_BN;
        WG_TILE_READY(); /* tile j's K (and V) landed; the others' buffers free */
#if FLASHCL_NV_STAGES == 1
        WG_LOAD_TILE(WG_VBUF(j), vp, vs, n0, seqlen_k);
        NV_CP_COMMIT();
#else
        if (j + 1 < j_end) {
            WG_LOAD_TILE(WG_KBUF(j + 1), kp, ks, n0 + WG_BN, seqlen_k);
            WG_LOAD_TILE(WG_VBUF(j + 1), vp, vs, n0 + WG_BN, seqlen_k);
            NV_CP_COMMIT();
        }
#endif

        /* ---- S = Q K^T ------------------------------------------------ */
#pragma unroll
        for (int i = 0; i < WG_SN; ++i)
            sc[i] = 0.f;
        NV_WG_FENCE_REGS(sc, WG_SN);
        NV_WG_FENCE();
        {
            const ulong kd = nv_wg_desc(WG_KBUF(j), k_lbo, k_sbo);
#pragma unroll
            for (int c = 0; c < WG_KC; ++c)
                NV_WG_MMA_N64(sc, qf[c], NV_WG_DESC_ADD(kd, c * 256), "0");
        }
        NV_WG_COMMIT();
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(sc, WG_SN);

#if FLASHCL_NV_PRESCALE
#pragma unroll
        for (int i = 0; i < WG_SN; ++i)
            sc[i] *= scale_log2;
#endif
        /* ---- mask: only tiles crossing the diagonal or the end -------- */
        bool edge = n0 + WG_BN > seqlen_k;
#if FLASHCL_CAUSAL
        edge = edge || n0 + WG_BN - 1 > free_hi;
#endif
        if (edge) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
#if FLASHCL_CAUSAL
                const int hi = min(row0 + hh * 8 + nv_diag + right, seqlen_k - 1);
#else
                const int hi = seqlen_k - 1;
#endif
#pragma unroll
                for (int n = 0; n < WG_BN / 8; ++n) {
                    const int col = n0 + n * 8 + t4 * 2;
                    if (col > hi)
                        sc[4 * n + 2 * hh] = -INFINITY;
                    if (col + 1 > hi)
                        sc[4 * n + 2 * hh + 1] = -INFINITY;
                }
            }
        }

        /* ---- online softmax (exp2 domain) ----------------------------- */
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float mx = row_max[hh];
#pragma unroll
            for (int n = 0; n < WG_BN / 8; ++n)
                mx = fmax(mx, fmax(sc[4 * n + 2 * hh], sc[4 * n + 2 * hh + 1]));
            mx = fmax(mx, nv_shfl_xor(mx, 1));
            mx = fmax(mx, nv_shfl_xor(mx, 2));
            /* mx == -inf: nothing seen yet; keep the arguments finite */
            const float alpha =
                mx == -INFINITY ? 1.f : nv_ex2((row_max[hh] - mx) * sl2);
            const float mref = mx == -INFINITY ? 0.f : mx;
            row_max[hh] = mx;
            row_sum[hh] *= alpha;
#pragma unroll
            for (int d = 0; d < WG_D / 8; ++d) {
                acc[4 * d + 2 * hh] *= alpha;
                acc[4 * d + 2 * hh + 1] *= alpha;
            }
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < WG_BN / 8; ++n) {
                const float p0 = nv_ex2((sc[4 * n + 2 * hh] - mref) * sl2);
                const float p1 = nv_ex2((sc[4 * n + 2 * hh + 1] - mref) * sl2);
                sc[4 * n + 2 * hh] = p0;
                sc[4 * n + 2 * hh + 1] = p1;
                sum += p0 + p1;
            }
            row_sum[hh] += sum;
        }

        /* ---- P as 16-bit A fragments ---------------------------------- */
        uint pa[WG_PC][4];
#pragma unroll
        for (int kk = 0; kk < WG_PC; ++kk) {
            pa[kk][0] = WG_PACK(sc[8 * kk + 0], sc[8 * kk + 1]);
            pa[kk][1] = WG_PACK(sc[8 * kk + 2], sc[8 * kk + 3]);
            pa[kk][2] = WG_PACK(sc[8 * kk + 4], sc[8 * kk + 5]);
            pa[kk][3] = WG_PACK(sc[8 * kk + 6], sc[8 * kk + 7]);
        }

#if FLASHCL_NV_STAGES == 1
        WG_TILE_READY(); /* V[j] landed; every S of tile j done: K free */
        if (j + 1 < j_end) {
            WG_LOAD_TILE(WG_KBUF(j + 1), kp, ks, n0 + WG_BN, seqlen_k);
            NV_CP_COMMIT();
        }
#endif

        /* ---- O += P V ------------------------------------------------- */
        NV_WG_FENCE_REGS(acc, WG_ON);
        NV_WG_FENCE();
        {
            const ulong vd = nv_wg_desc(WG_VBUF(j), v_lbo, v_sbo);
#pragma unroll
            for (int kk = 0; kk < WG_PC; ++kk)
                WG_MMA_PV(acc, pa[kk], NV_WG_DESC_ADD(vd, kk * 2 * WG_GROUPB),
                          "1");
        }
        NV_WG_COMMIT();
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(acc, WG_ON);
    }

    /* ---- epilogue: normalise, write O (and LSE) ----------------------- */
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float l = row_sum[hh];
        l += nv_shfl_xor(l, 1);
        l += nv_shfl_xor(l, 2);
        const int row = row0 + hh * 8;
        const bool any = l > 0.f;
        const float inv = any ? 1.f / l : 0.f;
        if (row < seqlen_q) {
            __global STORAGE_T *orow = op + (ulong)row * os;
#pragma unroll
            for (int d = 0; d < WG_D / 8; ++d)
                *(__global uint *)(orow + d * 8 + t4 * 2) =
                    WG_PACK(acc[4 * d + 2 * hh] * inv,
                            acc[4 * d + 2 * hh + 1] * inv);
            if (write_lse && t4 == 0)
                lse[lse_base + (ulong)b * lse_stride.x +
                    (ulong)h * lse_stride.y + (ulong)row * lse_stride.z] =
                    any ? (row_max[hh] * sl2 + log2(l)) * 0.69314718055994530942f
                        : -INFINITY;
        }
    }
}

#endif /* FLASHCL_NV_WGMMA */
