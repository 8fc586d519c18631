/* Introspection for tools: device capabilities as flashcl sees them and
 * the variant a problem would run with. */
#include "paths/path.h"
#include "paths/tuning.h"
#include "problem/problem.h"

#include <stdio.h>
#include <string.h>

static void copy_text(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

flashcl_status flashcl_context_device_info(const flashcl_context *ctx,
                                           flashcl_device_info *info)
{
    if (!ctx || !info)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    const device_caps *caps = &ctx->caps;
    memset(info, 0, sizeof *info);
    copy_text(info->name, sizeof info->name, caps->name);
    copy_text(info->vendor, sizeof info->vendor, caps->vendor);
    copy_text(info->platform, sizeof info->platform, caps->platform_name);
    copy_text(info->driver_version, sizeof info->driver_version,
              caps->driver_version);
    copy_text(info->opencl_c_version, sizeof info->opencl_c_version,
              caps->opencl_c_version);
    info->vendor_id = caps->vendor_id;
    info->is_cpu = (caps->type & CL_DEVICE_TYPE_CPU) != 0;
    info->is_gpu = (caps->type & CL_DEVICE_TYPE_GPU) != 0;
    info->compute_units = caps->compute_units;
    info->clock_mhz = caps->clock_mhz;
    info->global_mem_bytes = caps->global_mem;
    info->local_mem_bytes = caps->local_mem;
    info->max_alloc_bytes = caps->max_alloc;
    info->max_work_group_size = caps->max_work_group;
    info->has_fp64 = caps->has_fp64;
    info->has_fp16_ext = caps->has_fp16_ext;
    info->fp16_storage = 1;
    info->bf16_storage = 1;
    info->has_subgroups = caps->has_subgroups;
    info->nv_compute_capability = caps->nv_cc_major * 10 + caps->nv_cc_minor;
    copy_text(info->amd_gfx, sizeof info->amd_gfx, caps->amd_gfx);
    paths_matrix_offer(caps, info->matrix_path, sizeof info->matrix_path);
    paths_summary(caps, info->flashcl_path, sizeof info->flashcl_path);
    tuning_device_key(caps, info->tuning_vendor, sizeof info->tuning_vendor,
                      info->tuning_arch, sizeof info->tuning_arch,
                      info->tuning_device, sizeof info->tuning_device);
    return FLASHCL_SUCCESS;
}

/* Describe and prepare share everything up to the plan. */
static flashcl_status plan_call(flashcl_context *ctx,
                                const flashcl_attention_desc *desc,
                                const void *out, const char *out_name,
                                kernel_plan *plan, problem *p,
                                char *skipped, size_t skipped_cap)
{
    flashcl_status status = problem_begin_call(ctx, desc, PROBLEM_FOR_PLANNING,
                                               out, out_name, p);
    char forced[sizeof ctx->forced_tiles];
    if (status == FLASHCL_SUCCESS)
        choose_plan_forced(&ctx->caps, p, plan, skipped, skipped_cap,
                           context_forced_tiles(ctx, forced, sizeof forced));
    if (status == FLASHCL_SUCCESS)
        status = plan_refusal(ctx, plan);
    return status;
}

flashcl_status flashcl_describe_variant(flashcl_context *ctx,
                                        const flashcl_attention_desc *desc,
                                        flashcl_variant_info *info)
{
    problem p;
    kernel_plan plan;
    char skipped[sizeof info->skipped];
    flashcl_status status = plan_call(ctx, desc, info, "info", &plan, &p,
                                      skipped, sizeof skipped);
    if (status != FLASHCL_SUCCESS)
        return status;
    memset(info, 0, sizeof *info);
    copy_text(info->skipped, sizeof info->skipped, skipped);
    copy_text(info->kernel_file, sizeof info->kernel_file, plan.source);
    copy_text(info->path, sizeof info->path, plan.path->name);
    info->head_dim_padded = plan.head_dim_padded;
    info->block_m = plan.block_m;
    info->block_n = plan.block_n;
    info->work_group_size = plan.wg_size;
    info->vector_width = plan.vec;
    copy_text(info->reason, sizeof info->reason, plan.reason);
    copy_text(info->tuning, sizeof info->tuning, plan.tuning);
    variants_describe(p.variants, info->variants, sizeof info->variants);
    copy_text(info->build_options, sizeof info->build_options, plan.options);
    info->num_splits = plan.split.service ? plan.split.parts : 1;
    /* partial O and LSE, and the fused merge's counts */
    info->split_scratch_bytes = (size_t)plan.split.scratch_bytes +
                                plan.split.counters * sizeof(int32_t);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_prepare(flashcl_context *ctx,
                               const flashcl_attention_desc *desc,
                               double *compile_ms)
{
    problem p;
    kernel_plan plan;
    compiled_program *programs[2];
    const flashcl_status status =
        plan_call(ctx, desc, NULL, NULL, &plan, &p, NULL, 0);
    return status == FLASHCL_SUCCESS
               ? plan_and_build(ctx, &p, &plan, programs, compile_ms)
               : status;
}

flashcl_status flashcl_context_force_tiles(flashcl_context *ctx,
                                           const char *path,
                                           const char *params)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    char spec[sizeof ctx->forced_tiles] = "";
    if (path) {
        if (!find_tuned_path(path))
            return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                             "no kernel path is called \"%.64s\"", path);
        const int n = snprintf(spec, sizeof spec, "%s:%s", path,
                               params ? params : "");
        if (n < 0 || (size_t)n >= sizeof spec)
            return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                             "params are longer than %zu characters",
                             sizeof spec - 40);
    }
    pthread_mutex_lock(&ctx->cache_lock);
    memcpy(ctx->forced_tiles, spec, sizeof spec);
    pthread_mutex_unlock(&ctx->cache_lock);
    return FLASHCL_SUCCESS;
}

const char *flashcl_path_name(int index)
{
    const kernel_path *path = index < 0 ? NULL : path_at((size_t)index);
    return path ? path->name : NULL;
}

flashcl_status flashcl_path_tunable(const char *path, int index,
                                    flashcl_tunable *out)
{
    const kernel_path *kp = find_tuned_path(path);
    if (!path || !out)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    if (!kp || index < 0 || (size_t)index >= kp->tunable_count)
        return FLASHCL_ERROR_INVALID_VALUE;
    const tunable *t = &kp->tunables[index];
    memset(out, 0, sizeof *out);
    copy_text(out->name, sizeof out->name, t->name);
    for (int i = 0; i < tunable_count(t); ++i)
        out->values[out->count++] = t->values[i];
    return FLASHCL_SUCCESS;
}
