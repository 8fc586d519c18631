/* The subgroup path: cl/subgroup/flash_fwd_sg.cl, a subgroup per few query
 * rows (lanes split over keys and over D_v, row max and sum by subgroup
 * reductions, P shared by shuffles, K/V by block reads where
 * cl_intel_subgroups exists), for devices that report subgroups and let a
 * kernel require its subgroup size (cl_intel_required_subgroup_size: the
 * kernel is compiled for one size). Every dtype and variant. */
#include "core/dev_env.h"
#include "paths/path.h"
#include "subgroup/flash_fwd_sg_switches.clh"
#include "paths/subgroup_tiles.h"
#include "paths/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CPUs: the subgroup kernel was not faster than the portable one on
 * Intel's OpenCL CPU runtime (bench/results/intel-cpu-2026-12-01-
 * subgroup.md: D = 64 1.1-1.75x slower, D = 128 unclear under load). */
static const bool cpu_prefers_subgroup = false;

static bool has_size(const device_caps *caps, unsigned size)
{
    for (cl_uint i = 0; i < caps->subgroup_size_count; ++i)
        if (caps->subgroup_sizes[i] == size)
            return true;
    return false;
}

/* Not 4: Intel's CPU compiler 2026.2 aborted the process (X86 instruction
 * selection) on some variants at subgroup size 4. */
static bool kernel_size_ok(unsigned size)
{
    return size == 8 || size == 16 || size == 32 || size == 64;
}

/* 16 where offered (Intel GPUs' usual best, and the 16 fp32 lanes of an
 * AVX-512 register), else the largest size the kernel takes up to 32. */
static unsigned default_size(const device_caps *caps)
{
    if (has_size(caps, 16))
        return 16;
    unsigned best = 0;
    for (cl_uint i = 0; i < caps->subgroup_size_count; ++i) {
        const unsigned s = caps->subgroup_sizes[i];
        if (kernel_size_ok(s) && s <= 32 && s > best)
            best = s;
    }
    return best;
}

/* FLASHCL_SUBGROUP_SIZE=<n> picks the subgroup size (CI runs 8, 16, 32);
 * it must be one the device reports. Read per call, as FLASHCL_PATH is.
 * 0 when unset, -1 when not a positive number. */
static long env_size(void)
{
    const char *text = dev_getenv("FLASHCL_SUBGROUP_SIZE");
    if (!text || !*text)
        return 0;
    char *end = NULL;
    long size = strtol(text, &end, 10);
    return *end == '\0' && size > 0 ? size : -1;
}

static unsigned chosen_size(const device_caps *caps)
{
    const long asked = env_size();
    return asked > 0 ? (unsigned)asked : default_size(caps);
}

static bool serves(const device_caps *caps)
{
    return caps->has_subgroups && caps->has_reqd_subgroup_size &&
           default_size(caps) != 0;
}

static void list_sizes(const device_caps *caps, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (cl_uint i = 0; i < caps->subgroup_size_count && len < cap; ++i) {
        int n = snprintf(buf + len, cap - len, "%s%u", i ? ", " : "",
                         caps->subgroup_sizes[i]);
        if (n < 0)
            return;
        len += (size_t)n;
    }
}

static bool size_refused(const device_caps *caps, char *why, size_t cap)
{
    const long asked = env_size();
    if (asked == 0)
        return false;
    char sizes[96];
    list_sizes(caps, sizes, sizeof sizes);
    if (asked < 0 || !has_size(caps, (unsigned)asked) ||
        !kernel_size_ok((unsigned)asked)) {
        snprintf(why, cap,
                 "FLASHCL_SUBGROUP_SIZE=%.16s is not one of the device's "
                 "subgroup sizes (%s) that the kernel takes (8, 16, 32, 64)",
                 dev_getenv("FLASHCL_SUBGROUP_SIZE"), sizes);
        return true;
    }
    return false;
}

/* Policy when not forced: chosen only where it measured faster than the
 * portable kernel. No GPU has been measured yet, so on GPUs it runs only
 * when forced; on CPUs cpu_prefers_subgroup records the measurement. */
static bool preferred(const device_caps *caps, char *why, size_t cap)
{
    if (caps->klass != DEVICE_CLASS_CPU) {
        snprintf(why, cap, "not yet measured faster than the portable "
                           "kernel on any GPU (FLASHCL_PATH=subgroup runs "
                           "it)");
        return false;
    }
    if (!cpu_prefers_subgroup)
        snprintf(why, cap, "not faster than the portable kernel on "
                           "Intel's OpenCL CPU runtime (FLASHCL_PATH="
                           "subgroup runs it)");
    return cpu_prefers_subgroup;
}

static bool plan_tiles(const device_caps *caps, const problem *p,
                       kernel_plan *plan);

static bool subgroup_can_run(const device_caps *caps, const problem *p,
                             bool forced, char *why, size_t cap)
{
    if (!serves(caps)) {
        snprintf(why, cap, "needs subgroups (cl_khr_subgroups or "
                           "cl_intel_subgroups) and "
                           "cl_intel_required_subgroup_size");
        return false;
    }
    if (size_refused(caps, why, cap))
        return false;
    if (variants_refused(p, subgroup_path.variants, why, cap))
        return false;
    kernel_plan tiles;
    memset(&tiles, 0, sizeof tiles);
    if (!plan_tiles(caps, p, &tiles)) {
        snprintf(why, cap, "its smallest tiles (%d rows, %d keys, D %d, D_v "
                 "%d) do not fit the device's local memory",
                 tiles.block_m, tiles.block_n, tiles.head_dim_padded,
                 tiles.head_dim_v_padded);
        return false;
    }
    return forced || preferred(caps, why, cap);
}

static const subgroup_tile *lookup(const device_caps *caps, int head_dim)
{
    const size_t n = sizeof subgroup_tiles / sizeof subgroup_tiles[0];
    return &subgroup_tiles[tile_reach_find(
        &subgroup_tiles[0].reach, n, sizeof subgroup_tiles[0], caps, head_dim)];
}

static int round_up(int64_t value, int step)
{
    return (int)((value + step - 1) / step * step);
}

static size_t local_bytes(const kernel_plan *plan, flashcl_dtype dtype)
{
    const size_t real_size = dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
    const size_t d = (size_t)plan->head_dim_padded;
    const size_t dv = (size_t)plan->head_dim_v_padded;
    return ((size_t)plan->block_m * d +
            (size_t)plan->block_n * (d + dv)) * real_size;
}

/* Keys per tile, then subgroups, then rows, halved until the tiles fit the
 * device's local memory and work-group size; false when even the smallest
 * do not. */
static bool fit_device(const device_caps *caps, const problem *p, int sg,
                       int *rows, int *subgroups, kernel_plan *plan)
{
    const size_t limit = plan_local_mem(caps);
    const size_t max_wg = caps->max_work_group ? caps->max_work_group : 256;
    while ((size_t)(*subgroups * sg) > max_wg && *subgroups > 1)
        *subgroups /= 2;
    while (plan->block_n > 256 && plan->block_n > sg) /* the kernel's limit */
        plan->block_n /= 2;
    for (;;) {
        plan->block_m = *rows * *subgroups;
        if (local_bytes(plan, p->dtype) <= limit)
            return (size_t)(*subgroups * sg) <= max_wg;
        if (plan->block_n > sg)
            plan->block_n /= 2;
        else if (*subgroups > 1)
            *subgroups /= 2;
        else if (*rows > 1)
            *rows /= 2;
        else
            return false;
    }
}

/* 16-byte-aligned contiguous K and V rows, and chunks of SG elements that
 * stay aligned: what the block reads need (fp32 only: the 16-bit block
 * reads need cl_intel_subgroups_short, which the probe does not read). */
static bool block_reads(const device_caps *caps, const problem *p, int sg)
{
    return caps->has_intel_subgroups && p->dtype == FLASHCL_DTYPE_FP32 &&
           ((size_t)sg * p->elem_size) % 16 == 0 &&
           view_rows_aligned(&p->k, p->elem_size, 16) &&
           view_rows_aligned(&p->v, p->elem_size, 16);
}

/* Padded head dims, tiles and work-group of `p` on this device, into
 * `plan`; false when they cannot fit it. */
static bool plan_tiles(const device_caps *caps, const problem *p,
                       kernel_plan *plan)
{
    const int sg = (int)chosen_size(caps);
    const int step = p->head_dim <= 128 ? 16 : 32;
    plan->head_dim_padded = round_up(p->head_dim, step);
    plan->head_dim_v_padded =
        round_up(p->head_dim_v, step > sg ? step : sg);
    const subgroup_tile *tile = lookup(caps, plan->head_dim_padded);
    int rows = tile->rows, subgroups = tile->subgroups;
    plan->block_n = round_up(tile->block_n, sg);
    const bool fits = fit_device(caps, p, sg, &rows, &subgroups, plan);
    plan->wg_size = subgroups * sg;
    plan->vec = 0;
    const bool blocks = block_reads(caps, p, sg);
    snprintf(plan->reason, sizeof plan->reason,
             "%s; here subgroup %d, %d rows x %d subgroups x %d keys%s",
             tile->measured, sg, rows, subgroups, plan->block_n,
             blocks ? ", block reads" : "");
    return fits;
}

static bool legal_tiles(const device_caps *caps, const problem *p, int sg,
                        int rows, int subgroups, const kernel_plan *plan,
                        char *why, size_t cap)
{
    const size_t max_wg = caps->max_work_group ? caps->max_work_group : 256;
    if (rows != 1 && rows != 2 && rows != 4 && rows != 8)
        snprintf(why, cap, "rows %d is not 1, 2, 4 or 8", rows);
    else if (subgroups < 1 || (size_t)(subgroups * sg) > max_wg ||
             subgroups * sg > 1024)
        snprintf(why, cap, "%d subgroups of %d exceed the work-group limit "
                 "%zu", subgroups, sg, max_wg);
    else if (plan->block_n < sg || plan->block_n % sg || plan->block_n > 256)
        snprintf(why, cap, "block_n %d is not a multiple of the subgroup "
                 "size %d up to 256", plan->block_n, sg);
    else
        return plan_local_mem_fits(caps, local_bytes(plan, p->dtype), why,
                                   cap);
    return false;
}

/* The tuning database's (or the tuner's forced) tiles, when legal here. */
static void tuned_tiles(const device_caps *caps, const problem *p, int sg,
                        kernel_plan *plan)
{
    tuning_choice c;
    int next = 0, rows, subgroups;
    const int subgroups0 = plan->wg_size / sg;
    kernel_plan tuned;
    for (;;) {
        if (!tuning_choose(caps, &subgroup_path, p, plan->head_dim_padded,
                           plan->forced_tiles, &next, &c))
            return;
        /* entries are tuned at the default subgroup size, which is not
         * part of their key: another size keeps the table */
        if (!c.forced && env_size() != 0)
            return;
        rows = tile_params_get(&c.params, "rows", plan->block_m / subgroups0);
        subgroups = tile_params_get(&c.params, "subgroups", subgroups0);
        tuned = *plan;
        tuned.block_n = tile_params_get(&c.params, "block_n", plan->block_n);
        tuned.block_m = rows * subgroups;
        tuned.wg_size = subgroups * sg;
        char why[160];
        if (legal_tiles(caps, p, sg, rows, subgroups, &tuned, why,
                        sizeof why))
            break;
        tuning_refused(&c, "subgroup", why);
    }
    plan->block_m = tuned.block_m;
    plan->block_n = tuned.block_n;
    plan->wg_size = tuned.wg_size;
    snprintf(plan->tuning, sizeof plan->tuning, "%s", c.origin);
    snprintf(plan->reason, sizeof plan->reason,
             "%.190s; here subgroup %d, %d rows x %d subgroups x %d keys",
             c.origin, sg, rows, subgroups, plan->block_n);
}

typedef struct subgroup_switches {
    FLASHCL_SUBGROUP_SWITCHES(SWITCH_FIELD)
} subgroup_switches;

static SWITCH_PATH_EMITTER(subgroup_emit, subgroup_switches,
                           FLASHCL_SUBGROUP_SWITCHES);

static void subgroup_plan(const device_caps *caps, const problem *p,
                          kernel_plan *plan)
{
    const int sg = (int)chosen_size(caps);
    plan_forward_kernel(plan, "flash_fwd_sg.cl");
    plan_tiles(caps, p, plan); /* can_run checked that they fit */
    tuned_tiles(caps, p, sg, plan);
    const int rows = plan->block_m / (plan->wg_size / sg);
    const bool blocks = block_reads(caps, p, sg);

    const subgroup_switches values = {
        .DTYPE = (int)p->dtype,
        .CAUSAL = p->right >= 0,
        .HEAD_DIM = plan->head_dim_padded,
        .HEAD_DIM_V = plan->head_dim_v_padded,
        .SG_SIZE = sg,
        .SG_ROWS = rows,
        .WG_SIZE = plan->wg_size,
        .BLOCK_M = plan->block_m,
        .BLOCK_N = plan->block_n,
        .SG_REQD = caps->has_reqd_subgroup_size,
        .SG_INTEL = caps->has_intel_subgroups,
        .SG_BLOCK_READ = blocks,
        .DIM_CONTIGUOUS = p->q.stride[3] == 1 && p->k.stride[3] == 1 &&
                          p->v.stride[3] == 1 && p->o.stride[3] == 1};
    plan_emit_options(plan, plan->options, sizeof plan->options, p,
                      subgroup_emit, &values);
    plan_row_blocks(p, plan);
}

/* Intel GPUs: subgroups (their matrix extensions are not probed yet). */
static bool offer(const device_caps *caps, char *out, size_t cap)
{
    if (caps->klass != DEVICE_CLASS_GPU_INTEL)
        return false;
    snprintf(out, cap, "%s",
             caps->has_subgroups
                 ? "subgroups (matrix extensions not probed yet)"
                 : "none");
    return true;
}

/* name, variants, summary, serves_device, can_run, plan, launch, tunables,
 * offer */
const kernel_path subgroup_path = {
    "subgroup", VARIANTS_ALL,
    "subgroup kernel (a subgroup per 1-4 query rows, of size 16 where "
    "offered, else the largest up to 32, or FLASHCL_SUBGROUP_SIZE; "
    "sub_group_reduce_max/add, shuffles, fp32 block reads with "
    "cl_intel_subgroups; fp32 arithmetic, fp64 for fp64; only with "
    "FLASHCL_PATH=subgroup until measured faster than the portable kernel "
    "on a device)",
    serves, subgroup_can_run, subgroup_plan, launch_forward_kernel,
    subgroup_tunables, sizeof subgroup_tunables / sizeof subgroup_tunables[0],
    offer};
