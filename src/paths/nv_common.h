/* What the two NVIDIA tensor-core paths (nv_mma.c, nv_wgmma.c) share and
 * no other path uses: the heads-first and sequences-first grids, the
 * decode rule that sends small decodes to the split-KV service, the
 * packed (varlen) batch's options and arguments, and the emulation that
 * tests the kernels' lane logic off NVIDIA. */
#ifndef FLASHCL_NV_COMMON_H
#define FLASHCL_NV_COMMON_H

#include "paths/path.h"
#include "paths/varlen.h"

/* FLASHCL_NV_EMULATE=1 (tests): the tensor-core kernels' PTX emulated
 * with sub-group shuffles of 32 (cl/nvidia/nv_mma.clh) on a device that
 * has them, such as Intel's CPU runtime, so that CI runs their lane
 * logic (the split-KV mma kernel, the tensor-core backward). */
bool nv_emulated(const device_caps *caps);
/* FLASHCL_NV_EMULATE=forward: the mma.sync forward kernel's PTX emulated
 * likewise (alone: the suites run with "1" call the forward too, and
 * would run it emulated, slowly). */
bool nv_emulated_forward(const device_caps *caps);

/* A kernel route that failed to build on a device and driver, recorded
 * process-wide so that later plans there take the fallback at once (a
 * driver too old for the route's PTX). Initialise with
 * DRIVER_FAILURE_INIT. */
typedef struct driver_failure {
    pthread_mutex_t lock;
    char device[1024]; /* platform|device|driver; "" while nothing failed */
    char reason[256];  /* the first line of the build's error */
} driver_failure;
#define DRIVER_FAILURE_INIT {PTHREAD_MUTEX_INITIALIZER, "", ""}
/* Records that the route failed on caps' device, for `why` (its first
 * line is kept). */
void driver_failure_note(driver_failure *f, const device_caps *caps,
                         const char *why);
/* The recorded reason into reason[cap] when the route failed on caps'
 * device; false otherwise. */
bool driver_failure_here(driver_failure *f, const device_caps *caps,
                         char *reason, size_t cap);

/* Whether the grid runs heads first: with a bias or mask shared by every
 * head, the blocks in flight then read the same rows, from L2 after the
 * first. FLASHCL_NV_GRID=blocks|heads forces the order (both NVIDIA
 * kernels, for comparisons). False without a bias or mask. */
bool plan_extras_heads_first(const problem *p);
/* After plan_row_blocks: dimension 0 over heads, 1 over query blocks. */
void plan_heads_first_grid(const problem *p, kernel_plan *plan);

/* The packed batch's options (-DFLASHCL_NV_VARLEN=1, its diagonal, and
 * sequences first in the grid for a causal band: FLASHCL_NV_SEQ_FIRST;
 * FLASHCL_NV_VARLEN_GRID=seqs|blocks forces the order) appended to buf;
 * true when sequences go first. */
bool plan_varlen_options(const problem *p, char *buf, size_t cap);
/* The same, appended to a checked buffer. */
bool plan_varlen_options_add(const problem *p, options_buf *out);
/* Whether a packed batch runs sequences first in the grid (false when
 * the batch is not packed). */
bool plan_varlen_seq_first(const problem *p);
/* After plan_row_blocks, with sequences first: dimension 0 over the
 * sequences, 2 over query blocks. */
void plan_seq_first_grid(const problem *p, kernel_plan *plan);
#endif
