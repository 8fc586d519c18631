/* Status names, per-thread diagnostics and OpenCL error names. */
#include "core/core.h"

#define FLASHCL_ERROR_CAPACITY 1024

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[FLASHCL_STATUS_COUNT_] = {
    [FLASHCL_SUCCESS] = "success",
    [FLASHCL_ERROR_NULL_ARGUMENT] = "null argument",
    [FLASHCL_ERROR_INVALID_DIMENSION] = "invalid dimension",
    [FLASHCL_ERROR_HEAD_GROUPING] = "heads_q is not a multiple of heads_kv",
    [FLASHCL_ERROR_HEAD_DIM_UNSUPPORTED] = "head dimension unsupported",
    [FLASHCL_ERROR_DTYPE_UNSUPPORTED] = "dtype unsupported",
    [FLASHCL_ERROR_INVALID_LAYOUT] = "invalid layout",
    [FLASHCL_ERROR_OUT_OF_BOUNDS] = "view outside its buffer",
    [FLASHCL_ERROR_CONTEXT_MISMATCH] = "object of another OpenCL context",
    [FLASHCL_ERROR_ALIASING] = "output overlaps another tensor",
    [FLASHCL_ERROR_INVALID_VALUE] = "invalid value",
    [FLASHCL_ERROR_DEVICE_NOT_FOUND] = "device not found",
    [FLASHCL_ERROR_NO_OPENCL] = "no OpenCL platform or device",
    [FLASHCL_ERROR_BUILD_FAILED] = "kernel build failed",
    [FLASHCL_ERROR_OPENCL] = "OpenCL call failed",
    [FLASHCL_ERROR_OUT_OF_MEMORY] = "out of memory",
    [FLASHCL_ERROR_UNSUPPORTED] = "unsupported on this device or build",
    [FLASHCL_ERROR_BACKEND] = "reference backend failed",
};

const char *flashcl_status_string(flashcl_status status)
{
    if ((int)status < 0 || status >= FLASHCL_STATUS_COUNT_ ||
        !status_names[status])
        return "unknown status";
    return status_names[status];
}

unsigned flashcl_version_number(void) { return FLASHCL_VERSION_NUMBER; }

const char *flashcl_version_string(void) { return FLASHCL_VERSION_STRING; }

/* Per-thread diagnostics. Each thread owns one record: the context its
 * last call was on, the message, and the build log after a failed compile.
 * Nothing is shared between threads, so no lock and no torn text; the
 * record is freed when the thread exits. */
typedef struct thread_diag {
    const flashcl_context *ctx;
    char message[FLASHCL_ERROR_CAPACITY];
    char *log; /* "what\nbuild log:\n..." after a build failure; owned */
} thread_diag;

static pthread_key_t diag_key;
static pthread_once_t diag_once = PTHREAD_ONCE_INIT;
static bool diag_key_ok;

static void free_diag(void *record)
{
    thread_diag *diag = record;
    free(diag->log);
    free(diag);
}

static void make_diag_key(void)
{
    diag_key_ok = pthread_key_create(&diag_key, free_diag) == 0;
}

/* This thread's record, created on first use; NULL when memory ran out
 * (the status still tells the caller what happened). */
static thread_diag *this_thread(bool create)
{
    pthread_once(&diag_once, make_diag_key);
    if (!diag_key_ok)
        return NULL;
    thread_diag *diag = pthread_getspecific(diag_key);
    if (!diag && create) {
        diag = calloc(1, sizeof *diag);
        if (diag && pthread_setspecific(diag_key, diag) != 0) {
            free(diag);
            diag = NULL;
        }
    }
    return diag;
}

static void reset(thread_diag *diag, const flashcl_context *ctx)
{
    diag->ctx = ctx;
    diag->message[0] = '\0';
    free(diag->log);
    diag->log = NULL;
}

void begin_call(const flashcl_context *ctx)
{
    /* created here, so that a call's note knows its context */
    thread_diag *diag = this_thread(ctx != NULL);
    if (diag)
        reset(diag, ctx);
}

flashcl_status begin_call_out(flashcl_context *ctx, const void *out,
                              const char *out_name)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    if (out_name && !out)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s is NULL",
                         out_name);
    return FLASHCL_SUCCESS;
}

void note_for_call(const char *fmt, ...)
{
    thread_diag *diag = this_thread(false);
    if (!diag || !diag->ctx)
        return;
    size_t len = strlen(diag->message);
    if (len && len + 2 < sizeof diag->message) {
        memcpy(diag->message + len, "; ", 3);
        len += 2;
    }
    va_list args;
    va_start(args, fmt);
    vsnprintf(diag->message + len, sizeof diag->message - len, fmt, args);
    va_end(args);
}

void forget_context_errors(const flashcl_context *ctx)
{
    thread_diag *diag = this_thread(false);
    if (diag && diag->ctx == ctx)
        reset(diag, NULL);
}

flashcl_status set_error(flashcl_context *ctx, flashcl_status status,
                         const char *fmt, ...)
{
    thread_diag *diag = ctx ? this_thread(true) : NULL;
    if (!diag)
        return status;
    reset(diag, ctx);
    va_list args;
    va_start(args, fmt);
    vsnprintf(diag->message, sizeof diag->message, fmt, args);
    va_end(args);
    return status;
}

flashcl_status set_build_error(flashcl_context *ctx, const char *what,
                               char *log)
{
    thread_diag *diag = this_thread(true);
    if (diag) {
        reset(diag, ctx);
        snprintf(diag->message, sizeof diag->message, "%s", what);
        size_t len = strlen(what) + (log ? strlen(log) : 0) + 32;
        diag->log = malloc(len);
        if (diag->log)
            snprintf(diag->log, len, "%s\nbuild log:\n%s", what,
                     log ? log : "(empty)");
    }
    free(log);
    return FLASHCL_ERROR_BUILD_FAILED;
}

const char *flashcl_context_last_error(const flashcl_context *ctx)
{
    if (!ctx)
        return "no context";
    const thread_diag *diag = this_thread(false);
    if (!diag || diag->ctx != ctx)
        return "";
    return diag->log ? diag->log : diag->message;
}

bool verbose_enabled(void)
{
    const char *env = getenv("FLASHCL_VERBOSE");
    return env && *env && strcmp(env, "0") != 0;
}

const char *cl_error_name(cl_int err)
{
    switch (err) {
#define NAME(code) \
    case code:     \
        return #code;
        NAME(CL_SUCCESS)
        NAME(CL_DEVICE_NOT_FOUND)
        NAME(CL_DEVICE_NOT_AVAILABLE)
        NAME(CL_COMPILER_NOT_AVAILABLE)
        NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        NAME(CL_OUT_OF_RESOURCES)
        NAME(CL_OUT_OF_HOST_MEMORY)
        NAME(CL_PROFILING_INFO_NOT_AVAILABLE)
        NAME(CL_BUILD_PROGRAM_FAILURE)
        NAME(CL_INVALID_VALUE)
        NAME(CL_INVALID_DEVICE)
        NAME(CL_INVALID_CONTEXT)
        NAME(CL_INVALID_COMMAND_QUEUE)
        NAME(CL_INVALID_MEM_OBJECT)
        NAME(CL_INVALID_PROGRAM)
        NAME(CL_INVALID_PROGRAM_EXECUTABLE)
        NAME(CL_INVALID_KERNEL_NAME)
        NAME(CL_INVALID_KERNEL)
        NAME(CL_INVALID_ARG_INDEX)
        NAME(CL_INVALID_ARG_VALUE)
        NAME(CL_INVALID_ARG_SIZE)
        NAME(CL_INVALID_KERNEL_ARGS)
        NAME(CL_INVALID_WORK_DIMENSION)
        NAME(CL_INVALID_WORK_GROUP_SIZE)
        NAME(CL_INVALID_WORK_ITEM_SIZE)
        NAME(CL_INVALID_GLOBAL_OFFSET)
        NAME(CL_INVALID_EVENT_WAIT_LIST)
        NAME(CL_INVALID_EVENT)
        NAME(CL_INVALID_OPERATION)
        NAME(CL_INVALID_BUFFER_SIZE)
        NAME(CL_INVALID_GLOBAL_WORK_SIZE)
        NAME(CL_INVALID_BUILD_OPTIONS)
        NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET)
#undef NAME
    default:
        return "unknown OpenCL error";
    }
}

void flashcl_attention_desc_init(flashcl_attention_desc *desc)
{
    if (!desc)
        return;
    memset(desc, 0, sizeof *desc);
    desc->struct_size = sizeof *desc;
}
