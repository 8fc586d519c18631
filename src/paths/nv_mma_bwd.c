/* The backward's tensor-core kernels (cl/nvidia/flash_bwd_mma.cl): when
 * they run, and their tiles. The portable program still brings Delta and
 * d_sinks (src/api/backward.c). */
#include "paths/nv_mma_bwd.h"
#include "core/dev_env.h"
#include "core/options_buf.h"
#include "paths/nv_common.h"
#include "paths/nv_mma_bwd_tiles.h"
#include "paths/path.h"
#include "paths/switches.h"
#include "paths/tuning.h"
#include "problem/variants.h"
#include "nvidia/flash_bwd_mma_switches.clh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A driver that cannot build the kernels (their inline PTX is new to it)
 * gets the portable backward from then on, as nv_wgmma falls back: the
 * device whose build failed, and why. */
static driver_failure build_failure = DRIVER_FAILURE_INIT;

/* The recorded failure on this device into why (NULL when none). */
static const char *build_failed_here(const device_caps *caps, char *why,
                                     size_t cap)
{
    char reason[sizeof build_failure.reason];
    if (!driver_failure_here(&build_failure, caps, reason, sizeof reason))
        return NULL;
    snprintf(why, cap, "its kernels failed to build on this driver (%.119s)",
             reason);
    return why;
}

static int round16(int64_t d) { return (int)((d + 15) / 16 * 16); }

/* Local memory of each kernel (flash_bwd_mma.cl's #error checks). */
static uint64_t dkdv_bytes(const nv_bwd_plan *t)
{
    const uint64_t pitches = (uint64_t)(t->dim_padded + t->dim_v_padded + 16);
    return 2 * (uint64_t)(t->warps * 16) * pitches +
           (uint64_t)t->row_stages *
               (2 * (uint64_t)t->rows * pitches + 8 * (uint64_t)t->rows);
}

static uint64_t dq_bytes(const nv_bwd_plan *t)
{
    return (uint64_t)t->key_stages * 2 * (uint64_t)t->keys *
           (uint64_t)(t->dim_padded + t->dim_v_padded + 16);
}

/* The kernels' switch values (cl/nvidia/flash_bwd_mma_switches.clh). */
typedef struct nv_bwd_switches {
    FLASHCL_NV_BWD_SWITCHES(SWITCH_FIELD)
} nv_bwd_switches;

/* The tunables within the legal values the switch list declares, the
 * work-group within the device's, and both kernels within local memory. */
static bool tiles_fit(const device_caps *caps, const nv_bwd_plan *t)
{
    const uint64_t limit = caps->local_mem ? caps->local_mem : 49152;
    const nv_bwd_switches tunables = {.NVB_WARPS = t->warps,
                                      .NVB_ROWS = t->rows,
                                      .NVB_KEYS = t->keys,
                                      .NVB_ROW_STAGES = t->row_stages,
                                      .NVB_KEY_STAGES = t->key_stages};
    const nv_bwd_switches *values = &tunables; /* SWITCH_CHECK_TUNABLE's */
    switch_fault found = {NULL, 0}, *fault = &found;
    FLASHCL_NV_BWD_SWITCHES(SWITCH_CHECK_TUNABLE)
    return !found.name &&
           (!caps->max_work_group ||
            (size_t)t->warps * 32 <= caps->max_work_group) &&
           dkdv_bytes(t) <= limit && dq_bytes(t) <= limit;
}

/* The default tiles: 4 warps (64 keys, 64 rows a work-group); the dK/dV
 * kernel's query step as large as local memory allows up to 32 rows (its
 * K and V block takes most of it at D = 128), one stage; 32 keys a dQ
 * step (its Q and dO fragments take 64 registers at D = 128; ptxas: 254
 * registers, no spills), two stages where they fit (on an H200 1-3 % above
 * one, docs/experiments.md "tensor-core backward").
 * FLASHCL_NVB_TILE=warps,rows,keys[,row_stages,key_stages] overrides them
 * when legal (experiments). */
static bool modifies_scores(const problem *p)
{
    return variant_active(p, VARIANT_SOFTCAP) ||
           variant_active(p, VARIANT_ALIBI) ||
           variant_active(p, VARIANT_BIAS) || variant_active(p, VARIANT_MASK);
}

/* FLASHCL_NVB_TILE over the defaults `base` (its three-field form keeps
 * their tiles and stages), replacing *t when legal. */
static void forced_tiles(const device_caps *caps, const nv_bwd_plan *base,
                         nv_bwd_plan *t)
{
    const char *text = dev_getenv("FLASHCL_NVB_TILE");
    nv_bwd_plan forced = *base;
    if (!text)
        return;
    const int n = sscanf(text, "%d,%d,%d,%d,%d", &forced.warps,
                         &forced.rows, &forced.keys, &forced.row_stages,
                         &forced.key_stages);
    if ((n == 3 || n == 5) && tiles_fit(caps, &forced)) {
        forced.reason = "FLASHCL_NVB_TILE";
        forced.origin[0] = '\0';
        *t = forced;
    }
}

/* The tuning key of the backward (nv_mma_bwd_tiles.h): not a forward
 * path (no list holds it), only what tuning_choose, flashcl_path_tunable
 * and flashcl_context_force_tiles read of one. */
const kernel_path nv_mma_bwd_tuning = {
    .name = NV_MMA_BWD_TUNING_PATH,
    .summary = "the tensor-core backward's tiles (flashcl tune --backward)",
    .tunables = nv_mma_bwd_tunables,
    .tunable_count = sizeof nv_mma_bwd_tunables / sizeof nv_mma_bwd_tunables[0],
};

/* The tuner's forced set, else FLASHCL_TUNING_FILE's or the compiled
 * database's entry for path "nv_mma_bwd", over the defaults in *t; a set
 * tiles_fit refuses is noted (the call's last-error text) and the next
 * source, finally the defaults, runs. */
static void tuned_tiles(const device_caps *caps, const problem *p,
                        const char *forced, nv_bwd_plan *t)
{
    const int dim = t->dim_padded > t->dim_v_padded ? t->dim_padded
                                                    : t->dim_v_padded;
    tuning_choice c;
    int next = 0;
    while (tuning_choose(caps, &nv_mma_bwd_tuning, p, dim, forced, &next,
                         &c)) {
        nv_bwd_plan tuned = *t;
        const tile_params *v = &c.params;
        tuned.warps = tile_params_get(v, "warps", t->warps);
        tuned.rows = tile_params_get(v, "rows", t->rows);
        tuned.keys = tile_params_get(v, "keys", t->keys);
        tuned.row_stages = tile_params_get(v, "row_stages", t->row_stages);
        tuned.key_stages = tile_params_get(v, "key_stages", t->key_stages);
        if (tiles_fit(caps, &tuned)) {
            tuned.reason = c.forced ? "forced candidate" : "tuning DB";
            snprintf(tuned.origin, sizeof tuned.origin, "%s", c.origin);
            *t = tuned;
            return;
        }
        tuning_refused(&c, NV_MMA_BWD_TUNING_PATH,
                       "outside the kernel's switches, or its local memory "
                       "or work-group size exceeds the device's");
    }
}

static void choose_tiles(const device_caps *caps, const problem *p,
                         const char *forced, nv_bwd_plan *t)
{
    t->warps = 4;
    t->row_stages = 1;
    t->key_stages = 2;
    /* dQ at D = 128 with every score modifier on: 32 keys spilled (ptxas
     * sm_90: 12 bytes), 16 did not */
    t->keys = t->dim_padded > 64 && modifies_scores(p) ? 16 : 32;
    t->rows = 32;
    t->reason = "default: 4 warps, 32 query rows a dK/dV step";
    if (!tiles_fit(caps, t)) {
        t->rows = 16;
        t->reason = "default: 4 warps, 16 query rows a dK/dV step (32 "
                    "exceed local memory)";
    }
    if (!tiles_fit(caps, t))
        t->key_stages = 1;
    const nv_bwd_plan defaults = *t;
    tuned_tiles(caps, p, forced, t);
    forced_tiles(caps, &defaults, t);
}

static bool rows_aligned(const problem *p, const tensor_view *const grads[4])
{
    const tensor_view *views[3] = {&p->q, &p->k, &p->v};
    for (int i = 0; i < 3; ++i)
        if (!view_rows_aligned(views[i], p->elem_size, 16))
            return false;
    for (int i = 0; i < 4; ++i)
        if (grads && grads[i] && grads[i]->present &&
            !view_rows_aligned(grads[i], p->elem_size, 16))
            return false;
    return true;
}

/* Why the tensor-core backward does not run p here, or NULL. */
static const char *refusal(const device_caps *caps, const problem *p,
                           const tensor_view *const grads[4], char *why,
                           size_t why_cap)
{
    const char *only = dev_getenv("FLASHCL_PORTABLE_ONLY");
    const char *force = getenv("FLASHCL_PATH");
    if (only && *only && strcmp(only, "0") != 0)
        return "FLASHCL_PORTABLE_ONLY is set";
    if (force && *force && !strcmp(force, "portable"))
        return "FLASHCL_PATH=portable";
    if (force && *force && strcmp(force, "nv_mma") != 0 &&
        strcmp(force, "nv_wgmma") != 0) {
        snprintf(why, why_cap, "FLASHCL_PATH=%s has no backward of its own",
                 force);
        return why;
    }
    if (!(caps->klass == DEVICE_CLASS_GPU_NVIDIA && caps->nv_cc_major >= 8) &&
        !nv_emulated(caps))
        return "not an NVIDIA GPU of compute capability >= 8.0";
    if (p->infer.varlen_q || p->infer.kv == KV_VARLEN)
        return "packed batches (varlen) run on the portable kernels";
    if (p->dtype != FLASHCL_DTYPE_FP16 && p->dtype != FLASHCL_DTYPE_BF16)
        return "fp16/bf16 storage only";
    if (round16(p->head_dim) > 128 || round16(p->head_dim_v) > 128)
        return "head dims up to 128 only (its dK and dV accumulators and "
               "K/V block in 48 KiB of local memory)";
    if (!rows_aligned(p, grads))
        return "needs contiguous, 16-byte-aligned rows in q, k, v, d_o, "
               "d_q, d_k and d_v";
    return build_failed_here(caps, why, why_cap);
}

void nv_mma_bwd_plan(const device_caps *caps, const problem *p,
                     const tensor_view *const grads[4], nv_bwd_plan *plan)
{
    nv_mma_bwd_plan_forced(caps, p, grads, NULL, plan);
}

void nv_mma_bwd_plan_forced(const device_caps *caps, const problem *p,
                            const tensor_view *const grads[4],
                            const char *forced, nv_bwd_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    plan->dim_padded = round16(p->head_dim);
    plan->dim_v_padded = round16(p->head_dim_v);
    char failed[200];
    const char *why = refusal(caps, p, grads, failed, sizeof failed);
    if (!why) {
        choose_tiles(caps, p, forced, plan);
        if (!tiles_fit(caps, plan))
            why = "its smallest tiles exceed this device's local memory or "
                  "work-group size";
    }
    if (why) {
        snprintf(plan->why_not, sizeof plan->why_not, "nv_mma: %s", why);
        return;
    }
    plan->chosen = true;
}

/* The kernel checks its tiles against this; beyond 1 MiB (its legal
 * range) no tile it takes comes near the limit. */
static int local_mem_switch(const device_caps *caps)
{
    if (!caps->local_mem)
        return 49152;
    return caps->local_mem > 1048576 ? 1048576 : (int)caps->local_mem;
}

/* The build options, every switch of the list checked against its legal
 * values; false (and `why`) when one is illegal or they do not fit. */
static bool emit_options(const device_caps *caps, const problem *p,
                         const nv_bwd_plan *plan, char *options, size_t cap,
                         char *why, size_t why_cap)
{
    const nv_bwd_switches switches = {
        .NV_MMA = 1,
        .NV_EMULATE = caps->klass != DEVICE_CLASS_GPU_NVIDIA,
        .CAUSAL = p->right >= 0,
        .DTYPE = (int)p->dtype,
        .HEAD_DIM = plan->dim_padded,
        .HEAD_DIM_V = plan->dim_v_padded,
        .NVB_WARPS = plan->warps,
        .NVB_ROWS = plan->rows,
        .NVB_KEYS = plan->keys,
        .NVB_ROW_STAGES = plan->row_stages,
        .NVB_KEY_STAGES = plan->key_stages,
        .LOCAL_MEM_BYTES = local_mem_switch(caps)};
    const nv_bwd_switches *values = &switches; /* SWITCH_EMIT's names */
    switch_fault found = {NULL, 0}, *fault = &found;
    options_buf buf = options_begin(options, cap), *out = &buf;
    options_add(out, "-cl-std=CL1.2%s", verbose_enabled() ? "" : " -w");
    FLASHCL_NV_BWD_SWITCHES(SWITCH_EMIT)
    variants_add_defines(p, out);
    return options_fault_why(out, found, "tensor-core backward", why,
                             why_cap);
}

bool nv_mma_bwd_options(const device_caps *caps, const problem *p,
                        const nv_bwd_plan *plan, char *options, size_t cap)
{
    char why[160];
    return emit_options(caps, p, plan, options, cap, why, sizeof why);
}

flashcl_status nv_mma_bwd_program(flashcl_context *ctx, const problem *p,
                                  const nv_bwd_plan *plan,
                                  compiled_program **program)
{
    char options[1024], why[160];
    if (!emit_options(&ctx->caps, p, plan, options, sizeof options, why,
                      sizeof why))
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED, "%s", why);
    const program_request request = {
        "flash_bwd_mma.cl", options, {"flashcl_bwd_dkdv", "flashcl_bwd_dq"},
        2};
    const flashcl_status status =
        program_cache_get(ctx, &request, program, NULL);
    if (status == FLASHCL_ERROR_BUILD_FAILED) {
        const char *log = flashcl_context_last_error(ctx);
        driver_failure_note(&build_failure, &ctx->caps, log);
        if (verbose_enabled())
            fprintf(stderr, "flashcl: the tensor-core backward could not be "
                            "built, the portable backward runs instead: %s\n",
                    log);
    }
    return status;
}

void nv_mma_bwd_log(const nv_bwd_plan *plan)
{
    if (!verbose_enabled())
        return;
    if (plan->chosen)
        fprintf(stderr, "flashcl: backward dK/dV and dQ on nv_mma (%d warps, "
                        "%d rows and %d keys a step, %d and %d stages: %s)\n",
                plan->warps, plan->rows, plan->keys, plan->row_stages,
                plan->key_stages,
                plan->origin[0] ? plan->origin : plan->reason);
    else
        fprintf(stderr, "flashcl: backward on portable (%s)\n",
                plan->why_not);
}

bool nv_mma_bwd_describe(const device_caps *caps, const problem *p,
                         const nv_bwd_plan *plan, flashcl_variant_info *info)
{
    snprintf(info->path, sizeof info->path, "nv_mma");
    snprintf(info->kernel_file, sizeof info->kernel_file, "flash_bwd_mma.cl");
    info->head_dim_padded = plan->dim_padded;
    info->block_m = plan->warps * 16;
    info->block_n = plan->rows;
    info->work_group_size = plan->warps * 32;
    snprintf(info->reason, sizeof info->reason,
             "flashcl_bwd_delta (portable), flashcl_bwd_dkdv and "
             "flashcl_bwd_dq on mma.sync: %d keys or rows a work-group, %d "
             "query rows a dK/dV step (%d stages), %d keys a dQ step (%d "
             "stages) (%.60s)",
             plan->warps * 16, plan->rows, plan->row_stages, plan->keys,
             plan->key_stages,
             /* the whole origin in `tuning` */
             plan->origin[0] ? plan->origin : plan->reason);
    snprintf(info->tuning, sizeof info->tuning, "%s", plan->origin);
    return nv_mma_bwd_options(caps, p, plan, info->build_options,
                              sizeof info->build_options);
}
