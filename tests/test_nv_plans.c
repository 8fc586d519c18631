/* The NVIDIA paths' plans for an H200, without one: the library's own
 * problem module and path list (compiled into this test: the shared
 * library hides them) plan descriptors against the test device's probed
 * capabilities with the NVIDIA fields of an H200 written over them
 * (compute capability 9.0, 132 SMs, 48 KiB local memory, as
 * `flashcl info` printed there). Each plan must take the path the policy
 * says, carry the -D options its variant and schedule need, and the
 * kernel must preprocess with exactly the plan's -D options (its #error
 * rules are the kernel's side of every host rule). Nothing is launched. */
#include "core/core.h"
#include "paths/path.h"
#include "paths/nv_mma_bwd.h"
#include "problem/problem.h"
#include "kernel_preprocess.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static device_caps h200(const flashcl_context *ctx)
{
    device_caps c = ctx->caps;
    snprintf(c.name, sizeof c.name, "NVIDIA H200");
    snprintf(c.vendor, sizeof c.vendor, "NVIDIA Corporation");
    snprintf(c.platform_name, sizeof c.platform_name, "NVIDIA CUDA");
    snprintf(c.driver_version, sizeof c.driver_version, "580.159.04");
    c.vendor_id = 0x10de;
    c.type = CL_DEVICE_TYPE_GPU;
    c.compute_units = 132;
    c.local_mem = 49152;
    c.max_work_group = 1024;
    c.has_fp64 = true;
    c.has_fp16_ext = true;
    c.has_subgroups = c.has_intel_subgroups = false;
    c.has_subgroup_shuffle = c.has_reqd_subgroup_size = false;
    c.subgroup_size_count = 0;
    c.has_nv_attribute_query = true;
    c.nv_cc_major = 9;
    c.nv_cc_minor = 0;
    c.amd_gfx[0] = '\0';
    c.amd_wavefront = 0;
    c.klass = DEVICE_CLASS_GPU_NVIDIA;
    return c;
}

/* A descriptor with every optional tensor a case turns on (NULL q/k/v/o:
 * planning reads only their views). */
typedef struct plan_case {
    const char *name;
    int head_dim, head_dim_v, causal, top_left;
    flashcl_dtype dtype;
    int window_left, window_right; /* -2: no window */
    float softcap;
    int alibi, bias, mask, sinks; /* bias 2: an fp32 bias */
    int persist; /* 2: the plan's own persistent grid */
    int seqlen_q;            /* 0: NQ */
    int varlen;              /* packed: cu_seqlens_q/k, maxima VQ and VK */
    const char *force;       /* FLASHCL_PATH, or NULL */
    int allow_tf32;          /* fp32: one TF32 product (else exact) */
    const char *tiles;       /* a forced candidate ("path:params"), or NULL */
    const char *path;        /* the path the plan must take */
    const char *want[6];     /* in its options */
    const char *not_want[2]; /* not in them */
    const char *skipped;     /* in `skipped` (NULL: not checked) */
} plan_case;

/* The softcap entry's schedule, forced: 3 consumers, 64-key tiles (7 of
 * them in the 128 KiB of the D = 128 entry). */
#define THREE_CONSUMERS_64_KEYS "nv_wgmma:warpgroups=3,block_n=64,ring=7"

static const plan_case cases[] = {
    /* fp32 (issue 44): exact (3xTF32) on nv_mma by default, one TF32
     * product with allow_tf32, the portable kernel when forced or above
     * D 128 */
    {.name = "fp32 D64: exact 3xTF32 on nv_mma by default", .head_dim = 64,
     .dtype = FLASHCL_DTYPE_FP32, .window_left = -2, .path = "nv_mma",
     .want = {"-DFLASHCL_DTYPE=0", "-DFLASHCL_NV_EXACT=1",
              "-DFLASHCL_BLOCK_M=64", "-DFLASHCL_BLOCK_N=32",
              "-DFLASHCL_NV_EMULATE=0", "-DFLASHCL_NV_COMPENSATE=1"}},
    {.name = "fp32 D128 causal: exact, 16 rows a warp", .head_dim = 128,
     .causal = 1, .dtype = FLASHCL_DTYPE_FP32, .window_left = -2,
     .path = "nv_mma",
     .want = {"-DFLASHCL_NV_EXACT=1", "-DFLASHCL_BLOCK_M=64",
              "-DFLASHCL_BLOCK_N=16", "-DFLASHCL_CAUSAL=1",
              /* O's compensation as bf16 pairs at D_v 128 (registers) */
              "-DFLASHCL_NV_COMPENSATE=2"}},
    {.name = "fp32 D128 allow_tf32: one TF32 product", .head_dim = 128,
     .dtype = FLASHCL_DTYPE_FP32, .window_left = -2, .allow_tf32 = 1,
     .path = "nv_mma", .want = {"-DFLASHCL_NV_EXACT=0", "-DFLASHCL_DTYPE=0"}},
    {.name = "fp32 D64 allow_tf32: its own tile", .head_dim = 64,
     .dtype = FLASHCL_DTYPE_FP32, .window_left = -2, .allow_tf32 = 1,
     .path = "nv_mma",
     .want = {"-DFLASHCL_NV_EXACT=0", "-DFLASHCL_BLOCK_M=128"}},
    {.name = "fp32 D64 FLASHCL_PATH=portable: the portable kernel",
     .head_dim = 64, .dtype = FLASHCL_DTYPE_FP32, .window_left = -2,
     .force = "portable", .path = "portable"},
    {.name = "fp32 D256: exact mode refuses, portable runs it",
     .head_dim = 256, .dtype = FLASHCL_DTYPE_FP32, .window_left = -2,
     .path = "portable",
     .skipped = "exact fp32 (3xTF32) runs head dims up to 128"},
    {.name = "plain causal fp16 D128, 777 rows: the default, persistent",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .persist = 2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_WGMMA=1", "-DFLASHCL_NV_WGMMA_MAXNREG=168",
              "-DFLASHCL_BLOCK_N=128", "-DFLASHCL_NV_WGMMA_RING=3",
              "-DFLASHCL_LOCAL_MEM_BYTES=131072"}},
    {.name = "plain bf16 D80 (padded in 128 columns)", .head_dim = 80,
     .dtype = FLASHCL_DTYPE_BF16, .window_left = -2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_HEAD_DIM=128", "-DFLASHCL_NV_DQ=80",
              /* its own entry: 3 consumers, 128-key tiles, ring 5 */
              "-DFLASHCL_BLOCK_M=192", "-DFLASHCL_BLOCK_N=128",
              "-DFLASHCL_NV_WGMMA_RING=5", "-DFLASHCL_LOCAL_MEM_BYTES=229456"}},
    {.name = "plain fp16 D96 causal, 2048 rows: 3 consumers, 64-key tiles",
     .head_dim = 96, .causal = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .seqlen_q = 2048, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=96", "-DFLASHCL_BLOCK_M=192",
              "-DFLASHCL_BLOCK_N=64", "-DFLASHCL_NV_WGMMA_RING=8"}},
    {.name = "plain fp16 D96 causal, 777 rows: the 2-consumer entry",
     .head_dim = 96, .causal = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .persist = 2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=96", "-DFLASHCL_BLOCK_M=128",
              "-DFLASHCL_BLOCK_N=128", "-DFLASHCL_NV_WGMMA_RING=3"}},
    {.name = "plain bf16 D80 causal, 1025 rows: 3 consumers, 128-key tiles",
     .head_dim = 80, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = -2, .seqlen_q = 1025, .path = "nv_wgmma",
     .want = {"-DFLASHCL_BLOCK_M=192", "-DFLASHCL_BLOCK_N=128",
              "-DFLASHCL_NV_WGMMA_RING=5"}},
    {.name = "plain fp16 D88 / D_v 112: the larger picks the entry",
     .head_dim = 88, .head_dim_v = 112, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=88", "-DFLASHCL_NV_DV=112",
              "-DFLASHCL_BLOCK_N=64", "-DFLASHCL_BLOCK_M=192"}},
    {.name = "plain bf16 D120: the 128 columns' own entry", .head_dim = 120,
     .dtype = FLASHCL_DTYPE_BF16, .window_left = -2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=120", "-DFLASHCL_BLOCK_M=128",
              "-DFLASHCL_BLOCK_N=128", "-DFLASHCL_NV_WGMMA_RING=3"}},
    {.name = "softcap bf16 D128: the softcap entry", .head_dim = 128,
     .dtype = FLASHCL_DTYPE_BF16, .window_left = -2, .softcap = 50.0f,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_SOFTCAP=1", "-DFLASHCL_BLOCK_M=192",
              "-DFLASHCL_BLOCK_N=64", "-DFLASHCL_NV_WGMMA_RING=8"}},
    {.name = "softcap fp16 D256: its width's own entry", .head_dim = 256,
     .dtype = FLASHCL_DTYPE_FP16, .window_left = -2, .softcap = 50.0f,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_SOFTCAP=1", "-DFLASHCL_BLOCK_M=128",
              "-DFLASHCL_NV_WGMMA_RING=5"}},
    {.name = "plain fp16 D256 (Q in local memory)", .head_dim = 256,
     .dtype = FLASHCL_DTYPE_FP16, .window_left = -2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_HEAD_DIM=256", "-DFLASHCL_BLOCK_N=64",
              "-DFLASHCL_LOCAL_MEM_BYTES=229456"}},
    {.name = "plain bf16 D160: 3 consumers in 256 columns", .head_dim = 160,
     .dtype = FLASHCL_DTYPE_BF16, .window_left = -2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_HEAD_DIM=256", "-DFLASHCL_NV_DQ=160",
              "-DFLASHCL_BLOCK_M=192", "-DFLASHCL_WG_SIZE=512",
              /* a ring of 4 beside Q's 96 KiB */
              "-DFLASHCL_NV_WGMMA_RING=4"}},
    {.name = "plain fp16 D144 causal, 2048 rows: 3 consumers",
     .head_dim = 144, .causal = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .seqlen_q = 2048, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=144", "-DFLASHCL_BLOCK_M=192",
              "-DFLASHCL_NV_WGMMA_RING=4"}},
    {.name = "plain fp16 D160 causal, 777 rows: 2 consumers",
     .head_dim = 160, .causal = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=160", "-DFLASHCL_BLOCK_M=128",
              "-DFLASHCL_NV_WGMMA_RING=5"}},
    {.name = "plain bf16 D176: 2 consumers (3 would spill)", .head_dim = 176,
     .dtype = FLASHCL_DTYPE_BF16, .window_left = -2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=176", "-DFLASHCL_BLOCK_M=128",
              "-DFLASHCL_NV_WGMMA_RING=5"}},
    {.name = "plain bf16 D160 / D_v 128: 3 consumers", .head_dim = 160,
     .head_dim_v = 128, .dtype = FLASHCL_DTYPE_BF16, .window_left = -2,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=160", "-DFLASHCL_NV_DV=128",
              "-DFLASHCL_BLOCK_M=192"}},
    {.name = "plain bf16 D128 / D_v 176: 2 consumers", .head_dim = 128,
     .head_dim_v = 176, .dtype = FLASHCL_DTYPE_BF16, .window_left = -2,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_HEAD_DIM=256", "-DFLASHCL_NV_DV=176",
              "-DFLASHCL_BLOCK_M=128"}},
    {.name = "causal window 512 bf16 D128: the persistent grid",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 512, .window_right = -1, .persist = 2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_WINDOW_LEFT=1", "-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "window 256 / 256 fp16 D64: the persistent grid",
     .head_dim = 64, .dtype = FLASHCL_DTYPE_FP16, .window_left = 256,
     .window_right = 256, .persist = 2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "causal window 1024 bf16 D128: the persistent grid",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 1024, .window_right = -1, .persist = 2,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_WINDOW_LEFT=1", "-DFLASHCL_BLOCK_N=128",
              "-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "causal window 1025 bf16 D128: the plain grid",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 1025, .window_right = -1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_WINDOW_LEFT=1"},
     .not_want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "causal window 513 fp16 D64: the plain grid, 128-key tiles",
     .head_dim = 64, .causal = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = 513, .window_right = -1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_WINDOW_LEFT=1", "-DFLASHCL_BLOCK_N=128",
              "-DFLASHCL_NV_WGMMA_RING=4"},
     .not_want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "causal window 128 bf16 D64: narrow band, 64-key tiles",
     .head_dim = 64, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 128, .window_right = -1, .sinks = 1, .persist = 2,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_BLOCK_M=192", "-DFLASHCL_BLOCK_N=64",
              "-DFLASHCL_NV_WGMMA_RING=8", "-DFLASHCL_LOCAL_MEM_BYTES=229456",
              "-DFLASHCL_SINKS=1"}},
    {.name = "causal window 512 fp16 D48: narrow band, 64-key tiles",
     .head_dim = 48, .causal = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = 512, .window_right = -1, .persist = 2,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_DQ=48", "-DFLASHCL_BLOCK_N=64",
              "-DFLASHCL_NV_WGMMA_RING=8"}},
    {.name = "causal window 128 bf16 D128: narrow band, 64-key tiles",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 128, .window_right = -1, .persist = 2,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_BLOCK_M=128", "-DFLASHCL_BLOCK_N=64",
              "-DFLASHCL_NV_WGMMA_RING=8", "-DFLASHCL_LOCAL_MEM_BYTES=229456"}},
    {.name = "causal window 129 bf16 D128: 128-key tiles", .head_dim = 128,
     .causal = 1, .dtype = FLASHCL_DTYPE_BF16, .window_left = 129,
     .window_right = -1, .persist = 2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_BLOCK_N=128", "-DFLASHCL_NV_WGMMA_RING=3"}},
    {.name = "plain causal bf16 D128, 1025 rows: the plain grid",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = -2, .seqlen_q = 1025, .path = "nv_wgmma",
     .want = {"-DFLASHCL_BLOCK_N=128"},
     .not_want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "plain causal fp16 D256, 777 rows: the plain grid",
     .head_dim = 256, .causal = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .path = "nv_wgmma",
     .not_want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "window 200 without a right edge: the plain grid",
     .head_dim = 128, .dtype = FLASHCL_DTYPE_BF16, .window_left = 200,
     .window_right = -1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_WINDOW_LEFT=1"},
     .not_want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "causal window 300 with a bias: the plain grid, staged",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 300, .window_right = -1, .bias = 1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_WGMMA_XSTAGE=1", "-DFLASHCL_NV_HEADS_FIRST=1"},
     .not_want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "D32: forced only", .head_dim = 32, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .path = "nv_mma", .skipped = "not measured faster"},
    {.name = "persistent grid", .head_dim = 64, .causal = 1,
     .dtype = FLASHCL_DTYPE_FP16, .window_left = -2, .persist = 2,
     .path = "nv_wgmma", .want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "persistent grid, more items than SMs", .head_dim = 128,
     .causal = 1, .dtype = FLASHCL_DTYPE_BF16, .window_left = 512,
     .persist = 2, .seqlen_q = 4096, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "window + softcap bf16 D128, unforced: wgmma",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 1000, .window_right = -1, .softcap = 30.0f,
     .persist = 2, .path = "nv_wgmma",
     .want = {"-DFLASHCL_WINDOW_LEFT=1", "-DFLASHCL_SOFTCAP=1"}},
    {.name = "top-left alibi sinks fp16 D64, unforced: wgmma",
     .head_dim = 64, .causal = 1, .top_left = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .alibi = 1, .sinks = 1, .persist = 2,
     .path = "nv_wgmma",
     .not_want = {"-DFLASHCL_TOP_LEFT"},
     .want = {"-DFLASHCL_ALIBI=1",
              "-DFLASHCL_SINKS=1", "-DFLASHCL_WG_SIZE=512",
              "-DFLASHCL_BLOCK_M=192"}},
    {.name = "bias bf16 D128, unforced: wgmma, 64-key tiles", .head_dim = 128,
     .dtype = FLASHCL_DTYPE_BF16, .window_left = -2, .bias = 1,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_BIAS=3", "-DFLASHCL_BLOCK_N=64",
              "-DFLASHCL_WG_SIZE=384", "-DFLASHCL_NV_HEADS_FIRST=1",
              /* rows of 2000 bytes: staged, in a 13-slot ring */
              "-DFLASHCL_NV_WGMMA_XSTAGE=1", "-DFLASHCL_NV_WGMMA_RING=13"}},
    {.name = "bias fp16 D64, unforced: mma.sync", .head_dim = 64,
     .dtype = FLASHCL_DTYPE_FP16, .window_left = -2, .bias = 1,
     .path = "nv_mma", .skipped = "a mask or a bias outside"},
    {.name = "bias fp16 D256, unforced: mma.sync", .head_dim = 256,
     .dtype = FLASHCL_DTYPE_FP16, .window_left = -2, .bias = 1,
     .path = "nv_mma", .skipped = "a mask or a bias outside"},
    {.name = "mask bf16 D128, unforced: wgmma, packed into bits",
     .head_dim = 128, .dtype = FLASHCL_DTYPE_BF16, .window_left = -2,
     .mask = 1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_WGMMA_MASK_BITS=1", "-DFLASHCL_BLOCK_N=128",
              "-DFLASHCL_WG_SIZE=384", "-DFLASHCL_NV_HEADS_FIRST=1"}},
    {.name = "mask fp16 D64, unforced: wgmma, bits on 3 consumers",
     .head_dim = 64, .dtype = FLASHCL_DTYPE_FP16, .window_left = -2,
     .mask = 1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_WGMMA_MASK_BITS=1", "-DFLASHCL_WG_SIZE=512"}},
    {.name = "mask bf16 D128 causal, unforced: bits on the scores as they come",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = -2, .mask = 1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_WGMMA_MASK_BITS=1"}},
    {.name = "mask bf16 D128, 3 consumers in 64-key tiles (forced): bits",
     .head_dim = 128, .dtype = FLASHCL_DTYPE_BF16, .window_left = -2,
     .mask = 1, .path = "nv_wgmma",
     .tiles = THREE_CONSUMERS_64_KEYS,
     .want = {"-DFLASHCL_NV_WGMMA_MASK_BITS=1", "-DFLASHCL_WG_SIZE=512",
              "-DFLASHCL_BLOCK_N=64", "-DFLASHCL_NV_WGMMA_RING=7"}},
    {.name = "mask bf16 D128 causal, 3 consumers (forced): no bits",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = -2, .mask = 1, .path = "nv_wgmma",
     .tiles = THREE_CONSUMERS_64_KEYS,
     .want = {"-DFLASHCL_WG_SIZE=512"},
     .not_want = {"-DFLASHCL_NV_WGMMA_MASK_BITS=1"}},
    {.name = "bias + mask bf16 D128, unforced: mma.sync", .head_dim = 128,
     .dtype = FLASHCL_DTYPE_BF16, .window_left = -2, .bias = 1, .mask = 1,
     .path = "nv_mma", .skipped = "a mask or a bias outside"},
    {.name = "mask + softcap fp16 D256, unforced: mma.sync", .head_dim = 256,
     .causal = 1, .dtype = FLASHCL_DTYPE_FP16, .window_left = -2,
     .softcap = 10.0f, .mask = 1, .path = "nv_mma",
     .skipped = "a mask or a bias outside"},
    {.name = "mask fp16 D64, forced: bits, 3 consumer warpgroups",
     .head_dim = 64, .dtype = FLASHCL_DTYPE_FP16, .window_left = -2,
     .mask = 1, .force = "nv_wgmma", .path = "nv_wgmma",
     .want = {"-DFLASHCL_MASK=1", "-DFLASHCL_WG_SIZE=512",
              "-DFLASHCL_NV_WGMMA_MASK_BITS=1", "-DFLASHCL_BLOCK_N=128"},
     .not_want = {"-DFLASHCL_NV_WGMMA_XSTAGE=1"}},
    {.name = "mask bf16 D128 causal window, forced: bits, 128-key tiles",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 300, .window_right = -1, .softcap = 20.0f, .mask = 1,
     .force = "nv_wgmma", .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_WGMMA_MASK_BITS=1", "-DFLASHCL_BLOCK_N=128",
              "-DFLASHCL_NV_WGMMA_RING=3", "-DFLASHCL_NV_HEADS_FIRST=1"},
     .not_want = {"-DFLASHCL_NV_WGMMA_XSTAGE=1",
                  "-DFLASHCL_NV_WGMMA_PERSIST=1"}},
    {.name = "mask + softcap fp16 D256, forced: the bytes", .head_dim = 256,
     .causal = 1, .dtype = FLASHCL_DTYPE_FP16, .window_left = -2,
     .softcap = 10.0f, .mask = 1, .force = "nv_wgmma", .path = "nv_wgmma",
     .want = {"-DFLASHCL_MASK=1", "-DFLASHCL_HEAD_DIM=256"},
     .not_want = {"-DFLASHCL_NV_WGMMA_MASK_BITS=1"}},
    {.name = "window + softcap bf16 D128, forced", .head_dim = 128,
     .causal = 1, .dtype = FLASHCL_DTYPE_BF16, .window_left = 1000,
     .window_right = -1, .softcap = 30.0f, .force = "nv_wgmma",
     .persist = 2, .path = "nv_wgmma",
     /* causal at 777 rows: the 2-consumer entry */
     .want = {"-DFLASHCL_WINDOW_LEFT=1", "-DFLASHCL_SOFTCAP=1",
              "-DFLASHCL_CAUSAL=1", "-DFLASHCL_BLOCK_N=128",
              "-DFLASHCL_WG_SIZE=384"}},
    {.name = "window + softcap bf16 D128 causal, 4096 rows: 3 consumers",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = 1000, .window_right = -1, .softcap = 30.0f,
     .seqlen_q = 4096, .path = "nv_wgmma",
     .want = {"-DFLASHCL_SOFTCAP=1", "-DFLASHCL_BLOCK_N=64",
              "-DFLASHCL_WG_SIZE=512", "-DFLASHCL_NV_WGMMA_RING=8"}},
    {.name = "fp32 bias bf16 D128: wgmma, fetched, not staged",
     .head_dim = 128, .dtype = FLASHCL_DTYPE_BF16, .window_left = -2,
     .bias = 2, .path = "nv_wgmma", .want = {"-DFLASHCL_BIAS=1"},
     /* rows of 4000 bytes, but an fp32 bias alone measured faster fetched */
     .not_want = {"-DFLASHCL_NV_WGMMA_XSTAGE=1"}},
    {.name = "bias + mask fp16 D128, forced: 64-key tiles", .head_dim = 128,
     .dtype = FLASHCL_DTYPE_FP16, .window_left = -2, .bias = 1, .mask = 1,
     .force = "nv_wgmma", .path = "nv_wgmma",
     .want = {"-DFLASHCL_BIAS=2", "-DFLASHCL_MASK=1", "-DFLASHCL_BLOCK_N=64",
              "-DFLASHCL_NV_WGMMA_RING=7"},
     /* mask rows of 1000 bytes: not 16-byte copies, fetched instead; with
      * a bias, as bytes */
     .not_want = {"-DFLASHCL_NV_WGMMA_XSTAGE=1",
                  "-DFLASHCL_NV_WGMMA_MASK_BITS=1"}},
    {.name = "everything at D256, top-left, forced", .head_dim = 256,
     .causal = 1, .top_left = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = 300, .window_right = -1, .softcap = 20.0f, .alibi = 1,
     .bias = 1, .mask = 1, .sinks = 1, .force = "nv_wgmma",
     .path = "nv_wgmma",
     .not_want = {"-DFLASHCL_TOP_LEFT"},
     .want = {"-DFLASHCL_ALIBI=1",
              "-DFLASHCL_SINKS=1", "-DFLASHCL_HEAD_DIM=256"}},
    {.name = "D_v != D (192 / 128), forced: wgmma in 256 columns",
     .head_dim = 192, .head_dim_v = 128, .dtype = FLASHCL_DTYPE_BF16,
     .causal = 1, .window_left = -2, .force = "nv_wgmma", .path = "nv_wgmma",
     .want = {"-DFLASHCL_HEAD_DIM=256", "-DFLASHCL_NV_DQ=192",
              "-DFLASHCL_NV_DV=128", "-DFLASHCL_BLOCK_N=64"}},
    {.name = "D_v != D (128 / 64), forced: wgmma in 128 columns",
     .head_dim = 128, .head_dim_v = 64, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .force = "nv_wgmma", .path = "nv_wgmma",
     .want = {"-DFLASHCL_HEAD_DIM=128", "-DFLASHCL_NV_DQ=128",
              "-DFLASHCL_NV_DV=64"}},
    {.name = "D_v != D (64 / 128), forced: wgmma in 128 columns",
     .head_dim = 64, .head_dim_v = 128, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .force = "nv_wgmma", .path = "nv_wgmma",
     .want = {"-DFLASHCL_HEAD_DIM=128", "-DFLASHCL_NV_DQ=64",
              "-DFLASHCL_NV_DV=128"}},
    {.name = "D_v != D (192 / 128), unforced: wgmma", .head_dim = 192,
     .head_dim_v = 128, .dtype = FLASHCL_DTYPE_BF16, .window_left = -2,
     .path = "nv_wgmma", .want = {"-DFLASHCL_NV_DV=128"}},
    {.name = "varlen bf16 D128 causal: wgmma, sequences first",
     .head_dim = 128, .causal = 1, .dtype = FLASHCL_DTYPE_BF16,
     .window_left = -2, .varlen = 1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_VARLEN=1", "-DFLASHCL_NV_SEQ_FIRST=1",
              "-DFLASHCL_NV_VARLEN_TOP_LEFT=0", "-DFLASHCL_NV_WGMMA_RING=3"}},
    {.name = "varlen fp16 D64 window + softcap top-left: wgmma",
     .head_dim = 64, .causal = 1, .top_left = 1, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = 100, .window_right = -1, .softcap = 30.0f, .varlen = 1,
     .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_VARLEN=1", "-DFLASHCL_NV_SEQ_FIRST=1",
              "-DFLASHCL_NV_VARLEN_TOP_LEFT=1", "-DFLASHCL_WINDOW_LEFT=1"}},
    {.name = "varlen fp16 D128 non-causal: wgmma, blocks first",
     .head_dim = 128, .dtype = FLASHCL_DTYPE_FP16, .window_left = -2,
     .varlen = 1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_VARLEN=1", "-DFLASHCL_NV_SEQ_FIRST=0"}},
    {.name = "varlen fp16 D128 causal: plain grid", .head_dim = 128,
     .causal = 1, .dtype = FLASHCL_DTYPE_FP16, .window_left = -2,
     .varlen = 1, .path = "nv_wgmma",
     .want = {"-DFLASHCL_NV_VARLEN=1", "-DFLASHCL_NV_SEQ_FIRST=1"}},
    {.name = "varlen bf16 D32: mma.sync, sequences first", .head_dim = 32,
     .causal = 1, .dtype = FLASHCL_DTYPE_BF16, .window_left = -2,
     .varlen = 1, .path = "nv_mma",
     .want = {"-DFLASHCL_NV_VARLEN=1", "-DFLASHCL_NV_SEQ_FIRST=1"}},
    {.name = "dense decode bf16 D128 (Nq 1, 16 heads): split-KV",
     .head_dim = 128, .dtype = FLASHCL_DTYPE_BF16, .window_left = -2,
     .seqlen_q = 1, .path = "split_kv",
     .skipped = "decode with too few work-groups"},
    {.name = "D_v != D below 40 (32 / 64), unforced: mma.sync",
     .head_dim = 32, .head_dim_v = 64, .dtype = FLASHCL_DTYPE_FP16,
     .window_left = -2, .path = "nv_mma", .skipped = "not measured faster"},
};

enum { B = 2, HQ = 8, HKV = 2, NQ = 777, NK = 1000 };
/* packed cases: NQ and NK are the total rows and keys, these the maxima */
enum { VQ = 500, VK = 600 };

#define LENGTH(a) (sizeof(a) / sizeof((a)[0]))

static flashcl_context *ctx; /* the test device's, created once in main */

static cl_mem make(cl_context cl, size_t bytes)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

static flashcl_attention_desc desc_of(const plan_case *c, cl_context cl,
                                      cl_mem owned[5])
{
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = B;
    d.heads_q = HQ;
    d.heads_kv = HKV;
    d.seqlen_q = c->seqlen_q ? c->seqlen_q : NQ;
    d.seqlen_k = NK;
    d.head_dim = c->head_dim;
    d.head_dim_v = c->head_dim_v;
    d.dtype = c->dtype;
    d.causal = c->causal;
    d.causal_align = c->top_left ? FLASHCL_CAUSAL_TOP_LEFT
                                 : FLASHCL_CAUSAL_BOTTOM_RIGHT;
    if (c->window_left != -2) {
        d.window = 1;
        d.window_left = c->window_left;
        d.window_right = c->window_right;
    }
    d.softcap = c->softcap;
    d.allow_tf32 = c->allow_tf32;
    memset(owned, 0, 5 * sizeof owned[0]);
    if (c->varlen) { /* planning reads only the maxima, not the sums */
        d.cu_seqlens_q.buffer = d.cu_seqlens_k.buffer = owned[4] =
            make(cl, (B + 1) * sizeof(int));
        d.max_seqlen_q = VQ;
        d.max_seqlen_k = VK;
    }
    if (c->alibi)
        d.alibi_slopes.buffer = owned[0] = make(cl, HQ * sizeof(float));
    if (c->sinks)
        d.sinks.buffer = owned[1] = make(cl, HQ * sizeof(float));
    if (c->bias) {
        d.bias.buffer = owned[2] = make(cl, (size_t)NQ * NK * 4);
        d.bias_dtype = c->bias == 2 ? FLASHCL_DTYPE_FP32 : c->dtype;
        d.bias.stride_seq = NK; /* broadcast over batch and heads */
        d.bias.stride_dim = 1;
    }
    if (c->mask) {
        d.mask.buffer = owned[3] = make(cl, (size_t)NQ * NK);
        d.mask.stride_seq = NK;
        d.mask.stride_dim = 1;
    }
    return d;
}

/* The plan's -D options, preprocessed against its kernel: 0 when the
 * kernel accepts them. */
static int preprocess_with(const char *source, const char *options,
                           bool quiet)
{
    char defines[2048] = "";
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", options);
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " "))
        if (!strncmp(tok, "-D", 2)) {
            strncat(defines, " ", sizeof defines - strlen(defines) - 1);
            strncat(defines, tok, sizeof defines - strlen(defines) - 1);
        }
    return preprocess_kernel(source, defines, quiet);
}

static int preprocess(const kernel_plan *plan, bool quiet)
{
    return preprocess_with(plan->source, plan->options, quiet);
}

/* A mask packed into bits (FLASHCL_NV_WGMMA_MASK_BITS=1 in the options)
 * comes with its packing pass as the plan's extra program: a work-item
 * per word of every packed row (rows of whole 128-key groups; the test's
 * mask is one [NQ, NK] shared by batch and heads), whose kernel takes the
 * pass's options. */
static void check_mask_bits(const plan_case *c, const kernel_plan *plan)
{
    const bool bits =
        strstr(plan->options, "-DFLASHCL_NV_WGMMA_MASK_BITS=1") != NULL;
    ck_assert_msg(bits == plan->mask_bits, "%s: options %d, plan %d", c->name,
                  bits, plan->mask_bits);
    if (!bits)
        return;
    ck_assert_str_eq(plan->extra_source, "mask_bits.cl");
    const size_t pitch = (NK + 127) / 128 * 4;
    ck_assert_uint_eq(plan->extra_global[0], (pitch + 63) / 64 * 64);
    ck_assert_uint_eq(plan->extra_global[1],
                      (size_t)(c->seqlen_q ? c->seqlen_q : NQ));
    ck_assert_uint_eq(plan->extra_global[2], 1);
    ck_assert_uint_eq(plan->extra_local[0], 64);
    ck_assert_msg(strstr(plan->extra_options, "-DFLASHCL_MASK=1") &&
                      preprocess_with(plan->extra_source, plan->extra_options,
                                      false) == 0,
                  "%s: the packing pass refuses %s", c->name,
                  plan->extra_options);
}

/* The wgmma kernel redoes its rows with huge scores itself (the FMA
 * exponent's guard, cl/nvidia/wgmma/wgmma_epilogue.clh): no -D asks for
 * it and no second program runs after it; the only extra program is the
 * mask's packing pass before it. */
static void check_no_fixup(const plan_case *c, const kernel_plan *plan)
{
    ck_assert_msg(!strstr(plan->options, "EXP_GUARD"), "%s: %s", c->name,
                  plan->options);
    ck_assert_msg(plan->extra_source == NULL || plan->mask_bits,
                  "%s: a second program %s", c->name, plan->extra_source);
}

/* The case's FLASHCL_PATH, set and cleared around each plan. */
static void case_env(const plan_case *c, bool set)
{
    if (c->force && set)
        setenv("FLASHCL_PATH", c->force, 1);
    if (!set)
        unsetenv("FLASHCL_PATH");
}

START_TEST(plans_for_an_h200)
{
    const plan_case *c = &cases[_i];
    const device_caps caps = h200(ctx);
    cl_mem owned[5];
    flashcl_attention_desc d =
        desc_of(c, flashcl_context_cl_context(ctx), owned);
    case_env(c, true);
    const bool persistent = c->persist > 0;
    problem p;
    const flashcl_status st =
        problem_from_desc(ctx, &d, PROBLEM_FOR_PLANNING, &p);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s: %.300s", c->name,
                  flashcl_context_last_error(ctx));
    kernel_plan plan;
    char skipped[2048] = "";
    choose_plan_forced(&caps, &p, &plan, skipped, sizeof skipped, c->tiles);
    case_env(c, false);
    ck_assert_msg(!plan.refused[0], "%s: %s", c->name, plan.refused);
    for (int i = 0; i < 5; ++i)
        if (owned[i])
            clReleaseMemObject(owned[i]);
    printf("%-48s %s: %s\n", c->name, plan.path->name, plan.options);
    ck_assert_msg(!strcmp(plan.path->name, c->path),
                  "%s: ran %s (skipped: %.300s)", c->name, plan.path->name,
                  skipped);
    for (size_t i = 0; i < LENGTH(c->want) && c->want[i]; ++i) {
        char word[160];
        snprintf(word, sizeof word, "%s ", c->want[i]);
        char padded[sizeof plan.options + 1];
        snprintf(padded, sizeof padded, "%s ", plan.options);
        ck_assert_msg(strstr(padded, word) != NULL, "%s: no %s in %s",
                      c->name, c->want[i], plan.options);
    }
    for (size_t i = 0; i < LENGTH(c->not_want) && c->not_want[i]; ++i)
        ck_assert_msg(strstr(plan.options, c->not_want[i]) == NULL,
                      "%s: %s in %s", c->name, c->not_want[i], plan.options);
    if (c->skipped)
        ck_assert_msg(strstr(skipped, c->skipped) != NULL,
                      "%s: skipped says \"%.300s\"", c->name, skipped);
    if (!strcmp(plan.path->name, "nv_wgmma")) {
        /* the grid: (blocks, heads, batch), or one work-group per SM */
        const size_t nq =
            (size_t)(c->varlen ? VQ : c->seqlen_q ? c->seqlen_q : NQ);
        const size_t blocks = (nq + (size_t)plan.block_m - 1) / plan.block_m;
        ck_assert_int_eq(plan.persistent, persistent);
        if (persistent) {
            const size_t items = blocks * HQ * B;
            ck_assert_uint_eq(plan.global[0],
                              (items < 132 ? items : 132) * plan.local[0]);
            ck_assert_uint_eq(plan.global[1] * plan.global[2], 1);
        } else if (strstr(plan.options, "-DFLASHCL_NV_SEQ_FIRST=1")) {
            /* a causal packed batch: (sequences, heads, blocks) */
            ck_assert_uint_eq(plan.global[0], B * plan.local[0]);
            ck_assert_uint_eq(plan.global[1], HQ);
            ck_assert_uint_eq(plan.global[2], blocks);
        } else if (strstr(plan.options, "-DFLASHCL_NV_HEADS_FIRST=1")) {
            /* a bias or mask shared by the heads: (heads, blocks, batch) */
            ck_assert_uint_eq(plan.global[0], HQ * plan.local[0]);
            ck_assert_uint_eq(plan.global[1], blocks);
            ck_assert_uint_eq(plan.global[2], B);
        } else {
            ck_assert_uint_eq(plan.global[0], blocks * plan.local[0]);
            ck_assert_uint_eq(plan.global[1], HQ);
            ck_assert_uint_eq(plan.global[2], B);
        }
        check_no_fixup(c, &plan);
        check_mask_bits(c, &plan);
    }
    if (!strcmp(plan.path->name, "nv_wgmma") ||
        !strcmp(plan.path->name, "nv_mma"))
        ck_assert_msg(preprocess(&plan, false) == 0,
                      "%s: the kernel refuses the plan's options: %s",
                      c->name, plan.options);
}
END_TEST

/* The preprocessor check above can fail: an illegal schedule is refused,
 * as are the packed mask beside a bias and the packing pass without a
 * mask. */
START_TEST(preprocess_can_fail)
{
    ck_assert_int_ne(preprocess_with("mask_bits.cl", "-DFLASHCL_DTYPE=1",
                                     true),
                     0);
    ck_assert_int_ne(
        preprocess_with("flash_fwd_wgmma.cl",
                        "-DFLASHCL_NV_WGMMA=1 -DFLASHCL_HEAD_DIM=128 "
                        "-DFLASHCL_WG_SIZE=384 -DFLASHCL_BLOCK_M=128 "
                        "-DFLASHCL_BLOCK_N=128 -DFLASHCL_NV_WGMMA_RING=3 "
                        "-DFLASHCL_LOCAL_MEM_BYTES=131072 -DFLASHCL_MASK=1 "
                        "-DFLASHCL_BIAS=2 -DFLASHCL_NV_WGMMA_MASK_BITS=1",
                        true),
        0);
    /* one consumer warpgroup: the kernel's schedule has 2 or 3 (the same
     * options with 2 preprocess) */
    ck_assert_int_ne(
        preprocess_with("flash_fwd_wgmma.cl",
                        "-DFLASHCL_NV_WGMMA=1 -DFLASHCL_HEAD_DIM=128 "
                        "-DFLASHCL_WG_SIZE=256 -DFLASHCL_BLOCK_M=64 "
                        "-DFLASHCL_BLOCK_N=64 -DFLASHCL_NV_WGMMA_RING=2",
                        true),
        0);
    ck_assert_int_eq(
        preprocess_with("flash_fwd_wgmma.cl",
                        "-DFLASHCL_NV_WGMMA=1 -DFLASHCL_HEAD_DIM=128 "
                        "-DFLASHCL_WG_SIZE=384 -DFLASHCL_BLOCK_M=128 "
                        "-DFLASHCL_BLOCK_N=64 -DFLASHCL_NV_WGMMA_RING=2",
                        true),
        0);
    kernel_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.source = "flash_fwd_wgmma.cl";
    snprintf(plan.options, sizeof plan.options,
             "-DFLASHCL_NV_WGMMA=1 -DFLASHCL_HEAD_DIM=128 "
             "-DFLASHCL_WG_SIZE=384 -DFLASHCL_BLOCK_M=128 "
             "-DFLASHCL_BLOCK_N=64 -DFLASHCL_NV_WGMMA_RING=2 "
             "-DFLASHCL_NV_WGMMA_PERSIST=1 -DFLASHCL_NV_VARLEN=1");
    ck_assert_int_ne(preprocess(&plan, true), 0);
}
END_TEST

/* A plan the path could not make (its -D options would not fit) fails
 * the call with a status and the path's reason, before any build. */
START_TEST(plan_error_fails_the_build)
{
    kernel_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.path = &nv_wgmma_path;
    plan.source = "flash_fwd_wgmma.cl";
    plan_refuse(&plan, FLASHCL_ERROR_UNSUPPORTED,
                "internal limit: the nv_wgmma kernel's -D options exceed "
                "1023 bytes");
    compiled_program *programs[2] = {NULL, NULL};
    ck_assert_int_eq(plan_programs(ctx, &plan, programs, NULL),
                     FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_ptr_null(programs[0]);
    ck_assert_msg(strstr(flashcl_context_last_error(ctx), "nv_wgmma") &&
                      strstr(flashcl_context_last_error(ctx), "exceed"),
                  "%s", flashcl_context_last_error(ctx));
}
END_TEST

/* One refusal per plan, read the same way by describe, prepare and
 * forward: the first reason and its status stand. */
START_TEST(first_refusal_stands)
{
    kernel_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.path = &nv_wgmma_path;
    ck_assert_int_eq(plan_refusal(ctx, &plan), FLASHCL_SUCCESS);
    plan_refuse(&plan, FLASHCL_ERROR_UNSUPPORTED, "options need %d bytes",
                2048);
    plan_refuse(&plan, FLASHCL_ERROR_INVALID_VALUE, "a later reason");
    ck_assert_int_eq(plan_refusal(ctx, &plan), FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_str_eq(flashcl_context_last_error(ctx),
                     "options need 2048 bytes");
}
END_TEST

/* The backward's choice of its tensor-core kernels (nv_mma_bwd_plan) on
 * an H200: chosen for the 16-bit problems it covers, every variant; the
 * portable kernels otherwise (fp32, D > 128, FLASHCL_PATH=portable); and
 * the chosen plan's -D options preprocess against flash_bwd_mma.cl (its
 * local-memory #errors are the kernel's side of tiles_fit), and an illegal
 * switch value gets none. */
typedef struct bwd_plan_case {
    plan_case fwd; /* the descriptor (its path field unused) */
    const char *force; /* FLASHCL_PATH */
    bool chosen;
    int rows, keys;    /* when chosen */
} bwd_plan_case;

#define BWD_CASE(name, d, dv, causal, dtype, wl, cap, alibi, bias, mask)      \
    {name, d, dv, causal, 0, dtype, wl, wl == -2 ? -2 : 0, cap, alibi, bias,   \
     mask, 0, 0, 0, 0, NULL, 0, NULL, "", {NULL}, {NULL}, NULL}
static const bwd_plan_case bwd_cases[] = {
    /* the default since its suite passed on a GPU (H100, 2026-12-07) */
    {BWD_CASE("bf16 D64 unforced", 64, 64, 0, FLASHCL_DTYPE_BF16, -2, 0, 0, 0,
              0),
     NULL, true, 32, 32},
    {BWD_CASE("fp16 D128 causal unforced", 128, 128, 1, FLASHCL_DTYPE_FP16, -2,
              0, 0, 0, 0),
     NULL, true, 16, 32},
    {BWD_CASE("bf16 D64", 64, 64, 0, FLASHCL_DTYPE_BF16, -2, 0, 0, 0, 0),
     "nv_mma", true, 32, 32},
    {BWD_CASE("fp16 D128 causal", 128, 128, 1, FLASHCL_DTYPE_FP16, -2, 0, 0, 0,
              0),
     "nv_mma", true, 16, 32},
    {BWD_CASE("bf16 D128 all modifiers", 128, 128, 0, FLASHCL_DTYPE_BF16, -2,
              30.0f, 1, 1, 1),
     "nv_mma", true, 16, 16},
    {BWD_CASE("fp16 D40 Dv72 window", 40, 72, 0, FLASHCL_DTYPE_FP16, 64, 0, 0,
              0, 0),
     "nv_mma", true, 32, 32},
    {BWD_CASE("fp16 D64 forced nv_mma", 64, 64, 1, FLASHCL_DTYPE_FP16, -2, 0, 0,
              0, 0),
     "nv_mma", true, 32, 32},
    {BWD_CASE("fp16 D64 FLASHCL_PATH=portable", 64, 64, 0, FLASHCL_DTYPE_FP16,
              -2, 0, 0, 0, 0),
     "portable", false, 0, 0},
    {BWD_CASE("fp32", 64, 64, 0, FLASHCL_DTYPE_FP32, -2, 0, 0, 0, 0),
     "nv_mma", false, 0, 0},
    {BWD_CASE("bf16 D192", 192, 192, 0, FLASHCL_DTYPE_BF16, -2, 0, 0, 0, 0),
     "nv_mma", false, 0, 0},
};

/* Case c's backward plan on caps, planned with the environment variable
 * `name` set to `value` (not set when value is NULL); *p its problem. */
static nv_bwd_plan bwd_plan_of(const device_caps *caps,
                               const bwd_plan_case *c, const char *name,
                               const char *value, problem *p)
{
    cl_mem owned[5];
    flashcl_attention_desc d =
        desc_of(&c->fwd, flashcl_context_cl_context(ctx), owned);
    if (value)
        setenv(name, value, 1);
    const flashcl_status st =
        problem_from_desc(ctx, &d, PROBLEM_FOR_PLANNING, p);
    nv_bwd_plan plan;
    memset(&plan, 0, sizeof plan);
    if (st == FLASHCL_SUCCESS)
        nv_mma_bwd_plan(caps, p, NULL, &plan);
    unsetenv(name);
    for (int i = 0; i < 5; ++i)
        if (owned[i])
            clReleaseMemObject(owned[i]);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s: %.300s", c->fwd.name,
                  flashcl_context_last_error(ctx));
    return plan;
}

/* The path's own table (the databases off: the shipped entries are
 * backward_shipped_entries_for_an_h200's). */
START_TEST(backward_plans_for_an_h200)
{
    const bwd_plan_case *c = &bwd_cases[_i];
    const device_caps caps = h200(ctx);
    problem p;
    setenv("FLASHCL_TUNING", "off", 1);
    const nv_bwd_plan plan = bwd_plan_of(&caps, c, "FLASHCL_PATH", c->force,
                                         &p);
    unsetenv("FLASHCL_TUNING");
    printf("backward %-36s %s %s\n", c->fwd.name,
           plan.chosen ? "nv_mma" : "portable", plan.why_not);
    ck_assert_msg(plan.chosen == c->chosen, "%s: chosen %d (%s)",
                  c->fwd.name, plan.chosen, plan.why_not);
    if (!c->chosen)
        return;
    ck_assert_int_eq(plan.rows, c->rows);
    ck_assert_int_eq(plan.keys, c->keys);
    /* two key stages fit every default tile here (1-3 % on an H200) */
    ck_assert_int_eq(plan.key_stages, 2);
    ck_assert_int_eq(plan.row_stages, 1);
    char options[1024];
    ck_assert(nv_mma_bwd_options(&caps, &p, &plan, options, sizeof options));
    ck_assert_msg(preprocess_with("flash_bwd_mma.cl", options, false) == 0,
                  "%s: flash_bwd_mma.cl rejects %s", c->fwd.name, options);
    /* a plan outside the switch list's legal values (rows a multiple of
     * 16) gets no options rather than a kernel that refuses to build */
    nv_bwd_plan illegal = plan;
    illegal.rows = 24;
    ck_assert(!nv_mma_bwd_options(&caps, &p, &illegal, options,
                                  sizeof options));
    /* one more query row a dK/dV step than chosen: the kernel refuses it
     * where the host's tiles_fit would (the local-memory rule agrees) */
    nv_bwd_plan wider = plan;
    wider.rows = plan.rows + 16;
    if (wider.rows <= 64 && plan.dim_padded == 128) {
        ck_assert(nv_mma_bwd_options(&caps, &p, &wider, options,
                                     sizeof options));
        ck_assert_msg(preprocess_with("flash_bwd_mma.cl", options, true) != 0,
                      "%s: %d rows accepted beyond local memory",
                      c->fwd.name, wider.rows);
    }
}
END_TEST

/* FLASHCL_NVB_TILE's five fields (warps, rows, keys, row stages, key
 * stages) on an H200 at D = 128: taken when the tiles fit, which the
 * kernel's own local-memory rule confirms, and ignored (the defaults stay)
 * when they do not: a second row stage of 4 warps of 16 keys needs 52
 * KiB, 3 warps 44 KiB; or when a tunable is outside the values the
 * switch list declares. */
START_TEST(backward_forced_tiles_fit_local_memory)
{
    static const struct {
        const char *tile;
        bool taken;
        int warps, row_stages, key_stages;
    } tiles[] = {
        {"4,16,32,2,1", false, 4, 1, 2}, {"3,16,32,2,2", true, 3, 2, 2},
        {"4,16,32,1,1", true, 4, 1, 1},  {"8,16,32,1,1", false, 4, 1, 2},
        {"4,16,32,3,1", false, 4, 1, 2}, {"4,16,32", true, 4, 1, 2},
        /* within local memory but outside the switch list's values: rows
         * a multiple of 16, keys at most 64 */
        {"2,24,32", false, 4, 1, 2},     {"2,16,80", false, 4, 1, 2},
    };
    const device_caps caps = h200(ctx);
    const bwd_plan_case *c = &bwd_cases[3]; /* fp16 D128 causal, nv_mma */
    setenv("FLASHCL_TUNING", "off", 1); /* a refused set: the table's */
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; ++i) {
        problem p;
        const nv_bwd_plan plan =
            bwd_plan_of(&caps, c, "FLASHCL_NVB_TILE", tiles[i].tile, &p);
        ck_assert(plan.chosen);
        const bool taken = !strcmp(plan.reason, "FLASHCL_NVB_TILE");
        ck_assert_msg(taken == tiles[i].taken, "%s: taken %d",
                      tiles[i].tile, taken);
        ck_assert_int_eq(plan.warps, tiles[i].warps);
        ck_assert_int_eq(plan.row_stages, tiles[i].row_stages);
        ck_assert_int_eq(plan.key_stages, tiles[i].key_stages);
        char options[1024];
        ck_assert(nv_mma_bwd_options(&caps, &p, &plan, options,
                                     sizeof options));
        ck_assert_msg(preprocess_with("flash_bwd_mma.cl", options, false) ==
                          0,
                      "%s: flash_bwd_mma.cl rejects %s", tiles[i].tile,
                      options);
        if (tiles[i].taken)
            continue;
        /* what the host refused, the kernel refuses too (the 3-stage
         * case is outside its legal values) */
        nv_bwd_plan refused = plan;
        sscanf(tiles[i].tile, "%d,%d,%d,%d,%d", &refused.warps, &refused.rows,
               &refused.keys, &refused.row_stages, &refused.key_stages);
        if (nv_mma_bwd_options(&caps, &p, &refused, options, sizeof options))
            ck_assert_msg(preprocess_with("flash_bwd_mma.cl", options, true) !=
                              0,
                          "%s: accepted beyond local memory", tiles[i].tile);
    }
    unsetenv("FLASHCL_TUNING");
}
END_TEST

/* The shipped database (tuning/nvidia-h100-nv_mma_bwd.json, made by
 * `flashcl tune --backward` on an H100): an H200 (sm_90, no entry of its own) takes the
 * architecture-level entry of its dtype, head dim and causality, and the
 * plan holds the tiles its origin names; each builds. */
START_TEST(backward_shipped_entries_for_an_h200)
{
    const device_caps caps = h200(ctx);
    static const int chosen[] = {0, 1, 2, 3}; /* bf16/fp16 D 64/128 */
    for (size_t i = 0; i < sizeof chosen / sizeof chosen[0]; ++i) {
        const bwd_plan_case *c = &bwd_cases[chosen[i]];
        problem p;
        const nv_bwd_plan plan =
            bwd_plan_of(&caps, c, "FLASHCL_PATH", c->force, &p);
        ck_assert(plan.chosen);
        char level[96], tiles[128];
        snprintf(level, sizeof level, "architecture level (nv_mma_bwd/%s/",
                 c->fwd.dtype == FLASHCL_DTYPE_BF16 ? "bf16" : "fp16");
        snprintf(tiles, sizeof tiles,
                 "warps=%d,rows=%d,keys=%d,row_stages=%d,key_stages=%d",
                 plan.warps, plan.rows, plan.keys, plan.row_stages,
                 plan.key_stages);
        ck_assert_msg(strstr(plan.origin, "tuning DB") &&
                          strstr(plan.origin, level) &&
                          strstr(plan.origin, tiles),
                      "%s: %s (plan %s)", c->fwd.name, plan.origin, tiles);
        char options[1024];
        ck_assert(
            nv_mma_bwd_options(&caps, &p, &plan, options, sizeof options));
        ck_assert_msg(preprocess_with("flash_bwd_mma.cl", options, false) ==
                          0,
                      "%s: flash_bwd_mma.cl rejects %s", c->fwd.name, options);
    }
}
END_TEST

/* The backward's tunables in the tuning database (issue 48): path
 * "nv_mma_bwd" in FLASHCL_TUNING_FILE changes the plan's tiles; an entry
 * the kernel cannot take (8 warps of 32 rows: 85 KiB at D = 128) is
 * refused with a note and the next source, the compiled database's entry
 * (compiled_db_entry), runs; the tuner's forced set
 * outranks the file, FLASHCL_NVB_TILE outranks both, FLASHCL_TUNING=off
 * ignores the file. Every declared value is one of the kernel's legal
 * switch values. */
static nv_bwd_plan bwd_plan_with(const device_caps *caps, const char *forced,
                                 problem *out)
{
    const bwd_plan_case *c = &bwd_cases[1]; /* fp16 D128 causal, unforced */
    begin_call(ctx); /* the call's notes, as an API call starts them */
    cl_mem owned[5];
    flashcl_attention_desc d =
        desc_of(&c->fwd, flashcl_context_cl_context(ctx), owned);
    problem p;
    const flashcl_status st =
        problem_from_desc(ctx, &d, PROBLEM_FOR_PLANNING, &p);
    nv_bwd_plan plan;
    memset(&plan, 0, sizeof plan);
    if (st == FLASHCL_SUCCESS)
        nv_mma_bwd_plan_forced(caps, &p, NULL, forced, &plan);
    for (int o = 0; o < 5; ++o)
        if (owned[o])
            clReleaseMemObject(owned[o]);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%.300s",
                  flashcl_context_last_error(ctx));
    ck_assert(plan.chosen);
    char options[1024];
    ck_assert(nv_mma_bwd_options(caps, &p, &plan, options, sizeof options));
    ck_assert_msg(preprocess_with("flash_bwd_mma.cl", options, false) == 0,
                  "flash_bwd_mma.cl rejects %s", options);
    if (out)
        *out = p;
    return plan;
}

/* A plan from the compiled database's entry, not the file's (the file's
 * entry was refused or ignored). */
static void compiled_db_entry(const nv_bwd_plan *plan)
{
    ck_assert_msg(strstr(plan->origin, "tuning DB") &&
                      !strstr(plan->origin, "FLASHCL_TUNING_FILE"),
                  "%s", plan->origin);
}

static void write_bwd_entry(const char *file, const char *params)
{
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"format\": \"flashcl-tuning-1\", \"winners\": [{\"path\": "
               "\"nv_mma_bwd\", \"dtype\": \"fp16\", \"vendor\": \"nvidia\", "
               "\"arch\": \"sm_90\", \"device\": \"*\", \"head_dim\": 128, "
               "\"causal\": -1, \"seq\": \"*\", \"params\": \"%s\", "
               "\"median_ms\": 1.5, \"measured_on\": \"test\"}]}\n",
            params);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(backward_tuning_entries)
{
    const device_caps caps = h200(ctx);
    char file[] = "/tmp/flashcl-bwd-tuning-XXXXXX";
    const int fd = mkstemp(file);
    ck_assert_int_ge(fd, 0);
    close(fd);
    setenv("FLASHCL_TUNING_FILE", file, 1);

    /* an entry of params "" (the defaults won): the defaults' tiles,
     * named as the entry's */
    write_bwd_entry(file, "");
    nv_bwd_plan plan = bwd_plan_with(&caps, NULL, NULL);
    ck_assert_int_eq(plan.warps, 4);
    ck_assert_int_eq(plan.rows, 16);
    ck_assert_int_eq(plan.keys, 32);
    ck_assert_int_eq(plan.row_stages, 1);
    ck_assert_str_eq(plan.reason, "tuning DB");

    /* a legal entry: its tiles, named in describe's reason and tuning */
    write_bwd_entry(file, "warps=2,rows=16,keys=16,row_stages=2");
    plan = bwd_plan_with(&caps, NULL, NULL);
    ck_assert_int_eq(plan.warps, 2);
    ck_assert_int_eq(plan.rows, 16);
    ck_assert_int_eq(plan.keys, 16);
    ck_assert_int_eq(plan.row_stages, 2);
    ck_assert_str_eq(plan.reason, "tuning DB");
    ck_assert_msg(strstr(plan.origin, "FLASHCL_TUNING_FILE") &&
                      strstr(plan.origin, "nv_mma_bwd"),
                  "%s", plan.origin);
    {
        const bwd_plan_case *c = &bwd_cases[1];
        cl_mem owned[5];
        flashcl_attention_desc d =
            desc_of(&c->fwd, flashcl_context_cl_context(ctx), owned);
        problem p;
        ck_assert_int_eq(problem_from_desc(ctx, &d, PROBLEM_FOR_PLANNING, &p),
                         FLASHCL_SUCCESS);
        flashcl_variant_info info;
        memset(&info, 0, sizeof info);
        ck_assert(nv_mma_bwd_describe(&caps, &p, &plan, &info));
        for (int o = 0; o < 5; ++o)
            if (owned[o])
                clReleaseMemObject(owned[o]);
        ck_assert_msg(strstr(info.reason, "(FLASHCL_TUNING_FILE"), "%s",
                      info.reason);
        ck_assert_str_eq(info.tuning, plan.origin);
        ck_assert_int_eq(info.work_group_size, 64);
    }

    /* the tuner's forced set outranks the file */
    plan = bwd_plan_with(&caps, "warps=1,keys=48,key_stages=1", NULL);
    ck_assert_int_eq(plan.warps, 1);
    ck_assert_int_eq(plan.keys, 48);
    ck_assert_int_eq(plan.rows, 16); /* the default's */
    ck_assert_str_eq(plan.reason, "forced candidate");

    /* FLASHCL_NVB_TILE outranks the file */
    setenv("FLASHCL_NVB_TILE", "4,16,32", 1);
    plan = bwd_plan_with(&caps, NULL, NULL);
    unsetenv("FLASHCL_NVB_TILE");
    ck_assert_str_eq(plan.reason, "FLASHCL_NVB_TILE");
    ck_assert_str_eq(plan.origin, "");
    ck_assert_int_eq(plan.warps, 4);

    /* FLASHCL_TUNING=off: the defaults */
    setenv("FLASHCL_TUNING", "off", 1);
    plan = bwd_plan_with(&caps, NULL, NULL);
    unsetenv("FLASHCL_TUNING");
    ck_assert_int_eq(plan.warps, 4);
    ck_assert_str_eq(plan.origin, "");

    /* an entry beyond local memory: refused with a note, the compiled
     * database's entry runs */
    write_bwd_entry(file, "warps=8,rows=32");
    plan = bwd_plan_with(&caps, NULL, NULL);
    ck_assert_int_ne(plan.warps, 8);
    compiled_db_entry(&plan);
    ck_assert_msg(strstr(flashcl_context_last_error(ctx),
                         "refused for nv_mma_bwd"),
                  "%s", flashcl_context_last_error(ctx));
    /* a value outside the switches (3 stages): refused too */
    write_bwd_entry(file, "row_stages=3");
    plan = bwd_plan_with(&caps, NULL, NULL);
    ck_assert_int_ne(plan.row_stages, 3);
    compiled_db_entry(&plan);
    /* a name the backward does not declare: ignored */
    write_bwd_entry(file, "block_m=64");
    plan = bwd_plan_with(&caps, NULL, NULL);
    compiled_db_entry(&plan);
    unsetenv("FLASHCL_TUNING_FILE");
    unlink(file);

    /* the declared tunables, through the public API, are the kernel's
     * switches: each value alone passes the switch list's check */
    static const char *const names[] = {"warps", "rows", "keys",
                                        "row_stages", "key_stages"};
    problem base_p;
    const nv_bwd_plan base = bwd_plan_with(&caps, NULL, &base_p);
    for (int i = 0; i < 5; ++i) {
        flashcl_tunable t;
        ck_assert_int_eq(flashcl_path_tunable("nv_mma_bwd", i, &t),
                         FLASHCL_SUCCESS);
        ck_assert_str_eq(t.name, names[i]);
        ck_assert_int_ge(t.count, 2);
        for (int v = 0; v < t.count; ++v) {
            nv_bwd_plan one = base;
            int *field[] = {&one.warps, &one.rows, &one.keys,
                            &one.row_stages, &one.key_stages};
            *field[i] = t.values[v];
            char options[1024];
            ck_assert_msg(nv_mma_bwd_options(&caps, &base_p, &one, options,
                                             sizeof options),
                          "%s=%d is not a legal switch value", names[i],
                          t.values[v]);
        }
    }
    flashcl_tunable past;
    ck_assert_int_eq(flashcl_path_tunable("nv_mma_bwd", 5, &past),
                     FLASHCL_ERROR_INVALID_VALUE);
    /* the forward's paths do not take the backward's forced set */
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, "nv_mma_bwd", "warps=2"),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, NULL, NULL),
                     FLASHCL_SUCCESS);
}
END_TEST

/* A quantized cache's decode on the H200 (issue 45): the split-KV path on
 * the kernel an unquantized call would take, each dequantizing as it loads
 * (cl/common/kv_load.clh): the tensor-core kernel for a GQA decode,
 * without its cp.async ring (which copies raw bytes); the lane-group and
 * wide kernels when forced, the wide one with its plain loads for the
 * same reason. (scripts/nv_kernel_check.sh compiles such options.) */
/* The plan of d on caps, whatever path it takes. */
static kernel_plan plan_of(const device_caps *caps,
                           const flashcl_attention_desc *d)
{
    problem p;
    ck_assert_msg(problem_from_desc(ctx, d, PROBLEM_FOR_PLANNING, &p) ==
                      FLASHCL_SUCCESS,
                  "%.300s", flashcl_context_last_error(ctx));
    kernel_plan plan;
    char skipped[2048] = "";
    choose_plan_forced(caps, &p, &plan, skipped, sizeof skipped, NULL);
    return plan;
}

START_TEST(quantized_decode_plans)
{
    const device_caps caps = h200(ctx);
    cl_context cl = flashcl_context_cl_context(ctx);
    enum { CAP = 4096, D = 128 };
    cl_mem lens = make(cl, B * sizeof(int));
    cl_mem cache = make(cl, (size_t)B * CAP * HKV * D);
    cl_mem scales = make(cl, (size_t)B * CAP * HKV * sizeof(float));
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = B;
    d.heads_q = HQ;
    d.heads_kv = HKV;
    d.seqlen_q = 1;
    d.seqlen_k = CAP;
    d.head_dim = D;
    d.dtype = FLASHCL_DTYPE_BF16;
    d.k.buffer = d.v.buffer = cache;
    d.cache_seqlens.buffer = lens;
    d.kv_batch = B;
    d.k_storage = d.v_storage = FLASHCL_KV_INT8;
    d.k_scale.buffer = d.v_scale.buffer = scales;
    /* what each run must plan: the kernel's switch, then the others' */
    const char *forced[4] = {NULL, "lanes", "wide", "mma"};
    const char *want[4][3] = {
        {"-DFLASHCL_SPLIT_MMA=8 ", "-DFLASHCL_SPLIT_MMA_STAGES=0 ",
         "-DFLASHCL_NV_FP8_CVT=0 "},
        {"-DFLASHCL_SPLIT_LANES=32 ", "-DFLASHCL_SPLIT_MMA=0 ",
         "-DFLASHCL_SPLIT_SHFL=1 "},
        {"-DFLASHCL_SPLIT_WIDE=1 ", "-DFLASHCL_SPLIT_MMA=0 ",
         "-DFLASHCL_SPLIT_CP_ASYNC=0 "},
        {"-DFLASHCL_SPLIT_MMA=8 ", "-DFLASHCL_SPLIT_MMA_STAGES=0 ",
         "-DFLASHCL_SPLIT_LANES=0 "}};
    for (int f = 0; f < 4; ++f) {
        if (forced[f])
            setenv("FLASHCL_SPLIT_KERNEL", forced[f], 1);
        const kernel_plan plan = plan_of(&caps, &d);
        unsetenv("FLASHCL_SPLIT_KERNEL");
        printf("quantized int8 decode on the H200 (%s): %s: %s\n",
               forced[f] ? forced[f] : "planned", plan.path->name,
               plan.options);
        ck_assert_msg(!plan.refused[0], "%s", plan.refused);
        ck_assert_str_eq(plan.path->name, "split_kv");
        char padded[sizeof plan.options + 1];
        snprintf(padded, sizeof padded, "%s ", plan.options);
        ck_assert_msg(strstr(padded, want[f][0]) && strstr(padded, want[f][1]) &&
                          strstr(padded, want[f][2]) &&
                          strstr(padded, "-DFLASHCL_K_QUANT=3 ") &&
                          strstr(padded, "-DFLASHCL_V_QUANT=3 "),
                      "%s: options %s", forced[f] ? forced[f] : "planned",
                      plan.options);
    }
    /* fp8 on sm_90: the codes through cvt.rn.f16x2.e4m3x2 */
    d.k_storage = d.v_storage = FLASHCL_KV_FP8_E4M3;
    const kernel_plan plan = plan_of(&caps, &d);
    ck_assert_msg(strstr(plan.options, "-DFLASHCL_SPLIT_MMA=8 ") &&
                      strstr(plan.options, "-DFLASHCL_NV_FP8_CVT=1 ") &&
                      strstr(plan.options, "-DFLASHCL_K_QUANT=1 "),
                  "e4m3: options %s", plan.options);
    clReleaseMemObject(lens);
    clReleaseMemObject(cache);
    clReleaseMemObject(scales);
}
END_TEST

/* The matrix instructions describe reports come from the path of the
 * device's vendor (kernel_path.offer), by what was probed. */
START_TEST(matrix_offer_by_vendor)
{
    char offer[160];
    device_caps caps = h200(ctx);
    paths_matrix_offer(&caps, offer, sizeof offer);
    ck_assert_str_eq(offer, "sm_90: mma.sync m16n8k16 (fp16/bf16), wgmma "
                            "only via sm_90a PTX");
    caps.nv_cc_major = 7;
    paths_matrix_offer(&caps, offer, sizeof offer);
    ck_assert_str_eq(offer, "sm_70: mma.sync m8n8k4 (fp16)");
    caps.klass = DEVICE_CLASS_GPU_AMD;
    snprintf(caps.amd_gfx, sizeof caps.amd_gfx, "gfx1100");
    paths_matrix_offer(&caps, offer, sizeof offer);
    ck_assert_str_eq(offer, "gfx1100: WMMA wave32 (amd_mfma path)");
    caps.klass = DEVICE_CLASS_GPU_INTEL;
    caps.has_subgroups = true;
    paths_matrix_offer(&caps, offer, sizeof offer);
    ck_assert_str_eq(offer, "subgroups (matrix extensions not probed yet)");
    caps.klass = DEVICE_CLASS_CPU;
    paths_matrix_offer(&caps, offer, sizeof offer);
    ck_assert_str_eq(offer, "none");
}
END_TEST

int main(void)
{
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "test_nv_plans: no OpenCL device: %s\n",
                flashcl_last_create_error());
        return 1;
    }
    Suite *suite = suite_create("nv_plans");
    TCase *tc = tcase_create("nv_plans");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, plans_for_an_h200, 0, (int)LENGTH(cases));
    tcase_add_test(tc, backward_forced_tiles_fit_local_memory);
    tcase_add_test(tc, backward_shipped_entries_for_an_h200);
    tcase_add_loop_test(tc, backward_plans_for_an_h200, 0,
                        (int)LENGTH(bwd_cases));
    tcase_add_test(tc, backward_tuning_entries);
    tcase_add_test(tc, preprocess_can_fail);
    tcase_add_test(tc, plan_error_fails_the_build);
    tcase_add_test(tc, first_refusal_stands);
    tcase_add_test(tc, matrix_offer_by_vendor);
    tcase_add_test(tc, quantized_decode_plans);
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    flashcl_context_release(ctx);
    return failed ? 1 : 0;
}
