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
    if (c->warpgroups < 1 || c->warpgroups > 3)
        return bad(why, cap, "warpgroups %d is not 1, 2 or 3", c->warpgroups);
    if (c->block_n != 32 && c->block_n != 64 && c->block_n != 128)
        return bad(why, cap, "block_n %d is not 32, 64 or 128", c->block_n);
    if (c->lag != 0 && c->lag != 1)
        return bad(why, cap, "lag %d is not 0 or 1", c->lag);
    if (c->sahead != 0 && c->sahead != 1)
        return bad(why, cap, "sahead %d is not 0 or 1", c->sahead);
    if (c->overlap != 0 && c->overlap != 1)
        return bad(why, cap, "overlap %d is not 0 or 1", c->overlap);
    if (c->maxnreg != 0 && (c->maxnreg < 24 || c->maxnreg > 255))
        return bad(why, cap, "maxnreg %d is not 0 or 24..255", c->maxnreg);
    if (c->ws < 0 || c->ws > 4)
        return bad(why, cap, "ws %d is not 0 .. 4", c->ws);
    if (c->persist != 0 && c->persist != 1)
        return bad(why, cap, "persist %d is not 0 or 1", c->persist);
    return true;
}

static bool legal_schedule(const nv_wgmma_cfg *c, char *why, size_t cap)
{
    if (c->ring != 0 && (c->ring < 2 + c->lag || c->ring > 8))
        return bad(why, cap, "ring %d is not 0 or 2 + lag .. 8 slots",
                   c->ring);
    if (c->ring && c->overlap)
        return bad(why, cap, "ring %d and the overlapped schedule are "
                   "exclusive", c->ring);
    /* the kernel ignores these without the ring: refused so that the
     * tuner does not time the same schedule under two names */
    if (c->lag && !c->ring)
        return bad(why, cap, "lag %d needs the ring", c->lag);
    if (c->sahead && (!c->ring || !c->lag))
        return bad(why, cap, "sahead %d needs the ring with lag 1",
                   c->sahead);
    /* the warp-specialized loop keeps its own order (its P V never stays
     * in flight), and has no S-ahead form yet */
    if (c->ws && (!c->ring || c->lag || c->sahead))
        return bad(why, cap, "ws %d needs the ring without lag or S ahead",
                   c->ws);
    if (c->ws >= 2 && c->warpgroups == 1)
        return bad(why, cap, "ws %d (register split, ping-pong, S ahead) "
                   "needs 2 or 3 consumer warpgroups", c->ws);
    if (c->ws >= 3 && c->warpgroups != 2)
        return bad(why, cap, "ws %d (ping-pong, S ahead) needs 2 consumer "
                   "warpgroups", c->ws);
    /* the kernel's work-group sizes: 3 warpgroups only as consumers */
    if (c->warpgroups == 3 && !c->ws)
        return bad(why, cap, "%d warpgroups need the warp-specialized "
                   "schedule (ws 1 or 2)", c->warpgroups);
    /* the persistent loop is written for the plain warp-specialized
     * consumers only */
    if (c->persist && (c->ws < 1 || c->ws > 2))
        return bad(why, cap, "the persistent grid needs ws 1 or 2, not %d",
                   c->ws);
    if (c->ws && c->maxnreg && c->maxnreg > 65536 / nv_wgmma_threads(c))
        return bad(why, cap, "maxnreg %d leaves no room for the ws "
                   "work-group in an SM's 64 K registers", c->maxnreg);
    return true;
}

uint64_t nv_wgmma_smem_bytes(const nv_wgmma_cfg *c, int head_dim)
{
    const int slots = c->ring ? c->ring : c->overlap ? 3 : 2;
    return (uint64_t)slots * (uint64_t)c->block_n * (uint64_t)head_dim * 2 +
           (c->ws ? 16u * (uint64_t)slots : 0) + nv_wgmma_q_bytes(c, head_dim);
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
    return 128 * (c->warpgroups + (c->ws ? 1 : 0));
}

int nv_wgmma_regs(const nv_wgmma_cfg *c)
{
    if (c->maxnreg || !c->ws)
        return c->maxnreg;
    /* setmaxnreg (ws 2) moves registers between warpgroups from what the
     * work-group got at launch, so the entry must get exactly this */
    return 65536 / nv_wgmma_threads(c) / 8 * 8;
}

bool nv_wgmma_legal(const nv_wgmma_cfg *c, int dims, uint64_t local_mem,
                    size_t max_work_group, char *why, size_t cap)
{
    if (!legal_values(c, why, cap) || !legal_schedule(c, why, cap))
        return false;
    const int head_dim = nv_wgmma_tile_dim(dims);
    /* the 256-column tiles: Q in local memory, which the kernel has
     * written for the warp-specialized schedule with 64-key tiles only */
    if (head_dim == 256 && (!c->ws || c->block_n != 64))
        return bad(why, cap, "D = 256 needs the warp-specialized schedule "
                   "(ws >= 1) with 64-key tiles, not block_n %d",
                   c->block_n);
    if (head_dim == 256 && c->warpgroups == 3 &&
        dims > NV_WGMMA_QSMEM_3WG_DIMS)
        return bad(why, cap, "head dims above 160 in the 256-column tiles "
                   "run 1 or 2 consumer warpgroups, not %d", c->warpgroups);
    if (max_work_group && (size_t)nv_wgmma_threads(c) > max_work_group)
        return bad(why, cap, "%d warpgroups exceed the work-group limit",
                   c->warpgroups + (c->ws ? 1 : 0));
    const uint64_t need = nv_wgmma_smem_bytes(c, head_dim);
    if (need > local_mem) {
        snprintf(why, cap, "K/V tiles of %d keys (%s%s) need %llu bytes of "
                 "local memory, the device has %llu", c->block_n,
                 c->ring ? "ring" : c->overlap ? "overlapped" : "K and V",
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
        (uint64_t)c->block_n * (uint64_t)head_dim * 2 + (c->ws ? 16u : 0u);
    const uint64_t q = nv_wgmma_q_bytes(c, head_dim);
    return local_mem > q ? (local_mem - q) / per_slot : 0;
}

void nv_wgmma_narrow_for_extras(nv_wgmma_cfg *c, int head_dim,
                                uint64_t local_mem)
{
    /* 3 consumer warpgroups (160 registers each) leave no room for the
     * kernel's fetch of the next tile's bias and mask (FLASHCL_NV_WGMMA_XPF);
     * without it, fp16 D = 64 with a bias ran at 61 TFLOP/s against 150 on
     * 2 warpgroups with it (bf16 N = 4096, h200-2026-12-03-v5.md) */
    if (c->warpgroups == 3)
        c->warpgroups = 2;
    if (c->block_n <= 64 || !c->ring)
        return;
    c->block_n = 64;
    const uint64_t fit = nv_wgmma_ring_fit(c, head_dim, local_mem);
    if (fit >= (uint64_t)(2 + c->lag)) /* else the ring stays as it was */
        c->ring = fit < 8 ? (int)fit : 8;
}

void nv_wgmma_defines(const nv_wgmma_cfg *c, char *buf, size_t cap)
{
    snprintf(buf, cap, " -DFLASHCL_NV_WGMMA_OVERLAP=%d "
             "-DFLASHCL_NV_WGMMA_RING=%d -DFLASHCL_NV_WGMMA_LAG=%d "
             "-DFLASHCL_NV_WGMMA_SAHEAD=%d -DFLASHCL_NV_WGMMA_MAXNREG=%d "
             "-DFLASHCL_NV_WGMMA_WS=%d -DFLASHCL_NV_WGMMA_PINGPONG=%d%s",
             c->overlap, c->ring, c->ring ? c->lag : 0,
             c->ring ? c->sahead || c->ws == 4 : 0, nv_wgmma_regs(c),
             c->ws < 2 ? c->ws : 2, c->ws >= 3,
             c->persist ? " -DFLASHCL_NV_WGMMA_PERSIST=1" : "");
}
