/*
 * What a new user and a hostile caller hit (the fixes issue): the host call
 * with head_dim_v != head_dim, window bounds near INT64_MAX, stale
 * diagnostics, a broken kernel folder, an older caller's smaller
 * descriptor, describe/prepare reading strides, and quiet compiles.
 * Each case failed (or crashed under ASan, or hung) on the code before the
 * fix.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp, mkfifo */
#include "test_common.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- */
/* A tiny float64 attention with D_v != D (packed BNHD, no variants),  */
/* written here from the header's definition.                         */
/* ---------------------------------------------------------------- */

typedef struct small_shape {
    int b, hq, hkv, nq, nk, d, dv;
} small_shape;

static void naive_attention_causal(const small_shape *s, const float *q,
                                   const float *k, const float *v, int causal,
                                   double *o)
{
    const double scale = 1.0 / sqrt((double)s->d);
    double *w = malloc((size_t)s->nk * sizeof *w);
    ck_assert_ptr_nonnull(w);
    for (int b = 0; b < s->b; ++b)
        for (int h = 0; h < s->hq; ++h)
            for (int i = 0; i < s->nq; ++i) {
                const int g = h / (s->hq / s->hkv);
                const float *qi = q + (((size_t)b * s->nq + i) * s->hq + h) * s->d;
                double mx = -INFINITY, sum = 0;
                const int last = causal ? i + s->nk - s->nq : s->nk - 1;
                for (int j = 0; j < s->nk; ++j) {
                    if (j > last) {
                        w[j] = -INFINITY;
                        continue;
                    }
                    const float *kj =
                        k + (((size_t)b * s->nk + j) * s->hkv + g) * s->d;
                    double dot = 0;
                    for (int t = 0; t < s->d; ++t)
                        dot += (double)qi[t] * kj[t];
                    w[j] = dot * scale;
                    mx = fmax(mx, w[j]);
                }
                for (int j = 0; j < s->nk; ++j)
                    sum += (w[j] = exp(w[j] - mx));
                double *oi = o + (((size_t)b * s->nq + i) * s->hq + h) * s->dv;
                for (int t = 0; t < s->dv; ++t) {
                    double acc = 0;
                    for (int j = 0; j < s->nk; ++j)
                        acc += w[j] *
                               v[(((size_t)b * s->nk + j) * s->hkv + g) * s->dv + t];
                    oi[t] = acc / sum;
                }
            }
    free(w);
}

static void naive_attention(const small_shape *s, const float *q,
                            const float *k, const float *v, double *o)
{
    naive_attention_causal(s, q, k, v, 0, o);
}

static float *random_floats(size_t count, uint64_t seed)
{
    rng r = rng_seeded(seed);
    float *x = malloc(count * sizeof *x); /* exactly sized: ASan sees past it */
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < count; ++i)
        x[i] = (float)rng_normal(&r);
    return x;
}

/* The host call sized V and O with head_dim: with head_dim_v < head_dim it
 * read past v and wrote past o (heap corruption), with head_dim_v >
 * head_dim it rejected a valid call. */
START_TEST(test_host_call_head_dim_v)
{
    const small_shape s = {1, 2, 1, 5, 7, 16, _i == 0 ? 8 : 24};
    const size_t nq = (size_t)s.b * s.nq * s.hq, nk = (size_t)s.b * s.nk * s.hkv;
    float *q = random_floats(nq * s.d, 11), *k = random_floats(nk * s.d, 12);
    float *v = random_floats(nk * s.dv, 13);
    float *o = malloc(nq * s.dv * sizeof *o);
    double *ref = malloc(nq * s.dv * sizeof *ref);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(ref);
    for (size_t i = 0; i < nq * s.dv; ++i)
        o[i] = NAN; /* poisoned */
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = s.b, d.heads_q = s.hq, d.heads_kv = s.hkv;
    d.seqlen_q = s.nq, d.seqlen_k = s.nk, d.head_dim = s.d;
    d.head_dim_v = s.dv;
    flashcl_context *ctx = shared_context();
    flashcl_status st = flashcl_attention_forward_host(ctx, &d, q, k, v, o, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s: %s", flashcl_status_string(st),
                  flashcl_context_last_error(ctx));
    naive_attention(&s, q, k, v, ref);
    for (size_t i = 0; i < nq * s.dv; ++i)
        ck_assert_msg(fabs(o[i] - ref[i]) <= 1e-5, "O[%zu] = %g, want %g", i,
                      (double)o[i], ref[i]);
    free(q), free(k), free(v), free(o), free(ref);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Large magnitudes                                                   */
/* ---------------------------------------------------------------- */

/* On the NVIDIA tensor-core kernel, bf16 inputs of magnitude 1e5 gave NaN:
 * 2^(s*c - round(m*c)) overflowed once |m*c| was large. Scores this large
 * make the softmax nearly one-hot, so O is close to one V row and the
 * comparison is against the oracle of the quantised inputs, relative to
 * max |O|, at the storage type's rounding (plus P's, on tensor cores). */
START_TEST(test_large_magnitudes)
{
    const struct {
        ref_dtype dtype;
        double amplitude, tolerance;
        int d, causal;
    } cases[] = {
        {REF_BF16, 1e5, 2e-2, 128, 0}, {REF_BF16, 1e5, 2e-2, 64, 1},
        {REF_FP16, 200, 4e-3, 128, 1}, {REF_FP16, 200, 4e-3, 64, 0},
        {REF_FP32, 1e5, 1e-5, 128, 0}, {REF_FP32, 1e5, 1e-5, 64, 1},
    };
    const int c = _i;
    const small_shape s = {1, 4, 2, 70, 70, cases[c].d, cases[c].d};
    const size_t nq = (size_t)s.b * s.nq * s.hq, nk = (size_t)s.b * s.nk * s.hkv;
    float *q = random_floats(nq * s.d, 21 + c), *k = random_floats(nk * s.d, 31 + c);
    float *v = random_floats(nk * s.d, 41 + c);
    const size_t elem = ref_dtype_size(cases[c].dtype);
    unsigned char *qs = malloc(nq * s.d * elem), *ks = malloc(nk * s.d * elem),
                  *vs = malloc(nk * s.d * elem), *os = malloc(nq * s.d * elem);
    double *ref = malloc(nq * s.d * sizeof *ref);
    ck_assert(qs && ks && vs && os && ref);
    /* Inputs as the device will read them: scaled, then quantised. */
    float *all[3] = {q, k, v};
    unsigned char *stored[3] = {qs, ks, vs};
    const size_t counts[3] = {nq * s.d, nk * s.d, nk * s.d};
    for (int t = 0; t < 3; ++t)
        for (size_t i = 0; i < counts[t]; ++i) {
            ref_store(stored[t], i, cases[c].dtype, all[t][i] * cases[c].amplitude);
            all[t][i] = (float)ref_load(stored[t], i, cases[c].dtype);
        }
    memset(os, 0xff, nq * s.d * elem); /* NaN in every dtype */
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = s.b, d.heads_q = s.hq, d.heads_kv = s.hkv;
    d.seqlen_q = s.nq, d.seqlen_k = s.nk, d.head_dim = s.d;
    d.dtype = to_flashcl_dtype(cases[c].dtype);
    d.causal = cases[c].causal;
    flashcl_context *ctx = shared_context();
    flashcl_status st = flashcl_attention_forward_host(ctx, &d, qs, ks, vs, os, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s", flashcl_context_last_error(ctx));
    naive_attention_causal(&s, q, k, v, cases[c].causal, ref);
    double max_ref = 0, max_err = 0;
    for (size_t i = 0; i < nq * s.d; ++i) {
        const double got = ref_load(os, i, cases[c].dtype);
        ck_assert_msg(isfinite(got), "case %d: O[%zu] = %g", c, i, got);
        max_ref = fmax(max_ref, fabs(ref[i]));
        max_err = fmax(max_err, fabs(got - ref[i]));
    }
    ck_assert_msg(max_err <= cases[c].tolerance * max_ref,
                  "case %d (%s, |x| ~ %g, D %d, causal %d): max err %g, max|O| "
                  "%g",
                  c, ref_dtype_name(cases[c].dtype), cases[c].amplitude,
                  cases[c].d, cases[c].causal, max_err, max_ref);
    free(q), free(k), free(v), free(qs), free(ks), free(vs), free(os), free(ref);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Window bounds near INT64_MAX                                       */
/* ---------------------------------------------------------------- */

static attention_case window_case(int causal, uint64_t seed)
{
    return small_case(REF_FP32, 37, 53, causal, seed);
}

/* i + diag + right overflowed in the kernels: O = 0, LSE = -inf (fused) or
 * a wrong O (reference). A bound past every key means no bound. */
START_TEST(test_window_bounds_near_int64_max)
{
    const int64_t bounds[][2] = {{INT64_MAX, INT64_MAX},
                                 {INT64_MAX - 1, -1},
                                 {-1, INT64_MAX},
                                 {INT64_MAX / 2, INT64_MAX / 3}};
    attention_case c = window_case(_i, 600 + (uint64_t)_i);
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    case_data data;
    run_case_keep(ctx, NULL, &c, &data); /* full attention, checked */
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; ++b) {
        flashcl_attention_desc d = case_desc(&c, &data);
        d.window = 1;
        d.window_left = bounds[b][0];
        d.window_right = bounds[b][1];
        poison_buffer(queue, data.o.view.buffer, tensor_bytes(&data.o));
        poison_buffer(queue, data.lse.view.buffer, tensor_bytes(&data.lse));
        flashcl_status st = flashcl_attention_forward(ctx, NULL, &d, 0, NULL,
                                                      NULL);
        ck_assert_msg(st == FLASHCL_SUCCESS, "bounds %zu: %s", b,
                      flashcl_context_last_error(ctx));
        compare_result r = case_check(&c, &data, queue);
        ck_assert_msg(r.ok, "window (%lld, %lld), causal %d: %s",
                      (long long)bounds[b][0], (long long)bounds[b][1], _i,
                      r.detail);
    }
    case_release(&data);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Diagnostics after success                                          */
/* ---------------------------------------------------------------- */

START_TEST(test_error_cleared_by_success)
{
    flashcl_context *ctx = shared_context();
    attention_case c = window_case(0, 610);
    case_data data;
    run_case_keep(ctx, NULL, &c, &data);
    flashcl_attention_desc bad = case_desc(&c, &data);
    bad.heads_kv = 3; /* 2 is not a multiple of 3 */
    ck_assert_int_eq(flashcl_attention_forward(ctx, NULL, &bad, 0, NULL, NULL),
                     FLASHCL_ERROR_HEAD_GROUPING);
    ck_assert_str_ne(flashcl_context_last_error(ctx), "");
    flashcl_attention_desc good = case_desc(&c, &data);
    ck_assert_int_eq(flashcl_attention_forward(ctx, NULL, &good, 0, NULL, NULL),
                     FLASHCL_SUCCESS);
    ck_assert_msg(!strcmp(flashcl_context_last_error(ctx), ""),
                  "after a success: \"%s\"", flashcl_context_last_error(ctx));
    CL_CHECK(clFinish(flashcl_context_queue(ctx)));
    case_release(&data);
}
END_TEST

/* ---------------------------------------------------------------- */
/* A broken FLASHCL_KERNEL_DIR                                        */
/* ---------------------------------------------------------------- */

/* The kernel dir holds flash_fwd.cl made by `make` (empty file, FIFO);
 * the call must fail promptly with a message naming the file. */
static void expect_kernel_dir_failure(void (*make)(const char *path),
                                      const char *words)
{
    char dir[] = "/tmp/flashcl-kdir-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/flash_fwd.cl", dir);
    make(path);
    setenv("FLASHCL_KERNEL_DIR", dir, 1);
    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create(&ctx, NULL), FLASHCL_SUCCESS);
    attention_case c = window_case(0, 620);
    case_data data;
    case_prepare(&c, flashcl_context_cl_context(ctx),
                 flashcl_context_queue(ctx), &data);
    flashcl_attention_desc d = case_desc(&c, &data);
    d.backend = FLASHCL_BACKEND_FUSED;
    flashcl_status st = flashcl_attention_forward(ctx, NULL, &d, 0, NULL, NULL);
    const char *message = flashcl_context_last_error(ctx);
    ck_assert_int_eq(st, FLASHCL_ERROR_BUILD_FAILED);
    ck_assert_msg(strstr(message, "flash_fwd.cl") && strstr(message, words),
                  "message \"%s\" does not say \"%s\"", message, words);
    ck_assert(buffer_is_poisoned(flashcl_context_queue(ctx), data.o.view.buffer,
                                 tensor_bytes(&data.o)));
    case_release(&data);
    flashcl_context_release(ctx);
    unsetenv("FLASHCL_KERNEL_DIR");
    unlink(path);
    rmdir(dir);
}

static void make_empty(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
}

static void make_fifo(const char *path)
{
    ck_assert_int_eq(mkfifo(path, 0600), 0);
}

START_TEST(test_kernel_dir_empty_file)
{
    expect_kernel_dir_failure(make_empty, "empty");
}
END_TEST

START_TEST(test_kernel_dir_fifo)
{
    expect_kernel_dir_failure(make_fifo, "not a regular file");
}
END_TEST

/* ---------------------------------------------------------------- */
/* An older caller's descriptor                                       */
/* ---------------------------------------------------------------- */

/* A caller built against a header without the last fields passes a
 * smaller struct_size: the library reads only that much (the copy is
 * exactly that large, so ASan sees any read past it) and the missing
 * fields mean their defaults. */
START_TEST(test_struct_size_older_caller)
{
    flashcl_context *ctx = shared_context();
    attention_case c = window_case(1, 630);
    case_data data;
    run_case_keep(ctx, NULL, &c, &data);
    flashcl_attention_desc full = case_desc(&c, &data);
    const size_t old_size = offsetof(flashcl_attention_desc, head_dim_v);
    unsigned char *old = malloc(old_size);
    ck_assert_ptr_nonnull(old);
    full.struct_size = old_size;
    memcpy(old, &full, old_size);
    cl_command_queue queue = flashcl_context_queue(ctx);
    poison_buffer(queue, data.o.view.buffer, tensor_bytes(&data.o));
    poison_buffer(queue, data.lse.view.buffer, tensor_bytes(&data.lse));
    flashcl_status st = flashcl_attention_forward(
        ctx, NULL, (const flashcl_attention_desc *)old, 0, NULL, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s", flashcl_context_last_error(ctx));
    compare_result r = case_check(&c, &data, queue);
    ck_assert_msg(r.ok, "older caller: %s", r.detail);
    free(old);
    case_release(&data);
}
END_TEST

/* ---------------------------------------------------------------- */
/* describe and prepare read the views                                */
/* ---------------------------------------------------------------- */

/* flashcl_prepare assumed packed tensors; with dim-strided views a forward
 * call then needed another kernel than the one prepared. */
START_TEST(test_prepare_reads_strides)
{
    flashcl_context *ctx = shared_context();
    attention_case c = window_case(0, 640);
    c.view = VIEW_DIM_STRIDED;
    case_data data;
    case_prepare(&c, flashcl_context_cl_context(ctx),
                 flashcl_context_queue(ctx), &data);
    flashcl_attention_desc d = case_desc(&c, &data);
    flashcl_variant_info info;
    ck_assert_int_eq(flashcl_describe_variant(ctx, &d, &info), FLASHCL_SUCCESS);
    if (!strcmp(info.path, "portable"))
        ck_assert_msg(strstr(info.build_options, "-DFLASHCL_DIM_CONTIGUOUS=0"),
                      "options: %s", info.build_options);
    double first = -1, second = -1;
    ck_assert_int_eq(flashcl_prepare(ctx, &d, &first), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_prepare(ctx, &d, &second), FLASHCL_SUCCESS);
    ck_assert(second == 0.0);
    /* The same descriptor runs on the prepared kernel, and right. */
    ck_assert_int_eq(flashcl_attention_forward(ctx, NULL, &d, 0, NULL, NULL),
                     FLASHCL_SUCCESS);
    compare_result r = case_check(&c, &data, flashcl_context_queue(ctx));
    ck_assert_msg(r.ok, "%s", r.detail);
    /* Buffers may be absent when planning: the views are taken as given. */
    flashcl_attention_desc no_buffers = d;
    no_buffers.q.buffer = no_buffers.k.buffer = no_buffers.v.buffer = NULL;
    no_buffers.o.buffer = no_buffers.lse.buffer = NULL;
    flashcl_variant_info again;
    ck_assert_int_eq(flashcl_describe_variant(ctx, &no_buffers, &again),
                     FLASHCL_SUCCESS);
    ck_assert_str_eq(again.build_options, info.build_options);
    case_release(&data);
}
END_TEST

/* FLASHCL_PATH names the one path to try: the others are skipped with that
 * reason; a name no path has is refused, naming the paths there are. */
START_TEST(test_forced_path)
{
    flashcl_context *ctx = shared_context();
    attention_case c = window_case(0, 640);
    case_data data;
    case_prepare(&c, flashcl_context_cl_context(ctx),
                 flashcl_context_queue(ctx), &data);
    flashcl_attention_desc d = case_desc(&c, &data);
    flashcl_variant_info info;
    setenv("FLASHCL_PATH", "no-such-path", 1);
    ck_assert_int_eq(flashcl_describe_variant(ctx, &d, &info),
                     FLASHCL_ERROR_INVALID_VALUE);
    ck_assert_int_eq(flashcl_attention_forward(ctx, NULL, &d, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_VALUE);
    const char *message = flashcl_context_last_error(ctx);
    ck_assert_msg(strstr(message, "FLASHCL_PATH=\"no-such-path\"") &&
                      strstr(message, "nv_mma") && strstr(message, "portable"),
                  "%s", message);
    setenv("FLASHCL_PATH", "nv_mma", 1);
    ck_assert_int_eq(flashcl_describe_variant(ctx, &d, &info), FLASHCL_SUCCESS);
    if (strcmp(info.path, "nv_mma") != 0)
        ck_assert_msg(strstr(info.skipped, "portable") == NULL &&
                          strstr(info.skipped, "amd_mfma: FLASHCL_PATH=nv_mma"),
                      "skipped: %s", info.skipped);
    setenv("FLASHCL_PATH", "portable", 1);
    ck_assert_int_eq(flashcl_describe_variant(ctx, &d, &info), FLASHCL_SUCCESS);
    ck_assert_str_eq(info.path, "portable");
    ck_assert_int_eq(flashcl_attention_forward(ctx, NULL, &d, 0, NULL, NULL),
                     FLASHCL_SUCCESS);
    unsetenv("FLASHCL_PATH");
    compare_result r = case_check(&c, &data, flashcl_context_queue(ctx));
    ck_assert_msg(r.ok, "%s", r.detail);
    case_release(&data);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Compiles stay off the user's stderr                                */
/* ---------------------------------------------------------------- */

/* A cold compile on PoCL printed "N warnings generated." to stderr (16-wide
 * vectors forced on AVX2 CPUs made every compile warn). This test runs
 * with POCL_KERNEL_CACHE=0 (tests/CMakeLists.txt) on a kernel folder whose
 * flash_fwd.cl is the real one plus a line the compiler warns about, sends
 * stderr to a file while compiling, and expects the file empty: the
 * library passes -w unless FLASHCL_VERBOSE is set. */
static void copy_with_warning(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fputs("\nstatic int flashcl_test_warns(void) { int x = 1.5; return x; }\n",
          out);
    fclose(in);
    fclose(out);
}

/* dir/portable/flash_fwd.cl with a warning; the headers linked as they are. */
/* The headers the portable kernel includes, linked beside its copy. */
static const char *const warning_kernel_headers[][2] = {
    {"common", "flashcl_common.clh"},
    {"common", "kernel_args.clh"},
    {"common", "variants.clh"},
    {"common", "band.clh"},
    {"common", "fwd_block.clh"},
    {"common", "packed_span.clh"},
    {"portable", "flash_fwd_defaults.clh"},
};
enum { WARNING_KERNEL_HEADERS = sizeof warning_kernel_headers /
                                sizeof warning_kernel_headers[0] };

static void make_warning_kernel_dir(char *dir)
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512], target[512];
    snprintf(path, sizeof path, "%s/flash_fwd.cl", dir);
    copy_with_warning(FLASHCL_SOURCE_CL_DIR "/portable/flash_fwd.cl", path);
    for (int i = 0; i < WARNING_KERNEL_HEADERS; ++i) {
        snprintf(path, sizeof path, "%s/%s", dir, warning_kernel_headers[i][1]);
        snprintf(target, sizeof target, "%s/%s/%s", FLASHCL_SOURCE_CL_DIR,
                 warning_kernel_headers[i][0], warning_kernel_headers[i][1]);
        ck_assert_int_eq(symlink(target, path), 0);
    }
}

static void remove_warning_kernel_dir(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/flash_fwd.cl", dir);
    unlink(path);
    for (int i = 0; i < WARNING_KERNEL_HEADERS; ++i) {
        snprintf(path, sizeof path, "%s/%s", dir, warning_kernel_headers[i][1]);
        unlink(path);
    }
    rmdir(dir);
}

START_TEST(test_compile_is_quiet)
{
    char dir[] = "/tmp/flashcl-warn-XXXXXX";
    make_warning_kernel_dir(dir);
    setenv("FLASHCL_KERNEL_DIR", dir, 1);
    /* the folder holds the portable kernel only (a GPU would otherwise ask
     * it for its vendor kernel) */
    setenv("FLASHCL_PATH", "portable", 1);
    char path[] = "/tmp/flashcl-stderr-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fd, 2), 0);
    flashcl_context *ctx = NULL;
    flashcl_status created = flashcl_context_create(&ctx, NULL);
    const int dims[] = {24, 48, 80};
    flashcl_status statuses[3] = {FLASHCL_SUCCESS};
    for (int i = 0; i < 3 && created == FLASHCL_SUCCESS; ++i) {
        flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
        d.batch = d.heads_q = 1;
        d.seqlen_q = d.seqlen_k = 64;
        d.head_dim = dims[i];
        d.dtype = i == 1 ? FLASHCL_DTYPE_FP16 : FLASHCL_DTYPE_FP32;
        d.causal = i == 2;
        d.backend = FLASHCL_BACKEND_FUSED;
        statuses[i] = flashcl_prepare(ctx, &d, NULL);
    }
    flashcl_context_release(ctx);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv("FLASHCL_KERNEL_DIR");
    unsetenv("FLASHCL_PATH");
    remove_warning_kernel_dir(dir);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    char text[512] = "";
    ssize_t got = pread(fd, text, sizeof text - 1, 0);
    text[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(path);
    ck_assert_int_eq(created, FLASHCL_SUCCESS);
    for (int i = 0; i < 3; ++i)
        ck_assert_int_eq(statuses[i], FLASHCL_SUCCESS);
    ck_assert_msg(st.st_size == 0, "compiles wrote %lld bytes to stderr: %s",
                  (long long)st.st_size, text);
}
END_TEST

/* The diagonal reaches the kernels as an argument, so the alignment must
 * not split the program cache: a top-left call once compiled a second,
 * identical binary under -DFLASHCL_TOP_LEFT=1. */
START_TEST(test_alignment_shares_the_binary)
{
    flashcl_context *ctx = shared_context();
    attention_case c = window_case(1, 650);
    case_data data;
    case_prepare(&c, flashcl_context_cl_context(ctx),
                 flashcl_context_queue(ctx), &data);
    flashcl_attention_desc d = case_desc(&c, &data);
    flashcl_variant_info bottom_right, top_left;
    ck_assert_int_eq(flashcl_describe_variant(ctx, &d, &bottom_right),
                     FLASHCL_SUCCESS);
    d.causal_align = FLASHCL_CAUSAL_TOP_LEFT;
    ck_assert_int_eq(flashcl_describe_variant(ctx, &d, &top_left),
                     FLASHCL_SUCCESS);
    ck_assert_str_eq(top_left.path, bottom_right.path);
    ck_assert_str_eq(top_left.build_options, bottom_right.build_options);
    case_release(&data);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {
        {test_host_call_head_dim_v, 2}, {test_window_bounds_near_int64_max, 2},
        {test_large_magnitudes, 6}, {test_error_cleared_by_success, 0},
        {test_kernel_dir_empty_file, 0}, {test_kernel_dir_fifo, 0},
        {test_struct_size_older_caller, 0}, {test_prepare_reads_strides, 0},
        {test_compile_is_quiet, 0}, {test_forced_path, 0},
        {test_alignment_shares_the_binary, 0}};
    return run_tests("fixes", 120, NULL, NULL, tests, LENGTH(tests));
}
