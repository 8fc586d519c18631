/* Tile table of the portable path (cl/portable/flash_fwd.cl). Each entry
 * says where its numbers were measured; a device of another kind gets the
 * entry of its class, which is a starting point, not a measurement. */
#ifndef FLASHCL_PORTABLE_TILES_H
#define FLASHCL_PORTABLE_TILES_H

#include "paths/tunable.h"

/* What `flashcl tune` searches (rows: query rows per work-item, so the
 * work-group is block_m / rows; legality: legal_tiles in portable.c). */
static const tunable portable_tunables[] = {
    {"block_m", {16, 32, 64, 128, 256, 512}, 6},
    {"block_n", {16, 32, 64, 128, 256}, 5},
    {"vec", {4, 8, 16}, 3},
    {"rows", {1, 2, 4}, 3},
};

typedef struct portable_tile {
    tile_reach reach;
    int block_m, block_n;
    int vec;          /* 0: the device's preferred float vector width */
    int rows;         /* query rows per work-item: 1, 2 or 4 */
    const char *measured;
} portable_tile;

/* First match wins. CPU rows: a sweep of (rows x keys) on PoCL 3.1 on a
 * 2-core AVX-512 EPYC (the CI machine), fp32, N = 2048, non-causal, in
 * GFLOP/s for D = 64 / 128: 32x64 33/36, 64x64 46/52, 128x64 53/52,
 * 128x128 48/63, 256x128 47/65. PoCL runs padding rows in full, so short
 * queries get smaller row blocks (portable.c). */
static const portable_tile portable_tiles[] = {
    {{true, 64}, 512, 64, 0, 2, TILE_REASON("portable.cpu-d64")},
    {{true, 256}, 128, 128, 0, 1, TILE_REASON("portable.cpu-d256")},
    {{false, 256}, 64, 32, 4, 1, TILE_REASON("portable.gpu")},
};

#endif /* FLASHCL_PORTABLE_TILES_H */
