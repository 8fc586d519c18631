/* Tile table of the NVIDIA mma.sync path (cl/nvidia/flash_fwd_mma.cl).
 * Measured on the H200 through NVIDIA's OpenCL (bench/results/h200-*.md);
 * the kernel derives FLASHCL_NV_QREG (Q slices kept in registers) and
 * FLASHCL_NV_STAGES (K/V buffers) from these sizes and the 48 KiB
 * local-memory limit. `head_dim` is the padded size the entry serves:
 * a problem takes the first entry at or above max(D, D_v) rounded up to
 * 16 (the kernel pads in local memory and registers, never in the
 * caller's memory). FLASHCL_NV_TILE=block_m,block_n,warps overrides the
 * entry for experiments (checked in nv_mma.c). */
#ifndef FLASHCL_NV_MMA_TILES_H
#define FLASHCL_NV_MMA_TILES_H

#include "paths/tunable.h"

/* What `flashcl tune` searches (FLASHCL_NV_TILE's three numbers; legality:
 * legal_tile in nv_mma.c, 16 or 32 rows per warp, one K and one V stage
 * within local memory; the kernel derives its Q slices in registers and
 * its stages from them). */
static const tunable nv_mma_tunables[] = {
    {"block_m", {32, 64, 128, 256}, 4},
    {"block_n", {16, 32, 64, 128}, 4},
    {"warps", {1, 2, 4, 8}, 4},
};

typedef struct nv_tile {
    int head_dim; /* padded, multiple of 16; entries ascending */
    int causal;   /* -1: either */
    int tf32;     /* 1: fp32 storage on TF32 (allow_tf32) */
    int block_m, block_n, warps;
    const char *reason;
} nv_tile;

static const nv_tile nv_tiles[] = {
    {32, -1, 0, 128, 64, 4, "4 warps x 32 rows, K/V double-buffered"},
    {64, 0, 0, 128, 64, 4,
     "4 warps x 32 rows (half the K/V ldmatrix traffic of 16), K/V "
     "double-buffered: 320 TFLOP/s N=4096 on the H200, best of 7 tile "
     "configs"},
    {64, 1, 0, 128, 64, 4,
     "4 warps x 32 rows, K/V double-buffered: 289 TFLOP/s causal N=4096 on "
     "the H200, vs 257 for 128-key single-buffered tiles, 276 for 8 warps "
     "x 16"},
    {80, -1, 0, 128, 32, 4,
     "4 warps x 32 rows, all of Q in registers, 32-key tiles: 287 TFLOP/s "
     "fp16 N=4096 on the H200 (64x64 267, 64x32 262; "
     "bench/results/h200-2026-12-01-coverage.md)"},
    {96, -1, 0, 128, 32, 4,
     "4 warps x 32 rows, all of Q in registers, 32-key tiles: 306 TFLOP/s "
     "fp16 N=4096 on the H200 (128x64 301, 64x32 255, 64x64 227; was 193 "
     "at 64x64)"},
    {128, -1, 0, 128, 32, 4,
     "4 warps x 32 rows, 6 of 8 Q slices in registers, 32-key tiles "
     "double-buffered in 45 KiB: 344 TFLOP/s N=4096 on the H200; 16 "
     "rows/warp (64x64x4) 269-292, 8 warps 253, 2 warps (64x32) 324; "
     "D=112 (6 of 7 Q slices in registers): 302 (128x16 266, 64x32 228)"},
    {160, -1, 0, 64, 32, 4,
     "4 warps x 16 rows, 32-key tiles: 249 TFLOP/s fp16 N=4096 on the H200 "
     "(64x16 216, 128x16 224)"},
    {192, -1, 0, 64, 32, 4,
     "4 warps x 16 rows, 32-key tiles: 234 TFLOP/s fp16 N=4096 on the H200 "
     "(64x16 228); D=192/D_v=128: 247 (64x16 252)"},
    {256, -1, 0, 64, 32, 4,
     "4 warps x 16 rows, 32-key tiles: 247 / 232 TFLOP/s fp16 N=4096 "
     "non-causal / causal on the H200, vs 246 / 222 for 16-key tiles "
     "double-buffered (bench/results/h200-2026-12-02-extras.md)"},
    /* TF32 (fp32 storage, allow_tf32): 4-byte rows double the local
     * memory of a tile, and Q's fragments take twice the registers (sweep
     * of 2026-12-01, bench/results/h200-2026-12-01-coverage.md). */
    {64, -1, 1, 128, 32, 4,
     "TF32: 4 warps x 32 rows, 32-key tiles: 167 TFLOP/s fp32 N=4096 on "
     "the H200 (128x64 163, 64x32 152, 64x64 138)"},
    {128, -1, 1, 64, 32, 4,
     "TF32: 4 warps x 16 rows, all of Q in registers, 32-key tiles "
     "single-buffered (34 KiB): 127 TFLOP/s fp32 N=4096 on the H200 "
     "(64x16 123, 32x32x2 96; 128x32 does not build)"},
};

#endif /* FLASHCL_NV_MMA_TILES_H */
