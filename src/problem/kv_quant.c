/* The quantized KV-cache fields (issue 45): K and V storage types, their
 * scales and int4 zero points. The host checks what it can know (types,
 * pairing with the cache fields, head dims, views present and inside
 * their buffers); scale values live on the device, where the kernels
 * mask a key whose K decodes to a non-finite number and read a
 * non-finite V element as 0 (docs/kv-quantization.md). */
#include "problem/problem.h"
#include "problem/variants.h"

#include <stdio.h>
#include <string.h>

#define INT4_GROUP 32

static const char *storage_name(int type)
{
    static const char *const names[] = {"same as dtype", "fp8 e4m3",
                                        "fp8 e5m2", "int8", "int4"};
    return type >= 0 && type <= FLASHCL_KV_INT4 ? names[type] : "?";
}

static flashcl_status check_type(flashcl_context *ctx, const char *field,
                                 int type)
{
    if (type < FLASHCL_KV_SAME || type > FLASHCL_KV_INT4)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "%s = %d is not a flashcl_kv_storage", field, type);
    return FLASHCL_SUCCESS;
}

/* A quantized cache is read by the split-KV kernels that dequantize (row,
 * wide; src/paths/split_kv.c picks one and refuses the others when forced):
 * everything else that would meet it is refused by name here. */
static flashcl_status check_pairing(flashcl_context *ctx,
                                    const flashcl_attention_desc *d,
                                    const problem *p, problem_mode mode)
{
    const char *which = d->k_storage ? "k_storage" : "v_storage";
    const char *type = storage_name(d->k_storage ? (int)d->k_storage
                                                 : (int)d->v_storage);
    if (p->infer.kv < KV_CACHE)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "%s = %s without cache_seqlens: quantized K/V is a "
                         "KV-cache storage (set cache_seqlens, and "
                         "block_table when paged)",
                         which, type);
    if (mode == PROBLEM_FOR_HOST_CALL)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "%s = %s in the host-memory call: quantized caches "
                         "live on the device (flashcl_attention_forward)",
                         which, type);
    if (d->dtype == FLASHCL_DTYPE_FP64)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "%s = %s with dtype fp64: quantized K/V is "
                         "dequantized in fp32 (fp32, fp16 or bf16 dtypes)",
                         which, type);
    if (p->backend == FLASHCL_BACKEND_REFERENCE)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "%s = %s with the reference backend: its GEMMs read "
                         "K and V in the dtype; use the fused backend",
                         which, type);
    return FLASHCL_SUCCESS;
}

static flashcl_status check_int4_dim(flashcl_context *ctx, const char *field,
                                     const char *dim_name, int64_t dim)
{
    if (dim % INT4_GROUP != 0)
        return set_error(ctx, FLASHCL_ERROR_HEAD_DIM_UNSUPPORTED,
                         "%s = int4 with %s = %lld: int4 keeps a scale and "
                         "zero point per group of %d along the head dim, so "
                         "it must be a multiple of %d",
                         field, dim_name, (long long)dim, INT4_GROUP,
                         INT4_GROUP);
    return FLASHCL_SUCCESS;
}

static void set_units(kv_quant_side *side, int type, size_t dtype_bytes,
                      int64_t dim)
{
    side->type = type;
    side->elem = type ? 1 : dtype_bytes;
    side->cols = type == FLASHCL_KV_INT4 ? dim / 2 : dim;
}

flashcl_status kv_quant_resolve(flashcl_context *ctx,
                                const flashcl_attention_desc *d,
                                problem_mode mode, problem *p)
{
    kv_quant *q = &p->quant;
    memset(q, 0, sizeof *q);
    flashcl_status st = check_type(ctx, "k_storage", (int)d->k_storage);
    if (st == FLASHCL_SUCCESS)
        st = check_type(ctx, "v_storage", (int)d->v_storage);
    if (st != FLASHCL_SUCCESS)
        return st;
    set_units(&q->k, (int)d->k_storage, p->elem_size, p->head_dim);
    set_units(&q->v, (int)d->v_storage, p->elem_size, p->head_dim_v);
    q->any = q->k.type || q->v.type;
    if (!q->any)
        return FLASHCL_SUCCESS;
    st = check_pairing(ctx, d, p, mode);
    if (st == FLASHCL_SUCCESS && q->k.type == FLASHCL_KV_INT4)
        st = check_int4_dim(ctx, "k_storage", "head_dim", p->head_dim);
    if (st == FLASHCL_SUCCESS && q->v.type == FLASHCL_KV_INT4)
        st = check_int4_dim(ctx, "v_storage", "head_dim_v", p->head_dim_v);
    return st;
}

/* ---- scale and zero-point views ---------------------------------------- */

/* The shape of a side's scale (and zero-point) view; see the header. */
static view_shape scale_shape(const char *name, const kv_quant_side *side,
                              bool per_head, const problem *p)
{
    const uint64_t bk = (uint64_t)p->kv_extent[0],
                   hkv = (uint64_t)p->heads_kv, nk = (uint64_t)p->kv_extent[1];
    const uint64_t dim = (uint64_t)(side->cols * 2); /* int4 only */
    view_shape s = {name, {1, 1, 1, 1}, sizeof(float), p->layout,
                    STRIDES_PACKED_HEADS};
    if (side->type == FLASHCL_KV_INT8) {
        s.size[0] = bk, s.size[1] = hkv, s.size[2] = nk;
        s.rule = STRIDES_PACKED_LAYOUT;
    } else if (side->type == FLASHCL_KV_INT4) {
        s.size[0] = bk, s.size[1] = hkv, s.size[2] = nk;
        s.size[3] = dim / INT4_GROUP;
        s.rule = STRIDES_PACKED_LAYOUT;
    } else if (per_head) {
        s.size[1] = hkv;
    }
    return s;
}

/* Axes of one element carry no stride: the kernels step along every axis,
 * so a scale that does not vary along one reads stride 0 there. */
static void zero_unit_strides(tensor_view *v)
{
    for (int a = 0; a < 4; ++a)
        if (v->size[a] <= 1)
            v->stride[a] = 0;
}

static flashcl_status resolve_side(flashcl_context *ctx, const char *side_name,
                                   const flashcl_tensor *scale,
                                   const flashcl_tensor *zero, bool per_head,
                                   problem_mode mode, const problem *p,
                                   kv_quant_side *side)
{
    char scale_name[16], zero_name[16];
    snprintf(scale_name, sizeof scale_name, "%s_scale", side_name);
    snprintf(zero_name, sizeof zero_name, "%s_zero", side_name);
    const bool fp8 = side->type == FLASHCL_KV_FP8_E4M3 ||
                     side->type == FLASHCL_KV_FP8_E5M2;
    if (!side->type && scale->buffer)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "%s is set but %s_storage is not quantized: the "
                         "scales would be ignored",
                         scale_name, side_name);
    if (per_head && !fp8)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "%s_scale_per_head is set but %s_storage is %s: "
                         "only fp8 chooses between a scale per tensor and "
                         "per KV head",
                         side_name, side_name, storage_name(side->type));
    if (side->type != FLASHCL_KV_INT4 && zero->buffer)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "%s is set but %s_storage is %s: only int4 has zero "
                         "points",
                         zero_name, side_name, storage_name(side->type));
    if (!side->type)
        return FLASHCL_SUCCESS;
    if (!scale->buffer && mode == PROBLEM_FOR_LAUNCH)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                         "%s.buffer is NULL: %s_storage %s needs its scales",
                         scale_name, side_name, storage_name(side->type));
    if (side->type == FLASHCL_KV_INT4 && !zero->buffer &&
        mode == PROBLEM_FOR_LAUNCH)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                         "%s.buffer is NULL: %s_storage int4 needs its zero "
                         "points",
                         zero_name, side_name);
    const view_shape shape = scale_shape(scale_name, side, per_head, p);
    flashcl_status st = resolve_view(ctx, scale, &shape, mode, true,
                                     &side->scale);
    zero_unit_strides(&side->scale);
    if (st != FLASHCL_SUCCESS || side->type != FLASHCL_KV_INT4)
        return st;
    view_shape zshape = shape;
    zshape.name = zero_name;
    st = resolve_view(ctx, zero, &zshape, mode, true, &side->zero);
    zero_unit_strides(&side->zero);
    return st;
}

typedef struct quant_named {
    const tensor_view *view;
    const char *name;
} quant_named;

/* Scales are read while O and LSE are written, and written by an append
 * while everything else is read: what they may not share bytes with. */
static flashcl_status check_overlaps(flashcl_context *ctx, const problem *p)
{
    const quant_named scales[4] = {{&p->quant.k.scale, "k_scale"},
                                   {&p->quant.v.scale, "v_scale"},
                                   {&p->quant.k.zero, "k_zero"},
                                   {&p->quant.v.zero, "v_zero"}};
    const quant_named others[9] = {
        {&p->o, "o"},         {&p->lse, "lse"},
        {&p->q, "q"},         {&p->k, "k"},
        {&p->v, "v"},         {&p->infer.k_new, "k_new"},
        {&p->infer.v_new, "v_new"}, {&p->infer.status, "infer_status"},
        {&p->infer.seqlens, "cache_seqlens"}};
    const size_t checked = p->infer.append ? 9 : 2;
    for (size_t s = 0; s < 4; ++s) {
        for (size_t o = 0; o < checked; ++o)
            if (views_overlap(scales[s].view, others[o].view))
                return set_error(ctx, FLASHCL_ERROR_ALIASING,
                                 "%s overlaps %s in the same buffer%s",
                                 scales[s].name, others[o].name,
                                 p->infer.append
                                     ? " (an append writes the scales)"
                                     : "");
        for (size_t t = s + 1; p->infer.append && t < 4; ++t)
            if (views_overlap(scales[s].view, scales[t].view))
                return set_error(ctx, FLASHCL_ERROR_ALIASING,
                                 "%s overlaps %s in the same buffer (an "
                                 "append writes both)",
                                 scales[s].name, scales[t].name);
    }
    return FLASHCL_SUCCESS;
}

flashcl_status kv_quant_views(flashcl_context *ctx,
                              const flashcl_attention_desc *d,
                              problem_mode mode, problem *p)
{
    kv_quant *q = &p->quant;
    flashcl_status st =
        resolve_side(ctx, "k", &d->k_scale, &d->k_zero,
                     d->k_scale_per_head != 0, mode, p, &q->k);
    if (st == FLASHCL_SUCCESS)
        st = resolve_side(ctx, "v", &d->v_scale, &d->v_zero,
                          d->v_scale_per_head != 0, mode, p, &q->v);
    return st == FLASHCL_SUCCESS ? check_overlaps(ctx, p) : st;
}
