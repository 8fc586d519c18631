/* Device scratch a context owns: a few buffers, grown on demand, that the
 * calls of every thread share (split-KV's partials, the wgmma path's
 * packed mask). A call holds the set's lock while it enqueues, and its
 * first command waits for `busy`, the last command of the previous call
 * that used the set (on whichever queue): two calls never use the
 * buffers at once, and no call blocks on the host for another. */
#ifndef FLASHCL_SCRATCH_H
#define FLASHCL_SCRATCH_H

#include "core/core.h"

#define SCRATCH_BUFFERS 3

typedef struct scratch_set {
    pthread_mutex_t lock;
    cl_mem buffer[SCRATCH_BUFFERS];
    size_t capacity[SCRATCH_BUFFERS];
    cl_event busy;
} scratch_set;

/* *slot's set (a field of the context), created under cache_lock on first
 * use; `what` names it in the out-of-memory message. */
flashcl_status scratch_get(flashcl_context *ctx, scratch_set **slot,
                           const char *what, scratch_set **out);

/* Frees the buffers of *slot's set (OpenCL keeps them until the commands
 * using them are done); `final` (context release) also frees the set. */
void scratch_free(flashcl_context *ctx, scratch_set **slot, bool final);

/* With the lock held: grows buffer i to bytes[i] bytes (0: not needed).
 * Bit i of *fresh tells that buffer i was allocated now, so its contents
 * are undefined. */
flashcl_status scratch_grow(flashcl_context *ctx, scratch_set *s,
                            const size_t bytes[SCRATCH_BUFFERS],
                            unsigned *fresh, const char *what);

/* The caller's wait list, plus the set's last user when there is one. */
typedef struct scratch_waits {
    const cl_event *list;
    cl_uint count;
    cl_event stack[16];
    cl_event *heap; /* owned, when the list outgrew `stack` */
} scratch_waits;

flashcl_status scratch_wait_list(flashcl_context *ctx, const scratch_set *s,
                                 cl_uint num_wait, const cl_event *wait_list,
                                 scratch_waits *out);
void scratch_waits_free(scratch_waits *w);

/* With the lock held, after the call's commands: `last` (its last one;
 * NULL when nothing was enqueued) becomes the set's last user, the queue
 * flushed first because another queue may wait on it (OpenCL 1.2
 * 5.13). After a failure the queue is finished instead, so that whatever
 * was enqueued is done with the buffers. */
void scratch_done(scratch_set *s, cl_command_queue queue, cl_event last,
                  bool failed);

/* Frees every scratch set of the context (scratch_free on each). */
void context_scratch_release(flashcl_context *ctx, bool final);

#endif /* FLASHCL_SCRATCH_H */
