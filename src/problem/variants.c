/* The variant table (see variants.h for what an entry holds and
 * docs/architecture.md for how to add one). Each entry's functions sit just
 * above it. */
#include "problem/variants.h"
#include "problem/arg_setters.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static cl_ulong4 ulong4_of(const uint64_t v[4])
{
    cl_ulong4 out;
    for (int i = 0; i < 4; ++i)
        out.s[i] = v[i];
    return out;
}

/* A bound past every key is the same as no bound: clamping keeps the
 * kernels' i + diag +- bound inside 64-bit (and int) arithmetic. */
static int64_t clamp_bound(int64_t bound, const problem *p)
{
    const int64_t reach = p->seqlen_q + p->seqlen_k + 1 +
                          (p->diag < 0 ? -p->diag : p->diag);
    return bound > reach ? reach : bound;
}

/* ---- sliding window ------------------------------------------------- */

static flashcl_status window_check(flashcl_context *ctx,
                                   const flashcl_attention_desc *d)
{
    if (!d->window && (d->window_left != 0 || d->window_right != 0))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "window_left = %lld, window_right = %lld but window "
                         "= 0: set window = 1 to use a sliding window (the "
                         "bounds are never ignored)",
                         (long long)d->window_left, (long long)d->window_right);
    if (d->window && (d->window_left < -1 || d->window_right < -1))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "window_left = %lld, window_right = %lld: each must "
                         "be >= -1 (-1: unbounded)",
                         (long long)d->window_left,
                         (long long)d->window_right);
    return FLASHCL_SUCCESS;
}

/* On when the band differs from the base problem's (full or causal). */
static bool window_active(const flashcl_attention_desc *d, const problem *p)
{
    if (!d->window)
        return false;
    return d->window_left >= 0 || (!p->causal && d->window_right >= 0);
}

/* Plain causal is the base problem; the window narrows the band. */
static int window_apply(const flashcl_attention_desc *d,
                        const tensor_view *view, problem *p)
{
    (void)view;
    p->left = d->window_left < 0 ? -1 : clamp_bound(d->window_left, p);
    int64_t right = d->window_right < 0 ? -1 : clamp_bound(d->window_right, p);
    if (p->causal && (right < 0 || right > 0))
        right = 0;
    p->right = right;
    return p->left >= 0;
}

/* ---- top-left causal ------------------------------------------------- */

/* The base problem's diagonal is already aligned (aligned_diag: 0 here
 * too); the entry names the alignment wherever something reads the
 * diagonal: the band (causal, window) or ALiBi's distance, which once
 * missed it. */
static bool top_left_active(const flashcl_attention_desc *d, const problem *p)
{
    const bool reads_diagonal =
        p->causal || d->window || d->alibi_slopes.buffer != NULL;
    return d->causal_align == FLASHCL_CAUSAL_TOP_LEFT &&
           p->seqlen_q != p->seqlen_k && reads_diagonal;
}

static int top_left_apply(const flashcl_attention_desc *d,
                          const tensor_view *view, problem *p)
{
    (void)d;
    (void)view;
    p->diag = 0;
    return 1;
}

/* ---- absolute positions ---------------------------------------------- */

static flashcl_status positions_check(flashcl_context *ctx,
                                      const flashcl_attention_desc *d)
{
    const bool absolute = d->causal_align == FLASHCL_CAUSAL_ABSOLUTE;
    if (!absolute && (d->q_position != 0 || d->k_position != 0))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "q_position = %lld, k_position = %lld but "
                         "causal_align is not FLASHCL_CAUSAL_ABSOLUTE (the "
                         "positions are never ignored)",
                         (long long)d->q_position, (long long)d->k_position);
    if (absolute && (d->q_position < 0 || d->k_position < 0 ||
                     d->q_position > FLASHCL_MAX_POSITION ||
                     d->k_position > FLASHCL_MAX_POSITION))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "q_position = %lld, k_position = %lld: each must "
                         "be in [0, FLASHCL_MAX_POSITION = %d]",
                         (long long)d->q_position, (long long)d->k_position,
                         FLASHCL_MAX_POSITION);
    return FLASHCL_SUCCESS;
}

/* The base problem's diagonal is already q_position - k_position
 * (problem.c); the entry names the variant, so that a path without it
 * (split-KV: its kernels align each sequence themselves) refuses it. */
static bool positions_active(const flashcl_attention_desc *d,
                             const problem *p)
{
    const bool reads_diagonal =
        p->causal || d->window || d->alibi_slopes.buffer != NULL;
    return d->causal_align == FLASHCL_CAUSAL_ABSOLUTE && reads_diagonal;
}

/* ---- ALiBi ----------------------------------------------------------- */

static const flashcl_tensor *alibi_tensor(const flashcl_attention_desc *d)
{
    return &d->alibi_slopes;
}

static bool alibi_active(const flashcl_attention_desc *d, const problem *p)
{
    (void)p;
    return d->alibi_slopes.buffer != NULL;
}

static void alibi_shape(const flashcl_attention_desc *d, const problem *p,
                        view_shape *shape)
{
    *shape = (view_shape){"alibi_slopes",
                          {(uint64_t)p->batch, (uint64_t)p->heads_q, 1, 1},
                          sizeof(float), d->layout, STRIDES_PACKED_HEADS};
}

static int alibi_apply(const flashcl_attention_desc *d,
                       const tensor_view *view, problem *p)
{
    (void)d;
    p->vargs.alibi = view->given;
    p->vargs.alibi_stride = ulong4_of(view->stride);
    p->vargs.alibi_base = view->base;
    return 1;
}

/* ---- additive bias --------------------------------------------------- */

static flashcl_status bias_check(flashcl_context *ctx,
                                 const flashcl_attention_desc *d)
{
    if (d->bias.buffer && d->bias_dtype != FLASHCL_DTYPE_FP32 &&
        d->bias_dtype != FLASHCL_DTYPE_FP16 &&
        d->bias_dtype != FLASHCL_DTYPE_BF16)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "bias_dtype = %d: the bias must be fp32, fp16 or bf16",
                         (int)d->bias_dtype);
    return FLASHCL_SUCCESS;
}

static const flashcl_tensor *bias_tensor(const flashcl_attention_desc *d)
{
    return &d->bias;
}

static bool bias_active(const flashcl_attention_desc *d, const problem *p)
{
    (void)p;
    return d->bias.buffer != NULL;
}

static void scores_shape(const char *name, size_t elem,
                         const flashcl_attention_desc *d, const problem *p,
                         view_shape *shape)
{
    *shape = (view_shape){name,
                          {(uint64_t)p->batch, (uint64_t)p->heads_q,
                           (uint64_t)p->seqlen_q, (uint64_t)p->seqlen_k},
                          elem, d->layout, STRIDES_LITERAL};
}

static void bias_shape(const flashcl_attention_desc *d, const problem *p,
                       view_shape *shape)
{
    scores_shape("bias", dtype_size(d->bias_dtype), d, p, shape);
}

/* The switch's value names the bias dtype: 1 fp32, 2 fp16, 3 bf16. */
static int bias_apply(const flashcl_attention_desc *d, const tensor_view *view,
                      problem *p)
{
    p->vargs.bias = view->given;
    p->vargs.bias_stride = ulong4_of(view->stride);
    p->vargs.bias_base = view->base;
    return d->bias_dtype == FLASHCL_DTYPE_FP32   ? 1
           : d->bias_dtype == FLASHCL_DTYPE_FP16 ? 2
                                                 : 3;
}

/* ---- boolean mask ---------------------------------------------------- */

static const flashcl_tensor *mask_tensor(const flashcl_attention_desc *d)
{
    return &d->mask;
}

static bool mask_active(const flashcl_attention_desc *d, const problem *p)
{
    (void)p;
    return d->mask.buffer != NULL;
}

static void mask_shape(const flashcl_attention_desc *d, const problem *p,
                       view_shape *shape)
{
    scores_shape("mask", 1, d, p, shape);
}

static int mask_apply(const flashcl_attention_desc *d, const tensor_view *view,
                      problem *p)
{
    (void)d;
    p->vargs.mask = view->given;
    p->vargs.mask_stride = ulong4_of(view->stride);
    p->vargs.mask_base = view->base;
    return 1;
}

/* ---- softcap --------------------------------------------------------- */

static flashcl_status softcap_check(flashcl_context *ctx,
                                    const flashcl_attention_desc *d)
{
    if (d->softcap == 0.0f)
        return FLASHCL_SUCCESS;
    if (!isfinite(d->softcap) || d->softcap < FLASHCL_MIN_SOFTCAP ||
        d->softcap > FLASHCL_MAX_SCALE)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "softcap = %g: must be 0 (off) or in [%g, %g], where "
                         "softcap * log2(e) stays a normal fp32 number",
                         (double)d->softcap, (double)FLASHCL_MIN_SOFTCAP,
                         (double)FLASHCL_MAX_SCALE);
    return FLASHCL_SUCCESS;
}

static bool softcap_active(const flashcl_attention_desc *d, const problem *p)
{
    (void)p;
    return d->softcap != 0.0f;
}

static int softcap_apply(const flashcl_attention_desc *d,
                         const tensor_view *view, problem *p)
{
    (void)view;
    p->vargs.softcap = d->softcap;
    return 1;
}

/* ---- attention sinks ------------------------------------------------- */

static const flashcl_tensor *sinks_tensor(const flashcl_attention_desc *d)
{
    return &d->sinks;
}

static bool sinks_active(const flashcl_attention_desc *d, const problem *p)
{
    (void)p;
    return d->sinks.buffer != NULL;
}

static void sinks_shape(const flashcl_attention_desc *d, const problem *p,
                        view_shape *shape)
{
    *shape = (view_shape){"sinks", {1, (uint64_t)p->heads_q, 1, 1},
                          sizeof(float), d->layout, STRIDES_PACKED_HEADS};
}

static int sinks_apply(const flashcl_attention_desc *d,
                       const tensor_view *view, problem *p)
{
    (void)d;
    p->vargs.sinks = view->given;
    p->vargs.sinks_stride = ulong4_of(view->stride);
    p->vargs.sinks_base = view->base;
    return 1;
}

/* ---- D_v != D -------------------------------------------------------- */
/* The base problem already carries head_dim_v (V and O are shaped by it);
 * the entry only says which paths compute it. */

static bool head_dim_v_active(const flashcl_attention_desc *d,
                              const problem *p)
{
    (void)d;
    return p->head_dim_v != p->head_dim;
}

static int no_apply(const flashcl_attention_desc *d, const tensor_view *view,
                    problem *p)
{
    (void)d;
    (void)view;
    (void)p;
    return 1;
}

/* ---- the table ------------------------------------------------------- */

static const variant_entry table[] = {
    [VARIANT_WINDOW] = {.name = "window",
     .fields = "window, window_left, window_right",
     .define = "FLASHCL_WINDOW_LEFT",
     .check = window_check,
     .active = window_active,
     .apply = window_apply},
    [VARIANT_TOP_LEFT] = {.name = "top-left causal",
     .fields = "causal_align",
     /* no define: the diagonal is a kernel argument, so a top-left call
      * shares the bottom-right call's binary */
     .active = top_left_active,
     .apply = top_left_apply},
    [VARIANT_ALIBI] = {.name = "alibi",
     .fields = "alibi_slopes",
     .define = "FLASHCL_ALIBI",
     .active = alibi_active,
     .tensor = alibi_tensor,
     .tensor_shape = alibi_shape,
     .apply = alibi_apply},
    [VARIANT_BIAS] = {.name = "bias",
     .fields = "bias, bias_dtype",
     .define = "FLASHCL_BIAS",
     .check = bias_check,
     .active = bias_active,
     .tensor = bias_tensor,
     .tensor_shape = bias_shape,
     .apply = bias_apply},
    [VARIANT_MASK] = {.name = "mask",
     .fields = "mask",
     .define = "FLASHCL_MASK",
     .active = mask_active,
     .tensor = mask_tensor,
     .tensor_shape = mask_shape,
     .apply = mask_apply},
    [VARIANT_SOFTCAP] = {.name = "softcap",
     .fields = "softcap",
     .define = "FLASHCL_SOFTCAP",
     .check = softcap_check,
     .active = softcap_active,
     .apply = softcap_apply},
    [VARIANT_SINKS] = {.name = "sinks",
     .fields = "sinks",
     .define = "FLASHCL_SINKS",
     .active = sinks_active,
     .tensor = sinks_tensor,
     .tensor_shape = sinks_shape,
     .apply = sinks_apply},
    [VARIANT_HEAD_DIM_V] = {.name = "head_dim_v",
     .fields = "head_dim_v",
     .active = head_dim_v_active,
     .apply = no_apply},
    [VARIANT_POSITIONS] = {.name = "absolute positions",
     .fields = "causal_align, q_position, k_position",
     /* no define: the diagonal is a kernel argument */
     .check = positions_check,
     .active = positions_active,
     .apply = no_apply},
};

_Static_assert(sizeof table / sizeof table[0] <= PROBLEM_MAX_VARIANTS,
               "raise PROBLEM_MAX_VARIANTS");
_Static_assert(sizeof table / sizeof table[0] == VARIANT_COUNT,
               "a variant of FLASHCL_VARIANT_LIST has no table entry");

size_t variant_count(void) { return sizeof table / sizeof table[0]; }

bool variant_active(const problem *p, variant_id id)
{
    return (p->variants >> id) & 1u;
}

const tensor_view *variant_view(const problem *p, variant_id id)
{
    return variant_active(p, id) && table[id].tensor ? &p->variant_tensor[id]
                                                     : NULL;
}

int variant_value(const problem *p, variant_id id)
{
    return variant_active(p, id) ? p->variant_value[id] : 0;
}

const variant_entry *variant_at(size_t index)
{
    return index < variant_count() ? &table[index] : NULL;
}

static flashcl_status resolve_one(flashcl_context *ctx, size_t i,
                                  const flashcl_attention_desc *desc,
                                  problem *p)
{
    const variant_entry *e = &table[i];
    if (!e->active(desc, p))
        return FLASHCL_SUCCESS;
    tensor_view *view = &p->variant_tensor[i];
    if (e->tensor) {
        view_shape shape;
        e->tensor_shape(desc, p, &shape);
        /* A variant's own tensor is always required to be valid, even
         * when planning: it is what turned the variant on. */
        flashcl_status status = resolve_view(ctx, e->tensor(desc), &shape,
                                             PROBLEM_FOR_LAUNCH, true, view);
        if (status != FLASHCL_SUCCESS)
            return status;
    }
    p->variants |= 1u << i;
    p->variant_value[i] = e->apply(desc, view, p);
    return FLASHCL_SUCCESS;
}

flashcl_status variants_resolve(flashcl_context *ctx,
                                const flashcl_attention_desc *desc,
                                problem *p)
{
    for (size_t i = 0; i < variant_count(); ++i)
        if (table[i].check) {
            flashcl_status status = table[i].check(ctx, desc);
            if (status != FLASHCL_SUCCESS)
                return status;
        }
    for (size_t i = 0; i < variant_count(); ++i) {
        flashcl_status status = resolve_one(ctx, i, desc, p);
        if (status != FLASHCL_SUCCESS)
            return status;
    }
    return FLASHCL_SUCCESS;
}

bool variants_refused(const problem *p, uint32_t computes, char *why,
                      size_t cap)
{
    const uint32_t missing = p->variants & VARIANTS_ALL & ~computes;
    if (!missing)
        return false;
    char names[160];
    variants_describe(missing, names, sizeof names);
    snprintf(why, cap, "does not compute %s", names);
    return true;
}

void variants_add_defines(const problem *p, options_buf *out)
{
    for (size_t i = 0; i < variant_count(); ++i)
        if ((p->variants & (1u << i)) && table[i].define &&
            p->variant_value[i] != 0)
            options_add(out, " -D%s=%d", table[i].define,
                        p->variant_value[i]);
}

void variants_append_defines(const problem *p, char *buf, size_t cap)
{
    options_buf out = options_continue(buf, cap);
    variants_add_defines(p, &out);
    options_pad_overflow(&out);
}

void variants_describe(uint32_t mask, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < variant_count() && len < cap; ++i) {
        if (!(mask & (1u << i)))
            continue;
        int n = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "",
                         table[i].name);
        if (n < 0)
            return;
        len += (size_t)n;
    }
}

cl_int set_variant_args(cl_kernel kernel, cl_uint *index,
                        const variant_args *a, bool fp64)
{
    cl_int err = CL_SUCCESS;
    FLASHCL_VARIANT_ARGS(SET_ONE)
    return err;
}
