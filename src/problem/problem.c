/* The problem module: checks a descriptor and resolves it into a
 * `problem`. This is the only file (with variants.c, its table) that reads
 * flashcl_attention_desc. Everything is checked before anything is
 * enqueued, so a rejected call leaves every buffer as it was. */
#include "problem/problem.h"
#include "problem/variants.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

static flashcl_status check_scale(flashcl_context *ctx,
                                  const flashcl_attention_desc *desc)
{
    if (!isfinite(desc->scale) || fabsf(desc->scale) > FLASHCL_MAX_SCALE)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "scale = %g: must be finite with |scale| <= %g "
                         "(scale * log2(e) must stay finite in fp32); 0 means "
                         "1/sqrt(head_dim) unless explicit_scale is set",
                         (double)desc->scale, (double)FLASHCL_MAX_SCALE);
    return FLASHCL_SUCCESS;
}

/* FLASHCL_ERROR_INVALID_VALUE naming `field` when its `value` is none of
 * the `count` values of `legal` (the enum `type`'s). */
static flashcl_status check_enum_value(flashcl_context *ctx, const char *field,
                                       int value, const int *legal,
                                       size_t count, const char *type)
{
    for (size_t i = 0; i < count; ++i)
        if (value == legal[i])
            return FLASHCL_SUCCESS;
    return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE, "%s = %d is not a %s",
                     field, value, type);
}

static flashcl_status check_enums(flashcl_context *ctx,
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
    if (desc->dtype == FLASHCL_DTYPE_FP64 && !ctx->caps.has_fp64)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "dtype fp64 needs cl_khr_fp64, which %s lacks",
                         ctx->caps.name);
    static const int aligns[] = {FLASHCL_CAUSAL_BOTTOM_RIGHT,
                                 FLASHCL_CAUSAL_TOP_LEFT,
                                 FLASHCL_CAUSAL_ABSOLUTE};
    static const int backends[] = {FLASHCL_BACKEND_AUTO, FLASHCL_BACKEND_FUSED,
                                   FLASHCL_BACKEND_REFERENCE};
    flashcl_status status =
        check_enum_value(ctx, "causal_align", (int)desc->causal_align, aligns,
                         3, "flashcl_causal_align");
    if (status == FLASHCL_SUCCESS)
        status = check_enum_value(ctx, "backend", (int)desc->backend, backends,
                                  3, "flashcl_backend");
    return status == FLASHCL_SUCCESS ? check_scale(ctx, desc) : status;
}

/* desc->backend, else FLASHCL_BACKEND (auto | fused | reference), else
 * fused. Read per call so that a test or tool can switch it at run time. */
static flashcl_status resolve_backend(flashcl_context *ctx,
                                      const flashcl_attention_desc *desc,
                                      flashcl_backend *backend)
{
    *backend = FLASHCL_BACKEND_FUSED;
    if (desc->backend != FLASHCL_BACKEND_AUTO) {
        *backend = desc->backend;
        return FLASHCL_SUCCESS;
    }
    const char *env = getenv("FLASHCL_BACKEND");
    if (!env || !*env || !strcmp(env, "auto") || !strcmp(env, "fused"))
        return FLASHCL_SUCCESS;
    if (!strcmp(env, "reference")) {
        *backend = FLASHCL_BACKEND_REFERENCE;
        return FLASHCL_SUCCESS;
    }
    return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                     "environment variable FLASHCL_BACKEND = \"%.64s\" is "
                     "not auto, fused or reference",
                     env);
}

/* ---- the descriptor's size (ABI) ------------------------------------ */

/* Everything up to `window` has been in the descriptor since struct_size
 * exists; later fields may be missing from an older caller's struct. */
#define DESC_MIN_SIZE offsetof(flashcl_attention_desc, window)

/* The caller's descriptor as this library's struct: fields past the
 * caller's struct_size read as zero; a newer caller's extra bytes must be
 * zero (a feature this library does not know is never silently dropped). */
static flashcl_status read_desc(flashcl_context *ctx,
                                const flashcl_attention_desc *desc,
                                flashcl_attention_desc *out)
{
    if (!desc)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "desc is NULL");
    const size_t size = desc->struct_size;
    if (size == 0)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "desc.struct_size is 0: initialise the descriptor "
                         "with FLASHCL_ATTENTION_DESC_INIT or "
                         "flashcl_attention_desc_init()");
    if (size < DESC_MIN_SIZE)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "desc.struct_size = %zu is smaller than any "
                         "descriptor this library knows (%zu)",
                         size, (size_t)DESC_MIN_SIZE);
    memset(out, 0, sizeof *out);
    memcpy(out, desc, size < sizeof *out ? size : sizeof *out);
    const unsigned char *bytes = (const unsigned char *)desc;
    for (size_t i = sizeof *out; i < size; ++i)
        if (bytes[i] != 0)
            return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                             "desc.struct_size = %zu: byte %zu is set, in a "
                             "field this library (%s, %zu-byte descriptor) "
                             "does not know",
                             size, i, FLASHCL_VERSION_STRING, sizeof *out);
    out->struct_size = sizeof *out;
    return FLASHCL_SUCCESS;
}

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

/* Distinct elements of a view never share bytes: with the axes of more
 * than one element sorted by stride, each stride must step over the whole
 * extent of the axes below it. (Views that interleave axes without overlap
 * are rejected too: no caller needs them, and the check stays simple.) */
bool view_is_injective(const tensor_view *t)
{
    uint64_t stride[4], size[4];
    int n = 0;
    for (int i = 0; i < 4; ++i)
        if (t->size[i] == 0)
            return true; /* no elements at all */
    for (int i = 0; i < 4; ++i)
        if (t->size[i] > 1) {
            stride[n] = t->stride[i];
            size[n++] = t->size[i];
        }
    for (int i = 1; i < n; ++i) /* insertion sort by stride */
        for (int j = i; j > 0 && stride[j] < stride[j - 1]; --j) {
            uint64_t s = stride[j], z = size[j];
            stride[j] = stride[j - 1], size[j] = size[j - 1];
            stride[j - 1] = s, size[j - 1] = z;
        }
    uint64_t extent = 1; /* elements spanned by the axes so far */
    for (int i = 0; i < n; ++i) {
        if (stride[i] < extent)
            return false;
        uint64_t reach;
        if (!mul_u64(stride[i], size[i] - 1, &reach) ||
            !add_u64(reach, 1, &extent))
            return false;
    }
    return true;
}

static flashcl_status view_extent(flashcl_context *ctx,
                                  const flashcl_tensor *tensor,
                                  const view_shape *shape, tensor_view *out,
                                  uint64_t *end_byte)
{
    uint64_t last = out->base;
    bool ok = true;
    for (int i = 0; i < 4 && ok; ++i)
        if (shape->size[i] != 0) {
            uint64_t reach;
            ok = mul_u64(shape->size[i] - 1, out->stride[i], &reach) &&
                 add_u64(last, reach, &last);
        }
    ok = ok && add_u64(last, 1, end_byte) &&
         mul_u64(*end_byte, shape->elem_size, end_byte);
    if (!ok)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_BOUNDS,
                         "%s: offset %zu and strides overflow 64-bit "
                         "addressing",
                         shape->name, tensor->offset);
    return FLASHCL_SUCCESS;
}

flashcl_status resolve_view(flashcl_context *ctx, const flashcl_tensor *tensor,
                            const view_shape *shape, problem_mode mode,
                            bool required, tensor_view *out)
{
    memset(out, 0, sizeof *out);
    if (!tensor->buffer && required && mode == PROBLEM_FOR_LAUNCH)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s.buffer is NULL",
                         shape->name);
    size_t mem_size = 0;
    if (tensor->buffer) {
        flashcl_status status =
            check_buffer(ctx, tensor, shape->name, &mem_size);
        if (status != FLASHCL_SUCCESS)
            return status;
    }
    if (tensor->offset % shape->elem_size != 0)
        return set_error(ctx, FLASHCL_ERROR_INVALID_LAYOUT,
                         "%s.offset = %zu is not a multiple of the element "
                         "size %zu",
                         shape->name, tensor->offset, shape->elem_size);
    const size_t given[4] = {tensor->stride_batch, tensor->stride_head,
                             tensor->stride_seq, tensor->stride_dim};
    if (!given[0] && !given[1] && !given[2] && !given[3])
        default_strides(shape, out->stride);
    else
        for (int i = 0; i < 4; ++i)
            out->stride[i] = given[i];
    memcpy(out->size, shape->size, sizeof out->size);
    out->base = tensor->offset / shape->elem_size;
    uint64_t end_byte = 0;
    flashcl_status status = view_extent(ctx, tensor, shape, out, &end_byte);
    if (status != FLASHCL_SUCCESS || !tensor->buffer)
        return status; /* planning without a buffer: the view as given */
    out->present = true;
    out->given = tensor->buffer;
    const bool empty = !shape->size[0] || !shape->size[1] ||
                       !shape->size[2] || !shape->size[3];
    if (empty) {
        out->root = tensor->buffer;
        return FLASHCL_SUCCESS; /* touches nothing */
    }
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
    out->root = root_buffer(tensor->buffer, &root_offset);
    out->first_byte = root_offset + out->base * shape->elem_size;
    out->end_byte = root_offset + end_byte;
    return FLASHCL_SUCCESS;
}

/* ---- aliasing ------------------------------------------------------- */

bool views_overlap(const tensor_view *a, const tensor_view *b)
{
    return a->present && b->present && a->root == b->root &&
           a->end_byte > a->first_byte && b->end_byte > b->first_byte &&
           a->first_byte < b->end_byte && b->first_byte < a->end_byte;
}

static flashcl_status alias_error(flashcl_context *ctx, named_view out,
                                  named_view other)
{
    return set_error(ctx, FLASHCL_ERROR_ALIASING,
                     "%s overlaps %s in the same buffer (bytes %llu..%llu and "
                     "%llu..%llu)",
                     out.name, other.name,
                     (unsigned long long)out.view->first_byte,
                     (unsigned long long)out.view->end_byte,
                     (unsigned long long)other.view->first_byte,
                     (unsigned long long)other.view->end_byte);
}

flashcl_status check_output_aliasing(flashcl_context *ctx,
                                     const named_view *all, size_t outputs,
                                     size_t count)
{
    for (size_t out = 0; out < outputs; ++out) {
        if (all[out].view->present && !view_is_injective(all[out].view))
            return set_error(ctx, FLASHCL_ERROR_ALIASING,
                             "%s: its strides (%llu/%llu/%llu/%llu) make "
                             "distinct elements share memory, so the result "
                             "would depend on write order",
                             all[out].name,
                             (unsigned long long)all[out].view->stride[0],
                             (unsigned long long)all[out].view->stride[1],
                             (unsigned long long)all[out].view->stride[2],
                             (unsigned long long)all[out].view->stride[3]);
        for (size_t other = out + 1; other < count; ++other)
            if (views_overlap(all[out].view, all[other].view))
                return alias_error(ctx, all[out], all[other]);
    }
    return FLASHCL_SUCCESS;
}

/* Outputs (O, LSE) may overlap nothing else, and no element of an output
 * may share bytes with another element of it. */
static flashcl_status check_aliasing(flashcl_context *ctx, const problem *p)
{
    named_view all[5 + PROBLEM_MAX_VARIANTS] = {
        {&p->o, "o"}, {&p->lse, "lse"}, {&p->q, "q"}, {&p->k, "k"},
        {&p->v, "v"}};
    size_t count = 5;
    for (size_t i = 0; i < variant_count(); ++i)
        if (p->variant_tensor[i].present)
            all[count++] = (named_view){&p->variant_tensor[i],
                                        variant_at(i)->name};
    return check_output_aliasing(ctx, all, 2, count);
}

/* ---- the problem ---------------------------------------------------- */

static void resolve_scalars(const flashcl_attention_desc *desc, problem *p)
{
    p->batch = desc->batch;
    p->heads_q = desc->heads_q;
    p->heads_kv = desc->heads_kv ? desc->heads_kv : desc->heads_q;
    p->seqlen_q = desc->seqlen_q;
    p->seqlen_k = desc->seqlen_k;
    p->head_dim = desc->head_dim;
    p->head_dim_v = desc->head_dim_v ? desc->head_dim_v : desc->head_dim;
    p->dtype = desc->dtype;
    p->elem_size = dtype_size(desc->dtype);
    p->layout = desc->layout;
    p->causal = desc->causal != 0;
    p->allow_tf32 = desc->allow_tf32 != 0 && desc->dtype == FLASHCL_DTYPE_FP32;
    p->scale = desc->scale != 0.0f || desc->explicit_scale
                   ? (double)desc->scale
                   : 1.0 / sqrt((double)desc->head_dim);
    p->empty = p->batch == 0 || p->heads_q == 0 || p->seqlen_q == 0;
    p->diag = desc->causal_align == FLASHCL_CAUSAL_ABSOLUTE
                  ? desc->q_position - desc->k_position
                  : aligned_diag(desc->causal_align == FLASHCL_CAUSAL_TOP_LEFT,
                                 p->seqlen_q, p->seqlen_k);
    p->left = -1;
    p->right = p->causal ? 0 : -1;
    p->q_extent[0] = p->kv_extent[0] = p->batch;
    p->q_extent[1] = p->seqlen_q;
    p->kv_extent[1] = p->seqlen_k;
}

view_shape rows_shape(const problem *p, const char *name, bool keys,
                      int64_t dim)
{
    const int64_t *extent = keys ? p->kv_extent : p->q_extent;
    const view_shape shape = {
        name,
        {(uint64_t)extent[0], (uint64_t)(keys ? p->heads_kv : p->heads_q),
         (uint64_t)extent[1], (uint64_t)dim},
        p->elem_size,
        p->layout,
        STRIDES_PACKED_LAYOUT};
    return shape;
}

flashcl_status resolve_views(flashcl_context *ctx,
                             const view_request *requests, size_t count,
                             problem_mode mode)
{
    const flashcl_tensor none = {0};
    const bool host = mode == PROBLEM_FOR_HOST_CALL;
    for (size_t i = 0; i < count; ++i) {
        flashcl_status status = resolve_view(
            ctx, host ? &none : requests[i].tensor, &requests[i].shape,
            host ? PROBLEM_FOR_PLANNING : mode, requests[i].required,
            requests[i].out);
        if (status != FLASHCL_SUCCESS)
            return status;
    }
    return FLASHCL_SUCCESS;
}

/* An fp64 LSE only where an fp64 accumulation has one to give, and only
 * on the fused dense forward, whose portable kernel stores it; every other
 * way of running the call keeps its fp32 LSE and says so. */
static flashcl_status check_lse_dtype(flashcl_context *ctx,
                                      const flashcl_attention_desc *desc,
                                      problem_mode mode, problem *p)
{
    if (desc->lse_dtype == FLASHCL_DTYPE_FP32)
        return FLASHCL_SUCCESS;
    if (desc->lse_dtype != FLASHCL_DTYPE_FP64)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "lse_dtype = %d: the LSE is fp32 or (fp64 calls) "
                         "fp64",
                         (int)desc->lse_dtype);
    if (desc->dtype != FLASHCL_DTYPE_FP64)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "lse_dtype fp64 needs dtype fp64 (dtype = %d "
                         "accumulates in fp32)",
                         (int)desc->dtype);
    const char *refuser =
        mode == PROBLEM_FOR_HOST_CALL ? "the host calls, whose lse is a "
                                        "float *,"
        : p->backend == FLASHCL_BACKEND_REFERENCE ? "the reference backend"
        : p->infer.needs_split_kernel ? "the split-KV kernels (inference "
                                        "fields)"
                                      : NULL;
    if (refuser)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "lse_dtype fp64: %s writes an fp32 LSE only",
                         refuser);
    p->lse_fp64 = true;
    return FLASHCL_SUCCESS;
}

static flashcl_status resolve_base_views(flashcl_context *ctx,
                                         const flashcl_attention_desc *desc,
                                         problem_mode mode, problem *p)
{
    const int64_t d = p->head_dim, dv = p->head_dim_v;
    const view_shape lse = {"lse",
                            {(uint64_t)p->q_extent[0], (uint64_t)p->heads_q,
                             (uint64_t)p->q_extent[1], 1},
                            p->lse_fp64 ? sizeof(double) : sizeof(float),
                            desc->layout,
                            STRIDES_PACKED_LSE};
    /* a quantized K or V counts bytes (kv_quant.c) */
    view_shape k = rows_shape(p, "k", true, p->quant.k.cols);
    view_shape v = rows_shape(p, "v", true, p->quant.v.cols);
    k.elem_size = p->quant.k.elem;
    v.elem_size = p->quant.v.elem;
    const view_request views[5] = {
        {&desc->q, rows_shape(p, "q", false, d), &p->q, true},
        {&desc->k, k, &p->k, true},
        {&desc->v, v, &p->v, true},
        {&desc->o, rows_shape(p, "o", false, dv), &p->o, true},
        {&desc->lse, lse, &p->lse, false},
    };
    return resolve_views(ctx, views, 5, mode);
}

/* Absent optional tensors still need a valid cl_mem argument. */
static void dummy_variant_args(flashcl_context *ctx, problem *p)
{
    p->vargs.bias = p->vargs.mask = p->vargs.alibi = p->vargs.sinks =
        ctx->dummy;
}

flashcl_status problem_from_desc(flashcl_context *ctx,
                                 const flashcl_attention_desc *given,
                                 problem_mode mode, problem *p)
{
    memset(p, 0, sizeof *p);
    flashcl_attention_desc desc_storage;
    flashcl_status status = read_desc(ctx, given, &desc_storage);
    if (status != FLASHCL_SUCCESS)
        return status;
    const flashcl_attention_desc *desc = &desc_storage;
    status = check_dims(ctx, desc);
    if (status == FLASHCL_SUCCESS)
        status = check_enums(ctx, desc);
    if (status == FLASHCL_SUCCESS)
        status = resolve_backend(ctx, desc, &p->backend);
    if (status != FLASHCL_SUCCESS)
        return status;
    resolve_scalars(desc, p);
    dummy_variant_args(ctx, p);
    status = inference_resolve(ctx, desc, mode, p);
    if (status == FLASHCL_SUCCESS)
        status = kv_quant_resolve(ctx, desc, mode, p);
    if (status == FLASHCL_SUCCESS)
        status = variants_resolve(ctx, desc, p);
    if (status == FLASHCL_SUCCESS)
        status = check_lse_dtype(ctx, desc, mode, p);
    if (status == FLASHCL_SUCCESS)
        status = resolve_base_views(ctx, desc, mode, p);
    if (status == FLASHCL_SUCCESS)
        status = check_aliasing(ctx, p);
    if (status == FLASHCL_SUCCESS)
        status = inference_check_views(ctx, p);
    if (status == FLASHCL_SUCCESS)
        status = kv_quant_views(ctx, desc, mode, p);
    return status;
}

flashcl_status problem_check_desc_header(flashcl_context *ctx,
                                         const void *desc, size_t expected,
                                         const char *name, const char *init)
{
    if (!desc)
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s is NULL", name);
    const size_t size = *(const size_t *)desc;
    if (size != expected)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "%s.struct_size = %zu, expected %zu: initialise the "
                         "descriptor with %s",
                         name, size, expected, init);
    return FLASHCL_SUCCESS;
}

flashcl_status problem_begin_call(flashcl_context *ctx,
                                  const flashcl_attention_desc *desc,
                                  problem_mode mode, const void *out,
                                  const char *out_name, problem *p)
{
    flashcl_status status = begin_call_out(ctx, out, out_name);
    return status == FLASHCL_SUCCESS ? problem_from_desc(ctx, desc, mode, p)
                                     : status;
}

void problem_packed_bytes(const problem *p, size_t *q, size_t *k, size_t *v,
                          size_t *o, size_t *lse)
{
    /* check_dims bounded these products. */
    const size_t e = p->elem_size;
    *q = (size_t)(p->batch * p->heads_q * p->seqlen_q * p->head_dim) * e;
    *k = (size_t)(p->batch * p->heads_kv * p->seqlen_k * p->head_dim) * e;
    *v = (size_t)(p->batch * p->heads_kv * p->seqlen_k * p->head_dim_v) * e;
    *o = (size_t)(p->batch * p->heads_q * p->seqlen_q * p->head_dim_v) * e;
    *lse = (size_t)(p->batch * p->heads_q * p->seqlen_q) * sizeof(float);
}

flashcl_status problem_bind_packed(flashcl_context *ctx, problem *p, cl_mem q,
                                   cl_mem k, cl_mem v, cl_mem o, cl_mem lse)
{
    flashcl_attention_desc packed = FLASHCL_ATTENTION_DESC_INIT;
    packed.layout = p->layout;
    packed.q.buffer = q;
    packed.k.buffer = k;
    packed.v.buffer = v;
    packed.o.buffer = o;
    packed.lse.buffer = lse;
    flashcl_status status =
        resolve_base_views(ctx, &packed, PROBLEM_FOR_LAUNCH, p);
    return status != FLASHCL_SUCCESS ? status : check_aliasing(ctx, p);
}

bool view_rows_aligned(const tensor_view *t, size_t elem_size, size_t align)
{
    if (t->stride[3] != 1 || (t->base * elem_size) % align != 0)
        return false;
    for (int i = 0; i < 3; ++i)
        if (t->size[i] > 1 && (t->stride[i] * elem_size) % align != 0)
            return false;
    return true;
}

cl_ulong4 ulong4_from(const uint64_t v[4])
{
    cl_ulong4 out;
    for (int i = 0; i < 4; ++i)
        out.s[i] = v[i];
    return out;
}
