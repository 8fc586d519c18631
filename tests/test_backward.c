/*
 * flashcl_attention_backward on the portable kernels (issue 43; with
 * FLASHCL_BACKEND=reference, test_backward_reference, on the reference
 * backend's unfused backward): dQ, dK,
 * dV and d_sinks against the float64 gradient oracle (support/oracle_bwd.c)
 * for dtypes x variants x MHA/GQA/MQA over some of FlashAttention-2's
 * shapes; fp16/bf16 also by FA2's criterion (each gradient's max error at
 * most 2x that of the same math done in the input dtype). O and LSE come
 * from the library's own forward, as a training step would have them.
 * Outputs are poisoned (NaN bytes, with a poisoned tail past each view)
 * before every call. Also: bitwise determinism over repeated calls (and,
 * through FLASHCL_BWD_HASH_FILE, across processes and PoCL thread
 * counts), the host-memory call, and every bad input's status, message,
 * and untouched outputs.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "oracle_bwd.h"
#include "test_common.h"

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { TAIL = 64 }; /* poisoned bytes past each output view */

typedef struct bwd_case {
    flashcl_dtype dtype;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v;
    int causal, top_left, window, left, right;
    float scale, softcap;
    int explicit_scale, alibi, bias, mask, sinks;
    flashcl_layout layout;
} bwd_case;

#define F32 FLASHCL_DTYPE_FP32
#define F16 FLASHCL_DTYPE_FP16
#define B16 FLASHCL_DTYPE_BF16
#define F64 FLASHCL_DTYPE_FP64
#define BHND FLASHCL_LAYOUT_BHND
#define BNHD FLASHCL_LAYOUT_BNHD

/* dtype, B, Hq, Hkv, Nq, Nk, D, Dv, causal, top-left (2: absolute
 * positions, below), window, left, right, scale, softcap, explicit, alibi,
 * bias, mask, sinks, layout */
#define ABSOLUTE_Q_POSITION 301 /* diag 81, against Nk - Nq = 90 or 148 */
#define ABSOLUTE_K_POSITION 220
static const bwd_case cases[] = {
    {F32, 1, 2, 2, 113, 203, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BNHD},
    {F32, 1, 4, 2, 108, 256, 59, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BNHD},
    {F32, 2, 2, 1, 203, 113, 32, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BHND},
    {F32, 1, 2, 2, 113, 203, 64, 0, 0, 0, 1, 20, 7, 0, 0.5f, 0, 0, 0, 0, 0, BNHD},
    {F32, 1, 4, 2, 108, 256, 32, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, BNHD},
    {F32, 1, 2, 2, 113, 203, 32, 0, 0, 0, 0, 0, 0, -0.3f, 0, 0, 0, 0, 1, 0, BNHD},
    {F32, 2, 4, 2, 113, 203, 64, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, BNHD},
    {F32, 1, 2, 1, 108, 256, 64, 32, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, BNHD},
    {F32, 1, 4, 1, 113, 203, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BHND},
    {F16, 1, 4, 2, 113, 203, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BNHD},
    {F16, 1, 4, 1, 108, 256, 64, 0, 1, 0, 0, 0, 0, 0, 0.5f, 0, 0, 0, 0, 0, BNHD},
    {B16, 1, 2, 2, 113, 203, 59, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BNHD},
    {B16, 1, 4, 2, 108, 256, 64, 0, 1, 0, 1, 30, 0, 0, 0, 0, 0, 0, 0, 0, BHND},
    {B16, 1, 2, 1, 113, 203, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, BNHD},
    {F64, 1, 4, 2, 113, 203, 64, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, BNHD},
    {F32, 1, 2, 1, 108, 256, 64, 0, 1, 2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, BNHD},
    {F16, 1, 4, 2, 113, 203, 64, 0, 0, 2, 1, 40, 3, 0, 0, 0, 0, 0, 0, 0, BNHD},
};

/* One device tensor and its host bytes. */
typedef struct buf {
    cl_mem mem;
    size_t bytes; /* of the view; the buffer has TAIL more */
    unsigned char *host;
} buf;

/* Everything one call needs. */
typedef struct setup {
    const bwd_case *c;
    size_t elem;
    buf q, k, v, o, lse, d_o, d_q, d_k, d_v, d_sinks;
    buf slopes, bias, mask, sinks;
    flashcl_attention_desc desc;
    flashcl_backward_desc bwd;
    const int *cu_q, *cu_k; /* varlen: host prefix sums, else NULL */
} setup;

static size_t count4(const bwd_case *c, int heads, int seq, int dim)
{
    return (size_t)c->batch * (size_t)heads * (size_t)seq * (size_t)dim;
}

static int dim_v(const bwd_case *c)
{
    return c->head_dim_v ? c->head_dim_v : c->head_dim;
}

static void make_buf(buf *b, size_t bytes, cl_command_queue queue,
                     cl_context context)
{
    b->bytes = bytes;
    b->host = malloc(bytes + TAIL);
    ck_assert_ptr_nonnull(b->host);
    b->mem = create_buffer(context, bytes + TAIL);
    poison_buffer(queue, b->mem, bytes + TAIL);
}

/* Random values of `dtype` (already rounded), uploaded. */
static void random_buf(buf *b, size_t count, flashcl_dtype dtype,
                       double amplitude, rng *r, cl_command_queue queue,
                       cl_context context)
{
    const size_t size = oracle_dtype_size(dtype);
    make_buf(b, count * size, queue, context);
    for (size_t e = 0; e < count; ++e)
        oracle_store(b->host, e, dtype, rng_normal(r) * amplitude);
    write_buffer(queue, b->mem, b->host, b->bytes);
}

static void free_buf(buf *b)
{
    if (b->mem)
        clReleaseMemObject(b->mem);
    free(b->host);
    memset(b, 0, sizeof *b);
}

static void add_variants(setup *s, rng *r, cl_command_queue queue,
                         cl_context context)
{
    const bwd_case *c = s->c;
    flashcl_attention_desc *d = &s->desc;
    const size_t scores = count4(c, c->heads_q, c->seqlen_q, c->seqlen_k);
    if (c->alibi) {
        make_buf(&s->slopes, 4 * (size_t)c->heads_q, queue, context);
        for (int h = 0; h < c->heads_q; ++h)
            ((float *)s->slopes.host)[h] = 0.05f * (float)(h + 1);
        write_buffer(queue, s->slopes.mem, s->slopes.host, s->slopes.bytes);
        d->alibi_slopes.buffer = s->slopes.mem;
    }
    if (c->bias) {
        random_buf(&s->bias, scores, FLASHCL_DTYPE_FP32, 1.0, r, queue,
                   context);
        d->bias = (flashcl_tensor){s->bias.mem, 0,
                                   (size_t)c->heads_q * c->seqlen_q *
                                       c->seqlen_k,
                                   (size_t)c->seqlen_q * c->seqlen_k,
                                   (size_t)c->seqlen_k, 1};
        d->bias_dtype = FLASHCL_DTYPE_FP32;
    }
    if (c->mask) {
        make_buf(&s->mask, scores, queue, context);
        for (size_t e = 0; e < scores; ++e)
            s->mask.host[e] = (rng_next(r) % 10) < 7;
        /* Row 3 of every head sees no key: zero gradients, never NaN. */
        for (size_t bh = 0; bh < scores / ((size_t)c->seqlen_q * c->seqlen_k);
             ++bh)
            memset(s->mask.host + (bh * c->seqlen_q + 3) * c->seqlen_k, 0,
                   (size_t)c->seqlen_k);
        write_buffer(queue, s->mask.mem, s->mask.host, s->mask.bytes);
        d->mask = (flashcl_tensor){s->mask.mem, 0,
                                   (size_t)c->heads_q * c->seqlen_q *
                                       c->seqlen_k,
                                   (size_t)c->seqlen_q * c->seqlen_k,
                                   (size_t)c->seqlen_k, 1};
    }
    if (c->sinks) {
        random_buf(&s->sinks, (size_t)c->heads_q, FLASHCL_DTYPE_FP32, 1.0, r,
                   queue, context);
        d->sinks.buffer = s->sinks.mem;
    }
}

/* AUTO: FLASHCL_BACKEND picks (test_backward_reference sets it). */
static flashcl_backend forced_backend = FLASHCL_BACKEND_AUTO;

static void make_inputs(setup *s, const bwd_case *c, uint64_t seed)
{
    flashcl_context *ctx = shared_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    memset(s, 0, sizeof *s);
    s->c = c;
    s->elem = oracle_dtype_size(c->dtype);
    rng r = rng_seeded(seed);
    const int dv = dim_v(c);
    random_buf(&s->q, count4(c, c->heads_q, c->seqlen_q, c->head_dim),
               c->dtype, 1.0, &r, queue, context);
    random_buf(&s->k, count4(c, c->heads_kv, c->seqlen_k, c->head_dim),
               c->dtype, 1.0, &r, queue, context);
    random_buf(&s->v, count4(c, c->heads_kv, c->seqlen_k, dv), c->dtype, 1.0,
               &r, queue, context);
    random_buf(&s->d_o, count4(c, c->heads_q, c->seqlen_q, dv), c->dtype, 1.0,
               &r, queue, context);
    make_buf(&s->o, count4(c, c->heads_q, c->seqlen_q, dv) * s->elem, queue,
             context);
    make_buf(&s->lse, count4(c, c->heads_q, c->seqlen_q, 1) * 4, queue,
             context);
    make_buf(&s->d_q, s->q.bytes, queue, context);
    make_buf(&s->d_k, s->k.bytes, queue, context);
    make_buf(&s->d_v, s->v.bytes, queue, context);
    if (c->sinks)
        make_buf(&s->d_sinks, 4 * (size_t)c->heads_q, queue, context);
    flashcl_attention_desc *d = &s->desc;
    flashcl_attention_desc_init(d);
    d->batch = c->batch;
    d->heads_q = c->heads_q;
    d->heads_kv = c->heads_kv;
    d->seqlen_q = c->seqlen_q;
    d->seqlen_k = c->seqlen_k;
    d->head_dim = c->head_dim;
    d->head_dim_v = c->head_dim_v;
    d->dtype = c->dtype;
    d->layout = c->layout;
    d->backend = forced_backend;
    d->scale = c->scale;
    d->explicit_scale = c->explicit_scale;
    d->causal = c->causal;
    d->causal_align = c->top_left == 1   ? FLASHCL_CAUSAL_TOP_LEFT
                      : c->top_left == 2 ? FLASHCL_CAUSAL_ABSOLUTE
                                         : FLASHCL_CAUSAL_BOTTOM_RIGHT;
    if (c->top_left == 2) { /* a chunk of a longer sequence */
        d->q_position = ABSOLUTE_Q_POSITION;
        d->k_position = ABSOLUTE_K_POSITION;
    }
    d->window = c->window;
    d->window_left = c->left;
    d->window_right = c->right;
    d->softcap = c->softcap;
    d->q.buffer = s->q.mem;
    d->k.buffer = s->k.mem;
    d->v.buffer = s->v.mem;
    d->o.buffer = s->o.mem;
    d->lse.buffer = s->lse.mem;
    add_variants(s, &r, queue, context);
    flashcl_backward_desc_init(&s->bwd);
    s->bwd.d_o.buffer = s->d_o.mem;
    s->bwd.d_q.buffer = s->d_q.mem;
    s->bwd.d_k.buffer = s->d_k.mem;
    s->bwd.d_v.buffer = s->d_v.mem;
    s->bwd.d_sinks.buffer = s->d_sinks.mem;
}

/* O and LSE from the library's forward, as a training step has them. */
static void run_forward(setup *s)
{
    flashcl_context *ctx = shared_context();
    flashcl_status status = flashcl_attention_forward(ctx, NULL, &s->desc, 0,
                                                      NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "forward: %s: %s",
                  flashcl_status_string(status),
                  flashcl_context_last_error(ctx));
}

static void make_setup(setup *s, const bwd_case *c, uint64_t seed)
{
    make_inputs(s, c, seed);
    run_forward(s);
}

static void free_setup(setup *s)
{
    buf *all[] = {&s->q, &s->k, &s->v, &s->o, &s->lse, &s->d_o, &s->d_q,
                  &s->d_k, &s->d_v, &s->d_sinks, &s->slopes, &s->bias,
                  &s->mask, &s->sinks};
    for (size_t i = 0; i < LENGTH(all); ++i)
        free_buf(all[i]);
}

static flashcl_status run_backward(setup *s)
{
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    buf *outs[] = {&s->d_q, &s->d_k, &s->d_v, &s->d_sinks};
    for (size_t i = 0; i < LENGTH(outs); ++i)
        if (outs[i]->mem)
            poison_buffer(queue, outs[i]->mem, outs[i]->bytes + TAIL);
    cl_event done = NULL;
    flashcl_status status = flashcl_attention_backward(
        ctx, NULL, &s->desc, &s->bwd, 0, NULL, &done);
    if (status == FLASHCL_SUCCESS) {
        CL_CHECK(clWaitForEvents(1, &done));
        clReleaseEvent(done);
        for (size_t i = 0; i < LENGTH(outs); ++i)
            if (outs[i]->mem)
                read_buffer(queue, outs[i]->mem, outs[i]->host,
                            outs[i]->bytes + TAIL);
    }
    return status;
}

/* ---- against the oracle -------------------------------------------- */

typedef struct grads {
    double *dq, *dk, *dv, *d_sinks;
} grads;

/* The oracle of the problem, in the descriptor's layout. */
static void oracle_of(const setup *s, oracle_problem *p, double **d_o)
{
    const bwd_case *c = s->c;
    oracle_inputs in = {s->q.host, s->k.host, s->v.host,
                        (const float *)s->slopes.host, s->bias.host,
                        s->mask.host, (const float *)s->sinks.host};
    char why[256];
    ck_assert_msg(oracle_problem_from_desc(&s->desc, in.q ? &in : NULL, p,
                                           why, sizeof why) == 0,
                  "%s", why);
    const int dv = dim_v(c);
    size_t stride[4];
    oracle_packed_strides(c->layout, (size_t)c->heads_q, (size_t)c->seqlen_q,
                          (size_t)dv, stride);
    *d_o = malloc(count4(c, c->heads_q, c->seqlen_q, dv) * sizeof **d_o);
    double *next = *d_o;
    for (int b = 0; b < c->batch; ++b)
        for (int h = 0; h < c->heads_q; ++h)
            for (int i = 0; i < c->seqlen_q; ++i)
                for (int d = 0; d < dv; ++d)
                    *next++ = oracle_load(s->d_o.host,
                                          b * stride[0] + h * stride[1] +
                                              i * stride[2] + d,
                                          c->dtype);
}

static grads oracle_grads_of(const setup *s, flashcl_dtype rounding)
{
    const bwd_case *c = s->c;
    oracle_problem p;
    double *d_o;
    oracle_of(s, &p, &d_o);
    if (s->cu_q)
        p.batch = 1; /* packed: one batch entry of the totals' rows */
    grads g = {
        malloc(count4(c, c->heads_q, c->seqlen_q, c->head_dim) * 8),
        malloc(count4(c, c->heads_kv, c->seqlen_k, c->head_dim) * 8),
        malloc(count4(c, c->heads_kv, c->seqlen_k, dim_v(c)) * 8),
        c->sinks ? malloc((size_t)c->heads_q * 8) : NULL};
    oracle_grads og = {g.dq, g.dk, g.dv, g.d_sinks};
    ck_assert_int_eq(
        s->cu_q ? oracle_backward_varlen(&p, (size_t)s->desc.batch, s->cu_q,
                                         s->cu_k, d_o, rounding, &og)
                : oracle_backward(&p, d_o, rounding, &og),
        0);
    free(d_o);
    return g;
}

static void free_grads(grads *g)
{
    free(g->dq);
    free(g->dk);
    free(g->dv);
    free(g->d_sinks);
}

/* Max |device - oracle| over a tensor packed in `layout` on the device
 * and [b][h][s][d] in the oracle; NaN anywhere gives infinity. */
static double max_error(const buf *device, flashcl_dtype dtype,
                        const double *ref, const bwd_case *c, int heads,
                        int seq, int dim, double *max_ref)
{
    size_t stride[4];
    oracle_packed_strides(c->layout, (size_t)heads, (size_t)seq, (size_t)dim,
                          stride);
    double worst = 0;
    *max_ref = 0;
    const double *next = ref;
    for (int b = 0; b < c->batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < seq; ++i)
                for (int d = 0; d < dim; ++d, ++next) {
                    const double got = oracle_load(
                        device->host,
                        b * stride[0] + h * stride[1] + i * stride[2] + d,
                        dtype);
                    const double err = fabs(got - *next);
                    worst = err <= worst ? worst : (isnan(err) ? INFINITY : err);
                    *max_ref = fmax(*max_ref, fabs(*next));
                }
    return worst;
}

static void check_tail(const buf *b, const char *name)
{
    for (size_t e = 0; e < TAIL; ++e)
        ck_assert_msg(b->host[b->bytes + e] == 0xff,
                      "%s: byte %zu past the view was written", name, e);
}

static void describe(const bwd_case *c, char *text, size_t cap)
{
    snprintf(text, cap,
             "%s B%d Hq%d Hkv%d (%d,%d) D%d Dv%d causal %d%s window %d "
             "softcap %g scale %g%s alibi %d bias %d mask %d sinks %d",
             oracle_dtype_name(c->dtype), c->batch, c->heads_q, c->heads_kv,
             c->seqlen_q, c->seqlen_k, c->head_dim, dim_v(c), c->causal,
             c->top_left ? " (top-left)" : "", c->window, (double)c->softcap,
             (double)c->scale, c->explicit_scale ? " (explicit)" : "",
             c->alibi, c->bias, c->mask, c->sinks);
}

static void check_setup(setup *s_in, const char *text);

static void check_gradients(const bwd_case *c, uint64_t seed)
{
    flashcl_device_info info;
    ck_assert_int_eq(flashcl_context_device_info(shared_context(), &info),
                     FLASHCL_SUCCESS);
    if (c->dtype == F64 && !info.has_fp64)
        return; /* test_fp64_absent covers the refusal */
    char text[256];
    describe(c, text, sizeof text);
    setup s;
    make_setup(&s, c, seed);
    check_setup(&s, text);
}

/* Runs the backward of a set-up call and checks it against the oracle;
 * frees the setup. */
static void check_setup(setup *s_in, const char *text)
{
    setup s = *s_in;
    const bwd_case *c = s.c;
    const flashcl_status status = run_backward(&s);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s: %s: %s", text,
                  flashcl_status_string(status),
                  flashcl_context_last_error(shared_context()));
    if (s.desc.backend != FLASHCL_BACKEND_REFERENCE) { /* as the forward */
        flashcl_variant_info info;
        ck_assert_int_eq(flashcl_describe_backward(shared_context(), &s.desc,
                                                   &s.bwd, &info),
                         FLASHCL_SUCCESS);
        expect_path_info(&info, c->dtype, text);
    }
    grads exact = oracle_grads_of(&s, FLASHCL_DTYPE_FP64);
    const bool low = c->dtype == F16 || c->dtype == B16;
    grads ref_low = {NULL, NULL, NULL, NULL};
    if (low)
        ref_low = oracle_grads_of(&s, c->dtype);
    const struct {
        const char *name;
        const buf *device;
        const double *exact, *low;
        int heads, seq, dim;
    } outs[3] = {
        {"dq", &s.d_q, exact.dq, ref_low.dq, c->heads_q, c->seqlen_q,
         c->head_dim},
        {"dk", &s.d_k, exact.dk, ref_low.dk, c->heads_kv, c->seqlen_k,
         c->head_dim},
        {"dv", &s.d_v, exact.dv, ref_low.dv, c->heads_kv, c->seqlen_k,
         dim_v(c)},
    };
    /* fp32 accumulates over a few hundred terms; fp64 reads an fp32 LSE,
     * which bounds P's relative error near 1e-7; fp16/bf16 follow FA2's
     * criterion. */
    const double rel = c->dtype == F64 ? 1e-6 : 2e-5;
    for (int t = 0; t < 3; ++t) {
        double max_ref;
        const double err = max_error(outs[t].device, c->dtype, outs[t].exact,
                                     c, outs[t].heads, outs[t].seq,
                                     outs[t].dim, &max_ref);
        check_tail(outs[t].device, outs[t].name);
        if (!low) {
            ck_assert_msg(err <= rel * fmax(max_ref, 1e-3),
                          "%s: %s max error %g (max |ref| %g)", text,
                          outs[t].name, err, max_ref);
            continue;
        }
        /* The low-precision reference, stored as the device stores. */
        double low_err = 0, unused;
        buf as_stored = {NULL, outs[t].device->bytes, NULL};
        as_stored.host = malloc(as_stored.bytes);
        size_t stride[4];
        oracle_packed_strides(c->layout, (size_t)outs[t].heads,
                              (size_t)outs[t].seq, (size_t)outs[t].dim,
                              stride);
        const double *next = outs[t].low;
        for (int b = 0; b < c->batch; ++b)
            for (int h = 0; h < outs[t].heads; ++h)
                for (int i = 0; i < outs[t].seq; ++i)
                    for (int d = 0; d < outs[t].dim; ++d)
                        oracle_store(as_stored.host,
                                     b * stride[0] + h * stride[1] +
                                         i * stride[2] + d,
                                     c->dtype, *next++);
        low_err = max_error(&as_stored, c->dtype, outs[t].exact, c,
                            outs[t].heads, outs[t].seq, outs[t].dim, &unused);
        free(as_stored.host);
        ck_assert_msg(err <= 2 * low_err,
                      "%s: %s max error %g, more than 2x the %s reference's "
                      "%g (max |ref| %g)",
                      text, outs[t].name, err, oracle_dtype_name(c->dtype),
                      low_err, max_ref);
    }
    for (int h = 0; c->sinks && h < c->heads_q; ++h) {
        const double got = ((const float *)s.d_sinks.host)[h];
        ck_assert_msg(fabs(got - exact.d_sinks[h]) <=
                          (low ? 2e-2 : c->dtype == F64 ? 1e-6 : 1e-4) *
                              fmax(1, fabs(exact.d_sinks[h])),
                      "%s: d_sinks[%d] = %.8g, oracle %.8g", text, h, got,
                      exact.d_sinks[h]);
    }
    if (c->sinks)
        check_tail(&s.d_sinks, "d_sinks");
    free_grads(&exact);
    free_grads(&ref_low);
    free_setup(&s);
}

/* FLASHCL_TEST_BWD_CASES="i,j,...": only those cases (the emulated
 * tensor-core run, whose kernels compile slowly, takes the 16-bit ones). */
static bool case_selected(int index)
{
    const char *list = getenv("FLASHCL_TEST_BWD_CASES");
    if (!list || !*list)
        return true;
    for (const char *at = list; *at;) {
        char *end;
        const long value = strtol(at, &end, 10);
        if (end == at)
            return false;
        if (value == index)
            return true;
        at = *end == ',' ? end + 1 : end;
    }
    return false;
}

START_TEST(test_gradients)
{
    if (case_selected(_i))
        check_gradients(&cases[_i], 1000 + (uint64_t)_i);
}
END_TEST

/* The reference backward cuts the query rows into chunks under the
 * scratch limit: K, V, dK and dV of one KV head (Nk (2D + 2Dv) reals),
 * d_sinks' sums (Hq), then per row Q, dQ, dO, S and dP (2D + Dv + 2Nk)
 * and a sink term. A limit of 40 rows gives 3 chunks of 113 rows, whose
 * dK/dV sums (and GQA's over 2 query heads) must match the oracle; a
 * limit one byte below a single row is refused, writing nothing. */
START_TEST(test_reference_chunks)
{
    const bwd_case c = {F32, 2, 4, 2, 113, 203, 64, 0, 1, 0, 0, 0, 0,
                        0, 0.5f, 0, 0, 0, 0, 1, BNHD};
    flashcl_context *ctx = shared_context();
    const size_t fixed = (size_t)203 * (2 * 64 + 2 * 64) * 4 + 4 * 4;
    const size_t per_row = (size_t)(2 * 64 + 64 + 2 * 203 + 1) * 4;
    const flashcl_status set =
        flashcl_context_set_scratch_limit(ctx, fixed + 40 * per_row);
    if (set == FLASHCL_ERROR_UNSUPPORTED)
        return; /* built without the reference backend (CLBlast) */
    ck_assert_int_eq(set, FLASHCL_SUCCESS);
    forced_backend = FLASHCL_BACKEND_REFERENCE;
    check_gradients(&c, 77);
    ck_assert_int_eq(flashcl_context_set_scratch_limit(ctx,
                                                       fixed + per_row - 1),
                     FLASHCL_SUCCESS);
    setup s;
    make_setup(&s, &c, 78);
    ck_assert_int_eq(run_backward(&s), FLASHCL_ERROR_OUT_OF_MEMORY);
    ck_assert(strstr(flashcl_context_last_error(ctx), "scratch limit"));
    const buf *outs[] = {&s.d_q, &s.d_k, &s.d_v, &s.d_sinks};
    for (size_t i = 0; i < LENGTH(outs); ++i) {
        read_buffer(flashcl_context_queue(ctx), outs[i]->mem, outs[i]->host,
                    outs[i]->bytes);
        for (size_t e = 0; e < outs[i]->bytes; ++e)
            ck_assert_msg(outs[i]->host[e] == 0xff,
                          "output %zu byte %zu written", i, e);
    }
    free_setup(&s);
    ck_assert_int_eq(flashcl_context_set_scratch_limit(ctx, 0),
                     FLASHCL_SUCCESS);
    forced_backend = FLASHCL_BACKEND_AUTO;
}
END_TEST

/* The same inputs give the same bits, call after call (no atomics, a
 * fixed order). */
START_TEST(test_deterministic)
{
    /* case 6: its programs are compiled already; FLASHCL_TEST_BWD_DET_CASE
     * picks another (a 16-bit one for the tensor-core kernels) */
    const char *pick = getenv("FLASHCL_TEST_BWD_DET_CASE");
    const int index = pick ? atoi(pick) : 6;
    ck_assert_int_ge(index, 0);
    ck_assert_int_lt(index, (int)LENGTH(cases));
    const bwd_case c = cases[index];
    setup s;
    make_setup(&s, &c, 77);
    ck_assert_int_eq(run_backward(&s), FLASHCL_SUCCESS);
    buf *outs[] = {&s.d_q, &s.d_k, &s.d_v, &s.d_sinks};
    unsigned char *first[4];
    for (int t = 0; t < 4; ++t) {
        first[t] = malloc(outs[t]->bytes);
        memcpy(first[t], outs[t]->host, outs[t]->bytes);
    }
    for (int repeat = 1; repeat < 20; ++repeat) {
        ck_assert_int_eq(run_backward(&s), FLASHCL_SUCCESS);
        for (int t = 0; t < 4; ++t)
            ck_assert_msg(memcmp(first[t], outs[t]->host, outs[t]->bytes) == 0,
                          "output %d differs on repeat %d", t, repeat);
    }
    /* Across processes and thread counts: FLASHCL_BWD_HASH_FILE names a
     * file that the first run writes the outputs' hash into and later
     * runs compare with (ctest test_backward_processes). */
    uint64_t hash = 0xcbf29ce484222325ull; /* FNV-1a */
    for (int t = 0; t < 4; ++t) {
        for (size_t e = 0; e < outs[t]->bytes; ++e)
            hash = (hash ^ first[t][e]) * 0x100000001b3ull;
        free(first[t]);
    }
    const char *path = getenv("FLASHCL_BWD_HASH_FILE");
    FILE *file = path ? fopen(path, "r") : NULL;
    if (file) {
        unsigned long long stored = 0;
        ck_assert_int_eq(fscanf(file, "%llx", &stored), 1);
        fclose(file);
        ck_assert_msg(stored == hash,
                      "gradients differ from another process's: hash "
                      "%016llx, stored %016llx",
                      (unsigned long long)hash, stored);
    } else if (path) {
        file = fopen(path, "w");
        ck_assert_ptr_nonnull(file);
        fprintf(file, "%016llx\n", (unsigned long long)hash);
        fclose(file);
    }
    free_setup(&s);
}
END_TEST

/* The host-memory call gives the device call's bits. */
START_TEST(test_host_call)
{
    const bwd_case c = {B16, 2, 2, 1, 37, 53, 32, 0, 0, 0, 0, 0, 0,
                        0, 0, 0, 1, 0, 0, 1, BNHD}; /* case 13's programs */
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    setup s;
    make_setup(&s, &c, 31);
    ck_assert_int_eq(run_backward(&s), FLASHCL_SUCCESS);
    read_buffer(queue, s.o.mem, s.o.host, s.o.bytes);
    read_buffer(queue, s.lse.mem, s.lse.host, s.lse.bytes);
    const buf *device[] = {&s.d_q, &s.d_k, &s.d_v, &s.d_sinks};
    unsigned char *host[4];
    for (int t = 0; t < 4; ++t) {
        host[t] = malloc(device[t]->bytes);
        memset(host[t], 0xff, device[t]->bytes);
    }
    const flashcl_status status = flashcl_attention_backward_host(
        ctx, &s.desc, s.q.host, s.k.host, s.v.host, s.o.host,
        (const float *)s.lse.host, s.d_o.host, host[0], host[1], host[2],
        (float *)host[3]);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s",
                  flashcl_context_last_error(ctx));
    for (int t = 0; t < 4; ++t) {
        ck_assert_msg(memcmp(host[t], device[t]->host, device[t]->bytes) == 0,
                      "output %d of the host call differs", t);
        free(host[t]);
    }
    ck_assert_int_eq(flashcl_attention_backward_host(
                         ctx, &s.desc, s.q.host, s.k.host, s.v.host, NULL,
                         (const float *)s.lse.host, s.d_o.host, s.d_q.host,
                         s.d_k.host, s.d_v.host, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    free_setup(&s);
}
END_TEST

/* ---- varlen (cu_seqlens) -------------------------------------------- */

/* Four sequences of unequal lengths, both sides packed: query lengths 37,
 * 0, 70, 9 and key lengths 53, 20, 45, 0, so one sequence has no rows
 * (its keys get dK = dV = 0) and one no keys (its rows get dQ = 0), and
 * the sequences are longer and shorter than their keys (both causal
 * alignments then differ). The packed totals are the cases' seqlen_q and
 * seqlen_k, batch 1 in the buffers. */
enum { VARLEN_BATCH = 4, VARLEN_MAX_Q = 70, VARLEN_MAX_K = 53 };
static const int varlen_cu_q[VARLEN_BATCH + 1] = {0, 37, 37, 107, 116};
static const int varlen_cu_k[VARLEN_BATCH + 1] = {0, 53, 73, 118, 118};

static const bwd_case varlen_cases[] = {
    {F32, 1, 4, 2, 116, 118, 64, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, BNHD},
    {F32, 1, 2, 2, 116, 118, 32, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BHND},
    {F32, 1, 4, 1, 116, 118, 64, 32, 0, 0, 1, 20, 7, 0, 0, 0, 0, 0, 0, 0,
     BNHD},
    {F16, 1, 4, 2, 116, 118, 64, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BNHD},
    {F16, 1, 2, 1, 116, 118, 32, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, BNHD},
};

static cl_mem int_buffer(const int *values, size_t count)
{
    flashcl_context *ctx = shared_context();
    cl_mem mem = create_buffer(flashcl_context_cl_context(ctx),
                               count * sizeof *values);
    write_buffer(flashcl_context_queue(ctx), mem, values,
                 count * sizeof *values);
    return mem;
}

static void set_varlen(setup *s, cl_mem cu_q, cl_mem cu_k)
{
    s->desc.batch = VARLEN_BATCH;
    s->desc.cu_seqlens_q.buffer = cu_q;
    s->desc.cu_seqlens_k.buffer = cu_k;
    s->desc.max_seqlen_q = VARLEN_MAX_Q;
    s->desc.max_seqlen_k = VARLEN_MAX_K;
    s->cu_q = varlen_cu_q;
    s->cu_k = varlen_cu_k;
}

START_TEST(test_varlen)
{
    const bwd_case *c = &varlen_cases[_i];
    char text[256], what[200];
    describe(c, what, sizeof what);
    snprintf(text, sizeof text, "varlen %s", what);
    cl_mem cu_q = int_buffer(varlen_cu_q, VARLEN_BATCH + 1);
    cl_mem cu_k = int_buffer(varlen_cu_k, VARLEN_BATCH + 1);
    setup s;
    make_inputs(&s, c, 500 + (uint64_t)_i);
    set_varlen(&s, cu_q, cu_k);
    run_forward(&s);
    check_setup(&s, text);
    clReleaseMemObject(cu_q);
    clReleaseMemObject(cu_k);
}
END_TEST

/* Prefix sums the device clamps (include/flashcl.h: decreasing, past
 * the total, negative) or a cu_seqlens buffer too small: the backward
 * gives the forward's status, and writes nothing past its views. */
START_TEST(test_varlen_bad_prefix_sums)
{
    static const int decreasing[VARLEN_BATCH + 1] = {0, 40, 20, 116, 116};
    static const int outside[VARLEN_BATCH + 1] = {-3, 37, 37, 500, 116};
    const struct {
        const char *name;
        const int *cu_q;
        size_t count;
    } spoils[] = {
        {"decreasing", decreasing, VARLEN_BATCH + 1},
        {"outside the total", outside, VARLEN_BATCH + 1},
        {"buffer too small", varlen_cu_q, VARLEN_BATCH},
    };
    flashcl_context *ctx = shared_context();
    cl_mem cu_k = int_buffer(varlen_cu_k, VARLEN_BATCH + 1);
    for (size_t n = 0; n < LENGTH(spoils); ++n) {
        cl_mem cu_q = int_buffer(spoils[n].cu_q, spoils[n].count);
        setup s;
        make_inputs(&s, &varlen_cases[0], 600 + n);
        set_varlen(&s, cu_q, cu_k);
        const flashcl_status forward = flashcl_attention_forward(
            ctx, NULL, &s.desc, 0, NULL, NULL);
        const flashcl_status backward = run_backward(&s);
        ck_assert_msg(backward == forward,
                      "%s: the backward gave %s (%s), the forward %s",
                      spoils[n].name, flashcl_status_string(backward),
                      flashcl_context_last_error(ctx),
                      flashcl_status_string(forward));
        if (backward == FLASHCL_SUCCESS) {
            check_tail(&s.d_q, "d_q");
            check_tail(&s.d_k, "d_k");
            check_tail(&s.d_v, "d_v");
        }
        free_setup(&s);
        clReleaseMemObject(cu_q);
    }
    clReleaseMemObject(cu_k);
}
END_TEST

/* ---- dQ inside the dK/dV pass (BWD_FUSED_DQ) ------------------------ */

/* Several key blocks each (the CPUs' block is 512 keys, fewer only for
 * short calls): bands that start and end inside blocks (causal in both
 * alignments, a window), GQA, 16-bit types, D_v != D, ALiBi and sinks. */
static const bwd_case fused_cases[] = {
    {F32, 1, 2, 1, 300, 1100, 64, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BNHD},
    {F32, 1, 4, 2, 640, 600, 32, 0, 0, 0, 1, 100, 30, 0, 0, 0, 0, 0, 0, 0,
     BHND},
    {B16, 1, 2, 2, 600, 650, 32, 0, 1, 1, 0, 0, 0, 0, 20, 0, 0, 0, 0, 0, BNHD},
    {F16, 1, 2, 1, 130, 560, 64, 32, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1,
     BNHD},
};

/* The plan's reason names the dQ kernel that runs: returns whether it is
 * the sum of the dK/dV pass's parts. */
static bool plan_fuses_dq(setup *s, const char *text)
{
    flashcl_variant_info info;
    ck_assert_int_eq(flashcl_describe_backward(shared_context(), &s->desc,
                                               &s->bwd, &info),
                     FLASHCL_SUCCESS);
    const bool fused = strstr(info.reason, "flashcl_bwd_dq_sum") != NULL;
    ck_assert_msg(fused || strstr(info.reason, "flashcl_bwd_dq"), "%s: %s",
                  text, info.reason);
    return fused;
}

/* The same gradients, within the oracle's tolerance, with dQ made in the
 * dK/dV pass (PoCL's default plan) and with the separate dQ pass (the
 * parts' scratch over the split-KV scratch limit, here 1 byte). */
START_TEST(test_fused_dq)
{
    const bwd_case *c = &fused_cases[_i];
    flashcl_context *ctx = shared_context();
    if (getenv("FLASHCL_BACKEND") || getenv("FLASHCL_PATH"))
        return; /* the portable plan's choice only */
    flashcl_device_info info;
    ck_assert_int_eq(flashcl_context_device_info(ctx, &info),
                     FLASHCL_SUCCESS);
    char what[200], text[256];
    describe(c, what, sizeof what);
    for (int separate = 0; separate < 2; ++separate) {
        ck_assert_int_eq(
            flashcl_context_set_split_scratch_limit(ctx, separate ? 1 : 0),
            FLASHCL_SUCCESS);
        snprintf(text, sizeof text, "%s, %s", what,
                 separate ? "separate dQ pass" : "default plan");
        setup s;
        make_setup(&s, c, 900 + (uint64_t)_i);
        const bool fused = plan_fuses_dq(&s, text);
        if (separate)
            ck_assert_msg(!fused, "%s: fused past the scratch limit", text);
        else if (strstr(info.platform, "Portable Computing Language"))
            ck_assert_msg(fused, "%s: PoCL's plan makes dQ apart", text);
        check_setup(&s, text);
    }
    ck_assert_int_eq(flashcl_context_set_split_scratch_limit(ctx, 0),
                     FLASHCL_SUCCESS);
}
END_TEST

/* ---- the plan: describe, FLASHCL_PATH ------------------------------- */

/* flashcl_describe_backward reports the plan the backward runs, and
 * refuses what the backward refuses, with the same status and message. */
START_TEST(test_describe)
{
    const bwd_case c = cases[6]; /* sinks: the fourth kernel */
    flashcl_context *ctx = shared_context();
    setup s;
    make_setup(&s, &c, 41);
    flashcl_variant_info info;
    ck_assert_int_eq(flashcl_describe_backward(ctx, &s.desc, &s.bwd, &info),
                     FLASHCL_SUCCESS);
    const char *backend = getenv("FLASHCL_BACKEND");
    if (backend && !strcmp(backend, "reference")) {
        ck_assert_str_eq(info.path, "reference");
    } else {
        ck_assert_str_eq(info.path, "portable");
        ck_assert_str_eq(info.kernel_file, "flash_bwd.cl");
        ck_assert_int_eq(info.head_dim_padded, 64);
        ck_assert(info.work_group_size > 0 && info.block_n > 0);
        char wanted[64];
        snprintf(wanted, sizeof wanted, "-DFLASHCL_BWD_TILE=%d",
                 info.block_n);
        ck_assert_msg(strstr(info.build_options, wanted), "%s",
                      info.build_options);
        ck_assert_msg(strstr(info.reason, "flashcl_bwd_dsinks"), "%s",
                      info.reason);
        ck_assert_int_eq(flashcl_describe_backward(ctx, &s.desc, NULL, &info),
                         FLASHCL_SUCCESS);
        ck_assert_msg(!strstr(info.reason, "flashcl_bwd_dsinks"), "%s",
                      info.reason);
    }
    ck_assert_int_eq(flashcl_describe_backward(ctx, &s.desc, &s.bwd, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    cl_mem spare = create_buffer(flashcl_context_cl_context(ctx), 16);
    const flashcl_attention_desc good = s.desc;
    for (int refused = 0; refused < 2; ++refused) {
        s.desc = good;
        if (refused)
            s.desc.cache_seqlens.buffer = spare;
        else
            s.desc.num_splits = 2;
        char message[512];
        const flashcl_status run = flashcl_attention_backward(
            ctx, NULL, &s.desc, &s.bwd, 0, NULL, NULL);
        snprintf(message, sizeof message, "%s",
                 flashcl_context_last_error(ctx));
        ck_assert_int_eq(run, FLASHCL_ERROR_UNSUPPORTED);
        ck_assert_int_eq(flashcl_describe_backward(ctx, &s.desc, &s.bwd,
                                                   &info),
                         run);
        ck_assert_str_eq(flashcl_context_last_error(ctx), message);
    }
    s.desc = good;
    clReleaseMemObject(spare);
    free_setup(&s);
}
END_TEST

/* FLASHCL_PATH naming no path is refused as the forward refuses it,
 * writing nothing; FLASHCL_PATH=nv_mma, whose tensor-core backward does
 * not run here (no NVIDIA GPU), leaves the portable backward: the same bits
 * as without the variable. */
START_TEST(test_forced_path)
{
    const bwd_case c = cases[0];
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    setup s;
    make_setup(&s, &c, 43);
    ck_assert_int_eq(run_backward(&s), FLASHCL_SUCCESS);
    unsigned char *plain = malloc(s.d_q.bytes);
    memcpy(plain, s.d_q.host, s.d_q.bytes);
    setenv("FLASHCL_PATH", "no-such-path", 1);
    const flashcl_status refused = run_backward(&s);
    const char *message = flashcl_context_last_error(ctx);
    ck_assert_msg(refused == FLASHCL_ERROR_INVALID_VALUE, "got %s (%s)",
                  flashcl_status_string(refused), message);
    ck_assert_msg(strstr(message, "FLASHCL_PATH=\"no-such-path\"") &&
                      strstr(message, "portable"),
                  "%s", message);
    CL_CHECK(clFinish(queue));
    ck_assert(buffer_is_poisoned(queue, s.d_q.mem, s.d_q.bytes + TAIL));
    flashcl_variant_info info;
    ck_assert_int_eq(flashcl_describe_backward(ctx, &s.desc, &s.bwd, &info),
                     FLASHCL_ERROR_INVALID_VALUE);
    setenv("FLASHCL_PATH", "nv_mma", 1);
    ck_assert_int_eq(run_backward(&s), FLASHCL_SUCCESS);
    ck_assert_msg(memcmp(plain, s.d_q.host, s.d_q.bytes) == 0,
                  "FLASHCL_PATH=nv_mma changed the gradients");
    ck_assert_int_eq(flashcl_describe_backward(ctx, &s.desc, &s.bwd, &info),
                     FLASHCL_SUCCESS);
    const char *backend = getenv("FLASHCL_BACKEND");
    if (!backend || strcmp(backend, "reference") != 0) {
        ck_assert_str_eq(info.path, "portable");
        ck_assert_msg(strstr(info.skipped, "nv_mma"), "%s", info.skipped);
    }
    unsetenv("FLASHCL_PATH");
    free(plain);
    free_setup(&s);
}
END_TEST

/* ---- bad input ------------------------------------------------------ */

typedef void (*spoil_fn)(setup *s, cl_mem spare);

static void no_bwd_size(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.struct_size = 0;
}
static void bad_flag(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.nondeterministic = 2;
}
static void no_lse(setup *s, cl_mem spare)
{
    (void)spare;
    s->desc.lse.buffer = NULL;
}
static void no_dq(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.d_q.buffer = NULL;
}
static void no_do(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.d_o.buffer = NULL;
}
static void dk_too_small(setup *s, cl_mem spare)
{
    s->bwd.d_k.buffer = spare; /* 16 bytes */
}
static void do_offset_out(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.d_o.offset = s->d_o.bytes;
}
static void dq_is_dk(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.d_k.buffer = s->d_q.mem;
}
static void dv_is_q(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.d_v.buffer = s->q.mem;
}
static void dq_is_do(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.d_q.buffer = s->d_o.mem;
}
static void dk_is_o(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.d_k.buffer = s->o.mem;
}
static void dq_broadcast(setup *s, cl_mem spare)
{
    (void)spare;
    s->bwd.d_q = (flashcl_tensor){s->d_q.mem, 0, 0, 0, 0, 1};
}
static void splits(setup *s, cl_mem spare)
{
    (void)spare;
    s->desc.num_splits = 2;
}
static void kv_cache(setup *s, cl_mem spare)
{
    s->desc.cache_seqlens.buffer = spare;
}
static void reference_kv_cache(setup *s, cl_mem spare)
{
    s->desc.backend = FLASHCL_BACKEND_REFERENCE;
    s->desc.cache_seqlens.buffer = spare;
}
static void sinks_grad_without_sinks(setup *s, cl_mem spare)
{
    s->bwd.d_sinks.buffer = spare;
}

static const struct {
    const char *name;
    spoil_fn spoil;
    flashcl_status status;
} bad_inputs[] = {
    {"struct_size 0", no_bwd_size, FLASHCL_ERROR_INVALID_VALUE},
    {"nondeterministic 2", bad_flag, FLASHCL_ERROR_INVALID_VALUE},
    {"no lse", no_lse, FLASHCL_ERROR_NULL_ARGUMENT},
    {"no d_q", no_dq, FLASHCL_ERROR_NULL_ARGUMENT},
    {"no d_o", no_do, FLASHCL_ERROR_NULL_ARGUMENT},
    {"d_k outside its buffer", dk_too_small, FLASHCL_ERROR_OUT_OF_BOUNDS},
    {"d_o offset past its buffer", do_offset_out,
     FLASHCL_ERROR_OUT_OF_BOUNDS},
    {"d_k overlaps d_q", dq_is_dk, FLASHCL_ERROR_ALIASING},
    {"d_v overlaps q", dv_is_q, FLASHCL_ERROR_ALIASING},
    {"d_q overlaps d_o", dq_is_do, FLASHCL_ERROR_ALIASING},
    {"d_k overlaps o", dk_is_o, FLASHCL_ERROR_ALIASING},
    {"d_q elements share memory", dq_broadcast, FLASHCL_ERROR_ALIASING},
    {"num_splits 2", splits, FLASHCL_ERROR_UNSUPPORTED},
    {"KV cache", kv_cache, FLASHCL_ERROR_UNSUPPORTED},
    {"KV cache on the reference backend", reference_kv_cache,
     FLASHCL_ERROR_UNSUPPORTED},
    {"d_sinks without sinks", sinks_grad_without_sinks,
     FLASHCL_ERROR_INVALID_VALUE},
};

START_TEST(test_bad_input)
{
    const bwd_case c = {F32, 1, 2, 1, 17, 33, 64, 0, 0, 0, 0, 0, 0,
                        0, 0, 0, 0, 0, 0, 0, BNHD}; /* case 0's programs */
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    setup s;
    make_setup(&s, &c, 5);
    cl_mem spare = create_buffer(flashcl_context_cl_context(ctx), 16);
    poison_buffer(queue, spare, 16);
    s.desc.k_new.buffer = NULL;
    const flashcl_attention_desc good_desc = s.desc;
    const flashcl_backward_desc good_bwd = s.bwd;
    buf *outs[] = {&s.d_q, &s.d_k, &s.d_v, &s.q, &s.lse, &s.d_o};
    for (size_t n = 0; n < LENGTH(bad_inputs); ++n) {
        s.desc = good_desc;
        s.bwd = good_bwd;
        bad_inputs[n].spoil(&s, spare);
        for (int t = 0; t < 3; ++t)
            poison_buffer(queue, outs[t]->mem, outs[t]->bytes + TAIL);
        unsigned char before[3][64];
        for (int t = 3; t < 6; ++t)
            read_buffer(queue, outs[t]->mem, before[t - 3], 64);
        const flashcl_status status = flashcl_attention_backward(
            ctx, NULL, &s.desc, &s.bwd, 0, NULL, NULL);
        const char *message = flashcl_context_last_error(ctx);
        ck_assert_msg(status == bad_inputs[n].status,
                      "%s: got %s (%s), expected %s", bad_inputs[n].name,
                      flashcl_status_string(status), message,
                      flashcl_status_string(bad_inputs[n].status));
        ck_assert_msg(message[0] != '\0', "%s: no message",
                      bad_inputs[n].name);
        CL_CHECK(clFinish(queue));
        for (int t = 0; t < 3; ++t)
            ck_assert_msg(buffer_is_poisoned(queue, outs[t]->mem,
                                             outs[t]->bytes + TAIL),
                          "%s: output %d was written", bad_inputs[n].name, t);
        for (int t = 3; t < 6; ++t) {
            unsigned char after[64];
            read_buffer(queue, outs[t]->mem, after, 64);
            ck_assert_msg(memcmp(before[t - 3], after, 64) == 0,
                          "%s: input %d was written", bad_inputs[n].name, t);
        }
    }
    ck_assert_int_eq(flashcl_attention_backward(ctx, NULL, &good_desc, NULL, 0,
                                                NULL, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_int_eq(flashcl_attention_backward(NULL, NULL, &good_desc,
                                                &good_bwd, 0, NULL, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    clReleaseMemObject(spare);
    s.desc = good_desc;
    free_setup(&s);
}
END_TEST

/* seqlen_q 0: dK = dV = 0 written; seqlen_k 0: dQ = 0. */
START_TEST(test_empty_sides)
{
    for (int side = 0; side < 2; ++side) {
        const bwd_case c = {F32, 1, 2, 2, side ? 9 : 0, side ? 0 : 9, 64, 0,
                            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BNHD};
        setup s;
        make_setup(&s, &c, 9);
        ck_assert_int_eq(run_backward(&s), FLASHCL_SUCCESS);
        const buf *written = side ? &s.d_q : &s.d_k;
        for (size_t e = 0; e < written->bytes / 4; ++e)
            ck_assert(((const float *)written->host)[e] == 0.0f);
        free_setup(&s);
    }
}
END_TEST

/* The backward reads an fp32 LSE: a descriptor whose lse_dtype is fp64
 * (as the fp64 forward wrote it, into a buffer that holds it) is refused
 * by name, and dQ, dK and dV stay poisoned. */
START_TEST(test_fp64_lse_refused)
{
    flashcl_context *ctx = shared_context();
    flashcl_device_info info;
    memset(&info, 0, sizeof info);
    if (flashcl_context_device_info(ctx, &info) != FLASHCL_SUCCESS ||
        !info.has_fp64)
        return; /* test_fp64_absent covers the refusal */
    const bwd_case c = {F64, 1, 2, 1, 17, 33, 64, 0, 0, 0, 0, 0, 0,
                        0, 0, 0, 0, 0, 0, 0, BNHD};
    cl_command_queue queue = flashcl_context_queue(ctx);
    setup s;
    make_setup(&s, &c, 9);
    const flashcl_attention_desc fp32_lse = s.desc;
    cl_mem lse64 =
        create_buffer(flashcl_context_cl_context(ctx), s.lse.bytes * 2);
    s.desc.lse.buffer = lse64;
    s.desc.lse_dtype = FLASHCL_DTYPE_FP64;
    /* the fused forward writes it (the reference backend's forward, which
     * test_backward_reference runs, refuses an fp64 lse); the backward
     * then runs on the backend of the run */
    s.desc.backend = FLASHCL_BACKEND_FUSED;
    run_forward(&s);
    s.desc.backend = fp32_lse.backend;
    buf *outs[] = {&s.d_q, &s.d_k, &s.d_v};
    for (int t = 0; t < 3; ++t)
        poison_buffer(queue, outs[t]->mem, outs[t]->bytes + TAIL);
    const flashcl_status status =
        flashcl_attention_backward(ctx, NULL, &s.desc, &s.bwd, 0, NULL, NULL);
    const char *message = flashcl_context_last_error(ctx);
    ck_assert_msg(status == FLASHCL_ERROR_UNSUPPORTED &&
                      strstr(message, "lse_dtype"),
                  "fp64 lse: got %s (%s)", flashcl_status_string(status),
                  message);
    CL_CHECK(clFinish(queue));
    for (int t = 0; t < 3; ++t)
        ck_assert_msg(buffer_is_poisoned(queue, outs[t]->mem,
                                         outs[t]->bytes + TAIL),
                      "fp64 lse: output %d was written", t);
    clReleaseMemObject(lse64);
    s.desc = fp32_lse;
    free_setup(&s);
}
END_TEST

/* ---- the portable backward's tuning key ---------------------------- */

static void write_portable_entry(const char *file, const char *params)
{
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"format\": \"flashcl-tuning-1\", \"winners\": [{\"path\": "
               "\"portable_bwd\", \"dtype\": \"fp32\", \"vendor\": \"*\", "
               "\"arch\": \"*\", \"device\": \"*\", \"head_dim\": 64, "
               "\"causal\": -1, \"seq\": \"*\", \"params\": \"%s\", "
               "\"median_ms\": 1.5, \"measured_on\": \"test\"}]}\n",
            params);
    ck_assert_int_eq(fclose(f), 0);
}

static void describe_portable(setup *s, flashcl_variant_info *info)
{
    ck_assert_int_eq(flashcl_describe_backward(shared_context(), &s->desc,
                                               &s->bwd, info),
                     FLASHCL_SUCCESS);
    ck_assert_str_eq(info->kernel_file, "flash_bwd.cl");
}

/* Path "portable_bwd" of the tuning database: an entry in
 * FLASHCL_TUNING_FILE replaces the hand rules' switches (named in
 * describe's tuning and reason) and its gradients pass the oracle; one
 * outside the switch list's values or the plan's limits is refused with
 * a note; FLASHCL_TUNING=off and the tuner's forced set outrank it. */
START_TEST(test_tuning_entries)
{
    if (getenv("FLASHCL_BACKEND") || getenv("FLASHCL_PATH"))
        return; /* the portable plan's choice only */
    flashcl_context *ctx = shared_context();
    const bwd_case c = cases[0]; /* fp32, D 64 */
    char file[] = "/tmp/flashcl-portable-bwd-XXXXXX";
    const int fd = mkstemp(file);
    ck_assert_int_ge(fd, 0);
    close(fd);
    setup s;
    make_setup(&s, &c, 47);
    flashcl_variant_info rules, info;
    setenv("FLASHCL_TUNING", "off", 1);
    describe_portable(&s, &rules);
    ck_assert_str_eq(rules.tuning, "");

    setenv("FLASHCL_TUNING_FILE", file, 1);
    write_portable_entry(file, "wg=16,rows=2,vec=4,tile=8,fused_dq=0,"
                               "dq_in_memory=0,prefetch=0");
    describe_portable(&s, &info); /* still off */
    ck_assert_str_eq(info.build_options, rules.build_options);
    ck_assert_str_eq(info.tuning, "");
    unsetenv("FLASHCL_TUNING");
    describe_portable(&s, &info);
    const char *wanted[] = {"-DFLASHCL_BWD_WG=16 ", "-DFLASHCL_BWD_ROWS=2 ",
                            "-DFLASHCL_BWD_VEC=4 ", "-DFLASHCL_BWD_TILE=8 ",
                            "-DFLASHCL_BWD_FUSED_DQ=0",
                            "-DFLASHCL_BWD_DQ_IN_MEMORY=0 ",
                            "-DFLASHCL_BWD_PREFETCH=0 "};
    for (size_t i = 0; i < LENGTH(wanted); ++i)
        ck_assert_msg(strstr(info.build_options, wanted[i]), "%s not in %s",
                      wanted[i], info.build_options);
    ck_assert_int_eq(info.work_group_size, 16);
    ck_assert_msg(strstr(info.tuning, "FLASHCL_TUNING_FILE") &&
                      strstr(info.tuning, "portable_bwd"),
                  "%s", info.tuning);
    ck_assert_msg(strstr(info.reason, "(FLASHCL_TUNING_FILE"), "%s",
                  info.reason);
    setup tuned = s;
    make_setup(&tuned, &c, 48);
    check_setup(&tuned, "the FLASHCL_TUNING_FILE entry's plan");

    /* a fused dQ past the scratch limit (1 byte): the entry's other
     * switches stay, dQ made apart */
    write_portable_entry(file, "wg=16,rows=2,vec=4,tile=8,fused_dq=1");
    ck_assert_int_eq(flashcl_context_set_split_scratch_limit(ctx, 1),
                     FLASHCL_SUCCESS);
    describe_portable(&s, &info);
    ck_assert_int_eq(flashcl_context_set_split_scratch_limit(ctx, 0),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(info.work_group_size, 16);
    ck_assert_msg(strstr(info.build_options, "-DFLASHCL_BWD_FUSED_DQ=0") &&
                      strstr(info.tuning, "FLASHCL_TUNING_FILE"),
                  "%s / %s", info.build_options, info.tuning);

    /* refused, with a note: rows outside the switch list's RANGE(1, 4);
     * 1024 rows a group (the plan's limit); a tile not a multiple of the
     * vector (the kernel's #error) */
    const char *refused[] = {"wg=16,rows=5", "wg=256,rows=4",
                             "vec=16,tile=8"};
    for (size_t i = 0; i < LENGTH(refused); ++i) {
        write_portable_entry(file, refused[i]);
        describe_portable(&s, &info);
        ck_assert_msg(!strcmp(info.build_options, rules.build_options),
                      "%s was taken: %s", refused[i], info.build_options);
        ck_assert_msg(strstr(flashcl_context_last_error(ctx),
                             "refused for portable_bwd"),
                      "%s: %s", refused[i], flashcl_context_last_error(ctx));
    }

    /* the tuner's forced set outranks the file */
    write_portable_entry(file, "wg=16");
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, "portable_bwd",
                                                 "wg=32,rows=1"),
                     FLASHCL_SUCCESS);
    describe_portable(&s, &info);
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, NULL, NULL),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(info.work_group_size, 32);
    ck_assert_msg(!strncmp(info.tuning, "forced candidate", 16), "%s",
                  info.tuning);
    unsetenv("FLASHCL_TUNING_FILE");
    unlink(file);
    free_setup(&s);
}
END_TEST

int main(void)
{
    const test_entry gradients[] = {
        {test_gradients, (int)LENGTH(cases)},
        {test_host_call, 0},
        {test_bad_input, 0},
        {test_empty_sides, 0},
        {test_reference_chunks, 0},
    };
    const test_entry plan[] = {
        {test_describe, 0},
        {test_forced_path, 0},
        {test_fp64_lse_refused, 0},
        {test_tuning_entries, 0},
    };
    const test_entry varlen[] = {
        {test_varlen, (int)LENGTH(varlen_cases)},
        {test_varlen_bad_prefix_sums, 0},
    };
    const test_entry determinism[] = {{test_deterministic, 0}};
    const test_entry fused[] = {{test_fused_dq, (int)LENGTH(fused_cases)}};
    const test_group groups[] = {
        {"gradients", 300, NULL, NULL, gradients, LENGTH(gradients)},
        {"determinism", 300, NULL, NULL, determinism, LENGTH(determinism)},
        {"varlen", 300, NULL, NULL, varlen, LENGTH(varlen)},
        {"plan", 300, NULL, NULL, plan, LENGTH(plan)},
        {"fused_dq", 300, NULL, NULL, fused, LENGTH(fused)},
    };
    const int status = run_groups("backward", groups, LENGTH(groups));
    release_shared_context();
    return status;
}
