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

flashcl_status host_mems_make(flashcl_context *ctx, host_mem *mems,
                              size_t count)
{
    cl_int err = CL_SUCCESS;
    for (size_t i = 0; i < count && err == CL_SUCCESS; ++i) {
        if (mems[i].skip)
            continue;
        const bool input = mems[i].copy_from && mems[i].bytes;
        mems[i].mem = clCreateBuffer(
            ctx->cl_ctx,
            input ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE,
            mems[i].bytes ? mems[i].bytes : 16,
            input ? (void *)mems[i].copy_from : NULL, &err);
    }
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "allocating device buffers for the host call: %s",
                         cl_error_name(err));
    return FLASHCL_SUCCESS;
}

flashcl_status host_mems_read(flashcl_context *ctx, const host_mem *mems,
                              void *const *out, size_t count)
{
    cl_int err = clFinish(ctx->queue);
    for (size_t i = 0; i < count && err == CL_SUCCESS; ++i)
        if (out[i] && mems[i].bytes)
            err = clEnqueueReadBuffer(ctx->queue, mems[i].mem, CL_TRUE, 0,
                                      mems[i].bytes, out[i], 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "running or reading back the host call: %s",
                         cl_error_name(err));
    return FLASHCL_SUCCESS;
}

void host_mems_release(host_mem *mems, size_t count)
{
    for (size_t i = 0; i < count; ++i)
        if (mems[i].mem)
            clReleaseMemObject(mems[i].mem);
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
    enum { Q, K, V, O, LSE, COUNT };
    host_mem m[COUNT] = {{.copy_from = q},
                         {.copy_from = k},
                         {.copy_from = v},
                         {0},
                         {.skip = !lse}};
    problem_packed_bytes(&p, &m[Q].bytes, &m[K].bytes, &m[V].bytes, &m[O].bytes,
                         &m[LSE].bytes);
    status = host_mems_make(ctx, m, COUNT);
    if (status == FLASHCL_SUCCESS)
        status = problem_bind_packed(ctx, &p, m[Q].mem, m[K].mem, m[V].mem,
                                     m[O].mem, m[LSE].mem);
    if (status == FLASHCL_SUCCESS)
        status = run_problem(ctx, ctx->queue, &p, 0, NULL, NULL);
    void *const out[2] = {o, lse};
    if (status == FLASHCL_SUCCESS)
        status = host_mems_read(ctx, &m[O], out, 2);
    host_mems_release(m, COUNT);
    return status;
}
