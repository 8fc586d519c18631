/* Runtime compilation and the per-context cache of compiled programs.
 *
 * The key is what was compiled (source name, options string, kernel
 * names), so the cache knows nothing about variants or paths: whatever
 * changes the binary is in the options. A compile runs outside the cache
 * lock, so launches of cached programs never wait for it; an entry in the
 * `building` state makes a second thread asking for the same program wait
 * for that one compile instead of starting its own.
 *
 * Before compiling, the persistent cache (binary_cache.c) is asked for
 * the program's binary, under a key that adds the platform, device and
 * driver and the hash of the expanded source to this cache's key; a
 * binary built from source goes there as soon as clBuildProgram returns,
 * before any kernel of it can run (see build()). A cache that fails in
 * any way is a compile. */
#include "core/binary_cache.h"
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

static flashcl_status create_kernels(flashcl_context *ctx,
                                     compiled_program *entry,
                                     const program_request *request)
{
    for (int i = 0; i < request->kernel_count; ++i) {
        cl_int err;
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

/* Some drivers return an error with a successful build status (NVIDIA
 * with verbose logs): trust the status. */
static bool built(const compiled_program *entry, cl_device_id device)
{
    cl_build_status status = CL_BUILD_ERROR;
    clGetProgramBuildInfo(entry->program, device, CL_PROGRAM_BUILD_STATUS,
                          sizeof status, &status, NULL);
    return status == CL_BUILD_SUCCESS;
}

static flashcl_status build_from_source(flashcl_context *ctx,
                                        compiled_program *entry,
                                        const program_request *request,
                                        const char *source)
{
    cl_int err;
    entry->program =
        clCreateProgramWithSource(ctx->cl_ctx, 1, &source, NULL, &err);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "clCreateProgramWithSource(%s): %s", request->source,
                         cl_error_name(err));
    cache_count(CACHE_SOURCE_BUILDS);
    /* FLASHCL_VERBOSE on NVIDIA: ptxas' registers and spills in the build
     * log it prints. The binary is the same, so the cache key (the options
     * without it) still names it. */
    char options[1200];
    const bool nv_verbose =
        verbose_enabled() && ctx->caps.klass == DEVICE_CLASS_GPU_NVIDIA;
    snprintf(options, sizeof options, "%s%s", request->options,
             nv_verbose ? " -cl-nv-verbose" : "");
    err = clBuildProgram(entry->program, 1, &ctx->device, options, NULL,
                         NULL);
    if (!built(entry, ctx->device)) {
        char what[1400];
        snprintf(what, sizeof what, "building %s with \"%s\" failed: %s",
                 request->source, request->options, cl_error_name(err));
        return set_build_error(ctx, what, build_log(entry->program, ctx->device));
    }
    report_log_if_verbose(entry, ctx->device);
    return create_kernels(ctx, entry, request);
}

static void release_program(compiled_program *entry)
{
    for (int i = 0; i < PROGRAM_MAX_KERNELS; ++i)
        if (entry->kernels[i]) {
            clReleaseKernel(entry->kernels[i]);
            entry->kernels[i] = NULL;
        }
    if (entry->program)
        clReleaseProgram(entry->program);
    entry->program = NULL;
}

/* Options for building a patched binary: the source's -D and -cl-std
 * options mean nothing to a binary (and might be refused by a driver);
 * FLASHCL_VERBOSE asks NVIDIA's driver for ptxas' register report. */
static const char *patched_build_options(void)
{
    return verbose_enabled() ? "-cl-nv-verbose" : "";
}

/* The program from a cached binary of `kind`; false (nothing kept, no
 * error set) when there is none or the driver refuses it, and the caller
 * compiles. */
static bool build_from_disk(flashcl_context *ctx, compiled_program *entry,
                            const program_request *request, const char *key,
                            const char *kind)
{
    const bool patched = strcmp(kind, "clbin") != 0;
    size_t size = 0;
    unsigned char *binary = binary_cache_load(kind, key, &size);
    if (!binary)
        return false;
    cl_int err, binary_status = CL_INVALID_BINARY;
    const unsigned char *binaries[1] = {binary};
    entry->program = clCreateProgramWithBinary(
        ctx->cl_ctx, 1, &ctx->device, &size, binaries, &binary_status, &err);
    free(binary);
    bool ok = err == CL_SUCCESS && binary_status == CL_SUCCESS;
    if (ok) {
        clBuildProgram(entry->program, 1, &ctx->device,
                       patched ? patched_build_options() : request->options,
                       NULL, NULL);
        ok = built(entry, ctx->device);
    }
    for (int i = 0; ok && i < request->kernel_count; ++i) {
        entry->kernels[i] =
            clCreateKernel(entry->program, request->kernel_names[i], &err);
        ok = err == CL_SUCCESS;
    }
    if (!ok) {
        release_program(entry);
        cache_count(CACHE_REFUSED);
        if (verbose_enabled())
            fprintf(stderr,
                    "flashcl: binary cache: the driver refused the cached "
                    "%s; compiling it\n",
                    request->source);
    }
    return ok;
}

/* The binary of entry->program for the one device, or NULL. */
static unsigned char *program_binary(const compiled_program *entry,
                                     size_t *size)
{
    *size = 0;
    if (clGetProgramInfo(entry->program, CL_PROGRAM_BINARY_SIZES,
                         sizeof *size, size, NULL) != CL_SUCCESS ||
        *size == 0)
        return NULL;
    unsigned char *binary = malloc(*size);
    unsigned char *binaries[1] = {binary};
    if (binary && clGetProgramInfo(entry->program, CL_PROGRAM_BINARIES,
                                   sizeof binaries, binaries,
                                   NULL) != CL_SUCCESS) {
        free(binary);
        binary = NULL;
    }
    return binary;
}

/* The program's binary for the one device, into the disk cache. */
static void store_binary(const compiled_program *entry, const char *key)
{
    size_t size = 0;
    unsigned char *binary = program_binary(entry, &size);
    if (binary)
        binary_cache_store("clbin", key, binary, size);
    free(binary);
}

static void platform_version(cl_device_id device, char *buf, size_t cap)
{
    cl_platform_id platform = NULL;
    buf[0] = '\0';
    if (clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform,
                        &platform, NULL) != CL_SUCCESS ||
        clGetPlatformInfo(platform, CL_PLATFORM_VERSION, cap, buf, NULL) !=
            CL_SUCCESS)
        buf[0] = '\0';
    buf[cap - 1] = '\0';
}

/* The disk cache's key: everything a binary depends on. The source is
 * the full text after includes (sources.c resolves them, the driver sees
 * no include path), so its hash covers every header and any
 * FLASHCL_KERNEL_DIR edit. NULL when out of memory. */
static char *disk_key(const flashcl_context *ctx,
                      const program_request *request, const char *source,
                      const char *names)
{
    const device_caps *caps = &ctx->caps;
    char hex[33], platform[256];
    cache_hash_hex(source, strlen(source), hex);
    platform_version(ctx->device, platform, sizeof platform);
    const char *fmt = "flashcl program binary\n"
                      "platform: %s | %s\n"
                      "device: %s | vendor id 0x%x | %s\n"
                      "driver: %s\n"
                      "host pointer bits: %u\n"
                      "source: %s %zu bytes, hash %s\n"
                      "options: %s\n"
                      "kernels:\n%s";
    const unsigned bits = (unsigned)(8 * sizeof(void *));
    int len = snprintf(NULL, 0, fmt, caps->platform_name, platform,
                       caps->name, caps->vendor_id, caps->device_version,
                       caps->driver_version, bits, request->source,
                       strlen(source), hex, request->options, names);
    char *key = len > 0 ? malloc((size_t)len + 1) : NULL;
    if (key)
        snprintf(key, (size_t)len + 1, fmt, caps->platform_name, platform,
                 caps->name, caps->vendor_id, caps->device_version,
                 caps->driver_version, bits, request->source, strlen(source),
                 hex, request->options, names);
    return key;
}

/* entry->program (built from source) replaced by the build of its patched
 * binary, which goes into the disk cache under (kind, key) at once. */
static flashcl_status rebuild_patched(flashcl_context *ctx,
                                      compiled_program *entry,
                                      const program_request *request,
                                      program_patch_fn *patch,
                                      const char *kind, const char *key)
{
    size_t size = 0, patched_size = 0;
    unsigned char *binary = program_binary(entry, &size);
    if (!binary)
        return set_error(ctx, FLASHCL_ERROR_BUILD_FAILED,
                         "%s: reading the program binary to patch failed",
                         request->source);
    char why[256] = "";
    unsigned char *patched = patch(binary, size, &patched_size, why,
                                   sizeof why);
    free(binary);
    if (!patched)
        return set_error(ctx, FLASHCL_ERROR_BUILD_FAILED,
                         "%s: patching the program binary failed: %s",
                         request->source, why);
    release_program(entry);
    cl_int err, binary_status = CL_INVALID_BINARY;
    const unsigned char *binaries[1] = {patched};
    entry->program =
        clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &patched_size,
                                  binaries, &binary_status, &err);
    if (err != CL_SUCCESS || binary_status != CL_SUCCESS) {
        free(patched);
        return set_error(ctx, FLASHCL_ERROR_BUILD_FAILED,
                         "%s: clCreateProgramWithBinary of the patched binary: "
                         "%s / %s", request->source, cl_error_name(err),
                         cl_error_name(binary_status));
    }
    err = clBuildProgram(entry->program, 1, &ctx->device,
                         patched_build_options(), NULL, NULL);
    if (!built(entry, ctx->device)) {
        free(patched);
        char what[512];
        snprintf(what, sizeof what, "%s: building the patched binary failed: "
                 "%s", request->source, cl_error_name(err));
        return set_build_error(ctx, what,
                               build_log(entry->program, ctx->device));
    }
    report_log_if_verbose(entry, ctx->device);
    flashcl_status status = create_kernels(ctx, entry, request);
    if (status == FLASHCL_SUCCESS && key)
        binary_cache_store(kind, key, patched, patched_size);
    free(patched);
    return status;
}

/* From the disk cache when it holds the program, else from source (and
 * then into the disk cache; a patched program: source, patch, binary).
 *
 * A binary built from source is stored here, while its entry is still
 * building: no kernel of the program has been enqueued, so no driver is
 * asked for a binary while that program runs (PoCL aborts then:
 * pocl_release_dlhandle_cache's assertion, issue 42), and the context's
 * release does no binary work. Asking PoCL for a binary makes it generate
 * code for every kernel of the program (about 3 s a program on the CI
 * machine): here that is part of the compile a cold cache pays anyway; at
 * release it was minutes of silence. The price: PoCL's binary then lacks
 * the work-group function the first launch compiles for its local size,
 * so with PoCL's own kernel cache off a warm first call still compiles
 * it (docs/binary-cache.md). */
static flashcl_status build(flashcl_context *ctx, compiled_program *entry,
                            const program_request *request,
                            program_patch_fn *patch, const char *kind)
{
    char msg[512];
    char *source = load_kernel_source(request->source, msg, sizeof msg);
    if (!source)
        return set_error(ctx, FLASHCL_ERROR_BUILD_FAILED, "%s", msg);
    char *key = binary_cache_enabled()
                    ? disk_key(ctx, request, source, entry->names)
                    : NULL;
    flashcl_status status = FLASHCL_SUCCESS;
    if (!key || !build_from_disk(ctx, entry, request, key,
                                 patch ? kind : "clbin")) {
        status = build_from_source(ctx, entry, request, source);
        if (status == FLASHCL_SUCCESS && patch)
            status = rebuild_patched(ctx, entry, request, patch, kind, key);
        else if (status == FLASHCL_SUCCESS && key)
            store_binary(entry, key);
    }
    free(key);
    free(source);
    return status;
}

static void free_entry(compiled_program *entry)
{
    release_program(entry);
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
                                    const program_request *request,
                                    program_patch_fn *patch, const char *kind)
{
    pthread_mutex_unlock(&ctx->cache_lock);
    const double start = now_ms();
    flashcl_status status = build(ctx, entry, request, patch, kind);
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
    return program_cache_get_patched(ctx, request, NULL, NULL, out,
                                     compiled_now);
}

flashcl_status program_cache_get_patched(flashcl_context *ctx,
                                         const program_request *request,
                                         program_patch_fn *patch,
                                         const char *kind,
                                         compiled_program **out,
                                         bool *compiled_now)
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
    flashcl_status status = compile_entry(ctx, entry, request, patch, kind);
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
