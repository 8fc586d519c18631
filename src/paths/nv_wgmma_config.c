/* The wgmma kernel's schedule rules on the host (nv_wgmma_tiles.h): pure,
 * no library state, so that test_wgmma_tunables compiles it into itself
 * and checks it against the kernel's own #error rules without a GPU. */
#include "paths/nv_wgmma_tiles.h"

#include <stdio.h>

static bool bad(char *why, size_t cap, const char *text, int value)
{
    snprintf(why, cap, text, value);
    return false;
}

static bool legal_values(const nv_wgmma_cfg *c, char *why, size_t cap)
{
    if (c->warpgroups != 2 && c->warpgroups != 3)
        return bad(why, cap, "warpgroups %d is not 2 or 3", c->warpgroups);
    if (c->block_n != 64 && c->block_n != 128)
        return bad(why, cap, "block_n %d is not 64 or 128", c->block_n);
    if (c->ring < 2 || c->ring > 8)
        return bad(why, cap, "ring %d is not 2 .. 8 slots", c->ring);
    if (c->persist != 0 && c->persist != 1)
        return bad(why, cap, "persist %d is not 0 or 1", c->persist);
    return true;
}

uint64_t nv_wgmma_smem_bytes(const nv_wgmma_cfg *c, int head_dim)
{
    return (uint64_t)c->ring * ((uint64_t)c->block_n * (uint64_t)head_dim * 2 +
                                16u) +
           nv_wgmma_q_bytes(c, head_dim);
}

uint64_t nv_wgmma_q_bytes(const nv_wgmma_cfg *c, int head_dim)
{
    return head_dim == 256 ? (uint64_t)c->warpgroups * 64u * (uint64_t)head_dim * 2u
                           : 0;
}

int nv_wgmma_tile_dim(int head_dim)
{
    return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256;
}

int nv_wgmma_threads(const nv_wgmma_cfg *c)
{
    return 128 * (c->warpgroups + 1);
}

int nv_wgmma_regs(const nv_wgmma_cfg *c)
{
    /* setmaxnreg moves registers between warpgroups from what the
     * work-group got at launch, so the entry must get exactly this */
    return 65536 / nv_wgmma_threads(c) / 8 * 8;
}

bool nv_wgmma_legal(const nv_wgmma_cfg *c, int dims, uint64_t local_mem,
                    size_t max_work_group, char *why, size_t cap)
{
    if (!legal_values(c, why, cap))
        return false;
    const int head_dim = nv_wgmma_tile_dim(dims);
    /* the 256-column tiles: Q in local memory, which the kernel has
     * written for 64-key tiles only */
    if (head_dim == 256 && c->block_n != 64)
        return bad(why, cap, "D = 256 needs 64-key tiles, not block_n %d",
                   c->block_n);
    if (head_dim == 256 && c->warpgroups == 3 &&
        dims > NV_WGMMA_QSMEM_3WG_DIMS)
        return bad(why, cap, "head dims above 160 in the 256-column tiles "
                   "run 2 consumer warpgroups, not %d", c->warpgroups);
    if (max_work_group && (size_t)nv_wgmma_threads(c) > max_work_group)
        return bad(why, cap, "%d warpgroups exceed the work-group limit",
                   c->warpgroups + 1);
    const uint64_t need = nv_wgmma_smem_bytes(c, head_dim);
    if (need > local_mem) {
        snprintf(why, cap, "K/V tiles of %d keys (ring%s) need %llu bytes of "
                 "local memory, the device has %llu", c->block_n,
                 nv_wgmma_q_bytes(c, head_dim) ? ", Q" : "",
                 (unsigned long long)need, (unsigned long long)local_mem);
        return false;
    }
    return true;
}

uint64_t nv_wgmma_ring_fit(const nv_wgmma_cfg *c, int head_dim,
                           uint64_t local_mem)
{
    const uint64_t per_slot =
        (uint64_t)c->block_n * (uint64_t)head_dim * 2 + 16u;
    const uint64_t q = nv_wgmma_q_bytes(c, head_dim);
    return local_mem > q ? (local_mem - q) / per_slot : 0;
}

void nv_wgmma_narrow_for_extras(nv_wgmma_cfg *c, int head_dim,
                                uint64_t local_mem)
{
    /* 3 consumer warpgroups (160 registers each) leave no room for the
     * kernel's fetch of the next tile's bias and mask (WG_XPF);
     * without it, fp16 D = 64 with a bias ran at 61 TFLOP/s against 150 on
     * 2 warpgroups with it (bf16 N = 4096, h200-2026-12-03-v5.md) */
    if (c->warpgroups == 3)
        c->warpgroups = 2;
    if (c->block_n <= 64)
        return;
    c->block_n = 64;
    const uint64_t fit = nv_wgmma_ring_fit(c, head_dim, local_mem);
    if (fit >= 2) /* else the ring stays as it was */
        c->ring = fit < 8 ? (int)fit : 8;
}
