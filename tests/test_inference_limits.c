/*
 * Inference calls at the edges of what the header promises (issue 42):
 *   item 12  fp64 keeps fp64 accuracy with num_splits forced or automatic
 *            (fp64 calls are never split: the partials are fp32);
 *   item 13  the split-KV kernels' packed query rows (max_seqlen_q x
 *            heads_q / heads_kv) are bounded on the host: the fuzzer's
 *            out-of-bounds write is refused at validation, nothing written,
 *            and a legal large max_seqlen_q still computes right;
 *   item 14  paged KV without cache_seqlens says that a paged cache needs
 *            cache_seqlens.
 * Results are checked against the float64 oracle (support/oracle.h);
 * outputs are poisoned before every call.
 */
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The host's bound on packed rows (src/problem/inference.c). */
#define MAX_PACKED_ROWS (INT32_MAX - 4096)

static cl_mem upload(const void *bytes, size_t size)
{
    flashcl_context *ctx = shared_context();
    cl_mem buffer = create_buffer(flashcl_context_cl_context(ctx), size);
    write_buffer(flashcl_context_queue(ctx), buffer, bytes, size);
    return buffer;
}

static cl_mem output(size_t size)
{
    return create_buffer(flashcl_context_cl_context(shared_context()), size);
}

static void *random_values(size_t count, flashcl_dtype dtype, rng *r)
{
    void *values = malloc(count * oracle_dtype_size(dtype));
    ck_assert_ptr_nonnull(values);
    for (size_t i = 0; i < count; ++i)
        oracle_store(values, i, dtype, rng_normal(r));
    return values;
}

static void release_all(cl_mem *buffers, size_t count)
{
    for (size_t i = 0; i < count; ++i)
        if (buffers[i])
            clReleaseMemObject(buffers[i]);
}

/* Expects `want` from describe and from the forward call, a message that
 * names `needle`, and O and LSE (o_bytes, lse_bytes) left poisoned. */
static void expect_refused(flashcl_attention_desc *desc, flashcl_status want,
                           const char *needle, size_t o_bytes,
                           size_t lse_bytes)
{
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    flashcl_variant_info info;
    flashcl_status st = flashcl_describe_variant(ctx, desc, &info);
    ck_assert_msg(st == want, "describe: got %s (%s), want %s",
                  flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)),
                  flashcl_status_string(want));
    poison_buffer(queue, desc->o.buffer, o_bytes);
    poison_buffer(queue, desc->lse.buffer, lse_bytes);
    st = flashcl_attention_forward(ctx, NULL, desc, 0, NULL, NULL);
    CL_CHECK(clFinish(queue));
    const char *message = flashcl_context_last_error(ctx);
    ck_assert_msg(st == want, "forward: got %s (%s), want %s",
                  flashcl_status_string(st), clip(message),
                  flashcl_status_string(want));
    ck_assert_msg(strstr(message, needle) != NULL,
                  "message \"%s\" does not say \"%s\"", clip(message), needle);
    ck_assert_msg(buffer_is_poisoned(queue, desc->o.buffer, o_bytes),
                  "O was written by a refused call");
    ck_assert_msg(buffer_is_poisoned(queue, desc->lse.buffer, lse_bytes),
                  "LSE was written by a refused call");
}

/* ---- item 12: fp64 through num_splits ------------------------------- */

#define F64_KEYS 20000
#define F64_HQ 2
#define F64_DIM 64

/* Case _i: bit 0 a KV cache (else dense), bit 1 automatic splits (else 4
 * forced). Decode: one query row per head, GQA 2. */
START_TEST(fp64_split_keeps_fp64)
{
    const int cache = _i & 1, splits = _i & 2 ? 0 : 4;
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    const flashcl_dtype f64 = FLASHCL_DTYPE_FP64;
    rng r = rng_seeded(1200 + (uint64_t)_i);
    const size_t q_count = F64_HQ * F64_DIM, kv_count = F64_KEYS * F64_DIM;
    void *q = random_values(q_count, f64, &r);
    void *k = random_values(kv_count, f64, &r);
    void *v = random_values(kv_count, f64, &r);
    const cl_int lengths[1] = {F64_KEYS};
    cl_mem buffers[6] = {upload(q, q_count * 8), upload(k, kv_count * 8),
                         upload(v, kv_count * 8), output(q_count * 8),
                         output(F64_HQ * 4), upload(lengths, sizeof lengths)};
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.batch = 1;
    desc.heads_q = F64_HQ;
    desc.heads_kv = 1;
    desc.seqlen_q = 1;
    desc.seqlen_k = F64_KEYS;
    desc.head_dim = F64_DIM;
    desc.dtype = f64;
    desc.num_splits = splits;
    desc.q.buffer = buffers[0];
    desc.k.buffer = buffers[1];
    desc.v.buffer = buffers[2];
    desc.o.buffer = buffers[3];
    desc.lse.buffer = buffers[4];
    if (cache)
        desc.cache_seqlens.buffer = buffers[5];
    const char *what = cache ? "KV cache" : "dense";

    poison_buffer(queue, buffers[3], q_count * 8);
    poison_buffer(queue, buffers[4], F64_HQ * 4);
    const flashcl_status st =
        flashcl_attention_forward(ctx, NULL, &desc, 0, NULL, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s: %s (%s)", what,
                  flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
    double o[F64_HQ * F64_DIM];
    float lse[F64_HQ];
    read_buffer(queue, buffers[3], o, sizeof o);
    read_buffer(queue, buffers[4], lse, sizeof lse);

    oracle_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = F64_HQ;
    p.heads_kv = 1;
    p.seqlen_q = 1;
    p.seqlen_k = F64_KEYS;
    p.head_dim = p.head_dim_v = F64_DIM;
    p.scale = 1.0 / sqrt((double)F64_DIM);
    const oracle_view qv = {q, 0, {0, F64_DIM, F64_HQ * F64_DIM, 1}, f64};
    const oracle_view kv = {k, 0, {0, F64_DIM, F64_DIM, 1}, f64};
    p.q = qv;
    p.k = kv;
    p.v = kv;
    p.v.base = v;
    double o_ref[F64_HQ * F64_DIM], lse_ref[F64_HQ];
    ck_assert_int_eq(oracle_attention(&p, o_ref, NULL, lse_ref), 0);
    double worst = 0;
    for (int h = 0; h < F64_HQ; ++h) {
        for (int c = 0; c < F64_DIM; ++c) /* device O is [1, 1, Hq, D] */
            worst = fmax(worst, fabs(o[h * F64_DIM + c] -
                                     o_ref[h * F64_DIM + c]));
        /* the LSE output is fp32 for every dtype */
        ck_assert_msg(fabs(lse[h] - lse_ref[h]) <=
                          1e-6 * fmax(1.0, fabs(lse_ref[h])),
                      "%s: LSE %.9g, want %.9g", what, (double)lse[h],
                      lse_ref[h]);
    }
    fprintf(stderr, "  fp64 %s, num_splits %d: max |O - O_ref| = %.2e\n",
            what, splits, worst);
    ck_assert_msg(worst <= 1e-12,
                  "%s, num_splits %d: fp64 O is %.3e from float64", what,
                  splits, worst);
    flashcl_variant_info info; /* as docs/api.md says: never split */
    ck_assert_int_eq(flashcl_describe_variant(ctx, &desc, &info),
                     FLASHCL_SUCCESS);
    ck_assert_msg(info.num_splits == 1,
                  "%s, num_splits %d: an fp64 call planned %d splits", what,
                  splits, info.num_splits);
    release_all(buffers, LENGTH(buffers));
    free(q);
    free(k);
    free(v);
}
END_TEST

/* ---- item 13: packed query rows ------------------------------------- */

#define VL_DIM 16

/* A varlen batch of real rows (q_lens, k_lens) whose max_seqlen_q the
 * caller sets; buffers[0..6]: q, k, v, o, lse, cu_q, cu_k. */
typedef struct varlen_call {
    int batch, hq, hkv;
    int cu_q[4], cu_k[4];
    void *q, *k, *v;
    cl_mem buffers[7];
    size_t o_bytes, lse_bytes;
    flashcl_attention_desc desc;
} varlen_call;

static void varlen_build(varlen_call *c, int hq, int hkv, const int *q_lens,
                         const int *k_lens, int batch, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->batch = batch;
    c->hq = hq;
    c->hkv = hkv;
    int max_k = 0;
    for (int b = 0; b < batch; ++b) {
        c->cu_q[b + 1] = c->cu_q[b] + q_lens[b];
        c->cu_k[b + 1] = c->cu_k[b] + k_lens[b];
        max_k = k_lens[b] > max_k ? k_lens[b] : max_k;
    }
    const size_t nq = (size_t)c->cu_q[batch], nk = (size_t)c->cu_k[batch];
    rng r = rng_seeded(seed);
    const flashcl_dtype f32 = FLASHCL_DTYPE_FP32;
    c->q = random_values(nq * hq * VL_DIM, f32, &r);
    c->k = random_values(nk * hkv * VL_DIM, f32, &r);
    c->v = random_values(nk * hkv * VL_DIM, f32, &r);
    c->o_bytes = nq * hq * VL_DIM * 4;
    c->lse_bytes = nq * hq * 4;
    c->buffers[0] = upload(c->q, c->o_bytes);
    c->buffers[1] = upload(c->k, nk * hkv * VL_DIM * 4);
    c->buffers[2] = upload(c->v, nk * hkv * VL_DIM * 4);
    c->buffers[3] = output(c->o_bytes);
    c->buffers[4] = output(c->lse_bytes);
    c->buffers[5] = upload(c->cu_q, sizeof(int) * (size_t)(batch + 1));
    c->buffers[6] = upload(c->cu_k, sizeof(int) * (size_t)(batch + 1));
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = batch;
    d.heads_q = hq;
    d.heads_kv = hkv;
    d.seqlen_q = (int64_t)nq;
    d.seqlen_k = (int64_t)nk;
    d.head_dim = VL_DIM;
    d.q.buffer = c->buffers[0];
    d.k.buffer = c->buffers[1];
    d.v.buffer = c->buffers[2];
    d.o.buffer = c->buffers[3];
    d.lse.buffer = c->buffers[4];
    d.cu_seqlens_q.buffer = c->buffers[5];
    d.cu_seqlens_k.buffer = c->buffers[6];
    d.max_seqlen_k = max_k;
    c->desc = d;
}

static void varlen_release(varlen_call *c)
{
    release_all(c->buffers, LENGTH(c->buffers));
    free(c->q);
    free(c->k);
    free(c->v);
}

/* O and LSE of the varlen call against the oracle, sequence by sequence. */
static void varlen_check(const varlen_call *c)
{
    cl_command_queue queue = flashcl_context_queue(shared_context());
    const size_t nq = (size_t)c->cu_q[c->batch];
    float *o = malloc(c->o_bytes), *lse = malloc(c->lse_bytes);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(lse);
    read_buffer(queue, c->buffers[3], o, c->o_bytes);
    read_buffer(queue, c->buffers[4], lse, c->lse_bytes);
    for (int b = 0; b < c->batch; ++b) {
        const size_t rows = (size_t)(c->cu_q[b + 1] - c->cu_q[b]);
        oracle_problem p;
        memset(&p, 0, sizeof p);
        p.batch = 1;
        p.heads_q = (size_t)c->hq;
        p.heads_kv = (size_t)c->hkv;
        p.seqlen_q = rows;
        p.seqlen_k = (size_t)(c->cu_k[b + 1] - c->cu_k[b]);
        p.head_dim = p.head_dim_v = VL_DIM;
        p.scale = 1.0 / sqrt((double)VL_DIM);
        const size_t q_row = (size_t)c->hq * VL_DIM;
        const size_t k_row = (size_t)c->hkv * VL_DIM;
        const oracle_view qv = {c->q, (size_t)c->cu_q[b] * q_row * 4,
                                {0, VL_DIM, q_row, 1}, FLASHCL_DTYPE_FP32};
        const oracle_view kv = {c->k, (size_t)c->cu_k[b] * k_row * 4,
                                {0, VL_DIM, k_row, 1}, FLASHCL_DTYPE_FP32};
        p.q = qv;
        p.k = kv;
        p.v = kv;
        p.v.base = c->v;
        double *o_ref = malloc(sizeof(double) * rows * q_row);
        double *lse_ref = malloc(sizeof(double) * rows * (size_t)c->hq);
        ck_assert_ptr_nonnull(o_ref);
        ck_assert_ptr_nonnull(lse_ref);
        ck_assert_int_eq(oracle_attention(&p, o_ref, NULL, lse_ref), 0);
        for (size_t h = 0; h < (size_t)c->hq; ++h)
            for (size_t i = 0; i < rows; ++i) {
                const size_t row = (size_t)c->cu_q[b] + i;
                const double want_lse = lse_ref[h * rows + i];
                const float got_lse = lse[h * nq + row]; /* [1, Hq, rows] */
                ck_assert_msg(fabs(got_lse - want_lse) <= 1e-4,
                              "seq %d head %zu row %zu: LSE %g, want %g", b,
                              h, i, (double)got_lse, want_lse);
                for (size_t d = 0; d < VL_DIM; ++d) {
                    const double want = o_ref[(h * rows + i) * VL_DIM + d];
                    const float got = o[(row * (size_t)c->hq + h) * VL_DIM + d];
                    ck_assert_msg(fabs(got - want) <= 2e-5,
                                  "seq %d head %zu row %zu dim %zu: O %g, "
                                  "want %g",
                                  b, h, i, d, (double)got, want);
                }
            }
        free(o_ref);
        free(lse_ref);
    }
    free(o);
    free(lse);
}

/* The fuzzer's reproducer: one sequence, max_seqlen_q = INT32_MAX - 4096
 * with GQA 2, so max_seqlen_q x heads_q / heads_kv passes 2^31. Refused
 * at validation: no launch, no allocation of that size. */
START_TEST(packed_rows_past_int_refused)
{
    const int q_lens[1] = {8}, k_lens[1] = {16};
    varlen_call c;
    varlen_build(&c, 2, 1, q_lens, k_lens, 1, 1300);
    c.desc.max_seqlen_q = 2147479551;
    expect_refused(&c.desc, FLASHCL_ERROR_INVALID_DIMENSION, "max_seqlen_q",
                   c.o_bytes, c.lse_bytes);
    /* the bound itself, for GQA 2 and 4 */
    flashcl_context *ctx = shared_context();
    flashcl_variant_info info;
    c.desc.max_seqlen_q = MAX_PACKED_ROWS / 2;
    ck_assert_msg(flashcl_describe_variant(ctx, &c.desc, &info) ==
                      FLASHCL_SUCCESS,
                  "max_seqlen_q at the bound: %s",
                  clip(flashcl_context_last_error(ctx)));
    c.desc.max_seqlen_q = MAX_PACKED_ROWS / 2 + 1;
    expect_refused(&c.desc, FLASHCL_ERROR_INVALID_DIMENSION, "max_seqlen_q",
                   c.o_bytes, c.lse_bytes);
    varlen_release(&c);
    varlen_build(&c, 4, 1, q_lens, k_lens, 1, 1301);
    c.desc.max_seqlen_q = 536870912; /* the "correct" GQA 4 call */
    expect_refused(&c.desc, FLASHCL_ERROR_INVALID_DIMENSION, "max_seqlen_q",
                   c.o_bytes, c.lse_bytes);
    c.desc.max_seqlen_q = MAX_PACKED_ROWS / 4;
    ck_assert_int_eq(flashcl_describe_variant(ctx, &c.desc, &info),
                     FLASHCL_SUCCESS);
    varlen_release(&c);
}
END_TEST

/* Dense calls reach the split-KV kernels only when split: num_splits 2
 * with seqlen_q x group past the bound is refused, unsplit it plans
 * (describe: no buffer of that size is needed). */
START_TEST(dense_split_rows_bounded)
{
    flashcl_context *ctx = shared_context();
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = 1;
    d.heads_q = 8;
    d.heads_kv = 1;
    d.seqlen_q = 1 << 28; /* x 8 = 2^31 */
    d.seqlen_k = 64;
    d.head_dim = 16;
    d.num_splits = 2;
    flashcl_variant_info info;
    flashcl_status st = flashcl_describe_variant(ctx, &d, &info);
    ck_assert_msg(st == FLASHCL_ERROR_INVALID_DIMENSION, "split: got %s (%s)",
                  flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
    ck_assert_ptr_nonnull(strstr(flashcl_context_last_error(ctx), "seqlen_q"));
    d.num_splits = 1;
    st = flashcl_describe_variant(ctx, &d, &info);
    ck_assert_msg(st == FLASHCL_SUCCESS, "unsplit: got %s (%s)",
                  flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
}
END_TEST

/* A legal max_seqlen_q far above the real rows (GQA 4, 2^24 packed rows
 * in the grid) computes the real rows right and writes nothing else. */
START_TEST(large_max_seqlen_q_runs)
{
    const int q_lens[2] = {3, 5}, k_lens[2] = {40, 17};
    varlen_call c;
    varlen_build(&c, 4, 1, q_lens, k_lens, 2, 1302);
    c.desc.max_seqlen_q = 1 << 22;
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    poison_buffer(queue, c.buffers[3], c.o_bytes);
    poison_buffer(queue, c.buffers[4], c.lse_bytes);
    const flashcl_status st =
        flashcl_attention_forward(ctx, NULL, &c.desc, 0, NULL, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s (%s)", flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
    varlen_check(&c);
    varlen_release(&c);
}
END_TEST

/* ---- item 14: the paged cache's message ----------------------------- */

START_TEST(paged_needs_cache_seqlens)
{
    const int q_lens[1] = {1}, k_lens[1] = {16};
    varlen_call c;
    varlen_build(&c, 1, 1, q_lens, k_lens, 1, 1400);
    const cl_int table[1] = {0};
    cl_mem table_buf = upload(table, sizeof table);
    flashcl_attention_desc d = c.desc; /* its buffers, dense: one page */
    d.cu_seqlens_q.buffer = d.cu_seqlens_k.buffer = NULL;
    d.max_seqlen_k = 0;
    d.seqlen_q = 1;
    d.seqlen_k = 16;
    d.block_table.buffer = table_buf;
    d.page_size = 16;
    d.max_pages = 1;
    d.kv_batch = 1;
    expect_refused(&d, FLASHCL_ERROR_INVALID_VALUE,
                   "a paged cache needs cache_seqlens", c.o_bytes,
                   c.lse_bytes);
    clReleaseMemObject(table_buf);
    varlen_release(&c);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {{fp64_split_keeps_fp64, 4},
                                {packed_rows_past_int_refused, 0},
                                {dense_split_rows_bounded, 0},
                                {large_max_seqlen_q_runs, 0},
                                {paged_needs_cache_seqlens, 0}};
    return run_tests("inference_limits", 300, NULL, NULL, tests,
                     LENGTH(tests));
}
