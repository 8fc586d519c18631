/* Public forward entry points: device-buffer enqueue and host convenience. */
#include "../internal.h"

#include <stdlib.h>
#include <string.h>

static flashcl_status check_queue(flashcl_context *ctx, cl_command_queue queue)
{
    cl_context owner = NULL;
    cl_device_id device = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof owner,
                                       &owner, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof device,
                                    &device, NULL);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "queue is not a valid cl_command_queue (%s)",
                         cl_error_name(err));
    if (owner != ctx->cl_ctx || device != ctx->device)
        return set_error(ctx, FLASHCL_ERROR_CONTEXT_MISMATCH,
                         "queue belongs to another cl_context or device");
    return FLASHCL_SUCCESS;
}

/* desc->backend, else FLASHCL_BACKEND (auto | fused | reference), else
 * fused. Read per call so that a test or tool can switch it at run time. */
static flashcl_status choose_backend(flashcl_context *ctx,
                                     const flashcl_attention_desc *desc,
                                     flashcl_backend *backend)
{
    *backend = FLASHCL_BACKEND_FUSED;
    if (desc->backend != FLASHCL_BACKEND_AUTO) {
        *backend = desc->backend;
        return FLASHCL_SUCCESS;
    }
    const char *env = getenv("FLASHCL_BACKEND");
    if (!env || !*env || !strcmp(env, "auto") || !strcmp(env, "fused"))
        return FLASHCL_SUCCESS;
    if (!strcmp(env, "reference")) {
        *backend = FLASHCL_BACKEND_REFERENCE;
        return FLASHCL_SUCCESS;
    }
    return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                     "environment variable FLASHCL_BACKEND = \"%.64s\" is "
                     "not auto, fused or reference",
                     env);
}

flashcl_status flashcl_attention_forward(flashcl_context *ctx,
                                         cl_command_queue queue,
                                         const flashcl_attention_desc *desc,
                                         cl_uint num_events_in_wait_list,
                                         const cl_event *event_wait_list,
                                         cl_event *event)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    if ((num_events_in_wait_list > 0) != (event_wait_list != NULL))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "num_events_in_wait_list = %u does not match "
                         "event_wait_list %s",
                         num_events_in_wait_list,
                         event_wait_list ? "(non-NULL)" : "(NULL)");
    if (!queue)
        queue = ctx->queue;
    else {
        flashcl_status status = check_queue(ctx, queue);
        if (status != FLASHCL_SUCCESS)
            return status;
    }
    resolved_problem problem;
    flashcl_status status = validate_desc(ctx, desc, &problem);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (problem.empty) {
        if (!event)
            return FLASHCL_SUCCESS;
        cl_int err = clEnqueueMarkerWithWaitList(
            queue, num_events_in_wait_list, event_wait_list, event);
        return err == CL_SUCCESS
                   ? FLASHCL_SUCCESS
                   : set_error(ctx, FLASHCL_ERROR_OPENCL,
                               "clEnqueueMarkerWithWaitList: %s",
                               cl_error_name(err));
    }
    flashcl_backend backend;
    status = choose_backend(ctx, desc, &backend);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (backend == FLASHCL_BACKEND_REFERENCE)
        return launch_reference(ctx, queue, desc, &problem,
                                num_events_in_wait_list, event_wait_list,
                                event);
    return launch_fused(ctx, queue, desc, &problem, num_events_in_wait_list,
                        event_wait_list, event);
}

/* ---- host-memory convenience --------------------------------------- */

typedef struct host_buffers {
    cl_mem q, k, v, o, lse;
} host_buffers;

static void release_host_buffers(host_buffers *b)
{
    cl_mem all[5] = {b->q, b->k, b->v, b->o, b->lse};
    for (int i = 0; i < 5; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
}

static cl_mem make_buffer(flashcl_context *ctx, size_t bytes, const void *init,
                          cl_int *err)
{
    /* A view may be empty (seqlen_k = 0); OpenCL buffers cannot be. */
    size_t size = bytes ? bytes : 16;
    cl_mem_flags flags = init && bytes ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR
                                       : CL_MEM_READ_WRITE;
    return clCreateBuffer(ctx->cl_ctx, flags, size,
                          init && bytes ? (void *)init : NULL, err);
}

flashcl_status flashcl_attention_forward_host(flashcl_context *ctx,
                                              const flashcl_attention_desc *desc,
                                              const void *q, const void *k,
                                              const void *v, void *o,
                                              float *lse)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    flashcl_status status = validate_shape(ctx, desc);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (!q || !k || !v || !o)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                         "host pointer %s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : "o");
    const size_t elem = dtype_size(desc->dtype);
    const int64_t heads_kv = desc->heads_kv ? desc->heads_kv : desc->heads_q;
    /* validate_shape bounded these products. */
    const size_t q_bytes = (size_t)(desc->batch * desc->heads_q *
                                    desc->seqlen_q * desc->head_dim) * elem;
    const size_t kv_bytes = (size_t)(desc->batch * heads_kv * desc->seqlen_k *
                                     desc->head_dim) * elem;
    const size_t lse_bytes =
        (size_t)(desc->batch * desc->heads_q * desc->seqlen_q) * sizeof(float);
    if (q_bytes == 0)
        return FLASHCL_SUCCESS;
    flashcl_attention_desc call = *desc;
    const flashcl_tensor none = {0};
    call.q = call.k = call.v = call.o = call.lse = none;
    host_buffers b = {0};
    cl_int err = CL_SUCCESS;
    b.q = make_buffer(ctx, q_bytes, q, &err);
    if (err == CL_SUCCESS)
        b.k = make_buffer(ctx, kv_bytes, k, &err);
    if (err == CL_SUCCESS)
        b.v = make_buffer(ctx, kv_bytes, v, &err);
    if (err == CL_SUCCESS)
        b.o = make_buffer(ctx, q_bytes, NULL, &err);
    if (err == CL_SUCCESS && lse)
        b.lse = make_buffer(ctx, lse_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        release_host_buffers(&b);
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "allocating device buffers for the host call: %s",
                         cl_error_name(err));
    }
    call.q.buffer = b.q;
    call.k.buffer = b.k;
    call.v.buffer = b.v;
    call.o.buffer = b.o;
    call.lse.buffer = b.lse;
    status = flashcl_attention_forward(ctx, ctx->queue, &call, 0, NULL, NULL);
    if (status == FLASHCL_SUCCESS) {
        err = clFinish(ctx->queue);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(ctx->queue, b.o, CL_TRUE, 0, q_bytes, o,
                                      0, NULL, NULL);
        if (err == CL_SUCCESS && lse)
            err = clEnqueueReadBuffer(ctx->queue, b.lse, CL_TRUE, 0,
                                      lse_bytes, lse, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            status = set_error(ctx, FLASHCL_ERROR_OPENCL,
                               "running or reading back the host call: %s",
                               cl_error_name(err));
    }
    release_host_buffers(&b);
    return status;
}
