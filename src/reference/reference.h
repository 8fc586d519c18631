/* The reference backend (CLBlast GEMMs plus our own pack, softmax and
 * store kernels): unfused, O(N^2) scratch, every variant. Built when the
 * FLASHCL_WITH_CLBLAST CMake option is on (the default); without it the
 * calls below report FLASHCL_ERROR_UNSUPPORTED. */
#ifndef FLASHCL_REFERENCE_H
#define FLASHCL_REFERENCE_H

#include "problem/problem.h"

typedef struct reference_state reference_state;

/* Enqueue a checked, non-empty problem on the unfused path. */
flashcl_status launch_reference(flashcl_context *ctx, cl_command_queue queue,
                                const problem *p, cl_uint num_wait,
                                const cl_event *wait_list, cl_event *event);

/* The inference features (KV cache, varlen, paged KV) as a host loop of
 * dense reference calls, one per sequence (reference_infer.c). */
flashcl_status launch_reference_inference(flashcl_context *ctx,
                                          cl_command_queue queue,
                                          const problem *p, cl_uint num_wait,
                                          const cl_event *wait_list,
                                          cl_event *event);

/* The varlen prefix sums (cu_seqlens_q/k, NULL where absent) read back
 * with blocking reads on `queue`; the caller frees them. */
flashcl_status reference_read_prefix_sums(flashcl_context *ctx,
                                          cl_command_queue queue,
                                          const problem *p, int **cu_q,
                                          int **cu_k);

/* Sequence b of a varlen problem as a dense batch-1 problem (the forward's
 * clamps), its views moved to the sequence's rows; query_views (dO, dQ)
 * and key_views (dK, dV) are moved the same way. */
problem reference_varlen_sequence(const problem *p, const int *cu_q,
                                  const int *cu_k, int b,
                                  tensor_view *const *query_views,
                                  size_t query_count,
                                  tensor_view *const *key_views,
                                  size_t key_count);

/* The backward's output views (src/api/backward.c resolved them). */
typedef struct reference_bwd_views {
    const tensor_view *d_o, *d_q, *d_k, *d_v, *d_sinks;
} reference_bwd_views;

/* A backward call on the unfused path: the problem and its outputs on
 * the caller's queue after its wait list; `event` (may be NULL) its
 * last command's. */
typedef struct reference_bwd_call {
    cl_command_queue queue;
    const problem *p;
    reference_bwd_views views;
    cl_uint num_wait;
    const cl_event *wait_list;
    cl_event *event;
} reference_bwd_call;

/* Enqueue a checked, non-empty, dense backward on the unfused path
 * (reference_backward.c). */
flashcl_status launch_reference_backward(flashcl_context *ctx,
                                         const reference_bwd_call *call);

/* FLASHCL_ERROR_UNSUPPORTED unless `queue` runs its commands in order
 * (CLBlast chains its kernels by queue order). */
flashcl_status reference_check_in_order(flashcl_context *ctx,
                                        cl_command_queue queue);

/* The reference kernels' build options (dtype, work-group size, the
 * variants' switches) in text[0 .. cap), for the forward's and the
 * backward's programs; FLASHCL_ERROR_UNSUPPORTED if they do not fit. */
flashcl_status reference_kernel_options(flashcl_context *ctx,
                                        const problem *p, int wg_size,
                                        char *text, size_t cap);

#endif /* FLASHCL_REFERENCE_H */
