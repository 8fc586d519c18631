/* Status names, per-context last-error message and OpenCL error names. */
#include "../internal.h"

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

flashcl_status set_error(flashcl_context *ctx, flashcl_status status,
                         const char *fmt, ...)
{
    if (!ctx)
        return status;
    pthread_mutex_lock(&ctx->error_lock);
    va_list args;
    va_start(args, fmt);
    vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, args);
    va_end(args);
    free(ctx->build_log);
    ctx->build_log = NULL;
    pthread_mutex_unlock(&ctx->error_lock);
    return status;
}

flashcl_status set_build_error(flashcl_context *ctx, const char *what,
                               char *log)
{
    pthread_mutex_lock(&ctx->error_lock);
    free(ctx->build_log);
    size_t len = strlen(what) + (log ? strlen(log) : 0) + 32;
    ctx->build_log = malloc(len);
    if (ctx->build_log)
        snprintf(ctx->build_log, len, "%s\nbuild log:\n%s", what,
                 log ? log : "(empty)");
    snprintf(ctx->last_error, sizeof ctx->last_error, "%s", what);
    pthread_mutex_unlock(&ctx->error_lock);
    free(log);
    return FLASHCL_ERROR_BUILD_FAILED;
}

void clear_error(flashcl_context *ctx)
{
    pthread_mutex_lock(&ctx->error_lock);
    ctx->last_error[0] = '\0';
    free(ctx->build_log);
    ctx->build_log = NULL;
    pthread_mutex_unlock(&ctx->error_lock);
}

const char *flashcl_context_last_error(const flashcl_context *ctx)
{
    if (!ctx)
        return "no context";
    return ctx->build_log ? ctx->build_log : ctx->last_error;
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
