/* What `flashcl tune --backward` searches for the portable backward
 * (cl/portable/flash_bwd.cl, src/api/backward.c) on devices where the
 * tensor-core backward does not run: the switches the list
 * cl/portable/flash_bwd_switches.clh declares TUNABLE, named by their
 * define's tail (BWD_WG -> "wg", BWD_DQ_IN_MEMORY -> "dq_in_memory"), so
 * the tuner reads the planned value back from the build options. The
 * tuning database and FLASHCL_TUNING_FILE file them under path
 * "portable_bwd" (no forward path has that name). Legality: the switch
 * list's declared values, then the plan's own limits (portable_bwd_fits
 * in backward.c: work-group size, local memory, the fused dQ's scratch).
 * The defaults are plan_backward's hand rules. */
#ifndef FLASHCL_PORTABLE_BWD_TILES_H
#define FLASHCL_PORTABLE_BWD_TILES_H

#include "paths/tunable.h"

#define PORTABLE_BWD_TUNING_PATH "portable_bwd"

/* The first ones move the time most (docs/experiments.md, "Portable
 * backward"): the tuner's ties change them first. */
static const tunable portable_bwd_tunables[] = {
    {"wg", {16, 32, 64, 128, 256}, 5},
    {"rows", {1, 2, 4}, 3},
    {"vec", {4, 8, 16}, 3},
    {"tile", {8, 16, 32, 64}, 4},
    {"fused_dq", {0, 1}, 2},
    {"dq_in_memory", {0, 1}, 2},
    {"prefetch", {0, 1}, 2},
};

/* Its tuning key (src/api/backward.c): in no list of forward paths. */
struct kernel_path;
extern const struct kernel_path portable_bwd_tuning;

#endif /* FLASHCL_PORTABLE_BWD_TILES_H */
