/* The portable path: cl/portable/flash_fwd.cl, 1, 2 or 4 query rows per
 * work-item, any device, every dtype and variant. It is the last path of
 * the list and never refuses a problem: what needs the split-KV kernels
 * it plans through the split-KV service (split_kv.h), for FLASHCL_PATH
 * naming another path. */
#include "paths/path.h"
#include "paths/split_kv.h"
#include "paths/portable_tiles.h"
#include "paths/varlen.h"
#include "paths/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool portable_can_run(const device_caps *caps, const problem *p,
                             bool forced, char *why, size_t why_cap)
{
    (void)caps;
    (void)p;
    (void)forced;
    (void)why;
    (void)why_cap;
    return true;
}

static const portable_tile *lookup(const device_caps *caps, int head_dim)
{
    const size_t n = sizeof portable_tiles / sizeof portable_tiles[0];
    return &portable_tiles[tile_reach_find(
        &portable_tiles[0].reach, n, sizeof portable_tiles[0], caps, head_dim)];
}

static size_t local_bytes(const kernel_plan *plan, flashcl_dtype dtype)
{
    const size_t real_size = dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
    const int d = plan->head_dim_padded, dv = plan->head_dim_v_padded;
    const int stage = d > dv ? d : dv;
    return ((size_t)plan->block_m * (size_t)stage +
            (size_t)plan->block_n * (size_t)(d + dv)) *
           real_size;
}

/* Shrink tiles until the Q, K and V tiles fit the device's local memory
 * (D = 256 fp32 ends at 16 x 16 in 48 KiB, fp64 at 8 x 8). */
static void fit_local_memory(const device_caps *caps, const problem *p,
                             kernel_plan *plan)
{
    const int min_tile = plan->vec > 8 ? plan->vec : 8;
    const size_t limit = plan_local_mem(caps);
    while (local_bytes(plan, p->dtype) > limit &&
           (plan->block_m > min_tile || plan->block_n > min_tile)) {
        if (plan->block_m >= plan->block_n && plan->block_m > min_tile)
            plan->block_m /= 2;
        else
            plan->block_n /= 2;
    }
    if (caps->max_work_group && (size_t)plan->block_m > caps->max_work_group)
        plan->block_m = (int)caps->max_work_group;
}

/* The CPU rows were measured on AVX-512: elsewhere they are a start. */
static const char *measured_elsewhere(const device_caps *caps,
                                      const portable_tile *tile)
{
    char vendor[32], arch[32], device[128];
    if (!tile->reach.cpu)
        return "";
    tuning_device_key(caps, vendor, sizeof vendor, arch, sizeof arch, device,
                      sizeof device);
    return strcmp(arch, "avx512") ? "not measured on this CPU's ISA, a "
                                    "starting point: "
                                  : "";
}

static void write_reason(const device_caps *caps, const problem *p,
                         const portable_tile *tile, kernel_plan *plan)
{
    const char *storage =
        p->dtype == FLASHCL_DTYPE_FP64 ? "fp64 storage, fp64 arithmetic: "
                                         "tiles not measured for fp64; "
        : p->dtype == FLASHCL_DTYPE_FP32 ? ""
                                         : "16-bit storage converted to fp32 "
                                           "on load, so the fp32 tiles: ";
    snprintf(plan->reason, sizeof plan->reason,
             "%s%s%s; here %dx%d, %d-wide, %d rows per item", storage,
             measured_elsewhere(caps, tile), tile->measured, plan->block_m,
             plan->block_n, plan->vec, plan->block_m / plan->wg_size);
}

/* FLASHCL_TILES="block_m=64,block_n=32,vec=8[,wg=64]": tiles forced for
 * experiments (as llama.cpp's GGML_OPENCL_FA_TUNE). Applied to `plan`
 * only when every key is known and the result is legal here; else the
 * call is refused and its error text says why. */
typedef struct tile_override {
    int block_m, block_n, vec, wg, rows; /* 0: not given */
} tile_override;

/* FLASHCL_TILES' keys (their values are checked by legal_tiles). */
static const tunable tiles_keys[] = {
    {"block_m", {0}, 0}, {"block_n", {0}, 0}, {"vec", {0}, 0},
    {"wg", {0}, 0},      {"rows", {0}, 0},
};

static bool parse_tiles(const char *text, tile_override *t, char *why,
                        size_t cap)
{
    tile_params given;
    if (!tile_params_parse(text, tiles_keys,
                           sizeof tiles_keys / sizeof tiles_keys[0], false,
                           &given, why, cap))
        return false;
    for (int i = 0; i < given.count; ++i)
        if (given.values[i] < 1) { /* 0 would read as "not given" */
            snprintf(why, cap, "%s=%d is not a positive integer",
                     given.names[i], given.values[i]);
            return false;
        }
    t->block_m = tile_params_get(&given, "block_m", 0);
    t->block_n = tile_params_get(&given, "block_n", 0);
    t->vec = tile_params_get(&given, "vec", 0);
    t->wg = tile_params_get(&given, "wg", 0);
    t->rows = tile_params_get(&given, "rows", 0);
    return true;
}

static bool legal_tiles(const device_caps *caps, const problem *p,
                        const kernel_plan *plan, char *why, size_t cap)
{
    const int m = plan->block_m, n = plan->block_n, vec = plan->vec;
    if (vec != 2 && vec != 4 && vec != 8 && vec != 16)
        snprintf(why, cap, "vec %d is not 2, 4, 8 or 16", vec);
    else if (n % vec || n > 256)
        snprintf(why, cap, "block_n %d is not a multiple of vec %d up to 256",
                 n, vec);
    else if (plan->head_dim_padded % vec || plan->head_dim_v_padded % vec)
        snprintf(why, cap, "vec %d does not divide the padded head dim %d",
                 vec, plan->head_dim_padded);
    else if (m > 1024 ||
             (caps->max_work_group && (size_t)m > caps->max_work_group))
        snprintf(why, cap, "block_m %d is above the device's work-group "
                 "limit %zu", m, caps->max_work_group ? caps->max_work_group
                                                      : (size_t)1024);
    else if (plan->wg_size < 1 || m % plan->wg_size ||
             (m / plan->wg_size != 1 && m / plan->wg_size != 2 &&
              m / plan->wg_size != 4))
        snprintf(why, cap, "wg %d is not block_m %d divided by 1, 2 or 4 "
                 "(query rows per work-item)", plan->wg_size, m);
    else
        return plan_local_mem_fits(caps, local_bytes(plan, p->dtype), why,
                                   cap);
    return false;
}

/* The tuning database's (or the tuner's forced) tiles, when legal here;
 * true when applied. *corrupt gets the tuner's debug switch. */
static bool tuned_tiles(const device_caps *caps, const problem *p,
                        kernel_plan *plan, bool *corrupt)
{
    tuning_choice c;
    int next = 0;
    *corrupt = false;
    kernel_plan tuned;
    for (;;) {
        if (!tuning_choose(caps, &portable_path, p, plan->head_dim_padded,
                           plan->forced_tiles, &next, &c))
            return false;
        tuned = *plan;
        tuned.block_m = tile_params_get(&c.params, "block_m", plan->block_m);
        tuned.block_n = tile_params_get(&c.params, "block_n", plan->block_n);
        tuned.vec = tile_params_get(&c.params, "vec", plan->vec);
        /* An entry naming tiles but no rows was measured before the rows
         * tunable, at one row per item; one naming no tiles ("": the
         * table won, or the tuner's baseline) keeps the table's rows. */
        const bool names_tiles =
            tile_params_get(&c.params, "block_m", 0) ||
            tile_params_get(&c.params, "block_n", 0) ||
            tile_params_get(&c.params, "vec", 0);
        const int rows = tile_params_get(
            &c.params, "rows", names_tiles ? 1 : plan->block_m / plan->wg_size);
        tuned.wg_size = rows > 0 && tuned.block_m % rows == 0
                            ? tuned.block_m / rows
                            : 0;
        char why[160];
        if (legal_tiles(caps, p, &tuned, why, sizeof why))
            break;
        tuning_refused(&c, "portable", why);
    }
    plan->block_m = tuned.block_m;
    plan->block_n = tuned.block_n;
    plan->vec = tuned.vec;
    plan->wg_size = tuned.wg_size;
    *corrupt = c.forced && tile_params_get(&c.params, "debug_corrupt", 0);
    snprintf(plan->tuning, sizeof plan->tuning, "%s", c.origin);
    return true;
}

/* FLASHCL_TILES illegal here: the call is refused, saying what is legal,
 * rather than run on the table's tiles as if the experiment had run. */
static void refuse_tiles(const char *env, const char *why, kernel_plan *plan)
{
    plan_refuse(plan, FLASHCL_ERROR_INVALID_VALUE,
                "FLASHCL_TILES=\"%.64s\" is illegal here: %s; legal: any "
                "of block_m, block_n, vec, rows (or wg) = a positive "
                "integer, with vec 2, 4, 8 or 16 dividing block_n (at most "
                "256) and the padded head dim, rows = block_m / wg 1, 2 or "
                "4, block_m within the work-group limit, the tiles within "
                "local memory",
                env, why);
}

/* True when FLASHCL_TILES was applied to `plan`; refuses the plan when it
 * is set but illegal. */
static bool override_tiles(const device_caps *caps, const problem *p,
                           kernel_plan *plan)
{
    const char *env = getenv("FLASHCL_TILES");
    if (!env || !*env)
        return false;
    char why[160];
    tile_override t;
    kernel_plan forced = *plan;
    if (parse_tiles(env, &t, why, sizeof why)) {
        forced.block_m = t.block_m ? t.block_m : plan->block_m;
        forced.block_n = t.block_n ? t.block_n : plan->block_n;
        forced.vec = t.vec ? t.vec : plan->vec;
        const int rows = t.rows ? t.rows : plan->block_m / plan->wg_size;
        forced.wg_size = t.wg                         ? t.wg
                         : forced.block_m % rows == 0 ? forced.block_m / rows
                                                      : 0;
        if (!t.wg && forced.wg_size == 0)
            snprintf(why, sizeof why, "block_m %d is not a multiple of %d "
                     "query rows per work-item", forced.block_m, rows);
        else if (legal_tiles(caps, p, &forced, why, sizeof why)) {
            plan->block_m = forced.block_m;
            plan->block_n = forced.block_n;
            plan->vec = forced.vec;
            plan->wg_size = forced.wg_size;
            return true;
        }
    }
    refuse_tiles(env, why, plan);
    return false;
}

static bool compensated(const device_caps *caps, const kernel_plan *plan)
{
    return portable_compensated(caps, plan->head_dim_v_padded);
}

SWITCH_PATH_EMITTER(portable_emit, portable_switches,
                    FLASHCL_PORTABLE_SWITCHES);

static void portable_plan(const device_caps *caps, const problem *p,
                          kernel_plan *plan)
{
    /* the split kernels store fp32 LSEs only (problem.c refuses the calls
     * that need them; fp64 is never split, so this is belt and braces) */
    if (!p->lse_fp64 && split_kv_wanted(caps, p)) {
        split_kv_plan(caps, p, plan, NULL); /* the table's tiles */
        return;
    }
    plan_forward_kernel(plan, "flash_fwd.cl");
    plan->head_dim_padded = portable_padded_head_dim(p->head_dim);
    plan->head_dim_v_padded = portable_padded_head_dim(p->head_dim_v);
    const portable_tile *tile = lookup(caps, plan->head_dim_padded);
    plan->block_m = tile->block_m;
    plan->block_n = tile->block_n;
    plan->vec = tile->vec ? tile->vec : portable_vector_width(caps);
    if (tile->reach.cpu) /* PoCL runs padding rows in full */
        while (plan->block_m > 16 && plan->block_m / 2 >= p->seqlen_q)
            plan->block_m /= 2;
    fit_local_memory(caps, p, plan);
    plan->wg_size = plan->block_m / tile->rows;
    plan->block_m = plan->wg_size * tile->rows;
    bool corrupt = false;
    const bool tuned = tuned_tiles(caps, p, plan, &corrupt);
    if (override_tiles(caps, p, plan)) {
        plan->tuning[0] = '\0';
        corrupt = false;
        snprintf(plan->reason, sizeof plan->reason,
                 "FLASHCL_TILES: %dx%d, %d-wide, %d rows per item (forced, "
                 "not measured)",
                 plan->block_m, plan->block_n, plan->vec,
                 plan->block_m / plan->wg_size);
    } else if (tuned) {
        const char *cut = strstr(plan->tuning, " (");
        snprintf(plan->reason, sizeof plan->reason,
                 "tiles of the %.*s entry; here %dx%d, %d-wide, %d rows per "
                 "item",
                 (int)(cut ? (size_t)(cut - plan->tuning)
                           : strlen(plan->tuning)),
                 plan->tuning, plan->block_m, plan->block_n, plan->vec,
                 plan->block_m / plan->wg_size);
    } else {
        write_reason(caps, p, tile, plan);
    }
    if (!compensated(caps, plan)) {
        size_t n = strlen(plan->reason);
        snprintf(plan->reason + n, sizeof plan->reason - n,
                 "; plain sums (compensated ones spill at D_v > 64 on GPUs)");
    }

    const portable_switches values = {
        PORTABLE_TILE_SWITCH_VALUES(p, plan),
        .DIM_CONTIGUOUS = p->q.stride[3] == 1 && p->k.stride[3] == 1 &&
                          p->v.stride[3] == 1 && p->o.stride[3] == 1,
        .COMPENSATED = compensated(caps, plan),
        .DEBUG_CORRUPT = corrupt,
        /* a packed batch here is a prefill split_kv_wanted left dense */
        .VARLEN = !p->infer.varlen_q ? 0 : p->infer.top_left ? 2 : 1,
        .LSE_FP64 = p->lse_fp64};
    plan_emit_options(plan, plan->options, sizeof plan->options, p,
                      portable_emit, &values);
    plan_row_blocks(p, plan);
}

static bool serves_every_device(const device_caps *caps)
{
    (void)caps;
    return true;
}

/* The one-kernel launch (a packed batch's prefix sums after the forward
 * list), or the split-KV kernels' own. */
static flashcl_status portable_launch(flashcl_context *ctx,
                                      cl_command_queue queue,
                                      const problem *p,
                                      const kernel_plan *plan,
                                      compiled_program *const programs[2],
                                      cl_uint num_wait,
                                      const cl_event *wait_list,
                                      cl_event *event)
{
    if (plan->split.service)
        return split_kv_launch(ctx, queue, p, plan, programs, num_wait,
                               wait_list, event);
    if (!p->infer.varlen_q)
        return launch_forward_kernel(ctx, queue, p, plan, programs, num_wait,
                                     wait_list, event);
    varlen_args packed;
    varlen_args_fill(p, &packed);
    const trailing_args packed_args = {varlen_args_set, &packed};
    return enqueue_forward(ctx, queue, p, plan, programs[0], &packed_args,
                           num_wait, wait_list, event);
}

/* name, variants, summary, serves_device, can_run, plan, launch, tunables */
const kernel_path portable_path = {
    "portable", VARIANTS_ALL,
    "portable kernel (fp32 FMA; fp64 for fp64 storage)",
    serves_every_device, portable_can_run, portable_plan, portable_launch,
    portable_tunables, sizeof portable_tunables / sizeof portable_tunables[0],
    NULL};
