/* flashcl_combine_partials: checked by src/problem/combine.c, computed by
 * cl/inference/combine.cl. */
#include "api/api.h"
#include "inference/combine_switches.clh"
#include "paths/path.h"
#include "paths/switches.h"
#include "problem/problem.h"

#include <stdbool.h>
#include <stdio.h>

static cl_ulong4 ulong4_of(const uint64_t v[4])
{
    cl_ulong4 out;
    for (int i = 0; i < 4; ++i)
        out.s[i] = v[i];
    return out;
}

static cl_int set_combine_args(flashcl_context *ctx, cl_kernel k,
                               const combine_problem *p)
{
    const cl_mem op = p->o_part.given, lp = p->lse_part.given, o = p->o.given;
    const cl_mem lse = p->lse.present ? p->lse.given : ctx->dummy;
    const cl_ulong4 op_stride = ulong4_of(p->o_part.stride),
                    lp_stride = ulong4_of(p->lse_part.stride),
                    o_stride = ulong4_of(p->o.stride),
                    lse_stride = ulong4_of(p->lse.stride);
    const cl_ulong op_base = p->o_part.base, lp_base = p->lse_part.base,
                   o_base = p->o.base, lse_base = p->lse.base;
    const cl_ulong op_step = p->o_part_step, lp_step = p->lse_part_step;
    const cl_int write_lse = p->lse.present, parts = (cl_int)p->parts,
                 heads = (cl_int)p->heads, n = (cl_int)p->seqlen_q,
                 dv = (cl_int)p->head_dim_v;
    const struct {
        size_t size;
        const void *value;
    } args[] = {{sizeof op, &op},           {sizeof op_stride, &op_stride},
                {sizeof op_base, &op_base}, {sizeof op_step, &op_step},
                {sizeof lp, &lp},           {sizeof lp_stride, &lp_stride},
                {sizeof lp_base, &lp_base}, {sizeof lp_step, &lp_step},
                {sizeof o, &o},             {sizeof o_stride, &o_stride},
                {sizeof o_base, &o_base},   {sizeof lse, &lse},
                {sizeof lse_stride, &lse_stride},
                {sizeof lse_base, &lse_base},
                {sizeof write_lse, &write_lse},
                {sizeof parts, &parts},     {sizeof heads, &heads},
                {sizeof n, &n},             {sizeof dv, &dv}};
    cl_int err = CL_SUCCESS;
    for (cl_uint i = 0; i < sizeof args / sizeof args[0] && err == CL_SUCCESS;
         ++i)
        err = clSetKernelArg(k, i, args[i].size, args[i].value);
    return err;
}

typedef struct combine_switches {
    FLASHCL_COMBINE_SWITCHES(SWITCH_FIELD)
} combine_switches;

/* The kernel's options, every switch of its list checked; false with the
 * reason in `options` when one is illegal (a checker bug). */
/* Elements of a row per work-item: PoCL pays for work-items more than
 * for the merge (a 4-partial merge of [1024, 4, 64]: 16.6 ms at 1, 0.45 ms
 * at 64; Intel's CPU runtime 0.71 ms at 1, 1.0 at 64: it stays at 1, as
 * GPUs, whose neighbouring work-items' loads coalesce). */
static int combine_dims(const flashcl_context *ctx)
{
    return ctx->caps.pocl ? 64 : 1;
}

static bool combine_options(const flashcl_context *ctx,
                            const combine_problem *p, char *options,
                            size_t cap)
{
    const combine_switches plan = {(int)p->dtype, (int)p->partial_dtype,
                                   p->lse_fp64, combine_dims(ctx)};
    const combine_switches *values = &plan; /* SWITCH_EMIT's names */
    switch_fault found = {NULL, 0}, *fault = &found;
    options_buf buf = options_begin(options, cap), *out = &buf;
    options_add(out, "-cl-std=CL1.2%s", verbose_enabled() ? "" : " -w");
    FLASHCL_COMBINE_SWITCHES(SWITCH_EMIT)
    char why[96];
    if (options_fault_why(out, found, "combine", why, sizeof why))
        return true;
    snprintf(options, cap, "%s", why);
    return false;
}

flashcl_status flashcl_combine_partials(flashcl_context *ctx,
                                        cl_command_queue queue,
                                        const flashcl_combine_desc *desc,
                                        cl_uint num_wait,
                                        const cl_event *wait_list,
                                        cl_event *event)
{
    flashcl_status status = api_begin_enqueue(ctx, &queue, num_wait, wait_list);
    combine_problem p;
    if (status == FLASHCL_SUCCESS)
        status = combine_problem_from_desc(ctx, desc, &p);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (p.empty)
        return api_empty_call(ctx, queue, num_wait, wait_list, event);
    char options[128];
    if (!combine_options(ctx, &p, options, sizeof options))
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED, "combine: %s",
                         options);
    const program_request request = {"combine.cl", options,
                                     {"flashcl_combine"}, 1};
    compiled_program *program;
    status = program_cache_get(ctx, &request, &program, NULL);
    if (status != FLASHCL_SUCCESS)
        return status;
    const size_t dims = (size_t)combine_dims(ctx);
    const size_t global[3] = {((size_t)p.head_dim_v + dims - 1) / dims,
                              (size_t)p.seqlen_q,
                              (size_t)(p.batch * p.heads)};
    pthread_mutex_lock(&program->launch_lock);
    cl_int err = set_combine_args(ctx, program->kernels[0], &p);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, program->kernels[0], 3, NULL,
                                     global, NULL, num_wait, wait_list, event);
    pthread_mutex_unlock(&program->launch_lock);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "launching flashcl_combine: %s", cl_error_name(err));
    return FLASHCL_SUCCESS;
}
