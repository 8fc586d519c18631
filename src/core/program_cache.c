/* Runtime compilation of kernel variants and the per-context cache of
 * compiled programs, keyed by everything that changes the binary. */
#include "../internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

bool variant_key_equal(const variant_key *a, const variant_key *b)
{
    return a->family == b->family && a->head_dim_padded == b->head_dim_padded &&
           a->block_m == b->block_m && a->block_n == b->block_n &&
           a->wg_size == b->wg_size && a->vec == b->vec &&
           a->dtype == b->dtype && a->causal == b->causal &&
           a->dim_contiguous == b->dim_contiguous &&
           a->head_dim_v_padded == b->head_dim_v_padded &&
           a->window_left == b->window_left && a->softcap == b->softcap &&
           a->alibi == b->alibi && a->mask == b->mask &&
           a->sinks == b->sinks && a->bias == b->bias &&
           a->top_left == b->top_left;
}

static char *build_log(cl_program program, cl_device_id device)
{
    size_t size = 0;
    if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, NULL,
                              &size) != CL_SUCCESS)
        return NULL;
    char *log = malloc(size + 1);
    if (!log)
        return NULL;
    if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log,
                              NULL) != CL_SUCCESS)
        size = 0;
    log[size] = '\0';
    return log;
}

/* Compile one variant; on failure the context's error holds the log. */
flashcl_status build_program_file(flashcl_context *ctx, const char *file,
                                  const char *options, cl_program *out)
{
    char msg[512];
    char *source = load_kernel_source(file, msg, sizeof msg);
    if (!source)
        return set_error(ctx, FLASHCL_ERROR_BUILD_FAILED, "%s", msg);
    cl_int err;
    const char *text = source;
    *out = clCreateProgramWithSource(ctx->cl_ctx, 1, &text, NULL, &err);
    free(source);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "clCreateProgramWithSource(%s): %s", file,
                         cl_error_name(err));
    err = clBuildProgram(*out, 1, &ctx->device, options, NULL, NULL);
    /* Some drivers return an error with a successful build status (NVIDIA
     * with verbose logs): trust the status. */
    cl_build_status build_status = CL_BUILD_ERROR;
    clGetProgramBuildInfo(*out, ctx->device, CL_PROGRAM_BUILD_STATUS,
                          sizeof build_status, &build_status, NULL);
    if (build_status != CL_BUILD_SUCCESS) {
        char what[1400];
        snprintf(what, sizeof what, "building %s with \"%s\" failed: %s", file,
                 options, cl_error_name(err));
        return set_build_error(ctx, what, build_log(*out, ctx->device));
    }
    return FLASHCL_SUCCESS;
}

static flashcl_status compile_variant(flashcl_context *ctx,
                                      const variant_key *key,
                                      cached_kernel *entry)
{
    const char *file = kernel_family_file(key->family);
    char options[1024];
    variant_build_options(key, &ctx->caps, options, sizeof options);
    double start = now_ms();
    flashcl_status status =
        build_program_file(ctx, file, options, &entry->program);
    if (status != FLASHCL_SUCCESS)
        return status;
    cl_int err;
    entry->kernel =
        clCreateKernel(entry->program, "flashcl_attention_fwd", &err);
    if (err != CL_SUCCESS)
        return set_build_error(ctx, "clCreateKernel(flashcl_attention_fwd)",
                               build_log(entry->program, ctx->device));
    entry->compile_ms = now_ms() - start;
    return FLASHCL_SUCCESS;
}

static void free_entry(cached_kernel *entry)
{
    if (entry->kernel)
        clReleaseKernel(entry->kernel);
    if (entry->program)
        clReleaseProgram(entry->program);
    pthread_mutex_destroy(&entry->launch_lock);
    free(entry);
}

flashcl_status get_kernel(flashcl_context *ctx, const variant_key *key,
                          cached_kernel **out, bool *compiled_now)
{
    if (compiled_now)
        *compiled_now = false;
    /* One lock over lookup and compile: two threads asking for the same new
     * variant compile it once. */
    pthread_mutex_lock(&ctx->cache_lock);
    for (cached_kernel *entry = ctx->kernels; entry; entry = entry->next)
        if (variant_key_equal(&entry->key, key)) {
            *out = entry;
            pthread_mutex_unlock(&ctx->cache_lock);
            return FLASHCL_SUCCESS;
        }
    flashcl_status status = FLASHCL_SUCCESS;
    cached_kernel *entry = calloc(1, sizeof *entry);
    if (!entry) {
        status = set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                           "allocating a kernel cache entry");
    } else {
        entry->key = *key;
        pthread_mutex_init(&entry->launch_lock, NULL);
        status = compile_variant(ctx, key, entry);
        if (status == FLASHCL_SUCCESS) {
            entry->next = ctx->kernels;
            ctx->kernels = entry;
            *out = entry;
            if (compiled_now)
                *compiled_now = true;
        } else {
            free_entry(entry);
        }
    }
    pthread_mutex_unlock(&ctx->cache_lock);
    return status;
}

void release_kernel_cache(flashcl_context *ctx)
{
    cached_kernel *entry = ctx->kernels;
    while (entry) {
        cached_kernel *next = entry->next;
        free_entry(entry);
        entry = next;
    }
    ctx->kernels = NULL;
}
