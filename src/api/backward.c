/* flashcl_attention_backward: checks the forward descriptor (through the
 * problem module) and the backward descriptor, then enqueues the portable
 * backward kernels (cl/portable/flash_bwd.cl): Delta, dK/dV, dQ and, with
 * sinks, d_sinks, each waiting for the one before. */
#include "api/api.h"
#include "core/dev_env.h"
#include "paths/path.h"
#include "paths/nv_mma_bwd.h"
#include "paths/nv_mma_bwd_tiles.h"
#include "paths/portable_bwd_tiles.h"
#include "paths/tuning.h"
#include "problem/problem.h"
#include "problem/variants.h"
#include "paths/switches.h"
#include "portable/flash_bwd_args.clh"
#include "portable/flash_bwd_switches.clh"
#include "reference/reference.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The resolved backward descriptor. */
typedef struct bwd_views {
    tensor_view d_o, d_q, d_k, d_v, d_sinks;
} bwd_views;

void flashcl_backward_desc_init(flashcl_backward_desc *desc)
{
    if (!desc)
        return;
    memset(desc, 0, sizeof *desc);
    desc->struct_size = sizeof *desc;
}

static flashcl_status check_bwd_desc(flashcl_context *ctx,
                                     const flashcl_backward_desc *bwd)
{
    const flashcl_status status = problem_check_desc_header(
        ctx, bwd, sizeof *bwd, "bwd", "FLASHCL_BACKWARD_DESC_INIT");
    if (status != FLASHCL_SUCCESS)
        return status;
    if (bwd->nondeterministic != 0 && bwd->nondeterministic != 1)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "bwd.nondeterministic = %d: must be 0 or 1",
                         bwd->nondeterministic);
    return FLASHCL_SUCCESS;
}

/* Forward features the backward cannot serve (yet), named, and a
 * FLASHCL_PATH the forward refuses too. A known path without a backward of
 * its own runs the portable backward. */
static flashcl_status refuse_features(flashcl_context *ctx, const problem *p)
{
    char unknown_path[256];
    if (forced_path_unknown(unknown_path, sizeof unknown_path))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE, "%s",
                         unknown_path);
    const char *what = NULL;
    if (p->infer.append)
        what = "an append (k_new/v_new)";
    else if (p->infer.kv == KV_PAGED)
        what = "paged KV (block_table)";
    else if (p->infer.kv == KV_CACHE)
        what = "a KV cache (cache_seqlens)";
    else if (p->infer.status.present)
        what = "infer_status (the forward's clamp counters)";
    else if (p->infer.num_splits > 1)
        what = "num_splits > 1";
    else if (p->lse_fp64)
        what = "lse_dtype fp64 (it reads an fp32 lse)";
    if (what)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "the backward does not support %s; see "
                         "docs/backward.md", what);
    return FLASHCL_SUCCESS;
}

static flashcl_status require_lse(flashcl_context *ctx, const problem *p)
{
    if (!p->lse.present)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                         "desc.lse.buffer is NULL: the backward reads the "
                         "forward's LSE");
    return FLASHCL_SUCCESS;
}

static flashcl_status resolve_bwd_views(flashcl_context *ctx,
                                        const problem *p,
                                        const flashcl_backward_desc *bwd,
                                        bwd_views *out)
{
    const int64_t d = p->head_dim, dv = p->head_dim_v;
    const view_shape d_sinks = {"d_sinks", {1, (uint64_t)p->heads_q, 1, 1},
                                sizeof(float), p->layout,
                                STRIDES_PACKED_HEADS};
    const view_request views[5] = {
        {&bwd->d_o, rows_shape(p, "d_o", false, dv), &out->d_o, true},
        {&bwd->d_q, rows_shape(p, "d_q", false, d), &out->d_q, true},
        {&bwd->d_k, rows_shape(p, "d_k", true, d), &out->d_k, true},
        {&bwd->d_v, rows_shape(p, "d_v", true, dv), &out->d_v, true},
        {&bwd->d_sinks, d_sinks, &out->d_sinks, false},
    };
    const flashcl_status status =
        resolve_views(ctx, views, 5, PROBLEM_FOR_LAUNCH);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (out->d_sinks.present && !variant_active(p, VARIANT_SINKS))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "bwd.d_sinks is set but desc.sinks is not: there is "
                         "no sink logit to differentiate");
    return FLASHCL_SUCCESS;
}

/* Outputs overlap nothing (each other, any input), and no two elements of
 * one output share bytes. */
static flashcl_status check_outputs(flashcl_context *ctx, const problem *p,
                                    const bwd_views *w)
{
    named_view all[10 + PROBLEM_MAX_VARIANTS] = {
        {&w->d_q, "d_q"}, {&w->d_k, "d_k"}, {&w->d_v, "d_v"},
        {&w->d_sinks, "d_sinks"}, {&w->d_o, "d_o"}, {&p->q, "q"},
        {&p->k, "k"}, {&p->v, "v"}, {&p->o, "o"}, {&p->lse, "lse"}};
    size_t count = 10;
    for (size_t i = 0; i < variant_count(); ++i)
        if (p->variant_tensor[i].present)
            all[count++] =
                (named_view){&p->variant_tensor[i], variant_at(i)->name};
    return check_output_aliasing(ctx, all, 4, count);
}

/* ---- launching ------------------------------------------------------ */

#define FLASHCL_HTYPE_STORAGE_IN cl_mem
#define FLASHCL_HTYPE_STORAGE_OUT cl_mem
#define FLASHCL_HTYPE_FLOAT_OUT cl_mem
#define FLASHCL_HTYPE_REAL_BUF cl_mem
#define FLASHCL_HTYPE_INT cl_int
#define FLASHCL_HTYPE_LONG cl_long
#define FLASHCL_HTYPE_INT_IN cl_mem

typedef struct bwd_args {
    FLASHCL_BWD_ARGS(FLASHCL_HOST_FIELD)
} bwd_args;

enum { KERNEL_DELTA, KERNEL_DKDV, KERNEL_DQ, KERNEL_DSINKS, KERNEL_DQ_SUM };

static void fill_args(flashcl_context *ctx, const problem *p,
                      const bwd_views *w, cl_mem delta, cl_mem dq_part,
                      bwd_args *a)
{
    FILL_QKVO_ARGS(a, p);
    FILL_SHAPE_ARGS(a, p);
    a->d_o = w->d_o.given;
    a->lse = p->lse.given;
    a->delta = delta;
    a->dq_part = dq_part ? dq_part : ctx->dummy;
    a->d_q = w->d_q.given;
    a->d_k = w->d_k.given;
    a->d_v = w->d_v.given;
    a->d_sinks = w->d_sinks.present ? w->d_sinks.given : ctx->dummy;
    a->d_o_stride = ulong4_from(w->d_o.stride);
    a->lse_stride = ulong4_from(p->lse.stride);
    a->d_q_stride = ulong4_from(w->d_q.stride);
    a->d_k_stride = ulong4_from(w->d_k.stride);
    a->d_v_stride = ulong4_from(w->d_v.stride);
    const uint64_t in[4] = {p->q.base, p->k.base, p->v.base, p->o.base};
    const uint64_t out[4] = {w->d_o.base, w->d_q.base, w->d_k.base,
                             w->d_v.base};
    a->in_base = ulong4_from(in);
    a->out_base = ulong4_from(out);
    a->lse_base = p->lse.base;
    a->d_sinks_base = w->d_sinks.present ? w->d_sinks.base : 0;
    a->d_sinks_stride = w->d_sinks.present ? w->d_sinks.stride[1] : 0;
    a->batch = (cl_int)p->batch;
    a->heads_q = (cl_int)p->heads_q;
    a->scale = p->scale;
    const inference *packed = &p->infer;
    a->cu_q = packed->varlen_q ? packed->cu_q.given : ctx->dummy;
    a->cu_k = packed->kv == KV_VARLEN ? packed->cu_k.given : ctx->dummy;
    const uint64_t len_base[4] = {packed->cu_q.base, packed->cu_k.base, 0, 0};
    const uint64_t len_stride[4] = {packed->cu_q.stride[0],
                                    packed->cu_k.stride[0], 0, 0};
    a->len_base = ulong4_from(len_base);
    a->len_stride = ulong4_from(len_stride);
    a->total_q = (cl_int)packed->total_q;
    a->total_k = (cl_int)packed->total_k;
    a->top_left = packed->top_left ? 1 : 0;
}

static cl_int set_real_arg(cl_kernel k, cl_uint i, const double *v, bool fp64)
{
    const float f = (float)*v;
    return fp64 ? clSetKernelArg(k, i, sizeof *v, v)
                : clSetKernelArg(k, i, sizeof f, &f);
}

#define SET_MEM_(k, i, v) clSetKernelArg(k, i, sizeof(cl_mem), v)
#define SET_STORAGE_IN(k, i, v, fp64) SET_MEM_(k, i, v)
#define SET_STORAGE_OUT(k, i, v, fp64) SET_MEM_(k, i, v)
#define SET_FLOAT_OUT(k, i, v, fp64) SET_MEM_(k, i, v)
#define SET_FLOAT_IN(k, i, v, fp64) SET_MEM_(k, i, v)
#define SET_REAL_BUF(k, i, v, fp64) SET_MEM_(k, i, v)
#define SET_INT_IN(k, i, v, fp64) SET_MEM_(k, i, v)
#define SET_INT(k, i, v, fp64) clSetKernelArg(k, i, sizeof(cl_int), v)
#define SET_LONG(k, i, v, fp64) clSetKernelArg(k, i, sizeof(cl_long), v)
#define SET_ULONG(k, i, v, fp64) clSetKernelArg(k, i, sizeof(cl_ulong), v)
#define SET_ULONG4(k, i, v, fp64) clSetKernelArg(k, i, sizeof(cl_ulong4), v)
#define SET_REAL(k, i, v, fp64) set_real_arg(k, i, v, fp64)
#define SET_ONE(kind, name)                                                    \
    if (err == CL_SUCCESS)                                                     \
        err = SET_##kind(kernel, index, &a->name, fp64);                       \
    ++index;

static cl_int set_args(cl_kernel kernel, const bwd_args *a,
                       const variant_args *variants, bool fp64)
{
    const cl_int abi = FLASHCL_KERNEL_ABI_VERSION;
    cl_uint index = 0;
    cl_int err = clSetKernelArg(kernel, index++, sizeof abi, &abi);
    FLASHCL_BWD_ARGS(SET_ONE)
    if (err == CL_SUCCESS)
        err = set_variant_args(kernel, &index, variants, fp64);
    return err;
}

/* The backward kernels' switch values on this device
 * (cl/portable/flash_bwd_switches.clh). */
typedef struct bwd_plan {
    FLASHCL_PORTABLE_BWD_SWITCHES(SWITCH_FIELD)
    nv_bwd_plan nv; /* nv.chosen: dK/dV and dQ on the tensor-core kernels */
    /* The tuning entry (or the tuner's forced set) behind the tunables,
     * "" for the hand rules: describe's reason and `tuning` name it. */
    char origin[300];
} bwd_plan;

static int padded_dim(int64_t dim, int vec)
{
    const int step = vec > 8 ? vec : 8;
    return (int)((dim + step - 1) / step * step);
}

static size_t bwd_local_bytes(const bwd_plan *plan, size_t real_size)
{
    /* dK/dV's tiles: Q and dO, each transposed and row-major, LSE, Delta. */
    return (size_t)plan->BWD_TILE *
           (size_t)(2 * (plan->HEAD_DIM + plan->HEAD_DIM_V) + 2) * real_size;
}

/* Bytes of dQ's parts with BWD_FUSED_DQ: one [rows of Delta, D] per key
 * block. */
static size_t fused_dq_part_bytes(const problem *p, const bwd_plan *plan,
                                  size_t real_size)
{
    const size_t block = (size_t)plan->BWD_WG * (size_t)plan->BWD_ROWS;
    const size_t blocks = ((size_t)p->seqlen_k + block - 1) / block;
    return blocks * (size_t)(p->batch * p->heads_q * p->seqlen_q) *
           (size_t)plan->HEAD_DIM * real_size;
}

/* CPUs only (a work-group runs on one thread there, so the few work-items
 * that make a tile's part of dQ idle no core): dQ from the dS the dK/dV
 * pass already has saves the dQ pass's recomputation of S and dP (7 matmul
 * units become 5); on PoCL, fp32 B 1 H 8 N 2048 D 64, 160 -> 130 ms, causal
 * 107 -> 82 ms (docs/backward.md, "Speed"). The parts must fit the split-KV
 * scratch limit, and the block's dS and K the local memory beside the
 * tiles (on Intel's CPU runtime, D 64 fits only so; fused there, 1.4x at
 * D 64, 3x at D 32); else the separate dQ pass. */
static bool fused_dq_fits(flashcl_context *ctx, const problem *p,
                          const bwd_plan *plan, size_t real_size)
{
    const size_t block = (size_t)plan->BWD_WG * (size_t)plan->BWD_ROWS;
    const size_t local =
        bwd_local_bytes(plan, real_size) +
        block * (size_t)(plan->BWD_TILE + plan->HEAD_DIM) * real_size;
    size_t cap = 0;
    return local <= ctx->caps.local_mem &&
           split_scratch_cap(ctx, &cap) == FLASHCL_SUCCESS &&
           fused_dq_part_bytes(p, plan, real_size) <= cap;
}

/* A tuned set's legality: the tunables within the values the switch list
 * declares (not a copy of its ranges), the kernel's rule that the tile is
 * a multiple of the vector, the work-group within the device's, the tiles
 * within local memory, the fused dQ's parts within their limits (its
 * caller turns a fused dQ that does not fit off first), and at most 512
 * rows a group (PoCL keeps every work-item's private arrays on
 * one thread's stack: 1024 overflowed it, plan_backward's comment). */
static bool portable_bwd_fits(flashcl_context *ctx, const problem *p,
                              const bwd_plan *plan, size_t real_size)
{
    const bwd_plan *values = plan; /* SWITCH_CHECK_TUNABLE's */
    switch_fault found = {NULL, 0}, *fault = &found;
    FLASHCL_PORTABLE_BWD_SWITCHES(SWITCH_CHECK_TUNABLE)
    return !found.name && plan->BWD_TILE % plan->BWD_VEC == 0 &&
           plan->BWD_WG * plan->BWD_ROWS <= 512 &&
           (size_t)plan->BWD_WG <= ctx->caps.max_work_group &&
           bwd_local_bytes(plan, real_size) <= ctx->caps.local_mem &&
           (!plan->BWD_FUSED_DQ || fused_dq_fits(ctx, p, plan, real_size));
}

/* The tuner's forced set, else FLASHCL_TUNING_FILE's or the compiled
 * database's entry for path "portable_bwd", over the hand rules' plan; a
 * set portable_bwd_fits refuses is noted (the call's last-error text)
 * and the next source, finally the hand rules, runs. */
static void tuned_backward(flashcl_context *ctx, const problem *p,
                           const char *forced, bwd_plan *plan)
{
    const size_t real_size = p->dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
    const int dim =
        plan->HEAD_DIM > plan->HEAD_DIM_V ? plan->HEAD_DIM : plan->HEAD_DIM_V;
    tuning_choice c;
    int next = 0;
    while (tuning_choose(&ctx->caps, &portable_bwd_tuning, p, dim, forced,
                         &next, &c)) {
        bwd_plan tuned = *plan;
        const tile_params *v = &c.params;
        tuned.BWD_WG = tile_params_get(v, "wg", plan->BWD_WG);
        tuned.BWD_ROWS = tile_params_get(v, "rows", plan->BWD_ROWS);
        tuned.BWD_VEC = tile_params_get(v, "vec", plan->BWD_VEC);
        tuned.BWD_TILE = tile_params_get(v, "tile", plan->BWD_TILE);
        tuned.BWD_FUSED_DQ = tile_params_get(v, "fused_dq",
                                             plan->BWD_FUSED_DQ);
        tuned.BWD_DQ_IN_MEMORY =
            tile_params_get(v, "dq_in_memory", plan->BWD_DQ_IN_MEMORY);
        tuned.BWD_PREFETCH = tile_params_get(v, "prefetch",
                                             plan->BWD_PREFETCH);
        /* the padded dims follow the vector (the kernel's #error rule) */
        tuned.HEAD_DIM = padded_dim(p->head_dim, tuned.BWD_VEC);
        tuned.HEAD_DIM_V = padded_dim(p->head_dim_v, tuned.BWD_VEC);
        /* The parts' scratch grows with B H N: an entry tuned on one
         * problem keeps its other switches on a larger one, dQ apart, as
         * the hand rules fall back. */
        if (tuned.BWD_FUSED_DQ && !fused_dq_fits(ctx, p, &tuned, real_size))
            tuned.BWD_FUSED_DQ = 0;
        if (portable_bwd_fits(ctx, p, &tuned, real_size)) {
            snprintf(tuned.origin, sizeof tuned.origin, "%s", c.origin);
            *plan = tuned;
            return;
        }
        tuning_refused(&c, PORTABLE_BWD_TUNING_PATH,
                       "outside the kernel's switches, or its work-group, "
                       "local memory or fused dQ's scratch exceeds the "
                       "device's");
    }
}

/* The tuner's forced set for the backward key `key` (flashcl tune
 * --backward), NULL when the forced set is another path's. */
static const char *forced_for(const char *spec, const char *key)
{
    const size_t n = strlen(key);
    return spec && !strncmp(spec, key, n) && spec[n] == ':' ? spec + n + 1
                                                            : NULL;
}

/* CPUs: vectors as wide as the forward's (16 on AVX-512), tiles of two
 * vectors (their four copies of Q and dO, 32 KiB at D = 64, stay in the
 * L1 cache), 128 work-items of 4 keys or rows each: 512 share the tile
 * loads, and each tile vector loaded serves 4 FMAs (docs/experiments.md,
 * "Portable backward"; PoCL keeps every work-item's private arrays on one
 * thread's stack, which 1024 rows a group overflowed at ROWS 2); other
 * devices: float4 over 16-row tiles and 64 work-items of one row, to keep
 * the private arrays small (untuned). */
/* w: the call's views (NULL when describing without them: dO taken to
 * have O's layout, as its rules say). */
static bwd_plan plan_backward(flashcl_context *ctx, const problem *p,
                              const bwd_views *w)
{
    const bool cpu = (ctx->caps.type & CL_DEVICE_TYPE_CPU) != 0;
    /* Oclgrind says CPU and GPU, and has no prefetch instruction. */
    const bool cpu_only = cpu && !(ctx->caps.type & CL_DEVICE_TYPE_GPU);
    const bool fp64 = p->dtype == FLASHCL_DTYPE_FP64;
    const size_t real_size = fp64 ? 8 : 4;
    int vec = cpu ? portable_vector_width(&ctx->caps) : 4;
    if (fp64 && vec > 2)
        vec /= 2;
    bwd_plan plan = {(int)p->dtype, padded_dim(p->head_dim, vec),
                     padded_dim(p->head_dim_v, vec), cpu ? 128 : 64,
                     cpu ? 4 : 1, cpu ? 2 * vec : 16, vec,
                     p->q.stride[3] == 1 && p->k.stride[3] == 1 &&
                         p->v.stride[3] == 1 &&
                         (w ? w->d_o : p->o).stride[3] == 1,
                     p->right >= 0 ? 1 : 0,
                     p->infer.varlen_q ? 1 : 0,
                     p->infer.kv == KV_VARLEN ? 1 : 0, cpu_only ? 1 : 0,
                     cpu ? 1 : 0, 0, {0}, ""};
    const tensor_view *const grads[4] = {w ? &w->d_o : NULL,
                                         w ? &w->d_q : NULL,
                                         w ? &w->d_k : NULL,
                                         w ? &w->d_v : NULL};
    /* the tuner's forced set for the backward (flashcl tune --backward) */
    char forced[sizeof ctx->forced_tiles];
    const char *spec = context_forced_tiles(ctx, forced, sizeof forced);
    nv_mma_bwd_plan_forced(&ctx->caps, p, grads,
                           forced_for(spec, NV_MMA_BWD_TUNING_PATH),
                           &plan.nv);
    /* Oclgrind, a CPU to the planner, checks the other row counts so. */
    const char *rows = dev_getenv("FLASHCL_BWD_ROWS");
    if (rows && atoi(rows) >= 1 && atoi(rows) <= 4)
        plan.BWD_ROWS = atoi(rows);
    while (plan.BWD_WG > 1 && (size_t)plan.BWD_WG > ctx->caps.max_work_group)
        plan.BWD_WG /= 2;
    /* PoCL runs padding work-items in full: no more than the longer side. */
    const int64_t longer = p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k;
    while (cpu && plan.BWD_WG > 16 &&
           plan.BWD_WG / 2 * plan.BWD_ROWS >= longer)
        plan.BWD_WG /= 2;
    /* In half the local memory at most; the tile stays a multiple of the
     * vector (the padded dims are multiples of 8 or 16, so of any smaller
     * vector). */
    while (plan.BWD_VEC > 2 &&
           bwd_local_bytes(&plan, real_size) > ctx->caps.local_mem / 2) {
        if (plan.BWD_TILE > plan.BWD_VEC)
            plan.BWD_TILE /= 2;
        else
            plan.BWD_TILE = plan.BWD_VEC /= 2;
    }
    const char *fused = dev_getenv("FLASHCL_BWD_FUSED_DQ");
    const bool want_fused = fused ? atoi(fused) == 1 : cpu_only;
    plan.BWD_FUSED_DQ = want_fused && !plan.nv.chosen &&
                        fused_dq_fits(ctx, p, &plan, real_size);
    /* The developer knobs above are experiments on the hand rules: a
     * database entry would silently replace what they ask for. */
    if (!plan.nv.chosen && !rows && !fused)
        tuned_backward(ctx, p, forced_for(spec, PORTABLE_BWD_TUNING_PATH),
                       &plan);
    return plan;
}

/* The kernels' build options for the plan, every switch of the list
 * checked against its legal values; false (and `why`) when one is
 * illegal or the options do not fit. */
static bool plan_options(const problem *p, const bwd_plan *plan,
                         char *options, size_t cap, char *why,
                         size_t why_cap)
{
    const bwd_plan *values = plan; /* SWITCH_EMIT's names */
    switch_fault found = {NULL, 0}, *fault = &found;
    options_buf buf = options_begin(options, cap), *out = &buf;
    options_add(out, "-cl-std=CL1.2%s", verbose_enabled() ? "" : " -w");
    FLASHCL_PORTABLE_BWD_SWITCHES(SWITCH_EMIT)
    variants_add_defines(p, out);
    return options_fault_why(out, found, "portable backward", why, why_cap);
}

static const char *const bwd_kernel_names[] = {
    "flashcl_bwd_delta", "flashcl_bwd_dkdv", "flashcl_bwd_dq",
    "flashcl_bwd_dsinks", "flashcl_bwd_dq_sum"};

static flashcl_status build_program(flashcl_context *ctx, const problem *p,
                                    const bwd_plan *plan,
                                    compiled_program **program)
{
    char options[1024], why[160];
    if (!plan_options(p, plan, options, sizeof options, why, sizeof why))
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED, "%s", why);
    const program_request request = {
        "flash_bwd.cl",
        options,
        {bwd_kernel_names[0], bwd_kernel_names[1], bwd_kernel_names[2],
         bwd_kernel_names[3], bwd_kernel_names[4]},
        5};
    return program_cache_get(ctx, &request, program, NULL);
}

/* One kernel of `program` over (rows, heads, batch): work-groups of wg
 * work-items, each owning per_group rows. */
typedef struct launch_step {
    int kernel;
    size_t rows, heads, batch;
    compiled_program *program;
    int wg, per_group;
} launch_step;

static flashcl_status enqueue_step(flashcl_context *ctx,
                                   cl_command_queue queue,
                                   const launch_step *step, const bwd_args *a,
                                   const problem *p, cl_uint num_wait,
                                   const cl_event *wait, cl_event *done)
{
    compiled_program *program = step->program;
    const int wg = step->wg;
    cl_kernel kernel = program->kernels[step->kernel];
    size_t group = 0;
    cl_int err = clGetKernelWorkGroupInfo(kernel, ctx->device,
                                          CL_KERNEL_WORK_GROUP_SIZE,
                                          sizeof group, &group, NULL);
    const size_t local = (size_t)wg;
    if (err == CL_SUCCESS && group < local)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "backward kernel %d runs at most %zu work-items a "
                         "group here, fewer than its %zu",
                         step->kernel, group, local);
    const size_t per_group = (size_t)step->per_group;
    const size_t global[3] = {(step->rows + per_group - 1) / per_group * local,
                              step->heads, step->batch};
    const size_t local_size[3] = {local, 1, 1};
    pthread_mutex_lock(&program->launch_lock);
    if (err == CL_SUCCESS)
        err = set_args(kernel, a, &p->vargs, p->dtype == FLASHCL_DTYPE_FP64);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, kernel, 3, NULL, global,
                                     local_size, num_wait, wait, done);
    pthread_mutex_unlock(&program->launch_lock);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "enqueueing backward kernel %d: %s", step->kernel,
                         cl_error_name(err));
    return FLASHCL_SUCCESS;
}

/* The dK/dV step (over keys) or the dQ step (over queries): kernel
 * nv_kernel of the mma.sync program where there is one, else kernel
 * `kernel` of the portable program. */
static launch_step gradient_step(int kernel, int nv_kernel, size_t rows,
                                 size_t heads, size_t batch,
                                 compiled_program *program,
                                 compiled_program *nv_program,
                                 const bwd_plan *plan)
{
    if (nv_program)
        return (launch_step){nv_kernel, rows, heads, batch, nv_program,
                             plan->nv.warps * 32, plan->nv.warps * 16};
    return (launch_step){kernel, rows, heads, batch, program, plan->BWD_WG,
                         plan->BWD_WG * plan->BWD_ROWS};
}

static flashcl_status enqueue_all(flashcl_context *ctx, cl_command_queue queue,
                                  compiled_program *program,
                                  compiled_program *nv_program,
                                  const problem *p, const bwd_plan *plan,
                                  const bwd_args *a, bool want_sinks,
                                  cl_uint num_wait, const cl_event *wait_list,
                                  cl_event *event)
{
    const size_t b = (size_t)p->batch, hq = (size_t)p->heads_q,
                 hkv = (size_t)p->heads_kv, nq = (size_t)p->seqlen_q,
                 nk = (size_t)p->seqlen_k;
    const int wg = plan->BWD_WG;
    launch_step steps[4];
    int count = 0;
    if (nq) /* dK/dV and dQ read Delta */
        steps[count++] =
            (launch_step){KERNEL_DELTA, nq, hq, b, program, wg, wg};
    if (nk)
        steps[count++] = gradient_step(KERNEL_DKDV, 0, nk, hkv, b, program,
                                       nv_program, plan);
    if (nq && plan->BWD_FUSED_DQ)
        steps[count++] =
            (launch_step){KERNEL_DQ_SUM, nq, hq, b, program, wg, wg};
    else if (nq)
        steps[count++] = gradient_step(KERNEL_DQ, 1, nq, hq, b, program,
                                       nv_program, plan);
    if (want_sinks)
        steps[count++] =
            (launch_step){KERNEL_DSINKS, hq, 1, 1, program, wg, wg};
    if (count == 0)
        return api_empty_call(ctx, queue, num_wait, wait_list, event);
    /* Each step waits for the one before, so an out-of-order queue keeps
     * the order too; the last step's event covers the whole call. */
    cl_event previous = NULL;
    flashcl_status status = FLASHCL_SUCCESS;
    for (int s = 0; s < count && status == FLASHCL_SUCCESS; ++s) {
        const bool last = s == count - 1;
        cl_event done = NULL;
        status = enqueue_step(ctx, queue, &steps[s], a, p,
                              s == 0 ? num_wait : 1,
                              s == 0 ? wait_list : &previous,
                              last && !event ? NULL : &done);
        if (previous)
            clReleaseEvent(previous);
        previous = done;
    }
    if (status == FLASHCL_SUCCESS && event)
        *event = previous;
    else if (previous)
        clReleaseEvent(previous);
    return status;
}

static flashcl_status run_backward(flashcl_context *ctx,
                                   cl_command_queue queue, const problem *p,
                                   const bwd_views *w, cl_uint num_wait,
                                   const cl_event *wait_list, cl_event *event)
{
    if (p->backend == FLASHCL_BACKEND_REFERENCE) {
        const reference_bwd_call call = {
            .queue = queue,
            .p = p,
            .views = {&w->d_o, &w->d_q, &w->d_k, &w->d_v, &w->d_sinks},
            .num_wait = num_wait,
            .wait_list = wait_list,
            .event = event};
        return launch_reference_backward(ctx, &call);
    }
    compiled_program *program = NULL;
    bwd_plan plan = plan_backward(ctx, p, w);
    flashcl_status status = FLASHCL_SUCCESS;
    compiled_program *nv_program = NULL;
    if (plan.nv.chosen) {
        status = nv_mma_bwd_program(ctx, p, &plan.nv, &nv_program);
        if (status == FLASHCL_ERROR_BUILD_FAILED) {
            /* recorded: the portable backward from now on, whose plan
             * (and so program: BWD_FUSED_DQ) may differ */
            plan = plan_backward(ctx, p, w);
            status = FLASHCL_SUCCESS;
        }
    }
    if (status == FLASHCL_SUCCESS)
        status = build_program(ctx, p, &plan, &program);
    nv_mma_bwd_log(&plan.nv);
    if (!plan.nv.chosen && verbose_enabled())
        fprintf(stderr, "flashcl: portable backward: %d work-items of %d "
                        "rows, tiles of %d, vectors of %d, fused dQ %d, dQ "
                        "in memory %d, prefetch %d (%s)\n",
                plan.BWD_WG, plan.BWD_ROWS, plan.BWD_TILE, plan.BWD_VEC,
                plan.BWD_FUSED_DQ, plan.BWD_DQ_IN_MEMORY, plan.BWD_PREFETCH,
                plan.origin[0] ? plan.origin : "hand rules");
    if (status != FLASHCL_SUCCESS)
        return status;
    const size_t real_size = p->dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
    const size_t rows = (size_t)(p->batch * p->heads_q * p->seqlen_q);
    cl_int err = CL_SUCCESS;
    /* Released right after the enqueue: OpenCL frees it only once the
     * kernels that use it are done. */
    cl_mem delta = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE,
                                  (rows ? rows : 1) * real_size, NULL, &err);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "allocating the backward's Delta (%zu bytes): %s",
                         rows * real_size, cl_error_name(err));
    cl_mem dq_part = NULL;
    if (plan.BWD_FUSED_DQ) {
        const size_t bytes = fused_dq_part_bytes(p, &plan, real_size);
        dq_part = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE,
                                 bytes ? bytes : 1, NULL, &err);
        if (err != CL_SUCCESS) {
            clReleaseMemObject(delta);
            return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                             "allocating the backward's dQ parts (%zu "
                             "bytes): %s",
                             bytes, cl_error_name(err));
        }
    }
    bwd_args a;
    fill_args(ctx, p, w, delta, dq_part, &a);
    status = enqueue_all(ctx, queue, program, nv_program, p, &plan, &a,
                         w->d_sinks.present,
                         num_wait, wait_list, event);
    clReleaseMemObject(delta);
    if (dq_part)
        clReleaseMemObject(dq_part);
    return status;
}

/* The backward's problem from `desc` for `mode`, once `bwd` is checked
 * (describing may leave it NULL: then only the forward's outputs count). */
static flashcl_status backward_problem(flashcl_context *ctx,
                                       const flashcl_attention_desc *desc,
                                       const flashcl_backward_desc *bwd,
                                       problem_mode mode, problem *p)
{
    flashcl_status status = bwd || mode == PROBLEM_FOR_LAUNCH
                                ? check_bwd_desc(ctx, bwd)
                                : FLASHCL_SUCCESS;
    if (status == FLASHCL_SUCCESS)
        status = problem_from_desc(ctx, desc, mode, p);
    return status == FLASHCL_SUCCESS ? refuse_features(ctx, p) : status;
}

flashcl_status flashcl_attention_backward(flashcl_context *ctx,
                                          cl_command_queue queue,
                                          const flashcl_attention_desc *desc,
                                          const flashcl_backward_desc *bwd,
                                          cl_uint num_events_in_wait_list,
                                          const cl_event *event_wait_list,
                                          cl_event *event)
{
    flashcl_status status = api_begin_enqueue(
        ctx, &queue, num_events_in_wait_list, event_wait_list);
    problem p;
    if (status == FLASHCL_SUCCESS)
        status = backward_problem(ctx, desc, bwd, PROBLEM_FOR_LAUNCH, &p);
    if (status == FLASHCL_SUCCESS)
        status = require_lse(ctx, &p);
    bwd_views w;
    if (status == FLASHCL_SUCCESS)
        status = resolve_bwd_views(ctx, &p, bwd, &w);
    if (status == FLASHCL_SUCCESS)
        status = check_outputs(ctx, &p, &w);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (p.batch == 0 || p.heads_q == 0)
        return api_empty_call(ctx, queue, num_events_in_wait_list,
                              event_wait_list, event);
    return run_backward(ctx, queue, &p, &w, num_events_in_wait_list,
                        event_wait_list, event);
}

/* ---- describing the plan -------------------------------------------- */

/* The plan run_backward runs for p, in the forward's describe fields. */
static flashcl_status describe_plan(flashcl_context *ctx, const problem *p,
                                    bool want_sinks,
                                    flashcl_variant_info *info)
{
    memset(info, 0, sizeof *info);
    variants_describe(p->variants, info->variants, sizeof info->variants);
    info->num_splits = 1;
    if (p->backend == FLASHCL_BACKEND_REFERENCE) {
        snprintf(info->path, sizeof info->path, "reference");
        snprintf(info->kernel_file, sizeof info->kernel_file,
                 "reference_attention.cl");
        snprintf(info->reason, sizeof info->reason,
                 "the reference backend: CLBlast GEMMs and ref_bwd_ds per "
                 "KV head and query-row chunk under the scratch limit");
        return FLASHCL_SUCCESS;
    }
    const bwd_plan plan = plan_backward(ctx, p, NULL);
    if (plan.nv.chosen)
        return nv_mma_bwd_describe(&ctx->caps, p, &plan.nv, info)
                   ? FLASHCL_SUCCESS
                   : set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                               "the tensor-core backward's build options "
                               "do not fit");
    char why[160];
    if (!plan_options(p, &plan, info->build_options,
                      sizeof info->build_options, why, sizeof why))
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED, "%s", why);
    snprintf(info->path, sizeof info->path, "portable");
    snprintf(info->kernel_file, sizeof info->kernel_file, "flash_bwd.cl");
    info->head_dim_padded = plan.HEAD_DIM;
    info->block_m = plan.BWD_WG * plan.BWD_ROWS;
    info->block_n = plan.BWD_TILE;
    info->work_group_size = plan.BWD_WG;
    info->vector_width = plan.BWD_VEC;
    snprintf(info->reason, sizeof info->reason,
             "%s, %s, %s%s%s: %d rows or keys per work-item, tiles of %d "
             "rows in local memory, vectors of %d (%.60s)",
             bwd_kernel_names[0],
             plan.BWD_FUSED_DQ ? "flashcl_bwd_dkdv (and dQ's part per key "
                                 "block)"
                               : bwd_kernel_names[1],
             bwd_kernel_names[plan.BWD_FUSED_DQ ? KERNEL_DQ_SUM : KERNEL_DQ],
             want_sinks ? ", " : "", want_sinks ? bwd_kernel_names[3] : "",
             plan.BWD_ROWS, plan.BWD_TILE, plan.BWD_VEC,
             /* the whole origin in `tuning` */
             plan.origin[0] ? plan.origin : "hand rules");
    snprintf(info->tuning, sizeof info->tuning, "%s", plan.origin);
    snprintf(info->skipped, sizeof info->skipped, "%s", plan.nv.why_not);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_describe_backward(flashcl_context *ctx,
                                         const flashcl_attention_desc *desc,
                                         const flashcl_backward_desc *bwd,
                                         flashcl_variant_info *info)
{
    flashcl_status status = begin_call_out(ctx, info, "info");
    if (status != FLASHCL_SUCCESS)
        return status;
    problem p;
    status = backward_problem(ctx, desc, bwd, PROBLEM_FOR_PLANNING, &p);
    if (status != FLASHCL_SUCCESS)
        return status;
    const bool want_sinks = bwd && bwd->d_sinks.buffer;
    if (want_sinks && !variant_active(&p, VARIANT_SINKS))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "bwd.d_sinks is set but desc.sinks is not: there is "
                         "no sink logit to differentiate");
    return describe_plan(ctx, &p, want_sinks, info);
}

/* ---- host-memory convenience --------------------------------------- */

enum { HOST_Q, HOST_K, HOST_V, HOST_O, HOST_LSE, HOST_DO, HOST_DQ, HOST_DK,
       HOST_DV, HOST_DSINKS, HOST_COUNT };

/* The host call's buffers: the inputs `in` copied, the outputs (d_sinks
 * only when asked for) as large as what they differentiate. */
static void host_sizes(const problem *p, const void *const in[HOST_DO + 1],
                       bool want_sinks, host_mem *m)
{
    problem_packed_bytes(p, &m[HOST_Q].bytes, &m[HOST_K].bytes,
                         &m[HOST_V].bytes, &m[HOST_O].bytes,
                         &m[HOST_LSE].bytes);
    m[HOST_DO].bytes = m[HOST_O].bytes;
    m[HOST_DQ].bytes = m[HOST_Q].bytes;
    m[HOST_DK].bytes = m[HOST_K].bytes;
    m[HOST_DV].bytes = m[HOST_V].bytes;
    m[HOST_DSINKS].bytes = want_sinks ? (size_t)p->heads_q * sizeof(float) : 0;
    m[HOST_DSINKS].skip = !want_sinks;
    for (int i = 0; i <= HOST_DO; ++i)
        m[i].copy_from = in[i];
}

static flashcl_status backward_host_checked(flashcl_context *ctx, problem *p,
                                            const void *const in[HOST_DO + 1],
                                            void *const out[4])
{
    host_mem m[HOST_COUNT] = {{0}};
    host_sizes(p, in, out[3] != NULL, m);
    flashcl_status status = host_mems_make(ctx, m, HOST_COUNT);
    if (status == FLASHCL_SUCCESS)
        status =
            problem_bind_packed(ctx, p, m[HOST_Q].mem, m[HOST_K].mem,
                                m[HOST_V].mem, m[HOST_O].mem, m[HOST_LSE].mem);
    flashcl_backward_desc bwd = FLASHCL_BACKWARD_DESC_INIT;
    bwd.d_o.buffer = m[HOST_DO].mem;
    bwd.d_q.buffer = m[HOST_DQ].mem;
    bwd.d_k.buffer = m[HOST_DK].mem;
    bwd.d_v.buffer = m[HOST_DV].mem;
    bwd.d_sinks.buffer = m[HOST_DSINKS].mem;
    bwd_views w;
    if (status == FLASHCL_SUCCESS)
        status = resolve_bwd_views(ctx, p, &bwd, &w);
    if (status == FLASHCL_SUCCESS)
        status = check_outputs(ctx, p, &w);
    if (status == FLASHCL_SUCCESS)
        status = run_backward(ctx, ctx->queue, p, &w, 0, NULL, NULL);
    if (status == FLASHCL_SUCCESS)
        status = host_mems_read(ctx, &m[HOST_DQ], out, 4);
    host_mems_release(m, HOST_COUNT);
    return status;
}

flashcl_status flashcl_attention_backward_host(
    flashcl_context *ctx, const flashcl_attention_desc *desc, const void *q,
    const void *k, const void *v, const void *o, const float *lse,
    const void *d_o, void *d_q, void *d_k, void *d_v, float *d_sinks)
{
    problem p;
    flashcl_status status = problem_begin_call(
        ctx, desc, PROBLEM_FOR_HOST_CALL, NULL, NULL, &p);
    if (status != FLASHCL_SUCCESS)
        return status;
    const void *const in[HOST_DO + 1] = {q, k, v, o, lse, d_o};
    const char *names[] = {"q", "k", "v", "o", "lse", "d_o"};
    for (int i = 0; i <= HOST_DO; ++i)
        if (!in[i])
            return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                             "host pointer %s is NULL", names[i]);
    if (!d_q || !d_k || !d_v)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                         "host pointer %s is NULL",
                         !d_q ? "d_q" : !d_k ? "d_k" : "d_v");
    p.lse.present = true; /* brought by the call; bound below */
    status = refuse_features(ctx, &p);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (d_sinks && !variant_active(&p, VARIANT_SINKS))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "d_sinks is set but desc.sinks is not: there is no "
                         "sink logit to differentiate");
    if (p.batch == 0 || p.heads_q == 0)
        return FLASHCL_SUCCESS;
    void *const out[4] = {d_q, d_k, d_v, d_sinks};
    return backward_host_checked(ctx, &p, in, out);
}
