/* The backward check of the flashcl tool (cli_backward.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli_backward.h"

#include "oracle.h"
#include "oracle_bwd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BWD_DO, BWD_DQ, BWD_DK, BWD_DV, BWD_BUFFERS };

typedef struct backward_run {
    cl_mem mem[BWD_BUFFERS];
    size_t count[BWD_BUFFERS];
    void *d_o; /* storage, BNHD */
} backward_run;

double grad_tolerance(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP16: return 2e-2;
    case FLASHCL_DTYPE_BF16: return 8e-2;
    case FLASHCL_DTYPE_FP64: return 1e-5; /* the LSE input is fp32 */
    default: return 2e-4;
    }
}

static void release_run(backward_run *b)
{
    for (int i = 0; i < BWD_BUFFERS; ++i)
        if (b->mem[i])
            clReleaseMemObject(b->mem[i]);
    free(b->d_o);
}

/* dO in [-1, 1), as the forward's inputs are drawn, then the outputs'
 * buffers, poisoned with NaN bytes so that a row the kernel skips shows. */
static cl_int create_run(flashcl_context *ctx, const problem *p,
                         backward_run *b)
{
    const size_t elem = oracle_dtype_size(p->dtype);
    const size_t counts[BWD_BUFFERS] = {p->o_count, p->q_count, p->k_count,
                                        p->v_count};
    memcpy(b->count, counts, sizeof counts);
    b->d_o = malloc((p->o_count ? p->o_count : 1) * elem);
    if (!b->d_o)
        return CL_OUT_OF_HOST_MEMORY;
    unsigned seed = 77;
    for (size_t i = 0; i < p->o_count; ++i) {
        seed = seed * 1664525u + 1013904223u;
        oracle_store(b->d_o, i, p->dtype, (double)(seed >> 8) / 8388608.0 - 1);
    }
    cl_context context = flashcl_context_cl_context(ctx);
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < BWD_BUFFERS && err == CL_SUCCESS; ++i) {
        const size_t bytes = b->count[i] ? b->count[i] * elem : 16;
        const bool input = i == BWD_DO && b->count[i];
        b->mem[i] = clCreateBuffer(
            context, CL_MEM_READ_WRITE | (input ? CL_MEM_COPY_HOST_PTR : 0),
            bytes, input ? b->d_o : NULL, &err);
        const unsigned char nan_bytes = 0xff;
        if (err == CL_SUCCESS && !input)
            err = clEnqueueFillBuffer(flashcl_context_queue(ctx), b->mem[i],
                                      &nan_bytes, 1, 0, bytes, 0, NULL, NULL);
    }
    return err;
}

/* The forward (bwd NULL) or the backward of desc, its device time from a
 * marker before it to its event. */
static flashcl_status timed_call(flashcl_context *ctx,
                                 const flashcl_attention_desc *desc,
                                 const flashcl_backward_desc *bwd,
                                 double *device_ms)
{
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_event before = NULL, done = NULL;
    if (clEnqueueMarkerWithWaitList(queue, 0, NULL, &before) != CL_SUCCESS)
        before = NULL;
    flashcl_status status =
        bwd ? flashcl_attention_backward(ctx, NULL, desc, bwd, 0, NULL, &done)
            : flashcl_attention_forward(ctx, NULL, desc, 0, NULL, &done);
    clFinish(queue);
    *device_ms = before && done ? timing_interval_ms(before, done) : -1;
    if (before)
        clReleaseEvent(before);
    if (done)
        clReleaseEvent(done);
    return status;
}

static flashcl_status one_backward(flashcl_context *ctx, const problem *p,
                                   const backward_run *b,
                                   flashcl_backend backend, double *device_ms)
{
    flashcl_attention_desc desc = problem_desc(p, backend);
    flashcl_backward_desc bwd = FLASHCL_BACKWARD_DESC_INIT;
    bwd.d_o.buffer = b->mem[BWD_DO];
    bwd.d_q.buffer = b->mem[BWD_DQ];
    bwd.d_k.buffer = b->mem[BWD_DK];
    bwd.d_v.buffer = b->mem[BWD_DV];
    return timed_call(ctx, &desc, &bwd, device_ms);
}

/* Max |device - oracle| / max |oracle| of one gradient: the device's is
 * packed BNHD in storage, the oracle's packed BHND doubles. */
static double grad_error(const void *got, const double *want,
                         flashcl_dtype dtype, size_t batch, size_t heads,
                         size_t seq, size_t dim)
{
    double err = 0, peak = 0;
    for (size_t b = 0; b < batch; ++b)
        for (size_t h = 0; h < heads; ++h)
            for (size_t n = 0; n < seq; ++n)
                for (size_t d = 0; d < dim; ++d) {
                    const double r =
                        want[((b * heads + h) * seq + n) * dim + d];
                    const double g = oracle_load(
                        got, ((b * seq + n) * heads + h) * dim + d, dtype);
                    const double diff = fabs(g - r);
                    err = diff > err || diff != diff ? diff : err;
                    peak = fmax(peak, fabs(r));
                }
    return err / fmax(peak, 1e-300);
}

/* The oracle's gradients of the problem's quantised inputs. */
static int oracle_of(const problem *p, const backward_run *b,
                     double *out[3])
{
    const problem_spec *s = &p->spec;
    const flashcl_attention_desc desc = problem_desc(p, FLASHCL_BACKEND_AUTO);
    const oracle_inputs in = {p->q,    p->k,    p->v,    p->slopes,
                              p->bias, p->mask, p->sinks};
    oracle_problem op;
    char why[256];
    double *d_o = malloc((p->o_count + 1) * sizeof *d_o);
    int rc = d_o && oracle_problem_from_desc(&desc, &in, &op, why,
                                             sizeof why) == 0 ? 0 : -1;
    const size_t dv = (size_t)(s->head_dim_v ? s->head_dim_v : s->head_dim);
    for (size_t i = 0; rc == 0 && i < p->o_count; ++i) { /* BNHD -> BHND */
        const size_t d = i % dv, h = i / dv % (size_t)s->heads_q,
                     n = i / dv / (size_t)s->heads_q % (size_t)s->seqlen_q,
                     bb = i / dv / (size_t)s->heads_q / (size_t)s->seqlen_q;
        d_o[((bb * (size_t)s->heads_q + h) * (size_t)s->seqlen_q + n) * dv +
            d] = oracle_load(b->d_o, i, p->dtype);
    }
    oracle_grads g = {out[0], out[1], out[2], NULL};
    if (rc == 0)
        rc = oracle_backward(&op, d_o, FLASHCL_DTYPE_FP64, &g);
    free(d_o);
    return rc;
}

static flashcl_status compare(flashcl_context *ctx, const problem *p,
                              const backward_run *b, backward_result *r,
                              char *why, size_t why_cap)
{
    const problem_spec *s = &p->spec;
    const size_t elem = oracle_dtype_size(p->dtype);
    void *got[3] = {NULL, NULL, NULL};
    double *want[3] = {NULL, NULL, NULL};
    bool ok = true;
    for (int i = 0; i < 3; ++i) {
        const size_t count = b->count[BWD_DQ + i];
        got[i] = malloc((count + 1) * elem);
        want[i] = malloc((count + 1) * sizeof(double));
        ok = ok && got[i] && want[i] &&
             (!count || clEnqueueReadBuffer(flashcl_context_queue(ctx),
                                            b->mem[BWD_DQ + i], CL_TRUE, 0,
                                            count * elem, got[i], 0, NULL,
                                            NULL) == CL_SUCCESS);
    }
    ok = ok && oracle_of(p, b, want) == 0;
    if (ok) {
        const size_t bt = (size_t)s->batch, hq = (size_t)s->heads_q,
                     hk = (size_t)s->heads_kv, d = (size_t)s->head_dim,
                     dv = (size_t)(s->head_dim_v ? s->head_dim_v : s->head_dim);
        r->dq_error = grad_error(got[0], want[0], p->dtype, bt, hq,
                                 (size_t)s->seqlen_q, d);
        r->dk_error = grad_error(got[1], want[1], p->dtype, bt, hk,
                                 (size_t)s->seqlen_k, d);
        r->dv_error = grad_error(got[2], want[2], p->dtype, bt, hk,
                                 (size_t)s->seqlen_k, dv);
        const double tol = grad_tolerance(p->dtype);
        r->pass = r->dq_error <= tol && r->dk_error <= tol &&
                  r->dv_error <= tol;
    } else {
        snprintf(why, why_cap, "reading the gradients back or computing "
                               "the float64 gradient oracle failed");
    }
    for (int i = 0; i < 3; ++i) {
        free(got[i]);
        free(want[i]);
    }
    return ok ? FLASHCL_SUCCESS : FLASHCL_ERROR_OUT_OF_MEMORY;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

flashcl_status problem_backward(flashcl_context *ctx, const problem *p,
                                int reps, backward_result *r, char *why,
                                size_t why_cap)
{
    backward_run b = {{NULL}, {0}, NULL};
    if (create_run(ctx, p, &b) != CL_SUCCESS) {
        release_run(&b);
        snprintf(why, why_cap, "allocating the backward's buffers failed");
        return FLASHCL_ERROR_OUT_OF_MEMORY;
    }
    const flashcl_attention_desc desc = problem_desc(p, FLASHCL_BACKEND_FUSED);
    flashcl_variant_info plan;
    if (flashcl_describe_backward(ctx, &desc, NULL, &plan) == FLASHCL_SUCCESS) {
        snprintf(r->path, sizeof r->path, "%s", plan.path);
        r->work_group_size = plan.work_group_size;
        r->tile_rows = plan.block_n;
    }
    double ms = 0, samples[64];
    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    const double start = timing_host_ms();
    flashcl_status status = one_backward(ctx, p, &b, FLASHCL_BACKEND_FUSED, &ms);
    r->first_call_ms = timing_host_ms() - start;
    if (status == FLASHCL_SUCCESS)
        status = compare(ctx, p, &b, r, why, why_cap);
    else
        snprintf(why, why_cap, "%s", flashcl_context_last_error(ctx));
    for (int i = 0; i < reps && status == FLASHCL_SUCCESS; ++i)
        status = one_backward(ctx, p, &b, FLASHCL_BACKEND_FUSED, &samples[i]);
    if (status == FLASHCL_SUCCESS) {
        qsort(samples, (size_t)reps, sizeof *samples, by_value);
        r->reps = reps;
        r->median_ms = samples[reps / 2];
    }
    release_run(&b);
    return status;
}

/* The forward on `backend`, device time from events around it. */
static flashcl_status one_forward_timed(flashcl_context *ctx,
                                        const problem *p,
                                        flashcl_backend backend,
                                        double *device_ms)
{
    const flashcl_attention_desc desc = problem_desc(p, backend);
    return timed_call(ctx, &desc, NULL, device_ms);
}

/* Median of `reps` samples of one timed call after `warmup` untimed. */
static flashcl_status median_of(flashcl_context *ctx, const problem *p,
                                const backward_run *b,
                                flashcl_backend backend, bool backward,
                                int warmup, int reps, double *median_ms)
{
    double samples[64], unused;
    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    flashcl_status status = FLASHCL_SUCCESS;
    for (int i = 0; i < warmup + reps && status == FLASHCL_SUCCESS; ++i) {
        double *out = i < warmup ? &unused : &samples[i - warmup];
        status = backward ? one_backward(ctx, p, b, backend, out)
                          : one_forward_timed(ctx, p, backend, out);
    }
    if (status != FLASHCL_SUCCESS)
        return status;
    qsort(samples, (size_t)reps, sizeof *samples, by_value);
    *median_ms = samples[reps / 2];
    return FLASHCL_SUCCESS;
}

flashcl_status time_backward(flashcl_context *ctx, const problem *p,
                             flashcl_backend backend, int warmup, int reps,
                             backward_timing *t, char *why, size_t why_cap)
{
    backward_run b = {{NULL}, {0}, NULL};
    if (create_run(ctx, p, &b) != CL_SUCCESS) {
        release_run(&b);
        snprintf(why, why_cap, "allocating the backward's buffers failed");
        return FLASHCL_ERROR_OUT_OF_MEMORY;
    }
    /* The forward first: the backward reads its O and LSE. */
    flashcl_status status = median_of(ctx, p, &b, backend, false, warmup,
                                      reps, &t->forward_ms);
    if (status == FLASHCL_SUCCESS)
        status = median_of(ctx, p, &b, backend, true, warmup, reps,
                           &t->backward_ms);
    if (status != FLASHCL_SUCCESS)
        snprintf(why, why_cap, "%s", flashcl_context_last_error(ctx));
    release_run(&b);
    return status;
}

double backward_flops(const problem_spec *s)
{
    return 10.0 * s->batch * s->heads_q * (double)s->seqlen_q * s->seqlen_k *
           s->head_dim * (s->causal ? 0.5 : 1.0);
}
