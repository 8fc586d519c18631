/*
 * Timing helpers shared by the `flashcl` tool and flashcl-bench: the host
 * clock, OpenCL profiling intervals, and the median of repeated calls after
 * a warm-up, so that both programs report the same statistic the same way.
 */
#ifndef FLASHCL_SUPPORT_TIMING_H
#define FLASHCL_SUPPORT_TIMING_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>

/* Most timed calls timing_repeat() takes (its samples live on the stack). */
#define TIMING_MAX_REPS 1000

/* Monotonic host clock in milliseconds (arbitrary origin). */
double timing_host_ms(void);

/* CL_PROFILING_COMMAND_START..END of a finished event in milliseconds, or
 * -1 when the queue has no profiling or the query fails. */
double timing_event_ms(cl_event event);

/* Device time from the end of `before` (a marker enqueued just ahead of
 * the work) to the end of `last` (the work's last event), in
 * milliseconds: on an in-order queue it covers every command in between,
 * so work of several kernels is timed whole. -1 when a query fails. */
double timing_interval_ms(cl_event before, cl_event last);

/* Median of `count` samples (sorted in place; the upper middle one for an
 * even count). NaN when count is 0. */
double timing_median(double *samples, size_t count);

/* One call to time: returns 0 and its duration in *ms, or a non-zero code
 * that timing_repeat() passes back. */
typedef int (*timing_call)(void *arg, double *ms);

typedef struct timing_result {
    double median_ms, min_ms;
    int reps;
} timing_result;

/* `warmup` untimed calls, then `reps` timed ones (1..TIMING_MAX_REPS).
 * Returns 0, the first non-zero code a call returned, or -1 for a bad
 * count; *out is written only on success. */
int timing_repeat(int warmup, int reps, timing_call call, void *arg,
                  timing_result *out);

#endif /* FLASHCL_SUPPORT_TIMING_H */
