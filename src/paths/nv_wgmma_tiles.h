/* Tiles of the Hopper wgmma path (cl/nvidia/flash_fwd_wgmma.cl): 64 query
 * rows per warpgroup (the wgmma M), 64-key K/V tiles, and 1 or 2
 * warpgroups per work-group sharing each K/V tile. Not measured on a GPU
 * yet: the entries are what the offline ptxas check supports (registers
 * per thread from scripts/wgmma_isa_check.sh, clang 14's PTX); sweep both
 * with FLASHCL_NV_WGMMA_WG=1|2, the overlapped schedule with
 * FLASHCL_NV_WGMMA_OVERLAP=0|1 and 128-key tiles at D = 64 with
 * FLASHCL_NV_WGMMA_BN=128 (or 32), the ring of K/V slots with
 * FLASHCL_NV_WGMMA_RING=<slots>, FLASHCL_NV_WGMMA_LAG=0|1 and
 * FLASHCL_NV_WGMMA_SAHEAD=0|1 (env only), and a register
 * cap (more work-groups per SM) with FLASHCL_NV_WGMMA_MAXNREG=<n>
 * (bench/run_h200_wgmma.sh quick), and write the measured reason here.
 * First GPU run (H200, 2026-12-01, docs/nvidia-path.md): 2 warpgroups
 * plain 277/190 TFLOP/s at D = 64/128 non-causal, nv_mma 309/337. */
#ifndef FLASHCL_NV_WGMMA_TILES_H
#define FLASHCL_NV_WGMMA_TILES_H

typedef struct nv_wgmma_tile {
    int head_dim; /* 64 or 128 */
    int causal;   /* -1: either */
    int warpgroups;
    int block_n; /* keys per K/V tile: 64, or 128 where the tiles fit */
    int overlap; /* FLASHCL_NV_WGMMA_OVERLAP: softmax during the last P V */
    int ring;    /* FLASHCL_NV_WGMMA_RING: K/V tile slots (0: off) */
    int lag;     /* FLASHCL_NV_WGMMA_LAG: P V in flight into the next S */
    int maxnreg; /* FLASHCL_NV_WGMMA_MAXNREG: .maxnreg of the PTX (0: none) */
    const char *reason;
} nv_wgmma_tile;

static const nv_wgmma_tile nv_wgmma_tiles[] = {
    {64, -1, 2, 64, 0, 0, 0, 0,
     "2 warpgroups x 64 rows share 64-key K/V tiles, double-buffered in 32 "
     "KiB (offline: 118-155 registers, no spills; unmeasured)"},
    {128, -1, 2, 64, 0, 0, 0, 0,
     "2 warpgroups x 64 rows share 64-key K/V tiles, single-buffered in 32 "
     "KiB (offline: 181-217 registers, no spills; at 1 warpgroup 207-238: "
     "the same 8 warps per SM; unmeasured)"},
};

#endif /* FLASHCL_NV_WGMMA_TILES_H */
