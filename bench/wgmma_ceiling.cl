/* The dense wgmma ceiling through OpenCL (issue 12: "measure it through
 * OpenCL with a wgmma loop"): each warpgroup chains m64n256k16 products
 * with both operands from local memory (the values do not matter, the
 * rate does) into one 64 x 256 fp32 accumulator, WG_ITERS times 4 per
 * commit group. Built and patched by bench/wgmma_ceiling.c. */
#define FLASHCL_NV_WGMMA 1
#include "nv_wgmma.clh"

#ifndef WG_GROUPS
#define WG_GROUPS 2 /* warpgroups per work-group */
#endif

#ifndef CEIL_MODE
#define CEIL_MODE 0
#endif

#if CEIL_MODE == 0
__kernel __attribute__((reqd_work_group_size(128 * WG_GROUPS, 1, 1))) void
wgmma_ceiling(__global float *out, const int iters)
{
    /* A: 64 x 16, B: 256 x 16, 16-bit, no-swizzle core matrices */
    __local uint4 smem[(64 + 256) * 16 * 2 / 16] __attribute__((aligned(128)));
    const int tid = (int)get_local_id(0);
    for (int i = tid; i < (64 + 256) * 16 * 2 / 16; i += 128 * WG_GROUPS)
        smem[i] = (uint4)(0x3c003c00u ^ (uint)i); /* ~1.0 in fp16/bf16 bits */
    __asm__ volatile("/*SM90A { fence.proxy.async.shared::cta; } */" ::: "memory");
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint base = (uint)(size_t)smem;
    /* K-major: LBO 128 (k), SBO 256 (8 rows x 2 core matrices) */
    const ulong ad = nv_wg_desc(base, 128, 256);
    const ulong bd = nv_wg_desc(base + 64 * 16 * 2, 128, 256);
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i)
        d[i] = 0.f;
    NV_WG_FENCE_REGS(d, 128);
    NV_WG_FENCE();
    for (int it = 0; it < iters; ++it) {
        NV_WG_MMA_SS_N256(d, ad, bd);
        NV_WG_MMA_SS_N256(d, ad, bd);
        NV_WG_MMA_SS_N256(d, ad, bd);
        NV_WG_MMA_SS_N256(d, ad, bd);
        NV_WG_COMMIT();
        NV_WG_WAIT1();
    }
    NV_WG_WAIT0();
    NV_WG_FENCE_REGS(d, 128);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 128; ++i)
        sum += d[i];
    out[get_global_id(0)] = sum;
}
#else
/* The attention kernel's own products at D = 128, 64-key tiles, without
 * its softmax: per iteration S = Q K^T (8 x m64n64k16, Q from registers,
 * K K-major with the kernel's strides: LBO 128, SBO 2048) and O += P V
 * (4 x m64n128k16, P from registers, V MN-major: LBO 2048, SBO 128).
 * Each iteration waits for both, as the kernel's tile does: what the
 * kernel could reach if the softmax were free. CEIL_MODE 1: the kernel's
 * layout; 2: K with its 8-key groups adjacent within a k16 chunk (LBO
 * 1024, SBO 128); 3: Q from local memory as well (SS). */
__kernel __attribute__((reqd_work_group_size(128 * WG_GROUPS, 1, 1))) void
wgmma_ceiling(__global float *out, const int iters)
{
    __local uint4 smem[32768 / 16] __attribute__((aligned(128)));
    const int tid = (int)get_local_id(0);
    for (int i = tid; i < 32768 / 16; i += 128 * WG_GROUPS)
        smem[i] = (uint4)(0x3c003c00u ^ (uint)i);
    __asm__ volatile("/*SM90A { fence.proxy.async.shared::cta; } */" ::: "memory");
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint base = (uint)(size_t)smem;
#if CEIL_MODE == 2 /* K with its 8-key groups adjacent per k16 chunk */
    const ulong kd = nv_wg_desc(base, 1024, 128);
#else
    const ulong kd = nv_wg_desc(base, 128, 2048);
#endif
    const ulong vd = nv_wg_desc(base + 16384, 2048, 128);
    /* mode 3: Q from local memory too (the V tile's bytes stand in) */
    const ulong qd = nv_wg_desc(base + 16384, 128, 2048);
    (void)qd;
    uint qf[8][4], pa[4][4];
#pragma unroll
    for (int c = 0; c < 8; ++c)
        for (int e = 0; e < 4; ++e)
            qf[c][e] = 0x3c003c00u ^ (uint)(tid + c + e);
#pragma unroll
    for (int c = 0; c < 4; ++c)
        for (int e = 0; e < 4; ++e)
            pa[c][e] = 0x3c003c00u ^ (uint)(tid * 3 + c + e);
    float s[32], acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i)
        acc[i] = 0.f;
    NV_WG_FENCE_REGS(acc, 64);
    float keep = 0.f;
    for (int it = 0; it < iters; ++it) {
        NV_WG_FENCE();
#if CEIL_MODE == 3
        NV_WG_MMA0_SS_N64(s, qd, kd);
#pragma unroll
        for (int c = 1; c < 8; ++c)
            NV_WG_MMA_SS_N64(s, NV_WG_DESC_ADD(qd, c * 256),
                             NV_WG_DESC_ADD(kd, c * 256));
#else
        NV_WG_MMA0_N64(s, qf[0], kd, "0");
#pragma unroll
        for (int c = 1; c < 8; ++c)
            NV_WG_MMA_N64(s, qf[c],
                          NV_WG_DESC_ADD(kd, c * (CEIL_MODE == 2 ? 2048 : 256)),
                          "0");
#endif
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            NV_WG_MMA_N128(acc, pa[kk], NV_WG_DESC_ADD(vd, kk * 2 * 2048), "1");
        NV_WG_COMMIT();
        NV_WG_WAIT0();
        NV_WG_FENCE_REGS(s, 32);
        NV_WG_FENCE_REGS(acc, 64);
        keep += s[it & 31];
    }
    float sum = keep;
#pragma unroll
    for (int i = 0; i < 64; ++i)
        sum += acc[i];
    out[get_global_id(0)] = sum;
}
#endif
