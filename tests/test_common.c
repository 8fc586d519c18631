#include "test_common.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- */
/* Context and OpenCL                                                */
/* ---------------------------------------------------------------- */

static flashcl_context *the_context;

static void print_device(flashcl_context *ctx)
{
    char name[256] = "?";
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME,
                    sizeof name - 1, name, NULL);
    fprintf(stderr, "flashcl %s on device: %s\n", flashcl_version_string(),
            name);
}

flashcl_context *shared_context(void)
{
    if (the_context)
        return the_context;
    flashcl_status status = flashcl_context_create(&the_context, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS,
                  "no OpenCL device could be opened (%s): %s",
                  flashcl_status_string(status), clip(flashcl_last_create_error()));
    ck_assert_ptr_nonnull(the_context);
    print_device(the_context);
    return the_context;
}

void release_shared_context(void)
{
    flashcl_context_release(the_context);
    the_context = NULL;
}

cl_command_queue create_queue(flashcl_context *ctx)
{
    cl_int err = CL_SUCCESS;
    cl_command_queue queue =
        clCreateCommandQueue(flashcl_context_cl_context(ctx),
                             flashcl_context_device(ctx), 0, &err);
    ck_assert_msg(err == CL_SUCCESS && queue, "clCreateCommandQueue: %d",
                  (int)err);
    return queue;
}

cl_mem create_buffer(cl_context context, size_t bytes)
{
    cl_int err = CL_SUCCESS;
    cl_mem buffer = clCreateBuffer(context, CL_MEM_READ_WRITE,
                                   bytes ? bytes : 1, NULL, &err);
    ck_assert_msg(err == CL_SUCCESS && buffer,
                  "clCreateBuffer(%zu bytes) failed: %d", bytes, (int)err);
    return buffer;
}

void write_buffer(cl_command_queue queue, cl_mem buffer, const void *bytes,
                  size_t count)
{
    CL_CHECK(clEnqueueWriteBuffer(queue, buffer, CL_TRUE, 0, count, bytes, 0,
                                  NULL, NULL));
}

void read_buffer(cl_command_queue queue, cl_mem buffer, void *bytes,
                 size_t count)
{
    CL_CHECK(clEnqueueReadBuffer(queue, buffer, CL_TRUE, 0, count, bytes, 0,
                                 NULL, NULL));
}

void poison_buffer(cl_command_queue queue, cl_mem buffer, size_t bytes)
{
    unsigned char *poison = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(poison);
    memset(poison, POISON_BYTE, bytes);
    write_buffer(queue, buffer, poison, bytes);
    free(poison);
}

int test_case_skipped(const char *name, int index)
{
    const char *text = getenv(name);
    int stride = 1, offset = 0;
    if (!text || sscanf(text, "%d+%d", &stride, &offset) < 1 || stride < 2)
        return 0;
    return index % stride != offset % stride;
}

int buffer_is_poisoned(cl_command_queue queue, cl_mem buffer, size_t bytes)
{
    unsigned char *contents = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(contents);
    read_buffer(queue, buffer, contents, bytes);
    int poisoned = 1;
    for (size_t i = 0; i < bytes && poisoned; i++)
        poisoned = contents[i] == POISON_BYTE;
    free(contents);
    return poisoned;
}

const char *clip(const char *text)
{
    static char clipped[1024];
    if (!text)
        return "(null)";
    if (strlen(text) < sizeof clipped)
        return text;
    fprintf(stderr, "---- full message ----\n%s\n----\n", text);
    snprintf(clipped, sizeof clipped, "%.*s ... (cut; full text on stderr)",
             (int)sizeof clipped - 40, text);
    return clipped;
}

/* FLASHCL_EXPECT_PATH=<path>[:<dtype>,...] (CI sets it beside
 * FLASHCL_PATH): every noted forward call must run on that path, else the
 * case fails with the reason the path gave; excused are calls of storage
 * dtypes not in the list (when a list is given) and calls the path refused
 * for a reason containing a phrase of FLASHCL_EXPECT_PATH_EXCEPT
 * (';'-separated: what the path does not claim). A suite in which no noted
 * call ran on the path fails too. */
static size_t expect_noted, expect_on_path;

static const char *expected_spec(void)
{
    const char *spec = getenv("FLASHCL_EXPECT_PATH");
    return spec && *spec ? spec : NULL;
}

/* The path's own entry in a skipped list ("name: reason; name: ..."), not
 * a mention of its name in another's reason ("nv_wgmma: FLASHCL_PATH=
 * nv_mma; nv_mma: ..."): the name at the list's start or after "; ",
 * followed by ':'. */
static const char *own_entry(const char *skipped, const char *path)
{
    const size_t len = strlen(path);
    for (const char *at = strstr(skipped, path); at;
         at = strstr(at + 1, path))
        if ((at == skipped || (at >= skipped + 2 && at[-2] == ';' &&
                               at[-1] == ' ')) &&
            at[len] == ':')
            return at;
    return NULL;
}

static bool reason_excepted(const char *skipped, const char *path)
{
    const char *except = getenv("FLASHCL_EXPECT_PATH_EXCEPT");
    const char *mine = own_entry(skipped, path);
    if (!except || !*except || !mine)
        return false;
    const char *end = strchr(mine, ';');
    char phrase[256];
    for (const char *at = except; *at;) {
        size_t len = strcspn(at, ";");
        snprintf(phrase, sizeof phrase, "%.*s", (int)len, at);
        const char *hit = phrase[0] ? strstr(mine, phrase) : NULL;
        if (hit && (!end || hit < end))
            return true;
        at += len + (at[len] == ';');
    }
    return false;
}

void expect_path_check(flashcl_context *ctx, const flashcl_attention_desc *desc,
                       const char *what)
{
    const char *spec = expected_spec();
    if (!spec || desc->backend == FLASHCL_BACKEND_REFERENCE)
        return;
    /* Views without buffers: `ctx` need not own the call's buffers. */
    flashcl_attention_desc views = *desc;
    views.q.buffer = views.k.buffer = views.v.buffer = NULL;
    views.o.buffer = views.lse.buffer = NULL;
    flashcl_variant_info info;
    flashcl_status status = flashcl_describe_variant(ctx, &views, &info);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s: describe: %s", what,
                  clip(flashcl_context_last_error(ctx)));
    expect_path_info(&info, desc->dtype, what);
}

void expect_path_info(const flashcl_variant_info *described,
                      flashcl_dtype dtype, const char *what)
{
    const char *spec = expected_spec();
    if (!spec)
        return;
    char want[32];
    const char *colon = strchr(spec, ':');
    snprintf(want, sizeof want, "%.*s",
             (int)(colon ? (size_t)(colon - spec) : strlen(spec)), spec);
    const flashcl_variant_info info = *described;
    fprintf(stderr, "  [path %s] %s\n", info.path, what);
    if (strcmp(info.path, want) == 0) {
        ++expect_noted;
        ++expect_on_path;
        return;
    }
    if ((colon && !strstr(colon + 1, oracle_dtype_name(dtype))) ||
        reason_excepted(info.skipped, want))
        return;
    ++expect_noted;
    ck_assert_msg(0, "%s ran on path %s, not FLASHCL_EXPECT_PATH=%s (skipped: %s)",
                  what, info.path, spec, clip(info.skipped));
}

static int expect_path_report(void)
{
    const char *spec = expected_spec();
    if (!spec)
        return 0;
    fprintf(stderr, "FLASHCL_EXPECT_PATH=%s: %zu of %zu noted forward calls "
                    "ran on it\n", spec, expect_on_path, expect_noted);
    return expect_on_path == 0 || expect_on_path != expect_noted;
}

int run_suite(Suite *suite)
{
    SRunner *runner = srunner_create(suite);
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    release_shared_context();
    failed += expect_path_report();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static TCase *tcase_from_group(const test_group *group)
{
    TCase *tc = tcase_create(group->name);
    if (group->timeout)
        tcase_set_timeout(tc, group->timeout);
    if (group->setup || group->teardown)
        tcase_add_checked_fixture(tc, group->setup, group->teardown);
    for (size_t i = 0; i < group->count; ++i) {
        const test_entry *t = &group->tests[i];
        if (t->loops)
            tcase_add_loop_test(tc, t->test, 0, t->loops);
        else
            tcase_add_test(tc, t->test);
    }
    return tc;
}

Suite *suite_from_groups(const char *name, const test_group *groups,
                         size_t count)
{
    Suite *suite = suite_create(name);
    for (size_t i = 0; i < count; ++i)
        suite_add_tcase(suite, tcase_from_group(&groups[i]));
    return suite;
}

int run_groups(const char *name, const test_group *groups, size_t count)
{
    return run_suite(suite_from_groups(name, groups, count));
}

int run_tests(const char *name, int timeout, SFun setup, SFun teardown,
              const test_entry *tests, size_t count)
{
    const test_group group = {name, timeout, setup, teardown, tests, count};
    return run_groups(name, &group, 1);
}

/* ---------------------------------------------------------------- */
/* Random numbers                                                    */
/* ---------------------------------------------------------------- */

rng rng_seeded(uint64_t seed)
{
    rng r = {seed ^ 0x9e3779b97f4a7c15ull};
    return r;
}

uint64_t rng_next(rng *r) /* splitmix64 */
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform_open(rng *r) /* in (0, 1) */
{
    return ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

double rng_normal(rng *r)
{
    double u1 = rng_uniform_open(r), u2 = rng_uniform_open(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---------------------------------------------------------------- */
/* Strided tensors                                                   */
/* ---------------------------------------------------------------- */

size_t tensor_bytes(const test_tensor *t)
{
    return t->total_elems * ref_dtype_size(t->dtype);
}

size_t tensor_index(const test_tensor *t, size_t b, size_t h, size_t s,
                    size_t d)
{
    return t->offset_elems + b * t->stride[0] + h * t->stride[1] +
           s * t->stride[2] + d * t->stride[3];
}

/* Index one past the last element of the view (offset included). */
static size_t view_end(const test_tensor *t)
{
    size_t sizes[4] = {t->shape.batch, t->shape.heads, t->shape.seq,
                       t->shape.dim};
    size_t last = t->offset_elems;
    for (int axis = 0; axis < 4; axis++) {
        if (sizes[axis] == 0)
            return t->offset_elems;
        last += (sizes[axis] - 1) * t->stride[axis];
    }
    return last + 1;
}

static void packed_strides(tensor_shape s, flashcl_layout layout,
                           size_t stride[4])
{
    stride[3] = 1;
    if (layout == FLASHCL_LAYOUT_BHND) {
        stride[2] = s.dim;
        stride[1] = s.seq * s.dim;
        stride[0] = s.heads * s.seq * s.dim;
    } else {
        stride[1] = s.dim;
        stride[2] = s.heads * s.dim;
        stride[0] = s.seq * s.heads * s.dim;
    }
}

/* Layout order with gaps between rows, heads and batches. */
static void padded_strides(tensor_shape s, flashcl_layout layout,
                           size_t dim_stride, size_t stride[4])
{
    size_t row = s.dim * dim_stride + 3;
    stride[3] = dim_stride;
    if (layout == FLASHCL_LAYOUT_BHND) {
        stride[2] = row;
        stride[1] = s.seq * row + 5;
        stride[0] = s.heads * stride[1] + 7;
    } else {
        stride[1] = row;
        stride[2] = s.heads * row + 5;
        stride[0] = s.seq * stride[2] + 7;
    }
}

static void set_view(test_tensor *t, view_kind kind)
{
    memset(&t->view, 0, sizeof t->view);
    if (kind == VIEW_PACKED)
        return; /* zero strides, zero offset */
    t->view.offset = t->offset_elems * ref_dtype_size(t->dtype);
    t->view.stride_batch = t->stride[0];
    t->view.stride_head = t->stride[1];
    t->view.stride_seq = t->stride[2];
    t->view.stride_dim = t->stride[3];
}

void tensor_layout(test_tensor *t, tensor_shape shape, ref_dtype dtype,
                   flashcl_layout layout, view_kind kind)
{
    memset(t, 0, sizeof *t);
    t->shape = shape;
    t->dtype = dtype;
    if (kind == VIEW_PACKED) {
        packed_strides(shape, layout, t->stride);
    } else {
        padded_strides(shape, layout, kind == VIEW_DIM_STRIDED ? 2 : 1,
                       t->stride);
        t->offset_elems = 11;
    }
    t->total_elems = view_end(t) + (kind == VIEW_PACKED ? 0 : 13);
    set_view(t, kind);
}

void lse_layout(test_tensor *t, size_t batch, size_t heads_q,
                size_t seqlen_q, view_kind kind)
{
    memset(t, 0, sizeof *t);
    t->shape = (tensor_shape){batch, heads_q, seqlen_q, 1};
    t->dtype = REF_FP32;
    if (kind == VIEW_PACKED) {
        t->stride[2] = 1;
        t->stride[1] = seqlen_q;
        t->stride[0] = heads_q * seqlen_q;
    } else {
        t->stride[2] = kind == VIEW_DIM_STRIDED ? 2 : 1;
        t->stride[1] = seqlen_q * t->stride[2] + 3;
        t->stride[0] = heads_q * t->stride[1] + 5;
        t->offset_elems = 7;
    }
    t->total_elems = view_end(t) + (kind == VIEW_PACKED ? 0 : 13);
    set_view(t, kind);
    t->view.stride_dim = 0; /* unused for LSE */
}

static void allocate_host(test_tensor *t)
{
    t->host = malloc(tensor_bytes(t) ? tensor_bytes(t) : 1);
    ck_assert_ptr_nonnull(t->host);
    memset(t->host, POISON_BYTE, tensor_bytes(t));
}

static void upload(test_tensor *t, cl_context context, cl_command_queue queue)
{
    t->view.buffer = create_buffer(context, tensor_bytes(t));
    write_buffer(queue, t->view.buffer, t->host, tensor_bytes(t));
}

void tensor_fill_random_host(test_tensor *t, rng *r, double amplitude)
{
    allocate_host(t); /* padding stays 0xFF..: NaN, so reading it shows */
    tensor_shape s = t->shape;
    for (size_t b = 0; b < s.batch; b++)
        for (size_t h = 0; h < s.heads; h++)
            for (size_t i = 0; i < s.seq; i++)
                for (size_t d = 0; d < s.dim; d++)
                    ref_store(t->host, tensor_index(t, b, h, i, d), t->dtype,
                              amplitude * rng_normal(r));
}

void tensor_fill_random(test_tensor *t, rng *r, double amplitude,
                        cl_context context, cl_command_queue queue)
{
    tensor_fill_random_host(t, r, amplitude);
    upload(t, context, queue);
}

void tensor_make_poisoned(test_tensor *t, cl_context context,
                          cl_command_queue queue)
{
    allocate_host(t);
    upload(t, context, queue);
}

void tensor_download(test_tensor *t, cl_command_queue queue)
{
    read_buffer(queue, t->view.buffer, t->host, tensor_bytes(t));
}

void tensor_release(test_tensor *t)
{
    if (t->view.buffer)
        clReleaseMemObject(t->view.buffer);
    free(t->host);
    t->view.buffer = NULL;
    t->host = NULL;
}

ref_view tensor_ref_view(const test_tensor *t)
{
    ref_view v;
    v.base = t->host;
    v.offset = t->offset_elems * ref_dtype_size(t->dtype);
    memcpy(v.stride, t->stride, sizeof v.stride);
    return v;
}

static unsigned char *view_mask(const test_tensor *t)
{
    unsigned char *mask = calloc(t->total_elems ? t->total_elems : 1, 1);
    ck_assert_ptr_nonnull(mask);
    tensor_shape s = t->shape;
    for (size_t b = 0; b < s.batch; b++)
        for (size_t h = 0; h < s.heads; h++)
            for (size_t i = 0; i < s.seq; i++)
                for (size_t d = 0; d < s.dim; d++)
                    mask[tensor_index(t, b, h, i, d)] = 1;
    return mask;
}

size_t tensor_count_clobbered(const test_tensor *t, size_t *first)
{
    unsigned char *mask = view_mask(t);
    size_t size = ref_dtype_size(t->dtype), clobbered = 0;
    for (size_t e = 0; e < t->total_elems; e++) {
        if (mask[e])
            continue;
        for (size_t byte = 0; byte < size; byte++)
            if (t->host[e * size + byte] != POISON_BYTE) {
                if (clobbered++ == 0 && first)
                    *first = e;
                break;
            }
    }
    free(mask);
    return clobbered;
}

/* ---------------------------------------------------------------- */
/* Comparison with the reference                                     */
/* ---------------------------------------------------------------- */

/*
 * Yardstick: an unfused computation in the same storage dtype, i.e. S = QK^T
 * and P V accumulated in fp32 from the (already quantized) inputs, then O
 * rounded once to the storage dtype. Its error per element is the output
 * rounding, at most u * |O| with u = 2^-24 (fp32), 2^-11 (fp16), 2^-8
 * (bf16) under round-to-nearest-even, plus the fp32 accumulation error,
 * which is absolute, of the order of 1e-6 * max|O| here (sums of up to 333
 * keys and dot products of up to 256 terms; bounded by n * 2^-24 ~ 2e-5).
 *
 * Measured on PoCL (CPU) over the design of test_forward (see its log):
 *   fp32: max|err| / max|ref| <= 1.1e-6 (2.6e-6 with scale 1, logits of
 *         standard deviation 8).
 *   fp16: max|err| / max|ref| <= 3.8e-4 = 0.77 u; per element the error is
 *         about u * |ref| (half the bound below is used), i.e. rounding.
 *   bf16: max|err| / max|ref| <= 3.3e-3 = 0.85 u; per element likewise.
 *   LSE, all dtypes: |err| / max(1, |LSE|) <= 4.7e-7.
 * Tolerances, a few times above those and no looser:
 *   floor_rel = 1e-5 for every dtype: about 4x the worst fp32 accumulation
 *     error measured, still below n * 2^-24.
 *   fp32: elem_rel 0 (its rounding is below the floor), max_rel 1e-5.
 *   fp16/bf16: elem_rel = 2u (one ulp: twice what correct rounding can
 *     cost), max_rel = 1.5u (rounding gives at most u * max|ref|).
 *   LSE is fp32 for every dtype and is computed from the quantized inputs,
 *     so only fp32 error enters: lse_rel 2e-6 (about 4x measured).
 */
tolerance tolerance_for(ref_dtype dtype)
{
    const double floor_rel = 1e-5, lse_rel = 2e-6;
    double u = dtype == REF_FP16 ? ldexp(1.0, -11)
             : dtype == REF_BF16 ? ldexp(1.0, -8)
                                 : 0.0;
    tolerance tol = {2.0 * u, floor_rel, dtype == REF_FP32 ? floor_rel : 1.5 * u,
                     lse_rel};
    return tol;
}

static double device_value(const test_tensor *t, size_t b, size_t h,
                           size_t i, size_t d)
{
    return ref_load(t->host, tensor_index(t, b, h, i, d), t->dtype);
}

static double max_abs(const double *values, size_t count)
{
    double largest = 0.0;
    for (size_t i = 0; i < count; i++)
        if (fabs(values[i]) > largest)
            largest = fabs(values[i]);
    return largest;
}

static void fail_once(compare_result *res, const char *what, size_t b,
                      size_t h, size_t i, size_t d, double got, double want,
                      double bound)
{
    if (!res->ok)
        return;
    res->ok = 0;
    snprintf(res->detail, sizeof res->detail,
             "%s[b=%zu h=%zu i=%zu d=%zu] = %.9g, reference %.9g, "
             "|err| %.3g > bound %.3g",
             what, b, h, i, d, got, want, fabs(got - want), bound);
}

static void compare_o(const test_tensor *o, const double *ref_o,
                      tolerance tol, compare_result *res)
{
    tensor_shape s = o->shape;
    res->max_ref = max_abs(ref_o, s.batch * s.heads * s.seq * s.dim);
    const double *want = ref_o;
    for (size_t b = 0; b < s.batch; b++)
        for (size_t h = 0; h < s.heads; h++)
            for (size_t i = 0; i < s.seq; i++)
                for (size_t d = 0; d < s.dim; d++, want++) {
                    double got = device_value(o, b, h, i, d);
                    double err = fabs(got - *want);
                    double bound = tol.elem_rel * fabs(*want) +
                                   tol.floor_rel * res->max_ref;
                    if (!(err <= bound)) /* catches NaN too */
                        fail_once(res, "O", b, h, i, d, got, *want, bound);
                    if (bound > 0 && err / bound > res->worst_bound_use)
                        res->worst_bound_use = err / bound;
                    if (!(err <= res->max_err))
                        res->max_err = isnan(err) ? INFINITY : err;
                }
    if (res->ok && res->max_err > tol.max_rel * res->max_ref) {
        res->ok = 0;
        snprintf(res->detail, sizeof res->detail,
                 "max |err| %.3g > %.3g * max |ref| %.3g", res->max_err,
                 tol.max_rel, res->max_ref);
    }
}

static void compare_lse(const test_tensor *lse, const double *ref_lse,
                        tolerance tol, compare_result *res)
{
    tensor_shape s = lse->shape;
    const double *want = ref_lse;
    for (size_t b = 0; b < s.batch; b++)
        for (size_t h = 0; h < s.heads; h++)
            for (size_t i = 0; i < s.seq; i++, want++) {
                double got = device_value(lse, b, h, i, 0);
                if (isinf(*want)) {
                    if (!(isinf(got) && got < 0))
                        fail_once(res, "LSE", b, h, i, 0, got, *want, 0);
                    continue;
                }
                double err = fabs(got - *want) / fmax(1.0, fabs(*want));
                if (!(err <= tol.lse_rel))
                    fail_once(res, "LSE", b, h, i, 0, got, *want,
                              tol.lse_rel * fmax(1.0, fabs(*want)));
                if (!(err <= res->lse_max_err))
                    res->lse_max_err = isnan(err) ? INFINITY : err;
            }
}

static void check_untouched(const test_tensor *t, const char *what,
                            compare_result *res)
{
    size_t first = 0;
    size_t clobbered = tensor_count_clobbered(t, &first);
    if (clobbered && res->ok) {
        res->ok = 0;
        snprintf(res->detail, sizeof res->detail,
                 "%zu elements of %s outside its view were written "
                 "(first at element %zu)",
                 clobbered, what, first);
    }
}

compare_result compare_output(const test_tensor *o, const double *ref_o,
                              const test_tensor *lse, const double *ref_lse,
                              tolerance tol)
{
    compare_result res;
    memset(&res, 0, sizeof res);
    res.ok = 1;
    compare_o(o, ref_o, tol, &res);
    check_untouched(o, "O", &res);
    if (lse) {
        compare_lse(lse, ref_lse, tol, &res);
        check_untouched(lse, "LSE", &res);
    }
    return res;
}

const char *ref_dtype_name(ref_dtype dtype)
{
    switch (dtype) {
    case REF_FP32: return "fp32";
    case REF_FP16: return "fp16";
    case REF_BF16: return "bf16";
    }
    return "?";
}

flashcl_dtype to_flashcl_dtype(ref_dtype dtype)
{
    switch (dtype) {
    case REF_FP16: return FLASHCL_DTYPE_FP16;
    case REF_BF16: return FLASHCL_DTYPE_BF16;
    default: return FLASHCL_DTYPE_FP32;
    }
}

/* ---------------------------------------------------------------- */
/* One attention problem                                             */
/* ---------------------------------------------------------------- */

static const char *view_name(view_kind kind)
{
    switch (kind) {
    case VIEW_PACKED: return "packed";
    case VIEW_PADDED: return "padded";
    case VIEW_DIM_STRIDED: return "dim-strided";
    }
    return "?";
}

void case_describe(const attention_case *c, char *text, size_t size)
{
    snprintf(text, size,
             "%s B%zu Hq%zu/Hkv%zu Nq%zu Nk%zu D%zu %s %s %s scale=%g%s "
             "seed=%llu",
             ref_dtype_name(c->dtype), c->batch, c->heads_q, c->heads_kv,
             c->seqlen_q, c->seqlen_k, c->head_dim,
             c->causal ? "causal" : "full",
             c->layout == FLASHCL_LAYOUT_BHND ? "BHND" : "BNHD",
             view_name(c->view), (double)c->scale,
             c->with_lse ? " +lse" : "", (unsigned long long)c->seed);
}

/* The float64 oracle of the case's quantized inputs, read through the
 * strides the test laid them out with (not the descriptor's zero-stride
 * shorthand, which is what the library is being tested on). */
void case_reference(const attention_case *c, double scale,
                    const test_tensor *q, const test_tensor *k,
                    const test_tensor *v, double **ref_o, double **ref_lse)
{
    size_t rows = c->batch * c->heads_q * c->seqlen_q;
    *ref_o = malloc((rows * c->head_dim + 1) * sizeof(double));
    *ref_lse = malloc((rows + 1) * sizeof(double));
    ck_assert_ptr_nonnull(*ref_o);
    ck_assert_ptr_nonnull(*ref_lse);
    ref_problem p = {
        .batch = c->batch, .heads_q = c->heads_q, .heads_kv = c->heads_kv,
        .seqlen_q = c->seqlen_q, .seqlen_k = c->seqlen_k,
        .head_dim = c->head_dim, .dtype = c->dtype, .scale = scale,
        .causal = c->causal, .q = tensor_ref_view(q),
        .k = tensor_ref_view(k), .v = tensor_ref_view(v)};
    ck_assert_int_eq(ref_attention(&p, *ref_o, *ref_lse), 0);
}

static void compute_reference(const attention_case *c, case_data *data)
{
    flashcl_attention_desc desc = case_desc(c, data);
    case_reference(c, oracle_desc_scale(&desc), &data->q, &data->k, &data->v,
                   &data->ref_o, &data->ref_lse);
}

attention_case small_case(ref_dtype dtype, size_t seqlen_q, size_t seqlen_k,
                          int causal, uint64_t seed)
{
    attention_case c;
    memset(&c, 0, sizeof c);
    c.batch = 1;
    c.heads_q = 2;
    c.heads_kv = 1;
    c.seqlen_q = seqlen_q;
    c.seqlen_k = seqlen_k;
    c.head_dim = 32;
    c.dtype = dtype;
    c.causal = causal;
    c.layout = FLASHCL_LAYOUT_BNHD;
    c.with_lse = 1;
    c.seed = seed;
    return c;
}

void case_prepare(const attention_case *c, cl_context context,
                  cl_command_queue queue, case_data *data)
{
    memset(data, 0, sizeof *data);
    rng r = rng_seeded(c->seed);
    tensor_shape q_shape = {c->batch, c->heads_q, c->seqlen_q, c->head_dim};
    tensor_shape kv_shape = {c->batch, c->heads_kv, c->seqlen_k, c->head_dim};
    tensor_layout(&data->q, q_shape, c->dtype, c->layout, c->view);
    tensor_layout(&data->k, kv_shape, c->dtype, c->layout, c->view);
    tensor_layout(&data->v, kv_shape, c->dtype, c->layout, c->view);
    tensor_layout(&data->o, q_shape, c->dtype, c->layout, c->view);
    tensor_fill_random(&data->q, &r, 1.0, context, queue);
    tensor_fill_random(&data->k, &r, 1.0, context, queue);
    tensor_fill_random(&data->v, &r, 1.0, context, queue);
    tensor_make_poisoned(&data->o, context, queue);
    if (c->with_lse) {
        lse_layout(&data->lse, c->batch, c->heads_q, c->seqlen_q, c->view);
        tensor_make_poisoned(&data->lse, context, queue);
    }
    compute_reference(c, data);
}

flashcl_attention_desc case_shape_desc(const attention_case *c)
{
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc);
    desc.batch = (int64_t)c->batch;
    desc.heads_q = (int64_t)c->heads_q;
    desc.heads_kv = (int64_t)c->heads_kv;
    desc.seqlen_q = (int64_t)c->seqlen_q;
    desc.seqlen_k = (int64_t)c->seqlen_k;
    desc.head_dim = (int64_t)c->head_dim;
    desc.dtype = to_flashcl_dtype(c->dtype);
    return desc;
}

flashcl_attention_desc case_desc(const attention_case *c,
                                 const case_data *data)
{
    flashcl_attention_desc desc = case_shape_desc(c);
    desc.layout = c->layout;
    desc.scale = c->scale;
    desc.explicit_scale = c->explicit_scale;
    desc.allow_tf32 = c->allow_tf32;
    desc.causal = c->causal;
    desc.q = data->q.view;
    desc.k = data->k.view;
    desc.v = data->v.view;
    desc.o = data->o.view;
    if (c->with_lse)
        desc.lse = data->lse.view;
    return desc;
}

/*
 * The NVIDIA (mma.sync and wgmma) and AMD tensor-core kernels round P to the storage dtype before P.V, as
 * FlashAttention-2 does and as an unfused fp16/bf16 computation that stores
 * P does: that adds up to u * sum_j p_j |v_j| per element. Measured on the
 * H200 (docs/nvidia-path.md): misses of 1.0-5.5x the bound above, all
 * within u * max|ref| more. Only granted when that kernel is the one the
 * library picks for the call; PoCL keeps the strict bound.
 */
static bool rounds_p_before_pv(const char *kernel_file)
{
    static const char *const kernels[] = {
        "flash_fwd_mma.cl", "flash_fwd_wgmma.cl", "flash_fwd_amd.cl"};
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++)
        if (strcmp(kernel_file, kernels[k]) == 0)
            return true;
    return false;
}

tolerance tolerance_for_desc(ref_dtype dtype,
                             const flashcl_attention_desc *desc)
{
    tolerance tol = tolerance_for(dtype);
    flashcl_variant_info info;
    /* Asked of the shared context, whose cl_context may not own the call's
     * buffers: describe the views without them. */
    flashcl_attention_desc views = *desc;
    views.q.buffer = views.k.buffer = views.v.buffer = NULL;
    views.o.buffer = views.lse.buffer = NULL;
    if ((dtype == REF_FP16 || dtype == REF_BF16 || dtype == REF_FP32) &&
        flashcl_describe_variant(shared_context(), &views, &info) ==
            FLASHCL_SUCCESS &&
        rounds_p_before_pv(info.kernel_file)) {
        /* fp32 without allow_tf32 runs there split into TF32 high and
         * low parts (3xTF32): fp32's own tolerance */
        if (dtype == REF_FP32 && !desc->allow_tf32)
            return tol;
        if (dtype == REF_FP32) {
            /* TF32 (allow_tf32, NVIDIA only): Q, K, V and P carry 10
             * mantissa bits, so fp16's tolerance plus the rounding of the
             * inputs, which the float64 reference does not see (2^-11
             * each, on scores of order 1 and on V). */
            tolerance tf = tolerance_for(REF_FP16);
            const double u = ldexp(1.0, -9);
            tf.floor_rel += u;
            tf.max_rel += u;
            tf.lse_rel = fmax(tf.lse_rel, 2e-3);
            return tf;
        }
        double u = dtype == REF_FP16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
        tol.floor_rel += u;
        tol.max_rel += u;
    }
    return tol;
}

tolerance tolerance_for_call(const attention_case *c, const case_data *data)
{
    flashcl_attention_desc desc = case_desc(c, data);
    return tolerance_for_desc(c->dtype, &desc);
}

compare_result case_check(const attention_case *c, case_data *data,
                          cl_command_queue queue)
{
    tensor_download(&data->o, queue);
    if (c->with_lse)
        tensor_download(&data->lse, queue);
    return compare_output(&data->o, data->ref_o,
                          c->with_lse ? &data->lse : NULL, data->ref_lse,
                          tolerance_for_call(c, data));
}

void case_release(case_data *data)
{
    tensor_release(&data->q);
    tensor_release(&data->k);
    tensor_release(&data->v);
    tensor_release(&data->o);
    tensor_release(&data->lse);
    free(data->ref_o);
    free(data->ref_lse);
    data->ref_o = data->ref_lse = NULL;
}

compare_result run_case_keep(flashcl_context *ctx, cl_command_queue queue,
                             const attention_case *c, case_data *data)
{
    cl_command_queue q = queue ? queue : flashcl_context_queue(ctx);
    char text[256];
    case_describe(c, text, sizeof text);

    case_prepare(c, flashcl_context_cl_context(ctx), q, data);
    flashcl_attention_desc desc = case_desc(c, data);
    flashcl_status status = flashcl_attention_forward(ctx, queue, &desc, 0,
                                                      NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s: status %s: %s", text,
                  flashcl_status_string(status),
                  clip(flashcl_context_last_error(ctx)));
    CL_CHECK(clFinish(q));
    expect_path_check(ctx, &desc, text);
    compare_result res = case_check(c, data, q);
    ck_assert_msg(res.ok, "%s: %s (max |err| %.3g, max |ref| %.3g)", text,
                  res.detail, res.max_err, res.max_ref);
    return res;
}

compare_result run_case(const attention_case *c)
{
    case_data data;
    compare_result res = run_case_keep(shared_context(), NULL, c, &data);
    case_release(&data);
    return res;
}
