/* Context lifetime: own device/queue or wrap the caller's queue. */
#include "core/core.h"
#include "reference/reference.h"

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
    reference_state_release(ctx);
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
