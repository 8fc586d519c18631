/*
 * flashcl_attention_forward against the float64 reference over a covering
 * design of the shape matrix of issue 2, plus the host-memory call.
 */
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One row of the covering design. */
typedef struct design_row {
    size_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    ref_dtype dtype;
    int causal;
    flashcl_layout layout;
    view_kind view;
    int with_lse;
} design_row;

#define BNHD FLASHCL_LAYOUT_BNHD
#define BHND FLASHCL_LAYOUT_BHND

/*
 * Covering design instead of the full cross product (which would be
 * 90 * 10 * 3 * 2 * 3 * 2 * 3 cases). The (seqlen_q, seqlen_k) column walks
 * S = {1, 7, 63, 64, 65, 113, 128, 203, 256, 333} as (S[i], S[i+s mod 10])
 * for shifts s = 1, 9, 3, 7, so every length appears 4 times as seqlen_q and
 * 4 times as seqlen_k, always unequal, and every pair also appears the other
 * way round. The other columns were chosen greedily (a small script) so that
 * every pair of values of these columns occurs at least once:
 *   head_dim x {dtype, causal, GQA ratio, layout},
 *   dtype x {causal, GQA, layout, view, batch, lse},
 *   causal x {GQA, layout, view, batch, lse}, GQA x {layout, view, batch},
 *   layout x view,
 * while keeping B*Hq*Nq*Nk*D of the biggest cases modest. Every head_dim
 * appears 4 times, each dtype 13-14 times, causal 20 times, each GQA ratio
 * (Hq/Hkv = 3/3, 4/2, 8/1) 13-14 times, batch 2 in 16 rows. Views: packed
 * (zero strides, layout from the descriptor), padded (explicit strides with
 * gaps between rows, heads and batches and a non-zero byte offset that is
 * not 16-byte aligned), dim-strided (padded and stride_dim = 2). O and LSE
 * use the same view kind as the inputs; 9 rows pass no LSE buffer.
 */
static const design_row design[] = {
    {1, 4, 2,   1,   7, 160, REF_BF16, 1, BNHD, VIEW_PACKED, 0},
    {2, 8, 1,   7,  63,  80, REF_FP16, 0, BHND, VIEW_PACKED, 0},
    {2, 3, 3,  63,  64, 128, REF_FP32, 1, BHND, VIEW_PADDED, 1},
    {1, 3, 3,  64,  65, 192, REF_FP16, 0, BNHD, VIEW_PADDED, 1},
    {1, 4, 2,  65, 113,  96, REF_FP32, 0, BHND, VIEW_DIM_STRIDED, 0},
    {1, 8, 1, 113, 128,  40, REF_BF16, 1, BNHD, VIEW_DIM_STRIDED, 1},
    {2, 4, 2, 128, 203,  64, REF_BF16, 1, BHND, VIEW_PADDED, 1},
    {2, 8, 1, 203, 256,  16, REF_FP32, 1, BNHD, VIEW_PACKED, 0},
    {2, 3, 3, 256, 333,  32, REF_BF16, 0, BHND, VIEW_PACKED, 1},
    {1, 4, 2, 333,   1, 256, REF_FP16, 1, BNHD, VIEW_DIM_STRIDED, 1},
    {2, 8, 1,   1, 333, 160, REF_FP16, 0, BHND, VIEW_PADDED, 1},
    {1, 3, 3,   7,   1,  80, REF_FP32, 1, BNHD, VIEW_PADDED, 1},
    {2, 3, 3,  63,   7,  64, REF_FP32, 0, BNHD, VIEW_DIM_STRIDED, 0},
    {1, 8, 1,  64,  63, 192, REF_BF16, 1, BHND, VIEW_PADDED, 1},
    {2, 4, 2,  65,  64,  40, REF_FP16, 0, BHND, VIEW_PACKED, 1},
    {1, 8, 1, 113,  65,  32, REF_FP32, 1, BNHD, VIEW_PADDED, 1},
    {1, 4, 2, 128, 113, 128, REF_BF16, 0, BNHD, VIEW_PACKED, 1},
    {2, 3, 3, 203, 128,  16, REF_FP16, 0, BHND, VIEW_PADDED, 1},
    {1, 3, 3, 256, 203,  96, REF_FP16, 1, BNHD, VIEW_PACKED, 1},
    {1, 4, 2, 333, 256,  16, REF_BF16, 1, BHND, VIEW_PADDED, 1},
    {1, 3, 3,   1,  64, 256, REF_FP32, 0, BHND, VIEW_PACKED, 0},
    {2, 8, 1,   7,  65, 128, REF_FP16, 1, BHND, VIEW_PACKED, 0},
    {1, 4, 2,  63, 113,  80, REF_BF16, 1, BNHD, VIEW_PACKED, 1},
    {1, 4, 2,  64, 128, 192, REF_FP32, 0, BNHD, VIEW_PACKED, 1},
    {2, 8, 1,  65, 203,  64, REF_FP16, 0, BHND, VIEW_PACKED, 1},
    {1, 3, 3, 113, 256, 160, REF_FP32, 0, BHND, VIEW_DIM_STRIDED, 1},
    {2, 3, 3, 128, 333,  40, REF_FP32, 1, BHND, VIEW_PADDED, 1},
    {1, 8, 1, 203,   1, 256, REF_BF16, 1, BNHD, VIEW_PACKED, 0},
    {1, 8, 1, 256,   7,  96, REF_BF16, 1, BHND, VIEW_PACKED, 1},
    {2, 4, 2, 333,  63,  32, REF_FP16, 0, BNHD, VIEW_PACKED, 1},
    {2, 8, 1,   1, 203,  16, REF_BF16, 0, BNHD, VIEW_PADDED, 1},
    {1, 4, 2,   7, 256, 256, REF_FP32, 0, BHND, VIEW_DIM_STRIDED, 1},
    {1, 3, 3,  63, 333, 128, REF_FP16, 0, BNHD, VIEW_PADDED, 1},
    {2, 4, 2,  64,   1,  64, REF_FP32, 0, BNHD, VIEW_PACKED, 1},
    {1, 8, 1,  65,   7, 160, REF_BF16, 1, BNHD, VIEW_PACKED, 1},
    {1, 3, 3, 113,  63, 192, REF_FP16, 0, BHND, VIEW_PACKED, 1},
    {1, 4, 2, 128,  64,  80, REF_FP32, 1, BHND, VIEW_PACKED, 1},
    {1, 8, 1, 203,  65,  32, REF_FP16, 0, BHND, VIEW_PACKED, 1},
    {2, 3, 3, 256, 113,  96, REF_BF16, 1, BNHD, VIEW_DIM_STRIDED, 0},
    {1, 3, 3, 333, 128,  40, REF_FP32, 1, BHND, VIEW_PACKED, 1},
};

#define DESIGN_ROWS ((int)(sizeof design / sizeof design[0]))

static attention_case case_from_row(const design_row *row, uint64_t seed)
{
    const attention_case c = {
        .batch = row->batch, .heads_q = row->heads_q,
        .heads_kv = row->heads_kv, .seqlen_q = row->seqlen_q,
        .seqlen_k = row->seqlen_k, .head_dim = row->head_dim,
        .dtype = row->dtype, .causal = row->causal, .layout = row->layout,
        .view = row->view, .with_lse = row->with_lse, .seed = seed};
    return c;
}

/* Prints what the case measured, so tolerances can be judged from a log. */
static void log_errors(int index, const attention_case *c, compare_result r)
{
    char text[256];
    case_describe(c, text, sizeof text);
    printf("row %3d %-78s max|err|/max|ref| %.2e  bound use %.2f  "
           "lse err %.2e\n",
           index, text, r.max_err / (r.max_ref > 0 ? r.max_ref : 1),
           r.worst_bound_use, r.lse_max_err);
    fflush(stdout);
}

/* FLASHCL_TEST_DESIGN_STRIDE=n (or n+k, test_case_skipped): only every
 * n-th row of the covering design, for CI's runs of the AMD kernel's WMMA
 * emulation, whose every variant takes seconds to compile on Intel's CPU
 * runtime (scripts/test.sh). */
static int design_row_skipped(int row)
{
    return test_case_skipped("FLASHCL_TEST_DESIGN_STRIDE", row);
}

START_TEST(test_design_row)
{
    if (design_row_skipped(_i))
        return;
    attention_case c = case_from_row(&design[_i], 1000u + (uint64_t)_i);
    log_errors(_i, &c, run_case(&c));
}
END_TEST

/* Logits with a standard deviation of 8 (scale 1 instead of 1/8 at D = 64):
 * the softmax is nearly one-hot and the running maximum moves often, which
 * exercises the online rescaling. */
START_TEST(test_sharp_softmax)
{
    attention_case c = case_from_row(&design[24], 77);
    c.scale = 1.0f;
    c.dtype = _i == 0 ? REF_FP32 : REF_BF16;
    log_errors(-1, &c, run_case(&c));
}
END_TEST

/* head_dim is any of 1..256, not only the design's multiples of 8: odd
 * sizes below and between the padded sizes, in padded views with an odd
 * element offset (so no load may assume vector alignment). */
START_TEST(test_odd_head_dims)
{
    static const struct { size_t dim; ref_dtype dtype; int causal; } odd[] = {
        {1, REF_FP32, 0}, {3, REF_FP16, 1}, {17, REF_BF16, 0},
        {255, REF_FP16, 0}};
    attention_case c = case_from_row(&design[14], 600u + (uint64_t)_i);
    c.head_dim = odd[_i].dim;
    c.dtype = odd[_i].dtype;
    c.causal = odd[_i].causal;
    c.view = VIEW_PADDED;
    c.with_lse = 1;
    log_errors(200 + _i, &c, run_case(&c));
}
END_TEST

/* ---------------------------------------------------------------- */
/* Host-memory call                                                  */
/* ---------------------------------------------------------------- */

typedef struct host_case {
    attention_case c;
    test_tensor q, k, v, o;
    float *lse;
    double *ref_o, *ref_lse;
} host_case;

static void host_case_prepare(host_case *h)
{
    const attention_case *c = &h->c;
    rng r = rng_seeded(c->seed);
    tensor_shape q_shape = {c->batch, c->heads_q, c->seqlen_q, c->head_dim};
    tensor_shape kv_shape = {c->batch, c->heads_kv, c->seqlen_k, c->head_dim};
    tensor_layout(&h->q, q_shape, c->dtype, c->layout, VIEW_PACKED);
    tensor_layout(&h->k, kv_shape, c->dtype, c->layout, VIEW_PACKED);
    tensor_layout(&h->v, kv_shape, c->dtype, c->layout, VIEW_PACKED);
    tensor_layout(&h->o, q_shape, c->dtype, c->layout, VIEW_PACKED);
    tensor_fill_random_host(&h->q, &r, 1.0);
    tensor_fill_random_host(&h->k, &r, 1.0);
    tensor_fill_random_host(&h->v, &r, 1.0);
    h->o.host = malloc(tensor_bytes(&h->o));
    ck_assert_ptr_nonnull(h->o.host);
    memset(h->o.host, POISON_BYTE, tensor_bytes(&h->o));

    size_t rows = c->batch * c->heads_q * c->seqlen_q;
    h->lse = malloc(rows * sizeof(float));
    ck_assert(h->lse);
    memset(h->lse, POISON_BYTE, rows * sizeof(float));
    case_reference(c, 1.0 / sqrt((double)c->head_dim), &h->q, &h->k, &h->v,
                   &h->ref_o, &h->ref_lse);
}

static void host_case_release(host_case *h)
{
    free(h->q.host);
    free(h->k.host);
    free(h->v.host);
    free(h->o.host);
    free(h->lse);
    free(h->ref_o);
    free(h->ref_lse);
}

/* The LSE of the host call is a plain float array; wrap it as a packed
 * fp32 tensor to reuse the comparison. */
static test_tensor host_lse_tensor(const host_case *h)
{
    test_tensor t;
    lse_layout(&t, h->c.batch, h->c.heads_q, h->c.seqlen_q, VIEW_PACKED);
    t.host = (unsigned char *)h->lse;
    return t;
}

static const attention_case host_cases[] = {
    {.batch = 2, .heads_q = 4, .heads_kv = 2, .seqlen_q = 65, .seqlen_k = 128,
     .head_dim = 64, .dtype = REF_FP16, .causal = 1,
     .layout = FLASHCL_LAYOUT_BNHD, .with_lse = 1, .seed = 501},
    {.batch = 1, .heads_q = 8, .heads_kv = 1, .seqlen_q = 7, .seqlen_k = 333,
     .head_dim = 40, .dtype = REF_FP32, .causal = 0,
     .layout = FLASHCL_LAYOUT_BHND, .with_lse = 0, .seed = 502},
    {.batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 113, .seqlen_k = 63,
     .head_dim = 96, .dtype = REF_BF16, .causal = 1,
     .layout = FLASHCL_LAYOUT_BHND, .with_lse = 1, .seed = 503},
};

START_TEST(test_forward_host)
{
    host_case h;
    memset(&h, 0, sizeof h);
    h.c = host_cases[_i];
    char text[256];
    case_describe(&h.c, text, sizeof text);
    host_case_prepare(&h);

    flashcl_context *ctx = shared_context();
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc);
    desc.batch = (int64_t)h.c.batch;
    desc.heads_q = (int64_t)h.c.heads_q;
    desc.heads_kv = (int64_t)h.c.heads_kv;
    desc.seqlen_q = (int64_t)h.c.seqlen_q;
    desc.seqlen_k = (int64_t)h.c.seqlen_k;
    desc.head_dim = (int64_t)h.c.head_dim;
    desc.dtype = to_flashcl_dtype(h.c.dtype);
    desc.layout = h.c.layout;
    desc.causal = h.c.causal;
    flashcl_status status = flashcl_attention_forward_host(
        ctx, &desc, h.q.host, h.k.host, h.v.host, h.o.host,
        h.c.with_lse ? h.lse : NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s: %s: %s", text,
                  flashcl_status_string(status),
                  clip(flashcl_context_last_error(ctx)));
    expect_path_check(ctx, &desc, text);

    test_tensor lse = host_lse_tensor(&h);
    compare_result r = compare_output(&h.o, h.ref_o,
                                      h.c.with_lse ? &lse : NULL, h.ref_lse,
                                      tolerance_for_desc(h.c.dtype, &desc));
    host_case_release(&h);
    ck_assert_msg(r.ok, "%s: %s", text, r.detail);
    log_errors(100 + _i, &h.c, r);
}
END_TEST

int main(void)
{
    const test_entry shapes[] = {
        {test_design_row, DESIGN_ROWS}, {test_sharp_softmax, 2},
        {test_odd_head_dims, 4}};
    const test_entry host[] = {
        {test_forward_host, (int)(sizeof host_cases / sizeof host_cases[0])}};
    const test_group groups[] = {
        {"design", 0, NULL, NULL, shapes, LENGTH(shapes)},
        {"host", 0, NULL, NULL, host, LENGTH(host)}};
    return run_groups("forward", groups, LENGTH(groups));
}
