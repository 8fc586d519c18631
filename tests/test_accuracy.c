/*
 * Accuracy where fp32 is under strain, on the fused and the reference
 * (CLBlast) backend alike, against the float64 oracle (support/oracle.h)
 * fed the very descriptor the library ran:
 *
 *   long rows    evenly spread attention over 2^20 + 77 keys: the error of
 *                one running fp32 sum over the keys grows with seqlen_k
 *                (fixes issue, item 6); the compensated sums keep it at a
 *                few ulps. Fails on the code before that change (2.7e-5
 *                and 8e-5 of max|O| there, against a bound of 4.8e-7).
 *   key chunks   the reference backend's P V cut into 1024-key partial
 *                products (several chunks, a shorter last one, several
 *                heads, GQA, causal, row chunks under a scratch cap) and
 *                the scratch it reports for them.
 *   magnitudes   inputs of magnitude 1e5 (fp32, bf16) and 100..200 (fp16),
 *                scores of 1e10 and more, head dims 64 and 128, causal and
 *                not (fixes issue, item 4: bf16 ~1e5 gave NaN on the NVIDIA
 *                tensor-core kernel).
 *   exact fp32   the NVIDIA kernel's 3xTF32 mode against the portable
 *                kernel on the same inputs, at 256 and 4096 keys.
 *
 * Inputs are packed [B, N, H, D]; O and LSE buffers are poisoned (NaN in
 * every dtype) before every call.
 */
#define _POSIX_C_SOURCE 200809L /* setenv: FLASHCL_PATH per run */
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* fp32 unit roundoff. */
#define U32 0x1p-24

static const flashcl_backend backends[2] = {FLASHCL_BACKEND_FUSED,
                                            FLASHCL_BACKEND_REFERENCE};

static const char *backend_name(flashcl_backend backend)
{
    return backend == FLASHCL_BACKEND_REFERENCE ? "reference" : "fused";
}

/* ---------------------------------------------------------------- */
/* One problem: host inputs, device buffers, the oracle's answer     */
/* ---------------------------------------------------------------- */

typedef struct problem_data {
    flashcl_attention_desc desc; /* buffers set; backend set per run */
    size_t q_count, kv_count, o_count, lse_count;
    unsigned char *q, *k, *v; /* host copies, storage dtype, packed BNHD */
    double *ref_o, *ref_lse;  /* oracle: O packed BNHD, LSE [B, Hq, Nq] */
    void *o;                  /* the last run's O and LSE, read back */
    float *lse;
} problem_data;

/* Shape and dtype set, inputs allocated (uninitialised) on the host. */
static void problem_init(problem_data *p, size_t batch, size_t heads_q,
                         size_t heads_kv, size_t seqlen_q, size_t seqlen_k,
                         size_t head_dim, flashcl_dtype dtype, int causal)
{
    memset(p, 0, sizeof *p);
    flashcl_attention_desc_init(&p->desc);
    p->desc.batch = (int64_t)batch;
    p->desc.heads_q = (int64_t)heads_q;
    p->desc.heads_kv = (int64_t)heads_kv;
    p->desc.seqlen_q = (int64_t)seqlen_q;
    p->desc.seqlen_k = (int64_t)seqlen_k;
    p->desc.head_dim = (int64_t)head_dim;
    p->desc.dtype = dtype;
    p->desc.causal = causal;
    p->desc.layout = FLASHCL_LAYOUT_BNHD;
    p->q_count = batch * seqlen_q * heads_q * head_dim;
    p->kv_count = batch * seqlen_k * heads_kv * head_dim;
    p->o_count = p->q_count;
    p->lse_count = batch * heads_q * seqlen_q;
    const size_t elem = oracle_dtype_size(dtype);
    /* Exactly sized, so ASan sees a read past the end. */
    p->q = malloc(p->q_count * elem);
    p->k = malloc(p->kv_count * elem);
    p->v = malloc(p->kv_count * elem);
    p->o = malloc(p->o_count * elem);
    p->lse = malloc(p->lse_count * sizeof *p->lse);
    p->ref_o = malloc(p->o_count * sizeof *p->ref_o);
    p->ref_lse = malloc(p->lse_count * sizeof *p->ref_lse);
    ck_assert(p->q && p->k && p->v && p->o && p->lse && p->ref_o &&
              p->ref_lse);
}

static size_t o_bytes(const problem_data *p)
{
    return p->o_count * oracle_dtype_size(p->desc.dtype);
}

static size_t lse_bytes(const problem_data *p)
{
    return p->lse_count * sizeof(float);
}

/* Uploads the inputs, creates O and LSE, and computes the oracle of the
 * descriptor over the host copies (the quantised values the device reads). */
static void problem_upload(problem_data *p)
{
    flashcl_context *ctx = shared_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const size_t elem = oracle_dtype_size(p->desc.dtype);
    p->desc.q.buffer = create_buffer(context, p->q_count * elem);
    p->desc.k.buffer = create_buffer(context, p->kv_count * elem);
    p->desc.v.buffer = create_buffer(context, p->kv_count * elem);
    p->desc.o.buffer = create_buffer(context, o_bytes(p));
    p->desc.lse.buffer = create_buffer(context, lse_bytes(p));
    write_buffer(queue, p->desc.q.buffer, p->q, p->q_count * elem);
    write_buffer(queue, p->desc.k.buffer, p->k, p->kv_count * elem);
    write_buffer(queue, p->desc.v.buffer, p->v, p->kv_count * elem);

    const oracle_inputs in = {.q = p->q, .k = p->k, .v = p->v};
    oracle_problem problem;
    char why[256];
    ck_assert_msg(oracle_problem_from_desc(&p->desc, &in, &problem, why,
                                           sizeof why) == 0,
                  "oracle: %s", why);
    size_t stride[4];
    oracle_packed_strides(FLASHCL_LAYOUT_BNHD, problem.heads_q,
                          problem.seqlen_q, problem.head_dim_v, stride);
    ck_assert_int_eq(oracle_attention(&problem, p->ref_o, stride, p->ref_lse),
                     0);
}

/* One call on `backend` with poisoned outputs; O and LSE read back. */
static void problem_run(problem_data *p, flashcl_backend backend)
{
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    p->desc.backend = backend;
    poison_buffer(queue, p->desc.o.buffer, o_bytes(p));
    poison_buffer(queue, p->desc.lse.buffer, lse_bytes(p));
    flashcl_status status =
        flashcl_attention_forward(ctx, NULL, &p->desc, 0, NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s backend: %s: %s",
                  backend_name(backend), flashcl_status_string(status),
                  clip(flashcl_context_last_error(ctx)));
    CL_CHECK(clFinish(queue));
    read_buffer(queue, p->desc.o.buffer, p->o, o_bytes(p));
    read_buffer(queue, p->desc.lse.buffer, p->lse, lse_bytes(p));
}

static void problem_release(problem_data *p)
{
    cl_mem buffers[5] = {p->desc.q.buffer, p->desc.k.buffer, p->desc.v.buffer,
                         p->desc.o.buffer, p->desc.lse.buffer};
    for (int i = 0; i < 5; ++i)
        if (buffers[i])
            clReleaseMemObject(buffers[i]);
    free(p->q), free(p->k), free(p->v), free(p->o), free(p->lse);
    free(p->ref_o), free(p->ref_lse);
    memset(p, 0, sizeof *p);
}

/* How far the last run is from the oracle. */
typedef struct accuracy {
    int ok;
    double max_err, max_ref; /* O: max |err| and max |ref| */
    double lse_err;          /* LSE: max |err| / its allowed bound */
    char detail[320];        /* first violation */
} accuracy;

static void violation(accuracy *a, const char *fmt, const char *what,
                      size_t index, double got, double want, double bound)
{
    if (!a->ok)
        return;
    a->ok = 0;
    snprintf(a->detail, sizeof a->detail, fmt, what, index, got, want,
             fabs(got - want), bound);
}

/* O per element within tol.elem_rel * |ref| + tol.floor_rel * max|ref|,
 * overall within tol.max_rel * max|ref|, every element finite; LSE finite
 * (or -inf where the oracle's is) within lse_bound[row] (NULL: the
 * tolerance's lse_rel * max(1, |ref|) for every row). */
static accuracy check_run(const problem_data *p, tolerance tol,
                          const double *lse_bound)
{
    static const char *fmt = "%s[%zu] = %.9g, oracle %.9g, |err| %.3g > %.3g";
    accuracy a;
    memset(&a, 0, sizeof a);
    a.ok = 1;
    for (size_t i = 0; i < p->o_count; ++i)
        a.max_ref = fmax(a.max_ref, fabs(p->ref_o[i]));
    for (size_t i = 0; i < p->o_count; ++i) {
        const double got = oracle_load(p->o, i, p->desc.dtype);
        const double err = fabs(got - p->ref_o[i]);
        const double bound =
            tol.elem_rel * fabs(p->ref_o[i]) + tol.floor_rel * a.max_ref;
        if (!isfinite(got) || !(err <= bound))
            violation(&a, fmt, "O", i, got, p->ref_o[i], bound);
        a.max_err = isfinite(got) ? fmax(a.max_err, err) : INFINITY;
    }
    if (a.ok && !(a.max_err <= tol.max_rel * a.max_ref)) {
        a.ok = 0;
        snprintf(a.detail, sizeof a.detail,
                 "max |err| of O %.3g > %.3g * max|O| = %.3g", a.max_err,
                 tol.max_rel, tol.max_rel * a.max_ref);
    }
    for (size_t i = 0; i < p->lse_count; ++i) {
        const double got = p->lse[i], want = p->ref_lse[i];
        if (isinf(want) && want < 0) {
            if (!(isinf(got) && got < 0))
                violation(&a, fmt, "LSE", i, got, want, 0);
            continue;
        }
        const double bound =
            lse_bound ? lse_bound[i] : tol.lse_rel * fmax(1.0, fabs(want));
        const double err = fabs(got - want);
        if (!isfinite(got) || !(err <= bound))
            violation(&a, fmt, "LSE", i, got, want, bound);
        a.lse_err = isfinite(got) ? fmax(a.lse_err, err / bound) : INFINITY;
    }
    return a;
}

/* ---------------------------------------------------------------- */
/* Long rows                                                         */
/* ---------------------------------------------------------------- */

/*
 * Evenly spread attention: one query row over 2^20 + 77 keys, fp32, D = 16.
 * Case 0: Q = 0, so every score is 0 and every key weighs exactly 1 (the
 * output is the mean of V); case 1: small random Q (|q| < 0.5, scores
 * within about +-0.3), so the weights differ and the row sum is no longer a
 * sum of exact ones. V is uniform in [0, 1): the sums grow without
 * cancelling. The 77 extra keys give a partial last tile (fused) and a
 * shorter last key chunk (reference).
 *
 * Bound: |err| <= 8 u * max|O| per element, u = 2^-24 (4.8e-7): O is
 * rounded once (u/2), 1/sum and the product by it add an ulp or so (OpenCL
 * lets fp32 division be 2.5 ulp off), and what the summation adds stays a
 * few ulps at any length: the per-tile (fused) or per-1024-key-chunk
 * (reference) sums are added with compensation, and their own errors, of a
 * 64- or 1024-term sum, average out over the chunks. Measured on PoCL
 * (fused / reference): 7.1e-8 / 6.6e-8 (case 0), 1.7e-7 / 1.5e-7 (case 1).
 * The code before the compensated sums (one fp32 running sum over 1M
 * keys): 2.7e-5 (case 0) and 8.2e-5 / 8.1e-5 (case 1), 57-170x the bound.
 * LSE: the suites' fp32 bound, 2e-6 * max(1, |LSE|).
 */
START_TEST(test_long_rows_even)
{
    const size_t nk = ((size_t)1 << 20) + 77, d = 16;
    problem_data p;
    problem_init(&p, 1, 1, 1, 1, nk, d, FLASHCL_DTYPE_FP32, 0);
    rng r = rng_seeded(600 + (uint64_t)_i);
    float *q = (float *)p.q, *k = (float *)p.k, *v = (float *)p.v;
    for (size_t i = 0; i < p.q_count; ++i)
        q[i] = _i == 0 ? 0.0f
                       : (float)((double)(rng_next(&r) >> 40) * 0x1p-24 - 0.5);
    for (size_t i = 0; i < p.kv_count; ++i) {
        k[i] = (float)((double)(rng_next(&r) >> 40) * 0x1p-23 - 1.0);
        v[i] = (float)((double)(rng_next(&r) >> 40) * 0x1p-24);
    }
    problem_upload(&p);

    tolerance tol = tolerance_for(REF_FP32);
    tol.elem_rel = 0;
    tol.floor_rel = tol.max_rel = 8 * U32;
    accuracy results[2];
    for (int b = 0; b < 2; ++b) {
        problem_run(&p, backends[b]);
        results[b] = check_run(&p, tol, NULL);
        fprintf(stderr,
                "  long row, %s, Nk %zu D %zu, %s backend: max|err| / max|O| "
                "= %.3g (bound %.3g), LSE err / bound %.3g\n",
                _i == 0 ? "Q = 0" : "small Q", nk, d,
                backend_name(backends[b]), results[b].max_err / results[b].max_ref,
                tol.max_rel, results[b].lse_err);
    }
    for (int b = 0; b < 2; ++b)
        ck_assert_msg(results[b].ok, "long row (%s), %s backend: %s",
                      _i == 0 ? "Q = 0" : "small Q", backend_name(backends[b]),
                      results[b].detail);
    problem_release(&p);
}
END_TEST

/* ---------------------------------------------------------------- */
/* The reference backend's key chunks                                */
/* ---------------------------------------------------------------- */

/* Keys per P V partial product (src/reference/reference.c). */
#define REF_KEY_CHUNK 1024

/* Scratch of `heads` chunk heads of `rows` rows (fp32): packed Q, K, V, S,
 * the partial products of P V (one per started 1024-key chunk) and the row
 * factors, as docs/reference-backend.md counts them. */
static size_t reference_scratch(size_t heads, size_t rows, size_t nk,
                                size_t d)
{
    const size_t parts =
        nk <= REF_KEY_CHUNK ? 1 : (nk + REF_KEY_CHUNK - 1) / REF_KEY_CHUNK;
    return 4 * heads *
           (rows * d + 2 * nk * d + rows * nk + parts * rows * d + rows);
}

/*
 * B 2, Hq 4 / Hkv 2, Nq 37, Nk 3 * 1024 + 5 (three whole key chunks and a
 * 5-key one), D 40, fp32, random N(0, 1) inputs, causal off (_i 0) and on
 * (_i 1); _i 2: causal, under a scratch cap of 20 rows of one head, so the
 * call runs in row chunks (19 + 18 rows) whose partial products have
 * fewer rows. Both backends against the oracle at the fp32 tolerance of
 * the other suites.
 */
START_TEST(test_reference_key_chunks)
{
    const size_t nq = 37, nk = 3 * REF_KEY_CHUNK + 5, d = 40;
    flashcl_context *ctx = shared_context();
    problem_data p;
    problem_init(&p, 2, 4, 2, nq, nk, d, FLASHCL_DTYPE_FP32, _i > 0);
    rng r = rng_seeded(620 + (uint64_t)_i);
    float *inputs[3] = {(float *)p.q, (float *)p.k, (float *)p.v};
    const size_t counts[3] = {p.q_count, p.kv_count, p.kv_count};
    for (int t = 0; t < 3; ++t)
        for (size_t i = 0; i < counts[t]; ++i)
            inputs[t][i] = (float)rng_normal(&r);
    problem_upload(&p);

    size_t bytes = 0, limit = 0;
    p.desc.backend = FLASHCL_BACKEND_REFERENCE;
    if (_i == 2) {
        /* Room for K and V of one head and 20 of its 37 rows. */
        limit = reference_scratch(1, 20, nk, d);
        ck_assert_int_eq(flashcl_context_set_scratch_limit(ctx, limit),
                         FLASHCL_SUCCESS);
    }
    ck_assert_int_eq(flashcl_reference_scratch_bytes(ctx, &p.desc, &bytes),
                     FLASHCL_SUCCESS);
    if (_i < 2) /* all 8 heads in one chunk under the default cap */
        ck_assert_uint_eq(bytes, reference_scratch(8, nq, nk, d));
    else /* one head, balanced row chunks (37 rows -> 19 + 18) */
        ck_assert_msg(bytes <= limit &&
                          bytes == reference_scratch(1, 19, nk, d),
                      "scratch %zu bytes under a cap of %zu", bytes, limit);

    const tolerance tol = tolerance_for(REF_FP32);
    accuracy results[2];
    for (int b = 0; b < 2; ++b) {
        problem_run(&p, backends[b]);
        results[b] = check_run(&p, tol, NULL);
        fprintf(stderr,
                "  key chunks, Nk %zu%s%s, %s backend: max|err| / max|O| = "
                "%.3g (bound %.3g)\n",
                nk, _i > 0 ? " causal" : "", _i == 2 ? " row chunks" : "",
                backend_name(backends[b]),
                results[b].max_err / results[b].max_ref, tol.max_rel);
    }
    if (_i == 2)
        ck_assert_int_eq(flashcl_context_set_scratch_limit(ctx, 0),
                         FLASHCL_SUCCESS);
    for (int b = 0; b < 2; ++b)
        ck_assert_msg(results[b].ok, "key chunks (case %d), %s backend: %s",
                      _i, backend_name(backends[b]), results[b].detail);
    problem_release(&p);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Extreme magnitudes                                                */
/* ---------------------------------------------------------------- */

/* Keys query row i of head h sees (bottom-right causal when causal). */
static size_t visible_keys(const problem_data *p, size_t i)
{
    const size_t nq = (size_t)p->desc.seqlen_q, nk = (size_t)p->desc.seqlen_k;
    if (!p->desc.causal)
        return nk;
    const size_t last = i + nk - nq; /* nk >= nq here */
    return last + 1 < nk ? last + 1 : nk;
}

/* Scale * q.k of query row (b, i, h) and key (b, j, h / group), in double,
 * and scale * sum |q_d k_d| into *abs_sum. */
static double exact_score(const problem_data *p, size_t b, size_t i, size_t h,
                          size_t j, double *abs_sum)
{
    const flashcl_attention_desc *d = &p->desc;
    const size_t hq = (size_t)d->heads_q, hkv = (size_t)d->heads_kv;
    const size_t dim = (size_t)d->head_dim, g = h / (hq / hkv);
    const size_t qi = ((b * (size_t)d->seqlen_q + i) * hq + h) * dim;
    const size_t kj = ((b * (size_t)d->seqlen_k + j) * hkv + g) * dim;
    const double scale = 1.0 / sqrt((double)dim);
    double dot = 0, sum = 0;
    for (size_t t = 0; t < dim; ++t) {
        const double x = oracle_load(p->q, qi + t, d->dtype) *
                         oracle_load(p->k, kj + t, d->dtype);
        dot += x;
        sum += fabs(x);
    }
    *abs_sum = scale * sum;
    return scale * dot;
}

/* ±[amplitude, 2 amplitude), uniform magnitude, random sign. */
static double extreme_value(rng *r, double amplitude)
{
    const uint64_t bits = rng_next(r);
    const double magnitude =
        amplitude * (1.0 + (double)(bits >> 11) * 0x1p-53);
    return (bits & 1) ? -magnitude : magnitude;
}

/*
 * Inputs of magnitude [A, 2A) with random signs: A = 1e5 for fp32 and bf16
 * (scores scale * q.k of about 2e10, up to ~1e11), A = 100 for fp16 (all
 * inputs <= 200, well inside fp16's 65504; scores ~2e4). Head dims 64 and
 * 128, causal off and on, GQA; every dtype on both backends (the fused one
 * takes the NVIDIA tensor-core kernel where that exists for the dtype and
 * head dim, the portable kernel on PoCL).
 *
 * Tolerance. Scores this large make the softmax one-hot: the top two
 * scores of a row are typically ~1e3 (fp16) to ~1e9 (fp32/bf16) apart, and
 * exp(-gap) vanishes, so O is the top key's V row, exactly representable in
 * the storage dtype, in the oracle as on the device. Any failure of the
 * large-score handling (an overflowing exponent, a NaN from inf - inf, a
 * wrong row max, a mixed-in second row) therefore shows as an error of the
 * order of max|O| (|V| ~ A), orders of magnitude above the per-dtype bound
 * the other suites use (tolerance_for_desc: fp32 1e-5 * max|O|, fp16/bf16
 * one ulp per element and 1.5 u * max|O|, widened by P's rounding on the
 * tensor-core kernel), which a correct kernel meets with room to spare.
 * That bound is relative to max|O|, the size of the values O is made of.
 *
 * The one thing that is not the kernel's fault is a near tie: the device
 * computes the scores in fp32, off by up to ~D u sum|q_d k_d| (about 1 for
 * fp16, 1e5 for fp32 here) from the oracle's exact ones, so a row whose top
 * two scores are within a few of that of each other has weights the fp32
 * scores cannot resolve. Such query rows are drawn again (at most a few
 * percent of the fp16 rows, almost never for fp32/bf16) until the gap is
 * at least 64 (fp16: exp(-64) ~ 1e-28) or 1e7 (fp32, bf16: 100x the score
 * error). LSE ~ the top score inherits that fp32 score error: it is allowed
 * 2 D u scale sum|q_d k_d| of the top key on top of the suites' 2e-6 *
 * max(1, |LSE|).
 */
START_TEST(test_extreme_magnitudes)
{
    static const flashcl_dtype dtypes[3] = {
        FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_BF16, FLASHCL_DTYPE_FP16};
    const flashcl_dtype dtype = dtypes[_i / 4];
    const size_t dim = (_i / 2) % 2 ? 128 : 64;
    const int causal = _i % 2;
    const double amplitude = dtype == FLASHCL_DTYPE_FP16 ? 100 : 1e5;
    const double min_gap = dtype == FLASHCL_DTYPE_FP16 ? 64 : 1e7;
    const size_t batch = 1, hq = 4, hkv = 2, nq = 67, nk = 131;

    problem_data p;
    problem_init(&p, batch, hq, hkv, nq, nk, dim, dtype, causal);
    rng r = rng_seeded(640 + (uint64_t)_i);
    for (size_t i = 0; i < p.q_count; ++i)
        oracle_store(p.q, i, dtype, extreme_value(&r, amplitude));
    for (size_t i = 0; i < p.kv_count; ++i) {
        oracle_store(p.k, i, dtype, extreme_value(&r, amplitude));
        oracle_store(p.v, i, dtype, extreme_value(&r, amplitude));
    }

    /* Redraw near-tie query rows; bound each row's LSE error. */
    double *lse_bound = malloc(p.lse_count * sizeof *lse_bound);
    ck_assert_ptr_nonnull(lse_bound);
    size_t redrawn = 0;
    for (size_t b = 0; b < batch; ++b)
        for (size_t i = 0; i < nq; ++i)
            for (size_t h = 0; h < hq; ++h)
                for (int attempt = 0;; ++attempt) {
                    ck_assert_msg(attempt < 100, "no row without a near tie");
                    double top = -INFINITY, second = -INFINITY, top_abs = 0;
                    for (size_t j = 0; j < visible_keys(&p, i); ++j) {
                        double abs_sum;
                        const double s = exact_score(&p, b, i, h, j, &abs_sum);
                        if (s > top) {
                            second = top;
                            top = s;
                            top_abs = abs_sum;
                        } else if (s > second) {
                            second = s;
                        }
                    }
                    if (top - second >= min_gap) {
                        const double lse_ref = top; /* + log(1 + ~0) */
                        lse_bound[(b * hq + h) * nq + i] =
                            2e-6 * fmax(1.0, fabs(lse_ref)) +
                            2.0 * (double)dim * U32 * top_abs;
                        break;
                    }
                    const size_t row = ((b * nq + i) * hq + h) * dim;
                    for (size_t t = 0; t < dim; ++t)
                        oracle_store(p.q, row + t, dtype,
                                     extreme_value(&r, amplitude));
                    ++redrawn;
                }
    problem_upload(&p);

    accuracy results[2];
    tolerance tols[2];
    for (int b = 0; b < 2; ++b) {
        p.desc.backend = backends[b];
        tols[b] = tolerance_for_desc((ref_dtype)dtype, &p.desc);
        problem_run(&p, backends[b]);
        results[b] = check_run(&p, tols[b], lse_bound);
        fprintf(stderr,
                "  magnitudes %s |x| in [%g, %g) D %zu%s (%zu rows redrawn), "
                "%s backend: max|err| / max|O| = %.3g (bound %.3g), LSE err "
                "/ bound %.3g\n",
                oracle_dtype_name(dtype), amplitude, 2 * amplitude, dim,
                causal ? " causal" : "", redrawn, backend_name(backends[b]),
                results[b].max_err / results[b].max_ref, tols[b].max_rel,
                results[b].lse_err);
    }
    for (int b = 0; b < 2; ++b)
        ck_assert_msg(results[b].ok, "magnitudes %s D %zu causal %d, %s "
                                     "backend: %s",
                      oracle_dtype_name(dtype), dim, causal,
                      backend_name(backends[b]), results[b].detail);
    free(lse_bound);
    problem_release(&p);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Exact fp32 on NVIDIA tensor cores (3xTF32)                        */
/* ---------------------------------------------------------------- */

/* The path the fused backend plans for p under the FLASHCL_PATH now set,
 * and its build options. */
static flashcl_variant_info planned(const problem_data *p)
{
    flashcl_attention_desc views = p->desc;
    views.backend = FLASHCL_BACKEND_FUSED;
    views.q.buffer = views.k.buffer = views.v.buffer = NULL;
    views.o.buffer = views.lse.buffer = NULL;
    flashcl_variant_info info;
    ck_assert_int_eq(flashcl_describe_variant(shared_context(), &views, &info),
                     FLASHCL_SUCCESS);
    return info;
}

/* max|err| / max|O| of the fused backend with FLASHCL_PATH=path, or -1
 * when the call runs elsewhere (path not served here); *compensated: the
 * plan adds O over key tiles with compensation. */
static double path_error(problem_data *p, const char *path, int *compensated)
{
    setenv("FLASHCL_PATH", path, 1);
    const flashcl_variant_info info = planned(p);
    if (strcmp(info.path, path) != 0) {
        unsetenv("FLASHCL_PATH");
        fprintf(stderr, "  %s not served here: %s\n", path, info.skipped);
        return -1;
    }
    if (!strcmp(path, "nv_mma"))
        ck_assert_msg(strstr(info.build_options, "-DFLASHCL_NV_EXACT=1"),
                      "fp32 without allow_tf32 not in exact mode: %s",
                      info.build_options);
    /* 1: fp32 terms, 2: bf16 ones; absent on other paths */
    *compensated = strstr(info.build_options, "-DFLASHCL_NV_COMPENSATE=") &&
                   !strstr(info.build_options, "-DFLASHCL_NV_COMPENSATE=0");

    tolerance tol = tolerance_for(REF_FP32);
    problem_run(p, FLASHCL_BACKEND_FUSED);
    if (!strcmp(path, "nv_mma")) /* noted for FLASHCL_EXPECT_PATH */
        expect_path_check(shared_context(), &p->desc, "exact fp32");
    unsetenv("FLASHCL_PATH");
    const accuracy a = check_run(p, tol, NULL);
    ck_assert_msg(a.ok, "%s: %s", path, a.detail);
    return a.max_err / a.max_ref;
}

/*
 * Issue 44 item 1: fp32 without allow_tf32 on the NVIDIA mma.sync kernel
 * splits every operand into TF32 high and low parts (3 mma a product).
 * Run on the GPU, or emulated (FLASHCL_NV_EMULATE=forward, Intel's CPU
 * runtime; elsewhere the case says so and passes, unless
 * FLASHCL_EXPECT_PATH names nv_mma). Inputs where fp32 sums are under
 * strain: small Q (|q| < 0.5, so the weights spread over every key), K in [-1, 1), V in [0, 1) (the
 * sums over keys grow without cancelling). Nq 64 (one work-group), Nk 256
 * and 4096, fp32, D 64 / D 128 causal. Both runs against the float64
 * oracle at the fp32 suites' tolerance, and:
 *   - the exact mode's max|err| / max|O| within 2x the portable kernel's
 *     on the same inputs (floored at an fp32 ulp, 2^-23: the portable
 *     kernel can be exact to the last bit on a row);
 *   - no growth with seqlen_k: its error at 4096 keys within 2x that at
 *     256 (floored likewise). One running fp32 sum over the keys would
 *     grow like sqrt(16) = 4x on such inputs (the long-rows case above).
 * The split is what the first bound checks: one TF32 product (allow_tf32)
 * is ~2^-11 off, hundreds of times the portable kernel's error. Both
 * bounds need O's sum compensated (nv_mma.c's compensated(), on by
 * default); with FLASHCL_NV_COMPENSATE=0 the case checks the fp32
 * tolerance only and prints the errors (emulated, uncompensated: D 64
 * 1.5e-6 / 5.5e-6, D 128 causal 1.5e-6 / 5.2e-6, against the portable
 * kernel's compensated 1.9e-7 / 2.1e-7 and 2.2e-7 / 2.8e-7 on Intel's
 * CPU runtime). Breaking the split (lo*hi and
 * hi*lo left out, emulated) failed the D 64 case at the fp32 tolerance
 * already: O[0] off by 3.2e-5, bound 5.5e-6.
 */
START_TEST(test_nv_exact_fp32)
{
    const size_t dim = _i == 0 ? 64 : 128, nq = 64;
    const int causal = _i == 1;
    const size_t lengths[2] = {256, 4096};
    double err[2][2]; /* [length][portable, nv_mma] */
    int compensated = 0, unused;
    for (int l = 0; l < 2; ++l) {
        problem_data p;
        problem_init(&p, 1, 1, 1, nq, lengths[l], dim, FLASHCL_DTYPE_FP32,
                     causal);
        rng r = rng_seeded(660 + (uint64_t)_i);
        float *q = (float *)p.q, *k = (float *)p.k, *v = (float *)p.v;
        for (size_t i = 0; i < p.q_count; ++i)
            q[i] = (float)((double)(rng_next(&r) >> 40) * 0x1p-24 - 0.5);
        for (size_t i = 0; i < p.kv_count; ++i) {
            k[i] = (float)((double)(rng_next(&r) >> 40) * 0x1p-23 - 1.0);
            v[i] = (float)((double)(rng_next(&r) >> 40) * 0x1p-24);
        }
        problem_upload(&p);
        err[l][0] = path_error(&p, "portable", &unused);
        err[l][1] = path_error(&p, "nv_mma", &compensated);
        problem_release(&p);
        fprintf(stderr,
                "  exact fp32 D %zu%s Nq %zu Nk %zu: max|err| / max|O| "
                "portable %.3g, nv_mma %.3g\n",
                dim, causal ? " causal" : "", nq, lengths[l], err[l][0],
                err[l][1]);
        if (err[l][1] < 0) {
            const char *expect = getenv("FLASHCL_EXPECT_PATH");
            ck_assert_msg(!expect || strncmp(expect, "nv_mma", 6) != 0,
                          "FLASHCL_EXPECT_PATH=%s: nv_mma did not run",
                          expect);
            return;
        }
    }
    const double ulp = 0x1p-23;
    if (!compensated) {
        fprintf(stderr, "  D %zu: O not compensated "
                        "(FLASHCL_NV_COMPENSATE=0): the fp32 tolerance "
                        "only\n", dim);
        return;
    }
    for (int l = 0; l < 2; ++l)
        ck_assert_msg(err[l][1] <= 2 * fmax(err[l][0], ulp),
                      "Nk %zu: exact mode %.3g > 2 x portable %.3g",
                      lengths[l], err[l][1], err[l][0]);
    ck_assert_msg(err[1][1] <= 2 * fmax(err[0][1], ulp),
                  "exact mode grows with seqlen_k: %.3g at %zu keys, %.3g "
                  "at %zu", err[1][1], lengths[1], err[0][1], lengths[0]);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {{test_long_rows_even, 2},
                                {test_reference_key_chunks, 3},
                                {test_extreme_magnitudes, 12},
                                {test_nv_exact_fp32, 2}};
    /* FLASHCL_TEST_ACCURACY=nv_exact: only the exact-fp32 cases;
     * nv_exact64: only its D 64 one (the emulated run in scripts/test.sh:
     * about 3.5 minutes on 2 cores, D 128 as much again) */
    const char *only = getenv("FLASHCL_TEST_ACCURACY");
    const test_entry d64 = {test_nv_exact_fp32, 1};
    if (only && !strcmp(only, "nv_exact"))
        return run_tests("accuracy", 1200, NULL, NULL, tests + 3, 1);
    if (only && !strcmp(only, "nv_exact64"))
        return run_tests("accuracy", 900, NULL, NULL, &d64, 1);
    return run_tests("accuracy", 300, NULL, NULL, tests, LENGTH(tests));
}
