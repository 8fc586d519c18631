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
    {0, 64, 64, 64,
     "unmeasured (no AMD GPU here): 4 waves x 16 rows, 64-key tiles; "
     "offline ISA: 108-144 VGPR + 16 AGPR, 34 KiB LDS, no scratch"},
    {0, 128, 64, 32,
     "unmeasured (no AMD GPU here): 4 waves x 16 rows, 32-key tiles; "
     "offline ISA: 156-172 VGPR + 32 AGPR, 38 KiB LDS, no scratch"},
    {0, 256, 32, 32,
     "unmeasured (no AMD GPU here): 2 waves x 16 rows, 32-key tiles in 53 "
     "KiB LDS; offline ISA: 228-260 VGPR + 64 AGPR, no scratch"},
    {1, 64, 64, 32,
     "unmeasured (no AMD GPU here): 4 waves x 16 rows, 32-key tiles; "
     "gfx1100 ISA: 191-213 VGPR, 27 KiB LDS, no scratch"},
    {1, 128, 64, 16,
     "unmeasured (no AMD GPU here): 4 waves x 16 rows, 16-key tiles "
     "(32-key tiles spilled on gfx1100); 227-243 VGPR, 35 KiB LDS"},
    {1, 256, 32, 32,
     "unmeasured (no AMD GPU here): 2 waves x 16 rows, 32-key tiles in 61 "
     "KiB LDS; gfx1100 ISA: 213-218 VGPR, no scratch"},
};

#endif /* FLASHCL_AMD_MFMA_TILES_H */
