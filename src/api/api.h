/* What the public enqueue and host-memory calls share (src/api/forward.c). */
#ifndef FLASHCL_API_H
#define FLASHCL_API_H

#include "core/core.h"

/* An enqueueing call's start: a context (FLASHCL_ERROR_NULL_ARGUMENT
 * without one, nothing recorded), its error cleared (begin_call), the
 * wait list matching its count, and `*queue` belonging to the context
 * (NULL: replaced by the context's queue). */
flashcl_status api_begin_enqueue(flashcl_context *ctx, cl_command_queue *queue,
                                 cl_uint num_wait, const cl_event *wait_list);

/* A call with nothing to compute: a marker when an event is asked for. */
flashcl_status api_empty_call(flashcl_context *ctx, cl_command_queue queue,
                              cl_uint num_wait, const cl_event *wait_list,
                              cl_event *event);

/* One device buffer of a host-memory call (the _host functions). */
typedef struct host_mem {
    size_t bytes;
    const void *copy_from; /* an input's host array; NULL: an output */
    bool skip;             /* no buffer: an output the call does not ask for */
    cl_mem mem;            /* made by host_mems_make */
} host_mem;

/* The buffers of mems[0 .. count) (16 bytes for an empty one: OpenCL's
 * cannot be empty), inputs copied in; FLASHCL_ERROR_OUT_OF_MEMORY when
 * one fails (those made stay for host_mems_release). */
flashcl_status host_mems_make(flashcl_context *ctx, host_mem *mems,
                              size_t count);

/* After the context's queue finishes, mems[i] into out[i] where both are
 * there (out[i] set, bytes non-zero). */
flashcl_status host_mems_read(flashcl_context *ctx, const host_mem *mems,
                              void *const *out, size_t count);

/* Releases the buffers host_mems_make made. */
void host_mems_release(host_mem *mems, size_t count);

#endif /* FLASHCL_API_H */
