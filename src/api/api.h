/* What the public enqueue calls share (src/api/forward.c). */
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

#endif /* FLASHCL_API_H */
