/* Tiles of the split-KV kernels (cl/inference/flash_split.cl). Rows are
 * packed (query row x query head of one KV head), so decoding fills a
 * work-group with the heads of a GQA group. These are starting points,
 * checked for function on PoCL 3.1 and Intel's OpenCL CPU runtime only;
 * the GPU rows are to be measured (issue 11). */
#ifndef FLASHCL_SPLIT_KV_TILES_H
#define FLASHCL_SPLIT_KV_TILES_H

#include "paths/tunable.h"

/* What `flashcl tune` searches (docs/tuning.md), groups first (it moves
 * the split count, the most on a device short of work). Each kernel uses
 * some: row groups and block_n; wide groups, wg and block_n; lanes
 * groups, wg, unroll and prefetch. A tunable the kernel at hand does not
 * use must keep its entry's value (0 below: the row kernel's wg, the
 * lane kernel's block_n, which it derives), else the set is illegal. */
static const tunable split_kv_tunables[] = {
    {"groups", {1, 2, 3, 4, 8, 16, 32, 64}, 8}, /* groups_per_cu */
    {"block_n", {0, 16, 32, 64}, 4},
    {"wg", {0, 64, 128, 256}, 4},
    {"unroll", {0, 2, 4, 8}, 4},
    {"prefetch", {0, 1}, 2},
};

typedef struct split_tile {
    bool cpu;
    /* The kernel: false the row kernel (a work-item per packed row), true
     * the wide one (split_wide.clh: wg_size items share each tile). */
    bool wide;
    /* The lane-group kernel (split_lanes.clh) instead: K and V go straight
     * to registers, a group of lanes per key. wg_size items; `unroll` keys
     * per lane group and step; the lanes per key follow from the head dim
     * (a 16-byte slice each, more lanes when the rows would need too many
     * registers). */
    bool lanes;
    int unroll;
    bool prefetch; /* lane kernel: the next step's loads before this step */
    int wg_size;            /* wide and lane-group kernels */
    int min_rows, max_rows; /* block_m: packed rows rounded up to 2^k */
    int block_n;            /* keys per tile; the row kernel's divides
                               every page size */
    /* Work-groups per compute unit the automatic split count aims for,
     * and the fewest keys worth a part of their own. */
    int groups_per_cu;
    int min_keys_per_split;
    /* The automatic split applies up to this many query tiles per
     * (sequence, KV head); 0: any. On GPUs only decode-like problems until
     * prefill is measured: a long prefill on few heads would otherwise
     * leave the NVIDIA tensor-core kernel for these portable ones. */
    int max_auto_q_tiles;
    const char *measured;
    /* Nonzero: the tensor-core kernel (split_mma.clh) instead, with
     * wg_size / 32 warps (wg is what the tuner moves), 16 keys each per
     * step (block_n derived). */
    int mma_warps;
    /* ... and the steps it keeps in flight through local memory besides
     * the one in registers (cp.async, 0..3). */
    int mma_stages;
    /* ... and, with no stages, how many steps ahead each step asks the L2
     * for K and V rows (prefetch.global.L2; 0: none). */
    int mma_prefetch;
} split_tile;

static const split_tile split_tiles[] = {
    /* A CPU work-group runs its items in a loop: parts pay only when
     * there are fewer groups than cores, and only on long rows. */
    {true, false, false, 0, false, 0, 4, 32, 64, 1, 1024, 0,
     TILE_REASON("split_kv.cpu"), 0, 0, 0},
    /* 128 items, 32 keys, 8 work-groups per SM aimed for. H200 sweep
     * (2026-12-01, plain loads, bf16 D = 128; docs/experiments.md): 32 keys
     * took 87 registers where 64 took 152, and beat it by 1.1-1.2x on the B
     * = 8 and B = 32 shapes; with cp.async two 32-key stages fit the 48
     * KiB. Rows stop at 16: the P.V accumulators are 4 registers per row
     * per item. */
    {false, true, false, 0, false, 128, 1, 16, 32, 8, 256, 1,
     TILE_REASON("split_kv.wide"), 0, 0, 0},
    /* NVIDIA (warp shuffles): 128 items, 4 keys per lane group and step,
     * at most 8 rows (the Q slices and outputs live in registers), the
     * split count for 3 work-groups per SM (168 registers at 4 rows: 3 fit
     * an SM; rounded down to whole waves). H200 sweep (2026-12-01, bf16
     * D = 128, docs/experiments.md): the best of 11
     * (wg, unroll, groups) sets on B = 1 and B = 32, within 3 % on B = 8;
     * prefetch 1.07x at B = 1; unroll 2 0.87x at B = 32. Up to 4 query
     * tiles per KV head split (speculative decode, Nq x group > 8). */
    {false, false, true, 4, true, 128, 1, 8, 0, 3, 256, 4,
     TILE_REASON("split_kv.lanes"), 0, 0, 0},
    /* NVIDIA with mma.sync (sm_80+), 16-bit storage, head dims multiples of 32
     * up to 128: up to 16 packed rows on the M side of m16n8k16. H200 sweep
     * (2026-12-01, bf16 D = 128, 214 registers at 4 rows, so one 8-warp work-
     * group per SM; docs/experiments.md): 8 warps x 16 keys and a split count
     * for 1 work-group per SM, best of 14 (warps, groups, stages) sets on B =
     * 1 and B = 8 GQA (1.13-1.16x the 4-warp, 2-per-SM set) and within 2 % on
     * B = 32 MHA; the cp.async ring (stages > 0) lost 1.3-2x everywhere. 16
     * rows fall back to 4 warps (the merge's local memory). */
    {false, false, false, 0, false, 256, 1, 16, 0, 1, 256, 4,
     TILE_REASON("split_kv.mma"), 8, 0, 0},
    /* The same kernel when the unsplit grid holds at least two
     * work-groups per SM (SPLIT_KV_MANY_ENTRY: many sequences and heads,
     * short of nothing to split): 4 warps, two work-groups per SM (198
     * registers, so two fit). H200, bf16 D = 128, B = 32 MHA 4k keys
     * (2026-12-02, docs/experiments.md): 0.4966 ms
     * against 0.514 with the 8-warp entry (4,3 the same as 4,2: a third
     * work-group does not fit). The split shapes keep the 8-warp entry:
     * 4,2 split B = 1 GQA 4 32k keys in 33 parts, 0.0678 ms against
     * 0.0535. */
    {false, false, false, 0, false, 128, 1, 16, 0, 2, 256, 4,
     TILE_REASON("split_kv.mma-many"), 4, 0, 0},
};
/* The index of the entry above, and of the one it replaces. */
#define SPLIT_KV_MMA_ENTRY 3
#define SPLIT_KV_MANY_ENTRY 4

#endif /* FLASHCL_SPLIT_KV_TILES_H */
