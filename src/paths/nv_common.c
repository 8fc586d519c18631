/* The NVIDIA tensor-core paths' shared planning and arguments
 * (nv_common.h). */
#include "core/dev_env.h"
#include "paths/nv_common.h"

#include <stdio.h>
#include <string.h>

static void device_key(const device_caps *caps, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s|%s|%s", caps->platform_name, caps->name,
             caps->driver_version);
}

void driver_failure_note(driver_failure *f, const device_caps *caps,
                         const char *why)
{
    char key[sizeof f->device];
    device_key(caps, key, sizeof key);
    pthread_mutex_lock(&f->lock);
    snprintf(f->device, sizeof f->device, "%s", key);
    /* the first line: the build log, if any, follows it */
    snprintf(f->reason, sizeof f->reason, "%.*s", (int)strcspn(why, "\n"),
             why);
    pthread_mutex_unlock(&f->lock);
}

bool driver_failure_here(driver_failure *f, const device_caps *caps,
                         char *reason, size_t cap)
{
    char key[sizeof f->device];
    device_key(caps, key, sizeof key);
    pthread_mutex_lock(&f->lock);
    const bool failed = f->device[0] && !strcmp(f->device, key);
    if (failed)
        snprintf(reason, cap, "%s", f->reason);
    pthread_mutex_unlock(&f->lock);
    return failed;
}

static bool emulated_as(const device_caps *caps, const char *value)
{
    const char *env = dev_getenv("FLASHCL_NV_EMULATE");
    if (!env || strcmp(env, value) != 0 || !caps->has_intel_subgroups ||
        !caps->has_reqd_subgroup_size)
        return false;
    for (cl_uint i = 0; i < caps->subgroup_size_count; ++i)
        if (caps->subgroup_sizes[i] == 32)
            return true;
    return false;
}

bool nv_emulated(const device_caps *caps) { return emulated_as(caps, "1"); }

bool nv_emulated_forward(const device_caps *caps)
{
    return emulated_as(caps, "forward");
}

bool plan_extras_heads_first(const problem *p)
{
    const bool bias = variant_active(p, VARIANT_BIAS);
    const bool mask = variant_active(p, VARIANT_MASK);
    if (!bias && !mask)
        return false;
    const char *grid = dev_getenv("FLASHCL_NV_GRID");
    if (grid && !strcmp(grid, "blocks"))
        return false;
    if (grid && !strcmp(grid, "heads"))
        return true;
    return p->heads_q > 1 && (!bias || p->vargs.bias_stride.s[1] == 0) &&
           (!mask || p->vargs.mask_stride.s[1] == 0);
}

void plan_heads_first_grid(const problem *p, kernel_plan *plan)
{
    const size_t blocks = plan->global[0] / (size_t)plan->wg_size;
    plan->global[0] = (size_t)p->heads_q * (size_t)plan->wg_size;
    plan->global[1] = blocks;
}

bool plan_varlen_options(const problem *p, char *buf, size_t cap)
{
    options_buf out = options_continue(buf, cap);
    const bool seq_first = plan_varlen_options_add(p, &out);
    options_pad_overflow(&out);
    return seq_first;
}

bool plan_varlen_seq_first(const problem *p)
{
    if (!p->infer.varlen_q)
        return false;
    /* With a causal band, sequences fastest in the grid. bf16 D = 128, 16
     * heads, lengths 512-4096, on the mma.sync kernel
     * (bench/results/h200-2026-12-02-decode.md, runs 2 and 3): causal
     * 0.5824 ms against 0.6326 blocks first, non-causal 1.0588 against
     * 0.9923 (there every block of a sequence costs the same, and the
     * blocks-first order keeps a sequence's K and V in the L2). */
    bool seq_first = p->right >= 0;
    /* FLASHCL_NV_VARLEN_GRID=seqs|blocks forces the order (comparisons) */
    const char *grid = dev_getenv("FLASHCL_NV_VARLEN_GRID");
    if (grid && !strcmp(grid, "seqs"))
        seq_first = true;
    else if (grid && !strcmp(grid, "blocks"))
        seq_first = false;
    return seq_first;
}

bool plan_varlen_options_add(const problem *p, options_buf *out)
{
    if (!p->infer.varlen_q)
        return false;
    const bool seq_first = plan_varlen_seq_first(p);
    options_add(out,
                " -DFLASHCL_NV_VARLEN=1 -DFLASHCL_NV_VARLEN_TOP_LEFT=%d "
                "-DFLASHCL_NV_SEQ_FIRST=%d",
                p->infer.top_left ? 1 : 0, seq_first ? 1 : 0);
    return seq_first;
}

void plan_seq_first_grid(const problem *p, kernel_plan *plan)
{
    const size_t blocks = plan->global[0] / (size_t)plan->wg_size;
    plan->global[0] = (size_t)p->batch * (size_t)plan->wg_size;
    plan->global[2] = blocks;
}
