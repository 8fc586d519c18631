/* Tile table of the subgroup path (cl/subgroup/flash_fwd_sg.cl). Each
 * entry says where its numbers were measured; GPU rows are a starting
 * point that no GPU has measured yet. */
#ifndef FLASHCL_SUBGROUP_TILES_H
#define FLASHCL_SUBGROUP_TILES_H

#include "paths/tunable.h"

/* What `flashcl tune` searches (the subgroup size stays the device's
 * choice or FLASHCL_SUBGROUP_SIZE; legality: legal_tiles in subgroup.c,
 * the kernel's #error rules and the device's limits). */
static const tunable subgroup_tunables[] = {
    {"rows", {1, 2, 4, 8}, 4},
    {"subgroups", {1, 2, 4, 8, 16}, 5},
    {"block_n", {16, 32, 64, 128, 256}, 5},
};

typedef struct subgroup_tile {
    tile_reach reach;
    int rows;         /* query rows per subgroup (FLASHCL_SG_ROWS) */
    int subgroups;    /* subgroups per work-group */
    int block_n;      /* keys per tile (at least the subgroup size) */
    const char *measured;
} subgroup_tile;

/* First match wins. CPU row: a sweep (rows x subgroups x keys, subgroup
 * 16) on Intel's OpenCL CPU runtime 2026.2 on the 2-core AVX-512 EPYC (the
 * CI machine, shared and loaded, so best-of-7 times), fp32 N = 2048
 * non-causal, ms: D = 64: 8x8x128 126, 4x8x128 138, 4x8x256 148, 8x8x64
 * and 4x4x128 over 200 (portable kernel in the same runs: 122); D = 128:
 * 8x8x128 255, 4x8x128 259, 4x8x64 386 (portable 301). Subgroup 32 ran
 * about 15x slower than 16 there (D = 64), 8 about as fast as 16. The
 * compile time grows with rows x keys per lane (Intel's compiler, one
 * program, subgroup 16: 8x8x128 1.4-2.3 s, 4x8x128 1.8-2.1 s, 4x8x64
 * 0.6-1.1 s, portable 0.5-0.6 s), which CI pays for every variant at
 * three subgroup sizes: 4 rows and 128 keys, whatever the subgroup size
 * (the code grows with rows x keys / 16 AVX-512 lanes: test_variants at
 * subgroup 32 took 53 s of CPU time with 128 keys, 109 s with 256). */
static const subgroup_tile subgroup_tiles[] = {
    {{true, 256}, 4, 8, 128, TILE_REASON("subgroup.cpu")},
    {{false, 128}, 2, 4, 64, TILE_REASON("subgroup.gpu-d128")},
    {{false, 256}, 1, 4, 32, TILE_REASON("subgroup.gpu-d256")},
};

#endif /* FLASHCL_SUBGROUP_TILES_H */
