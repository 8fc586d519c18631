/*
 * OpenCL 1.2 section 5.13: before a command on one queue waits for an
 * event of another queue, the other queue must have been flushed, or a
 * strict driver may never submit it (a deadlock). PoCL is not strict, so
 * this test plays the strict driver: the executable interposes the OpenCL
 * entry points flashcl uses to hand events across queues, records which
 * queue each marker event came from and whether that queue was flushed
 * since, and counts waits on unflushed foreign events. The reference
 * backend makes such waits: a call's first command waits for the previous
 * call's `busy` marker, which may sit on another queue.
 *
 * The interposed functions are found because the executable exports them
 * (ENABLE_EXPORTS in tests/CMakeLists.txt); they forward to the real ones.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "test_common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#define MAX_TRACKED 4096

static struct {
    pthread_mutex_t lock;
    cl_event event[MAX_TRACKED];
    cl_command_queue queue[MAX_TRACKED];
    int flushed[MAX_TRACKED];
    int count;
    int violations;
} book = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, {0}, 0, 0};

/* The next definition of `name` (the ICD loader's), as a function
 * pointer: POSIX's dlsym returns it as void *, copied bit for bit. */
#define REAL(type, name, out)                                                  \
    do {                                                                       \
        void *sym = dlsym(RTLD_NEXT, name);                                    \
        if (!sym)                                                              \
            abort(); /* cannot run without the real entry point */            \
        memcpy(&(out), &sym, sizeof(out));                                     \
    } while (0)

static void mark_flushed(cl_command_queue queue)
{
    pthread_mutex_lock(&book.lock);
    for (int i = 0; i < book.count; ++i)
        if (book.queue[i] == queue)
            book.flushed[i] = 1;
    pthread_mutex_unlock(&book.lock);
}

static void check_wait_list(cl_command_queue queue, cl_uint n,
                            const cl_event *list)
{
    pthread_mutex_lock(&book.lock);
    for (cl_uint e = 0; e < n; ++e)
        for (int i = 0; i < book.count; ++i)
            if (book.event[i] == list[e] && book.queue[i] != queue &&
                !book.flushed[i])
                ++book.violations;
    pthread_mutex_unlock(&book.lock);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueMarkerWithWaitList(
    cl_command_queue queue, cl_uint n, const cl_event *list, cl_event *event)
{
    typedef cl_int (*fn_t)(cl_command_queue, cl_uint, const cl_event *,
                           cl_event *);
    check_wait_list(queue, n, list);
    fn_t fn;
    REAL(fn_t, "clEnqueueMarkerWithWaitList", fn);
    cl_int err = fn(queue, n, list, event);
    if (err == CL_SUCCESS && event && *event) {
        pthread_mutex_lock(&book.lock);
        if (book.count < MAX_TRACKED) {
            book.event[book.count] = *event;
            book.queue[book.count] = queue;
            book.flushed[book.count] = 0;
            ++book.count;
        }
        pthread_mutex_unlock(&book.lock);
    }
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueBarrierWithWaitList(
    cl_command_queue queue, cl_uint n, const cl_event *list, cl_event *event)
{
    typedef cl_int (*fn_t)(cl_command_queue, cl_uint, const cl_event *,
                           cl_event *);
    check_wait_list(queue, n, list);
    fn_t fn;
    REAL(fn_t, "clEnqueueBarrierWithWaitList", fn);
    return fn(queue, n, list, event);
}

CL_API_ENTRY cl_int CL_API_CALL clFlush(cl_command_queue queue)
{
    typedef cl_int (*fn_t)(cl_command_queue);
    mark_flushed(queue);
    fn_t fn;
    REAL(fn_t, "clFlush", fn);
    return fn(queue);
}

CL_API_ENTRY cl_int CL_API_CALL clFinish(cl_command_queue queue)
{
    typedef cl_int (*fn_t)(cl_command_queue);
    mark_flushed(queue);
    fn_t fn;
    REAL(fn_t, "clFinish", fn);
    return fn(queue);
}

/* Two reference calls on two queues of one context: the second waits for
 * the first's `busy` marker, so the first queue must have been flushed. */
START_TEST(test_reference_flushes_before_cross_queue_wait)
{
    flashcl_context *ctx = shared_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue other = create_queue(ctx);
    attention_case c = small_case(REF_FP32, 33, 33, 0, 700);
    c.head_dim = 16;
    case_data data;
    case_prepare(&c, context, flashcl_context_queue(ctx), &data);
    flashcl_attention_desc d = case_desc(&c, &data);
    d.backend = FLASHCL_BACKEND_REFERENCE;
    ck_assert_int_eq(flashcl_attention_forward(ctx, NULL, &d, 0, NULL, NULL),
                     FLASHCL_SUCCESS);
    /* No clFinish here: that would flush the first queue by itself. */
    ck_assert_int_eq(flashcl_attention_forward(ctx, other, &d, 0, NULL, NULL),
                     FLASHCL_SUCCESS);
    const int violations = book.violations;
    CL_CHECK(clFinish(other));
    CL_CHECK(clFinish(flashcl_context_queue(ctx)));
    compare_result r = case_check(&c, &data, flashcl_context_queue(ctx));
    ck_assert_msg(r.ok, "%s", r.detail);
    ck_assert_msg(violations == 0,
                  "%d wait(s) on an event of an unflushed queue", violations);
    case_release(&data);
    clReleaseCommandQueue(other);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {
        {test_reference_flushes_before_cross_queue_wait, 0}};
    return run_tests("strict_flush", 0, NULL, NULL, tests, LENGTH(tests));
}
