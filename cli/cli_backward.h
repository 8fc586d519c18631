/* The backward check shared by `flashcl run --backward` and `flashcl
 * selftest`: dQ, dK, dV of a problem whose forward has run, against the
 * float64 gradient oracle (support/oracle_bwd.h), and its device time. */
#ifndef FLASHCL_CLI_BACKWARD_H
#define FLASHCL_CLI_BACKWARD_H

#include "cli_problem.h"

typedef struct backward_result {
    double dq_error, dk_error, dv_error; /* max |g - ref| / max |ref| */
    double first_call_ms; /* host clock, the kernels' compile included */
    double median_ms;     /* device time from events, median of reps */
    int reps;
    bool pass;
    /* The plan (flashcl_describe_backward): path, work-group, tile rows. */
    char path[32];
    int work_group_size, tile_rows;
} backward_result;

/* Runs the backward of `p` (its forward must have run: O and LSE are on
 * the device) `reps` + 1 times with a seeded random dO, outputs poisoned
 * first. On failure the reason is in `why`. */
flashcl_status problem_backward(flashcl_context *ctx, const problem *p,
                                int reps, backward_result *r, char *why,
                                size_t why_cap);

/* Device-side medians (events around each call) of the forward and the
 * backward of `p` on `backend`, the forward first (it writes the O and LSE
 * the backward reads), each `warmup` untimed calls then `reps` timed. On
 * failure the reason is in `why`. */
typedef struct backward_timing {
    double forward_ms, backward_ms;
} backward_timing;
flashcl_status time_backward(flashcl_context *ctx, const problem *p,
                             flashcl_backend backend, int warmup, int reps,
                             backward_timing *t, char *why, size_t why_cap);

/* FlashAttention's backward FLOP convention (FA2's
 * benchmarks/benchmark_flash_attention.py): 2.5 times the forward's
 * 4 B H Nq Nk D, that is 10 B H Nq Nk D, halved for causal. */
double backward_flops(const problem_spec *s);

/* Gradients' tolerance against float64, relative to max |ref|. */
double grad_tolerance(flashcl_dtype dtype);

#endif /* FLASHCL_CLI_BACKWARD_H */
