/* Tiles of the Hopper wgmma path (cl/nvidia/flash_fwd_wgmma.cl): 64 query
 * rows per warpgroup (the wgmma M), 64-key K/V tiles, and 1 or 2
 * warpgroups per work-group sharing each K/V tile. Not measured on a GPU
 * yet: the entries are what the offline ptxas check supports (registers
 * per thread from scripts/wgmma_isa_check.sh, clang 14's PTX); sweep both
 * with FLASHCL_NV_WGMMA_WG=1|2, the overlapped schedule with
 * FLASHCL_NV_WGMMA_OVERLAP=0|1 and 128-key tiles at D = 64 with
 * FLASHCL_NV_WGMMA_BN=128 (or 32), the ring of K/V slots with
 * FLASHCL_NV_WGMMA_RING=<slots>, FLASHCL_NV_WGMMA_LAG=0|1 and
 * FLASHCL_NV_WGMMA_SAHEAD=0|1, and a register cap (more work-groups
 * per SM) with FLASHCL_NV_WGMMA_MAXNREG=<n> (bench/run_h200_wgmma.sh
 * quick), or search them all with `flashcl tune --path nv_wgmma`
 * (nv_wgmma_tunables below; its winners go to the tuning database, which
 * the path consults when forced), and write the measured reason here.
 * First GPU run (H200, 2026-12-01, docs/nvidia-path.md): 2 warpgroups
 * plain 277/190 TFLOP/s at D = 64/128 non-causal, nv_mma 309/337. */
#ifndef FLASHCL_NV_WGMMA_TILES_H
#define FLASHCL_NV_WGMMA_TILES_H

#include "paths/tunable.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What `flashcl tune --path nv_wgmma` searches: the table's fields below,
 * under the names of their FLASHCL_NV_WGMMA_* variables (which still win
 * over a tuned or forced set, for experiments). Legality (legal_config in
 * nv_wgmma.c, the kernel's #error rules and the local memory): the ring,
 * when on, holds 2 + lag .. 8 tiles and excludes the overlapped schedule;
 * lag needs the ring, S ahead the ring with lag 1; K/V tiles (ring slots,
 * 3 for the overlapped schedule, else 2) within the local memory. 32-key
 * tiles: half the S/P registers; maxnreg 128: two work-groups of 256
 * threads per SM's registers (ptxas spills past it). */
static const tunable nv_wgmma_tunables[] = {
    /* In this order the tuner, nearest the table first, tries the ring
     * (the best schedule of the second GPU run) before the other single
     * changes, then the ring with lag / S ahead / the register cap. A
     * 2-slot ring is the plain schedule's double buffer: left out. */
    {"ring", {0, 3, 4, 5, 6, 8}, 6},
    {"lag", {0, 1}, 2},
    {"sahead", {0, 1}, 2},
    {"maxnreg", {0, 128}, 2},
    {"block_n", {32, 64, 128}, 3},
    {"warpgroups", {1, 2}, 2},
    {"overlap", {0, 1}, 2},
    /* the producer warpgroup and its mbarrier ring (1), with setmaxnreg's
     * register split (2), the consumers' ping-pong (3), and S ahead in
     * FlashAttention-3's order (4): warpgroups + 1 warpgroups per
     * work-group */
    {"ws", {0, 1, 2, 3, 4}, 5},
};

/* One schedule: the table's fields (below), a tuned or forced set of the
 * tunables above (same names), then the FLASHCL_NV_WGMMA_* knobs. */
typedef struct nv_wgmma_cfg {
    int warpgroups, block_n, ring, lag, sahead, overlap, maxnreg, ws;
} nv_wgmma_cfg;

/* The kernel's #error rules and the device's limits for a set
 * (nv_wgmma_config.c); false with the reason in `why`. */
bool nv_wgmma_legal(const nv_wgmma_cfg *c, int head_dim, uint64_t local_mem,
                    size_t max_work_group, char *why, size_t cap);
/* Local memory of its K/V tiles: ring slots, 3 overlapped, else 2; with
 * ws also two mbarriers per slot. */
uint64_t nv_wgmma_smem_bytes(const nv_wgmma_cfg *c, int head_dim);
/* Threads of its work-group: 128 per warpgroup, one more with ws. */
int nv_wgmma_threads(const nv_wgmma_cfg *c);
/* The register cap the set runs under: its maxnreg, or with ws (one
 * work-group per SM) the 64 K registers shared by its threads; 0: none. */
int nv_wgmma_regs(const nv_wgmma_cfg *c);
/* Its schedule's -D options (the tiles go through plan_base_options). */
void nv_wgmma_defines(const nv_wgmma_cfg *c, char *buf, size_t cap);

typedef struct nv_wgmma_tile {
    int head_dim; /* 64 or 128 */
    int causal;   /* -1: either */
    int warpgroups;
    int block_n; /* keys per K/V tile: 64, or 128 where the tiles fit */
    int overlap; /* FLASHCL_NV_WGMMA_OVERLAP: softmax during the last P V */
    int ring;    /* FLASHCL_NV_WGMMA_RING: K/V tile slots (0: off) */
    int lag;     /* FLASHCL_NV_WGMMA_LAG: P V in flight into the next S */
    int maxnreg; /* FLASHCL_NV_WGMMA_MAXNREG: .maxnreg of the PTX (0: none) */
    int ws;      /* producer warpgroup (1), + setmaxnreg (2), + ping-pong (3),
                  * + S ahead (4) */
    const char *reason;
} nv_wgmma_tile;

static const nv_wgmma_tile nv_wgmma_tiles[] = {
    {64, -1, 2, 64, 0, 0, 0, 0, 0,
     "2 warpgroups x 64 rows share 64-key K/V tiles, double-buffered in 32 "
     "KiB (offline: 118-155 registers, no spills; unmeasured)"},
    {128, -1, 2, 64, 0, 0, 0, 0, 0,
     "2 warpgroups x 64 rows share 64-key K/V tiles, single-buffered in 32 "
     "KiB (offline: 181-217 registers, no spills; at 1 warpgroup 207-238: "
     "the same 8 warps per SM; unmeasured)"},
};

#endif /* FLASHCL_NV_WGMMA_TILES_H */
