/* Runtime compilation and the per-context cache of compiled programs.
 *
 * The key is what was compiled (source name, options string, kernel
 * names), so the cache knows nothing about variants or paths: whatever
 * changes the binary is in the options. A compile runs outside the cache
 * lock, so launches of cached programs never wait for it; an entry in the
 * `building` state makes a second thread asking for the same program wait
 * for that one compile instead of starting its own. */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ENTRY_BUILDING = 0, ENTRY_READY, ENTRY_FAILED };

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *build_log(cl_program program, cl_device_id device)
{
    size_t size = 0;
    if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, NULL,
                              &size) != CL_SUCCESS)
        return NULL;
    char *log = malloc(size + 1);
    if (!log)
        return NULL;
    if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log,
                              NULL) != CL_SUCCESS)
        size = 0;
    log[size] = '\0';
    return log;
}

/* Some drivers print nothing but keep compiler warnings in the log; the
 * library stays quiet unless FLASHCL_VERBOSE asks for them. */
static void report_log_if_verbose(const compiled_program *entry,
                                  cl_device_id device)
{
    if (!verbose_enabled())
        return;
    char *log = build_log(entry->program, device);
    if (log && log[strspn(log, " \t\r\n")])
        fprintf(stderr, "flashcl: built %s with \"%s\":\n%s\n", entry->source,
                entry->options, log);
    free(log);
}

static flashcl_status build(flashcl_context *ctx, compiled_program *entry,
                            const program_request *request)
{
    char msg[512];
    char *source = load_kernel_source(request->source, msg, sizeof msg);
    if (!source)
        return set_error(ctx, FLASHCL_ERROR_BUILD_FAILED, "%s", msg);
    cl_int err;
    const char *text = source;
    entry->program = clCreateProgramWithSource(ctx->cl_ctx, 1, &text, NULL, &err);
    free(source);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "clCreateProgramWithSource(%s): %s", request->source,
                         cl_error_name(err));
    err = clBuildProgram(entry->program, 1, &ctx->device, request->options,
                         NULL, NULL);
    /* Some drivers return an error with a successful build status (NVIDIA
     * with verbose logs): trust the status. */
    cl_build_status build_status = CL_BUILD_ERROR;
    clGetProgramBuildInfo(entry->program, ctx->device, CL_PROGRAM_BUILD_STATUS,
                          sizeof build_status, &build_status, NULL);
    if (build_status != CL_BUILD_SUCCESS) {
        char what[1400];
        snprintf(what, sizeof what, "building %s with \"%s\" failed: %s",
                 request->source, request->options, cl_error_name(err));
        return set_build_error(ctx, what, build_log(entry->program, ctx->device));
    }
    report_log_if_verbose(entry, ctx->device);
    for (int i = 0; i < request->kernel_count; ++i) {
        entry->kernels[i] =
            clCreateKernel(entry->program, request->kernel_names[i], &err);
        if (err != CL_SUCCESS) {
            char what[256];
            snprintf(what, sizeof what, "clCreateKernel(%s) in %s: %s",
                     request->kernel_names[i], request->source,
                     cl_error_name(err));
            return set_build_error(ctx, what,
                                   build_log(entry->program, ctx->device));
        }
    }
    return FLASHCL_SUCCESS;
}

static void free_entry(compiled_program *entry)
{
    for (int i = 0; i < PROGRAM_MAX_KERNELS; ++i)
        if (entry->kernels[i])
            clReleaseKernel(entry->kernels[i]);
    if (entry->program)
        clReleaseProgram(entry->program);
    pthread_mutex_destroy(&entry->launch_lock);
    free(entry->source);
    free(entry->options);
    free(entry->names);
    free(entry);
}

static char *join_names(const program_request *request)
{
    size_t len = 1;
    for (int i = 0; i < request->kernel_count; ++i)
        len += strlen(request->kernel_names[i]) + 1;
    char *names = malloc(len);
    if (!names)
        return NULL;
    names[0] = '\0';
    for (int i = 0; i < request->kernel_count; ++i) {
        strcat(names, request->kernel_names[i]);
        strcat(names, "\n");
    }
    return names;
}

static bool entry_matches(const compiled_program *entry, const char *source,
                          const char *options, const char *names)
{
    return entry->state != ENTRY_FAILED && !strcmp(entry->source, source) &&
           !strcmp(entry->options, options) && !strcmp(entry->names, names);
}

static compiled_program *new_entry(const program_request *request,
                                   char *names)
{
    compiled_program *entry = calloc(1, sizeof *entry);
    if (!entry)
        return NULL;
    entry->names = names;
    entry->source = strdup(request->source);
    entry->options = strdup(request->options);
    pthread_mutex_init(&entry->launch_lock, NULL);
    entry->state = ENTRY_BUILDING;
    if (!entry->source || !entry->options) {
        entry->names = NULL;
        free_entry(entry);
        return NULL;
    }
    return entry;
}

static void unlink_entry(flashcl_context *ctx, compiled_program *entry)
{
    for (compiled_program **at = &ctx->programs; *at; at = &(*at)->next)
        if (*at == entry) {
            *at = entry->next;
            return;
        }
}

/* Caller holds the cache lock. Waits while `entry` builds; true when it
 * ended ready, false when it failed (the caller then retries, and may
 * become the builder itself). */
static bool wait_for_build(flashcl_context *ctx, compiled_program *entry)
{
    ++entry->waiters;
    while (entry->state == ENTRY_BUILDING)
        pthread_cond_wait(&ctx->cache_changed, &ctx->cache_lock);
    --entry->waiters;
    if (entry->state == ENTRY_READY)
        return true;
    if (entry->waiters == 0)
        free_entry(entry); /* already unlinked by its builder */
    return false;
}

/* Compile `entry` (already linked, state building) without the lock. */
static flashcl_status compile_entry(flashcl_context *ctx,
                                    compiled_program *entry,
                                    const program_request *request)
{
    pthread_mutex_unlock(&ctx->cache_lock);
    const double start = now_ms();
    flashcl_status status = build(ctx, entry, request);
    const double elapsed = now_ms() - start;
    pthread_mutex_lock(&ctx->cache_lock);
    entry->compile_ms = elapsed;
    if (status == FLASHCL_SUCCESS) {
        entry->state = ENTRY_READY;
    } else {
        entry->state = ENTRY_FAILED;
        unlink_entry(ctx, entry);
    }
    pthread_cond_broadcast(&ctx->cache_changed);
    if (status != FLASHCL_SUCCESS && entry->waiters == 0)
        free_entry(entry);
    return status;
}

flashcl_status program_cache_get(flashcl_context *ctx,
                                 const program_request *request,
                                 compiled_program **out, bool *compiled_now)
{
    if (compiled_now)
        *compiled_now = false;
    char *names = join_names(request);
    if (!names)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "allocating a program cache key");
    pthread_mutex_lock(&ctx->cache_lock);
    for (;;) {
        compiled_program *found = NULL;
        for (compiled_program *e = ctx->programs; e && !found; e = e->next)
            if (entry_matches(e, request->source, request->options, names))
                found = e;
        if (!found)
            break;
        if (found->state == ENTRY_READY || wait_for_build(ctx, found)) {
            pthread_mutex_unlock(&ctx->cache_lock);
            free(names);
            *out = found;
            return FLASHCL_SUCCESS;
        }
    }
    compiled_program *entry = new_entry(request, names);
    if (!entry) {
        pthread_mutex_unlock(&ctx->cache_lock);
        free(names);
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "allocating a program cache entry");
    }
    entry->next = ctx->programs;
    ctx->programs = entry;
    flashcl_status status = compile_entry(ctx, entry, request);
    pthread_mutex_unlock(&ctx->cache_lock);
    if (status == FLASHCL_SUCCESS) {
        *out = entry;
        if (compiled_now)
            *compiled_now = true;
    }
    return status;
}

void program_cache_release(flashcl_context *ctx)
{
    compiled_program *entry = ctx->programs;
    while (entry) {
        compiled_program *next = entry->next;
        free_entry(entry);
        entry = next;
    }
    ctx->programs = NULL;
}
