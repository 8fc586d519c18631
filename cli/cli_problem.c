/* One attention problem for the flashcl tool (see cli_problem.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli_problem.h"

#include "oracle.h"
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs -------------------------------------------------------- */

static double next_uniform(unsigned *seed) /* [-1, 1) */
{
    *seed = *seed * 1664525u + 1013904223u;
    return (double)(*seed >> 8) / 8388608.0 - 1.0;
}

static void *fill_storage(size_t count, flashcl_dtype dtype, unsigned *seed)
{
    void *data = malloc((count ? count : 1) * oracle_dtype_size(dtype));
    for (size_t i = 0; data && i < count; ++i)
        oracle_store(data, i, dtype, next_uniform(seed));
    return data;
}

/* ALiBi slopes, sinks, a bias with -inf entries and a mask that drops
 * every third key. */
static int create_optional(const problem_spec *s, problem *p, unsigned *seed)
{
    const size_t scores = (size_t)s->seqlen_q * (size_t)s->seqlen_k;
    if (s->alibi && (p->slopes = malloc((size_t)s->heads_q * 4)))
        for (int h = 0; h < s->heads_q; ++h)
            p->slopes[h] = (float)pow(2.0, -0.5 * (h + 1));
    if (s->sinks && (p->sinks = malloc((size_t)s->heads_q * 4)))
        for (int h = 0; h < s->heads_q; ++h)
            p->sinks[h] = (float)next_uniform(seed);
    if (s->bias && (p->bias = malloc((scores ? scores : 1) * 4)))
        for (size_t i = 0; i < scores; ++i)
            p->bias[i] = i % 7 == 3 ? -INFINITY : (float)next_uniform(seed);
    if (s->mask && (p->mask = malloc(scores ? scores : 1)))
        for (size_t i = 0; i < scores; ++i)
            p->mask[i] = (unsigned char)(i % 3 != 1);
    bool missing = (s->alibi && !p->slopes) || (s->sinks && !p->sinks) ||
                   (s->bias && !p->bias) || (s->mask && !p->mask);
    return missing ? -1 : 0;
}

static cl_mem upload(cl_context context, const void *data, size_t bytes,
                     cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    if (!data || bytes == 0) /* a buffer may not be empty */
        return clCreateBuffer(context, CL_MEM_READ_WRITE, 16, NULL, err);
    return clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                          bytes, (void *)data, err);
}

/* Filled with NaN bytes, so that an element the call leaves unwritten
 * fails the check instead of passing on what a previous run left. */
static cl_mem output_buffer(flashcl_context *ctx, size_t bytes, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    const size_t size = bytes ? (bytes + 3) / 4 * 4 : 16;
    cl_mem buffer = clCreateBuffer(flashcl_context_cl_context(ctx),
                                   CL_MEM_READ_WRITE, size, NULL, err);
    /* NaN as fp32, fp16 and bf16; fp64 reads a number near 2^1021 */
    const cl_uint nan_bits = 0x7fc07fc0u;
    if (*err == CL_SUCCESS)
        *err = clEnqueueFillBuffer(flashcl_context_queue(ctx), buffer,
                                   &nan_bits, sizeof nan_bits, 0, size, 0,
                                   NULL, NULL);
    if (*err == CL_SUCCESS)
        *err = clFinish(flashcl_context_queue(ctx));
    return buffer;
}

static cl_int upload_all(flashcl_context *ctx, problem *p)
{
    cl_context context = flashcl_context_cl_context(ctx);
    const size_t elem = oracle_dtype_size(p->dtype);
    const problem_spec *s = &p->spec;
    const size_t scores = (size_t)s->seqlen_q * (size_t)s->seqlen_k;
    cl_int err = CL_SUCCESS;
    p->q_buf = upload(context, p->q, p->q_count * elem, &err);
    p->k_buf = upload(context, p->k, p->k_count * elem, &err);
    p->v_buf = upload(context, p->v, p->v_count * elem, &err);
    p->o_buf = output_buffer(ctx, p->o_count * elem, &err);
    p->lse_buf = output_buffer(ctx, p->lse_count * 4, &err);
    if (p->slopes)
        p->slopes_buf = upload(context, p->slopes, (size_t)s->heads_q * 4, &err);
    if (p->sinks)
        p->sinks_buf = upload(context, p->sinks, (size_t)s->heads_q * 4, &err);
    if (p->bias)
        p->bias_buf = upload(context, p->bias, scores * 4, &err);
    if (p->mask)
        p->mask_buf = upload(context, p->mask, scores, &err);
    return err;
}

static void count_elements(problem *p)
{
    const problem_spec *s = &p->spec;
    const size_t b = (size_t)s->batch, nq = (size_t)s->seqlen_q,
                 nk = (size_t)s->seqlen_k;
    p->q_count = b * nq * (size_t)s->heads_q * (size_t)s->head_dim;
    p->k_count = b * nk * (size_t)s->heads_kv * (size_t)s->head_dim;
    p->v_count = b * nk * (size_t)s->heads_kv * (size_t)s->head_dim_v;
    p->o_count = b * nq * (size_t)s->heads_q * (size_t)s->head_dim_v;
    p->lse_count = b * nq * (size_t)s->heads_q;
}

flashcl_status problem_create(flashcl_context *ctx, const problem_spec *spec,
                              flashcl_dtype dtype, unsigned seed, problem *p,
                              char *why, size_t why_cap)
{
    memset(p, 0, sizeof *p);
    p->spec = *spec;
    if (!p->spec.head_dim_v)
        p->spec.head_dim_v = spec->head_dim;
    p->dtype = dtype;
    count_elements(p);
    p->q = fill_storage(p->q_count, dtype, &seed);
    p->k = fill_storage(p->k_count, dtype, &seed);
    p->v = fill_storage(p->v_count, dtype, &seed);
    p->o = malloc((p->o_count ? p->o_count : 1) * oracle_dtype_size(dtype));
    p->lse = malloc((p->lse_count ? p->lse_count : 1) * sizeof *p->lse);
    if (!p->q || !p->k || !p->v || !p->o || !p->lse ||
        create_optional(&p->spec, p, &seed) != 0) {
        snprintf(why, why_cap, "out of host memory for %s", spec->name);
        problem_release(p);
        return FLASHCL_ERROR_OUT_OF_MEMORY;
    }
    cl_int err = upload_all(ctx, p);
    if (err != CL_SUCCESS) {
        snprintf(why, why_cap, "creating the device buffers of %s failed "
                               "(OpenCL error %d)",
                 spec->name, (int)err);
        problem_release(p);
        return FLASHCL_ERROR_OPENCL;
    }
    p->spec.kv_cache = spec->kv_cache || spec->k_storage ||
                       spec->v_storage || spec->page_size || spec->append;
    if (p->spec.kv_cache && problem_kv_create(ctx, p, why, why_cap) != 0) {
        problem_release(p);
        return FLASHCL_ERROR_OPENCL;
    }
    return FLASHCL_SUCCESS;
}

void problem_release(problem *p)
{
    problem_kv_release(p);
    cl_mem buffers[9] = {p->q_buf,     p->k_buf,      p->v_buf,
                         p->o_buf,     p->lse_buf,    p->slopes_buf,
                         p->sinks_buf, p->bias_buf,   p->mask_buf};
    for (int i = 0; i < 9; ++i)
        if (buffers[i])
            clReleaseMemObject(buffers[i]);
    void *host[9] = {p->q, p->k, p->v, p->o, p->lse, p->slopes, p->sinks,
                     p->bias, p->mask};
    for (int i = 0; i < 9; ++i)
        free(host[i]);
    memset(p, 0, sizeof *p);
}

/* ---- the call ------------------------------------------------------ */

static void set_shape(const problem *p, flashcl_attention_desc *d)
{
    const problem_spec *s = &p->spec;
    d->batch = s->batch;
    d->heads_q = s->heads_q, d->heads_kv = s->heads_kv;
    d->seqlen_q = s->seqlen_q, d->seqlen_k = s->seqlen_k;
    /* 0 when equal: the descriptor's way of saying "D_v = D". */
    d->head_dim = s->head_dim;
    d->head_dim_v = s->head_dim_v == s->head_dim ? 0 : s->head_dim_v;
    d->dtype = p->dtype;
}

static void set_variants(const problem *p, flashcl_attention_desc *d)
{
    const problem_spec *s = &p->spec;
    d->causal = s->causal;
    d->causal_align = s->top_left ? FLASHCL_CAUSAL_TOP_LEFT
                                  : FLASHCL_CAUSAL_BOTTOM_RIGHT;
    d->window = s->window;
    d->window_left = s->window ? s->window_left : 0;
    d->window_right = s->window ? s->window_right : 0;
    d->softcap = s->softcap;
    d->alibi_slopes.buffer = p->slopes_buf;
    d->sinks.buffer = p->sinks_buf;
    /* [seqlen_q, seqlen_k] shared by every batch and head: literal
     * strides, 0 broadcasts. */
    d->bias.buffer = p->bias_buf;
    d->bias_dtype = FLASHCL_DTYPE_FP32;
    d->bias.stride_seq = (size_t)s->seqlen_k;
    d->bias.stride_dim = 1;
    d->mask.buffer = p->mask_buf;
    d->mask.stride_seq = (size_t)s->seqlen_k;
    d->mask.stride_dim = 1;
}

flashcl_attention_desc problem_desc(const problem *p, flashcl_backend backend)
{
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d);
    set_shape(p, &d);
    set_variants(p, &d);
    d.backend = backend;
    d.q.buffer = p->q_buf;
    d.k.buffer = p->k_buf;
    d.v.buffer = p->v_buf;
    d.o.buffer = p->o_buf;
    d.lse.buffer = p->lse_buf;
    problem_kv_desc(p, &d);
    return d;
}

flashcl_status problem_enqueue(flashcl_context *ctx, const problem *p,
                               flashcl_backend backend)
{
    flashcl_attention_desc desc = problem_desc(p, backend);
    flashcl_status status =
        flashcl_attention_forward(ctx, NULL, &desc, 0, NULL, NULL);
    if (status == FLASHCL_SUCCESS &&
        clFinish(flashcl_context_queue(ctx)) != CL_SUCCESS)
        status = FLASHCL_ERROR_OPENCL;
    return status;
}

flashcl_status problem_read(flashcl_context *ctx, problem *p)
{
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_int err = CL_SUCCESS;
    if (p->o_count)
        err = clEnqueueReadBuffer(queue, p->o_buf, CL_TRUE, 0,
                                  p->o_count * oracle_dtype_size(p->dtype),
                                  p->o, 0, NULL, NULL);
    if (err == CL_SUCCESS && p->lse_count)
        err = clEnqueueReadBuffer(queue, p->lse_buf, CL_TRUE, 0,
                                  p->lse_count * 4, p->lse, 0, NULL, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : FLASHCL_ERROR_OPENCL;
}

flashcl_status problem_run(flashcl_context *ctx, problem *p,
                           flashcl_backend backend)
{
    flashcl_status status = problem_enqueue(ctx, p, backend);
    return status == FLASHCL_SUCCESS ? problem_read(ctx, p) : status;
}

/* ---- timing -------------------------------------------------------- */

typedef struct timed_forward {
    flashcl_context *ctx;
    const flashcl_attention_desc *desc;
} timed_forward;

/* Host clock around enqueue + clFinish: the only clock that covers the
 * reference backend's many commands, so both backends are timed alike. */
static int one_forward(void *arg, double *ms)
{
    const timed_forward *t = arg;
    cl_command_queue queue = flashcl_context_queue(t->ctx);
    const double start = timing_host_ms();
    flashcl_status status =
        flashcl_attention_forward(t->ctx, queue, t->desc, 0, NULL, NULL);
    if (clFinish(queue) != CL_SUCCESS && status == FLASHCL_SUCCESS)
        status = FLASHCL_ERROR_OPENCL;
    *ms = timing_host_ms() - start;
    return (int)status;
}

flashcl_status time_forward(flashcl_context *ctx,
                            const flashcl_attention_desc *desc, int warmup,
                            int reps, timing_result *out)
{
    timed_forward t = {ctx, desc};
    int code = timing_repeat(warmup, reps, one_forward, &t, out);
    return code < 0 ? FLASHCL_ERROR_INVALID_VALUE : (flashcl_status)code;
}

/* ---- the oracle ---------------------------------------------------- */

/* A quantized side read as the doubles the kernel must decode, packed
 * like the unquantized tensor. */
static void dequantized_view(const problem_kv_side *side, size_t heads,
                             size_t seq, size_t dim, oracle_view *view)
{
    if (!side->type)
        return;
    view->base = side->values;
    view->offset = 0;
    view->dtype = FLASHCL_DTYPE_FP64;
    oracle_packed_strides(FLASHCL_LAYOUT_BNHD, heads, seq, dim, view->stride);
}

/* The cache holds seqlen_k valid keys of every sequence, so the oracle of
 * the plain call (no cache fields) is the cache's. */
static reference_result reference_of(const problem *p, bool dequantized)
{
    reference_result r = {malloc((p->o_count + 1) * sizeof *r.o),
                          malloc((p->lse_count + 1) * sizeof *r.lse)};
    problem plain = *p;
    plain.spec.kv_cache = 0;
    const flashcl_attention_desc desc =
        problem_desc(&plain, FLASHCL_BACKEND_AUTO);
    const oracle_inputs in = {p->q,    p->k,    p->v,    p->slopes,
                              p->bias, p->mask, p->sinks};
    oracle_problem op;
    char why[256];
    size_t stride[4];
    /* The very descriptor the library gets, read by the oracle. */
    bool ok = r.o && r.lse &&
              oracle_problem_from_desc(&desc, &in, &op, why,
                                       sizeof why) == 0;
    if (ok && dequantized) {
        const problem_spec *s = &p->spec;
        dequantized_view(&p->kv[0], (size_t)s->heads_kv, (size_t)s->seqlen_k,
                         (size_t)s->head_dim, &op.k);
        dequantized_view(&p->kv[1], (size_t)s->heads_kv, (size_t)s->seqlen_k,
                         (size_t)s->head_dim_v, &op.v);
    }
    if (ok) {
        oracle_packed_strides(FLASHCL_LAYOUT_BNHD, op.heads_q,
                              op.seqlen_q, op.head_dim_v, stride);
        ok = oracle_attention(&op, r.o, stride, r.lse) == 0;
    }
    if (!ok)
        reference_free(&r);
    return r;
}

reference_result problem_reference(const problem *p)
{
    return reference_of(p, true);
}

reference_result problem_reference_unquantized(const problem *p)
{
    return reference_of(p, false);
}

void reference_free(reference_result *r)
{
    free(r->o);
    free(r->lse);
    r->o = r->lse = NULL;
}

void problem_snapshot(const problem *p, double *o, double *lse)
{
    for (size_t i = 0; i < p->o_count; ++i)
        o[i] = oracle_load(p->o, i, p->dtype);
    for (size_t i = 0; i < p->lse_count; ++i)
        lse[i] = p->lse[i];
}

error_pair problem_error(const problem *p, const double *ref_o,
                         const double *ref_lse)
{
    error_pair e = {0, 0};
    double max_ref = 0;
    for (size_t i = 0; i < p->o_count; ++i) {
        double err = fabs(oracle_load(p->o, i, p->dtype) - ref_o[i]);
        e.o = isnan(err) ? INFINITY : fmax(e.o, err);
        max_ref = fmax(max_ref, fabs(ref_o[i]));
    }
    e.o = max_ref > 0 ? e.o / max_ref : e.o;
    for (size_t i = 0; i < p->lse_count; ++i) {
        double got = p->lse[i], want = ref_lse[i];
        double err = isinf(want) || isinf(got)
                         ? (got == want ? 0 : INFINITY)
                         : fabs(got - want) / fmax(1.0, fabs(want));
        e.lse = isnan(err) ? INFINITY : fmax(e.lse, err);
    }
    return e;
}

double o_tolerance(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP64: return 1e-10;
    case FLASHCL_DTYPE_FP32: return 2e-5;
    case FLASHCL_DTYPE_FP16: return 2e-3;
    case FLASHCL_DTYPE_BF16: return 1.6e-2;
    }
    return 0;
}

double lse_tolerance(flashcl_dtype dtype)
{
    /* LSE is fp32 whatever the storage type. */
    return dtype == FLASHCL_DTYPE_FP64 ? 1e-6 : 1e-5;
}

bool within_tolerance(error_pair e, flashcl_dtype dtype)
{
    return e.o <= o_tolerance(dtype) && e.lse <= lse_tolerance(dtype);
}

double problem_visible_pairs(const problem_spec *s)
{
    oracle_problem band;
    memset(&band, 0, sizeof band);
    band.seqlen_q = (size_t)s->seqlen_q;
    band.seqlen_k = (size_t)s->seqlen_k;
    band.causal = s->causal;
    band.causal_align = s->top_left ? FLASHCL_CAUSAL_TOP_LEFT
                                    : FLASHCL_CAUSAL_BOTTOM_RIGHT;
    band.window = s->window;
    band.window_left = s->window_left;
    band.window_right = s->window_right;
    double pairs = 0;
    size_t first;
    for (size_t i = 0; i < band.seqlen_q; ++i)
        pairs += (double)oracle_band(&band, i, &first);
    return pairs;
}
