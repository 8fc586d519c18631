/* Split-KV ("flash-decoding") and the inference features: the service of
 * split_kv.h (cl/inference/flash_split.cl's append, attention and merge
 * kernels, and the context-owned scratch the merge reads), and the
 * split_kv path that runs it on its own.
 *
 * The path runs a problem with KV-cache or varlen fields (only these
 * kernels read them), or one whose (sequence, KV head, query tile)
 * work-groups are too few for the device and whose key range is long
 * enough to cut (split_kv_splits). The portable path plans through the
 * service as its fallback (FLASHCL_PATH naming another path). */
#include "core/dev_env.h"
#include "core/scratch.h"
#include "paths/nv_common.h"
#include "paths/split_kv.h"
#include "paths/split_kv_tiles.h"
#include "paths/switches.h"
#include "paths/tuning.h"
#include "paths/varlen.h"
#include "inference/flash_split_switches.clh"
#include "inference/split_args.clh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tiles and split count ------------------------------------------- */

static bool rows_aligned_for_mma(const problem *p);

/* Whether the tensor-core kernel (split_mma.clh) serves the problem:
 * NVIDIA with mma.sync bf16 (sm_80+), or its emulation, 16-bit storage
 * (quantized K/V decoded into it), rows it can read in whole chunks, head
 * dims multiples of 32 up to 128. */
static bool mma_fits(const device_caps *caps, const problem *p)
{
    return ((caps->klass == DEVICE_CLASS_GPU_NVIDIA &&
             caps->nv_cc_major >= 8) ||
            nv_emulated(caps)) &&
           (p->dtype == FLASHCL_DTYPE_FP16 || p->dtype == FLASHCL_DTYPE_BF16) &&
           p->head_dim % 32 == 0 && p->head_dim_v % 32 == 0 &&
           p->head_dim <= 128 && p->head_dim_v <= 128 &&
           rows_aligned_for_mma(p);
}

/* The tensor-core kernel's entry: the many-work-group one when the
 * unsplit grid (sequences x KV heads x query tiles of at most 16 packed
 * rows) fills every compute unit with that entry's work-groups. */
static const split_tile *mma_entry(const device_caps *caps,
                                   const problem *p)
{
    const split_tile *many = &split_tiles[SPLIT_KV_MANY_ENTRY];
    const int64_t rows = p->seqlen_q * problem_group_size(p);
    const uint64_t work = (uint64_t)p->batch * (uint64_t)p->heads_kv *
                          (uint64_t)((rows + 15) / 16);
    const uint64_t cus = caps->compute_units ? caps->compute_units : 1;
    return work >= cus * (uint64_t)many->groups_per_cu
               ? many
               : &split_tiles[SPLIT_KV_MMA_ENTRY];
}

/* FLASHCL_SPLIT_KERNEL=row|wide|lanes|mma picks the kernel whatever the
 * device (tests run the GPU kernels on CPUs; GPU runs compare them; mma
 * only where it fits, else lanes). Otherwise: CPUs the row kernel, NVIDIA
 * the tensor-core kernel where it fits and else the lane-group one (it
 * sums over a lane group with warp shuffles), other GPUs the wide one. */
static const split_tile *lookup(const device_caps *caps, const problem *p)
{
    const char *forced = dev_getenv("FLASHCL_SPLIT_KERNEL");
    /* cl/common/kv_load.clh serves every kernel: a quantized call takes
     * the kernel a 16-bit one would. */
    if (forced && strcmp(forced, "row") == 0)
        return &split_tiles[0];
    if (forced && strcmp(forced, "wide") == 0)
        return &split_tiles[1];
    if (forced && strcmp(forced, "lanes") == 0)
        return &split_tiles[2];
    if (forced && strcmp(forced, "mma") == 0)
        return mma_fits(caps, p) ? mma_entry(caps, p) : &split_tiles[2];
    if (caps->klass == DEVICE_CLASS_CPU)
        return &split_tiles[0];
    if (caps->klass != DEVICE_CLASS_GPU_NVIDIA)
        return &split_tiles[1];
    return mma_fits(caps, p) ? mma_entry(caps, p) : &split_tiles[2];
}

static int pow2_at_least(int64_t n, int lo, int hi)
{
    int v = lo;
    while (v < hi && v < n)
        v *= 2;
    return v;
}

static size_t real_bytes(flashcl_dtype dtype)
{
    return dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
}

static size_t storage_bytes(flashcl_dtype dtype)
{
    return dtype == FLASHCL_DTYPE_FP16 || dtype == FLASHCL_DTYPE_BF16
               ? 2
               : real_bytes(dtype);
}

static size_t local_bytes(bool wide, int stages, int bm, int bn, int d,
                          int dv, const problem *p)
{
    const flashcl_dtype dtype = p->dtype;
    const size_t real = real_bytes(dtype);
    if (!wide)
        return ((size_t)bm * (size_t)d + (size_t)bn * (size_t)(d + dv)) *
               real;
    /* split_wide.clh: K (rows padded by 4) and V in storage type (fp32
     * once decoded, when quantized), Q and the scores in real_t, per-row
     * and per-key scalars, and the key groups' reduction when it does not
     * fit in the K tile. */
    const size_t k_tile = (size_t)stages * (size_t)bn * (size_t)(d + 4) *
                          (p->quant.k.type ? 4 : storage_bytes(dtype));
    const size_t reduce = (size_t)bm * (size_t)dv * real;
    return k_tile +
           (size_t)stages * (size_t)bn * (size_t)dv *
               (p->quant.v.type ? 4 : storage_bytes(dtype)) +
           (size_t)bm * (size_t)(d + bn + 4 + 3) * real +
           (size_t)stages * (size_t)bn * 4 + (size_t)bm * 64 +
           (reduce > k_tile ? reduce : 0);
}

/* Whether every K and V row starts on a 4-element boundary with the dims
 * contiguous, so the wide kernel copies them in 4-element chunks (the
 * buffers themselves are aligned far beyond that by OpenCL). */
static bool rows_in_chunks(const problem *p)
{
    const tensor_view *views[2] = {&p->k, &p->v};
    const int64_t dims[2] = {p->head_dim, p->head_dim_v};
    for (int t = 0; t < 2; ++t) {
        const tensor_view *v = views[t];
        if (v->stride[3] != 1 || dims[t] % 4 != 0 || v->base % 4 != 0)
            return false;
        for (int a = 0; a < 3; ++a)
            if (v->stride[a] % 4 != 0)
                return false;
    }
    return true;
}

/* FLASHCL_SPLIT_CP_ASYNC=0: the plain loads on NVIDIA too (to compare). */
static bool cp_async_refused(void)
{
    const char *env = dev_getenv("FLASHCL_SPLIT_CP_ASYNC");
    return env && strcmp(env, "0") == 0;
}

/* The wide kernel's cp.async variant: NVIDIA compute capability >= 8.0
 * (where cp.async exists), rows it copies in whole chunks (`vload`), and
 * 16- or 8-byte chunks (not fp64). */
static bool wide_cp_async(const device_caps *caps, const problem *p,
                          bool vload)
{
    return caps->klass == DEVICE_CLASS_GPU_NVIDIA && caps->nv_cc_major >= 8 &&
           p->dtype != FLASHCL_DTYPE_FP64 && vload && !cp_async_refused() &&
           !p->quant.any; /* raw bytes: a quantized tile is decoded */
}

static int64_t round_up(int64_t n, int64_t to)
{
    return (n + to - 1) / to * to;
}

static bool pow2(int v)
{
    return v > 0 && (v & (v - 1)) == 0;
}

typedef struct split_shape {
    split_tile tile; /* the table's entry, with FLASHCL_SPLIT_TILE applied */
    bool vload;    /* wide kernel: rows copied in 4-element chunks; lane
                      kernel: rows 16-byte aligned */
    bool cp_async; /* wide kernel on NVIDIA: cp.async, two tiles in flight */
    bool shfl;     /* lane kernel on NVIDIA: warp shuffles */
    int lanes;     /* lane kernel: items per key (0: another kernel) */
    int mma_warps; /* tensor-core kernel: warps (0: another kernel) */
    int mma_stages; /* ... and its cp.async steps in local memory */
    int unroll;    /* lane kernel: keys per lane group and step */
    int wg_size;
    int block_m, block_n, d, dv, vec;
    int64_t m_blocks; /* query tiles per (sequence, KV head) */
} split_shape;

/* Whether every K and V row starts 16-byte aligned with the dims
 * contiguous: the lane kernel's slices are then one to a few vector loads
 * (a slice is a 16-byte multiple, or a divisor of 16, of a row's start). */
static bool rows_aligned16(const problem *p)
{
    const size_t elem = storage_bytes(p->dtype);
    return view_rows_aligned(&p->k, elem, 16) &&
           view_rows_aligned(&p->v, elem, 16);
}

/* A lane of the tensor-core kernel reads its part of a row in chunks of 8
 * elements: 16 bytes in the dtype, 8 quantized to 8 bits, 4 in int4
 * (a quantized K or V view counts bytes). */
static bool side_aligned_for_mma(const problem *p, const tensor_view *view,
                                 int type)
{
    return type ? view_rows_aligned(view, 1, type == FLASHCL_KV_INT4 ? 4 : 8)
                : view_rows_aligned(view, storage_bytes(p->dtype), 16);
}

static bool rows_aligned_for_mma(const problem *p)
{
    return side_aligned_for_mma(p, &p->k, p->quant.k.type) &&
           side_aligned_for_mma(p, &p->v, p->quant.v.type);
}

/* Local memory of split_lanes.clh: the groups' merge (max, sum, output
 * slices), the exchange that stands in for shuffles, the rows' extras. */
static size_t lanes_local_bytes(const split_shape *s, flashcl_dtype dtype)
{
    const size_t real = real_bytes(dtype);
    const size_t groups = (size_t)(s->wg_size / s->lanes);
    return groups * (size_t)s->block_m * ((size_t)s->dv + 2) * real +
           (s->shfl ? 0
                    : (size_t)s->unroll * (size_t)s->block_m *
                          (size_t)s->wg_size * real) +
           (size_t)s->block_m * 64;
}

/* The lane kernel's shape: a 16-byte slice of the longer row per item
 * (lanes a power of two up to 32), then more lanes while the rows' Q
 * slices and outputs would take more than LANES_REGISTER_FLOATS registers
 * per item; head dims padded to the lanes; `unroll` raised until a step is
 * a multiple of 16 keys (the kernel's rule). */
#define LANES_REGISTER_FLOATS 64
static split_shape lanes_shape(const split_tile *tile, const device_caps *caps,
                               const problem *p)
{
    split_shape s;
    memset(&s, 0, sizeof s);
    const int64_t group = problem_group_size(p);
    const int64_t widest = problem_widest_head_dim(p);
    s.tile = *tile;
    s.wg_size = tile->wg_size;
    s.unroll = tile->unroll;
    s.block_m = pow2_at_least(p->seqlen_q * group, tile->min_rows,
                              tile->max_rows);
    /* a quantized slice is held as fp32, decoded (split_lanes_loads.clh) */
    const int64_t held = p->quant.any ? 4 : (int64_t)storage_bytes(p->dtype);
    s.lanes = 1;
    while (s.lanes < 32 && s.lanes * 16 < widest * held)
        s.lanes *= 2;
    while (s.lanes < 32 &&
           (int64_t)s.block_m *
                   ((p->head_dim + s.lanes - 1) / s.lanes +
                    (p->head_dim_v + s.lanes - 1) / s.lanes) >
               LANES_REGISTER_FLOATS)
        s.lanes *= 2;
    if (s.wg_size < s.lanes)
        s.wg_size = s.lanes;
    /* 16-bit slices are whole 32-bit words (split_lanes.clh) */
    int64_t unit = s.lanes * (storage_bytes(p->dtype) == 2 ? 2 : 1);
    if (p->quant.any && unit < 4) /* kv_quad reads quads of columns */
        unit = 4;
    s.d = (int)round_up(p->head_dim, unit);
    s.dv = (int)round_up(p->head_dim_v, unit);
    while ((s.wg_size / s.lanes * s.unroll) % 16 != 0 && s.unroll < 8)
        s.unroll *= 2;
    while ((s.wg_size / s.lanes * s.unroll) % 16 != 0)
        s.wg_size *= 2;
    s.block_n = s.wg_size / s.lanes * s.unroll;
    s.vec = 4;
    s.shfl = caps->klass == DEVICE_CLASS_GPU_NVIDIA && s.wg_size % 32 == 0;
    s.vload = rows_aligned16(p);
    const size_t limit = plan_local_mem(caps);
    while (lanes_local_bytes(&s, p->dtype) > limit && s.block_m > 1)
        s.block_m /= 2;
    s.m_blocks = (p->seqlen_q * group + s.block_m - 1) / s.block_m;
    return s;
}

/* Local memory of split_mma.clh: the merge (max, sum, outputs) and the
 * cp.async ring share one array; the rows' extras besides. */
static size_t mma_local_bytes(int warps, int stages, int bm, int d, int dv)
{
    const size_t merge = (size_t)warps * (size_t)bm * (size_t)(dv + 2) * 4;
    const size_t ring = (size_t)warps * (size_t)stages * 32 * (size_t)(d + dv);
    /* + the rows' score state, and the fused merge's flag */
    return (merge > ring ? merge : ring) + (size_t)bm * 64 + 16;
}

/* The tensor-core kernel's shape: 16 keys per warp and step, the packed
 * rows of a tile on one m16 (at most 16), the head dims as they are
 * (mma_fits checked them); fewer ring stages, then fewer warps, until the
 * local memory fits. */
static split_shape mma_shape(const split_tile *tile, const device_caps *caps,
                             const problem *p)
{
    split_shape s;
    memset(&s, 0, sizeof s);
    const int64_t group = problem_group_size(p);
    s.tile = *tile;
    s.mma_warps = tile->wg_size / 32; /* wg is the tunable */
    s.wg_size = 32 * s.mma_warps;
    s.block_m = pow2_at_least(p->seqlen_q * group, tile->min_rows,
                              tile->max_rows > 16 ? 16 : tile->max_rows);
    /* the ring copies raw chunks: a quantized part is decoded as it loads */
    s.mma_stages = p->quant.any ? 0 : tile->mma_stages;
    s.d = (int)p->head_dim;
    s.dv = (int)p->head_dim_v;
    const size_t limit = plan_local_mem(caps);
    while (mma_local_bytes(s.mma_warps, s.mma_stages, s.block_m, s.d, s.dv) >
               limit &&
           (s.mma_stages > 0 || s.mma_warps > 1)) {
        if (s.mma_stages > 0)
            --s.mma_stages;
        else
            s.mma_warps /= 2;
    }
    s.wg_size = 32 * s.mma_warps;
    s.block_n = 16 * s.mma_warps;
    s.vec = 4;
    s.vload = true;
    s.m_blocks = (p->seqlen_q * group + s.block_m - 1) / s.block_m;
    return s;
}

static split_shape shape_for(const split_tile *tile, const device_caps *caps,
                             const problem *p)
{
    if (tile->mma_warps)
        return mma_shape(tile, caps, p);
    if (tile->lanes)
        return lanes_shape(tile, caps, p);
    split_shape s;
    memset(&s, 0, sizeof s);
    const int64_t group = problem_group_size(p);
    s.tile = *tile;
    s.wg_size = tile->wg_size;
    s.d = s.tile.wide ? (int)round_up(p->head_dim, 4)
                      : portable_padded_head_dim(p->head_dim);
    s.dv = s.tile.wide ? (int)round_up(p->head_dim_v, 4)
                       : portable_padded_head_dim(p->head_dim_v);
    s.vec = s.tile.wide ? 4 : portable_vector_width(caps);
    s.block_m = pow2_at_least(p->seqlen_q * group, tile->min_rows,
                              tile->max_rows);
    s.block_n = tile->block_n;
    /* A row-kernel tile never crosses a page (pages are multiples of 16
     * rows); the wide kernel maps each key through the table. */
    if (p->infer.kv == KV_PAGED && !s.tile.wide)
        while (p->infer.page_size % s.block_n != 0)
            s.block_n /= 2;
    const size_t limit = plan_local_mem(caps);
    s.vload = s.tile.wide && rows_in_chunks(p);
    s.cp_async = wide_cp_async(caps, p, s.vload);
    while (local_bytes(s.tile.wide, s.cp_async ? 2 : 1, s.block_m,
                       s.block_n, s.d, s.dv, p) > limit &&
           (s.block_n > 16 || s.block_m > 4)) {
        if (s.block_n > 16)
            s.block_n /= 2;
        else
            s.block_m /= 2;
    }
    if (s.vec > s.block_n)
        s.vec = s.block_n;
    if (!s.tile.wide && caps->max_work_group &&
        (size_t)s.block_m > caps->max_work_group)
        s.block_m = (int)caps->max_work_group;
    /* The wide kernel needs an item per key and per 4 columns of V. */
    while (s.tile.wide && (s.wg_size < s.block_n || s.wg_size < s.dv / 4))
        s.wg_size *= 2;
    s.m_blocks = (p->seqlen_q * group + s.block_m - 1) / s.block_m;
    return s;
}

/* FLASHCL_SPLIT_TILE=wg,block_n,groups_per_cu[,max_rows] replaces the
 * wide kernel's entry, for sweeps on a GPU; a malformed or illegal value
 * (not powers of two, block_n above wg) leaves the entry as it is. */
/* The swept entry of the three knobs below: *out is `entry` with a
 * work-group size, groups per compute unit and rows per group forced
 * (`measured` says so); false, *out untouched, when groups is outside
 * 1..64 or rows is not a power of two up to max_rows. */
static bool forced_shape(const split_tile *entry, int wg, int groups,
                         int rows, int max_rows, const char *measured,
                         split_tile *out)
{
    if (groups < 1 || groups > 64 || !pow2(rows) || rows > max_rows)
        return false;
    *out = *entry;
    out->wg_size = wg;
    out->groups_per_cu = groups;
    out->max_rows = rows;
    out->measured = measured;
    return true;
}

static split_tile forced_wide_tile(const split_tile *entry)
{
    split_tile tile;
    const char *env = dev_getenv("FLASHCL_SPLIT_TILE");
    int wg = 0, bn = 0, groups = 0, rows = entry->max_rows;
    if (!env || sscanf(env, "%d,%d,%d,%d", &wg, &bn, &groups, &rows) < 3 ||
        !pow2(wg) || bn < 16 || !pow2(bn) || bn > wg || wg > 1024 ||
        !forced_shape(entry, wg, groups, rows, 32,
                      "FLASHCL_SPLIT_TILE (forced, not measured)", &tile))
        return *entry;
    tile.block_n = bn;
    return tile;
}

/* FLASHCL_SPLIT_LANES=wg,unroll,groups_per_cu[,max_rows[,prefetch]]
 * replaces the lane kernel's entry, for sweeps on a GPU; a malformed or
 * illegal value leaves the entry as it is. */
static split_tile forced_lanes_tile(const split_tile *entry)
{
    split_tile tile;
    const char *env = dev_getenv("FLASHCL_SPLIT_LANES");
    int wg = 0, unroll = 0, groups = 0, rows = entry->max_rows;
    int prefetch = entry->prefetch ? 1 : 0;
    if (!env ||
        sscanf(env, "%d,%d,%d,%d,%d", &wg, &unroll, &groups, &rows,
               &prefetch) < 3 ||
        wg < 32 || !pow2(wg) || wg > 1024 || unroll < 1 || unroll > 8 ||
        (prefetch != 0 && prefetch != 1) ||
        !forced_shape(entry, wg, groups, rows, 16,
                      "FLASHCL_SPLIT_LANES (forced, not measured)", &tile))
        return *entry;
    tile.prefetch = prefetch == 1;
    tile.unroll = unroll;
    return tile;
}

/* ---- tuned tiles ----------------------------------------------------- */

static const char *kernel_name(const split_tile *t)
{
    return t->mma_warps ? "tensor-core"
           : t->lanes   ? "lane-group"
           : t->wide    ? "wide"
                        : "row";
}

static bool kernel_uses(const split_tile *t, const char *name)
{
    if (!strcmp(name, "block_n"))
        return !t->lanes && !t->mma_warps;
    if (!strcmp(name, "wg"))
        return t->wide || t->lanes || t->mma_warps;
    if (!strcmp(name, "unroll") || !strcmp(name, "prefetch"))
        return t->lanes;
    return true; /* groups */
}

static int *tile_field(split_tile *t, const char *name)
{
    return !strcmp(name, "groups")    ? &t->groups_per_cu
           : !strcmp(name, "block_n") ? &t->block_n
           : !strcmp(name, "wg")      ? &t->wg_size
                                      : &t->unroll;
}

/* `params` on the kernel's entry into *out; false (why) when a tunable
 * the kernel does not use moves, or a value is illegal for it. */
static bool params_tile(const split_tile *entry, const tile_params *params,
                        split_tile *out, char *why, size_t cap)
{
    *out = *entry;
    const size_t n = sizeof split_kv_tunables / sizeof split_kv_tunables[0];
    for (size_t i = 0; i < n; ++i) {
        const char *name = split_kv_tunables[i].name;
        const bool prefetch = !strcmp(name, "prefetch");
        const int table = prefetch ? (entry->prefetch ? 1 : 0)
                                   : *tile_field(out, name);
        const int v = tile_params_get(params, name, table);
        if (v != table && !kernel_uses(entry, name)) {
            snprintf(why, cap, "%s %d: not used by the %s kernel (its "
                     "entry's value is %d)", name, v, kernel_name(entry),
                     table);
            return false;
        }
        if (prefetch && v != 0 && v != 1) {
            snprintf(why, cap, "prefetch %d is not 0 or 1", v);
            return false;
        }
        if (prefetch)
            out->prefetch = v == 1;
        else
            *tile_field(out, name) = v;
    }
    if (out->groups_per_cu < 1 || out->groups_per_cu > 64)
        snprintf(why, cap, "groups %d is not 1..64", out->groups_per_cu);
    else if (out->mma_warps && (out->wg_size % 32 != 0 ||
                                out->wg_size > 256 || out->wg_size < 32))
        snprintf(why, cap, "wg %d: the tensor-core kernel runs 1..8 whole "
                 "warps", out->wg_size);
    else if (!out->lanes && !out->mma_warps && out->block_n < 16)
        snprintf(why, cap, "block_n %d: the %s kernel needs 16 keys or more "
                 "a tile", out->block_n, kernel_name(out));
    else if ((out->wide || out->lanes) && out->wg_size < 32)
        snprintf(why, cap, "wg %d: the %s kernel needs 32 items or more",
                 out->wg_size, kernel_name(out));
    else if (out->wide && out->block_n > out->wg_size)
        snprintf(why, cap, "block_n %d is above wg %d (the wide kernel has "
                 "an item per key)", out->block_n, out->wg_size);
    else if (out->lanes && (out->unroll < 1 || out->unroll > 8))
        snprintf(why, cap, "unroll %d is not 1..8", out->unroll);
    else
        return true;
    return false;
}

static bool given(const tile_params *params, const char *name)
{
    return tile_params_get(params, name, -1) != -1;
}

/* Whether the plan keeps the set's values on this device and problem (it
 * adapts the table's tiles; a set is legal only as given). */
static bool shape_keeps(const split_tile *tile, const tile_params *params,
                        const split_shape *s, const device_caps *caps,
                        char *why, size_t cap)
{
    const bool wg =
        (tile->wide || tile->lanes || tile->mma_warps) && given(params, "wg");
    if (wg && caps->max_work_group &&
        (size_t)tile->wg_size > caps->max_work_group)
        snprintf(why, cap, "wg %d is above the device's work-group limit %zu",
                 tile->wg_size, caps->max_work_group);
    else if (wg && s->wg_size != tile->wg_size)
        snprintf(why, cap, "wg %d is raised to %d here (the head dims or "
                 "the key step need it)", tile->wg_size, s->wg_size);
    else if (!tile->lanes && given(params, "block_n") &&
             s->block_n != tile->block_n)
        snprintf(why, cap, "block_n %d is cut to %d here (local memory or "
                 "page size)", tile->block_n, s->block_n);
    else if (tile->lanes && given(params, "unroll") &&
             s->unroll != tile->unroll)
        snprintf(why, cap, "unroll %d is raised to %d here (a step must be "
                 "a multiple of 16 keys)", tile->unroll, s->unroll);
    else
        return true;
    return false;
}

/* The tuning database's (or the tuner's forced) tiles for the kernel's
 * entry, when legal here; true when applied. `origin` NULL: asked for
 * the split count only (can_run), which notes nothing. */
static bool tuned_tile(const device_caps *caps, const problem *p,
                       const split_tile *entry, const char *forced,
                       split_tile *out, char *origin, size_t origin_cap)
{
    const int d = shape_for(entry, caps, p).d;
    tuning_choice c;
    int next = 0;
    for (;;) {
        if (!tuning_choose(caps, &split_kv_path, p, d, forced, &next, &c))
            return false;
        char why[160];
        split_tile tile;
        if (params_tile(entry, &c.params, &tile, why, sizeof why)) {
            const split_shape s = shape_for(&tile, caps, p);
            if (shape_keeps(&tile, &c.params, &s, caps, why, sizeof why)) {
                *out = tile;
                break;
            }
        }
        if (origin)
            tuning_refused(&c, "split_kv", why);
    }
    out->measured = c.forced ? "forced candidate (not measured)"
                             : "tiles of the tuning database entry";
    if (origin)
        snprintf(origin, origin_cap, "%s", c.origin);
    return true;
}

/* The tiles of the kernel at hand: its entry, the tuned set over it, and
 * FLASHCL_SPLIT_TILE / FLASHCL_SPLIT_LANES over both (the sweeps' knobs
 * win). `tuning` (may be NULL) gets the tuned set's origin, "" for none. */
/* FLASHCL_SPLIT_MMA=warps,groups_per_cu[,max_rows[,stages]] replaces the
 * tensor-core kernel's entry, for sweeps on a GPU; a malformed or illegal
 * value leaves the entry as it is. */
static split_tile forced_mma_tile(const split_tile *entry)
{
    split_tile tile;
    const char *env = dev_getenv("FLASHCL_SPLIT_MMA");
    int warps = 0, groups = 0, rows = entry->max_rows;
    int stages = entry->mma_stages;
    if (!env ||
        sscanf(env, "%d,%d,%d,%d", &warps, &groups, &rows, &stages) < 2 ||
        warps < 1 || warps > 8 || stages < 0 || stages > 3 ||
        !forced_shape(entry, 32 * warps, groups, rows, 16,
                      "FLASHCL_SPLIT_MMA (forced, not measured)", &tile))
        return *entry;
    tile.mma_stages = stages;
    tile.mma_warps = warps;
    return tile;
}

static split_shape shape_of(const device_caps *caps, const problem *p,
                            const char *forced, char *tuning, size_t cap)
{
    const split_tile *entry = lookup(caps, p);
    split_tile tuned = *entry;
    char origin[320] = "";
    /* The tuning database's split_kv entries were measured on the lane
     * kernel: the tensor-core kernel keeps its own table until it has
     * entries of its own. */
    if ((entry->mma_warps && !forced) ||
        !tuned_tile(caps, p, entry, forced, &tuned, tuning ? origin : NULL,
                    sizeof origin))
        origin[0] = '\0';
    const split_tile tile = entry->mma_warps ? forced_mma_tile(&tuned)
                            : entry->wide    ? forced_wide_tile(&tuned)
                            : entry->lanes   ? forced_lanes_tile(&tuned)
                                             : tuned;
    split_shape s = shape_for(&tile, caps, p);
    if ((s.tile.wide || s.tile.lanes || s.mma_warps) && caps->max_work_group &&
        (size_t)s.wg_size > caps->max_work_group)
        s = shape_for(&split_tiles[0], caps, p); /* the row kernel */
    if (tile.measured != tuned.measured || s.tile.measured != tile.measured)
        origin[0] = '\0'; /* the knobs, or the row kernel, run */
    if (tuning)
        snprintf(tuning, cap, "%s", origin);
    return s;
}

static int auto_splits(const device_caps *caps, const problem *p,
                       const split_shape *s)
{
    const split_tile *tile = &s->tile;
    const uint64_t cus = caps->compute_units ? caps->compute_units : 1;
    const uint64_t target = cus * (uint64_t)tile->groups_per_cu;
    const uint64_t work = (uint64_t)p->batch * (uint64_t)p->heads_kv *
                          (uint64_t)s->m_blocks;
    if (work == 0 || work >= target ||
        (tile->max_auto_q_tiles && s->m_blocks > tile->max_auto_q_tiles))
        return 1;
    /* The lane kernel's entry counts the work-groups an SM holds at once:
     * whole waves, so the count rounds down (a part more than a wave
     * waits for a second one). */
    int64_t splits = tile->lanes || tile->mma_warps
                         ? (int64_t)(target / work)
                                 : (int64_t)((target + work - 1) / work);
    if (splits > p->seqlen_k / tile->min_keys_per_split)
        splits = p->seqlen_k / tile->min_keys_per_split;
    if (splits > FLASHCL_MAX_SPLITS)
        splits = FLASHCL_MAX_SPLITS;
    while (splits > 1 &&
           inference_scratch_bytes(p, (int)splits, s->dv) > p->infer.scratch_cap)
        --splits;
    return splits < 1 ? 1 : (int)splits;
}

int split_kv_splits(const device_caps *caps, const problem *p)
{
    if (variant_active(p, VARIANT_POSITIONS))
        return 1; /* its kernels align each sequence themselves */
    if (p->infer.num_splits > 0)
        return p->infer.num_splits;
    const split_shape s = shape_of(caps, p, NULL, NULL, 0);
    return auto_splits(caps, p, &s);
}

/* Measured on the H200 (2026-12-01, bf16 D = 128, B = 32 MHA, Nq = 1,
 * bench/results/h200-2026-12-01-decode.md): 4048-4069 GB/s unsplit on the
 * tensor-core split kernel against 3636-3645 on nv_mma, whose 128-row
 * tiles hold one real row. */
bool split_kv_tensor_decode(const device_caps *caps, const problem *p)
{
    const char *forced = dev_getenv("FLASHCL_SPLIT_KERNEL");
    return (!forced || strcmp(forced, "mma") == 0) && mma_fits(caps, p) &&
           !variant_active(p, VARIANT_POSITIONS) &&
           p->seqlen_q * problem_group_size(p) <= 16;
}

const char *split_kv_decode_reason(const device_caps *caps, const problem *p)
{
    /* Measured on the H200 (2026-12-01, bf16 D = 128, bench/results/
     * h200-2026-12-01-decode.md), on the mma.sync kernel: B = 1 / 8 with
     * 32 query heads (32 and 256 work-groups) ran 5.9x / 1.6x faster
     * split, B = 32 (1024 work-groups) 1.35x faster on the dense kernel;
     * and any decode of at most 16 packed rows per KV head the tensor-core
     * split kernel takes (split_kv_tensor_decode: B = 32 MHA
     * 1.12x faster there). The wgmma kernel's blocks of 128-192 rows leave
     * a decode as idle as mma.sync's, so the rule is the same for it. */
    const uint64_t cus = caps->compute_units ? caps->compute_units : 1;
    if ((uint64_t)p->batch * (uint64_t)p->heads_q < 4 * cus &&
        split_kv_splits(caps, p) > 1)
        return "decode with too few work-groups for the device: the "
               "split-KV kernels run it";
    if (split_kv_tensor_decode(caps, p))
        return "decode of at most 16 rows per KV head: the split-KV "
               "tensor-core kernel runs it";
    return NULL;
}

bool split_kv_wanted(const device_caps *caps, const problem *p)
{
    if (plan_varlen_prefill(caps, p))
        return false; /* the dense kernel runs it as the padded call */
    return p->infer.needs_split_kernel || split_kv_splits(caps, p) > 1 ||
           split_kv_tensor_decode(caps, p);
}

/* ---- plan ------------------------------------------------------------ */

/* How the tensor-core kernel reads K and V rows (FLASHCL_SPLIT_MMA_LOAD in
 * split_mma.clh): 16-byte chunks interleaved across a row's four lanes
 * (1), through the read-only path with 256-byte L2 fetches and no L1
 * allocation (2) when each work-group has at most 2048 keys. H200, bf16
 * D = 128 (2026-12-02, bench/results/h200-2026-12-02-decode.md, run 2), ms:
 *   keys per work-group      2 (streamed)  1 (plain)  0 (quarters, before)
 *   B = 1 GQA 4,  8k: 512      0.0238       0.0253      0.0261
 *   B = 1 GQA 4, 32k: 2048     0.0509       0.0530      0.0535
 *   B = 1 GQA 4, 128k: 8192    0.1510       0.1421      0.1431
 *   B = 8 GQA 4,  8k: 4096     0.0819       0.0809      0.0819
 *   B = 32 MHA,   4k: 4096     0.5317       0.4943      0.4966
 * Short parts gain from the streamed loads, long streams lose (why was not
 * found). FLASHCL_SPLIT_MMA_LOAD=0..3 forces a kind (3: as 2, the lines
 * evicted from the L2 first; measured as 2). */
static int mma_load_kind(const problem *p, int splits)
{
    const char *env = dev_getenv("FLASHCL_SPLIT_MMA_LOAD");
    if (env && env[0] >= '0' && env[0] <= '3' && !env[1])
        return env[0] - '0';
    const int64_t parts = splits > 1 ? splits : 1;
    return (p->seqlen_k + parts - 1) / parts <= 2048 ? 2 : 1;
}

/* Steps ahead the tensor-core kernel prefetches K and V into the L2
 * (FLASHCL_SPLIT_MMA_PREFETCH in split_mma.clh): the entry's, or
 * FLASHCL_SPLIT_MMA_PREFETCH=0..16 (sweeps); none with the cp.async ring,
 * which keeps steps in flight its own way. */
static int mma_prefetch(const split_shape *s)
{
    const char *env = dev_getenv("FLASHCL_SPLIT_MMA_PREFETCH");
    int steps = s->tile.mma_prefetch;
    if (env) {
        char *end;
        const long v = strtol(env, &end, 10);
        if (end != env && !*end && v >= 0 && v <= 16)
            steps = (int)v;
    }
    return s->mma_stages > 0 ? 0 : steps;
}

static bool is_fp8(int type)
{
    return type == FLASHCL_KV_FP8_E4M3 || type == FLASHCL_KV_FP8_E5M2;
}

static bool quant_has_fp8(const problem *p)
{
    return is_fp8(p->quant.k.type) || is_fp8(p->quant.v.type);
}

/* cvt from an fp8 pair to an f16 pair, and the tensor-core kernel's
 * emulation of it. ptxas takes it for sm_90 at PTX 7.8 (sm_89 needs PTX
 * 8.1, which the driver's PTX version decides: not assumed). */
static bool has_fp8_cvt(const device_caps *caps)
{
    if (caps->klass != DEVICE_CLASS_GPU_NVIDIA)
        return true; /* the emulation (the kernel runs there only so) */
    return caps->nv_cc_major >= 9;
}

typedef struct split_switches {
    FLASHCL_SPLIT_SWITCHES(SWITCH_FIELD)
} split_switches;

/* The kernels' switches of this plan; a switch the chosen kernel does not
 * read keeps its default. */
static split_switches plan_switches(const device_caps *caps,
                                    const problem *p, const split_shape *s,
                                    const kernel_plan *plan)
{
    const inference *in = &p->infer;
    const bool mma = s->mma_warps > 0;
    /* FLASHCL_SPLIT_MMA_HALVES=2: the tensor-core kernel keeps rows
     * g + 8 of its m16 tile even when they hold no packed row (the
     * registers it frees otherwise; comparisons). */
    const char *halves = dev_getenv("FLASHCL_SPLIT_MMA_HALVES");
    return (split_switches){
        PORTABLE_TILE_SWITCH_VALUES(p, plan),
        .SPLIT = plan->split.parts > 1,
        .Q_VARLEN = in->varlen_q ? 1 : 0,
        .KV_MODE = (int)in->kv,
        .BATCH_IDX = in->batch_idx ? 1 : 0,
        .APPEND = in->append ? 1 : 0,
        .COMPENSATED = !s->tile.wide && !s->tile.lanes && !mma &&
                       portable_compensated(caps, plan->head_dim_v_padded),
        .SPLIT_WIDE = s->tile.wide != 0,
        .SPLIT_LANES = s->lanes,
        .SPLIT_MMA = s->mma_warps,
        .SPLIT_UNROLL = s->lanes ? s->unroll : 1,
        .SPLIT_SHFL = s->shfl,
        .SPLIT_VLOAD = s->vload,
        .SPLIT_PREFETCH = s->lanes && s->tile.prefetch ? 1 : 0,
        .SPLIT_CP_ASYNC = s->cp_async,
        .SPLIT_MMA_STAGES = s->mma_stages,
        .SPLIT_MMA_PREFETCH = mma ? mma_prefetch(s) : 0,
        .SPLIT_MMA_HALVES =
            (mma && halves && !strcmp(halves, "2")) || plan->block_m > 8 ? 2
                                                                         : 1,
        .SPLIT_MMA_LOAD = mma ? mma_load_kind(p, plan->split.parts) : 1,
        .SPLIT_FUSED = plan->split.fused,
        .NV_EMULATE = mma && caps->klass != DEVICE_CLASS_GPU_NVIDIA,
        .NV_FP8_CVT = mma && quant_has_fp8(p) && has_fp8_cvt(caps),
        .K_QUANT = p->quant.k.type,
        .V_QUANT = p->quant.v.type};
}

static SWITCH_PATH_EMITTER(split_emit, split_switches, FLASHCL_SPLIT_SWITCHES);

/* Whether the tensor-core kernel merges its own partials (FLASHCL_SPLIT_
 * FUSED in split_store.clh) rather than the combine kernel after it: at
 * any split count, since its last work-group reads the parts 16 at a
 * time. H200, bf16 D = 128, GQA 4 (2026-12-02, bench/results/
 * h200-2026-12-02-decode.md): 2 splits (B = 8, 8k keys) 0.0819 ms fused
 * against 0.0860; 16 splits (B = 1) 0.0261-0.1434 ms against 0.0340-
 * 0.1510 over 8k-128k keys (when it read one part at a time, 16 splits
 * were 0.0625 against 0.0614). FLASHCL_SPLIT_FUSED=1 fuses any count, 0
 * none (comparisons, tests). */
static bool fused_merge(int splits)
{
    const char *env = dev_getenv("FLASHCL_SPLIT_FUSED");
    if (env && !strcmp(env, "0"))
        return false;
    return splits > 1;
}

void split_kv_plan(const device_caps *caps, const problem *p,
                   kernel_plan *plan, const char *forced)
{
    const split_shape s =
        shape_of(caps, p, forced, plan->tuning, sizeof plan->tuning);
    plan->split.service = true;
    plan->source = "flash_split.cl";
    plan->kernel_names[0] = "flashcl_split_fwd";
    plan->kernel_names[1] = "flashcl_split_combine";
    plan->kernel_names[2] = "flashcl_split_append";
    plan->kernel_names[3] = "flashcl_split_status";
    plan->kernel_count = 4;
    plan->head_dim_padded = s.d;
    plan->head_dim_v_padded = s.dv;
    plan->block_m = s.block_m;
    plan->wg_size =
        s.tile.wide || s.tile.lanes || s.mma_warps ? s.wg_size : s.block_m;
    plan->block_n = s.block_n;
    plan->vec = s.vec;
    plan->split.parts = p->infer.num_splits > 0 ? p->infer.num_splits
                                                : auto_splits(caps, p, &s);
    plan->split.scratch_bytes =
        inference_scratch_bytes(p, plan->split.parts, s.dv);
    plan->split.fused = s.mma_warps > 0 && fused_merge(plan->split.parts);
    plan->split.counters =
        plan->split.fused
            ? (size_t)s.m_blocks * (size_t)p->heads_kv * (size_t)p->batch
            : 0;
    snprintf(
        plan->reason, sizeof plan->reason,
        "%s; %d split%s (%s%s), %lld query head%s per work-group",
        s.tile.measured, plan->split.parts, plan->split.parts == 1 ? "" : "s",
        p->infer.num_splits > 0 ? "forced by num_splits"
                                : "from compute units and shape",
        plan->split.fused ? ", merged by the last work-group" : "",
        (long long)problem_group_size(p), p->heads_q == p->heads_kv ? "" : "s");
    const split_switches values = plan_switches(caps, p, &s, plan);
    plan_emit_options(plan, plan->options, sizeof plan->options, p, split_emit,
                      &values);
    plan->local[0] = (size_t)plan->wg_size;
    plan->local[1] = plan->local[2] = 1;
    plan->global[0] = (size_t)s.m_blocks * (size_t)plan->wg_size;
    plan->global[1] = (size_t)p->heads_kv * (size_t)plan->split.parts;
    plan->global[2] = (size_t)p->batch;
}

/* ---- scratch --------------------------------------------------------- */

/* The context's split-KV set (core/scratch.h): partial O, partial LSE,
 * split counts (zeroed). */
enum { SCRATCH_O, SCRATCH_LSE, SCRATCH_COUNTS };
#define SPLIT_WHAT "split-KV"

/* A new counts buffer starts at zero (the fused merge sets each count
 * back to zero after use). The fill becomes the buffers' last user, so
 * the call's kernels wait for it through `busy`. */
static flashcl_status zero_counts(flashcl_context *ctx,
                                  cl_command_queue queue, scratch_set *s)
{
    const cl_int zero = 0;
    cl_event filled = NULL;
    const cl_uint waits = s->busy ? 1 : 0;
    const cl_int err = clEnqueueFillBuffer(
        queue, s->buffer[SCRATCH_COUNTS], &zero, sizeof zero, 0,
        s->capacity[SCRATCH_COUNTS], waits, waits ? &s->busy : NULL, &filled);
    if (err != CL_SUCCESS) {
        /* not known to be zero: allocated (and zeroed) anew next time */
        clReleaseMemObject(s->buffer[SCRATCH_COUNTS]);
        s->buffer[SCRATCH_COUNTS] = NULL;
        s->capacity[SCRATCH_COUNTS] = 0;
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "zeroing the split-KV counts: %s", cl_error_name(err));
    }
    if (s->busy)
        clReleaseEvent(s->busy);
    s->busy = filled;
    return FLASHCL_SUCCESS;
}

/* ---- launch ---------------------------------------------------------- */

#define FLASHCL_HTYPE_STORAGE_IN cl_mem
#define FLASHCL_HTYPE_STORAGE_OUT cl_mem
#define FLASHCL_HTYPE_FLOAT_OUT cl_mem
#define FLASHCL_HTYPE_INT_IN cl_mem
#define FLASHCL_HTYPE_INT_OUT cl_mem
#define FLASHCL_HTYPE_INT cl_int

typedef struct split_args {
    FLASHCL_SPLIT_ARGS(FLASHCL_HOST_FIELD)
} split_args;

static cl_mem mem_or(const tensor_view *v, cl_mem dummy)
{
    return v->present ? v->given : dummy;
}

/* A quantized cache's scales and zero points (absent: the dummy, never
 * read, strides 0). */
static void fill_quant_args(const problem *p, cl_mem dummy, split_args *a)
{
    const tensor_view *views[4] = {&p->quant.k.scale, &p->quant.v.scale,
                                   &p->quant.k.zero, &p->quant.v.zero};
    cl_mem *mems[4] = {&a->k_scale, &a->v_scale, &a->k_zero, &a->v_zero};
    cl_ulong4 *strides[4] = {&a->k_scale_stride, &a->v_scale_stride,
                             &a->k_zero_stride, &a->v_zero_stride};
    uint64_t base[4];
    for (int i = 0; i < 4; ++i) {
        *mems[i] = mem_or(views[i], dummy);
        base[i] = views[i]->present ? views[i]->base : 0;
        const uint64_t none[4] = {0, 0, 0, 0};
        *strides[i] = ulong4_from(views[i]->present ? views[i]->stride : none);
    }
    a->quant_base = ulong4_from(base);
}

static void fill_split_args(flashcl_context *ctx, const problem *p,
                            const kernel_plan *plan,
                            const scratch_set *scratch, split_args *a)
{
    const inference *in = &p->infer;
    const cl_mem dummy = ctx->dummy;
    memset(a, 0, sizeof *a);
    a->o_part = scratch ? scratch->buffer[SCRATCH_O] : dummy;
    a->lse_part = scratch ? scratch->buffer[SCRATCH_LSE] : dummy;
    a->split_count = scratch && scratch->buffer[SCRATCH_COUNTS]
                         ? scratch->buffer[SCRATCH_COUNTS]
                         : dummy;
    a->num_splits = plan->split.parts;
    a->cu_q = mem_or(&in->cu_q, dummy);
    a->cu_k = mem_or(&in->cu_k, dummy);
    a->seqlens = mem_or(&in->seqlens, dummy);
    a->batch_idx = mem_or(&in->batch_idx_view, dummy);
    a->table = mem_or(&in->table, dummy);
    const tensor_view *lens[4] = {&in->cu_q, &in->cu_k, &in->seqlens,
                                  &in->batch_idx_view};
    uint64_t base[4], stride[4];
    for (int i = 0; i < 4; ++i) {
        base[i] = lens[i]->present ? lens[i]->base : 0;
        stride[i] = lens[i]->present ? lens[i]->stride[0] : 0;
    }
    a->len_base = ulong4_from(base);
    a->len_stride = ulong4_from(stride);
    a->table_base = in->table.present ? in->table.base : 0;
    a->table_stride = in->table.present ? in->table.stride[0] : 0;
    a->total_q = (cl_int)in->total_q;
    a->total_k = (cl_int)in->total_k;
    a->kv_batch = (cl_int)in->kv_batch;
    a->page_size = (cl_int)in->page_size;
    a->max_pages = (cl_int)in->max_pages;
    a->top_left = in->top_left ? 1 : 0;
    a->k_cache = p->k.given;
    a->v_cache = p->v.given;
    a->k_new = mem_or(&in->k_new, dummy);
    a->v_new = mem_or(&in->v_new, dummy);
    a->k_new_stride = ulong4_from(in->k_new.stride);
    a->v_new_stride = ulong4_from(in->v_new.stride);
    a->k_new_base = in->k_new.base;
    a->v_new_base = in->v_new.base;
    a->seqlen_new = (cl_int)in->seqlen_new;
    a->infer_status = mem_or(&in->status, dummy);
    a->status_base = in->status.present ? in->status.base : 0;
    fill_quant_args(p, dummy, a);
}

static FLASHCL_TRAILING_ARGS_SETTER(set_split_args, split_args,
                                    FLASHCL_SPLIT_ARGS);

static flashcl_status enqueue(flashcl_context *ctx, cl_command_queue queue,
                              compiled_program *program, int which,
                              const problem *p, const split_args *a,
                              const size_t global[3], const size_t *local,
                              cl_uint num_wait, const cl_event *wait_list,
                              cl_event *event)
{
    static const char *const names[4] = {"flashcl_split_fwd",
                                         "flashcl_split_combine",
                                         "flashcl_split_append",
                                         "flashcl_split_status"};
    const trailing_args split = {set_split_args, a};
    const cl_int err = enqueue_with_args(ctx, queue, p, program, which, &split,
                                         global, local, num_wait, wait_list,
                                         event);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL, "launching %s: %s",
                         names[which], cl_error_name(err));
    return FLASHCL_SUCCESS;
}

/* The caller's status counters zeroed, then counted by a work-item per
 * sequence; *done gets the count's event. */
static flashcl_status enqueue_status(flashcl_context *ctx,
                                     cl_command_queue queue, const problem *p,
                                     compiled_program *program,
                                     const split_args *a, cl_uint num_wait,
                                     const cl_event *wait_list, cl_event *done)
{
    const tensor_view *status = &p->infer.status;
    const cl_int zero = 0;
    cl_event zeroed = NULL;
    const cl_int err = clEnqueueFillBuffer(
        queue, status->given, &zero, sizeof zero,
        (size_t)status->base * sizeof(cl_int),
        FLASHCL_INFER_STATUS_COUNT * sizeof(cl_int), num_wait, wait_list,
        &zeroed);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "zeroing infer_status: %s", cl_error_name(err));
    const size_t global[3] = {(size_t)p->batch, 1, 1};
    const flashcl_status st = enqueue(ctx, queue, program, 3, p, a, global,
                                      NULL, 1, &zeroed, done);
    clReleaseEvent(zeroed);
    return st;
}

/* The call's commands in order: status, append, attention, merge; each
 * waits for the one before (the queue may be out of order). *last gets
 * the last one's event. */
static flashcl_status enqueue_steps(flashcl_context *ctx,
                                    cl_command_queue queue, const problem *p,
                                    const kernel_plan *plan,
                                    compiled_program *program,
                                    const split_args *a, cl_uint num_wait,
                                    const cl_event *wait_list, cl_event *last)
{
    cl_event prev = NULL;
    flashcl_status st = FLASHCL_SUCCESS;
    if (p->infer.status.present) {
        st = enqueue_status(ctx, queue, p, program, a, num_wait, wait_list,
                            &prev);
        num_wait = 0;
    }
    if (st == FLASHCL_SUCCESS && p->infer.append) {
        const int64_t d = problem_widest_head_dim(p);
        const size_t global[3] = {(size_t)d,
                                  (size_t)(p->infer.seqlen_new * p->heads_kv),
                                  (size_t)p->batch};
        cl_event appended = NULL;
        st = enqueue(ctx, queue, program, 2, p, a, global, NULL,
                     prev ? 1 : num_wait, prev ? &prev : wait_list,
                     &appended);
        if (prev)
            clReleaseEvent(prev);
        prev = appended;
        num_wait = 0;
    }
    cl_event fwd = NULL;
    if (st == FLASHCL_SUCCESS)
        st = enqueue(ctx, queue, program, 0, p, a, plan->global, plan->local,
                     prev ? 1 : num_wait, prev ? &prev : wait_list, &fwd);
    if (prev)
        clReleaseEvent(prev);
    if (st != FLASHCL_SUCCESS || plan->split.parts <= 1 || plan->split.fused) {
        *last = fwd;
        return st;
    }
    /* A work-group of COMBINE_WG items per output row (flash_split.cl). */
    _Static_assert(FLASHCL_MAX_SPLITS == 256,
                   "flash_split.cl's FLASHCL_MAX_SPLITS_CL must match");
    const size_t global[3] = {
        64, (size_t)(p->seqlen_q * p->heads_q), /* rows x KV heads */
        (size_t)p->batch};
    const size_t local[3] = {64, 1, 1};
    st = enqueue(ctx, queue, program, 1, p, a, global, local, 1, &fwd, last);
    clReleaseEvent(fwd);
    return st;
}

flashcl_status split_kv_launch(flashcl_context *ctx, cl_command_queue queue,
                               const problem *p, const kernel_plan *plan,
                               compiled_program *const programs[2],
                               cl_uint num_wait, const cl_event *wait_list,
                               cl_event *event)
{
    scratch_set *state = NULL;
    const bool split = plan->split.parts > 1;
    flashcl_status st = split ? scratch_get(ctx, &ctx->split, SPLIT_WHAT,
                                            &state)
                              : FLASHCL_SUCCESS;
    if (st != FLASHCL_SUCCESS)
        return st;
    scratch_waits waits = {wait_list, num_wait, {NULL}, NULL};
    if (split) {
        pthread_mutex_lock(&state->lock);
        const size_t rows =
            (size_t)(plan->split.scratch_bytes /
                     ((uint64_t)plan->head_dim_v_padded + 1) / 4);
        const size_t bytes[SCRATCH_BUFFERS] = {
            rows * (size_t)plan->head_dim_v_padded * 4, rows * 4,
            plan->split.counters * 4};
        unsigned fresh = 0;
        st = scratch_grow(ctx, state, bytes, &fresh, SPLIT_WHAT);
        if (st == FLASHCL_SUCCESS && (fresh & (1u << SCRATCH_COUNTS)))
            st = zero_counts(ctx, queue, state);
        if (st == FLASHCL_SUCCESS) /* after the previous user */
            st = scratch_wait_list(ctx, state, num_wait, wait_list, &waits);
    }
    cl_event last = NULL;
    if (st == FLASHCL_SUCCESS) {
        split_args a;
        fill_split_args(ctx, p, plan, state, &a);
        st = enqueue_steps(ctx, queue, p, plan, programs[0], &a, waits.count,
                           waits.list, &last);
    }
    if (split) {
        scratch_done(state, queue, last, st != FLASHCL_SUCCESS);
        pthread_mutex_unlock(&state->lock);
        scratch_waits_free(&waits);
    }
    if (st == FLASHCL_SUCCESS && event)
        *event = last;
    else if (last)
        clReleaseEvent(last);
    return st;
}

/* ---- the path ---------------------------------------------------------- */

static bool split_serves(const device_caps *caps)
{
    (void)caps;
    return true;
}

/* Forced (FLASHCL_PATH=split_kv, the tuner): whatever the split kernels
 * compute, which is what the portable path does (every dtype, head dim
 * and variant), in one part when splitting does not pay. */
static bool split_can_run(const device_caps *caps, const problem *p,
                          bool forced, char *why, size_t cap)
{
    if (variants_refused(p, split_kv_path.variants, why, cap))
        return false;
    if (forced || split_kv_wanted(caps, p))
        return true;
    snprintf(why, cap, "%s",
             plan_varlen_prefill(caps, p)
                 ? "a packed prefill: the dense kernel runs it as it runs "
                   "the padded call"
                 : "no KV cache or varlen fields, and the work-groups fill "
                   "the device without cutting the keys");
    return false;
}

/* The path's own plan: the service with the path's forced candidate (a
 * portable fallback plans with the table's tiles). */
static void split_path_plan(const device_caps *caps, const problem *p,
                            kernel_plan *plan)
{
    split_kv_plan(caps, p, plan, plan->forced_tiles);
}

/* name, variants, summary, serves_device, can_run, plan, launch, tunables */
const kernel_path split_kv_path = {
    "split_kv", VARIANTS_ALL & ~(1u << VARIANT_POSITIONS),
    "split-KV kernels (decodes too few to fill the device, KV caches, "
    "varlen and paged KV)",
    split_serves, split_can_run, split_path_plan, split_kv_launch,
    split_kv_tunables, sizeof split_kv_tunables / sizeof split_kv_tunables[0],
    NULL};
