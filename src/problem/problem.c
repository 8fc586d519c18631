/* Argument checking for the forward call. Everything is checked before
 * anything is enqueued, so a rejected call leaves every buffer as it was. */
#include "../internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_SEQLEN (INT32_MAX - 4096) /* kernels index rows with int */
#define MAX_HEADS_OR_BATCH INT32_MAX

size_t dtype_size(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP32:
        return 4;
    case FLASHCL_DTYPE_FP16:
    case FLASHCL_DTYPE_BF16:
        return 2;
    case FLASHCL_DTYPE_FP64:
        return 8;
    }
    return 0;
}

static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

static bool add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > UINT64_MAX - a)
        return false;
    *out = a + b;
    return true;
}

static flashcl_status check_dims(flashcl_context *ctx,
                                 const flashcl_attention_desc *desc)
{
    const struct {
        const char *name;
        int64_t value, max;
    } dims[] = {
        {"batch", desc->batch, MAX_HEADS_OR_BATCH},
        {"heads_q", desc->heads_q, MAX_HEADS_OR_BATCH},
        {"heads_kv", desc->heads_kv, MAX_HEADS_OR_BATCH},
        {"seqlen_q", desc->seqlen_q, MAX_SEQLEN},
        {"seqlen_k", desc->seqlen_k, MAX_SEQLEN},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
        if (dims[i].value < 0)
            return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                             "%s = %lld is negative", dims[i].name,
                             (long long)dims[i].value);
        if (dims[i].value > dims[i].max)
            return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                             "%s = %lld exceeds the limit %lld", dims[i].name,
                             (long long)dims[i].value,
                             (long long)dims[i].max);
    }
    if (desc->head_dim < 1 || desc->head_dim > FLASHCL_MAX_HEAD_DIM)
        return set_error(ctx, FLASHCL_ERROR_HEAD_DIM_UNSUPPORTED,
                         "head_dim = %lld; supported: 1..%d",
                         (long long)desc->head_dim, FLASHCL_MAX_HEAD_DIM);
    if (desc->head_dim_v < 0)
        return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                         "head_dim_v = %lld is negative",
                         (long long)desc->head_dim_v);
    if (desc->head_dim_v > FLASHCL_MAX_HEAD_DIM)
        return set_error(ctx, FLASHCL_ERROR_HEAD_DIM_UNSUPPORTED,
                         "head_dim_v = %lld; supported: 1..%d (0: head_dim)",
                         (long long)desc->head_dim_v, FLASHCL_MAX_HEAD_DIM);
    int64_t heads_kv = desc->heads_kv ? desc->heads_kv : desc->heads_q;
    if (desc->heads_q > 0 &&
        (heads_kv > desc->heads_q || desc->heads_q % heads_kv != 0))
        return set_error(ctx, FLASHCL_ERROR_HEAD_GROUPING,
                         "heads_q = %lld is not a multiple of heads_kv = %lld",
                         (long long)desc->heads_q, (long long)heads_kv);
    /* Element counts must fit 64-bit byte arithmetic. */
    uint64_t count;
    const int64_t seqlen_max =
        desc->seqlen_q > desc->seqlen_k ? desc->seqlen_q : desc->seqlen_k;
    if (!mul_u64((uint64_t)desc->batch, (uint64_t)desc->heads_q, &count) ||
        !mul_u64(count, (uint64_t)seqlen_max, &count) ||
        !mul_u64(count, (uint64_t)FLASHCL_MAX_HEAD_DIM, &count) ||
        !mul_u64(count, 8, &count))
        return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                         "batch * heads_q * seqlen * head_dim overflows");
    return FLASHCL_SUCCESS;
}

static flashcl_status check_values(flashcl_context *ctx,
                                   const flashcl_attention_desc *desc)
{
    if (dtype_size(desc->dtype) == 0)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "dtype = %d is not a flashcl_dtype", (int)desc->dtype);
    if (desc->layout != FLASHCL_LAYOUT_BNHD &&
        desc->layout != FLASHCL_LAYOUT_BHND)
        return set_error(ctx, FLASHCL_ERROR_INVALID_LAYOUT,
                         "layout = %d is not a flashcl_layout",
                         (int)desc->layout);
    if (!isfinite(desc->scale) || desc->scale < 0.0f)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "scale = %g must be finite and >= 0 (0: default)",
                         (double)desc->scale);
    if (desc->dtype == FLASHCL_DTYPE_FP64 && !ctx->caps.has_fp64)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "dtype fp64 needs cl_khr_fp64, which %s lacks",
                         ctx->caps.name);
    if (desc->causal_align != FLASHCL_CAUSAL_BOTTOM_RIGHT &&
        desc->causal_align != FLASHCL_CAUSAL_TOP_LEFT)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "causal_align = %d is not a flashcl_causal_align",
                         (int)desc->causal_align);
    if (desc->window && (desc->window_left < -1 || desc->window_right < -1))
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "window_left = %lld, window_right = %lld: each must "
                         "be >= -1 (-1: unbounded)",
                         (long long)desc->window_left,
                         (long long)desc->window_right);
    if (!isfinite(desc->softcap) || desc->softcap < 0.0f)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "softcap = %g must be finite and > 0 (0: off)",
                         (double)desc->softcap);
    if (desc->bias.buffer && desc->bias_dtype != FLASHCL_DTYPE_FP32 &&
        desc->bias_dtype != FLASHCL_DTYPE_FP16 &&
        desc->bias_dtype != FLASHCL_DTYPE_BF16)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "bias_dtype = %d: the bias must be fp32, fp16 or bf16",
                         (int)desc->bias_dtype);
    if (desc->backend != FLASHCL_BACKEND_AUTO &&
        desc->backend != FLASHCL_BACKEND_FUSED &&
        desc->backend != FLASHCL_BACKEND_REFERENCE)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "backend = %d is not a flashcl_backend",
                         (int)desc->backend);
    return FLASHCL_SUCCESS;
}

/* Shape of one tensor view: sizes of (batch, head, seq, dim). */
/* What all-zero strides mean for a tensor. */
typedef enum stride_rule {
    STRIDES_PACKED_LAYOUT, /* q, k, v, o: packed in desc->layout */
    STRIDES_PACKED_LSE,    /* [batch, heads, seq] */
    STRIDES_PACKED_HEADS,  /* slopes, sinks: [heads], shared over batch */
    STRIDES_LITERAL        /* bias, mask: zero broadcasts */
} stride_rule;

typedef struct view_shape {
    const char *name;
    uint64_t size[4];
    size_t elem_size;
    flashcl_layout layout;
    stride_rule rule;
} view_shape;

static void default_strides(const view_shape *shape, uint64_t stride[4])
{
    const uint64_t *n = shape->size;
    if (shape->rule == STRIDES_LITERAL) {
        stride[0] = stride[1] = stride[2] = stride[3] = 0;
    } else if (shape->rule == STRIDES_PACKED_HEADS) {
        stride[0] = stride[2] = stride[3] = 0;
        stride[1] = 1;
    } else if (shape->rule == STRIDES_PACKED_LSE) { /* [batch, heads, seq] */
        stride[3] = 0;
        stride[2] = 1;
        stride[1] = n[2];
        stride[0] = n[1] * n[2];
    } else if (shape->layout == FLASHCL_LAYOUT_BHND) {
        stride[3] = 1;
        stride[2] = n[3];
        stride[1] = n[2] * n[3];
        stride[0] = n[1] * n[2] * n[3];
    } else { /* BNHD */
        stride[3] = 1;
        stride[1] = n[3];
        stride[2] = n[1] * n[3];
        stride[0] = n[2] * n[1] * n[3];
    }
}

/* The root allocation and byte offset of a (sub-)buffer, for aliasing. */
static cl_mem root_buffer(cl_mem buffer, uint64_t *offset)
{
    *offset = 0;
    for (int depth = 0; depth < 4; ++depth) {
        cl_mem parent = NULL;
        size_t sub_offset = 0;
        if (clGetMemObjectInfo(buffer, CL_MEM_ASSOCIATED_MEMOBJECT,
                               sizeof parent, &parent, NULL) != CL_SUCCESS ||
            !parent)
            break;
        if (clGetMemObjectInfo(buffer, CL_MEM_OFFSET, sizeof sub_offset,
                               &sub_offset, NULL) != CL_SUCCESS)
            break;
        *offset += sub_offset;
        buffer = parent;
    }
    return buffer;
}

static flashcl_status check_buffer(flashcl_context *ctx,
                                   const flashcl_tensor *tensor,
                                   const char *name, size_t *mem_size)
{
    cl_context owner = NULL;
    cl_int err = clGetMemObjectInfo(tensor->buffer, CL_MEM_CONTEXT,
                                    sizeof owner, &owner, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(tensor->buffer, CL_MEM_SIZE, sizeof *mem_size,
                                 mem_size, NULL);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "%s.buffer is not a valid cl_mem (%s)", name,
                         cl_error_name(err));
    if (owner != ctx->cl_ctx)
        return set_error(ctx, FLASHCL_ERROR_CONTEXT_MISMATCH,
                         "%s.buffer belongs to another cl_context", name);
    return FLASHCL_SUCCESS;
}

/* Resolve strides and check the view lies inside its buffer. */
static flashcl_status resolve_tensor(flashcl_context *ctx,
                                     const flashcl_tensor *tensor,
                                     const view_shape *shape,
                                     resolved_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (!tensor->buffer)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s.buffer is NULL",
                         shape->name);
    size_t mem_size = 0;
    flashcl_status status = check_buffer(ctx, tensor, shape->name, &mem_size);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (tensor->offset % shape->elem_size != 0)
        return set_error(ctx, FLASHCL_ERROR_INVALID_LAYOUT,
                         "%s.offset = %zu is not a multiple of the element "
                         "size %zu",
                         shape->name, tensor->offset, shape->elem_size);
    const size_t given[4] = {tensor->stride_batch, tensor->stride_head,
                             tensor->stride_seq, tensor->stride_dim};
    bool all_zero = !given[0] && !given[1] && !given[2] && !given[3];
    if (all_zero)
        default_strides(shape, out->stride);
    else
        for (int i = 0; i < 4; ++i)
            out->stride[i] = given[i];
    out->buffer = tensor->buffer;
    out->base = tensor->offset / shape->elem_size;
    out->present = true;
    bool empty = false;
    uint64_t last = out->base;
    bool ok = true;
    for (int i = 0; i < 4 && ok; ++i) {
        if (shape->size[i] == 0)
            empty = true;
        else {
            uint64_t reach;
            ok = mul_u64(shape->size[i] - 1, out->stride[i], &reach) &&
                 add_u64(last, reach, &last);
        }
    }
    uint64_t end_byte = 0;
    ok = ok && add_u64(last, 1, &end_byte) &&
         mul_u64(end_byte, shape->elem_size, &end_byte);
    if (!ok)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_BOUNDS,
                         "%s: offset and strides overflow 64-bit addressing",
                         shape->name);
    if (empty)
        return FLASHCL_SUCCESS; /* touches nothing */
    if (end_byte > mem_size)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_BOUNDS,
                         "%s: the view reaches byte %llu but the buffer has "
                         "CL_MEM_SIZE %zu (offset %zu, strides "
                         "%llu/%llu/%llu/%llu)",
                         shape->name, (unsigned long long)end_byte, mem_size,
                         tensor->offset, (unsigned long long)out->stride[0],
                         (unsigned long long)out->stride[1],
                         (unsigned long long)out->stride[2],
                         (unsigned long long)out->stride[3]);
    uint64_t root_offset;
    out->buffer = root_buffer(tensor->buffer, &root_offset);
    out->first_byte = root_offset + out->base * shape->elem_size;
    out->end_byte = root_offset + end_byte;
    return FLASHCL_SUCCESS;
}

static bool overlaps(const resolved_tensor *a, const resolved_tensor *b)
{
    return a->present && b->present && a->buffer == b->buffer &&
           a->end_byte > a->first_byte && b->end_byte > b->first_byte &&
           a->first_byte < b->end_byte && b->first_byte < a->end_byte;
}

static flashcl_status check_aliasing(flashcl_context *ctx,
                                     const resolved_problem *p)
{
    const struct {
        const resolved_tensor *out, *other;
        const char *out_name, *other_name;
    } pairs[] = {
        {&p->o, &p->q, "o", "q"},     {&p->o, &p->k, "o", "k"},
        {&p->o, &p->v, "o", "v"},     {&p->lse, &p->q, "lse", "q"},
        {&p->lse, &p->k, "lse", "k"}, {&p->lse, &p->v, "lse", "v"},
        {&p->lse, &p->o, "lse", "o"},
        {&p->o, &p->bias, "o", "bias"},     {&p->o, &p->mask, "o", "mask"},
        {&p->o, &p->alibi, "o", "alibi_slopes"},
        {&p->o, &p->sinks, "o", "sinks"},
        {&p->lse, &p->bias, "lse", "bias"}, {&p->lse, &p->mask, "lse", "mask"},
        {&p->lse, &p->alibi, "lse", "alibi_slopes"},
        {&p->lse, &p->sinks, "lse", "sinks"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i)
        if (overlaps(pairs[i].out, pairs[i].other))
            return set_error(ctx, FLASHCL_ERROR_ALIASING,
                             "%s overlaps %s in the same buffer (bytes "
                             "%llu..%llu and %llu..%llu)",
                             pairs[i].out_name, pairs[i].other_name,
                             (unsigned long long)pairs[i].out->first_byte,
                             (unsigned long long)pairs[i].out->end_byte,
                             (unsigned long long)pairs[i].other->first_byte,
                             (unsigned long long)pairs[i].other->end_byte);
    return FLASHCL_SUCCESS;
}

static flashcl_status resolve_tensors(flashcl_context *ctx,
                                      const flashcl_attention_desc *desc,
                                      resolved_problem *p)
{
    const uint64_t b = (uint64_t)p->batch, hq = (uint64_t)p->heads_q,
                   hkv = (uint64_t)p->heads_kv, nq = (uint64_t)p->seqlen_q,
                   nk = (uint64_t)p->seqlen_k, d = (uint64_t)p->head_dim,
                   dv = (uint64_t)p->head_dim_v;
    const flashcl_layout layout = desc->layout;
    const size_t elem = p->elem_size;
    const view_shape shapes[9] = {
        {"q", {b, hq, nq, d}, elem, layout, STRIDES_PACKED_LAYOUT},
        {"k", {b, hkv, nk, d}, elem, layout, STRIDES_PACKED_LAYOUT},
        {"v", {b, hkv, nk, dv}, elem, layout, STRIDES_PACKED_LAYOUT},
        {"o", {b, hq, nq, dv}, elem, layout, STRIDES_PACKED_LAYOUT},
        {"lse", {b, hq, nq, 1}, sizeof(float), layout, STRIDES_PACKED_LSE},
        {"alibi_slopes", {b, hq, 1, 1}, sizeof(float), layout,
         STRIDES_PACKED_HEADS},
        {"bias", {b, hq, nq, nk}, dtype_size(desc->bias_dtype), layout,
         STRIDES_LITERAL},
        {"mask", {b, hq, nq, nk}, 1, layout, STRIDES_LITERAL},
        {"sinks", {1, hq, 1, 1}, sizeof(float), layout, STRIDES_PACKED_HEADS},
    };
    const flashcl_tensor *tensors[9] = {
        &desc->q,   &desc->k,            &desc->v,    &desc->o,    &desc->lse,
        &desc->alibi_slopes, &desc->bias, &desc->mask, &desc->sinks};
    resolved_tensor *outs[9] = {&p->q,     &p->k,    &p->v,    &p->o,
                                &p->lse,   &p->alibi, &p->bias, &p->mask,
                                &p->sinks};
    for (int i = 0; i < 9; ++i) {
        if (i >= 4 && !tensors[i]->buffer)
            continue; /* optional inputs and LSE */
        flashcl_status status =
            resolve_tensor(ctx, tensors[i], &shapes[i], outs[i]);
        if (status != FLASHCL_SUCCESS)
            return status;
    }
    return check_aliasing(ctx, p);
}

/* Causal and window as one band around the aligned diagonal. */
static void resolve_visibility(const flashcl_attention_desc *desc,
                               resolved_problem *p)
{
    p->diag = desc->causal_align == FLASHCL_CAUSAL_TOP_LEFT
                  ? 0
                  : p->seqlen_k - p->seqlen_q;
    p->left = desc->window ? desc->window_left : -1;
    p->right = desc->window ? desc->window_right : -1;
    if (p->causal && (p->right < 0 || p->right > 0))
        p->right = 0;
    p->softcap = desc->softcap;
}

flashcl_status validate_shape(flashcl_context *ctx,
                              const flashcl_attention_desc *desc)
{
    if (!desc)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "desc is NULL");
    flashcl_status status = check_dims(ctx, desc);
    return status != FLASHCL_SUCCESS ? status : check_values(ctx, desc);
}

void resolve_problem_scalars(const flashcl_attention_desc *desc,
                             resolved_problem *p)
{
    memset(p, 0, sizeof *p);
    p->batch = desc->batch;
    p->heads_q = desc->heads_q;
    p->heads_kv = desc->heads_kv ? desc->heads_kv : desc->heads_q;
    p->seqlen_q = desc->seqlen_q;
    p->seqlen_k = desc->seqlen_k;
    p->head_dim = desc->head_dim;
    p->head_dim_v = desc->head_dim_v ? desc->head_dim_v : desc->head_dim;
    p->dtype = desc->dtype;
    p->elem_size = dtype_size(desc->dtype);
    p->causal = desc->causal ? 1 : 0;
    p->scale = desc->scale != 0.0f ? (double)desc->scale
                                   : 1.0 / sqrt((double)desc->head_dim);
    p->empty = p->batch == 0 || p->heads_q == 0 || p->seqlen_q == 0;
    resolve_visibility(desc, p);
    p->bias_dtype = desc->bias_dtype;
    /* Presence only; resolve_tensors fills the views. */
    p->alibi.present = desc->alibi_slopes.buffer != NULL;
    p->bias.present = desc->bias.buffer != NULL;
    p->mask.present = desc->mask.buffer != NULL;
    p->sinks.present = desc->sinks.buffer != NULL;
    p->has_variants = p->head_dim_v != p->head_dim || p->left >= 0 ||
                      p->right > 0 || (p->right == 0 && !p->causal) ||
                      p->softcap != 0.0f || p->alibi.present ||
                      p->bias.present || p->mask.present || p->sinks.present;
}

flashcl_status validate_desc(flashcl_context *ctx,
                             const flashcl_attention_desc *desc,
                             resolved_problem *p)
{
    memset(p, 0, sizeof *p);
    flashcl_status status = validate_shape(ctx, desc);
    if (status != FLASHCL_SUCCESS)
        return status;
    resolve_problem_scalars(desc, p);
    return resolve_tensors(ctx, desc, p);
}
