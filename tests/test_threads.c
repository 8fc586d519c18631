/*
 * The thread-safety promises of include/flashcl.h (the comment at its top
 * and on flashcl_context_last_error), checked with threads sharing one
 * context:
 *
 *   diagnostics   per-thread last error: each of 8 threads makes failing
 *                 calls whose message only it can produce (its own heads_q
 *                 and heads_kv), interleaved with successful calls; after a
 *                 failure it reads exactly its own message, which stays
 *                 intact while the others go on; after a success it reads
 *                 ""; a thread that made no call reads "" throughout; one
 *                 more thread makes kernel builds fail (a broken kernel in
 *                 FLASHCL_KERNEL_DIR, a variant no other thread uses) and
 *                 reads its own build log.
 *   compile       a kernel compile does not hold up launches of kernels
 *                 already compiled: thread B runs its cached variant while
 *                 thread A compiles a new one, and B's runs all finish
 *                 before A's compile returns (an ordering check, not a
 *                 timing threshold).
 *   same variant  two threads asking for the same new variant at once both
 *                 succeed and it is compiled once (flashcl_prepare's
 *                 compile_ms is > 0 for exactly one of them); the same for
 *                 two forward calls, results checked.
 *
 * Each test makes its own context, so its program cache starts empty, and
 * every variant it compiles has a head dim (padded) or dtype no earlier
 * test used; ctest runs it with POCL_KERNEL_CACHE=0 so that PoCL compiles
 * for real too. Outputs are poisoned before every kernel run and the
 * successful runs are checked against the float64 reference.
 *
 * Check assertions cannot unwind a thread other than the main one: the
 * threads record the first failure they see and the main thread asserts.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp, nanosleep, barriers */
#include "test_common.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- */
/* Helpers                                                           */
/* ---------------------------------------------------------------- */

/* A failure seen by a thread: the first one is kept, with a count. */
typedef struct failure {
    int count;
    char text[768];
} failure;

static void record(failure *f, const char *fmt, ...)
{
    if (f->count++ > 0)
        return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(f->text, sizeof f->text, fmt, args);
    va_end(args);
}

static void assert_no_failure(const failure *f, const char *who)
{
    ck_assert_msg(f->count == 0, "%s: %d failure(s), first: %s", who,
                  f->count, f->text);
}

/* A context of its own (empty program cache) on the default device; the
 * shared context is opened first, so a missing device fails the test
 * with the usual message. */
static flashcl_context *fresh_context(void)
{
    shared_context();
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "flashcl_context_create: %s: %s",
                  flashcl_status_string(status),
                  clip(flashcl_last_create_error()));
    return ctx;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static attention_case thread_case(size_t head_dim, ref_dtype dtype,
                                  uint64_t seed)
{
    attention_case c = small_case(dtype, 37, 45, 0, seed);
    c.head_dim = head_dim;
    return c;
}

/* Fills O (and LSE) with the poison bytes on `queue`, ahead of the next
 * kernel there (in-order queue). No Check assertions: any thread. */
static cl_int enqueue_poison(cl_command_queue queue, case_data *data)
{
    const unsigned char poison = POISON_BYTE;
    cl_int err = clEnqueueFillBuffer(queue, data->o.view.buffer, &poison, 1,
                                     0, tensor_bytes(&data->o), 0, NULL, NULL);
    if (err == CL_SUCCESS && data->lse.view.buffer)
        err = clEnqueueFillBuffer(queue, data->lse.view.buffer, &poison, 1, 0,
                                  tensor_bytes(&data->lse), 0, NULL, NULL);
    return err;
}

/* One run start to end on `queue`: poison, forward, wait, read back and
 * compare with the reference. Returns 1 if all was well, else records
 * why. No Check assertions: any thread. */
static int run_and_check(flashcl_context *ctx, cl_command_queue queue,
                         const attention_case *c, case_data *data,
                         tolerance tol, failure *f, const char *who)
{
    flashcl_attention_desc desc = case_desc(c, data);
    cl_int err = enqueue_poison(queue, data);
    if (err != CL_SUCCESS) {
        record(f, "%s: poisoning the output: %d", who, (int)err);
        return 0;
    }
    flashcl_status status =
        flashcl_attention_forward(ctx, queue, &desc, 0, NULL, NULL);
    if (status != FLASHCL_SUCCESS) {
        record(f, "%s: forward failed: %s: %.300s", who,
               flashcl_status_string(status), flashcl_context_last_error(ctx));
        return 0;
    }
    err = clFinish(queue);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, data->o.view.buffer, CL_TRUE, 0,
                                  tensor_bytes(&data->o), data->o.host, 0,
                                  NULL, NULL);
    if (err == CL_SUCCESS && data->lse.view.buffer)
        err = clEnqueueReadBuffer(queue, data->lse.view.buffer, CL_TRUE, 0,
                                  tensor_bytes(&data->lse), data->lse.host, 0,
                                  NULL, NULL);
    if (err != CL_SUCCESS) {
        record(f, "%s: running or reading back: %d", who, (int)err);
        return 0;
    }
    compare_result r = compare_output(&data->o, data->ref_o,
                                      c->with_lse ? &data->lse : NULL,
                                      data->ref_lse, tol);
    if (!r.ok) {
        record(f, "%s: result off the reference: %s", who, r.detail);
        return 0;
    }
    return 1;
}

/* The number after the only occurrence of `key` ("heads_q = ") in `text`,
 * or -1 if the key is missing, -2 if it occurs more than once (a torn or
 * concatenated message). */
static long long number_after(const char *text, const char *key)
{
    const char *at = strstr(text, key);
    if (!at)
        return -1;
    if (strstr(at + 1, key))
        return -2;
    char *end = NULL;
    long long value = strtoll(at + strlen(key), &end, 10);
    return end == at + strlen(key) ? -1 : value;
}

/* ---------------------------------------------------------------- */
/* Per-thread diagnostics                                            */
/* ---------------------------------------------------------------- */

enum { DIAG_THREADS = 8, DIAG_ITERATIONS = 300, DIAG_CHECKED_RUNS = 2,
       BUILD_FAILURES = 4 };
#define DIAG_HEAD_DIM 32  /* the variant every worker runs (cached) */
#define BROKEN_HEAD_DIM 64 /* the variant whose build fails */
#define BROKEN_MARKER "flashcl test_threads: deliberately broken kernel"

typedef struct diag_worker {
    flashcl_context *ctx;
    int index;
    cl_command_queue queue;
    attention_case c;
    case_data data;
    tolerance tol;
    atomic_int *start;
    failure fail;
    int failing_calls, successful_calls, checked_runs;
} diag_worker;

/* heads_kv of thread t: 3 + t, so "heads_kv = 5" names thread 2. heads_q
 * = heads_kv * (2 + i % 61) + 1 is never a multiple of it, and changes
 * with the iteration, so a stale message of this thread shows too. */
static void bad_heads(int thread, int iteration, int64_t *heads_q,
                      int64_t *heads_kv)
{
    *heads_kv = 3 + thread;
    *heads_q = *heads_kv * (2 + iteration % 61) + 1;
}

/* After a failing call: status, own numbers, nothing else; the text stays
 * the same while the other threads go on. */
static void expect_own_error(diag_worker *w, int iteration,
                             flashcl_status status, const char *call)
{
    int64_t hq, hkv;
    bad_heads(w->index, iteration, &hq, &hkv);
    w->failing_calls++;
    if (status != FLASHCL_ERROR_HEAD_GROUPING) {
        record(&w->fail,
               "thread %d iteration %d: %s with heads_q %lld, heads_kv %lld "
               "returned %s, not head grouping",
               w->index, iteration, call, (long long)hq, (long long)hkv,
               flashcl_status_string(status));
        return;
    }
    const char *message = flashcl_context_last_error(w->ctx);
    char copy[512];
    snprintf(copy, sizeof copy, "%s", message ? message : "(null)");
    long long got_q = number_after(copy, "heads_q = ");
    long long got_kv = number_after(copy, "heads_kv = ");
    if (got_q != hq || got_kv != hkv) {
        record(&w->fail,
               "thread %d iteration %d: after %s with heads_q = %lld, "
               "heads_kv = %lld the last error reads \"%.300s\" (another "
               "thread's, a stale or a torn message)",
               w->index, iteration, call, (long long)hq, (long long)hkv,
               copy);
        return;
    }
    /* This thread's own copy: other threads' failures may not touch it. */
    for (int y = 0; y < 3; y++)
        sched_yield();
    if (strcmp(message, copy) != 0)
        record(&w->fail,
               "thread %d iteration %d: its last error changed from \"%s\" "
               "to \"%.300s\" while it made no call",
               w->index, iteration, copy, message);
}

static void expect_cleared(diag_worker *w, int iteration, const char *call)
{
    w->successful_calls++;
    const char *message = flashcl_context_last_error(w->ctx);
    if (!message || message[0] != '\0')
        record(&w->fail,
               "thread %d iteration %d: after a successful %s the last error "
               "reads \"%.300s\", not \"\"",
               w->index, iteration, call, message ? message : "(null)");
}

static void *diag_main(void *arg)
{
    diag_worker *w = arg;
    while (!atomic_load(w->start))
        sched_yield();
    flashcl_attention_desc good = case_desc(&w->c, &w->data);
    char who[64];
    snprintf(who, sizeof who, "thread %d", w->index);
    for (int i = 0; i < DIAG_ITERATIONS; i++) {
        flashcl_attention_desc bad = good;
        bad_heads(w->index, i, &bad.heads_q, &bad.heads_kv);
        flashcl_status status;
        if (i % 2 == 0) {
            status = flashcl_attention_forward(w->ctx, w->queue, &bad, 0, NULL,
                                               NULL);
            expect_own_error(w, i, status, "flashcl_attention_forward");
        } else {
            double ms = -1.0;
            status = flashcl_prepare(w->ctx, &bad, &ms);
            expect_own_error(w, i, status, "flashcl_prepare");
        }

        /* A success right after: the message is gone. Every 10th
         * iteration a real launch (output poisoned first), two of them
         * waited for and checked; else a cached flashcl_prepare. */
        if (i % 10 == 0) {
            if (i == 0 || i == DIAG_ITERATIONS - 10) {
                if (!run_and_check(w->ctx, w->queue, &w->c, &w->data, w->tol,
                                   &w->fail, who))
                    continue;
                w->checked_runs++;
            } else {
                cl_int err = enqueue_poison(w->queue, &w->data);
                status = flashcl_attention_forward(w->ctx, w->queue, &good, 0,
                                                   NULL, NULL);
                if (err != CL_SUCCESS || status != FLASHCL_SUCCESS) {
                    record(&w->fail, "thread %d iteration %d: forward: %s (%d)",
                           w->index, i, flashcl_status_string(status),
                           (int)err);
                    continue;
                }
            }
            expect_cleared(w, i, "flashcl_attention_forward");
        } else {
            double ms = -1.0;
            status = flashcl_prepare(w->ctx, &good, &ms);
            if (status != FLASHCL_SUCCESS || ms != 0.0) {
                record(&w->fail,
                       "thread %d iteration %d: cached flashcl_prepare: %s, "
                       "compile_ms %g (want success, 0)",
                       w->index, i, flashcl_status_string(status), ms);
                continue;
            }
            expect_cleared(w, i, "flashcl_prepare");
        }
    }
    clFinish(w->queue);
    return NULL;
}

/* Makes kernel builds fail, BUILD_FAILURES times, each followed by a
 * successful call. */
typedef struct build_worker {
    flashcl_context *ctx;
    flashcl_attention_desc broken, good;
    atomic_int *start;
    failure fail;
    int builds_failed;
} build_worker;

static void *build_main(void *arg)
{
    build_worker *w = arg;
    while (!atomic_load(w->start))
        sched_yield();
    for (int i = 0; i < BUILD_FAILURES; i++) {
        double ms = -1.0;
        flashcl_status status = flashcl_prepare(w->ctx, &w->broken, &ms);
        if (status != FLASHCL_ERROR_BUILD_FAILED) {
            record(&w->fail,
                   "build thread, try %d: flashcl_prepare of the broken "
                   "kernel returned %s, not kernel build failed",
                   i, flashcl_status_string(status));
            continue;
        }
        w->builds_failed++;
        const char *log = flashcl_context_last_error(w->ctx);
        size_t len = log ? strlen(log) : 0;
        char *copy = malloc(len + 1);
        if (!copy) {
            record(&w->fail, "build thread: out of memory");
            return NULL;
        }
        memcpy(copy, log ? log : "", len + 1);
        if (!strstr(copy, BROKEN_MARKER) || strstr(copy, "heads_kv = "))
            record(&w->fail,
                   "build thread, try %d: the last error is not (only) its "
                   "own build log with \"%s\": \"%.400s\"",
                   i, BROKEN_MARKER, copy);
        for (int y = 0; y < 3; y++)
            sched_yield();
        sleep_ms(2);
        if (strcmp(log, copy) != 0)
            record(&w->fail,
                   "build thread, try %d: its build log changed while it "
                   "made no call; now \"%.300s\"",
                   i, log);
        free(copy);

        status = flashcl_prepare(w->ctx, &w->good, &ms);
        const char *after = flashcl_context_last_error(w->ctx);
        if (status != FLASHCL_SUCCESS || !after || after[0] != '\0')
            record(&w->fail,
                   "build thread, try %d: cached flashcl_prepare: %s; last "
                   "error then \"%.300s\", not \"\"",
                   i, flashcl_status_string(status), after ? after : "(null)");
    }
    return NULL;
}

/* Makes no call on the context; reads its last error throughout. */
typedef struct observer {
    flashcl_context *ctx;
    atomic_int *start, *stop;
    failure fail;
    long reads;
} observer;

static void *observer_main(void *arg)
{
    observer *o = arg;
    while (!atomic_load(o->start))
        sched_yield();
    do {
        const char *message = flashcl_context_last_error(o->ctx);
        o->reads++;
        if (!message || message[0] != '\0') {
            char copy[400];
            snprintf(copy, sizeof copy, "%s", message ? message : "(null)");
            record(&o->fail,
                   "a thread that made no call on the context reads \"%s\", "
                   "not \"\"",
                   copy);
        }
        sched_yield();
    } while (!atomic_load(o->stop));
    return NULL;
}

/* A kernel folder whose flash_fwd.cl cannot compile; the path is written
 * to dir. */
static void make_broken_kernel_dir(char *dir, size_t size)
{
    snprintf(dir, size, "%s/flashcl_threads_XXXXXX",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[600];
    snprintf(path, sizeof path, "%s/flash_fwd.cl", dir);
    FILE *file = fopen(path, "w");
    ck_assert_ptr_nonnull(file);
    fputs("#error \"" BROKEN_MARKER "\"\n", file);
    fclose(file);
}

static void remove_broken_kernel_dir(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/flash_fwd.cl", dir);
    unlink(path);
    rmdir(dir);
}

START_TEST(test_per_thread_diagnostics)
{
    flashcl_context *ctx = fresh_context();
    static diag_worker workers[DIAG_THREADS];
    memset(workers, 0, sizeof workers);
    atomic_int start = 0, stop = 0;
    for (int t = 0; t < DIAG_THREADS; t++) {
        diag_worker *w = &workers[t];
        w->ctx = ctx;
        w->index = t;
        w->start = &start;
        w->queue = create_queue(ctx);
        w->c = thread_case(DIAG_HEAD_DIM, REF_FP32, 7000 + (uint64_t)t);
        case_prepare(&w->c, flashcl_context_cl_context(ctx), w->queue,
                     &w->data);
        w->tol = tolerance_for_call(&w->c, &w->data);
        /* Compiled here, before the kernel folder is broken below. */
        flashcl_attention_desc desc = case_desc(&w->c, &w->data);
        ck_assert_int_eq(flashcl_prepare(ctx, &desc, NULL), FLASHCL_SUCCESS);
    }
    /* The main thread made calls that succeeded: it reads "". */
    ck_assert_str_eq(flashcl_context_last_error(ctx), "");

    /* The build thread asks for a variant nobody else uses, from a
     * kernel folder where it cannot compile. FLASHCL_KERNEL_DIR is
     * process-wide, but only that thread compiles while it is set. */
    static build_worker builder;
    memset(&builder, 0, sizeof builder);
    builder.ctx = ctx;
    builder.start = &start;
    attention_case broken_case =
        thread_case(BROKEN_HEAD_DIM, REF_FP32, 7100);
    flashcl_attention_desc_init(&builder.broken);
    builder.broken.batch = 1;
    builder.broken.heads_q = 2;
    builder.broken.seqlen_q = (int64_t)broken_case.seqlen_q;
    builder.broken.seqlen_k = (int64_t)broken_case.seqlen_k;
    builder.broken.head_dim = BROKEN_HEAD_DIM;
    builder.broken.backend = FLASHCL_BACKEND_FUSED;
    builder.good = case_desc(&workers[0].c, &workers[0].data);
    char dir[512];
    make_broken_kernel_dir(dir, sizeof dir);
    const char *old_dir = getenv("FLASHCL_KERNEL_DIR");
    char *saved_dir = old_dir ? strdup(old_dir) : NULL;
    ck_assert_int_eq(setenv("FLASHCL_KERNEL_DIR", dir, 1), 0);

    static observer watcher;
    memset(&watcher, 0, sizeof watcher);
    watcher.ctx = ctx;
    watcher.start = &start;
    watcher.stop = &stop;

    pthread_t threads[DIAG_THREADS], build_thread, observer_thread;
    for (int t = 0; t < DIAG_THREADS; t++)
        ck_assert_int_eq(
            pthread_create(&threads[t], NULL, diag_main, &workers[t]), 0);
    ck_assert_int_eq(pthread_create(&build_thread, NULL, build_main, &builder),
                     0);
    ck_assert_int_eq(
        pthread_create(&observer_thread, NULL, observer_main, &watcher), 0);
    atomic_store(&start, 1);
    for (int t = 0; t < DIAG_THREADS; t++)
        pthread_join(threads[t], NULL);
    pthread_join(build_thread, NULL);
    atomic_store(&stop, 1);
    pthread_join(observer_thread, NULL);

    if (saved_dir)
        setenv("FLASHCL_KERNEL_DIR", saved_dir, 1);
    else
        unsetenv("FLASHCL_KERNEL_DIR");
    free(saved_dir);
    remove_broken_kernel_dir(dir);

    for (int t = 0; t < DIAG_THREADS; t++) {
        char who[32];
        snprintf(who, sizeof who, "thread %d", t);
        assert_no_failure(&workers[t].fail, who);
        ck_assert_int_eq(workers[t].failing_calls, DIAG_ITERATIONS);
        ck_assert_int_eq(workers[t].successful_calls, DIAG_ITERATIONS);
        ck_assert_int_eq(workers[t].checked_runs, DIAG_CHECKED_RUNS);
    }
    assert_no_failure(&builder.fail, "build thread");
    ck_assert_int_eq(builder.builds_failed, BUILD_FAILURES);
    assert_no_failure(&watcher.fail, "observer thread");
    ck_assert_int_gt(watcher.reads, 0);
    /* Still "" for the main thread, whatever the others did meanwhile. */
    ck_assert_str_eq(flashcl_context_last_error(ctx), "");
    fprintf(stderr,
            "diagnostics: %d threads x %d failing + %d successful calls, %d "
            "failed builds, %ld reads by a thread that made no call\n",
            DIAG_THREADS, DIAG_ITERATIONS, DIAG_ITERATIONS,
            builder.builds_failed, watcher.reads);

    for (int t = 0; t < DIAG_THREADS; t++) {
        case_release(&workers[t].data);
        clReleaseCommandQueue(workers[t].queue);
    }
    flashcl_context_release(ctx);
}
END_TEST

/* A thread that never called into a context reads "" even right after
 * the context's creating thread failed a call on it. */
typedef struct read_once {
    flashcl_context *ctx;
    char text[400];
} read_once;

static void *read_once_main(void *arg)
{
    read_once *r = arg;
    const char *message = flashcl_context_last_error(r->ctx);
    snprintf(r->text, sizeof r->text, "%s", message ? message : "(null)");
    return NULL;
}

START_TEST(test_no_call_reads_empty)
{
    flashcl_context *ctx = fresh_context();
    flashcl_attention_desc bad = FLASHCL_ATTENTION_DESC_INIT;
    bad.batch = 1;
    bad.heads_q = 5;
    bad.heads_kv = 2;
    bad.seqlen_q = bad.seqlen_k = 4;
    bad.head_dim = 8;
    ck_assert_int_eq(flashcl_prepare(ctx, &bad, NULL),
                     FLASHCL_ERROR_HEAD_GROUPING);
    ck_assert_msg(strstr(flashcl_context_last_error(ctx), "heads_q = 5"),
                  "main thread's last error: \"%s\"",
                  clip(flashcl_context_last_error(ctx)));
    read_once r = {ctx, ""};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, read_once_main, &r), 0);
    pthread_join(thread, NULL);
    ck_assert_msg(r.text[0] == '\0',
                  "a thread that made no call on the context reads \"%s\"",
                  r.text);
    /* And the main thread still reads its own failure. */
    ck_assert_msg(strstr(flashcl_context_last_error(ctx), "heads_q = 5"),
                  "main thread's last error: \"%s\"",
                  clip(flashcl_context_last_error(ctx)));
    flashcl_context_release(ctx);
}
END_TEST

/* ---------------------------------------------------------------- */
/* A compile does not hold up other launches                         */
/* ---------------------------------------------------------------- */

#define CACHED_HEAD_DIM 16   /* thread B's variant */
/* Thread A's new variant: D = 128 with softcap, a sliding window and
 * D_v = 64, a compile at least as long as a plain one's (160-230 ms on the
 * 2-core PoCL machine with POCL_KERNEL_CACHE=0; 450-700 ms with the
 * library of November 2026). */
#define COMPILED_HEAD_DIM 128
#define COMPILED_HEAD_DIM_V 64
/* B starts its runs a while after A began its compile: a quarter of what
 * B's own (plain) compile took, at most 100 ms, so that A is well inside
 * its compile then, on a fast machine too. */
enum { B_RUNS = 3, B_DELAY_MAX_MS = 100, B_DELAY_MIN_MS = 5 };

typedef struct compile_race {
    flashcl_context *ctx;
    /* A */
    flashcl_attention_desc a_desc;
    flashcl_status a_status;
    double a_compile_ms;
    atomic_int a_started, a_returned;
    /* B */
    cl_command_queue b_queue;
    attention_case b_case;
    case_data b_data;
    tolerance b_tol;
    atomic_int b_ready;
    double b_compile_ms;
    int b_delay_ms;
    int b_runs_before_a_returned, b_runs_ok;
    double b_runs_ms; /* B's runs during A's compile, start to end */
    int a_returned_before_b_began;
    failure fail;
} compile_race;

static void *compile_thread(void *arg)
{
    compile_race *r = arg;
    while (!atomic_load(&r->b_ready))
        sched_yield();
    atomic_store(&r->a_started, 1);
    r->a_status = flashcl_prepare(r->ctx, &r->a_desc, &r->a_compile_ms);
    atomic_store(&r->a_returned, 1);
    return NULL;
}

static void *launch_thread(void *arg)
{
    compile_race *r = arg;
    /* Compiled (and run once) by B before A starts. */
    flashcl_attention_desc desc = case_desc(&r->b_case, &r->b_data);
    r->b_compile_ms = -1.0;
    flashcl_status status = flashcl_prepare(r->ctx, &desc, &r->b_compile_ms);
    if (status != FLASHCL_SUCCESS || !(r->b_compile_ms > 0.0))
        record(&r->fail, "thread B: flashcl_prepare of its variant: %s, "
               "compile_ms %g (want success, > 0)",
               flashcl_status_string(status), r->b_compile_ms);
    r->b_delay_ms = (int)(r->b_compile_ms / 4);
    if (r->b_delay_ms > B_DELAY_MAX_MS)
        r->b_delay_ms = B_DELAY_MAX_MS;
    if (r->b_delay_ms < B_DELAY_MIN_MS)
        r->b_delay_ms = B_DELAY_MIN_MS;
    if (run_and_check(r->ctx, r->b_queue, &r->b_case, &r->b_data, r->b_tol,
                      &r->fail, "thread B, first run"))
        r->b_runs_ok++;
    atomic_store(&r->b_ready, 1);
    while (!atomic_load(&r->a_started))
        sched_yield();
    sleep_ms(r->b_delay_ms); /* A is inside its compile by now */
    r->a_returned_before_b_began = atomic_load(&r->a_returned);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < B_RUNS; i++) {
        if (run_and_check(r->ctx, r->b_queue, &r->b_case, &r->b_data,
                          r->b_tol, &r->fail, "thread B, cached run"))
            r->b_runs_ok++;
        if (!atomic_load(&r->a_returned))
            r->b_runs_before_a_returned++;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->b_runs_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                   (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    return NULL;
}

START_TEST(test_compile_does_not_block_launches)
{
    static compile_race r;
    memset(&r, 0, sizeof r);
    r.ctx = fresh_context();
    r.b_queue = create_queue(r.ctx);
    r.b_case = thread_case(CACHED_HEAD_DIM, REF_FP32, 7200);
    case_prepare(&r.b_case, flashcl_context_cl_context(r.ctx), r.b_queue,
                 &r.b_data);
    r.b_tol = tolerance_for_call(&r.b_case, &r.b_data);
    flashcl_attention_desc_init(&r.a_desc);
    r.a_desc.batch = 1;
    r.a_desc.heads_q = 2;
    r.a_desc.seqlen_q = 64;
    r.a_desc.seqlen_k = 64;
    r.a_desc.head_dim = COMPILED_HEAD_DIM;
    r.a_desc.head_dim_v = COMPILED_HEAD_DIM_V;
    r.a_desc.softcap = 30.0f;
    r.a_desc.window = 1;
    r.a_desc.window_left = 16;
    r.a_desc.window_right = 4;
    r.a_desc.backend = FLASHCL_BACKEND_FUSED;

    pthread_t a, b;
    ck_assert_int_eq(pthread_create(&b, NULL, launch_thread, &r), 0);
    ck_assert_int_eq(pthread_create(&a, NULL, compile_thread, &r), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);

    assert_no_failure(&r.fail, "thread B");
    ck_assert_int_eq(r.b_runs_ok, 1 + B_RUNS);
    ck_assert_msg(r.a_status == FLASHCL_SUCCESS, "thread A's compile: %s",
                  flashcl_status_string(r.a_status));
    ck_assert_msg(r.a_compile_ms > 0.0,
                  "thread A's variant was not compiled by its call "
                  "(compile_ms %g)",
                  r.a_compile_ms);
    ck_assert_msg(!r.a_returned_before_b_began,
                  "thread A's compile (%.0f ms) returned within %d ms, "
                  "before B began: nothing was tested (is PoCL's kernel "
                  "cache on? POCL_KERNEL_CACHE=0 expected)",
                  r.a_compile_ms, r.b_delay_ms);
    ck_assert_msg(r.b_runs_before_a_returned == B_RUNS,
                  "only %d of thread B's %d runs of an already compiled "
                  "kernel finished before thread A's compile of another "
                  "variant returned (%.0f ms): the compile holds up launches",
                  r.b_runs_before_a_returned, B_RUNS, r.a_compile_ms);
    fprintf(stderr,
            "compile: B (its own compile %.0f ms) ran its cached kernel %d "
            "times (%.1f ms) from %d ms into A's %.0f ms compile\n",
            r.b_compile_ms, r.b_runs_before_a_returned, r.b_runs_ms,
            r.b_delay_ms, r.a_compile_ms);

    case_release(&r.b_data);
    clReleaseCommandQueue(r.b_queue);
    flashcl_context_release(r.ctx);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Two threads, the same new variant                                 */
/* ---------------------------------------------------------------- */

#define PREPARE_HEAD_DIM 96  /* raced through flashcl_prepare */
#define FORWARD_HEAD_DIM 112 /* raced through flashcl_attention_forward */

typedef struct same_variant {
    flashcl_context *ctx;
    pthread_barrier_t *barrier;
    int use_forward;
    flashcl_attention_desc desc; /* prepare */
    cl_command_queue queue;      /* forward */
    attention_case c;
    case_data data;
    tolerance tol;
    flashcl_status status;
    double compile_ms;
    int ran_ok;
    failure fail;
} same_variant;

static void *same_variant_main(void *arg)
{
    same_variant *s = arg;
    pthread_barrier_wait(s->barrier);
    if (s->use_forward) {
        s->ran_ok = run_and_check(s->ctx, s->queue, &s->c, &s->data, s->tol,
                                  &s->fail, "forward of a new variant");
        s->status = s->ran_ok ? FLASHCL_SUCCESS : FLASHCL_ERROR_OPENCL;
    } else {
        s->compile_ms = -1.0;
        s->status = flashcl_prepare(s->ctx, &s->desc, &s->compile_ms);
    }
    return NULL;
}

START_TEST(test_same_new_variant_compiled_once)
{
    flashcl_context *ctx = fresh_context();
    pthread_barrier_t barrier;
    ck_assert_int_eq(pthread_barrier_init(&barrier, NULL, 2), 0);
    static same_variant s[2];
    memset(s, 0, sizeof s);

    /* flashcl_prepare from both at once: one compile. */
    for (int t = 0; t < 2; t++) {
        s[t].ctx = ctx;
        s[t].barrier = &barrier;
        flashcl_attention_desc_init(&s[t].desc);
        s[t].desc.batch = 1;
        s[t].desc.heads_q = 2;
        s[t].desc.seqlen_q = 64;
        s[t].desc.seqlen_k = 64;
        s[t].desc.head_dim = PREPARE_HEAD_DIM;
        s[t].desc.backend = FLASHCL_BACKEND_FUSED;
    }
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        ck_assert_int_eq(
            pthread_create(&threads[t], NULL, same_variant_main, &s[t]), 0);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
    for (int t = 0; t < 2; t++)
        ck_assert_msg(s[t].status == FLASHCL_SUCCESS,
                      "thread %d: flashcl_prepare: %s", t,
                      flashcl_status_string(s[t].status));
    ck_assert_msg((s[0].compile_ms > 0.0) + (s[1].compile_ms > 0.0) == 1 &&
                      (s[0].compile_ms == 0.0 || s[1].compile_ms == 0.0),
                  "compile_ms %g and %g: want exactly one compile (> 0) and "
                  "one cached (0)",
                  s[0].compile_ms, s[1].compile_ms);
    double again = -1.0;
    ck_assert_int_eq(flashcl_prepare(ctx, &s[0].desc, &again),
                     FLASHCL_SUCCESS);
    ck_assert(again == 0.0);
    fprintf(stderr, "same variant: compile_ms %.0f and %.0f\n",
            s[0].compile_ms, s[1].compile_ms);

    /* Two forward calls of another new variant at once, each on its own
     * queue: both right; compiled once (a later prepare finds it). */
    memset(s, 0, sizeof s);
    for (int t = 0; t < 2; t++) {
        s[t].ctx = ctx;
        s[t].barrier = &barrier;
        s[t].use_forward = 1;
        s[t].queue = create_queue(ctx);
        s[t].c = thread_case(FORWARD_HEAD_DIM, REF_FP32, 7300 + (uint64_t)t);
        case_prepare(&s[t].c, flashcl_context_cl_context(ctx), s[t].queue,
                     &s[t].data);
        s[t].tol = tolerance_for_call(&s[t].c, &s[t].data);
    }
    for (int t = 0; t < 2; t++)
        ck_assert_int_eq(
            pthread_create(&threads[t], NULL, same_variant_main, &s[t]), 0);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
    for (int t = 0; t < 2; t++) {
        char who[32];
        snprintf(who, sizeof who, "forward thread %d", t);
        assert_no_failure(&s[t].fail, who);
        ck_assert(s[t].ran_ok);
    }
    flashcl_attention_desc desc = case_desc(&s[0].c, &s[0].data);
    again = -1.0;
    ck_assert_int_eq(flashcl_prepare(ctx, &desc, &again), FLASHCL_SUCCESS);
    ck_assert_msg(again == 0.0, "the raced variant was not cached (%g ms)",
                  again);
    for (int t = 0; t < 2; t++) {
        case_release(&s[t].data);
        clReleaseCommandQueue(s[t].queue);
    }
    pthread_barrier_destroy(&barrier);
    flashcl_context_release(ctx);
}
END_TEST

int main(void)
{
    const test_entry diagnostics[] = {{test_no_call_reads_empty, 0},
                                      {test_per_thread_diagnostics, 0}};
    const test_entry compile[] = {{test_compile_does_not_block_launches, 0},
                                  {test_same_new_variant_compiled_once, 0}};
    const test_group groups[] = {
        {"diagnostics", 0, NULL, NULL, diagnostics, LENGTH(diagnostics)},
        {"compile", 0, NULL, NULL, compile, LENGTH(compile)}};
    return run_groups("threads", groups, LENGTH(groups));
}
