/*
 * The aligned diagonal (issue 42, item 11): include/flashcl.h defines
 * diag = seqlen_k - seqlen_q (bottom-right) or 0 (top-left), read by the
 * causal band, the sliding window and ALiBi's distance -slope *
 * |i + diag - j|. ALiBi once ignored the top-left alignment unless a
 * window was on. Every variant that reads the diagonal, alone and
 * combined, under both alignments, with Nq < Nk and Nq > Nk, on every route
 * a call can take here: the fused kernel the library picks, the reference
 * backend, the split-KV kernels (num_splits = 2), and a varlen batch on
 * both backends (the diagonal per sequence). The third alignment,
 * absolute positions (diag = q_position - k_position, context
 * parallelism's chunks), runs on the dense routes; the split-KV and varlen
 * routes refuse it (FLASHCL_ERROR_UNSUPPORTED) and write nothing. Each result is checked
 * against the float64 oracle (support/oracle.h), which applies the
 * header's rule; outputs are poisoned first and rows outside the call
 * must stay poisoned.
 */
#include "test_common.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define HEADS_Q 2
#define HEADS_KV 1
#define DIM 16

/* One variant set that reads the diagonal. */
typedef struct diag_variant {
    const char *name;
    int causal, window;
    int64_t left, right;
    int alibi;
} diag_variant;

static const diag_variant variants[] = {
    {"ALiBi", 0, 0, 0, 0, 1},
    {"causal", 1, 0, 0, 0, 0},
    {"window 3/2", 0, 1, 3, 2, 0},
    {"window 4/-1", 0, 1, 4, -1, 0},
    {"window -1/1", 0, 1, -1, 1, 0},
    {"ALiBi + causal", 1, 0, 0, 0, 1},
    {"ALiBi + window 3/2", 0, 1, 3, 2, 1},
    {"ALiBi + window -1/-1", 0, 1, -1, -1, 1},
    {"causal + window 4/-1", 1, 1, 4, -1, 0},
    {"ALiBi + causal + window 4/-1", 1, 1, 4, -1, 1},
};

/* The sequences: the Nq = 4, Nk = 9, then Nq > Nk and Nq < Nk
 * with more rows than one work-group's tile. Dense routes run each alone
 * (batch 1); the varlen routes run them as one packed batch. */
typedef struct sequence {
    int nq, nk;
} sequence;

static const sequence seqs[] = {{4, 9}, {37, 13}, {21, 70}};
#define SEQS (int)(sizeof seqs / sizeof seqs[0])

/* Absolute positions of each sequence's first row and key: diag 8 (5
 * bottom-right), -30 (rows before every key: causal rows see nothing) and
 * 90 (past the last key). */
static const int64_t q_positions[SEQS] = {20, 0, 100};
static const int64_t k_positions[SEQS] = {12, 30, 10};

typedef enum route {
    DENSE_FUSED,
    DENSE_REFERENCE,
    DENSE_SPLIT,
    VARLEN_FUSED,
    VARLEN_REFERENCE,
    ROUTES
} route;

static const char *route_names[ROUTES] = {
    "dense, fused", "dense, reference backend", "dense, num_splits 2",
    "varlen, fused", "varlen, reference backend"};

/* Inputs of every sequence, packed [rows, heads, DIM], on the host and
 * the device; O [total_q, HEADS_Q, DIM] and LSE [HEADS_Q, total_q]. */
typedef struct diag_data {
    int q_row0[SEQS + 1], k_row0[SEQS + 1];
    float *q, *k, *v, slopes[HEADS_Q];
    cl_mem q_buf, k_buf, v_buf, slopes_buf, o_buf, lse_buf, cu_q, cu_k;
    size_t o_count, lse_count;
} diag_data;

static float *random_floats(size_t count, rng *r)
{
    float *values = malloc(count * sizeof *values);
    ck_assert_ptr_nonnull(values);
    for (size_t i = 0; i < count; ++i)
        values[i] = (float)rng_normal(r);
    return values;
}

static cl_mem upload(const void *bytes, size_t size)
{
    flashcl_context *ctx = shared_context();
    cl_mem buffer = create_buffer(flashcl_context_cl_context(ctx), size);
    write_buffer(flashcl_context_queue(ctx), buffer, bytes, size);
    return buffer;
}

static void data_build(diag_data *d)
{
    memset(d, 0, sizeof *d);
    for (int s = 0; s < SEQS; ++s) {
        d->q_row0[s + 1] = d->q_row0[s] + seqs[s].nq;
        d->k_row0[s + 1] = d->k_row0[s] + seqs[s].nk;
    }
    const size_t total_q = (size_t)d->q_row0[SEQS];
    const size_t total_k = (size_t)d->k_row0[SEQS];
    rng r = rng_seeded(42);
    d->q = random_floats(total_q * HEADS_Q * DIM, &r);
    d->k = random_floats(total_k * HEADS_KV * DIM, &r);
    d->v = random_floats(total_k * HEADS_KV * DIM, &r);
    /* Steep slopes: a diagonal off by Nk - Nq moves most of the weight. */
    d->slopes[0] = 0.5f;
    d->slopes[1] = 0.25f;
    d->q_buf = upload(d->q, total_q * HEADS_Q * DIM * sizeof(float));
    d->k_buf = upload(d->k, total_k * HEADS_KV * DIM * sizeof(float));
    d->v_buf = upload(d->v, total_k * HEADS_KV * DIM * sizeof(float));
    d->slopes_buf = upload(d->slopes, sizeof d->slopes);
    d->cu_q = upload(d->q_row0, sizeof d->q_row0);
    d->cu_k = upload(d->k_row0, sizeof d->k_row0);
    d->o_count = total_q * HEADS_Q * DIM;
    d->lse_count = HEADS_Q * total_q;
    flashcl_context *ctx = shared_context();
    d->o_buf = create_buffer(flashcl_context_cl_context(ctx),
                             d->o_count * sizeof(float));
    d->lse_buf = create_buffer(flashcl_context_cl_context(ctx),
                               d->lse_count * sizeof(float));
}

static void data_release(diag_data *d)
{
    cl_mem buffers[] = {d->q_buf,   d->k_buf,   d->v_buf, d->slopes_buf,
                        d->o_buf,   d->lse_buf, d->cu_q,  d->cu_k};
    for (size_t i = 0; i < LENGTH(buffers); ++i)
        clReleaseMemObject(buffers[i]);
    free(d->q);
    free(d->k);
    free(d->v);
}

static flashcl_attention_desc base_desc(const diag_data *d,
                                        const diag_variant *var,
                                        flashcl_causal_align align)
{
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.heads_q = HEADS_Q;
    desc.heads_kv = HEADS_KV;
    desc.head_dim = DIM;
    desc.dtype = FLASHCL_DTYPE_FP32;
    desc.causal = var->causal;
    desc.causal_align = align;
    desc.window = var->window;
    desc.window_left = var->window ? var->left : 0;
    desc.window_right = var->window ? var->right : 0;
    if (var->alibi)
        desc.alibi_slopes.buffer = d->slopes_buf;
    desc.q.buffer = d->q_buf;
    desc.k.buffer = d->k_buf;
    desc.v.buffer = d->v_buf;
    desc.o.buffer = d->o_buf;
    desc.lse.buffer = d->lse_buf;
    /* LSE as [HEADS_Q, total_q] on every route */
    desc.lse.stride_head = (size_t)d->q_row0[SEQS];
    desc.lse.stride_seq = 1;
    return desc;
}

/* Sequence s alone, through views that start at its rows. */
static flashcl_attention_desc dense_desc(const diag_data *d, int s,
                                         flashcl_attention_desc desc)
{
    if (desc.causal_align == FLASHCL_CAUSAL_ABSOLUTE) {
        desc.q_position = q_positions[s];
        desc.k_position = k_positions[s];
    }
    const size_t q_row = HEADS_Q * DIM, k_row = HEADS_KV * DIM;
    desc.batch = 1;
    desc.seqlen_q = seqs[s].nq;
    desc.seqlen_k = seqs[s].nk;
    desc.q.offset = desc.o.offset = (size_t)d->q_row0[s] * q_row * 4;
    desc.k.offset = desc.v.offset = (size_t)d->k_row0[s] * k_row * 4;
    desc.lse.offset = (size_t)d->q_row0[s] * 4;
    desc.lse.stride_batch = (size_t)HEADS_Q * d->q_row0[SEQS];
    return desc;
}

static flashcl_attention_desc varlen_desc(const diag_data *d,
                                          flashcl_attention_desc desc)
{
    desc.batch = SEQS;
    desc.seqlen_q = d->q_row0[SEQS];
    desc.seqlen_k = d->k_row0[SEQS];
    desc.cu_seqlens_q.buffer = d->cu_q;
    desc.cu_seqlens_k.buffer = d->cu_k;
    for (int s = 0; s < SEQS; ++s) {
        if (seqs[s].nq > desc.max_seqlen_q)
            desc.max_seqlen_q = seqs[s].nq;
        if (seqs[s].nk > desc.max_seqlen_k)
            desc.max_seqlen_k = seqs[s].nk;
    }
    return desc;
}

/* The float64 oracle of sequence s, as the header defines it. */
static void oracle_of(const diag_data *d, int s, const diag_variant *var,
                      flashcl_causal_align align, double *o, double *lse)
{
    oracle_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = HEADS_Q;
    p.heads_kv = HEADS_KV;
    p.seqlen_q = (size_t)seqs[s].nq;
    p.seqlen_k = (size_t)seqs[s].nk;
    p.head_dim = p.head_dim_v = DIM;
    p.scale = 1.0 / sqrt((double)DIM);
    p.causal = var->causal;
    p.causal_align = align;
    if (align == FLASHCL_CAUSAL_ABSOLUTE) {
        p.q_position = q_positions[s];
        p.k_position = k_positions[s];
    }
    p.window = var->window;
    p.window_left = var->left;
    p.window_right = var->right;
    const oracle_view q = {d->q, (size_t)d->q_row0[s] * HEADS_Q * DIM * 4,
                           {0, DIM, HEADS_Q * DIM, 1}, FLASHCL_DTYPE_FP32};
    const oracle_view k = {d->k, (size_t)d->k_row0[s] * HEADS_KV * DIM * 4,
                           {0, DIM, HEADS_KV * DIM, 1}, FLASHCL_DTYPE_FP32};
    oracle_view v = k;
    v.base = d->v;
    p.q = q;
    p.k = k;
    p.v = v;
    if (var->alibi) {
        const oracle_view slopes = {d->slopes, 0, {0, 1, 0, 0},
                                    FLASHCL_DTYPE_FP32};
        p.alibi = slopes;
    }
    ck_assert_int_eq(oracle_attention(&p, o, NULL, lse), 0);
}

/* Rows of sequence s against the oracle; *worst gets the largest error. */
static void check_sequence(const diag_data *d, int s, const diag_variant *var,
                           flashcl_causal_align align, const float *o,
                           const float *lse, const char *what, double *worst)
{
    const int nq = seqs[s].nq;
    double *o_ref = malloc(sizeof(double) * HEADS_Q * nq * DIM);
    double *lse_ref = malloc(sizeof(double) * HEADS_Q * nq);
    ck_assert_ptr_nonnull(o_ref);
    ck_assert_ptr_nonnull(lse_ref);
    oracle_of(d, s, var, align, o_ref, lse_ref);
    const int total_q = d->q_row0[SEQS];
    for (int h = 0; h < HEADS_Q; ++h)
        for (int i = 0; i < nq; ++i) {
            const int row = d->q_row0[s] + i;
            const double want_lse = lse_ref[h * nq + i];
            const float got_lse = lse[h * total_q + row];
            if (isinf(want_lse))
                ck_assert_msg(isinf(got_lse) && got_lse < 0,
                              "%s, seq %d head %d row %d: LSE %g, want -inf",
                              what, s, h, i, (double)got_lse);
            else
                ck_assert_msg(fabs(got_lse - want_lse) <=
                                  1e-4 * fmax(1.0, fabs(want_lse)),
                              "%s, seq %d head %d row %d: LSE %.7g, want "
                              "%.7g",
                              what, s, h, i, (double)got_lse, want_lse);
            for (int c = 0; c < DIM; ++c) {
                const double want = o_ref[((size_t)h * nq + i) * DIM + c];
                const float got = o[((size_t)row * HEADS_Q + h) * DIM + c];
                const double err = fabs(got - want);
                *worst = fmax(*worst, err);
                ck_assert_msg(err <= 2e-5 * fmax(1.0, fabs(want)),
                              "%s, seq %d (Nq %d, Nk %d) head %d row %d "
                              "dim %d: O %.7g, want %.7g",
                              what, s, nq, seqs[s].nk, h, i, c, (double)got,
                              want);
            }
        }
    free(o_ref);
    free(lse_ref);
}

/* Rows outside sequences [first, last) kept their poison. */
static void check_untouched(const diag_data *d, int first, int last,
                            const uint32_t *o_bits, const uint32_t *lse_bits,
                            const char *what)
{
    const uint32_t poison = 0xFFFFFFFFu;
    const int total_q = d->q_row0[SEQS];
    for (int row = 0; row < total_q; ++row) {
        if (row >= d->q_row0[first] && row < d->q_row0[last])
            continue;
        for (int c = 0; c < HEADS_Q * DIM; ++c)
            ck_assert_msg(o_bits[(size_t)row * HEADS_Q * DIM + c] == poison,
                          "%s: O row %d outside the call was written", what,
                          row);
        for (int h = 0; h < HEADS_Q; ++h)
            ck_assert_msg(lse_bits[h * total_q + row] == poison,
                          "%s: LSE row %d outside the call was written",
                          what, row);
    }
}

/* Absolute positions on the split-KV or varlen routes: not yet. */
static bool refused_route(const flashcl_attention_desc *desc)
{
    return desc->causal_align == FLASHCL_CAUSAL_ABSOLUTE &&
           (desc->num_splits > 1 || desc->cu_seqlens_q.buffer != NULL);
}

/* Runs `desc` (sequences [first, last)) and checks them; a refused route
 * must leave every row poisoned. */
static void run_and_check(const diag_data *d, flashcl_attention_desc *desc,
                          int first, int last, const diag_variant *var,
                          flashcl_causal_align align, const char *what)
{
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    poison_buffer(queue, d->o_buf, d->o_count * sizeof(float));
    poison_buffer(queue, d->lse_buf, d->lse_count * sizeof(float));
    const flashcl_status st =
        flashcl_attention_forward(ctx, NULL, desc, 0, NULL, NULL);
    const bool refused = refused_route(desc);
    ck_assert_msg(st == (refused ? FLASHCL_ERROR_UNSUPPORTED : FLASHCL_SUCCESS),
                  "%s: %s: %s", what, flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
    float *o = malloc(d->o_count * sizeof *o);
    float *lse = malloc(d->lse_count * sizeof *lse);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(lse);
    read_buffer(queue, d->o_buf, o, d->o_count * sizeof *o);
    read_buffer(queue, d->lse_buf, lse, d->lse_count * sizeof *lse);
    double worst = 0;
    for (int s = first; s < last && !refused; ++s)
        check_sequence(d, s, var, align, o, lse, what, &worst);
    if (refused) /* nothing written */
        first = last = 0;
    uint32_t *o_bits = malloc(d->o_count * sizeof *o_bits);
    uint32_t *lse_bits = malloc(d->lse_count * sizeof *lse_bits);
    ck_assert_ptr_nonnull(o_bits);
    ck_assert_ptr_nonnull(lse_bits);
    memcpy(o_bits, o, d->o_count * sizeof *o);
    memcpy(lse_bits, lse, d->lse_count * sizeof *lse);
    check_untouched(d, first, last, o_bits, lse_bits, what);
    free(o_bits);
    free(lse_bits);
    free(o);
    free(lse);
}

static void run_route(const diag_data *d, route r, const diag_variant *var,
                      flashcl_causal_align align)
{
    const char *align_name = align == FLASHCL_CAUSAL_TOP_LEFT   ? "top-left"
                             : align == FLASHCL_CAUSAL_ABSOLUTE ? "absolute"
                                                                : "bottom-right";
    char what[200];
    snprintf(what, sizeof what, "%s, %s, %s", var->name, align_name,
             route_names[r]);
    flashcl_attention_desc base = base_desc(d, var, align);
    if (r == DENSE_REFERENCE || r == VARLEN_REFERENCE)
        base.backend = FLASHCL_BACKEND_REFERENCE;
    if (r == VARLEN_FUSED || r == VARLEN_REFERENCE) {
        flashcl_attention_desc desc = varlen_desc(d, base);
        if (align == FLASHCL_CAUSAL_ABSOLUTE) {
            desc.q_position = q_positions[0];
            desc.k_position = k_positions[0];
        }
        run_and_check(d, &desc, 0, SEQS, var, align, what);
        return;
    }
    for (int s = 0; s < SEQS; ++s) {
        flashcl_attention_desc desc = dense_desc(d, s, base);
        if (r == DENSE_SPLIT)
            desc.num_splits = 2;
        run_and_check(d, &desc, s, s + 1, var, align, what);
    }
}

START_TEST(diagonal_on_every_route)
{
    static const flashcl_causal_align aligns[] = {
        FLASHCL_CAUSAL_BOTTOM_RIGHT, FLASHCL_CAUSAL_TOP_LEFT,
        FLASHCL_CAUSAL_ABSOLUTE};
    const diag_variant *var = &variants[_i / 3];
    const flashcl_causal_align align = aligns[_i % 3];
    diag_data d;
    data_build(&d);
    for (int r = 0; r < ROUTES; ++r)
        run_route(&d, (route)r, var, align);
    data_release(&d);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {
        {diagonal_on_every_route, 3 * (int)LENGTH(variants)}};
    return run_tests("variants_diagonal", 300, NULL, NULL, tests,
                     LENGTH(tests));
}
