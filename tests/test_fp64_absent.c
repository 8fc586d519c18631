/* fp64 on a device without cl_khr_fp64: every entry point that takes a
 * dtype refuses it with FLASHCL_ERROR_UNSUPPORTED and a message naming
 * fp64 and the extension, returns no event and writes nothing. The test
 * devices (PoCL, Intel's CPU runtime, the H200) all have fp64, so the
 * test clears the probed flag in its own context (the library's sources
 * are compiled in to reach it), and then sets it back and runs the same
 * calls: where the device does have fp64 they must succeed and write O,
 * so a refusal that came from anything but the flag fails the test. */
#include "core/core.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 1, HEADS = 2, SEQ = 5, DIM = 8, PARTS = 2 };
#define ELEMS ((size_t)BATCH * HEADS * SEQ * DIM)
#define ROWS ((size_t)BATCH * HEADS * SEQ)
#define POISON 0xA5u

static flashcl_context *ctx;
static bool device_fp64; /* what the probe found */

static cl_mem make(size_t bytes, const void *host)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(
        flashcl_context_cl_context(ctx),
        CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
        (void *)host, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

static void poison(cl_mem m, size_t bytes)
{
    unsigned char *fill = malloc(bytes);
    ck_assert_ptr_nonnull(fill);
    memset(fill, (int)POISON, bytes);
    ck_assert(clEnqueueWriteBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0,
                                   bytes, fill, 0, NULL, NULL) == CL_SUCCESS);
    free(fill);
}

/* Bytes of m that differ from the poison. */
static size_t written(cl_mem m, size_t bytes)
{
    unsigned char *back = malloc(bytes);
    ck_assert_ptr_nonnull(back);
    ck_assert(clFinish(flashcl_context_queue(ctx)) == CL_SUCCESS);
    ck_assert(clEnqueueReadBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0,
                                  bytes, back, 0, NULL, NULL) == CL_SUCCESS);
    size_t changed = 0;
    for (size_t i = 0; i < bytes; ++i)
        changed += back[i] != POISON;
    free(back);
    return changed;
}

static double *random_doubles(size_t count, unsigned seed)
{
    double *x = malloc(count * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < count; ++i) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (double)(seed >> 8) / (double)(1u << 24) - 0.5;
    }
    return x;
}

static void expect_refused(flashcl_status got, const char *call)
{
    const char *message = flashcl_context_last_error(ctx);
    ck_assert_msg(got == FLASHCL_ERROR_UNSUPPORTED, "%s: got %s (%s)", call,
                  flashcl_status_string(got), message);
    ck_assert_msg(strstr(message, "fp64") && strstr(message, "cl_khr_fp64"),
                  "%s: message \"%s\" names neither fp64 nor cl_khr_fp64",
                  call, message);
}

static void expect_ran(flashcl_status got, const char *call)
{
    ck_assert_msg(got == FLASHCL_SUCCESS, "%s with fp64 back: %s (%s)", call,
                  flashcl_status_string(got), flashcl_context_last_error(ctx));
}

/* One enqueued call's outcome: with the flag cleared, refused with no
 * event and nothing written to out (and lse, if not NULL); with it set,
 * run and written. */
static void expect_outcome(bool has, const char *call, flashcl_status got,
                           cl_event event, cl_mem out, size_t out_bytes,
                           cl_mem lse, size_t lse_bytes)
{
    if (!has) {
        expect_refused(got, call);
        ck_assert_msg(event == NULL, "%s: an event came back from a refusal",
                      call);
        ck_assert_msg(written(out, out_bytes) == 0, "%s: O was written", call);
        ck_assert_msg(!lse || written(lse, lse_bytes) == 0,
                      "%s: LSE was written", call);
        return;
    }
    expect_ran(got, call);
    ck_assert(clWaitForEvents(1, &event) == CL_SUCCESS);
    clReleaseEvent(event);
    ck_assert_msg(written(out, out_bytes) > 0, "%s: O was not written", call);
}

static flashcl_attention_desc fp64_desc(void)
{
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = BATCH;
    d.heads_q = d.heads_kv = HEADS;
    d.seqlen_q = d.seqlen_k = SEQ;
    d.head_dim = DIM;
    d.dtype = FLASHCL_DTYPE_FP64;
    return d;
}

/* The forward call, on device buffers: refused with the flag cleared. */
START_TEST(forward_refused)
{
    double *x = random_doubles(3 * ELEMS, 7);
    cl_mem q = make(ELEMS * 8, x), k = make(ELEMS * 8, x + ELEMS),
           v = make(ELEMS * 8, x + 2 * ELEMS), o = make(ELEMS * 8, NULL),
           lse = make(ROWS * 4, NULL);
    flashcl_attention_desc d = fp64_desc();
    d.q.buffer = q;
    d.k.buffer = k;
    d.v.buffer = v;
    d.o.buffer = o;
    d.lse.buffer = lse;
    for (int pass = 0; pass < 2; ++pass) {
        const bool has = pass == 1;
        if (has && !device_fp64)
            break;
        ctx->caps.has_fp64 = has;
        poison(o, ELEMS * 8);
        poison(lse, ROWS * 4);
        cl_event event = NULL;
        const flashcl_status got =
            flashcl_attention_forward(ctx, NULL, &d, 0, NULL, &event);
        expect_outcome(has, "flashcl_attention_forward", got, event, o,
                       ELEMS * 8, lse, ROWS * 4);
    }
    ctx->caps.has_fp64 = device_fp64;
    cl_mem owned[] = {q, k, v, o, lse};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; ++i)
        clReleaseMemObject(owned[i]);
    free(x);
}
END_TEST

/* The host-memory call: refused, and o and lse left as they were. */
START_TEST(forward_host_refused)
{
    double *x = random_doubles(3 * ELEMS, 11);
    double o[ELEMS];
    float lse[ROWS];
    const flashcl_attention_desc d = fp64_desc();
    for (int pass = 0; pass < 2; ++pass) {
        const bool has = pass == 1;
        if (has && !device_fp64)
            break;
        ctx->caps.has_fp64 = has;
        memset(o, (int)POISON, sizeof o);
        memset(lse, (int)POISON, sizeof lse);
        const flashcl_status got = flashcl_attention_forward_host(
            ctx, &d, x, x + ELEMS, x + 2 * ELEMS, o, lse);
        size_t changed = 0;
        for (size_t i = 0; i < sizeof o; ++i)
            changed += ((unsigned char *)o)[i] != POISON;
        for (size_t i = 0; i < sizeof lse; ++i)
            changed += ((unsigned char *)lse)[i] != POISON;
        if (!has) {
            expect_refused(got, "flashcl_attention_forward_host");
            ck_assert_msg(changed == 0, "%zu output bytes were written",
                          changed);
        } else {
            expect_ran(got, "flashcl_attention_forward_host");
            ck_assert_msg(changed > 0 && isfinite(o[0]),
                          "the outputs were not written");
        }
    }
    ctx->caps.has_fp64 = device_fp64;
    free(x);
}
END_TEST

/* The public merge, whose output dtype may be fp64. */
START_TEST(combine_refused)
{
    float *parts = malloc(PARTS * ELEMS * sizeof *parts);
    float *part_lse = malloc(PARTS * ROWS * sizeof *part_lse);
    ck_assert(parts && part_lse);
    for (size_t i = 0; i < PARTS * ELEMS; ++i)
        parts[i] = (float)(i % 13) * 0.125f;
    for (size_t i = 0; i < PARTS * ROWS; ++i)
        part_lse[i] = (float)(i % 5) * 0.5f;
    cl_mem op = make(PARTS * ELEMS * 4, parts),
           lp = make(PARTS * ROWS * 4, part_lse), o = make(ELEMS * 8, NULL);
    flashcl_combine_desc d = FLASHCL_COMBINE_DESC_INIT;
    d.num_partials = PARTS;
    d.batch = BATCH;
    d.heads = HEADS;
    d.seqlen_q = SEQ;
    d.head_dim_v = DIM;
    d.dtype = FLASHCL_DTYPE_FP64;
    d.o_partial.buffer = op;
    d.lse_partial.buffer = lp;
    d.o.buffer = o;
    for (int pass = 0; pass < 2; ++pass) {
        const bool has = pass == 1;
        if (has && !device_fp64)
            break;
        ctx->caps.has_fp64 = has;
        poison(o, ELEMS * 8);
        cl_event event = NULL;
        const flashcl_status got =
            flashcl_combine_partials(ctx, NULL, &d, 0, NULL, &event);
        expect_outcome(has, "flashcl_combine_partials", got, event, o,
                       ELEMS * 8, NULL, 0);
    }
    ctx->caps.has_fp64 = device_fp64;
    clReleaseMemObject(op);
    clReleaseMemObject(lp);
    clReleaseMemObject(o);
    free(parts);
    free(part_lse);
}
END_TEST

/* What the device-info query reports follows the flag. */
START_TEST(device_info_follows)
{
    flashcl_device_info info;
    ctx->caps.has_fp64 = false;
    ck_assert(flashcl_context_device_info(ctx, &info) == FLASHCL_SUCCESS);
    ck_assert_int_eq(info.has_fp64, 0);
    ctx->caps.has_fp64 = device_fp64;
    ck_assert(flashcl_context_device_info(ctx, &info) == FLASHCL_SUCCESS);
    ck_assert_int_eq(info.has_fp64, device_fp64 ? 1 : 0);
}
END_TEST

int main(void)
{
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "test_fp64_absent: no OpenCL device: %s\n",
                flashcl_last_create_error());
        return 1;
    }
    device_fp64 = ctx->caps.has_fp64;
    printf("test_fp64_absent: %s has cl_khr_fp64: %s\n", ctx->caps.name,
           device_fp64 ? "yes (the calls run again with it)" : "no");
    Suite *suite = suite_create("fp64_absent");
    TCase *tc = tcase_create("fp64_absent");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, forward_refused);
    tcase_add_test(tc, forward_host_refused);
    tcase_add_test(tc, combine_refused);
    tcase_add_test(tc, device_info_follows);
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    flashcl_context_release(ctx);
    return failed ? 1 : 0;
}
