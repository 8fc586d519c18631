/* What `flashcl tune --backward` searches for the tensor-core backward
 * (cl/nvidia/flash_bwd_mma.cl, src/paths/nv_mma_bwd.c): the five fields
 * of FLASHCL_NVB_TILE, as the switches of
 * cl/nvidia/flash_bwd_mma_switches.clh name them (NVB_WARPS, NVB_ROWS,
 * ...). Legality: tiles_fit in nv_mma_bwd.c (the kernel's
 * #error rules: each kernel's local memory, the work-group limit). The
 * tuning database and FLASHCL_TUNING_FILE file them under path
 * "nv_mma_bwd" (no forward path has that name); the defaults are
 * choose_tiles' in nv_mma_bwd.c. */
#ifndef FLASHCL_NV_MMA_BWD_TILES_H
#define FLASHCL_NV_MMA_BWD_TILES_H

#include "paths/tunable.h"

#define NV_MMA_BWD_TUNING_PATH "nv_mma_bwd"

static const tunable nv_mma_bwd_tunables[] = {
    {"warps", {1, 2, 4, 8}, 4},
    {"rows", {16, 32, 48, 64}, 4},
    {"keys", {16, 32, 48, 64}, 4},
    {"row_stages", {1, 2}, 2},
    {"key_stages", {1, 2}, 2},
};

#endif /* FLASHCL_NV_MMA_BWD_TILES_H */
