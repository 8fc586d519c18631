/* Kernel paths: one unit per way of computing fused attention, behind one
 * small interface. A path knows its vendor (capability checks, its tile
 * table in its own *_tiles.h, the register and stage choices its kernel
 * derives) and nothing else knows them.
 *
 *   can_run  may it run this problem on this device? (why not, if not)
 *   plan     program source, -D options, kernel names, grid and work-group,
 *            tiles, and the measured reason for them
 *   launch   set the arguments and enqueue
 *
 * paths.c holds the ordered list; the portable path is always last and
 * runs everything. Adding a path: docs/architecture.md. */
#ifndef FLASHCL_PATH_H
#define FLASHCL_PATH_H

#include "problem/problem.h"
#include "problem/variants.h"
#include "paths/tunable.h"
#include "paths/switches.h"
#include "portable/flash_fwd_switches.clh"

typedef struct kernel_path kernel_path;
typedef struct kernel_plan kernel_plan;

/* A path's launch: programs[0] is the plan's program, programs[1] its
 * extra one (or NULL). */
typedef flashcl_status path_launch_fn(flashcl_context *ctx,
                                      cl_command_queue queue,
                                      const problem *p, const kernel_plan *plan,
                                      compiled_program *const programs[2],
                                      cl_uint num_wait,
                                      const cl_event *wait_list,
                                      cl_event *event);

struct kernel_plan {
    const kernel_path *path;
    const char *source;          /* "flash_fwd.cl" */
    const char *kernel_names[PROGRAM_MAX_KERNELS];
    int kernel_count;
    char options[1024];          /* everything that changes the binary */
    /* A second program the path runs with the same forward arguments:
     * after the first (the NVIDIA paths' exact fix-up pass), or before it
     * where `mask_bits` says so; NULL when the path has none. Its NDRange
     * is extra_global/extra_local, or the first's where extra_global[0] is
     * 0. Only the first program is patched (`patch` below). */
    const char *extra_source;
    /* its one kernel (NULL: the first program's kernel_names) */
    const char *extra_kernel;
    char extra_options[1024];
    size_t extra_global[3], extra_local[3];
    /* The extra program packs the call's mask into bits in the context's
     * scratch before the first runs, which reads them as its mask
     * (src/paths/mask_bits.c, the wgmma path's). */
    bool mask_bits;
    size_t global[3], local[3];
    /* Tiles, for describe and logs. */
    int head_dim_padded, head_dim_v_padded;
    int block_m, block_n, wg_size, vec;
    char reason[256];            /* why these tiles, measured where */
    /* Why the call must not run ("" when it may), with the status it
     * fails with; written only by plan_refuse, read only by
     * plan_refusal, so that describe, prepare and forward fail alike.
     * FLASHCL_ERROR_INVALID_VALUE: a setting the user named is not legal
     * (FLASHCL_PATH naming no path, FLASHCL_TILES illegal here): a
     * misspelt setting silently ignored would pass a test of what it
     * meant to force. FLASHCL_ERROR_UNSUPPORTED: the path cannot express
     * the plan (its -D options overflow, a switch outside its legal
     * values): a cut option string would build another binary and key
     * the program cache wrongly. */
    char refused[512];
    flashcl_status refused_status;
    /* The tuning database entry behind the tiles ("" for the path's own
     * table), for describe and `flashcl info`. */
    char tuning[320];
    /* The tuner's candidate for this path (flashcl_context_force_tiles),
     * set by choose_plan before plan(); NULL otherwise. */
    const char *forced_tiles;
    /* The split-KV service's own part of a plan it made (split_kv.h;
     * describe reads it too). */
    struct split_plan_state {
        /* the service planned this call (the portable path launches it
         * through the service then) */
        bool service;
        int parts; /* per key range (1: none) */
        uint64_t scratch_bytes; /* the context scratch the parts need */
        /* The attention kernel merges its own partials (the last
         * work-group of a query tile; FLASHCL_SPLIT_FUSED): no combine
         * kernel runs, and `counters` int32 counts in the context's
         * scratch, zero between calls, say which work-group is last. */
        bool fused;
        size_t counters;
    } split;
    /* A persistent grid (the wgmma path's FLASHCL_NV_WGMMA_PERSIST): the
     * work-groups loop over (query block, head, batch), and the kernel
     * takes heads_q and batch after the forward list
     * (FLASHCL_PERSIST_ARGS). */
    bool persistent;
    /* The plan's program is built from source, then from the binary that
     * `patch` makes of it (the wgmma path's sm_90a PTX), cached on disk
     * under `patch_kind`; NULL for the other paths. */
    program_patch_fn *patch;
    const char *patch_kind;
    /* Called when the plan's programs fail to build (with the reason): the
     * path records it so that its can_run refuses from then on, and the
     * call is planned again (the wgmma path falls back to nv_mma). */
    void (*build_failed)(const device_caps *caps, const char *why);
};

struct kernel_path {
    const char *name; /* "portable", "nv_mma" */
    /* The variants it computes (1u << VARIANT_*; VARIANTS_ALL): a new
     * variant or path edits no other path's entry. */
    uint32_t variants;
    /* What the path uses on a device it serves, for `flashcl info`. */
    const char *summary;
    /* Whether the path serves this device at all (some problems). */
    bool (*serves_device)(const device_caps *caps);
    /* True when the path can run `p`; else writes why not into `why`.
     * `forced` (FLASHCL_PATH names this path): answer whether it can
     * compute `p` correctly, ignoring any policy that would prefer another
     * path on this device (for example "measured slower than portable"). */
    bool (*can_run)(const device_caps *caps, const problem *p, bool forced,
                    char *why, size_t why_cap);
    void (*plan)(const device_caps *caps, const problem *p, kernel_plan *plan);
    path_launch_fn *launch;
    /* What `flashcl tune` may change (tunable.h), declared beside the
     * path's tile table. */
    const tunable *tunables;
    size_t tunable_count;
    /* The matrix instructions a device of its vendor offers, by what was
     * probed (for describe's matrix_path), into `offer`; false, writing
     * nothing, for another vendor's device. NULL: the path has none to
     * name. */
    bool (*offer)(const device_caps *caps, char *offer, size_t cap);
};

extern const kernel_path portable_path;
extern const kernel_path nv_mma_path;
extern const kernel_path nv_wgmma_path;
extern const kernel_path amd_mfma_path;
extern const kernel_path subgroup_path;
extern const kernel_path split_kv_path;

/* The first path in the ordered list that can run `p`. `skipped` (may be
 * NULL) collects why earlier paths could not. Never fails: the portable
 * path runs everything. */
void choose_plan(const device_caps *caps, const problem *p, kernel_plan *plan,
                 char *skipped, size_t skipped_cap);
/* choose_plan with the context's forced candidate ("path:params", NULL or
 * "" for none): that path is tried as FLASHCL_PATH would force it, and
 * plans with the parameters when it runs. */
void choose_plan_forced(const device_caps *caps, const problem *p,
                        kernel_plan *plan, char *skipped, size_t skipped_cap,
                        const char *forced_spec);
/* FLASHCL_PATH is set to a name no path has: `why` says so, naming the
 * paths there are. The reference backend plans nothing, yet refuses the
 * same setting the fused paths refuse. */
bool forced_path_unknown(char *why, size_t cap);
/* The path called `name` (NULL: none). */
const kernel_path *find_path(const char *name);
/* find_path, or the backward's tuning keys "nv_mma_bwd" (nv_mma_bwd.h)
 * and "portable_bwd" (portable_bwd_tiles.h), for what tunes tiles:
 * flashcl_path_tunable and flashcl_context_force_tiles. */
const kernel_path *find_tuned_path(const char *name);
/* The ordered path list: its length, and its i-th path (NULL past the
 * end). */
size_t paths_count(void);
const kernel_path *path_at(size_t i);

/* The matrix instructions the device offers, from the first path that
 * names its vendor's ("none" otherwise). */
void paths_matrix_offer(const device_caps *caps, char *offer, size_t cap);
/* "<summary>; ...; portable kernel otherwise" for a device. */
void paths_summary(const device_caps *caps, char *buf, size_t cap);

/* Base -D options every forward kernel takes, for a plan being built; an
 * overflow fills buf to cap - 1 bytes (options_pad_overflow). */
void plan_base_options(const problem *p, const kernel_plan *plan, char *buf,
                       size_t cap);
/* The same, appended to a checked buffer. */
void plan_base_options_add(const problem *p, const kernel_plan *plan,
                           options_buf *out);
/* The compiler flags every kernel's options start with (-cl-std, ...). */
void plan_compiler_flags(options_buf *out);
/* A path's options emitter: the compiler flags, every switch of its list
 * from `values` (the list's struct; the first illegal value into *fault),
 * then the variants'. */
typedef void switch_emitter(const problem *p, const void *values,
                            options_buf *out, switch_fault *fault);

/* The switch_emitter `emit` for the switch list LIST (values in a `type`
 * of the list's SWITCH_FIELDs). It ends with emit's prototype, so that a
 * use ends with a semicolon. */
#define SWITCH_PATH_EMITTER(emit, type, LIST)                                  \
    void emit(const problem *p, const void *switches, options_buf *out,        \
              switch_fault *fault)                                             \
    {                                                                          \
        const type *values = switches;                                         \
        plan_compiler_flags(out);                                              \
        LIST(SWITCH_EMIT)                                                      \
        variants_add_defines(p, out);                                          \
    }                                                                          \
    switch_emitter emit

/* `emit`'s options from `values` into buf[0 .. cap) (plan->options or
 * plan->extra_options), the plan refused as plan_options_done says. */
void plan_emit_options(kernel_plan *plan, char *buf, size_t cap,
                       const problem *p, switch_emitter *emit,
                       const void *values);
/* Refuses the plan with `status` and a printf message, unless it is
 * refused already (the first reason is the one the user acts on). */
void plan_refuse(kernel_plan *plan, flashcl_status status, const char *format,
                 ...) __attribute__((format(printf, 3, 4)));
/* FLASHCL_SUCCESS when the plan may run; else its refusal, set as the
 * context's error. */
flashcl_status plan_refusal(flashcl_context *ctx, const kernel_plan *plan);
/* Whether options in `out` are whole and every switch legal; if not,
 * false and why, naming `who` ("nv_mma path", "backward"). */
bool options_fault_why(const options_buf *out, switch_fault fault,
                       const char *who, char *why, size_t why_cap);

/* Refuses the plan (FLASHCL_ERROR_UNSUPPORTED) when its options
 * overflowed `out` or a switch was planned outside its legal values:
 * either would build another binary than the one planned, and a cut
 * string would be filed in the program cache under the wrong key. */
void plan_options_done(kernel_plan *plan, const options_buf *out,
                       switch_fault fault);

/* Arguments a kernel takes after the forward list, set from index
 * `first` on (the split-KV list, the packed-batch list). */
typedef struct trailing_args {
    cl_int (*set)(cl_kernel kernel, cl_uint first, const void *values);
    const void *values;
} trailing_args;

/* The body of a trailing_args `set`, expanded over the list's X-macro
 * (LIST(FLASHCL_SET_TRAILING_ARG)): each field of the struct `a` points
 * to as the next kernel argument, with `kernel`, `index` and `err` in
 * scope; the first failure stops it. */
#define FLASHCL_SET_TRAILING_ARG(kind, name)                                   \
    if (err == CL_SUCCESS)                                                     \
        err = clSetKernelArg(kernel, index++, sizeof a->name, &a->name);

/* A trailing_args `set` named `setter` over the argument list LIST, its
 * values a `type` (the list's FLASHCL_HOST_FIELDs). It ends with the
 * setter's prototype, so that a use ends with a semicolon. */
#define FLASHCL_TRAILING_ARGS_SETTER(setter, type, LIST)                       \
    cl_int setter(cl_kernel kernel, cl_uint index, const void *values)         \
    {                                                                          \
        const type *a = values;                                                \
        cl_int err = CL_SUCCESS;                                               \
        LIST(FLASHCL_SET_TRAILING_ARG)                                         \
        return err;                                                            \
    }                                                                          \
    cl_int setter(cl_kernel kernel, cl_uint index, const void *values)

/* Sets the forward list of cl/common/kernel_args.clh, then `trailing`
 * (NULL: nothing more), on kernel `which` of the program and enqueues it
 * over global/local, all under the program's launch lock so that another
 * thread's arguments cannot land in between. */
cl_int enqueue_with_args(flashcl_context *ctx, cl_command_queue queue,
                         const problem *p, compiled_program *program,
                         int which, const trailing_args *trailing,
                         const size_t global[3], const size_t *local,
                         cl_uint num_wait, const cl_event *wait_list,
                         cl_event *event);

/* enqueue_with_args on the program's first kernel over plan->global/local,
 * its failure named with the plan. */
flashcl_status enqueue_forward(flashcl_context *ctx, cl_command_queue queue,
                               const problem *p, const kernel_plan *plan,
                               compiled_program *program,
                               const trailing_args *trailing,
                               cl_uint num_wait, const cl_event *wait_list,
                               cl_event *event);

/* enqueue_forward of programs[0], then, when the plan has an extra
 * program, programs[1] after it over the plan's extra NDRange
 * (extra_global, else global) with `extra_trailing`; `event` is the last
 * command's. */
flashcl_status enqueue_forward_then_extra(
    flashcl_context *ctx, cl_command_queue queue, const problem *p,
    const kernel_plan *plan, compiled_program *const programs[2],
    const trailing_args *trailing, const trailing_args *extra_trailing,
    cl_uint num_wait, const cl_event *wait_list, cl_event *event);

/* The one-kernel launch (enqueue_forward of programs[0]), as a path's
 * `launch`. */
path_launch_fn launch_forward_kernel;

/* The plan's program: the forward kernel (flashcl_attention_fwd) of the
 * kernel file `source`, alone. */
void plan_forward_kernel(kernel_plan *plan, const char *source);
/* The NDRange of the one-kernel paths: blocks of plan->block_m query rows
 * by heads by batch, plan->wg_size work-items per group. */
void plan_row_blocks(const problem *p, kernel_plan *plan);
/* The local memory a kernel's tiles may take: the device's, or 32 KiB
 * (OpenCL's minimum) where it reports none. */
size_t plan_local_mem(const device_caps *caps);
/* Whether tiles of `need` bytes of local memory fit the device's; if
 * not, why[0 .. cap) says so. */
bool plan_local_mem_fits(const device_caps *caps, size_t need, char *why,
                         size_t cap);
/* The index of the first of `count` tile rows (`stride` bytes apart from
 * `first`, each starting with a tile_reach) for this device and padded
 * head dim; the last row when none is. */
size_t tile_reach_find(const tile_reach *first, size_t count, size_t stride,
                       const device_caps *caps, int head_dim);
/* The portable kernels' head-dim padding (16, or 32 above 128) and vector
 * width (the device's preferred float width, 4..16), which the split-KV
 * kernels share (launch.c). */
int portable_padded_head_dim(int64_t head_dim);
int portable_vector_width(const device_caps *caps);
/* Whether the compensated sums pay on this device (launch.c says why). */
bool portable_compensated(const device_caps *caps, int head_dim_v_padded);
/* The portable kernel's switch values (cl/portable/flash_fwd_switches.clh)
 * and its options emitter: the compiler flags, every switch of the list,
 * then the variants'; the first illegal value goes into *fault. */
typedef struct portable_switches {
    FLASHCL_PORTABLE_SWITCHES(SWITCH_FIELD)
} portable_switches;
/* The tile switches the split-KV kernels share with the portable kernel
 * (same names, same values from the plan): designated initializers for
 * either's switch struct. */
#define PORTABLE_TILE_SWITCH_VALUES(p, plan)                                   \
    .DTYPE = (int)(p)->dtype, .CAUSAL = (p)->right >= 0,                       \
    .HEAD_DIM = (plan)->head_dim_padded,                                       \
    .HEAD_DIM_V = (plan)->head_dim_v_padded, .BLOCK_M = (plan)->block_m,       \
    .BLOCK_N = (plan)->block_n, .WG_SIZE = (plan)->wg_size, .VEC = (plan)->vec
switch_emitter portable_emit;

/* Compile (or find) and launch: what the fused backend does per call. */
flashcl_status run_fused(flashcl_context *ctx, cl_command_queue queue,
                         const problem *p, cl_uint num_wait,
                         const cl_event *wait_list, cl_event *event);

/* Program request of a plan: which 0 is the main program, 1 the extra. */
program_request plan_request(const kernel_plan *plan, int which);

/* Compiles (or finds) the plan's programs; *compiled_ms (may be NULL) gets
 * the time this call spent compiling, 0 when all were cached. */
flashcl_status plan_programs(flashcl_context *ctx, const kernel_plan *plan,
                             compiled_program *programs[2],
                             double *compiled_ms);

/* choose_plan, then plan_programs; when a plan with build_failed set
 * cannot be built, that path is told, the call is planned again (the path
 * now refuses it) and the new plan built: the call still succeeds, with a
 * note naming the failure in flashcl_context_last_error. */
flashcl_status plan_and_build(flashcl_context *ctx, const problem *p,
                              kernel_plan *plan,
                              compiled_program *programs[2],
                              double *compiled_ms);

#endif /* FLASHCL_PATH_H */
