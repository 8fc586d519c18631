/* Tile table of the NVIDIA mma.sync path (cl/nvidia/flash_fwd_mma.cl).
 * Measured on the H200 through NVIDIA's OpenCL (docs/experiments.md);
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

/* What the tensor cores multiply: fp16/bf16; fp32 as one TF32 product
 * (allow_tf32); fp32 split into TF32 high and low parts, three products
 * (exact fp32, the default for fp32). */
enum { NV_TILE_16BIT, NV_TILE_TF32, NV_TILE_EXACT };

typedef struct nv_tile {
    int head_dim; /* padded, multiple of 16; entries ascending */
    int causal;   /* -1: either */
    int tf32;     /* NV_TILE_16BIT, NV_TILE_TF32 or NV_TILE_EXACT */
    int block_m, block_n, warps;
    const char *reason;
} nv_tile;

static const nv_tile nv_tiles[] = {
    {32, -1, 0, 128, 64, 4, TILE_REASON("nv_mma.d32")},
    {64, 0, 0, 128, 64, 4, TILE_REASON("nv_mma.d64")},
    {64, 1, 0, 128, 64, 4, TILE_REASON("nv_mma.d64-causal")},
    {80, -1, 0, 128, 32, 4, TILE_REASON("nv_mma.d80")},
    {96, -1, 0, 128, 32, 4, TILE_REASON("nv_mma.d96")},
    {128, -1, 0, 128, 32, 4, TILE_REASON("nv_mma.d128")},
    {160, -1, 0, 64, 32, 4, TILE_REASON("nv_mma.d160")},
    {192, -1, 0, 64, 32, 4, TILE_REASON("nv_mma.d192")},
    {256, -1, 0, 64, 32, 4, TILE_REASON("nv_mma.d256")},
    /* TF32 (fp32 storage, allow_tf32): 4-byte rows double the local
     * memory of a tile, and Q's fragments take twice the registers (sweep
     * of 2026-12-01, docs/experiments.md). */
    {64, -1, NV_TILE_TF32, 128, 32, 4, TILE_REASON("nv_mma.tf32-d64")},
    {128, -1, NV_TILE_TF32, 64, 32, 4, TILE_REASON("nv_mma.tf32-d128")},
    /* Exact fp32 (3xTF32): 16 rows a warp, since Q's fp32 words, the
     * split K/V words and O's accumulators and compensation terms of 32
     * rows would not fit in 255 registers; 32-key tiles keep S small,
     * 16-key ones at D 128 make room for O's compensation. Not yet
     * measured on a GPU (ptxas's registers: docs/experiments.md). */
    {64, -1, NV_TILE_EXACT, 64, 32, 4, TILE_REASON("nv_mma.exact-d64")},
    {128, -1, NV_TILE_EXACT, 64, 16, 4, TILE_REASON("nv_mma.exact-d128")},
};

#endif /* FLASHCL_NV_MMA_TILES_H */
