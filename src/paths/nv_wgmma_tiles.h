/* Tiles of the Hopper wgmma path (cl/nvidia/flash_fwd_wgmma.cl): 64 query
 * rows per consumer warpgroup (the wgmma M), 64-key K/V tiles, and the
 * schedule that moves them. The entries are what the H200 measured
 * fastest on 2026-12-02 (bench/results/h200-2026-12-02-wgmma.md): the
 * warp-specialized schedule (ws 2: a producer warpgroup, mbarriers, the
 * setmaxnreg split) with 128-byte-swizzled tiles in 128 KiB of local
 * memory, which the PTX patch gives the kernel beyond OpenCL's 48 KiB.
 * What the runs said, in order: the unspecialized ring 259-299 TFLOP/s;
 * warp specialization alone 247-295 (the kernel was load-bound: without
 * the copies it ran 456-489 causal, without the softmax no faster); the
 * swizzled tiles (whole 128-byte lines a warp instruction, no bank
 * conflicts) 440-454 at D = 128. That schedule is the kernel's only one
 * (cl/nvidia/wgmma/, docs/wgmma-kernel.md); the others measured slower
 * (docs/experiments.md). `flashcl tune --path nv_wgmma` searches the
 * tunables below. */
#ifndef FLASHCL_NV_WGMMA_TILES_H
#define FLASHCL_NV_WGMMA_TILES_H

#include "paths/tunable.h"
#include "problem/variant_ids.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What `flashcl tune --path nv_wgmma` searches: the table's fields below,
 * under the same names. Legality (nv_wgmma_legal, the kernel's #error
 * rules and the local memory): 2 .. 8 ring slots of K/V tiles within the
 * local memory beside their mbarriers (and Q at D = 256). */
static const tunable nv_wgmma_tunables[] = {
    {"ring", {3, 4, 5, 6, 8}, 5},
    {"block_n", {64, 128}, 2},
    /* consumer warpgroups, beside the producer one */
    {"warpgroups", {2, 3}, 2},
};

/* One schedule: the table's fields (below), or a tuned or forced set of
 * the tunables above (same names). The kernel's only schedule: a producer
 * warpgroup fills a ring of `ring` slots, setmaxnreg splits the registers
 * (FlashAttention-3's warp specialization). */
typedef struct nv_wgmma_cfg {
    int warpgroups, block_n, ring;
    /* the persistent grid (FLASHCL_NV_WGMMA_PERSIST; not a tunable yet) */
    int persist;
} nv_wgmma_cfg;

/* The widest head dim (D or D_v) 3 consumer warpgroups serve in the
 * 256-column tiles, whose Q lives in local memory: their 160 registers
 * hold O of 160 columns beside S and P; 176 spilled 44-92 bytes and 192
 * 60-100 (ptxas through scripts/wgmma_isa_check.sh, 2026-12-03). The
 * kernel's #error says the same. */
#define NV_WGMMA_QSMEM_3WG_DIMS 160
/* The kernel's #error rules and the device's limits for a set
 * (nv_wgmma_config.c); false with the reason in `why`. `dims` is the
 * widest real head dim (D or D_v): the tiles are nv_wgmma_tile_dim's
 * width of it (64, 128 and 256 stand for their whole width). */
bool nv_wgmma_legal(const nv_wgmma_cfg *c, int dims, uint64_t local_mem,
                    size_t max_work_group, char *why, size_t cap);
/* Local memory of its K/V tiles: ring slots, 3 overlapped, else 2; with
 * ws also two mbarriers per slot; at D = 256 also Q. */
uint64_t nv_wgmma_smem_bytes(const nv_wgmma_cfg *c, int head_dim);
/* Local memory of its Q tiles: at D = 256 Q lives there (64 rows x 512
 * bytes a consumer warpgroup), else in registers (0). */
uint64_t nv_wgmma_q_bytes(const nv_wgmma_cfg *c, int head_dim);
/* The width the tiles of a head dim are laid out for (the kernel's
 * FLASHCL_HEAD_DIM, the table entry's head_dim): 64, 128 or 256 columns;
 * the head dim itself (FLASHCL_NV_DQ) is zero-padded there. */
int nv_wgmma_tile_dim(int head_dim);
/* Threads of its work-group: 128 per consumer warpgroup and the
 * producer's. */
int nv_wgmma_threads(const nv_wgmma_cfg *c);
/* The register cap the set runs under (FLASHCL_NV_WGMMA_MAXNREG): one
 * work-group per SM, the 64 K registers shared by its threads, which
 * setmaxnreg then moves between the warpgroups. */
int nv_wgmma_regs(const nv_wgmma_cfg *c);
/* Ring slots of its tiles (block_n keys and their two mbarriers)
 * that fit local_mem beside Q (D = 256); not capped at the kernel's 8. */
uint64_t nv_wgmma_ring_fit(const nv_wgmma_cfg *c, int head_dim,
                           uint64_t local_mem);
/* Bias or mask (read from global memory a pair of keys at a time in the
 * consumers' score pass): 128-key tiles made ptxas spill the consumers
 * (D = 128: 516 bytes with a bf16 bias, D = 64: 624 with bias and mask;
 * none with 64-key tiles, scripts/wgmma_isa_check.sh, 2026-12-02), so
 * a ring's 128-key tiles become 64-key ones, as many slots as fit
 * local_mem (at most 8); 3 consumer warpgroups become 2, whose
 * registers hold the next tile's bias and mask (the kernel's WG_XPF).
 * Legal in, legal out. */
void nv_wgmma_narrow_for_extras(nv_wgmma_cfg *c, int head_dim,
                                uint64_t local_mem);

typedef struct nv_wgmma_tile {
    int head_dim; /* 64, 128 or 256: the tiles' width */
    /* the entry serves head dims (the larger of D and D_v) up to this one
     * in that width; 0: all of them. The first entry that matches wins,
     * so one for the padded dims stands before its width's own. */
    int dims_up_to;
    int causal;   /* -1: either */
    int warpgroups;
    int block_n; /* keys per K/V tile: 64, or 128 where the tiles fit */
    int ring;    /* FLASHCL_NV_WGMMA_RING: K/V tile slots */
    unsigned local_mem; /* bytes the tiles may use (0: the device's); above
                         * 48 KiB through the PTX patch (docs/nvidia-path.md) */
    const char *reason;
    /* the entry serves only calls with all of these variants (bits of
     * variant_id); 0: every call */
    unsigned with_variants;
    /* a causal call takes the entry only from this many query rows (0:
     * any): below, its larger blocks split the triangle more unevenly */
    int causal_min_rows;
    /* the entry serves only bands bounded on both sides of at most this
     * many keys besides the diagonal (left + right); 0: every call */
    int band_up_to;
    /* The persistent grid (nv_wgmma.c, plan_persist) for a call of this
     * entry: bands bounded on both sides of at most persist_band keys
     * besides the diagonal, and causal calls without a left edge of at
     * most persist_causal_rows query rows (0: none). Short items then
     * overlap one's O store with the next one's first copies. */
    int persist_band, persist_causal_rows;
} nv_wgmma_tile;

static const nv_wgmma_tile nv_wgmma_tiles[] = {
    /* head_dim, dims_up_to, causal, warpgroups, block_n, ring,
     * local_mem, reason, with_variants, causal_min_rows,
     * band_up_to, persist_band, persist_causal_rows. Where an entry's
     * persistent grid was measured: its reason, else 512 keys as below
     * (nv_wgmma.c says where that was measured). */
    {128, 0, -1, 3, 64, 8, 229456, TILE_REASON("nv_wgmma.softcap-3wg"),
     1u << VARIANT_SOFTCAP, 1025, 0, 512, 0},
    {128, 80, -1, 3, 128, 5, 229456, TILE_REASON("nv_wgmma.d80-3wg"), 0, 1025,
     0, 512, 0},
    {128, 112, -1, 3, 64, 8, 229456, TILE_REASON("nv_wgmma.d112-3wg"), 0, 1025,
     0, 512, 0},
    {64, 0, -1, 3, 64, 8, 229456, TILE_REASON("nv_wgmma.d64-band512"), 0, 0,
     512, 512, 0},
    {64, 0, -1, 3, 128, 4, 131072, TILE_REASON("nv_wgmma.d64-3wg"), 0, 0, 0,
     512, 1024},
    {128, 0, -1, 2, 64, 8, 229456, TILE_REASON("nv_wgmma.d128-band128"), 0, 0,
     128, 512, 0},
    {128, 0, -1, 2, 128, 3, 131072, TILE_REASON("nv_wgmma.d128-2wg"), 0, 0, 0,
     1024, 1024},
    {256, NV_WGMMA_QSMEM_3WG_DIMS, -1, 3, 64, 4, 229456,
     TILE_REASON("nv_wgmma.d160-3wg"), 0, 1025, 0, 512, 0},
    {256, 0, -1, 2, 64, 5, 229456, TILE_REASON("nv_wgmma.d256-2wg"), 0, 0, 0,
     512, 0},
};

#endif /* FLASHCL_NV_WGMMA_TILES_H */
