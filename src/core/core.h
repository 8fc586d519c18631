/* The core of the host library: the context, what was probed off its
 * device, diagnostics, kernel sources and the program cache. Nothing here
 * knows about attention problems, variants or kernel paths. */
#ifndef FLASHCL_CORE_H
#define FLASHCL_CORE_H

#include "flashcl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FLASHCL_MAX_HEAD_DIM 256

/* ---- device probe (probe.c) ---------------------------------------- */

typedef enum device_class {
    DEVICE_CLASS_CPU = 0,
    DEVICE_CLASS_GPU_GENERIC,
    DEVICE_CLASS_GPU_NVIDIA,
    DEVICE_CLASS_GPU_AMD,
    DEVICE_CLASS_GPU_INTEL
} device_class;

/* What flashcl reads off a device once, when a context is created. Paths
 * decide from these fields only, never from device names. */
typedef struct device_caps {
    char name[256];
    char vendor[256];
    char platform_name[256];
    char platform_vendor[256];
    char driver_version[128];
    char device_version[128];
    char opencl_c_version[128];
    cl_uint vendor_id;
    cl_device_type type;
    cl_uint compute_units;
    cl_uint clock_mhz;
    cl_ulong global_mem;
    cl_ulong local_mem;
    cl_ulong max_alloc;
    size_t max_work_group;
    cl_uint mem_base_addr_align_bits;
    cl_uint preferred_vector_float; /* CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT */
    cl_uint native_vector_float;    /* CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT */
    bool has_fp64;
    bool has_fp16_ext;   /* cl_khr_fp16 listed */
    bool has_subgroups;  /* cl_khr_subgroups or cl_intel_subgroups */
    bool has_intel_subgroups;      /* cl_intel_subgroups (block reads) */
    bool has_subgroup_shuffle;     /* cl_khr_subgroup_shuffle or intel's */
    bool has_reqd_subgroup_size;   /* cl_intel_required_subgroup_size */
    /* CL_DEVICE_SUB_GROUP_SIZES_INTEL, ascending; count 0 when unknown */
    cl_uint subgroup_sizes[8];
    cl_uint subgroup_size_count;
    bool has_nv_attribute_query;
    cl_uint nv_cc_major; /* 0 when unknown */
    cl_uint nv_cc_minor;
    char amd_gfx[64];    /* "" when unknown */
    cl_uint amd_wavefront; /* CL_DEVICE_WAVEFRONT_WIDTH_AMD, 0 unknown */
    /* PoCL (platform vendor "The pocl project"): it runs a work-group's
     * work-items as loops on one thread, so a kernel whose work-items do
     * little pays mostly for their count (the combine: 37x) */
    bool pocl;
    device_class klass;
} device_caps;

/* Fill caps from the device; never fails hard (unknown values stay 0/""). */
void probe_device(cl_device_id device, device_caps *caps);

/* Resolve a device spec (grammar in flashcl.h). On failure writes a message
 * listing the available devices into msg. */
flashcl_status select_device(const char *spec, cl_device_id *device,
                             cl_platform_id *platform, char *msg,
                             size_t msg_cap);

/* ---- diagnostics (errors.c) ----------------------------------------
 * Messages are per thread (see flashcl.h): set_error records this thread's
 * failure on ctx and returns `status`; begin_call clears it at the start of
 * every public call. */

flashcl_status set_error(flashcl_context *ctx, flashcl_status status,
                         const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Record a build failure with the full log (takes ownership of log). */
flashcl_status set_build_error(flashcl_context *ctx, const char *what,
                               char *log);
void begin_call(const flashcl_context *ctx);
/* The start of a public call that writes through `out` (named out_name;
 * NULL name: nothing to check): FLASHCL_ERROR_NULL_ARGUMENT for a NULL
 * ctx (nowhere to record why) or a NULL `out` (recorded); else
 * begin_call's. */
flashcl_status begin_call_out(flashcl_context *ctx, const void *out,
                              const char *out_name);
/* A note in this thread's last-error text for a call that still succeeds
 * (a setting that was ignored, and why); the next call clears it. */
void note_for_call(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* A context about to be freed: this thread's message for it goes too. */
void forget_context_errors(const flashcl_context *ctx);
const char *cl_error_name(cl_int err);

/* Non-zero when FLASHCL_VERBOSE asks the library to print build logs. */
bool verbose_enabled(void);

/* ---- kernel sources (sources.c) ------------------------------------ */

/* Full source of `file` (a base name, "flash_fwd.cl") with `#include
 * "x.clh"` lines resolved, from the embedded table or, when
 * FLASHCL_KERNEL_DIR is set, from that folder (at the same relative path
 * as in cl/, or directly inside it). Caller frees. NULL with msg set when a
 * file is missing, empty, not a regular file or unreadable. */
char *load_kernel_source(const char *file, char *msg, size_t msg_cap);

/* ---- program cache (program_cache.c) ------------------------------- */

#define PROGRAM_MAX_KERNELS 5

/* What was compiled: the key is the source name, the exact options
 * string and the kernel names, and nothing else. */
typedef struct program_request {
    const char *source;  /* "flash_fwd.cl" */
    const char *options; /* full clBuildProgram options */
    const char *kernel_names[PROGRAM_MAX_KERNELS];
    int kernel_count;
} program_request;

typedef struct compiled_program compiled_program;
struct compiled_program {
    char *source, *options, *names; /* the key ("a\nb" for names) */
    cl_program program;
    cl_kernel kernels[PROGRAM_MAX_KERNELS];
    /* clSetKernelArg and the enqueue that follows are one step. */
    pthread_mutex_t launch_lock;
    double compile_ms;
    int state; /* program_cache.c: building, ready or failed */
    int waiters;
    compiled_program *next;
};

/* The program for `request`, compiling it on first use. The compile runs
 * outside the cache lock; a second thread asking for the same program
 * while it compiles waits for that compile. *compiled_now (may be NULL)
 * says whether this call compiled it. */
flashcl_status program_cache_get(flashcl_context *ctx,
                                 const program_request *request,
                                 compiled_program **out, bool *compiled_now);

/* Rewrites the binary a program was built into (from source) into the
 * binary to build instead (the wgmma path's PTX patch); NULL with the
 * reason in `why` when it cannot. The result is malloc'd; *out_size is
 * what the driver gets (a text binary counts its terminating NUL). */
typedef unsigned char *program_patch_fn(const unsigned char *binary,
                                        size_t size, size_t *out_size,
                                        char *why, size_t why_cap);
/* program_cache_get for a program whose source build is followed by
 * `patch` and a build of the patched binary (clCreateProgramWithBinary).
 * The disk cache keeps the patched binary under `kind`, so a later process
 * skips the source build and the patch. A failed patch or binary build is
 * FLASHCL_ERROR_BUILD_FAILED with the reason. */
flashcl_status program_cache_get_patched(flashcl_context *ctx,
                                         const program_request *request,
                                         program_patch_fn *patch,
                                         const char *kind,
                                         compiled_program **out,
                                         bool *compiled_now);
void program_cache_release(flashcl_context *ctx);

/* ---- context (context.c) ------------------------------------------- */

struct flashcl_context {
    cl_context cl_ctx;
    cl_device_id device;
    cl_command_queue queue;
    device_caps caps;
    pthread_mutex_t cache_lock;
    pthread_cond_t cache_changed; /* a compile finished */
    compiled_program *programs;
    cl_mem dummy; /* 16-byte buffer for absent tensor arguments */
    /* A backend's own per-context state (the reference backend's
     * scratch), created on first use under cache_lock, and the hook that
     * frees it at context release: core names no backend. */
    void *backend_state;
    void (*backend_state_release)(void *state);
    /* Split-KV scratch (src/paths/split_kv.c) and the wgmma path's packed
     * mask (src/paths/mask_bits.c), core/scratch.h's sets, created on
     * first use under cache_lock; their cap from
     * flashcl_context_set_split_scratch_limit (0: environment variable or
     * default), read under cache_lock. */
    struct scratch_set *split;
    struct scratch_set *mask_bits;
    size_t split_limit;
    /* flashcl_context_force_tiles: "path:params", "" for none; read and
     * written under cache_lock. */
    char forced_tiles[320];
};

/* A copy of ctx->forced_tiles into buf (NULL when none is set). */
const char *context_forced_tiles(flashcl_context *ctx, char *buf, size_t cap);

/* "268435456", "256M", "1G", "512k": a positive byte count with an
 * optional binary suffix. */
bool parse_byte_count(const char *text, size_t *out);
/* A scratch cap in bytes: `set_value` when non-zero, else the
 * environment variable `env_name` when set (FLASHCL_ERROR_INVALID_VALUE,
 * with a message naming it, when it is not a byte count), else
 * `fallback`. */
flashcl_status scratch_cap_from(flashcl_context *ctx, size_t set_value,
                                const char *env_name, size_t fallback,
                                size_t *bytes);

/* The split-KV scratch cap the next call uses: the setter's value, else
 * FLASHCL_SPLIT_SCRATCH_LIMIT, else 256 MiB capped at a quarter of the
 * device's largest allocation. */
flashcl_status split_scratch_cap(flashcl_context *ctx, size_t *bytes);


#endif /* FLASHCL_CORE_H */
