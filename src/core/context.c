/* Context lifetime: own device/queue or wrap the caller's queue. */
#include "core/core.h"
#include "core/scratch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char create_error[4096];

const char *flashcl_last_create_error(void) { return create_error; }

static flashcl_status create_failed(flashcl_status status, const char *fmt,
                                    const char *detail)
{
    snprintf(create_error, sizeof create_error, fmt, detail);
    return status;
}

static flashcl_context *context_alloc(void)
{
    flashcl_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    pthread_mutex_init(&ctx->cache_lock, NULL);
    pthread_cond_init(&ctx->cache_changed, NULL);
    return ctx;
}

/* Common tail of both constructors: probe and the dummy LSE buffer. */
static flashcl_status context_finish(flashcl_context *ctx)
{
    probe_device(ctx->device, &ctx->caps);
    cl_int err;
    ctx->dummy =
        clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, 16, NULL, &err);
    if (err != CL_SUCCESS)
        return create_failed(FLASHCL_ERROR_OPENCL,
                             "clCreateBuffer for a 16-byte buffer failed: %s",
                             cl_error_name(err));
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_create(flashcl_context **out,
                                      const char *device_spec)
{
    create_error[0] = '\0';
    if (!out)
        return create_failed(FLASHCL_ERROR_NULL_ARGUMENT, "%s",
                             "out (flashcl_context **) is NULL");
    *out = NULL;
    cl_device_id device;
    cl_platform_id platform;
    flashcl_status status = select_device(device_spec, &device, &platform,
                                          create_error, sizeof create_error);
    if (status != FLASHCL_SUCCESS)
        return status;
    flashcl_context *ctx = context_alloc();
    if (!ctx)
        return create_failed(FLASHCL_ERROR_OUT_OF_MEMORY, "%s",
                             "allocating the context");
    ctx->device = device;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                     (cl_context_properties)platform, 0};
    cl_int err;
    ctx->cl_ctx = clCreateContext(props, 1, &device, NULL, NULL, &err);
    if (err == CL_SUCCESS)
        ctx->queue = clCreateCommandQueue(ctx->cl_ctx, device,
                                          CL_QUEUE_PROFILING_ENABLE, &err);
    if (err == CL_SUCCESS)
        status = context_finish(ctx);
    else
        status = create_failed(FLASHCL_ERROR_OPENCL,
                               "creating the OpenCL context or queue: %s",
                               cl_error_name(err));
    if (status != FLASHCL_SUCCESS) {
        flashcl_context_release(ctx);
        return status;
    }
    *out = ctx;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_create_from_queue(flashcl_context **out,
                                                 cl_command_queue queue)
{
    create_error[0] = '\0';
    if (!out || !queue)
        return create_failed(FLASHCL_ERROR_NULL_ARGUMENT, "%s",
                             !out ? "out (flashcl_context **) is NULL"
                                  : "queue is NULL");
    *out = NULL;
    flashcl_context *ctx = context_alloc();
    if (!ctx)
        return create_failed(FLASHCL_ERROR_OUT_OF_MEMORY, "%s",
                             "allocating the context");
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT,
                                       sizeof ctx->cl_ctx, &ctx->cl_ctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof ctx->device,
                                    &ctx->device, NULL);
    if (err != CL_SUCCESS) {
        ctx->cl_ctx = NULL;
        flashcl_context_release(ctx);
        return create_failed(FLASHCL_ERROR_OPENCL,
                             "querying the queue's context and device: %s",
                             cl_error_name(err));
    }
    /* Retained, not owned: release drops exactly these retains. */
    clRetainContext(ctx->cl_ctx);
    clRetainCommandQueue(queue);
    ctx->queue = queue;
    flashcl_status status = context_finish(ctx);
    if (status != FLASHCL_SUCCESS) {
        flashcl_context_release(ctx);
        return status;
    }
    *out = ctx;
    return FLASHCL_SUCCESS;
}

void flashcl_context_release(flashcl_context *ctx)
{
    if (!ctx)
        return;
    forget_context_errors(ctx);
    program_cache_release(ctx);
    if (ctx->backend_state && ctx->backend_state_release)
        ctx->backend_state_release(ctx->backend_state);
    context_scratch_release(ctx, true);
    if (ctx->dummy)
        clReleaseMemObject(ctx->dummy);
    /* Both paths hold exactly one reference each to queue and context. */
    if (ctx->queue)
        clReleaseCommandQueue(ctx->queue);
    if (ctx->cl_ctx)
        clReleaseContext(ctx->cl_ctx);
    pthread_mutex_destroy(&ctx->cache_lock);
    pthread_cond_destroy(&ctx->cache_changed);
    free(ctx);
}

cl_command_queue flashcl_context_queue(const flashcl_context *ctx)
{
    return ctx ? ctx->queue : NULL;
}

cl_context flashcl_context_cl_context(const flashcl_context *ctx)
{
    return ctx ? ctx->cl_ctx : NULL;
}

cl_device_id flashcl_context_device(const flashcl_context *ctx)
{
    return ctx ? ctx->device : NULL;
}

bool parse_byte_count(const char *text, size_t *out)
{
    errno = 0;
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, 10);
    if (end == text || errno != 0 || *text == '-')
        return false;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; ++end; break;
    case 'm': case 'M': shift = 20; ++end; break;
    case 'g': case 'G': shift = 30; ++end; break;
    default: break;
    }
    if (*end != '\0' || value == 0 || value > (SIZE_MAX >> shift))
        return false;
    *out = (size_t)value << shift;
    return true;
}

flashcl_status scratch_cap_from(flashcl_context *ctx, size_t set_value,
                                const char *env_name, size_t fallback,
                                size_t *bytes)
{
    const char *env = set_value ? NULL : getenv(env_name);
    *bytes = set_value ? set_value : fallback;
    if (!env || !*env)
        return FLASHCL_SUCCESS;
    if (!parse_byte_count(env, bytes))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "environment variable %s = \"%.64s\" is not a "
                         "positive byte count (e.g. 268435456 or 256M)",
                         env_name, env);
    return FLASHCL_SUCCESS;
}

#define SPLIT_SCRATCH_ENV "FLASHCL_SPLIT_SCRATCH_LIMIT"
#define SPLIT_SCRATCH_DEFAULT ((size_t)256 << 20)

flashcl_status split_scratch_cap(flashcl_context *ctx, size_t *bytes)
{
    pthread_mutex_lock(&ctx->cache_lock);
    const size_t set_value = ctx->split_limit;
    pthread_mutex_unlock(&ctx->cache_lock);
    const uint64_t quarter = ctx->caps.max_alloc ? ctx->caps.max_alloc / 4
                                                 : SPLIT_SCRATCH_DEFAULT;
    return scratch_cap_from(ctx, set_value, SPLIT_SCRATCH_ENV,
                            quarter < SPLIT_SCRATCH_DEFAULT
                                ? (size_t)quarter
                                : SPLIT_SCRATCH_DEFAULT,
                            bytes);
}

flashcl_status flashcl_context_set_split_scratch_limit(flashcl_context *ctx,
                                                       size_t bytes)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    pthread_mutex_lock(&ctx->cache_lock);
    ctx->split_limit = bytes;
    pthread_mutex_unlock(&ctx->cache_lock);
    return FLASHCL_SUCCESS;
}

const char *context_forced_tiles(flashcl_context *ctx, char *buf, size_t cap)
{
    pthread_mutex_lock(&ctx->cache_lock);
    snprintf(buf, cap, "%s", ctx->forced_tiles);
    pthread_mutex_unlock(&ctx->cache_lock);
    return buf[0] ? buf : NULL;
}

flashcl_status flashcl_context_get_split_scratch_limit(flashcl_context *ctx,
                                                       size_t *bytes)
{
    flashcl_status status = begin_call_out(ctx, bytes, "bytes");
    if (status != FLASHCL_SUCCESS)
        return status;
    return split_scratch_cap(ctx, bytes);
}
