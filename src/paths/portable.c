/* The portable path: cl/portable/flash_fwd.cl, one work-item per query row,
 * any device, every dtype and variant; in split-KV mode (src/paths/
 * split_kv.c) cl/inference/flash_split.cl. It is the last path of the list and
 * never refuses a problem. */
#include "paths/path.h"
#include "paths/portable_tiles.h"

#include <stdio.h>
#include <string.h>

static bool portable_can_run(const device_caps *caps, const problem *p,
                             bool forced, char *why, size_t why_cap)
{
    (void)caps;
    (void)p;
    (void)forced;
    (void)why;
    (void)why_cap;
    return true;
}

/* Padded head dims keep the number of compiled variants small while
 * wasting at most 15 (31 above 128) lanes of work per row. */
int portable_padded_head_dim(int64_t head_dim)
{
    int step = head_dim <= 128 ? 16 : 32;
    return (int)((head_dim + step - 1) / step * step);
}

static const portable_tile *lookup(const device_caps *caps, int head_dim)
{
    const bool cpu = caps->klass == DEVICE_CLASS_CPU;
    const size_t n = sizeof portable_tiles / sizeof portable_tiles[0];
    for (size_t i = 0; i < n; ++i)
        if (portable_tiles[i].cpu == cpu &&
            head_dim <= portable_tiles[i].max_head_dim)
            return &portable_tiles[i];
    return &portable_tiles[n - 1];
}

/* Vectors as wide as the device prefers for floats (16 on AVX-512, 8 on
 * AVX2 under PoCL): wider ones change the calling convention there, and
 * PoCL warns about it on every compile. */
int portable_vector_width(const device_caps *caps)
{
    unsigned width = caps->preferred_vector_float ? caps->preferred_vector_float
                                                  : caps->native_vector_float;
    int vec = 4;
    while (vec < 16 && (unsigned)vec * 2 <= width)
        vec *= 2;
    return vec;
}

static size_t local_bytes(const kernel_plan *plan, flashcl_dtype dtype)
{
    const size_t real_size = dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
    const int d = plan->head_dim_padded, dv = plan->head_dim_v_padded;
    const int stage = d > dv ? d : dv;
    return ((size_t)plan->block_m * (size_t)stage +
            (size_t)plan->block_n * (size_t)(d + dv)) *
           real_size;
}

/* Shrink tiles until the Q, K and V tiles fit the device's local memory
 * (D = 256 fp32 ends at 16 x 16 in 48 KiB, fp64 at 8 x 8). */
static void fit_local_memory(const device_caps *caps, const problem *p,
                             kernel_plan *plan)
{
    const int min_tile = plan->vec > 8 ? plan->vec : 8;
    const size_t limit = caps->local_mem ? (size_t)caps->local_mem : 32768;
    while (local_bytes(plan, p->dtype) > limit &&
           (plan->block_m > min_tile || plan->block_n > min_tile)) {
        if (plan->block_m >= plan->block_n && plan->block_m > min_tile)
            plan->block_m /= 2;
        else
            plan->block_n /= 2;
    }
    if (caps->max_work_group && (size_t)plan->block_m > caps->max_work_group)
        plan->block_m = (int)caps->max_work_group;
}

static void write_reason(const problem *p, const portable_tile *tile,
                         kernel_plan *plan)
{
    const char *storage =
        p->dtype == FLASHCL_DTYPE_FP64 ? "fp64 storage, fp64 arithmetic: "
                                         "tiles not measured for fp64; "
        : p->dtype == FLASHCL_DTYPE_FP32 ? ""
                                         : "16-bit storage converted to fp32 "
                                           "on load, so the fp32 tiles: ";
    snprintf(plan->reason, sizeof plan->reason, "%s%s; here %dx%d, %d-wide",
             storage, tile->measured, plan->block_m, plan->block_n, plan->vec);
}

/* The compensated row sum and accumulator (cl/portable/flash_fwd.cl) keep
 * fp32 error at unit roundoff for any seqlen_k; they need a second
 * accumulator array. On the H200 that cost nothing at D_v <= 64 and made
 * D_v = 128 3.1x slower (fp32, B=8 H=16 N=2048: 114 vs 37 ms; the two
 * 128-float arrays spill), so GPUs take plain sums above 64 (error grows
 * with seqlen_k there: 2e-5 at 1M keys, 6.6e-5 at 4M, for evenly spread
 * attention). CPUs (PoCL: within noise) always compensate. */
bool portable_compensated(const device_caps *caps, int head_dim_v_padded)
{
    return caps->klass == DEVICE_CLASS_CPU || head_dim_v_padded <= 64;
}

static bool compensated(const device_caps *caps, const kernel_plan *plan)
{
    return portable_compensated(caps, plan->head_dim_v_padded);
}

static void portable_plan(const device_caps *caps, const problem *p,
                          kernel_plan *plan)
{
    if (split_kv_wanted(caps, p)) {
        split_kv_plan(caps, p, plan);
        return;
    }
    plan->source = "flash_fwd.cl";
    plan->kernel_names[0] = "flashcl_attention_fwd";
    plan->kernel_count = 1;
    plan->head_dim_padded = portable_padded_head_dim(p->head_dim);
    plan->head_dim_v_padded = portable_padded_head_dim(p->head_dim_v);
    const portable_tile *tile = lookup(caps, plan->head_dim_padded);
    plan->block_m = tile->block_m;
    plan->block_n = tile->block_n;
    plan->vec = tile->vec ? tile->vec : portable_vector_width(caps);
    if (tile->cpu) /* PoCL runs padding rows in full */
        while (plan->block_m > 16 && plan->block_m / 2 >= p->seqlen_q)
            plan->block_m /= 2;
    fit_local_memory(caps, p, plan);
    plan->wg_size = plan->block_m;
    write_reason(p, tile, plan);
    if (!compensated(caps, plan)) {
        size_t n = strlen(plan->reason);
        snprintf(plan->reason + n, sizeof plan->reason - n,
                 "; plain sums (compensated ones spill at D_v > 64 on GPUs)");
    }

    const bool contiguous = p->q.stride[3] == 1 && p->k.stride[3] == 1 &&
                            p->v.stride[3] == 1 && p->o.stride[3] == 1;
    plan_base_options(p, plan, plan->options, sizeof plan->options);
    size_t len = strlen(plan->options);
    snprintf(plan->options + len, sizeof plan->options - len,
             " -DFLASHCL_VEC=%d -DFLASHCL_DIM_CONTIGUOUS=%d%s", plan->vec,
             contiguous ? 1 : 0,
             compensated(caps, plan) ? "" : " -DFLASHCL_COMPENSATED=0");
    variants_append_defines(p, plan->options, sizeof plan->options);

    plan_row_blocks(p, plan);
}

static bool serves_every_device(const device_caps *caps)
{
    (void)caps;
    return true;
}

/* The one-kernel launch, or the split-KV kernels' own. */
static flashcl_status portable_launch(flashcl_context *ctx,
                                      cl_command_queue queue,
                                      const problem *p,
                                      const kernel_plan *plan,
                                      compiled_program *const programs[2],
                                      cl_uint num_wait,
                                      const cl_event *wait_list,
                                      cl_event *event)
{
    return (plan->split_kernel ? split_kv_launch : launch_forward_kernel)(
        ctx, queue, p, plan, programs, num_wait, wait_list, event);
}

/* name, bit, summary, serves_device, can_run, plan, launch */
const kernel_path portable_path = {
    "portable", PATH_BIT_PORTABLE,
    "portable kernel (fp32 FMA; fp64 for fp64 storage; split-KV kernels for "
    "decoding, KV caches, varlen and paged KV)",
    serves_every_device, portable_can_run, portable_plan, portable_launch};
