/*
 * Inference features (issue 11) against the float64 oracle
 * (support/oracle.h): flashcl_combine_partials; split-KV decoding with
 * forced and automatic split counts, GQA packing, causal and the variants;
 * the KV cache (cache_seqlens, cache_batch_idx, in-place append); varlen
 * batches (cu_seqlens); paged KV with shuffled block tables; each feature
 * on the reference backend too; and every bad argument (specific status,
 * outputs untouched).
 *
 * The oracle sees each sequence as its own dense problem, built on the
 * host from the same bytes the device reads: what the library computes in
 * one launch is checked sequence by sequence. Every output buffer is
 * poisoned (NaN) before a call.
 */
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Relative to max |O_ref| of the row set; LSE absolute per max(1, |ref|).
 * fp32 over at most 4096 keys; fp16 and bf16: one rounding of O. */
static double o_tolerance(flashcl_dtype dtype)
{
    return dtype == FLASHCL_DTYPE_FP16   ? 2e-3
           : dtype == FLASHCL_DTYPE_BF16 ? 1.6e-2
                                         : 2e-5;
}
#define LSE_TOLERANCE 1e-4

/* ---- host arrays mirrored on the device ------------------------------ */

typedef struct hbuf {
    void *bytes;
    size_t count, elem;
    cl_mem buffer;
} hbuf;

static void hbuf_alloc(hbuf *t, size_t count, size_t elem)
{
    t->count = count;
    t->elem = elem;
    t->bytes = calloc(count ? count : 1, elem);
    ck_assert_ptr_nonnull(t->bytes);
    t->buffer = NULL;
}

static void hbuf_upload(hbuf *t)
{
    flashcl_context *ctx = shared_context();
    size_t bytes = t->count * t->elem;
    t->buffer = create_buffer(flashcl_context_cl_context(ctx),
                              bytes ? bytes : 16);
    if (bytes)
        write_buffer(flashcl_context_queue(ctx), t->buffer, t->bytes, bytes);
}

/* Random normal values rounded to the dtype, uploaded. */
static inline void hbuf_random(hbuf *t, size_t count, flashcl_dtype dtype, rng *r)
{
    hbuf_alloc(t, count, oracle_dtype_size(dtype));
    for (size_t i = 0; i < count; ++i)
        oracle_store(t->bytes, i, dtype, rng_normal(r));
    hbuf_upload(t);
}

static inline void hbuf_ints(hbuf *t, const int *values, size_t count)
{
    hbuf_alloc(t, count, sizeof(int));
    memcpy(t->bytes, values, count * sizeof(int));
    hbuf_upload(t);
}

/* Device buffer of `count` elements filled with NaN bytes. */
static void hbuf_poisoned(hbuf *t, size_t count, size_t elem)
{
    hbuf_alloc(t, count, elem);
    memset(t->bytes, POISON_BYTE, count * elem);
    hbuf_upload(t);
}

static void hbuf_download(hbuf *t)
{
    read_buffer(flashcl_context_queue(shared_context()), t->buffer, t->bytes,
                t->count * t->elem);
}

static int hbuf_untouched(const hbuf *t)
{
    return buffer_is_poisoned(flashcl_context_queue(shared_context()),
                              t->buffer, t->count * t->elem);
}

static void hbuf_release(hbuf *t)
{
    if (t->buffer)
        clReleaseMemObject(t->buffer);
    free(t->bytes);
    memset(t, 0, sizeof *t);
}

static flashcl_tensor tensor_of(const hbuf *t)
{
    flashcl_tensor v = {0};
    v.buffer = t->buffer;
    return v;
}

/* ---- comparison ------------------------------------------------------ */

typedef struct row_check {
    double max_err, max_ref, lse_err;
    char first[256];
} row_check;

/* One row of O (dv values from `got` in `dtype` at stride 1) and its LSE
 * against the oracle's. */
static void check_row(row_check *c, const void *got, size_t at,
                      flashcl_dtype dtype, const double *ref, size_t dv,
                      const float *got_lse, double ref_lse, const char *where)
{
    for (size_t d = 0; d < dv; ++d) {
        const double g = oracle_load(got, at + d, dtype);
        const double err = isnan(g) ? INFINITY : fabs(g - ref[d]);
        if (err > c->max_err) {
            c->max_err = err;
            if (!c->first[0] && err > 1e-2)
                snprintf(c->first, sizeof c->first, "%s d=%zu: %g vs %g",
                         where, d, g, ref[d]);
        }
        if (fabs(ref[d]) > c->max_ref)
            c->max_ref = fabs(ref[d]);
    }
    if (got_lse) {
        const double g = *got_lse;
        double err;
        if (isinf(ref_lse) && ref_lse < 0)
            err = (isinf(g) && g < 0) ? 0 : INFINITY;
        else
            err = isnan(g) ? INFINITY
                           : fabs(g - ref_lse) / fmax(1.0, fabs(ref_lse));
        if (err > c->lse_err) {
            c->lse_err = err;
            if (!c->first[0] && err > LSE_TOLERANCE)
                snprintf(c->first, sizeof c->first, "%s LSE: %g vs %g", where,
                         g, ref_lse);
        }
    }
}

static void assert_close(const row_check *c, flashcl_dtype dtype,
                         const char *what)
{
    const double bound = o_tolerance(dtype) * fmax(c->max_ref, 1e-30);
    ck_assert_msg(c->max_err <= bound && c->lse_err <= LSE_TOLERANCE,
                  "%s: max |err| %.3g (bound %.3g, max|ref| %.3g), LSE err "
                  "%.3g; first: %s",
                  what, c->max_err, bound, c->max_ref, c->lse_err, c->first);
}

/* ---- the oracle of one dense sequence -------------------------------- */

/* Q rows [nq, hq, d] and K/V rows [nk, hkv, d(v)] packed BNHD on the host,
 * in `dtype`; O [hq][nq][dv] and LSE [hq][nq] out. */
typedef struct seq_problem {
    size_t hq, hkv, nq, nk, d, dv;
    flashcl_dtype dtype;
    const void *q, *k, *v;
    size_t q_stride[4], k_stride[4], v_stride[4]; /* elements */
    int causal;
    flashcl_causal_align align;
    double scale;
    int window;
    int64_t window_left, window_right;
    double softcap;
    const float *sinks;
} seq_problem;

static void seq_oracle(const seq_problem *s, double *o, double *lse)
{
    oracle_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = s->hq;
    p.heads_kv = s->hkv;
    p.seqlen_q = s->nq;
    p.seqlen_k = s->nk;
    p.head_dim = s->d;
    p.head_dim_v = s->dv;
    p.scale = s->scale;
    p.causal = s->causal;
    p.causal_align = s->align;
    p.window = s->window;
    p.window_left = s->window_left;
    p.window_right = s->window_right;
    p.softcap = s->softcap;
    p.q = (oracle_view){s->q, 0, {0}, s->dtype};
    p.k = (oracle_view){s->k, 0, {0}, s->dtype};
    p.v = (oracle_view){s->v, 0, {0}, s->dtype};
    memcpy(p.q.stride, s->q_stride, sizeof p.q.stride);
    memcpy(p.k.stride, s->k_stride, sizeof p.k.stride);
    memcpy(p.v.stride, s->v_stride, sizeof p.v.stride);
    if (s->sinks)
        p.sinks = (oracle_view){s->sinks, 0, {0, 1, 0, 0}, FLASHCL_DTYPE_FP32};
    const size_t o_stride[4] = {0, s->nq * s->dv, s->dv, 1};
    ck_assert_int_eq(oracle_attention(&p, o, o_stride, lse), 0);
}

/* ====================================================================== */
/* flashcl_combine_partials                                               */
/* ====================================================================== */

/* P partials of B x H x Nq rows over disjoint key ranges of one dense
 * problem, computed by the oracle (fp32 on the device, as a split kernel or
 * another device would hand them over), merged on the device and compared
 * with the oracle of all the keys. Range p of a row is empty when the
 * split points say so, and row (0, 0, 0) sees no key at all in any
 * partial: its partials are LSE = -inf with O = NaN. */
typedef struct combine_case {
    int parts;
    size_t batch, heads, nq, nk, dv;
    flashcl_dtype dtype;
    size_t pad; /* extra elements between partials (strided input) */
} combine_case;

static const combine_case combine_cases[] = {
    {2, 2, 3, 5, 100, 16, FLASHCL_DTYPE_FP32, 0},
    {7, 1, 2, 3, 130, 40, FLASHCL_DTYPE_FP32, 13},
    {7, 2, 1, 4, 64, 8, FLASHCL_DTYPE_FP16, 0},
    {2, 1, 4, 2, 33, 24, FLASHCL_DTYPE_BF16, 5},
};

START_TEST(combine_matches_unsplit)
{
    const combine_case *c = &combine_cases[_i];
    rng r = rng_seeded(1100 + (uint64_t)_i);
    const size_t d = 16, rows = c->batch * c->heads * c->nq;
    hbuf q, k, v;
    hbuf_alloc(&q, c->batch * c->nq * c->heads * d, 8);
    hbuf_alloc(&k, c->batch * c->nk * c->heads * d, 8);
    hbuf_alloc(&v, c->batch * c->nk * c->heads * c->dv, 8);
    for (size_t i = 0; i < q.count; ++i)
        ((double *)q.bytes)[i] = rng_normal(&r);
    for (size_t i = 0; i < k.count; ++i)
        ((double *)k.bytes)[i] = rng_normal(&r);
    for (size_t i = 0; i < v.count; ++i)
        ((double *)v.bytes)[i] = rng_normal(&r);
    /* Split points: uneven, one range empty when there are enough parts. */
    size_t cut[9];
    cut[0] = 0;
    for (int p = 1; p < c->parts; ++p)
        cut[p] = c->nk * (size_t)(p * p) / (size_t)(c->parts * c->parts);
    cut[c->parts] = c->nk;
    if (c->parts > 2)
        cut[2] = cut[1];
    const size_t part_o = rows * c->dv + c->pad, part_l = rows + c->pad;
    hbuf op, lp, o, lse;
    hbuf_alloc(&op, part_o * (size_t)c->parts, 4);
    hbuf_alloc(&lp, part_l * (size_t)c->parts, 4);
    double *ref_o = calloc(rows * c->dv, sizeof *ref_o);
    double *ref_lse = calloc(rows, sizeof *ref_lse);
    double *tmp_o = calloc(c->heads * c->nq * c->dv, sizeof *tmp_o);
    double *tmp_lse = calloc(c->heads * c->nq, sizeof *tmp_lse);
    for (size_t b = 0; b < c->batch; ++b) {
        const double *qb = (double *)q.bytes + b * c->nq * c->heads * d;
        const double *kb = (double *)k.bytes + b * c->nk * c->heads * d;
        const double *vb = (double *)v.bytes + b * c->nk * c->heads * c->dv;
        seq_problem s = {.hq = c->heads, .hkv = c->heads, .nq = c->nq,
                         .nk = c->nk, .d = d, .dv = c->dv,
                         .dtype = FLASHCL_DTYPE_FP64, .q = qb, .k = kb,
                         .v = vb, .q_stride = {0, d, c->heads * d, 1},
                         .k_stride = {0, d, c->heads * d, 1},
                         .v_stride = {0, c->dv, c->heads * c->dv, 1},
                         .scale = 0.25};
        seq_oracle(&s, tmp_o, tmp_lse);
        for (size_t h = 0; h < c->heads; ++h)
            for (size_t i = 0; i < c->nq; ++i) {
                const size_t row = (b * c->heads + h) * c->nq + i;
                memcpy(ref_o + row * c->dv, tmp_o + (h * c->nq + i) * c->dv,
                       c->dv * sizeof(double));
                ref_lse[row] = tmp_lse[h * c->nq + i];
            }
        for (int p = 0; p < c->parts; ++p) {
            s.k = kb + cut[p] * c->heads * d;
            s.v = vb + cut[p] * c->heads * c->dv;
            s.nk = cut[p + 1] - cut[p];
            seq_oracle(&s, tmp_o, tmp_lse);
            for (size_t h = 0; h < c->heads; ++h)
                for (size_t i = 0; i < c->nq; ++i) {
                    const size_t row = (b * c->heads + h) * c->nq + i;
                    float *po = (float *)op.bytes + (size_t)p * part_o +
                                row * c->dv;
                    float *pl = (float *)lp.bytes + (size_t)p * part_l + row;
                    *pl = (float)tmp_lse[h * c->nq + i];
                    for (size_t e = 0; e < c->dv; ++e)
                        po[e] = *pl == -INFINITY
                                    ? NAN
                                    : (float)tmp_o[(h * c->nq + i) * c->dv + e];
                }
        }
    }
    /* Row 0 fully masked in every partial. */
    for (int p = 0; p < c->parts; ++p) {
        ((float *)lp.bytes)[(size_t)p * part_l] = -INFINITY;
        for (size_t e = 0; e < c->dv; ++e)
            ((float *)op.bytes)[(size_t)p * part_o + e] = NAN;
    }
    for (size_t e = 0; e < c->dv; ++e)
        ref_o[e] = 0;
    ref_lse[0] = -INFINITY;
    hbuf_upload(&op);
    hbuf_upload(&lp);
    hbuf_poisoned(&o, rows * c->dv, oracle_dtype_size(c->dtype));
    hbuf_poisoned(&lse, rows, 4);

    flashcl_combine_desc desc = FLASHCL_COMBINE_DESC_INIT;
    desc.num_partials = c->parts;
    desc.batch = (int64_t)c->batch;
    desc.heads = (int64_t)c->heads;
    desc.seqlen_q = (int64_t)c->nq;
    desc.head_dim_v = (int64_t)c->dv;
    desc.dtype = c->dtype;
    desc.layout = FLASHCL_LAYOUT_BHND;
    desc.o_partial = tensor_of(&op);
    desc.o_partial_stride = c->pad ? part_o : 0;
    desc.lse_partial = tensor_of(&lp);
    desc.lse_partial_stride = c->pad ? part_l : 0;
    desc.o = tensor_of(&o);
    desc.lse = tensor_of(&lse);
    flashcl_context *ctx = shared_context();
    flashcl_status st = flashcl_combine_partials(ctx, NULL, &desc, 0, NULL, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "combine: %s (%s)",
                  flashcl_status_string(st), flashcl_context_last_error(ctx));
    hbuf_download(&o);
    hbuf_download(&lse);
    row_check chk = {0};
    for (size_t row = 0; row < rows; ++row) {
        char where[64];
        snprintf(where, sizeof where, "P=%d row %zu", c->parts, row);
        check_row(&chk, o.bytes, row * c->dv, c->dtype, ref_o + row * c->dv,
                  c->dv, (float *)lse.bytes + row, ref_lse[row], where);
    }
    for (size_t e = 0; e < c->dv; ++e)
        ck_assert_msg(oracle_load(o.bytes, e, c->dtype) == 0.0,
                      "fully masked row: O[%zu] = %g, expected 0", e,
                      oracle_load(o.bytes, e, c->dtype));
    assert_close(&chk, c->dtype, "combine");
    hbuf_release(&q), hbuf_release(&k), hbuf_release(&v);
    hbuf_release(&op), hbuf_release(&lp), hbuf_release(&o), hbuf_release(&lse);
    free(ref_o), free(ref_lse), free(tmp_o), free(tmp_lse);
}
END_TEST

/* Every bad argument of the combine call: its status, and O and LSE still
 * poisoned. */
START_TEST(combine_bad_arguments)
{
    flashcl_context *ctx = shared_context();
    hbuf op, lp, o, lse, small;
    const size_t rows = 2 * 3 * 4, dv = 8;
    hbuf_poisoned(&op, 2 * rows * dv, 4);
    hbuf_poisoned(&lp, 2 * rows, 4);
    hbuf_poisoned(&o, rows * dv, 4);
    hbuf_poisoned(&lse, rows, 4);
    hbuf_poisoned(&small, rows * dv, 4); /* one partial's worth */
    flashcl_combine_desc good = FLASHCL_COMBINE_DESC_INIT;
    good.num_partials = 2;
    good.batch = 2;
    good.heads = 3;
    good.seqlen_q = 4;
    good.head_dim_v = (int64_t)dv;
    good.o_partial = tensor_of(&op);
    good.lse_partial = tensor_of(&lp);
    good.o = tensor_of(&o);
    good.lse = tensor_of(&lse);
    struct {
        const char *what;
        flashcl_combine_desc d;
        flashcl_status want;
    } bad[16];
    int n = 0;
#define BAD(text, status, edit)                                                \
    do {                                                                       \
        bad[n].what = text;                                                    \
        bad[n].d = good;                                                       \
        {                                                                      \
            flashcl_combine_desc *d = &bad[n].d;                               \
            edit;                                                              \
        }                                                                      \
        bad[n++].want = status;                                                \
    } while (0)
    BAD("struct_size 0", FLASHCL_ERROR_INVALID_VALUE, d->struct_size = 0);
    BAD("num_partials 0", FLASHCL_ERROR_INVALID_DIMENSION, d->num_partials = 0);
    BAD("batch < 0", FLASHCL_ERROR_INVALID_DIMENSION, d->batch = -1);
    BAD("head_dim_v < 0", FLASHCL_ERROR_INVALID_DIMENSION, d->head_dim_v = -2);
    BAD("dtype", FLASHCL_ERROR_DTYPE_UNSUPPORTED, d->dtype = (flashcl_dtype)9);
    BAD("layout", FLASHCL_ERROR_INVALID_LAYOUT, d->layout = (flashcl_layout)7);
    BAD("o_partial NULL", FLASHCL_ERROR_NULL_ARGUMENT,
        d->o_partial.buffer = NULL);
    BAD("lse_partial NULL", FLASHCL_ERROR_NULL_ARGUMENT,
        d->lse_partial.buffer = NULL);
    BAD("o NULL", FLASHCL_ERROR_NULL_ARGUMENT, d->o.buffer = NULL);
    BAD("o_partial too small for 2 partials", FLASHCL_ERROR_OUT_OF_BOUNDS,
        d->o_partial.buffer = small.buffer);
    BAD("partial stride past the buffer", FLASHCL_ERROR_OUT_OF_BOUNDS,
        d->lse_partial_stride = rows * 5);
    BAD("o offset misaligned", FLASHCL_ERROR_INVALID_LAYOUT, d->o.offset = 2);
    BAD("o is o_partial", FLASHCL_ERROR_ALIASING, d->o.buffer = op.buffer);
    BAD("lse inside lse_partial", FLASHCL_ERROR_ALIASING,
        d->lse.buffer = lp.buffer);
    BAD("o strides overlap", FLASHCL_ERROR_ALIASING,
        (d->o.stride_batch = 1, d->o.stride_head = 1, d->o.stride_seq = 1,
         d->o.stride_dim = 1));
#undef BAD
    for (int i = 0; i < n; ++i) {
        flashcl_status st =
            flashcl_combine_partials(ctx, NULL, &bad[i].d, 0, NULL, NULL);
        ck_assert_msg(st == bad[i].want, "%s: got %s (%s), want %s",
                      bad[i].what, flashcl_status_string(st),
                      flashcl_context_last_error(ctx),
                      flashcl_status_string(bad[i].want));
        ck_assert_msg(*flashcl_context_last_error(ctx), "%s: no message",
                      bad[i].what);
    }
    ck_assert_int_eq(flashcl_combine_partials(NULL, NULL, &good, 0, NULL, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_int_eq(flashcl_combine_partials(ctx, NULL, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_int_eq(flashcl_combine_partials(ctx, NULL, &good, 1, NULL, NULL),
                     FLASHCL_ERROR_INVALID_VALUE);
    clFinish(flashcl_context_queue(ctx));
    ck_assert_msg(hbuf_untouched(&o) && hbuf_untouched(&lse),
                  "a rejected combine call wrote its outputs");
    /* And the good descriptor runs. */
    ck_assert_int_eq(flashcl_combine_partials(ctx, NULL, &good, 0, NULL, NULL),
                     FLASHCL_SUCCESS);
    hbuf_release(&op), hbuf_release(&lp), hbuf_release(&o);
    hbuf_release(&lse), hbuf_release(&small);
}
END_TEST

/* @@MORE_TESTS@@ */

int main(void)
{
    const test_entry combine[] = {
        {combine_matches_unsplit, (int)LENGTH(combine_cases)},
        {combine_bad_arguments, 0}};
    /* @@MORE_ENTRIES@@ */
    const test_group groups[] = {
        {"combine", 300, NULL, NULL, combine, LENGTH(combine)},
        /* @@MORE_GROUPS@@ */
    };
    return run_groups("inference", groups, LENGTH(groups));
}
