/* Public forward entry points: device-buffer enqueue and host convenience.
 * Both resolve the descriptor into a problem and hand it to a backend. */
#include "api/api.h"
#include "paths/path.h"
#include "problem/problem.h"
#include "reference/reference.h"

#include <stdlib.h>
#include <string.h>

flashcl_status check_queue(flashcl_context *ctx, cl_command_queue queue)
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

flashcl_status api_begin_enqueue(flashcl_context *ctx,
                                 cl_command_queue *queue, cl_uint num_wait,
                                 const cl_event *wait_list)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    if ((num_wait > 0) != (wait_list != NULL))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "num_events_in_wait_list = %u does not match "
                         "event_wait_list %s",
                         num_wait, wait_list ? "(non-NULL)" : "(NULL)");
    if (!*queue) {
        *queue = ctx->queue;
        return FLASHCL_SUCCESS;
    }
    return check_queue(ctx, *queue);
}

flashcl_status api_empty_call(flashcl_context *ctx, cl_command_queue queue,
                              cl_uint num_wait, const cl_event *wait_list,
                              cl_event *event)
{
    if (!event)
        return FLASHCL_SUCCESS;
    cl_int err = clEnqueueMarkerWithWaitList(queue, num_wait, wait_list, event);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : set_error(ctx, FLASHCL_ERROR_OPENCL,
                                         "clEnqueueMarkerWithWaitList: %s",
                                         cl_error_name(err));
}

static flashcl_status run_problem(flashcl_context *ctx, cl_command_queue queue,
                                  const problem *p, cl_uint num_wait,
                                  const cl_event *wait_list, cl_event *event)
{
    if (p->empty)
        return api_empty_call(ctx, queue, num_wait, wait_list, event);
    if (p->backend == FLASHCL_BACKEND_REFERENCE) {
        char why[256];
        if (forced_path_unknown(why, sizeof why))
            return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE, "%s", why);
        return p->infer.needs_split_kernel
                   ? launch_reference_inference(ctx, queue, p, num_wait,
                                                wait_list, event)
                   : launch_reference(ctx, queue, p, num_wait, wait_list,
                                      event);
    }
    return run_fused(ctx, queue, p, num_wait, wait_list, event);
}

flashcl_status flashcl_attention_forward(flashcl_context *ctx,
                                         cl_command_queue queue,
                                         const flashcl_attention_desc *desc,
                                         cl_uint num_events_in_wait_list,
                                         const cl_event *event_wait_list,
                                         cl_event *event)
{
    flashcl_status status = api_begin_enqueue(
        ctx, &queue, num_events_in_wait_list, event_wait_list);
    if (status != FLASHCL_SUCCESS)
        return status;
    problem p;
    status = problem_from_desc(ctx, desc, PROBLEM_FOR_LAUNCH, &p);
    if (status != FLASHCL_SUCCESS)
        return status;
    return run_problem(ctx, queue, &p, num_events_in_wait_list,
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

static flashcl_status make_host_buffers(flashcl_context *ctx,
                                        const problem *p, const void *q,
                                        const void *k, const void *v,
                                        bool want_lse, host_buffers *b)
{
    size_t q_bytes, k_bytes, v_bytes, o_bytes, lse_bytes;
    problem_packed_bytes(p, &q_bytes, &k_bytes, &v_bytes, &o_bytes,
                         &lse_bytes);
    cl_int err = CL_SUCCESS;
    b->q = make_buffer(ctx, q_bytes, q, &err);
    if (err == CL_SUCCESS)
        b->k = make_buffer(ctx, k_bytes, k, &err);
    if (err == CL_SUCCESS)
        b->v = make_buffer(ctx, v_bytes, v, &err);
    if (err == CL_SUCCESS)
        b->o = make_buffer(ctx, o_bytes, NULL, &err);
    if (err == CL_SUCCESS && want_lse)
        b->lse = make_buffer(ctx, lse_bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "allocating device buffers for the host call: %s",
                         cl_error_name(err));
    return FLASHCL_SUCCESS;
}

static flashcl_status read_back(flashcl_context *ctx, const problem *p,
                                const host_buffers *b, void *o, float *lse)
{
    size_t q_bytes, k_bytes, v_bytes, o_bytes, lse_bytes;
    problem_packed_bytes(p, &q_bytes, &k_bytes, &v_bytes, &o_bytes,
                         &lse_bytes);
    cl_int err = clFinish(ctx->queue);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(ctx->queue, b->o, CL_TRUE, 0, o_bytes, o, 0,
                                  NULL, NULL);
    if (err == CL_SUCCESS && lse)
        err = clEnqueueReadBuffer(ctx->queue, b->lse, CL_TRUE, 0, lse_bytes,
                                  lse, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "running or reading back the host call: %s",
                         cl_error_name(err));
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_attention_forward_host(flashcl_context *ctx,
                                              const flashcl_attention_desc *desc,
                                              const void *q, const void *k,
                                              const void *v, void *o,
                                              float *lse)
{
    problem p;
    flashcl_status status = problem_begin_call(
        ctx, desc, PROBLEM_FOR_HOST_CALL, NULL, NULL, &p);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (!q || !k || !v || !o)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                         "host pointer %s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : "o");
    if (p.empty)
        return FLASHCL_SUCCESS;
    host_buffers b = {0};
    status = make_host_buffers(ctx, &p, q, k, v, lse != NULL, &b);
    if (status == FLASHCL_SUCCESS)
        status = problem_bind_packed(ctx, &p, b.q, b.k, b.v, b.o, b.lse);
    if (status == FLASHCL_SUCCESS)
        status = run_problem(ctx, ctx->queue, &p, 0, NULL, NULL);
    if (status == FLASHCL_SUCCESS)
        status = read_back(ctx, &p, &b, o, lse);
    release_host_buffers(&b);
    return status;
}
