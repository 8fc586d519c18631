/* The AMD matrix-core path: cl/amd/flash_fwd_amd.cl on 16x16x16 MFMA
 * (wave64: gfx90a, gfx94x) or WMMA (wave32: gfx11xx, and gfx12xx with its
 * own layouts), chosen from the gfx name and wavefront the probe read, fp16/bf16 storage, any head dim up to 256 (padded
 * to 16), every variant. FLASHCL_AMD_MATRIX=0 turns it off.
 *
 * Emulation: with FLASHCL_PATH=amd_mfma and FLASHCL_AMD_EMULATE=mfma,
 * wmma or wmma12, the same kernel runs on any device with Intel subgroups of the
 * wave's size (64 or 32), the fragments built from shuffles in the
 * hardware's lane layout (cl/amd/amd_frag.clh). CI runs the forward and
 * variant suites that way on Intel's OpenCL CPU runtime. */
#include "core/dev_env.h"
#include "paths/path.h"
#include "amd/flash_fwd_amd_switches.clh"
#include "paths/amd_mfma_tiles.h"
#include "paths/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -DFLASHCL_AMD_MATRIX values (cl/amd/amd_frag.clh). */
enum {
    AMD_NONE = 0,
    AMD_MFMA = 1,
    AMD_WMMA = 2,
    EMU_MFMA = 3,
    EMU_WMMA = 4,
    AMD_WMMA12 = 5,
    EMU_WMMA12 = 6
};

static bool turned_off(void)
{
    const char *env = dev_getenv("FLASHCL_AMD_MATRIX");
    return env && strcmp(env, "0") == 0;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The matrix instructions of the probed gfx target; only targets whose
 * 16x16x16 f16 and bf16 forms the kernel's fragments follow (gfx908 lacks
 * the bf16 _1k form; gfx12's WMMA has its own layouts), and only at the
 * wavefront size the driver compiles for (the kernel's #error guard would
 * otherwise fail the build: RDNA runs wave32 or wave64). */
static int hardware_matrix(const device_caps *caps)
{
    if (caps->klass != DEVICE_CLASS_GPU_AMD)
        return AMD_NONE;
    if ((starts_with(caps->amd_gfx, "gfx90a") ||
         starts_with(caps->amd_gfx, "gfx94")) &&
        caps->amd_wavefront == 64)
        return AMD_MFMA;
    if (starts_with(caps->amd_gfx, "gfx11") && caps->amd_wavefront == 32)
        return AMD_WMMA;
    if (starts_with(caps->amd_gfx, "gfx12") && caps->amd_wavefront == 32)
        return AMD_WMMA12;
    return AMD_NONE;
}

/* FLASHCL_AMD_EMULATE: "mfma", "wmma" (gfx11), "wmma12" (gfx12), or
 * unset. */
static int emulation_asked(void)
{
    const char *env = dev_getenv("FLASHCL_AMD_EMULATE");
    if (env && strcmp(env, "mfma") == 0)
        return EMU_MFMA;
    if (env && strcmp(env, "wmma") == 0)
        return EMU_WMMA;
    if (env && strcmp(env, "wmma12") == 0)
        return EMU_WMMA12;
    return AMD_NONE;
}

static bool offers_subgroup(const device_caps *caps, cl_uint size)
{
    if (!caps->has_intel_subgroups || !caps->has_reqd_subgroup_size)
        return false;
    for (cl_uint i = 0; i < caps->subgroup_size_count; ++i)
        if (caps->subgroup_sizes[i] == size)
            return true;
    return false;
}

/* What the plan compiles: the hardware's instructions, else the emulation
 * asked for (can_run let it through only when forced). */
static int matrix_kind(const device_caps *caps)
{
    const int hw = hardware_matrix(caps);
    return hw ? hw : emulation_asked();
}

static bool is_wave32(int kind)
{
    return kind != AMD_MFMA && kind != EMU_MFMA;
}

static bool is_emulated(int kind)
{
    return kind == EMU_MFMA || kind == EMU_WMMA || kind == EMU_WMMA12;
}

static int pad16(int64_t n) { return (int)((n + 15) / 16 * 16); }

static const amd_tile *lookup(int kind, const problem *p)
{
    const int d = pad16(problem_widest_head_dim(p));
    for (size_t i = 0; i < sizeof amd_tiles / sizeof amd_tiles[0]; ++i)
        if (amd_tiles[i].wmma == (is_wave32(kind) ? 1 : 0) &&
            d <= amd_tiles[i].max_head_dim)
            return &amd_tiles[i];
    return NULL;
}

/* Local memory of the kernel: Q, K, V^T and P as 16-bit, rows padded by
 * one operand load (4 elements MFMA, 16 WMMA, 8 gfx12 WMMA). */
static size_t local_bytes(int kind, const problem *p, const amd_tile *tile)
{
    const size_t pad = !is_wave32(kind)                             ? 4
                       : kind == AMD_WMMA12 || kind == EMU_WMMA12 ? 8
                                                                  : 16;
    const size_t d = (size_t)pad16(p->head_dim),
                 dv = (size_t)pad16(p->head_dim_v);
    const size_t bm = (size_t)tile->block_m, bn = (size_t)tile->block_n;
    return 2 * ((bm + bn) * (d + pad) + (dv + bm) * (bn + pad));
}

static bool refuse(char *why, size_t cap, const char *text)
{
    snprintf(why, cap, "%s", text);
    return false;
}

static bool serves(const device_caps *caps)
{
    return !turned_off() && hardware_matrix(caps) != AMD_NONE;
}

static bool emulation_ok(const device_caps *caps, int kind, char *why,
                         size_t cap)
{
    const cl_uint size = kind == EMU_MFMA ? 64 : 32;
    if (offers_subgroup(caps, size))
        return true;
    snprintf(why, cap, "emulating %s needs cl_intel_subgroups with required "
             "subgroup size %u", kind == EMU_MFMA ? "MFMA" : "WMMA",
             (unsigned)size);
    return false;
}

static bool amd_mfma_can_run(const device_caps *caps, const problem *p,
                             bool forced, char *why, size_t cap)
{
    if (turned_off())
        return refuse(why, cap, "FLASHCL_AMD_MATRIX=0");
    int kind = hardware_matrix(caps);
    if (kind == AMD_NONE) {
        kind = forced ? emulation_asked() : AMD_NONE;
        if (kind == AMD_NONE)
            return refuse(why, cap,
                          "not an AMD GPU with MFMA at wave64 (gfx90a, "
                          "gfx94x) or WMMA at wave32 (gfx11xx, gfx12xx); "
                          "forced, FLASHCL_AMD_EMULATE=mfma|wmma|wmma12 "
                          "emulates them");
        if (!emulation_ok(caps, kind, why, cap))
            return false;
    }
    if (p->dtype != FLASHCL_DTYPE_FP16 && p->dtype != FLASHCL_DTYPE_BF16)
        return refuse(why, cap, "fp16/bf16 storage only");
    if (variants_refused(p, amd_mfma_path.variants, why, cap))
        return false;
    const amd_tile *tile = lookup(kind, p);
    if (!tile)
        return refuse(why, cap, "head dims above 256");
    const size_t bytes = local_bytes(kind, p, tile);
    if (caps->local_mem && bytes > caps->local_mem) {
        snprintf(why, cap, "needs %zu bytes of local memory, device has %llu",
                 bytes, (unsigned long long)caps->local_mem);
        return false;
    }
    const size_t wg = (size_t)tile->block_m / 16 * (is_wave32(kind) ? 32 : 64);
    if (caps->max_work_group && wg > caps->max_work_group)
        return refuse(why, cap, "work-group too large for the device");
    return true;
}

static bool legal_tile(const device_caps *caps, int kind, const problem *p,
                       const amd_tile *t, char *why, size_t cap)
{
    const size_t wg = (size_t)t->block_m / 16 * (is_wave32(kind) ? 32 : 64);
    const size_t bytes = local_bytes(kind, p, t);
    if (t->block_m < 16 || t->block_m > 256 || t->block_m % 16)
        snprintf(why, cap, "block_m %d is not a multiple of 16 in 16..256",
                 t->block_m);
    else if (t->block_n < 16 || t->block_n > 128 || t->block_n % 16)
        snprintf(why, cap, "block_n %d is not a multiple of 16 in 16..128",
                 t->block_n);
    else if (caps->local_mem && bytes > caps->local_mem)
        snprintf(why, cap, "needs %zu bytes of local memory, device has %llu",
                 bytes, (unsigned long long)caps->local_mem);
    else if (caps->max_work_group && wg > caps->max_work_group)
        snprintf(why, cap, "work-group %zu above the device's %zu", wg,
                 caps->max_work_group);
    else
        return true;
    return false;
}

/* The tuning database's (or the tuner's forced) tiles, when legal here. */
static const amd_tile *tuned_tile(const device_caps *caps, int kind,
                                  const problem *p, kernel_plan *plan,
                                  const amd_tile *table, amd_tile *out)
{
    tuning_choice c;
    int next = 0;
    const int d = pad16(problem_widest_head_dim(p));
    for (;;) {
        if (!tuning_choose(caps, &amd_mfma_path, p, d, plan->forced_tiles,
                           &next, &c))
            return table;
        *out = *table;
        out->block_m = tile_params_get(&c.params, "block_m", table->block_m);
        out->block_n = tile_params_get(&c.params, "block_n", table->block_n);
        char why[160];
        if (legal_tile(caps, kind, p, out, why, sizeof why))
            break;
        tuning_refused(&c, "amd_mfma", why);
    }
    snprintf(plan->tuning, sizeof plan->tuning, "%s", c.origin);
    out->reason = plan->tuning;
    return out;
}

typedef struct amd_switches {
    FLASHCL_AMD_SWITCHES(SWITCH_FIELD)
} amd_switches;

static SWITCH_PATH_EMITTER(amd_emit, amd_switches, FLASHCL_AMD_SWITCHES);

static void amd_mfma_plan(const device_caps *caps, const problem *p,
                          kernel_plan *plan)
{
    const int kind = matrix_kind(caps);
    amd_tile tuned;
    const amd_tile *tile = tuned_tile(caps, kind, p, plan, lookup(kind, p),
                                      &tuned);
    plan_forward_kernel(plan, "flash_fwd_amd.cl");
    plan->head_dim_padded = pad16(p->head_dim);
    plan->head_dim_v_padded = pad16(p->head_dim_v);
    plan->block_m = tile->block_m;
    plan->block_n = tile->block_n;
    plan->wg_size = tile->block_m / 16 * (is_wave32(kind) ? 32 : 64);
    plan->vec = 0;
    const char *emulated =
        is_emulated(kind) ? "emulated lane layout (subgroup shuffles); " : "";
    snprintf(plan->reason, sizeof plan->reason, "%s%.*s", emulated,
             (int)(sizeof plan->reason - 1 - strlen(emulated)), tile->reason);
    const amd_switches values = {.DTYPE = (int)p->dtype,
                                 .CAUSAL = p->right >= 0,
                                 .AMD_MATRIX = kind,
                                 .HEAD_DIM = plan->head_dim_padded,
                                 .HEAD_DIM_V = plan->head_dim_v_padded,
                                 .BLOCK_M = plan->block_m,
                                 .BLOCK_N = plan->block_n,
                                 .WG_SIZE = plan->wg_size};
    plan_emit_options(plan, plan->options, sizeof plan->options, p, amd_emit,
                      &values);
    plan_row_blocks(p, plan);
}

/* AMD's matrix instructions by gfx name (cl_amd_device_attribute_query),
 * never by device name. */
static bool offer(const device_caps *caps, char *out, size_t cap)
{
    if (caps->klass != DEVICE_CLASS_GPU_AMD)
        return false;
    const char *gfx = caps->amd_gfx;
    if (!strncmp(gfx, "gfx90a", 6) || !strncmp(gfx, "gfx94", 5))
        snprintf(out, cap, "%s: MFMA 16x16x16 (amd_mfma path)", gfx);
    else if (!strncmp(gfx, "gfx90", 5) || !strncmp(gfx, "gfx95", 5))
        snprintf(out, cap, "%s: MFMA (not used by flashcl yet)", gfx);
    else if (!strncmp(gfx, "gfx11", 5))
        snprintf(out, cap, "%s: WMMA wave32 (amd_mfma path)", gfx);
    else if (!strncmp(gfx, "gfx12", 5))
        snprintf(out, cap, "%s: WMMA wave32, gfx12 layouts (amd_mfma path)",
                 gfx);
    else
        snprintf(out, cap, "%s",
                 *gfx ? "none known for this gfx"
                      : "unknown (no cl_amd_device_attribute_query)");
    return true;
}

/* name, variants, summary, serves_device, can_run, plan, launch, tunables,
 * offer */
const kernel_path amd_mfma_path = {
    "amd_mfma", VARIANTS_ALL,
    "AMD matrix-core kernel for fp16/bf16, MFMA wave64 on gfx90a/gfx94x, "
    "WMMA wave32 on gfx11xx/gfx12xx (head dims up to 256, every variant; "
    "FLASHCL_AMD_MATRIX=0 turns it off)",
    serves, amd_mfma_can_run, amd_mfma_plan, launch_forward_kernel,
    amd_mfma_tunables, sizeof amd_mfma_tunables / sizeof amd_mfma_tunables[0],
    offer};
