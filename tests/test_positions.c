/*
 * Absolute positions (FLASHCL_CAUSAL_ABSOLUTE, q_position / k_position):
 * what context parallelism needs of the kernel. One causal sequence of N
 * rows is cut into R chunks; every (query chunk, key chunk) pair is
 * computed as its own call with the chunks' positions, in a shuffled
 * (zig-zag-like) order, and each query chunk's R partials are merged by
 * flashcl_combine_partials. The result must equal the whole call on the
 * same inputs, which knows nothing of chunks: a wrong diagonal in any
 * chunk moves whole rows of weight. Variants that read the diagonal
 * (causal, window, ALiBi) each take a turn. The oracle comparison of the
 * alignment itself is in test_variants_diagonal.c; bad positions in
 * test_errors.c. In fp64 the same walk, with fp64 LSEs (lse_dtype) merged
 * in fp64, and the whole call's fp64 LSE, are held to the float64 oracle
 * at 1e-12: fp32 LSEs would leave ~1e-7.
 */
#include "oracle.h"
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 96
#define HEADS 2
#define DIM 32

typedef struct ring_variant {
    const char *name;
    int chunks, causal, window;
    int64_t left, right;
    int alibi;
} ring_variant;

static const ring_variant ring_variants[] = {
    {"causal, 2 chunks", 2, 1, 0, 0, 0, 0},
    {"causal, 4 chunks", 4, 1, 0, 0, 0, 0},
    {"causal + ALiBi, 3 chunks", 3, 1, 0, 0, 0, 1},
    {"window 20/5, 4 chunks", 4, 0, 1, 20, 5, 0},
    {"ALiBi, no mask, 3 chunks", 3, 0, 0, 0, 0, 1},
};

typedef struct ring_data {
    cl_mem q, k, v, slopes, o_whole, o_parts, lse_parts, o_ring;
} ring_data;

static cl_mem upload_bytes(const void *values, size_t bytes)
{
    flashcl_context *ctx = shared_context();
    cl_mem buffer = create_buffer(flashcl_context_cl_context(ctx), bytes);
    write_buffer(flashcl_context_queue(ctx), buffer, values, bytes);
    return buffer;
}

static cl_mem upload_floats(const float *values, size_t count)
{
    return upload_bytes(values, count * sizeof *values);
}

static cl_mem scratch(size_t count)
{
    return create_buffer(flashcl_context_cl_context(shared_context()),
                         count * sizeof(float));
}

/* A [1, N, HEADS, DIM] fp32 call over rows [q0, q0 + nq) and keys
 * [k0, k0 + nk) of the whole tensors. */
static flashcl_attention_desc chunk_desc(const ring_data *d,
                                         const ring_variant *var, int64_t q0,
                                         int64_t nq, int64_t k0, int64_t nk)
{
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.batch = 1;
    desc.heads_q = desc.heads_kv = HEADS;
    desc.seqlen_q = nq;
    desc.seqlen_k = nk;
    desc.head_dim = DIM;
    desc.dtype = FLASHCL_DTYPE_FP32;
    desc.causal = var->causal;
    desc.window = var->window;
    desc.window_left = var->left;
    desc.window_right = var->right;
    if (var->alibi)
        desc.alibi_slopes.buffer = d->slopes;
    desc.q.buffer = d->q;
    desc.k.buffer = d->k;
    desc.v.buffer = d->v;
    const size_t row = HEADS * DIM * sizeof(float);
    desc.q.offset = (size_t)q0 * row;
    desc.k.offset = desc.v.offset = (size_t)k0 * row;
    desc.q.stride_seq = desc.k.stride_seq = desc.v.stride_seq = HEADS * DIM;
    desc.q.stride_head = desc.k.stride_head = desc.v.stride_head = DIM;
    desc.q.stride_dim = desc.k.stride_dim = desc.v.stride_dim = 1;
    desc.q.stride_batch = desc.k.stride_batch = desc.v.stride_batch =
        (size_t)N * HEADS * DIM;
    return desc;
}

static void forward_ok(flashcl_attention_desc *desc, const char *what)
{
    flashcl_context *ctx = shared_context();
    const flashcl_status st =
        flashcl_attention_forward(ctx, NULL, desc, 0, NULL, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s: %s: %s", what,
                  flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
}

/* Partial p of query chunk c: key chunk order[p], as the chunk's own call
 * with absolute positions, into the partials' slot p. */
static void run_partial(const ring_data *d, const ring_variant *var, int c,
                        int p, int key_chunk)
{
    const int64_t len = N / var->chunks;
    flashcl_attention_desc desc =
        chunk_desc(d, var, c * len, len, key_chunk * len, len);
    desc.causal_align = FLASHCL_CAUSAL_ABSOLUTE;
    desc.q_position = c * len;
    desc.k_position = key_chunk * len;
    desc.o.buffer = d->o_parts;
    desc.o.offset = (size_t)p * len * HEADS * DIM * sizeof(float);
    desc.lse.buffer = d->lse_parts;
    desc.lse.offset = (size_t)p * HEADS * len * sizeof(float);
    char what[160];
    snprintf(what, sizeof what, "%s: query chunk %d, key chunk %d", var->name,
             c, key_chunk);
    forward_ok(&desc, what);
}

/* The partials of query chunk c merged into its rows of o_ring. */
static void combine_chunk(const ring_data *d, const ring_variant *var, int c)
{
    const int64_t len = N / var->chunks;
    flashcl_combine_desc cd = FLASHCL_COMBINE_DESC_INIT;
    cd.num_partials = var->chunks;
    cd.batch = 1;
    cd.heads = HEADS;
    cd.seqlen_q = len;
    cd.head_dim_v = DIM;
    cd.dtype = FLASHCL_DTYPE_FP32;
    /* the forward wrote each partial [1, len, HEADS, DIM] */
    cd.o_partial.buffer = d->o_parts;
    cd.o_partial.stride_batch = (size_t)len * HEADS * DIM;
    cd.o_partial.stride_seq = HEADS * DIM;
    cd.o_partial.stride_head = DIM;
    cd.o_partial.stride_dim = 1;
    cd.o_partial_stride = (size_t)len * HEADS * DIM;
    cd.lse_partial.buffer = d->lse_parts;
    cd.lse_partial_stride = (size_t)HEADS * len;
    cd.o.buffer = d->o_ring;
    cd.o.offset = (size_t)c * len * HEADS * DIM * sizeof(float);
    cd.o.stride_batch = (size_t)N * HEADS * DIM;
    cd.o.stride_seq = HEADS * DIM;
    cd.o.stride_head = DIM;
    cd.o.stride_dim = 1;
    flashcl_context *ctx = shared_context();
    const flashcl_status st =
        flashcl_combine_partials(ctx, NULL, &cd, 0, NULL, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s: combine of chunk %d: %s: %s",
                  var->name, c, flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
}

START_TEST(chunks_merge_to_the_whole_call)
{
    const ring_variant *var = &ring_variants[_i];
    rng r = rng_seeded(7 + (uint64_t)_i);
    const size_t count = (size_t)N * HEADS * DIM;
    float *host = malloc(3 * count * sizeof *host);
    ck_assert_ptr_nonnull(host);
    for (size_t i = 0; i < 3 * count; ++i)
        host[i] = (float)rng_normal(&r);
    const float slopes[HEADS] = {0.25f, 0.0625f};
    ring_data d = {upload_floats(host, count),
                   upload_floats(host + count, count),
                   upload_floats(host + 2 * count, count),
                   upload_floats(slopes, HEADS),
                   scratch(count),
                   scratch(count),
                   scratch((size_t)HEADS * N),
                   scratch(count)};
    cl_command_queue queue = flashcl_context_queue(shared_context());
    poison_buffer(queue, d.o_ring, count * sizeof(float));
    poison_buffer(queue, d.o_parts, count * sizeof(float));
    poison_buffer(queue, d.lse_parts, (size_t)HEADS * N * sizeof(float));

    flashcl_attention_desc whole = chunk_desc(&d, var, 0, N, 0, N);
    whole.o.buffer = d.o_whole;
    forward_ok(&whole, var->name);

    /* Each query chunk walks the key chunks from a different start, as a
     * ring does: its partials arrive in another order on every rank. */
    for (int c = 0; c < var->chunks; ++c) {
        for (int p = 0; p < var->chunks; ++p)
            run_partial(&d, var, c, p, (c + p) % var->chunks);
        combine_chunk(&d, var, c);
    }

    float *got = malloc(count * sizeof *got);
    float *want = malloc(count * sizeof *want);
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_nonnull(want);
    read_buffer(queue, d.o_ring, got, count * sizeof *got);
    read_buffer(queue, d.o_whole, want, count * sizeof *want);
    for (size_t i = 0; i < count; ++i)
        ck_assert_msg(fabsf(got[i] - want[i]) <=
                          2e-5f * fmaxf(1.0f, fabsf(want[i])),
                      "%s: row %zu head %zu dim %zu: %.7g from the chunks, "
                      "%.7g from the whole call",
                      var->name, i / (HEADS * DIM), i / DIM % HEADS, i % DIM,
                      (double)got[i], (double)want[i]);
    free(got);
    free(want);
    free(host);
    cl_mem all[] = {d.q,       d.k,         d.v,     d.slopes,
                    d.o_whole, d.o_parts, d.lse_parts, d.o_ring};
    for (size_t i = 0; i < LENGTH(all); ++i)
        clReleaseMemObject(all[i]);
}
END_TEST

/* ---- fp64: the LSE in fp64, and the merge through it ---------------- */

#define FP64_TOLERANCE 1e-12
#define FP64_CHUNKS 3

static cl_mem upload_doubles(const double *values, size_t count)
{
    return upload_bytes(values, count * sizeof *values);
}

/* max |got - want| / max(1, |want|) over n doubles; a NaN is infinite. */
static double max_error(const double *got, const double *want, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
        const double err = want[i] == -INFINITY
                               ? (got[i] == -INFINITY ? 0 : INFINITY)
                               : fabs(got[i] - want[i]) /
                                     fmax(1.0, fabs(want[i]));
        worst = isnan(err) ? INFINITY : fmax(worst, err);
    }
    return worst;
}

/* The oracle of the whole fp64 causal call with ALiBi over q, k, v
 * (packed [1, N, HEADS, DIM]): O packed the same, LSE [HEADS, N]. */
static void fp64_oracle(const double *qkv, const float *slopes, double *o,
                        double *lse)
{
    oracle_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = HEADS;
    p.seqlen_q = p.seqlen_k = N;
    p.head_dim = p.head_dim_v = DIM;
    p.scale = 1.0 / sqrt((double)DIM);
    p.causal = 1;
    const size_t count = (size_t)N * HEADS * DIM;
    const oracle_view views[3] = {{qkv, 0, {0}, FLASHCL_DTYPE_FP64},
                                  {qkv + count, 0, {0}, FLASHCL_DTYPE_FP64},
                                  {qkv + 2 * count, 0, {0}, FLASHCL_DTYPE_FP64}};
    p.q = views[0];
    p.k = views[1];
    p.v = views[2];
    oracle_view *all[3] = {&p.q, &p.k, &p.v};
    for (int i = 0; i < 3; ++i)
        oracle_packed_strides(FLASHCL_LAYOUT_BNHD, HEADS, N, DIM,
                              all[i]->stride);
    p.alibi.base = slopes;
    p.alibi.stride[1] = 1;
    p.alibi.dtype = FLASHCL_DTYPE_FP32;
    size_t o_stride[4];
    oracle_packed_strides(FLASHCL_LAYOUT_BNHD, HEADS, N, DIM, o_stride);
    ck_assert_int_eq(oracle_attention(&p, o, o_stride, lse), 0);
}

/* Where an fp64 call writes: O's row q0 of a packed [1, N, HEADS, DIM]
 * at o_base bytes, and its fp64 LSE [HEADS, lse_rows] at lse_base bytes. */
typedef struct fp64_out {
    cl_mem o, lse;
    size_t o_base, lse_base;
    int64_t lse_rows;
} fp64_out;

/* An fp64 call of query rows [q0, q0 + nq) against keys [k0, k0 + nk). */
static void fp64_call(const ring_data *d, const fp64_out *out, int64_t q0,
                      int64_t nq, int64_t k0, int64_t nk)
{
    const ring_variant causal_alibi = {"fp64", 1, 1, 0, 0, 0, 1};
    flashcl_attention_desc desc =
        chunk_desc(d, &causal_alibi, q0, nq, k0, nk);
    desc.dtype = FLASHCL_DTYPE_FP64;
    desc.q.offset *= 2; /* chunk_desc counts fp32 bytes */
    desc.k.offset *= 2;
    desc.v.offset *= 2;
    desc.causal_align = FLASHCL_CAUSAL_ABSOLUTE;
    desc.q_position = q0;
    desc.k_position = k0;
    desc.o.buffer = out->o;
    desc.o.offset = out->o_base + (size_t)q0 * HEADS * DIM * sizeof(double);
    desc.o.stride_batch = (size_t)N * HEADS * DIM;
    desc.o.stride_seq = HEADS * DIM;
    desc.o.stride_head = DIM;
    desc.o.stride_dim = 1;
    desc.lse.buffer = out->lse;
    desc.lse.offset = out->lse_base;
    desc.lse.stride_batch = (size_t)HEADS * out->lse_rows;
    desc.lse.stride_head = (size_t)out->lse_rows;
    desc.lse.stride_seq = 1;
    desc.lse_dtype = FLASHCL_DTYPE_FP64;
    forward_ok(&desc, "fp64 call with an fp64 LSE");
}

/* Query chunk c's partials (slot p: key chunk p, O in chunk c's rows of a
 * whole [1, N, HEADS, DIM] per slot, LSE [HEADS, len] per slot) merged in
 * fp64 into its rows of o_ring and lse. */
static void fp64_merge(const ring_data *d, int c, cl_mem lse)
{
    const int64_t len = N / FP64_CHUNKS;
    flashcl_combine_desc cd = FLASHCL_COMBINE_DESC_INIT;
    cd.num_partials = FP64_CHUNKS;
    cd.batch = 1;
    cd.heads = HEADS;
    cd.seqlen_q = len;
    cd.head_dim_v = DIM;
    cd.dtype = cd.partial_dtype = cd.lse_dtype = FLASHCL_DTYPE_FP64;
    cd.o_partial.buffer = d->o_parts;
    cd.o_partial.offset = (size_t)c * len * HEADS * DIM * sizeof(double);
    cd.o_partial.stride_batch = (size_t)N * HEADS * DIM;
    cd.o_partial.stride_seq = HEADS * DIM;
    cd.o_partial.stride_head = DIM;
    cd.o_partial.stride_dim = 1;
    cd.o_partial_stride = (size_t)N * HEADS * DIM; /* a whole o per slot */
    cd.lse_partial.buffer = d->lse_parts;
    cd.lse_partial_stride = (size_t)HEADS * len;
    cd.o.buffer = d->o_ring;
    cd.o.offset = (size_t)c * len * HEADS * DIM * sizeof(double);
    cd.o.stride_batch = (size_t)N * HEADS * DIM;
    cd.o.stride_seq = HEADS * DIM;
    cd.o.stride_head = DIM;
    cd.o.stride_dim = 1;
    cd.lse.buffer = lse;
    cd.lse.offset = (size_t)c * len * sizeof(double);
    cd.lse.stride_batch = (size_t)HEADS * N;
    cd.lse.stride_head = N;
    cd.lse.stride_seq = 1;
    flashcl_context *ctx = shared_context();
    const flashcl_status st =
        flashcl_combine_partials(ctx, NULL, &cd, 0, NULL, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "fp64 merge of chunk %d: %s: %s", c,
                  flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
}

static int has_fp64(void)
{
    flashcl_device_info info;
    memset(&info, 0, sizeof info);
    return flashcl_context_device_info(shared_context(), &info) ==
               FLASHCL_SUCCESS &&
           info.has_fp64;
}

START_TEST(fp64_lse_and_merge_match_the_oracle)
{
    if (!has_fp64())
        return; /* test_fp64_absent covers the refusal */
    rng r = rng_seeded(404);
    const size_t count = (size_t)N * HEADS * DIM, rows = (size_t)HEADS * N;
    const int64_t len = N / FP64_CHUNKS;
    double *host = malloc((3 * count + 2 * count + 2 * rows) * sizeof *host);
    ck_assert_ptr_nonnull(host);
    double *want_o = host + 3 * count, *got_o = want_o + count;
    double *want_lse = got_o + count, *got_lse = want_lse + rows;
    for (size_t i = 0; i < 3 * count; ++i)
        host[i] = rng_normal(&r);
    const float slopes[HEADS] = {0.25f, 0.0625f};
    fp64_oracle(host, slopes, want_o, want_lse);
    const size_t bytes = count * sizeof(double), lse_bytes = rows * 8;
    ring_data d = {upload_doubles(host, count),
                   upload_doubles(host + count, count),
                   upload_doubles(host + 2 * count, count),
                   upload_floats(slopes, HEADS),
                   scratch(2 * count),
                   scratch(2 * count * FP64_CHUNKS),
                   scratch(2 * rows),
                   scratch(2 * count)};
    cl_mem whole_lse = scratch(2 * rows), ring_lse = scratch(2 * rows);
    cl_command_queue queue = flashcl_context_queue(shared_context());
    cl_mem poisoned[] = {d.o_whole, d.o_ring, whole_lse, ring_lse};
    for (size_t i = 0; i < LENGTH(poisoned); ++i)
        poison_buffer(queue, poisoned[i], i < 2 ? bytes : lse_bytes);
    poison_buffer(queue, d.o_parts, bytes * FP64_CHUNKS);
    poison_buffer(queue, d.lse_parts, lse_bytes);

    const fp64_out whole = {d.o_whole, whole_lse, 0, 0, N};
    fp64_call(&d, &whole, 0, N, 0, N);
    /* every (query chunk, key chunk) pair, as the ring computes them; a
     * pair the causal band leaves empty gives LSE -inf, weight 0 */
    for (int c = 0; c < FP64_CHUNKS; ++c) {
        for (int p = 0; p < FP64_CHUNKS; ++p) {
            const fp64_out slot = {d.o_parts, d.lse_parts, (size_t)p * bytes,
                                   (size_t)p * HEADS * len * sizeof(double),
                                   len};
            fp64_call(&d, &slot, c * len, len, p * len, len);
        }
        fp64_merge(&d, c, ring_lse);
    }
    const char *names[2] = {"the whole call", "the chunks merged"};
    cl_mem outs[2][2] = {{d.o_whole, whole_lse}, {d.o_ring, ring_lse}};
    for (int w = 0; w < 2; ++w) {
        read_buffer(queue, outs[w][0], got_o, bytes);
        read_buffer(queue, outs[w][1], got_lse, lse_bytes);
        const double o_err = max_error(got_o, want_o, count),
                     lse_err = max_error(got_lse, want_lse, rows);
        ck_assert_msg(o_err <= FP64_TOLERANCE && lse_err <= FP64_TOLERANCE,
                      "fp64, %s: O error %.3g, LSE error %.3g against the "
                      "float64 oracle",
                      names[w], o_err, lse_err);
    }
    free(host);
    cl_mem all[] = {d.q,       d.k,       d.v,         d.slopes, d.o_whole,
                    d.o_parts, d.lse_parts, d.o_ring, whole_lse, ring_lse};
    for (size_t i = 0; i < LENGTH(all); ++i)
        clReleaseMemObject(all[i]);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {
        {chunks_merge_to_the_whole_call, (int)LENGTH(ring_variants)},
        {fp64_lse_and_merge_match_the_oracle, 0}};
    return run_tests("positions", 300, NULL, NULL, tests, LENGTH(tests));
}
