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
