/* What every fused path shares: the base build options, the forward
 * kernels' arguments (set from the one list in cl/common/kernel_args.clh),
 * the one-kernel launch, and compile-then-launch for a call. The NVIDIA
 * paths' own helpers are in nv_common.c. */
#include "paths/path.h"
#include "problem/arg_setters.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG2E 1.4426950408889634

/* Host types of the argument kinds (kernel_args.clh); the variant part is
 * in problem.h. */
#define FLASHCL_HTYPE_STORAGE_IN cl_mem
#define FLASHCL_HTYPE_STORAGE_OUT cl_mem
#define FLASHCL_HTYPE_FLOAT_OUT cl_mem
#define FLASHCL_HTYPE_LSE_OUT cl_mem
#define FLASHCL_HTYPE_INT cl_int
#define FLASHCL_HTYPE_LONG cl_long

typedef struct base_args {
    FLASHCL_FWD_BASE_ARGS(FLASHCL_HOST_FIELD)
} base_args;

static void fill_base_args(flashcl_context *ctx, const problem *p,
                           base_args *a)
{
    FILL_QKVO_ARGS(a, p);
    FILL_SHAPE_ARGS(a, p);
    a->lse = p->lse.present ? p->lse.given : ctx->dummy;
    a->lse_stride = ulong4_from(p->lse.stride);
    const uint64_t bases[4] = {p->q.base, p->k.base, p->v.base, p->o.base};
    a->base = ulong4_from(bases);
    a->lse_base = p->lse.present ? p->lse.base : 0;
    a->scale_log2 = p->scale * LOG2E;
    a->write_lse = p->lse.present ? 1 : 0;
}

static cl_int set_base_args(cl_kernel kernel, cl_uint *index,
                            const base_args *a, bool fp64)
{
    cl_int err = CL_SUCCESS;
    FLASHCL_FWD_BASE_ARGS(SET_ONE)
    return err;
}

static cl_int set_forward_args(cl_kernel kernel, const base_args *base,
                               const variant_args *variant, bool fp64)
{
    const cl_int abi = FLASHCL_KERNEL_ABI_VERSION;
    cl_uint index = 0;
    cl_int err = clSetKernelArg(kernel, index++, sizeof abi, &abi);
    if (err == CL_SUCCESS)
        err = set_base_args(kernel, &index, base, fp64);
    if (err == CL_SUCCESS)
        err = set_variant_args(kernel, &index, variant, fp64);
    return err;
}

static cl_int set_forward_kernel_args(flashcl_context *ctx, cl_kernel kernel,
                                      const problem *p, cl_uint *next_index)
{
    base_args base;
    fill_base_args(ctx, p, &base);
    const cl_int err = set_forward_args(kernel, &base, &p->vargs,
                                        p->dtype == FLASHCL_DTYPE_FP64);
    *next_index = 1 + 0
#define COUNT_ONE(kind, name) +1
                  FLASHCL_FWD_ARGS(COUNT_ONE);
#undef COUNT_ONE
    return err;
}

void plan_compiler_flags(options_buf *out)
{
    /* -w: compiler warnings would reach the user's stderr on some drivers
     * (PoCL); FLASHCL_VERBOSE keeps them and prints the build log. */
    options_add(out, "-cl-std=CL1.2 -cl-mad-enable%s",
                verbose_enabled() ? "" : " -w");
}

void plan_base_options_add(const problem *p, const kernel_plan *plan,
                           options_buf *out)
{
    plan_compiler_flags(out);
    options_add(out,
                " -DFLASHCL_HEAD_DIM=%d -DFLASHCL_HEAD_DIM_V=%d "
                "-DFLASHCL_BLOCK_M=%d -DFLASHCL_BLOCK_N=%d "
                "-DFLASHCL_WG_SIZE=%d -DFLASHCL_DTYPE=%d -DFLASHCL_CAUSAL=%d",
                plan->head_dim_padded, plan->head_dim_v_padded,
                plan->block_m, plan->block_n, plan->wg_size, (int)p->dtype,
                p->right >= 0 ? 1 : 0);
}

void plan_base_options(const problem *p, const kernel_plan *plan, char *buf,
                       size_t cap)
{
    options_buf out = options_begin(buf, cap);
    plan_base_options_add(p, plan, &out);
    options_pad_overflow(&out);
}

void plan_refuse(kernel_plan *plan, flashcl_status status, const char *format,
                 ...)
{
    if (plan->refused[0])
        return;
    va_list args;
    va_start(args, format);
    vsnprintf(plan->refused, sizeof plan->refused, format, args);
    va_end(args);
    plan->refused_status = status;
}

flashcl_status plan_refusal(flashcl_context *ctx, const kernel_plan *plan)
{
    if (!plan->refused[0])
        return FLASHCL_SUCCESS;
    return set_error(ctx, plan->refused_status, "%s", plan->refused);
}

bool options_fault_why(const options_buf *out, switch_fault fault,
                       const char *who, char *why, size_t why_cap)
{
    if (out->overflow)
        snprintf(why, why_cap, "internal limit: the %s's kernel build "
                 "options need more than %zu bytes", who, out->cap - 1);
    else if (fault.name)
        snprintf(why, why_cap, "internal error: the %s planned %s=%d, "
                 "outside the values its kernel accepts (docs/switches.md)",
                 who, fault.name, fault.value);
    return !out->overflow && !fault.name;
}

void plan_emit_options(kernel_plan *plan, char *buf, size_t cap,
                       const problem *p, switch_emitter *emit,
                       const void *values)
{
    options_buf out = options_begin(buf, cap);
    switch_fault fault = {NULL, 0};
    emit(p, values, &out, &fault);
    plan_options_done(plan, &out, fault);
}

void plan_options_done(kernel_plan *plan, const options_buf *out,
                       switch_fault fault)
{
    char who[64], why[256];
    snprintf(who, sizeof who, "%s path",
             plan->path ? plan->path->name : "chosen");
    if (!options_fault_why(out, fault, who, why, sizeof why))
        plan_refuse(plan, FLASHCL_ERROR_UNSUPPORTED, "%s", why);
}

program_request plan_request(const kernel_plan *plan, int which)
{
    program_request request = {which ? plan->extra_source : plan->source,
                               which ? plan->extra_options : plan->options,
                               {NULL}, plan->kernel_count};
    for (int i = 0; i < plan->kernel_count; ++i)
        request.kernel_names[i] = plan->kernel_names[i];
    if (which && plan->extra_kernel) {
        request.kernel_names[0] = plan->extra_kernel;
        request.kernel_count = 1;
    }
    return request;
}

flashcl_status plan_programs(flashcl_context *ctx, const kernel_plan *plan,
                             compiled_program *programs[2],
                             double *compiled_ms)
{
    programs[0] = programs[1] = NULL;
    if (compiled_ms)
        *compiled_ms = 0;
    const flashcl_status refusal = plan_refusal(ctx, plan);
    if (refusal != FLASHCL_SUCCESS)
        return refusal;
    for (int which = 0; which < (plan->extra_source ? 2 : 1); ++which) {
        const program_request request = plan_request(plan, which);
        bool compiled_now = false;
        flashcl_status status =
            plan->patch && which == 0
                ? program_cache_get_patched(
                              ctx, &request, plan->patch, plan->patch_kind,
                              &programs[which], &compiled_now)
                        : program_cache_get(ctx, &request, &programs[which],
                                            &compiled_now);
        if (status != FLASHCL_SUCCESS)
            return status;
        if (compiled_ms && compiled_now)
            *compiled_ms += programs[which]->compile_ms;
    }
    return FLASHCL_SUCCESS;
}

flashcl_status plan_and_build(flashcl_context *ctx, const problem *p,
                              kernel_plan *plan,
                              compiled_program *programs[2],
                              double *compiled_ms)
{
    /* A tuner's forced tiles (flashcl_context_force_tiles) apply to every
     * plan of this call, the re-plan after a failed build included. */
    char forced[sizeof ctx->forced_tiles];
    const char *forced_tiles =
        context_forced_tiles(ctx, forced, sizeof forced);
    choose_plan_forced(&ctx->caps, p, plan, NULL, 0, forced_tiles);
    flashcl_status status = plan_programs(ctx, plan, programs, compiled_ms);
    if (status != FLASHCL_ERROR_BUILD_FAILED || !plan->build_failed)
        return status;
    char why[512];
    snprintf(why, sizeof why, "%s", flashcl_context_last_error(ctx));
    const char *failed = plan->path->name;
    plan->build_failed(&ctx->caps, why);
    choose_plan_forced(&ctx->caps, p, plan, NULL, 0, forced_tiles);
    if (plan->build_failed)
        return status; /* the path did not take itself out: keep its error */
    double more_ms = 0;
    status = plan_programs(ctx, plan, programs, &more_ms);
    if (compiled_ms)
        *compiled_ms += more_ms;
    if (status == FLASHCL_SUCCESS) {
        begin_call(ctx); /* the failure is a note now, not the call's error */
        note_for_call("path %s could not be built (%.*s); ran %s", failed,
                      (int)strcspn(why, "\n"), why, plan->path->name);
    }
    return status;
}

cl_int enqueue_with_args(flashcl_context *ctx, cl_command_queue queue,
                         const problem *p, compiled_program *program,
                         int which, const trailing_args *trailing,
                         const size_t global[3], const size_t *local,
                         cl_uint num_wait, const cl_event *wait_list,
                         cl_event *event)
{
    cl_kernel kernel = program->kernels[which];
    pthread_mutex_lock(&program->launch_lock);
    cl_uint index = 0;
    cl_int err = set_forward_kernel_args(ctx, kernel, p, &index);
    if (err == CL_SUCCESS && trailing)
        err = trailing->set(kernel, index, trailing->values);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, kernel, 3, NULL, global, local,
                                     num_wait, wait_list, event);
    pthread_mutex_unlock(&program->launch_lock);
    return err;
}

flashcl_status enqueue_forward(flashcl_context *ctx, cl_command_queue queue,
                               const problem *p, const kernel_plan *plan,
                               compiled_program *program,
                               const trailing_args *trailing,
                               cl_uint num_wait, const cl_event *wait_list,
                               cl_event *event)
{
    const cl_int err =
        enqueue_with_args(ctx, queue, p, program, 0, trailing, plan->global,
                          plan->local, num_wait, wait_list, event);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "launching %s (path %s, D=%d, BM=%d, BN=%d, WG=%d): %s",
                         program->source, plan->path->name,
                         plan->head_dim_padded, plan->block_m, plan->block_n,
                         plan->wg_size, cl_error_name(err));
    return FLASHCL_SUCCESS;
}

/* programs[1] over the plan's extra NDRange (extra_global, else global). */
static flashcl_status enqueue_extra(flashcl_context *ctx,
                                    cl_command_queue queue, const problem *p,
                                    const kernel_plan *plan,
                                    compiled_program *program,
                                    const trailing_args *trailing,
                                    cl_uint num_wait,
                                    const cl_event *wait_list, cl_event *event)
{
    const bool own = plan->extra_global[0] != 0;
    const cl_int err = enqueue_with_args(
        ctx, queue, p, program, 0, trailing,
        own ? plan->extra_global : plan->global,
        own ? plan->extra_local : plan->local, num_wait, wait_list, event);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "launching %s after %s (path %s): %s",
                         program->source, plan->source, plan->path->name,
                         cl_error_name(err));
    return FLASHCL_SUCCESS;
}

flashcl_status enqueue_forward_then_extra(
    flashcl_context *ctx, cl_command_queue queue, const problem *p,
    const kernel_plan *plan, compiled_program *const programs[2],
    const trailing_args *trailing, const trailing_args *extra_trailing,
    cl_uint num_wait, const cl_event *wait_list, cl_event *event)
{
    if (!programs[1])
        return enqueue_forward(ctx, queue, p, plan, programs[0], trailing,
                               num_wait, wait_list, event);
    cl_event first_done = NULL;
    flashcl_status status =
        enqueue_forward(ctx, queue, p, plan, programs[0], trailing, num_wait,
                        wait_list, &first_done);
    if (status != FLASHCL_SUCCESS)
        return status;
    status = enqueue_extra(ctx, queue, p, plan, programs[1], extra_trailing,
                           1, &first_done, event);
    clReleaseEvent(first_done);
    return status;
}

flashcl_status launch_forward_kernel(flashcl_context *ctx,
                                     cl_command_queue queue, const problem *p,
                                     const kernel_plan *plan,
                                     compiled_program *const programs[2],
                                     cl_uint num_wait,
                                     const cl_event *wait_list,
                                     cl_event *event)
{
    return enqueue_forward(ctx, queue, p, plan, programs[0], NULL, num_wait,
                           wait_list, event);
}

size_t plan_local_mem(const device_caps *caps)
{
    return caps->local_mem ? (size_t)caps->local_mem : 32768;
}

bool plan_local_mem_fits(const device_caps *caps, size_t need, char *why,
                         size_t cap)
{
    const size_t limit = plan_local_mem(caps);
    if (need <= limit)
        return true;
    snprintf(why, cap, "the tiles need %zu bytes of local memory, the "
             "device has %zu", need, limit);
    return false;
}

size_t tile_reach_find(const tile_reach *first, size_t count, size_t stride,
                       const device_caps *caps, int head_dim)
{
    const bool cpu = caps->klass == DEVICE_CLASS_CPU;
    for (size_t i = 0; i < count; ++i) {
        const tile_reach *row =
            (const tile_reach *)((const char *)first + i * stride);
        if (row->cpu == cpu && head_dim <= row->max_head_dim)
            return i;
    }
    return count - 1;
}

void plan_forward_kernel(kernel_plan *plan, const char *source)
{
    plan->source = source;
    plan->kernel_names[0] = "flashcl_attention_fwd";
    plan->kernel_count = 1;
}

void plan_row_blocks(const problem *p, kernel_plan *plan)
{
    const size_t blocks =
        (size_t)((p->seqlen_q + plan->block_m - 1) / plan->block_m);
    plan->local[0] = (size_t)plan->wg_size;
    plan->local[1] = plan->local[2] = 1;
    plan->global[0] = blocks * (size_t)plan->wg_size;
    plan->global[1] = (size_t)p->heads_q;
    plan->global[2] = (size_t)p->batch;
}

flashcl_status run_fused(flashcl_context *ctx, cl_command_queue queue,
                         const problem *p, cl_uint num_wait,
                         const cl_event *wait_list, cl_event *event)
{
    kernel_plan plan;
    compiled_program *programs[2];
    flashcl_status status = plan_and_build(ctx, p, &plan, programs, NULL);
    if (status != FLASHCL_SUCCESS)
        return status;
    return plan.path->launch(ctx, queue, p, &plan, programs, num_wait,
                             wait_list, event);
}

/* ---- the portable kernels' conventions, which the split-KV kernels
 * share (the portable path and the split-KV service read them) ---- */

/* Padded head dims keep the number of compiled variants small while
 * wasting at most 15 (31 above 128) lanes of work per row. */
int portable_padded_head_dim(int64_t head_dim)
{
    int step = head_dim <= 128 ? 16 : 32;
    return (int)((head_dim + step - 1) / step * step);
}

/* Vectors as wide as the device prefers for floats (16 on AVX-512, 8 on
 * AVX2 under PoCL): wider ones change the calling convention there, and
 * PoCL warns about it on every compile. */
int portable_vector_width(const device_caps *caps)
{
    unsigned width = caps->preferred_vector_float ? caps->preferred_vector_float
                                                  : caps->native_vector_float;
    int vec = 4;
    while (vec < 16 && (unsigned)vec * 2 <= width)
        vec *= 2;
    return vec;
}

/* The compensated row sum and accumulator (cl/portable/flash_fwd.cl) keep
 * fp32 error at unit roundoff for any seqlen_k; they need a second
 * accumulator array. On the H200 that cost nothing at D_v <= 64 and made
 * D_v = 128 3.1x slower (fp32, B=8 H=16 N=2048: 114 vs 37 ms; the two
 * 128-float arrays spill), so GPUs take plain sums above 64 (error grows
 * with seqlen_k there: 2e-5 at 1M keys, 6.6e-5 at 4M, for evenly spread
 * attention). CPUs (PoCL: within noise) always compensate. */
bool portable_compensated(const device_caps *caps, int head_dim_v_padded)
{
    return caps->klass == DEVICE_CLASS_CPU || head_dim_v_padded <= 64;
}
