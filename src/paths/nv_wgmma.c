/* The Hopper warpgroup-MMA path: cl/nvidia/flash_fwd_wgmma.cl, for NVIDIA
 * GPUs of compute capability 9.x. Its sm_90a instructions reach the GPU
 * through the PTX patch of sm90a_patch.c, applied by the program cache
 * (plan->patch) after the driver compiled the source; the patched PTX is
 * cached on disk under its own kind. If the patch or the build of the
 * patched binary fails, the failure is recorded for the device (process
 * wide) and the mma.sync path runs this and every later call, with the
 * reason in describe's `skipped`.
 *
 * Scope: D and D_v multiples of 8 up to 256 (run in 64-, 128- or
 * 256-column tiles, the larger one's class), fp16/bf16, causal or not,
 * every variant of the variant table, GQA, LSE, any scale, packed
 * (varlen) batches without a cache, bias or mask; every other call goes
 * to nv_mma. Policy: chosen without being forced where it
 * measured faster than nv_mma on the H200 (measured_faster: D >= 40;
 * variants_measured: every variant but a mask, and a bias only in the
 * 128-column tiles; D_v != D: see
 * tile_dim), else only with FLASHCL_PATH=nv_wgmma. */
#include "paths/mask_bits.h"
#include "paths/nv_common.h"
#include "paths/nv_wgmma_tiles.h"
#include "paths/sm90a_patch.h"
#include "paths/split_kv.h"
#include "paths/switches.h"
#include "paths/tuning.h"
#include "nvidia/wgmma/wgmma_switches.clh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the path runs without being forced: the head dims whose runs
 * measured it faster than nv_mma on the H200 on every row
 * (bench/results/h200-2026-12-02-wgmma-v2.md, fp16/bf16, N = 2048 and 8192,
 * causal or not): 64, 128 and 256 (1.1-2.5x) and the padded 40, 80, 96,
 * 112, 160 and 192 (1.03-2.30x); the multiples of 8 between them share
 * those kernels' tiles. Below 40 (a 64-column tile for 8-32 columns) it
 * was only checked for correctness: forced only. */
static bool measured_faster(const problem *p)
{
    return p->head_dim >= 40;
}

/* D_v != D pads both to the larger one's class: the suites passed with it
 * on the H200 and it ran at 1.78-1.98x nv_mma at 192 / 128 and 1.36-1.39x
 * at 128 / 64 (bf16 N = 4096, bench/results/h200-2026-12-02-wgmma-v4.md). */
static int tile_dim(const problem *p)
{
    return nv_wgmma_tile_dim((int)problem_widest_head_dim(p));
}

/* A mask without a bias read packed into bits (mask_bits.c; the
 * kernel's FLASHCL_NV_WGMMA_MASK_BITS): wanted in the 64- and 128-column
 * tiles when the packed words fit the context's scratch cap. */
static bool mask_bits_wanted(const problem *p)
{
    if (!variant_active(p, VARIANT_MASK) || variant_active(p, VARIANT_BIAS) ||
        tile_dim(p) > 128)
        return false;
    return mask_bits_layout_of(p).bytes <= p->infer.scratch_cap;
}

/* ... and what the kernel's packed mask needs of the schedule (its fetch a
 * tile ahead, the kernel's WG_XPF_ROOM): 2 consumer warpgroups, or 3 in
 * the 64-column tiles, or 3 in 64-key tiles of the 128-column ones
 * without a band (that last only through a tuned set, not measured
 * yet). */
static bool mask_bits_schedule(const problem *p, const nv_wgmma_cfg *c)
{
    const bool three = tile_dim(p) == 64 ||
                       (tile_dim(p) == 128 && c->block_n == 64 &&
                        p->left < 0 && p->right < 0);
    return c->warpgroups == 2 || (c->warpgroups == 3 && three);
}

/* The variants that run here unforced: those the suites passed with on an
 * H200 (test_variants, test_forward forced onto this path) and that
 * measured faster than nv_mma on every row there (bf16 N = 4096, causal
 * or not; bench/results/h200-2026-12-02-wgmma-v3.md: window 1.36-1.54x,
 * ALiBi 1.35-1.38x, softcap 1.35x at D = 128 and 1.95-2.32x at D = 256,
 * sinks 1.51x, window + softcap + sinks 1.29-1.37x; top-left causal is
 * the causal kernel with the diagonal at key 0). A bias alone in the
 * 128-column tiles, fetched a tile ahead (the kernel's WG_XPF), measured
 * 1.11-1.21x nv_mma (h200-2026-12-03-v5.md). A mask without a bias,
 * packed into bits (mask_bits_wanted): bf16 N = 4096, non-causal /
 * causal, D = 128 418.4 / 360.0 TFLOP/s against nv_mma's 268.3 / 245.9
 * (1.56 / 1.46x; with window 1024 1.59 / 1.33x), D = 64 on 3 consumers
 * 313.4 / 266.7 against 253.3 / 239.9 (1.24 / 1.11x); read as bytes it
 * was 1.00x at D = 128 (h200-2026-12-04-v10, runs 2 and 5). Bias and
 * mask together (0.58-0.76x) and a bias at D <= 64 (0.83-0.85x, where 2
 * consumer warpgroups hold the fetch) stay on nv_mma; a bias at D = 256
 * was not measured with the fetch (ptxas spills it there). A bias with
 * the other variants was not measured: each of them alone runs faster
 * here, so the combination goes here too. Forced
 * (FLASHCL_PATH=nv_wgmma), every one runs here. */
static bool variants_measured(const problem *p)
{
    if (variant_active(p, VARIANT_MASK))
        return mask_bits_wanted(p);
    return !variant_active(p, VARIANT_BIAS) || tile_dim(p) == 128;
}

/* ---- the route's failure, per device and driver, process-wide -------- */
static driver_failure route_failure = DRIVER_FAILURE_INIT;

/* Copies the recorded reason into why; false when nothing failed here. */
static bool route_failed(const device_caps *caps, char *why, size_t cap)
{
    char reason[sizeof route_failure.reason];
    if (!driver_failure_here(&route_failure, caps, reason, sizeof reason))
        return false;
    snprintf(why, cap, "the sm_90a PTX route failed on this driver "
                       "(%s); the mma.sync kernel runs instead", reason);
    return true;
}

static void note_build_failed(const device_caps *caps, const char *why)
{
    driver_failure_note(&route_failure, caps, why);
    if (verbose_enabled())
        fprintf(stderr, "flashcl: nv_wgmma could not be built, the mma.sync "
                        "kernel runs instead: %s\n", why);
}

/* program_patch_fn: the driver's PTX -> the sm_90a PTX. */
static unsigned char *patch_ptx(const unsigned char *binary, size_t size,
                                size_t *out_size, char *why, size_t cap)
{
    char *out = sm90a_patch_ptx((const char *)binary, size, out_size, NULL,
                                why, cap);
    /* the kernel's `SM90A_SHARED_BYTES n` comment: its tiles were sized
     * for n bytes of local memory, more than the source could declare */
    const size_t bytes = out ? sm90a_shared_marker(out, *out_size) : 0;
    if (out && bytes) { /* the table's local_mem (local_mem_of) */
        char *grown = sm90a_set_shared_bytes(out, *out_size, (size_t)bytes,
                                             out_size, why, cap);
        free(out);
        out = grown;
    }
    if (out) {
        ++*out_size; /* PTX goes to the driver NUL-terminated, as it came */
    }
    return (unsigned char *)out;
}

/* ---- can_run / plan --------------------------------------------------- */
static bool refuse(char *why, size_t cap, const char *text)
{
    snprintf(why, cap, "%s", text);
    return false;
}

static bool serves(const device_caps *caps)
{
    return caps->klass == DEVICE_CLASS_GPU_NVIDIA && caps->nv_cc_major == 9;
}

static bool rows_aligned(const problem *p)
{
    return view_rows_aligned(&p->q, p->elem_size, 16) &&
           view_rows_aligned(&p->k, p->elem_size, 16) &&
           view_rows_aligned(&p->v, p->elem_size, 16) &&
           view_rows_aligned(&p->o, p->elem_size, 16);
}

static bool nv_wgmma_can_run(const device_caps *caps, const problem *p,
                             bool forced, char *why, size_t cap)
{
    if (!serves(caps))
        return refuse(why, cap, "not an NVIDIA GPU of compute capability 9.x");
    if (route_failed(caps, why, cap))
        return false;
    if ((p->infer.needs_split_kernel && !plan_varlen_dense(p)) ||
        p->infer.num_splits > 1)
        return refuse(why, cap, "split-KV, KV cache, or varlen with a cache, "
                                "bias or mask: the split-KV kernels run it");
    /* decodes (dense or packed) go where the mma.sync path sends them */
    const char *decode = forced ? NULL : split_kv_decode_reason(caps, p);
    if (decode)
        return refuse(why, cap, decode);
    if (p->dtype != FLASHCL_DTYPE_FP16 && p->dtype != FLASHCL_DTYPE_BF16)
        return refuse(why, cap, "wgmma kernel: fp16/bf16 storage only");
    if (variants_refused(p, nv_wgmma_path.variants, why, cap))
        return false;
    if (p->head_dim % 8 || p->head_dim > 256 || p->head_dim_v % 8 ||
        p->head_dim_v > 256)
        return refuse(why, cap, "wgmma kernel: head dims (D and D_v) that "
                                "are multiples of 8 up to 256");
    if (!rows_aligned(p))
        return refuse(why, cap, "needs contiguous, 16-byte-aligned rows");
    /* Reasons never name the path "nv_mma": the tests find a path's own
     * reason in `skipped` by its name (FLASHCL_EXPECT_PATH_EXCEPT). */
    if (!forced && !measured_faster(p))
        return refuse(why, cap, "wgmma kernel: at this head dim not measured "
                                "faster than the mma.sync kernel on the H200 "
                                "(FLASHCL_PATH=nv_wgmma runs it)");
    if (!forced && !variants_measured(p))
        return refuse(why, cap, "wgmma kernel: a mask or a bias outside the "
                                "128-column tiles, or a mask beside a bias or "
                                "not packed into bits, measured slower than "
                                "the mma.sync kernel on the H200 "
                                "(FLASHCL_PATH=nv_wgmma runs it)");
    return true;
}

/* Keys of the band besides the diagonal (left + right), or INT64_MAX when
 * either side is unbounded. */
static int64_t band_keys(const problem *p)
{
    return p->left >= 0 && p->right >= 0 ? p->left + p->right : INT64_MAX;
}

static const nv_wgmma_tile *lookup(const problem *p)
{
    const int64_t dims = problem_widest_head_dim(p);
    for (size_t i = 0; i < sizeof nv_wgmma_tiles / sizeof nv_wgmma_tiles[0];
         ++i) {
        const nv_wgmma_tile *t = &nv_wgmma_tiles[i];
        if (t->head_dim == tile_dim(p) &&
            (t->dims_up_to == 0 || dims <= t->dims_up_to) &&
            (p->variants & t->with_variants) == t->with_variants &&
            (p->right < 0 || p->seqlen_q >= t->causal_min_rows) &&
            (t->causal < 0 || t->causal == (p->right >= 0)) &&
            (t->band_up_to == 0 || band_keys(p) <= t->band_up_to))
            return t;
    }
    return &nv_wgmma_tiles[0]; /* not reached: can_run checked the dim */
}

static nv_wgmma_cfg table_cfg(const nv_wgmma_tile *t)
{
    return (nv_wgmma_cfg){t->warpgroups, t->block_n, t->ring, 0};
}

/* The local memory the kernel sizes its tiles for: the table entry's
 * (above the device's 48 KiB through the PTX patch, which grows the
 * .shared array; the source declares only the device's size), else the
 * device's. */
static uint64_t local_mem_of(const device_caps *caps, const nv_wgmma_tile *t)
{
    if (t && t->local_mem)
        return t->local_mem;
    return caps->local_mem ? caps->local_mem : 49152;
}

/* The tuning database's (or the tuner's forced) set, when legal here. */
static bool tuned_config(const device_caps *caps, const problem *p,
                         const kernel_plan *plan, uint64_t mem,
                         nv_wgmma_cfg *cfg, tuning_choice *c)
{
    int next = 0;
    for (;;) {
        if (!tuning_choose(caps, &nv_wgmma_path, p, tile_dim(p),
                           plan->forced_tiles, &next, c))
            return false;
        const tile_params *t = &c->params;
        const nv_wgmma_cfg want = {
            tile_params_get(t, "warpgroups", cfg->warpgroups),
            tile_params_get(t, "block_n", cfg->block_n),
            tile_params_get(t, "ring", cfg->ring), cfg->persist};
        char why[160];
        if (nv_wgmma_legal(&want, (int)problem_widest_head_dim(p), mem,
                           caps->max_work_group, why, sizeof why)) {
            *cfg = want;
            return true;
        }
        tuning_refused(c, "nv_wgmma", why);
    }
}

static void persistent_grid(const device_caps *caps, const problem *p,
                            kernel_plan *plan);

/* The local memory a plan with staged bias and mask takes: the D = 256
 * table entry's, the most the tiles here were run with. */
#define XSTAGE_LOCAL_MEM 229456u

/* Bias and mask staged by the producer warpgroup (the kernel's
 * FLASHCL_NV_WGMMA_XSTAGE): their tiles ride the K/V ring as more slots
 * of each key step, so the plan takes XSTAGE_LOCAL_MEM and up to 16
 * slots. Needs rows the 16-byte copies can read (a key stride of 1,
 * 16-byte-aligned rows), the plain grid, and room for a whole step (K,
 * the parts, V); else the fetch into registers (the kernel's WG_XPF)
 * stays, as for an fp32 bias alone (measured faster below). Mirrors the
 * kernel's WG_XPARTS. */
static bool plan_xstage(const problem *p, nv_wgmma_cfg *cfg, uint64_t *mem)
{
    const tensor_view *bias = variant_view(p, VARIANT_BIAS);
    const tensor_view *mask = variant_view(p, VARIANT_MASK);
    if (!bias && !mask)
        return false;
    const int xb = !bias ? 0 : variant_value(p, VARIANT_BIAS) == 1 ? 4 : 2;
    /* H200, bf16 D = 128 N = 4096 (non-causal / causal, TFLOP/s, staged
     * against fetched, bench/results/h200-2026-12-03-v7.md): a 16-bit bias
     * 357 / 314 against 220 / 208, a mask 270 / 246 against 251 / 233,
     * both 202 / 180 against 58 / 57; an fp32 bias alone 257 / 229
     * against 268 / 250, so it keeps the fetch */
    if (xb == 4 && !mask)
        return false;
    if ((bias && !view_rows_aligned(bias, (size_t)xb, 16)) ||
        (mask && !view_rows_aligned(mask, 1, 16)))
        return false;
    if (cfg->persist || p->infer.varlen_q)
        return false;
    const int d = tile_dim(p), bm = 64 * cfg->warpgroups;
    const int slot = cfg->block_n * d * 2;
    const int fit = slot / (cfg->block_n * (xb + (mask ? 1 : 0)));
    int rows = fit >= 128 ? 128 : fit >= 64 ? 64 : fit >= 32 ? 32 : 16;
    rows = rows < bm ? rows : bm;
    /* the kernel's copy: whole rows of 16-byte chunks over 128 threads */
    const int cb = cfg->block_n * xb / 16, cm = mask ? cfg->block_n / 16 : 0;
    if (fit < 16 || bm % rows || (cb && (128 % cb || rows * cb % 128)) ||
        (cm && (128 % cm || rows * cm % 128)))
        return false;
    nv_wgmma_cfg want = *cfg;
    const uint64_t want_mem = *mem > XSTAGE_LOCAL_MEM ? *mem : XSTAGE_LOCAL_MEM;
    const uint64_t slots = nv_wgmma_ring_fit(&want, d, want_mem);
    want.ring = slots < 16 ? (int)slots : 16;
    if (want.ring < 2 + bm / rows)
        return false;
    *cfg = want;
    *mem = want_mem;
    return true;
}

/* The persistent grid, for the short work items of the table entry's
 * persist_band and persist_causal_rows: a block then has only a few key
 * tiles, and the grid overlaps one item's O store and the next item's
 * first copies. Bands of at most 512 keys on every entry: bf16 N = 4096 /
 * 16384, causal window 512 (H200, 2026-12-03 v9, s8_window): D = 64 1.09
 * / 1.12x the plain grid, D = 128 1.05 / 1.07x; window 2048 0.99-1.02x
 * and window 1024 with softcap and sinks 0.97-1.05x. Without the right
 * edge (non-causal windows) the persistent grid measured 0.85-0.94x at
 * window 512. Bias and mask keep the plain grid (their staged tiles and
 * heads-first order are written for it), as do packed batches (the
 * kernel's). */
static bool plan_persist(const problem *p, const nv_wgmma_tile *t)
{
    if (variant_active(p, VARIANT_BIAS) || variant_active(p, VARIANT_MASK) ||
        p->infer.varlen_q)
        return false;
    if (band_keys(p) <= t->persist_band)
        return true;
    return p->left < 0 && p->right >= 0 &&
           p->seqlen_q <= t->persist_causal_rows;
}

/* A call's schedule, resolved once: the table entry, what its variants
 * need of it (the packed mask's fetch, bias and mask's registers, the
 * persistent grid for short items), a tuned or forced set over that
 * (checked against nv_wgmma_legal there), then what the plan adds last
 * (packed batches on the plain grid, the staged bias and mask). */
typedef struct wgmma_schedule {
    const nv_wgmma_tile *tile;
    nv_wgmma_cfg cfg;
    uint64_t mem;       /* local memory the tiles are sized for */
    bool bits;          /* the mask packed into bits first */
    bool xstage;        /* bias and mask staged by the producer */
    bool band;          /* the persistent grid for short items */
    bool tuned;
    tuning_choice chosen;
} wgmma_schedule;

static wgmma_schedule resolve_schedule(const device_caps *caps,
                                       const problem *p,
                                       const kernel_plan *plan)
{
    wgmma_schedule s;
    memset(&s, 0, sizeof s);
    s.tile = lookup(p);
    s.mem = local_mem_of(caps, s.tile);
    s.cfg = table_cfg(s.tile);
    s.bits = mask_bits_wanted(p);
    if (s.bits && s.cfg.warpgroups == 3 && tile_dim(p) != 64)
        s.cfg.warpgroups = 2; /* the fetch's registers; the tiles stay */
    else if (!s.bits &&
             (variant_active(p, VARIANT_BIAS) || variant_active(p, VARIANT_MASK)))
        nv_wgmma_narrow_for_extras(&s.cfg, tile_dim(p), s.mem);
    s.band = plan_persist(p, s.tile);
    s.cfg.persist = s.band;
    s.tuned = tuned_config(caps, p, plan, s.mem, &s.cfg, &s.chosen);
    if (p->infer.varlen_q)
        s.cfg.persist = 0; /* the kernel's packed batches: the plain grid */
    s.bits = s.bits && mask_bits_schedule(p, &s.cfg);
    s.xstage = !s.bits && plan_xstage(p, &s.cfg, &s.mem);
    return s;
}

typedef struct wgmma_switches {
    FLASHCL_NV_WGMMA_SWITCHES(SWITCH_FIELD)
} wgmma_switches;

/* Every switch of the kernel's list for a resolved schedule (the plan's
 * tiles set). */
static wgmma_switches schedule_switches(const device_caps *caps,
                                        const problem *p,
                                        const wgmma_schedule *s,
                                        const kernel_plan *plan)
{
    const bool varlen = p->infer.varlen_q;
    return (wgmma_switches){
        .HEAD_DIM = plan->head_dim_padded,
        .HEAD_DIM_V = plan->head_dim_v_padded,
        .DTYPE = (int)p->dtype,
        .CAUSAL = p->right >= 0,
        .WG_SIZE = plan->wg_size,
        .BLOCK_M = plan->block_m,
        .BLOCK_N = plan->block_n,
        /* the row max is taken before scaling only for scale > 0 */
        .NV_PRESCALE = !(p->scale > 0),
        .LOCAL_MEM_BYTES = (int)s->mem,
        .NV_WGMMA = 1,
        .NV_SM = (int)(caps->nv_cc_major * 10 + caps->nv_cc_minor),
        .NV_MMA = 1,
        .NV_WGMMA_MASK_BITS = s->bits && !s->xstage,
        .NV_DQ = (int)p->head_dim,
        .NV_DV = (int)p->head_dim_v,
        .NV_WGMMA_RING = s->cfg.ring,
        .NV_WGMMA_XSTAGE = s->xstage,
        .NV_WGMMA_PERSIST = s->cfg.persist,
        /* (the persistent grid keeps its own order) */
        .NV_HEADS_FIRST = !s->cfg.persist && plan_extras_heads_first(p),
        .NV_VARLEN = varlen,
        .NV_VARLEN_TOP_LEFT = varlen && p->infer.top_left,
        .NV_SEQ_FIRST = plan_varlen_seq_first(p)};
}

/* " -DFLASHCL_<name>=<value>" for every switch of the list. */
static void wgmma_emit(const wgmma_switches *values, options_buf *out,
                       switch_fault *fault)
{
    FLASHCL_NV_WGMMA_SWITCHES(SWITCH_EMIT)
}

/* The kernel's -D options of a resolved schedule: the compiler flags,
 * every switch of its list, the two it leaves optional (the register
 * split, the local memory the PTX patch grows), then the variants'.
 * False (the plan refused) when they do not fit or a value is illegal. */
static bool schedule_options(const device_caps *caps, const problem *p,
                             const wgmma_schedule *s,
                             const wgmma_switches *values, kernel_plan *plan)
{
    options_buf out = options_begin(plan->options, sizeof plan->options);
    switch_fault fault = {NULL, 0};
    plan_compiler_flags(&out);
    wgmma_emit(values, &out, &fault);
    options_add(&out, " -DFLASHCL_NV_WGMMA_MAXNREG=%d",
                nv_wgmma_regs(&s->cfg));
    const uint64_t device_mem = caps->local_mem ? caps->local_mem : 49152;
    if (s->mem > device_mem) /* the PTX patch grows .shared */
        options_add(&out, " -DFLASHCL_NV_WGMMA_DECLARED_SMEM=%llu",
                    (unsigned long long)device_mem);
    variants_add_defines(p, &out);
    plan_options_done(plan, &out, fault);
    return !plan->refused[0];
}

static void nv_wgmma_plan(const device_caps *caps, const problem *p,
                          kernel_plan *plan)
{
    const wgmma_schedule s = resolve_schedule(caps, p, plan);
    plan_forward_kernel(plan, "flash_fwd_wgmma.cl");
    plan->head_dim_padded = tile_dim(p);
    plan->head_dim_v_padded = tile_dim(p);
    plan->block_m = 64 * s.cfg.warpgroups;
    plan->block_n = s.cfg.block_n;
    plan->wg_size = nv_wgmma_threads(&s.cfg);
    plan->vec = 0;
    if (s.tuned)
        snprintf(plan->tuning, sizeof plan->tuning, "%s", s.chosen.origin);
    /* (a mask keeps the plain grid: never both) */
    const char *note = s.band && s.cfg.persist
                           ? " (short items: the persistent grid)"
                       : s.bits ? " (the mask packed into bits first)"
                                : "";
    snprintf(plan->reason, sizeof plan->reason, "%.200s%s",
             !s.tuned          ? s.tile->reason
             : s.chosen.forced ? "forced candidate"
                               : plan->tuning,
             note);
    const wgmma_switches values = schedule_switches(caps, p, &s, plan);
    if (!schedule_options(caps, p, &s, &values, plan))
        return;
    plan->patch = patch_ptx;
    plan->patch_kind = SM90A_PATCH_KIND;
    plan->build_failed = note_build_failed;
    plan_row_blocks(p, plan);
    if (s.bits)
        mask_bits_plan(p, plan);
    if (s.cfg.persist)
        persistent_grid(caps, p, plan);
    if (values.NV_HEADS_FIRST)
        plan_heads_first_grid(p, plan);
    if (values.NV_SEQ_FIRST) /* sequences fastest, query blocks last */
        plan_seq_first_grid(p, plan);
}

/* The persistent grid: one work-group per compute unit (the table's
 * schedules take an SM's local memory or registers each), at most one per
 * work item. */
static void persistent_grid(const device_caps *caps, const problem *p,
                            kernel_plan *plan)
{
    const size_t items = plan->global[0] / plan->local[0] *
                         (size_t)p->heads_q * (size_t)p->batch;
    const size_t units = caps->compute_units ? caps->compute_units : 1;
    plan->persistent = true;
    plan->global[0] = (items < units ? items : units) * plan->local[0];
    plan->global[1] = plan->global[2] = 1;
}

/* ---- launch: the persistent grid's heads and batch after the forward
 * list (cl/common/kernel_args.clh, FLASHCL_PERSIST_ARGS) -------------- */

#define FLASHCL_HTYPE_INT cl_int

typedef struct persist_args {
    FLASHCL_PERSIST_ARGS(FLASHCL_HOST_FIELD)
} persist_args;

static FLASHCL_TRAILING_ARGS_SETTER(set_persist_args, persist_args,
                                    FLASHCL_PERSIST_ARGS);

static flashcl_status nv_wgmma_launch(flashcl_context *ctx,
                                      cl_command_queue queue,
                                      const problem *p, const kernel_plan *plan,
                                      compiled_program *const programs[2],
                                      cl_uint num_wait,
                                      const cl_event *wait_list,
                                      cl_event *event)
{
    const persist_args grid = {(cl_int)p->heads_q, (cl_int)p->batch};
    const trailing_args persist = {set_persist_args, &grid};
    varlen_args packed;
    const trailing_args varlen = {varlen_args_set, &packed};
    const trailing_args *trailing = NULL;
    if (p->infer.varlen_q)
        varlen_args_fill(p, &packed);
    if (plan->persistent)
        trailing = &persist;
    else if (p->infer.varlen_q)
        trailing = &varlen;
    if (plan->mask_bits)
        return mask_bits_launch(ctx, queue, p, plan, programs, trailing,
                                num_wait, wait_list, event);
    return enqueue_forward_then_extra(ctx, queue, p, plan, programs, trailing,
                                      p->infer.varlen_q ? &varlen : NULL,
                                      num_wait, wait_list, event);
}

/* name, variants, summary, serves_device, can_run, plan, launch, tunables */
const kernel_path nv_wgmma_path = {
    "nv_wgmma", VARIANTS_ALL,
    "Hopper wgmma kernel for fp16/bf16 (head dims D and D_v that are "
    "multiples of 8 up to 256, every variant; sm_90a through a PTX patch, "
    "up to 224 KiB of local memory, a producer warpgroup; the default on "
    "sm_90 from D = 40 for every call but a bias outside the 128-column "
    "tiles, a bias with a mask and a mask above D = 128; a pass before it "
    "packs a mask into bits)",
    serves, nv_wgmma_can_run, nv_wgmma_plan, nv_wgmma_launch,
    nv_wgmma_tunables,
    sizeof nv_wgmma_tunables / sizeof nv_wgmma_tunables[0],
    NULL /* the device's offer: nv_mma's */};
