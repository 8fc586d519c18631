/* Context-owned device scratch (scratch.h). */
#include "core/scratch.h"

#include <stdlib.h>
#include <string.h>

flashcl_status scratch_get(flashcl_context *ctx, scratch_set **slot,
                           const char *what, scratch_set **out)
{
    pthread_mutex_lock(&ctx->cache_lock);
    if (!*slot) {
        scratch_set *s = calloc(1, sizeof *s);
        if (s) {
            pthread_mutex_init(&s->lock, NULL);
            *slot = s;
        }
    }
    *out = *slot;
    pthread_mutex_unlock(&ctx->cache_lock);
    return *out ? FLASHCL_SUCCESS
                : set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                            "allocating the %s state", what);
}

void scratch_free(flashcl_context *ctx, scratch_set **slot, bool final)
{
    pthread_mutex_lock(&ctx->cache_lock);
    scratch_set *s = *slot;
    if (final)
        *slot = NULL;
    pthread_mutex_unlock(&ctx->cache_lock);
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SCRATCH_BUFFERS; ++i) {
        if (s->buffer[i])
            clReleaseMemObject(s->buffer[i]);
        s->buffer[i] = NULL;
        s->capacity[i] = 0;
    }
    if (final && s->busy)
        clReleaseEvent(s->busy);
    if (final)
        s->busy = NULL;
    pthread_mutex_unlock(&s->lock);
    if (final) {
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
}

flashcl_status scratch_grow(flashcl_context *ctx, scratch_set *s,
                            const size_t bytes[SCRATCH_BUFFERS],
                            unsigned *fresh, const char *what)
{
    *fresh = 0;
    for (int i = 0; i < SCRATCH_BUFFERS; ++i) {
        if (bytes[i] == 0 || (s->buffer[i] && s->capacity[i] >= bytes[i]))
            continue;
        *fresh |= 1u << i;
        if (s->buffer[i])
            clReleaseMemObject(s->buffer[i]);
        s->capacity[i] = 0;
        cl_int err;
        s->buffer[i] = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes[i],
                                      NULL, &err);
        if (err != CL_SUCCESS) {
            s->buffer[i] = NULL;
            return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                             "allocating %zu bytes of %s scratch: %s",
                             bytes[i], what, cl_error_name(err));
        }
        s->capacity[i] = bytes[i];
    }
    return FLASHCL_SUCCESS;
}

flashcl_status scratch_wait_list(flashcl_context *ctx, const scratch_set *s,
                                 cl_uint num_wait, const cl_event *wait_list,
                                 scratch_waits *out)
{
    out->list = wait_list;
    out->count = num_wait;
    out->heap = NULL;
    if (!s->busy)
        return FLASHCL_SUCCESS;
    cl_event *list = out->stack;
    if (num_wait >= sizeof out->stack / sizeof out->stack[0]) {
        list = out->heap = malloc((num_wait + 1) * sizeof *list);
        if (!list)
            return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                             "allocating the event wait list");
    }
    for (cl_uint i = 0; i < num_wait; ++i)
        list[i] = wait_list[i];
    list[num_wait] = s->busy;
    out->list = list;
    out->count = num_wait + 1;
    return FLASHCL_SUCCESS;
}

void scratch_waits_free(scratch_waits *w)
{
    free(w->heap);
    w->heap = NULL;
}

void scratch_done(scratch_set *s, cl_command_queue queue, cl_event last,
                  bool failed)
{
    if (failed)
        clFinish(queue);
    if (!last)
        return;
    clFlush(queue);
    if (s->busy)
        clReleaseEvent(s->busy);
    clRetainEvent(last);
    s->busy = last;
}

void context_scratch_release(flashcl_context *ctx, bool final)
{
    scratch_free(ctx, &ctx->split, final);
    scratch_free(ctx, &ctx->mask_bits, final);
}
