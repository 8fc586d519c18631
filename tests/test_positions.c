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
 * test_errors.c.
 */
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

static cl_mem upload_floats(const float *values, size_t count)
{
    flashcl_context *ctx = shared_context();
    cl_mem buffer = create_buffer(flashcl_context_cl_context(ctx),
                                  count * sizeof *values);
    write_buffer(flashcl_context_queue(ctx), buffer, values,
                 count * sizeof *values);
    return buffer;
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

int main(void)
{
    const test_entry tests[] = {
        {chunks_merge_to_the_whole_call, (int)LENGTH(ring_variants)}};
    return run_tests("positions", 300, NULL, NULL, tests, LENGTH(tests));
}
