/* Tile table of the AMD matrix-core path (cl/amd/flash_fwd_amd.cl). No AMD
 * GPU was reachable: the sizes are not measured, only checked offline
 * (scripts/amd_isa_check.sh: clang for gfx90a, gfx942 and gfx1100, no
 * scratch, local memory within 64 KiB). Rows are per matrix family and
 * padded head dim (max(D, D_v) padded to 16); the first that fits is used.
 * A wave owns 16 query rows, so block_m / 16 waves per work-group. */
#ifndef FLASHCL_AMD_MFMA_TILES_H
#define FLASHCL_AMD_MFMA_TILES_H

#include "paths/tunable.h"

/* What `flashcl tune` searches (a wave per 16 rows; legality: legal_tile
 * in amd_mfma.c, the kernel's #error rules, local memory, work-group). */
static const tunable amd_mfma_tunables[] = {
    {"block_m", {16, 32, 64, 128}, 4},
    {"block_n", {16, 32, 64, 128}, 4},
};

typedef struct amd_tile {
    int wmma;         /* 0: MFMA wave64, 1: WMMA wave32 */
    int max_head_dim; /* padded max(D, D_v) */
    int block_m, block_n;
    const char *reason;
} amd_tile;

static const amd_tile amd_tiles[] = {
    {0, 64, 64, 64, TILE_REASON("amd_mfma.mfma-d64")},
    {0, 128, 64, 32, TILE_REASON("amd_mfma.mfma-d128")},
    {0, 256, 32, 32, TILE_REASON("amd_mfma.mfma-d256")},
    {1, 64, 64, 32, TILE_REASON("amd_mfma.wmma-d64")},
    {1, 128, 64, 16, TILE_REASON("amd_mfma.wmma-d128")},
    {1, 256, 32, 32, TILE_REASON("amd_mfma.wmma-d256")},
};

#endif /* FLASHCL_AMD_MFMA_TILES_H */
