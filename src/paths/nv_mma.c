/* The NVIDIA tensor-core path: cl/nvidia/flash_fwd_mma.cl, inline PTX
 * mma.sync m16n8k16 with ldmatrix and cp.async, for compute capability >=
 * 8.0 (read once through cl_nv_device_attribute_query), fp16/bf16
 * storage, the head dims of its tile table, contiguous 16-byte-aligned
 * rows, and the variants the table marks for it. */
#include "core/dev_env.h"
#include "paths/nv_common.h"
#include "paths/nv_mma_tiles.h"
#include "paths/split_kv.h"
#include "paths/switches.h"
#include "paths/tuning.h"
#include "nvidia/flash_fwd_mma_switches.clh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int round16(int64_t d) { return (int)((d + 15) / 16 * 16); }

static bool hardware(const device_caps *caps)
{
    return caps->klass == DEVICE_CLASS_GPU_NVIDIA && caps->nv_cc_major >= 8;
}

/* Local memory the kernel is planned for: the device's, or NVIDIA's 48 KiB
 * when emulated (the tiles the GPU would run). */
static uint64_t local_limit(const device_caps *caps)
{
    return hardware(caps) && caps->local_mem ? caps->local_mem : 49152;
}

/* The padded size a problem's tiles are chosen by: the larger head dim. */
static int tile_dim(const problem *p)
{
    const int dq = round16(p->head_dim), dv = round16(p->head_dim_v);
    return dq > dv ? dq : dv;
}

/* fp32 storage runs on TF32 tensor cores, on its own tiles: with
 * allow_tf32 one mma a product (NV_TILE_TF32), else each operand split
 * into TF32 high and low parts and three mma (NV_TILE_EXACT). */
static int tf32(const problem *p)
{
    if (p->dtype != FLASHCL_DTYPE_FP32)
        return NV_TILE_16BIT;
    return p->allow_tf32 ? NV_TILE_TF32 : NV_TILE_EXACT;
}

static const nv_tile *lookup(const problem *p)
{
    const int dim = tile_dim(p);
    for (size_t i = 0; i < sizeof nv_tiles / sizeof nv_tiles[0]; ++i)
        if (nv_tiles[i].tf32 == tf32(p) && nv_tiles[i].head_dim >= dim &&
            (nv_tiles[i].causal < 0 || nv_tiles[i].causal == (int)p->causal))
            return &nv_tiles[i];
    return NULL;
}

/* FLASHCL_NV_TILE=block_m,block_n,warps (experiments and tile sweeps):
 * used only when the kernel's rules hold (16 or 32 rows per warp, key
 * tiles a multiple of 16, one K and one V tile within local memory);
 * otherwise the table's entry runs. */
static bool legal_tile(const device_caps *caps, const problem *p, int bm,
                       int bn, int warps, char *why, size_t cap)
{
    const uint64_t esz = (uint64_t)p->elem_size;
    const uint64_t one_stage =
        (uint64_t)bn * ((uint64_t)round16(p->head_dim) * esz + 16) +
        (uint64_t)bn * ((uint64_t)round16(p->head_dim_v) * esz + 16);
    const uint64_t limit = local_limit(caps);
    if (warps < 1 || warps > 16 || (bm != warps * 16 && bm != warps * 32))
        snprintf(why, cap, "block_m %d is not 16 or 32 rows per warp of %d "
                 "warps", bm, warps);
    else if (bn < 16 || bn > 256 || bn % 16 != 0)
        snprintf(why, cap, "block_n %d is not a multiple of 16 in 16..256",
                 bn);
    else if (one_stage > limit)
        snprintf(why, cap, "one K and V stage needs %llu bytes of local "
                 "memory, the device has %llu",
                 (unsigned long long)one_stage, (unsigned long long)limit);
    else if (caps->max_work_group &&
             (size_t)warps * 32 > caps->max_work_group)
        snprintf(why, cap, "%d warps exceed the work-group limit %zu", warps,
                 caps->max_work_group);
    else
        return true;
    return false;
}

static bool tile_override(const device_caps *caps, const problem *p,
                          nv_tile *out)
{
    const char *text = dev_getenv("FLASHCL_NV_TILE");
    int bm = 0, bn = 0, warps = 0;
    char why[160];
    if (!text || sscanf(text, "%d,%d,%d", &bm, &bn, &warps) != 3 ||
        !legal_tile(caps, p, bm, bn, warps, why, sizeof why))
        return false;
    *out = (nv_tile){tile_dim(p), -1, tf32(p), bm, bn, warps,
                     "FLASHCL_NV_TILE"};
    return true;
}

/* The tuning database's (or the tuner's forced) tiles, when legal here. */
static bool tuned_tile(const device_caps *caps, const problem *p,
                       const kernel_plan *plan, const nv_tile *table,
                       nv_tile *out, char *origin, size_t origin_cap)
{
    tuning_choice c;
    int next = 0, bm, bn, warps;
    for (;;) {
        if (!tuning_choose(caps, &nv_mma_path, p, tile_dim(p),
                           plan->forced_tiles, &next, &c))
            return false;
        bm = tile_params_get(&c.params, "block_m", table->block_m);
        bn = tile_params_get(&c.params, "block_n", table->block_n);
        warps = tile_params_get(&c.params, "warps", table->warps);
        char why[160];
        if (legal_tile(caps, p, bm, bn, warps, why, sizeof why))
            break;
        tuning_refused(&c, "nv_mma", why);
    }
    snprintf(origin, origin_cap, "%s", c.origin);
    *out = (nv_tile){tile_dim(p), -1, tf32(p), bm, bn, warps,
                     c.forced ? "forced candidate" : "tuning DB"};
    return true;
}

/* cp.async and ldmatrix move 16-byte rows. */
static bool rows_aligned(const problem *p)
{
    return view_rows_aligned(&p->q, p->elem_size, 16) &&
           view_rows_aligned(&p->k, p->elem_size, 16) &&
           view_rows_aligned(&p->v, p->elem_size, 16) &&
           view_rows_aligned(&p->o, p->elem_size, 16);
}

static bool refuse(char *why, size_t cap, const char *text)
{
    snprintf(why, cap, "%s", text);
    return false;
}

/* FLASHCL_NV_EMULATE=forward on Intel's CPU runtime: the tests run the
 * kernel's lane logic there (cl/nvidia/nv_mma.clh). */
static bool serves(const device_caps *caps)
{
    return hardware(caps) || nv_emulated_forward(caps);
}

static bool nv_mma_can_run(const device_caps *caps, const problem *p,
                           bool forced, char *why, size_t cap)
{
    if (!serves(caps))
        return refuse(why, cap, "not an NVIDIA GPU of compute capability >= "
                                "8.0 (nor FLASHCL_NV_EMULATE=forward on "
                                "Intel's CPU runtime)");
    /* What this kernel cannot compute goes to the split-KV kernels: a
     * forced split, KV cache, varlen or paged KV; so do the decodes
     * split_kv_decode_reason names. */
    if ((p->infer.needs_split_kernel && !plan_varlen_dense(p)) ||
        p->infer.num_splits > 1)
        return refuse(why, cap, "split-KV, KV cache, or varlen with a cache, "
                                "bias or mask: the split-KV kernels run "
                                "it");
    const char *decode = forced ? NULL : split_kv_decode_reason(caps, p);
    if (decode)
        return refuse(why, cap, decode);
    if (p->dtype != FLASHCL_DTYPE_FP16 && p->dtype != FLASHCL_DTYPE_BF16 &&
        p->dtype != FLASHCL_DTYPE_FP32)
        return refuse(why, cap, "fp16, bf16 or fp32 storage only");
    if (variants_refused(p, nv_mma_path.variants, why, cap))
        return false;
    if (tf32(p) == NV_TILE_TF32 && tile_dim(p) > 128)
        return refuse(why, cap, "TF32 runs head dims up to 128 (fp32 rows "
                                "of 256 leave too few registers and local "
                                "memory)");
    if (tf32(p) == NV_TILE_EXACT && tile_dim(p) > 128)
        return refuse(why, cap, "exact fp32 (3xTF32) runs head dims up to "
                                "128: above, O's fp32 accumulators and the "
                                "split operands of 16 rows a warp exceed "
                                "255 registers; the portable kernel runs "
                                "it");
    if (p->head_dim > 256 || p->head_dim_v > 256 || !lookup(p)) {
        snprintf(why, cap, "no tile entry for head_dim %lld / head_dim_v %lld "
                 "(1..256)", (long long)p->head_dim, (long long)p->head_dim_v);
        return false;
    }
    if (!rows_aligned(p))
        return refuse(why, cap, "needs contiguous, 16-byte-aligned rows");
    return true;
}

/* How the kernel reads bias and mask (FLASHCL_NV_EXTRAS, for
 * comparisons): "vec" (default) permutes the keys of a tile so that a
 * lane's terms of a row are contiguous and loads them as vectors where
 * the rows allow it, a tile ahead when a mask is on ("vec0": always at
 * their tile, "vec1": always ahead); "perm" permutes but loads pairs;
 * "pairs" is the layout of before (pair loads at the tile, 16 rows per
 * warp with a mask too). */
typedef enum extras_kind {
    EXTRAS_VEC,
    EXTRAS_VEC_AT_TILE, /* "vec0": vectors loaded at their tile */
    EXTRAS_VEC_AHEAD,   /* "vec1": vectors loaded a tile ahead */
    EXTRAS_PERM,
    EXTRAS_PAIRS
} extras_kind;

static extras_kind extras_mode(void)
{
    const char *text = dev_getenv("FLASHCL_NV_EXTRAS");
    if (text && !strcmp(text, "vec0"))
        return EXTRAS_VEC_AT_TILE;
    if (text && !strcmp(text, "vec1"))
        return EXTRAS_VEC_AHEAD;
    if (text && !strcmp(text, "pairs"))
        return EXTRAS_PAIRS;
    if (text && !strcmp(text, "perm"))
        return EXTRAS_PERM;
    return EXTRAS_VEC;
}

/* Whether a bias or mask view's rows allow the kernel's vector loads:
 * key stride 1 and every row start aligned to a lane's run of keys
 * (block_n / 4 elements; the kernel reads at most 16 bytes at a time). */
static bool extras_rows_vector(const cl_ulong4 *stride, uint64_t base,
                               size_t elem_size, int block_n)
{
    const uint64_t run = (uint64_t)block_n / 4 * elem_size;
    const uint64_t align = (run < 16 ? run : 16) / elem_size;
    /* the kernel's vectors: one of 4 or 8 bytes, or 16-byte ones */
    if (stride->s[3] != 1 || (run != 4 && run != 8 && run % 16 != 0))
        return false;
    return base % align == 0 && stride->s[0] % align == 0 &&
           stride->s[1] % align == 0 && stride->s[2] % align == 0;
}

/* Whether the kernel reads this call's bias and mask as vector runs
 * (FLASHCL_NV_EXTRAS_VEC) with key tiles of block_n. */
static bool extras_vector(const problem *p, extras_kind kind, int block_n)
{
    const int bias = variant_value(p, VARIANT_BIAS);
    const bool mask = variant_active(p, VARIANT_MASK);
    bool vec = kind == EXTRAS_VEC || kind == EXTRAS_VEC_AT_TILE ||
               kind == EXTRAS_VEC_AHEAD;
    if (bias)
        vec = vec && extras_rows_vector(&p->vargs.bias_stride,
                                        p->vargs.bias_base, bias == 1 ? 4 : 2,
                                        block_n);
    if (mask)
        vec = vec && extras_rows_vector(&p->vargs.mask_stride,
                                        p->vargs.mask_base, 1, block_n);
    return vec;
}

typedef struct nv_mma_switches {
    FLASHCL_NV_MMA_SWITCHES(SWITCH_FIELD)
} nv_mma_switches;

/* The switches for bias and mask (the kernel's defaults without them). */
static void extras_switches(const problem *p, const kernel_plan *plan,
                            nv_mma_switches *values)
{
    const int bias = variant_value(p, VARIANT_BIAS);
    const bool mask = variant_active(p, VARIANT_MASK);
    values->NV_EXTRAS_AHEAD = 1;
    if (!bias && !mask)
        return;
    const extras_kind kind = extras_mode();
    /* Loading a tile ahead hides the latency but holds two tiles of terms
     * in registers. bf16 D=128 N=4096 on the H200 (2026-12-02,
     * bench/results/h200-2026-12-02-extras.md): a mask gains from it
     * (269 against 257 TFLOP/s non-causal), and bias with a mask (189
     * against 167); a bias alone loses (201 against 218: its fp32 terms
     * take 16 more registers a row). */
    values->NV_EXTRAS_AHEAD = kind == EXTRAS_VEC_AHEAD ||
                              (kind == EXTRAS_VEC && mask);
    values->NV_KEY_PERM = kind != EXTRAS_PAIRS;
    values->NV_EXTRAS_VEC = extras_vector(p, kind, plan->block_n);
    values->NV_HEADS_FIRST = plan_extras_heads_first(p);
}

/* Exact fp32 adds O tile by tile with a compensation term, so that the
 * error stays flat in seqlen_k: 1, an fp32 term, for D_v <= 64 (ptxas,
 * sm_90, 64x32 tiles: 166 registers, 234 causal, no spills); 2, a bf16
 * term, above (fp32 terms at D_v 128 spilled 244-368 bytes in every tile
 * and Q split tried; bf16 ones with 16-key tiles and 4 Q slices in
 * registers: 228 / 249 registers, no spills). FLASHCL_NV_COMPENSATE=0
 * turns it off (comparisons). */
static int compensated(const problem *p)
{
    const char *env = dev_getenv("FLASHCL_NV_COMPENSATE");
    if (tf32(p) != NV_TILE_EXACT || (env && !strcmp(env, "0")))
        return 0;
    return round16(p->head_dim_v) <= 64 ? 1 : 2;
}

/* Every switch of the kernel's list for this plan (the fix-up pass's
 * aside: NV_FIXUP 0). */
static nv_mma_switches plan_switches(const device_caps *caps,
                                     const problem *p,
                                     const kernel_plan *plan)
{
    const bool varlen = p->infer.varlen_q;
    nv_mma_switches values = {
        .HEAD_DIM = plan->head_dim_padded,
        .HEAD_DIM_V = plan->head_dim_v_padded,
        .BLOCK_M = plan->block_m,
        .BLOCK_N = plan->block_n,
        .WG_SIZE = plan->wg_size,
        .DTYPE = (int)p->dtype,
        .CAUSAL = p->right >= 0,
        .NV_MMA = 1,
        .NV_EMULATE = !hardware(caps),
        .NV_EXACT = tf32(p) == NV_TILE_EXACT,
        .NV_COMPENSATE = compensated(p),
        /* emulated: the kernel an sm_80 with NVIDIA's 48 KiB would run */
        .NV_SM = hardware(caps)
                     ? (int)(caps->nv_cc_major * 10 + caps->nv_cc_minor)
                     : 80,
        .NV_DQ = (int)p->head_dim,
        .NV_DV = (int)p->head_dim_v,
        /* the row max is taken before scaling only for scale > 0 */
        .NV_PRESCALE = !(p->scale > 0),
        .LOCAL_MEM_BYTES = (int)local_limit(caps),
        .NV_VARLEN = varlen,
        .NV_VARLEN_TOP_LEFT = varlen && p->infer.top_left,
        .NV_SEQ_FIRST = plan_varlen_seq_first(p)};
    extras_switches(p, plan, &values);
    return values;
}

static SWITCH_PATH_EMITTER(nv_mma_emit, nv_mma_switches,
                           FLASHCL_NV_MMA_SWITCHES);

static void nv_mma_plan(const device_caps *caps, const problem *p,
                        kernel_plan *plan)
{
    nv_tile forced, narrowed, tuned;
    const nv_tile *tile = tile_override(caps, p, &forced) ? &forced : lookup(p);
    if (tile != &forced &&
        tuned_tile(caps, p, plan, tile, &tuned, plan->tuning,
                   sizeof plan->tuning)) {
        tile = &tuned;
        if (!strcmp(tuned.reason, "forced candidate"))
            forced = tuned, tile = &forced;
        else
            snprintf(plan->reason, sizeof plan->reason, "%.250s",
                     plan->tuning);
    }
    /* Bias terms are fetched into registers ahead of each tile's Q K^T:
     * with 32 rows per warp they spill, so a warp owns 16. A mask read as
     * vector runs keeps the entry's 32 rows (269 TFLOP/s, bf16 D=128
     * N=4096 on the H200); read pair by pair, 16 rows measured 150 (the
     * layout of before) against 116 for 32 rows through the permuted
     * tile (bench/results/h200-2026-12-02-extras.md, run 1). */
    if (tile != &forced && tile->block_m == tile->warps * 32 &&
        (variant_active(p, VARIANT_BIAS) ||
         (variant_active(p, VARIANT_MASK) &&
          !extras_vector(p, extras_mode(), tile->block_n)))) {
        narrowed = *tile;
        narrowed.block_m = tile->warps * 16;
        narrowed.reason = "bias or mask read pair by pair: the entry's tiles "
                          "with 16 rows per warp (the terms need the "
                          "registers)";
        tile = &narrowed;
    }
    plan_forward_kernel(plan, "flash_fwd_mma.cl");
    plan->head_dim_padded = round16(p->head_dim);
    plan->head_dim_v_padded = round16(p->head_dim_v);
    plan->block_m = tile->block_m;
    plan->block_n = tile->block_n;
    plan->wg_size = tile->warps * 32;
    plan->vec = 0;
    if (tile != &tuned)
        snprintf(plan->reason, sizeof plan->reason, "%s", tile->reason);
    nv_mma_switches values = plan_switches(caps, p, plan);
    plan_emit_options(plan, plan->options, sizeof plan->options, p, nv_mma_emit,
                      &values);
    /* The fix-up pass: the same kernel with the exact exponent, which
     * redoes only the blocks the first pass marked (see the kernel). */
    plan->extra_source = plan->source;
    values.NV_FIXUP = 1;
    plan_emit_options(plan, plan->extra_options, sizeof plan->extra_options, p,
                      nv_mma_emit, &values);
    plan_row_blocks(p, plan);
    if (values.NV_HEADS_FIRST)
        plan_heads_first_grid(p, plan);
    if (values.NV_SEQ_FIRST) /* sequences fastest, query blocks last */
        plan_seq_first_grid(p, plan);
}

/* The fast pass, then the fix-up pass after it. Blocks whose scores were
 * too large for the fast exponent (|max * scale * log2 e| >= 2^12, or a
 * non-finite row sum) are marked by the first pass and recomputed by the
 * second; the others return at once. Measured on the H200: a guard inside
 * the fast loop cost 6-13%; this costs one launch. */
static flashcl_status nv_mma_launch(flashcl_context *ctx,
                                    cl_command_queue queue, const problem *p,
                                    const kernel_plan *plan,
                                    compiled_program *const programs[2],
                                    cl_uint num_wait,
                                    const cl_event *wait_list, cl_event *event)
{
    varlen_args packed;
    const trailing_args packed_args = {varlen_args_set, &packed};
    const trailing_args *trailing = NULL;
    if (p->infer.varlen_q) {
        varlen_args_fill(p, &packed);
        trailing = &packed_args;
    }
    return enqueue_forward_then_extra(ctx, queue, p, plan, programs, trailing,
                                      trailing, num_wait, wait_list, event);
}

/* NVIDIA's matrix instructions by compute capability (read through
 * cl_nv_device_attribute_query), never by device name. */
static bool offer(const device_caps *caps, char *out, size_t cap)
{
    if (caps->klass != DEVICE_CLASS_GPU_NVIDIA)
        return false;
    const unsigned cc = caps->nv_cc_major * 10 + caps->nv_cc_minor;
    if (cc >= 90)
        snprintf(out, cap,
                 "sm_%u: mma.sync m16n8k16 (fp16/bf16), wgmma only via "
                 "sm_90a PTX",
                 cc);
    else if (cc >= 80)
        snprintf(out, cap, "sm_%u: mma.sync m16n8k16 (fp16/bf16), m16n8k8 "
                 "(tf32; exact fp32 as 3xTF32)", cc);
    else if (cc >= 70)
        snprintf(out, cap, "sm_%u: mma.sync m8n8k4 (fp16)", cc);
    else
        snprintf(out, cap, "%s",
                 cc ? "none (compute capability < 7.0)"
                    : "unknown (no cl_nv_device_attribute_query)");
    return true;
}

/* name, variants, summary, serves_device, can_run, plan, launch, tunables,
 * offer */
const kernel_path nv_mma_path = {
    "nv_mma", VARIANTS_ALL,
    "inline-PTX mma.sync kernel for fp16/bf16 (head dims 1-256 padded to "
    "16, D_v != D; causal, windows, top-left causal, ALiBi, bias, mask, "
    "softcap, sinks) and fp32 on TF32 tensor cores (head dims up to 128): "
    "exact by default (3xTF32: operands split into high and low parts), "
    "one TF32 product with allow_tf32",
    serves, nv_mma_can_run, nv_mma_plan, nv_mma_launch, nv_mma_tunables,
    sizeof nv_mma_tunables / sizeof nv_mma_tunables[0], offer};
