/* Internal declarations shared by the library's source files. */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include "flashcl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FLASHCL_MAX_HEAD_DIM 256
#define FLASHCL_ERROR_CAPACITY 1024

/* ---- device probe (probe.c) ---------------------------------------- */

typedef enum device_class {
    DEVICE_CLASS_CPU = 0,
    DEVICE_CLASS_GPU_GENERIC,
    DEVICE_CLASS_GPU_NVIDIA,
    DEVICE_CLASS_GPU_AMD,
    DEVICE_CLASS_GPU_INTEL
} device_class;

/* What flashcl reads off a device once, when a context is created. */
typedef struct device_caps {
    char name[256];
    char vendor[256];
    char platform_name[256];
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
    bool has_fp64;
    bool has_fp16_ext;   /* cl_khr_fp16 listed */
    bool has_subgroups;  /* cl_khr_subgroups or cl_intel_subgroups */
    bool has_nv_attribute_query;
    cl_uint nv_cc_major; /* 0 when unknown */
    cl_uint nv_cc_minor;
    char amd_gfx[64];    /* "" when unknown */
    device_class klass;
} device_caps;

/* Fill caps from the device; never fails hard (unknown values stay 0/""). */
void probe_device(cl_device_id device, device_caps *caps);

/* Resolve a device spec (grammar in flashcl.h). On failure writes a message
 * listing the available devices into msg. */
flashcl_status select_device(const char *spec, cl_device_id *device,
                             cl_platform_id *platform, char *msg,
                             size_t msg_cap);

/* ---- variants (variant.c) ------------------------------------------ */

typedef enum kernel_family {
    KERNEL_PORTABLE = 0, /* cl/flash_fwd.cl */
    KERNEL_NV_MMA = 1    /* cl/flash_fwd_mma.cl, inline PTX mma.sync */
} kernel_family;

/* Everything that selects one compiled program. */
typedef struct variant_key {
    kernel_family family;
    int head_dim_padded;
    int block_m;
    int block_n;
    int wg_size;
    int vec;
    int dtype;
    int causal; /* band bounded on the right (causal or window_right) */
    int dim_contiguous;
    /* Portable-kernel variants (zero on the NVIDIA path). */
    int head_dim_v_padded;
    int window_left; /* band bounded on the left */
    int softcap, alibi, mask, sinks;
    int bias; /* 0 none, 1 fp32, 2 fp16, 3 bf16 */
    int top_left; /* NVIDIA kernel: causal diagonal at the top-left */
} variant_key;

/* The problem properties that variant choice depends on. */
typedef struct variant_query {
    int64_t seqlen_q; /* short queries get smaller row blocks on CPUs */
    int head_dim;
    int head_dim_v;
    flashcl_dtype dtype;
    int causal; /* band bounded on the right */
    bool dim_contiguous;
    bool rows_aligned_16B; /* all row starts 16-byte aligned */
    bool has_variants;     /* beyond plain or causal (either alignment) */
    bool top_left;         /* the diagonal is 0 rather than Nk - Nq */
    int window_left, softcap, alibi, mask, sinks, bias;
} variant_query;

/* The one place that maps (head dim, dtype, causal, device) to tiles. */
void choose_variant(const device_caps *caps, const variant_query *query,
                    variant_key *key, const char **reason);

/* The source file of a kernel family ("flash_fwd.cl"). */
const char *kernel_family_file(kernel_family family);

/* ---- kernel sources (sources.c, generated table) -------------------- */

/* Full source of `file` with `#include "x.clh"` lines resolved, from the
 * embedded table or from $FLASHCL_KERNEL_DIR. Caller frees. NULL with msg
 * set when missing. */
char *load_kernel_source(const char *file, char *msg, size_t msg_cap);

/* ---- program cache (program_cache.c) ------------------------------- */

typedef struct cached_kernel {
    variant_key key;
    cl_program program;
    cl_kernel kernel;
    pthread_mutex_t launch_lock; /* clSetKernelArg + enqueue are one step */
    double compile_ms;
    struct cached_kernel *next;
} cached_kernel;

/* ---- context (context.c) ------------------------------------------- */

struct flashcl_context {
    cl_context cl_ctx;
    cl_device_id device;
    cl_command_queue queue;
    device_caps caps;
    pthread_mutex_t cache_lock;
    cached_kernel *kernels;
    cl_mem dummy_lse; /* 4-byte buffer for the lse argument when unused */
    pthread_mutex_t error_lock;
    char last_error[FLASHCL_ERROR_CAPACITY];
    char *build_log; /* full log after a failed build; owned */
    /* Reference backend's programs and scratch; created on first use under
     * cache_lock (backend_reference.c). */
    struct reference_state *reference;
};

/* Record a failure and return `status`, printf-style. */
flashcl_status set_error(flashcl_context *ctx, flashcl_status status,
                         const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Record a build failure with the full log (takes ownership of log). */
flashcl_status set_build_error(flashcl_context *ctx, const char *what,
                               char *log);
void clear_error(flashcl_context *ctx);
const char *cl_error_name(cl_int err);

bool variant_key_equal(const variant_key *a, const variant_key *b);

/* Compile cl/`file` (includes resolved) with `options` for the context's
 * device. On failure *out may hold the failed program (caller releases it)
 * and the context's error holds the build log. */
flashcl_status build_program_file(flashcl_context *ctx, const char *file,
                                  const char *options, cl_program *out);

/* Compiled kernel for a variant, compiling and caching on first use;
 * *compiled_now (may be NULL) says whether this call compiled it. */
flashcl_status get_kernel(flashcl_context *ctx, const variant_key *key,
                          cached_kernel **out, bool *compiled_now);
void release_kernel_cache(flashcl_context *ctx);

/* Build options string for a variant. */
void variant_build_options(const variant_key *key, const device_caps *caps,
                           char *buf, size_t cap);

/* ---- validation (validate.c) --------------------------------------- */

/* A fully resolved problem: defaults applied, strides explicit. */
typedef struct resolved_tensor {
    cl_mem buffer;
    uint64_t base;      /* element offset */
    uint64_t stride[4]; /* batch, head, seq, dim; elements */
    uint64_t first_byte, end_byte; /* byte range the view touches */
    bool present;
} resolved_tensor;

typedef struct resolved_problem {
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int64_t head_dim_v; /* head dim of V and O (desc 0 -> head_dim) */
    flashcl_dtype dtype;
    size_t elem_size;
    int causal;
    double scale; /* default 1/sqrt(D) computed in double for fp64 */
    resolved_tensor q, k, v, o, lse;
    bool empty; /* nothing to compute (zero batch/heads/seqlen_q) */

    /* Visibility: query i sees key j iff
     *   (left < 0  || j >= i + diag - left) &&
     *   (right < 0 || j <= i + diag + right) && j < seqlen_k
     * with causal already folded into right (right = min(right, 0)). */
    int64_t diag;  /* seqlen_k - seqlen_q (bottom-right) or 0 (top-left) */
    int64_t left;  /* -1: unbounded */
    int64_t right; /* -1: unbounded */
    float softcap; /* 0: off */
    /* Optional per-score inputs; .present says whether each is on. Strides
     * of bias/mask are (batch, head, query, key); alibi and sinks use
     * stride[0] (batch) and stride[1] (head). */
    resolved_tensor alibi, bias, mask, sinks;
    flashcl_dtype bias_dtype;
    bool has_variants; /* any of window/alibi/bias/mask/softcap/sinks/D_v */
} resolved_problem;

/* Check the shape and enum/value fields only (no tensors). */
flashcl_status validate_shape(flashcl_context *ctx,
                              const flashcl_attention_desc *desc);

/* Fill the scalar part of a problem (dims, defaults, visibility band,
 * which optional inputs are present) from an already shape-checked desc. */
void resolve_problem_scalars(const flashcl_attention_desc *desc,
                             resolved_problem *p);

/* Check every field of desc against the context; fill problem. */
flashcl_status validate_desc(flashcl_context *ctx,
                             const flashcl_attention_desc *desc,
                             resolved_problem *problem);

size_t dtype_size(flashcl_dtype dtype);

/* ---- launch (launch.c) --------------------------------------------- */

/* Properties of a validated problem that variant choice reads. */
void problem_variant_query(const resolved_problem *p, variant_query *query);

flashcl_status launch_fused(flashcl_context *ctx, cl_command_queue queue,
                            const flashcl_attention_desc *desc,
                            const resolved_problem *problem, cl_uint num_wait,
                            const cl_event *wait_list, cl_event *event);

/* ---- reference backend (backend_reference.c) ----------------------- */

typedef struct reference_state reference_state;

/* Enqueue a validated, non-empty problem on the unfused CLBlast path. */
flashcl_status launch_reference(flashcl_context *ctx, cl_command_queue queue,
                                const flashcl_attention_desc *desc,
                                const resolved_problem *problem,
                                cl_uint num_wait, const cl_event *wait_list,
                                cl_event *event);

/* Free the reference backend's programs and scratch (context release). */
void reference_state_release(flashcl_context *ctx);

#endif /* FLASHCL_INTERNAL_H */
