/* Variant choice: the one table that maps (head dim, dtype, causal, device
 * class) to a kernel family, tile sizes and work-group size. Each entry
 * carries the measured reason it is what it is. */
#include "../internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kernel_family_file(kernel_family family)
{
    return family == KERNEL_NV_MMA ? "flash_fwd_mma.cl" : "flash_fwd.cl";
}

/* Padded head dims keep the number of compiled variants small while
 * wasting at most 15 (31 above 128) lanes of work per row. */
static int padded_head_dim(int head_dim)
{
    int step = head_dim <= 128 ? 16 : 32;
    return (head_dim + step - 1) / step * step;
}

/* ---- NVIDIA mma.sync path (cl/flash_fwd_mma.cl) --------------------- */

typedef struct nv_tile_entry {
    int head_dim; /* exact; this path does not pad */
    int causal;   /* -1: either */
    int block_m, block_n, warps;
    const char *reason;
} nv_tile_entry;

/* Measured on the H200 through NVIDIA's OpenCL (bench/nv_kernel_probe.c,
 * bench/results/); the kernel picks FLASHCL_NV_QREG / FLASHCL_NV_STAGES
 * from these sizes (cl/flash_fwd_mma.cl). */
static const nv_tile_entry nv_tiles[] = {
    {32, -1, 128, 64, 4, "4 warps x 32 rows, K/V double-buffered"},
    {64, 0, 128, 64, 4,
     "4 warps x 32 rows (half the K/V ldmatrix traffic of 16), K/V "
     "double-buffered: 320 TFLOP/s N=4096, best of 7 tile configs"},
    {64, 1, 128, 64, 4,
     "4 warps x 32 rows, K/V double-buffered: 289 TFLOP/s causal N=4096, "
     "vs 257 for 128-key single-buffered tiles, 276 for 8 warps x 16"},
    {96, -1, 64, 64, 4, "4 warps x 16 rows, all of Q in registers"},
    {128, -1, 128, 32, 4,
     "4 warps x 32 rows, 6 of 8 Q slices in registers, 32-key tiles "
     "double-buffered in 45 KiB: 344 TFLOP/s N=4096; 16 rows/warp "
     "(64x64x4) 269-292, 8 warps 253, 2 warps (64x32) 324"},
    {256, -1, 64, 16, 4,
     "4 warps x 16 rows, 16-key tiles double-buffered: no spills"},
};

static bool nv_mma_source_present(void)
{
    char msg[256];
    char *text = load_kernel_source("flash_fwd_mma.cl", msg, sizeof msg);
    free(text);
    return text != NULL;
}

static bool nv_mma_eligible(const device_caps *caps,
                            const variant_query *query)
{
    const char *force = getenv("FLASHCL_PORTABLE_ONLY");
    if (force && *force && strcmp(force, "0") != 0)
        return false;
    return caps->klass == DEVICE_CLASS_GPU_NVIDIA && caps->nv_cc_major >= 8 &&
           (query->dtype == FLASHCL_DTYPE_FP16 ||
            query->dtype == FLASHCL_DTYPE_BF16) &&
           !query->has_variants && query->dim_contiguous &&
           query->rows_aligned_16B && nv_mma_source_present();
}

static const nv_tile_entry *nv_lookup(const variant_query *query)
{
    for (size_t i = 0; i < sizeof nv_tiles / sizeof nv_tiles[0]; ++i)
        if (nv_tiles[i].head_dim == query->head_dim &&
            (nv_tiles[i].causal < 0 || nv_tiles[i].causal == query->causal))
            return &nv_tiles[i];
    return NULL;
}

/* ---- portable path (cl/flash_fwd.cl) ------------------------------- */

static size_t portable_local_bytes(const variant_key *key)
{
    const size_t real_size = key->dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
    const int d = key->head_dim_padded, dv = key->head_dim_v_padded;
    const int stage = d > dv ? d : dv;
    return ((size_t)key->block_m * (size_t)stage +
            (size_t)key->block_n * (size_t)(d + dv)) *
           real_size;
}

static void choose_portable(const device_caps *caps,
                            const variant_query *query, variant_key *key,
                            const char **reason)
{
    key->family = KERNEL_PORTABLE;
    key->head_dim_padded = padded_head_dim(query->head_dim);
    key->head_dim_v_padded = padded_head_dim(query->head_dim_v);
    key->window_left = query->window_left;
    key->softcap = query->softcap;
    key->alibi = query->alibi;
    key->mask = query->mask;
    key->sinks = query->sinks;
    key->bias = query->bias;
    if (caps->klass == DEVICE_CLASS_CPU) {
        /* PoCL 3.1, 2-core AVX-512 EPYC, fp32, N = 2048, GFLOP/s
         * (D=64 / D=128, non-causal): 32x64 33/36, 64x64 46/52,
         * 128x64 53/52, 128x128 48/63, 256x128 47/65. PoCL runs padding
         * rows in full, so short queries get a block just big enough. */
        key->block_m = 128;
        while (key->block_m > 16 && key->block_m / 2 >= query->seqlen_q)
            key->block_m /= 2;
        key->block_n = query->head_dim <= 64 ? 64 : 128;
        key->vec = 16;
        *reason = query->head_dim <= 64
                      ? "CPU: 128 rows x 64 keys, 16-wide vectors: 53 "
                        "GFLOP/s fp32 D=64 N=2048 on PoCL (32x64: 33)"
                      : "CPU: 128 rows x 128 keys, 16-wide vectors: 63 "
                        "GFLOP/s fp32 D=128 N=2048 on PoCL (128x64: 52)";
    } else {
        key->block_m = 64;
        key->block_n = 32;
        key->vec = 4;
        *reason = "GPU, portable: 64 rows per group, float4 vectors";
    }
    /* Shrink tiles until Q + K + V tiles fit the device's local memory
     * (48 KiB on NVIDIA: D = 256 fp32 ends at 16 x 16, fp64 at 8 x 8). */
    const int min_tile = key->vec > 8 ? key->vec : 8;
    size_t limit = caps->local_mem ? (size_t)caps->local_mem : 32768;
    while (portable_local_bytes(key) > limit &&
           (key->block_m > min_tile || key->block_n > min_tile)) {
        if (key->block_m >= key->block_n && key->block_m > min_tile)
            key->block_m /= 2;
        else
            key->block_n /= 2;
    }
    if (caps->max_work_group && (size_t)key->block_m > caps->max_work_group)
        key->block_m = (int)caps->max_work_group;
    key->wg_size = key->block_m;
}

void choose_variant(const device_caps *caps, const variant_query *query,
                    variant_key *key, const char **reason)
{
    memset(key, 0, sizeof *key);
    key->dtype = (int)query->dtype;
    key->causal = query->causal ? 1 : 0;
    key->dim_contiguous = query->dim_contiguous ? 1 : 0;
    const nv_tile_entry *nv = NULL;
    if (nv_mma_eligible(caps, query))
        nv = nv_lookup(query);
    if (nv) {
        key->family = KERNEL_NV_MMA;
        key->head_dim_padded = query->head_dim;
        key->block_m = nv->block_m;
        key->block_n = nv->block_n;
        key->wg_size = nv->warps * 32;
        key->vec = 0;
        key->top_left = query->top_left ? 1 : 0;
        *reason = nv->reason;
        return;
    }
    choose_portable(caps, query, key, reason);
}

void variant_build_options(const variant_key *key, const device_caps *caps,
                           char *buf, size_t cap)
{
    int n = snprintf(buf, cap,
                     "-cl-std=CL1.2 -cl-mad-enable -DFLASHCL_HEAD_DIM=%d "
                     "-DFLASHCL_BLOCK_M=%d -DFLASHCL_BLOCK_N=%d "
                     "-DFLASHCL_WG_SIZE=%d -DFLASHCL_DTYPE=%d "
                     "-DFLASHCL_CAUSAL=%d -DFLASHCL_DIM_CONTIGUOUS=%d",
                     key->head_dim_padded, key->block_m, key->block_n,
                     key->wg_size, key->dtype, key->causal,
                     key->dim_contiguous);
    if (n < 0 || (size_t)n >= cap)
        return;
    if (key->family == KERNEL_PORTABLE)
        snprintf(buf + n, cap - (size_t)n,
                 " -DFLASHCL_VEC=%d -DFLASHCL_HEAD_DIM_V=%d "
                 "-DFLASHCL_WINDOW_LEFT=%d -DFLASHCL_SOFTCAP=%d "
                 "-DFLASHCL_ALIBI=%d -DFLASHCL_BIAS=%d -DFLASHCL_MASK=%d "
                 "-DFLASHCL_SINKS=%d",
                 key->vec, key->head_dim_v_padded, key->window_left,
                 key->softcap, key->alibi, key->bias, key->mask, key->sinks);
    else
        snprintf(buf + n, cap - (size_t)n,
                 " -DFLASHCL_NV_MMA=1 -DFLASHCL_NV_SM=%u%u "
                 "-DFLASHCL_TOP_LEFT=%d",
                 caps->nv_cc_major, caps->nv_cc_minor, key->top_left);
}
