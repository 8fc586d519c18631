/* Tile table of the NVIDIA mma.sync path (cl/nvidia/flash_fwd_mma.cl).
 * Measured on the H200 through NVIDIA's OpenCL (bench/nv_kernel_probe.c,
 * bench/results/h200-2026-11-29*.md); the kernel derives FLASHCL_NV_QREG
 * (Q slices kept in registers) and FLASHCL_NV_STAGES (K/V buffers) from
 * these sizes and the 48 KiB local-memory limit. Head dims are exact: this
 * path does not pad. */
#ifndef FLASHCL_NV_MMA_TILES_H
#define FLASHCL_NV_MMA_TILES_H

typedef struct nv_tile {
    int head_dim;
    int causal; /* -1: either */
    int block_m, block_n, warps;
    const char *reason;
} nv_tile;

static const nv_tile nv_tiles[] = {
    {32, -1, 128, 64, 4, "4 warps x 32 rows, K/V double-buffered"},
    {64, 0, 128, 64, 4,
     "4 warps x 32 rows (half the K/V ldmatrix traffic of 16), K/V "
     "double-buffered: 320 TFLOP/s N=4096 on the H200, best of 7 tile "
     "configs"},
    {64, 1, 128, 64, 4,
     "4 warps x 32 rows, K/V double-buffered: 289 TFLOP/s causal N=4096 on "
     "the H200, vs 257 for 128-key single-buffered tiles, 276 for 8 warps "
     "x 16"},
    {96, -1, 64, 64, 4,
     "4 warps x 16 rows, all of Q in registers (untuned: 193 TFLOP/s fp16 "
     "N=2048 on the H200)"},
    {128, -1, 128, 32, 4,
     "4 warps x 32 rows, 6 of 8 Q slices in registers, 32-key tiles "
     "double-buffered in 45 KiB: 344 TFLOP/s N=4096 on the H200; 16 "
     "rows/warp (64x64x4) 269-292, 8 warps 253, 2 warps (64x32) 324"},
    {256, -1, 64, 16, 4,
     "4 warps x 16 rows, 16-key tiles double-buffered: no spills (197 "
     "TFLOP/s bf16 causal N=4096 on the H200)"},
};

#endif /* FLASHCL_NV_MMA_TILES_H */
