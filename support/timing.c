/* Timing helpers (see timing.h). */
#define _POSIX_C_SOURCE 200809L
#include "timing.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

double timing_host_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double timing_event_ms(cl_event event)
{
    cl_ulong start = 0, end = 0;
    if (clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_START,
                                sizeof start, &start, NULL) != CL_SUCCESS ||
        clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof end,
                                &end, NULL) != CL_SUCCESS ||
        end < start)
        return -1.0;
    return (double)(end - start) / 1e6;
}

static double profiling_ns(cl_event event, cl_profiling_info what)
{
    cl_ulong ns = 0;
    return clGetEventProfilingInfo(event, what, sizeof ns, &ns, NULL) ==
                   CL_SUCCESS
               ? (double)ns
               : -1.0;
}

double timing_interval_ms(cl_event before, cl_event last)
{
    const double start = profiling_ns(before, CL_PROFILING_COMMAND_END);
    const double end = profiling_ns(last, CL_PROFILING_COMMAND_END);
    return start < 0 || end < start ? -1.0 : (end - start) / 1e6;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double timing_median(double *samples, size_t count)
{
    if (count == 0)
        return NAN;
    qsort(samples, count, sizeof *samples, compare_double);
    return samples[count / 2];
}

int timing_repeat(int warmup, int reps, timing_call call, void *arg,
                  timing_result *out)
{
    double samples[TIMING_MAX_REPS];
    if (reps < 1 || reps > TIMING_MAX_REPS || warmup < 0)
        return -1;
    for (int i = -warmup; i < reps; ++i) {
        double ms = 0.0;
        int code = call(arg, &ms);
        if (code != 0)
            return code;
        if (i >= 0)
            samples[i] = ms;
    }
    out->median_ms = timing_median(samples, (size_t)reps);
    out->min_ms = samples[0]; /* sorted by timing_median */
    out->reps = reps;
    return 0;
}
