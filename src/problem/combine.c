/* The combine descriptor (flashcl_combine_partials): checked and resolved
 * into a combine_problem before anything is enqueued, with the same view,
 * bounds and aliasing rules as the attention descriptor. */
#include "problem/problem.h"
#include "problem/variants.h"

#include <stdio.h>
#include <string.h>

#define COMBINE_MAX_DIM INT32_MAX /* the kernel indexes with int */

/* fp64 partials carry fp64 LSEs and merge in fp64, into an fp64 o: an
 * fp64 merge is only worth its cost where nothing on the way is fp32. */
static flashcl_status check_fp64_merge(flashcl_context *ctx,
                                       const flashcl_combine_desc *d)
{
    if (dtype_size(d->partial_dtype) == 0)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "partial_dtype = %d: partials are fp32, fp16, bf16 "
                         "or fp64",
                         (int)d->partial_dtype);
    if (d->lse_dtype != FLASHCL_DTYPE_FP32 &&
        d->lse_dtype != FLASHCL_DTYPE_FP64)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "lse_dtype = %d: the merged LSE is fp32 or fp64",
                         (int)d->lse_dtype);
    const bool fp64_part = d->partial_dtype == FLASHCL_DTYPE_FP64;
    if (fp64_part && d->dtype != FLASHCL_DTYPE_FP64)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "partial_dtype fp64 needs dtype fp64 (dtype = %d)",
                         (int)d->dtype);
    if (d->lse_dtype == FLASHCL_DTYPE_FP64 && !fp64_part)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "lse_dtype fp64 needs partial_dtype fp64 (an fp32 "
                         "merge has no fp64 LSE to give)");
    return FLASHCL_SUCCESS;
}

static flashcl_status check_sizes(flashcl_context *ctx,
                                  const flashcl_combine_desc *d)
{
    const struct {
        const char *name;
        int64_t value;
    } dims[] = {{"num_partials", d->num_partials}, {"batch", d->batch},
                {"heads", d->heads}, {"seqlen_q", d->seqlen_q},
                {"head_dim_v", d->head_dim_v}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i)
        if (dims[i].value < 0 || dims[i].value > COMBINE_MAX_DIM)
            return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                             "%s = %lld: must be in 0..%d", dims[i].name,
                             (long long)dims[i].value, COMBINE_MAX_DIM);
    if (d->num_partials < 1)
        return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                         "num_partials = %lld: at least one partial is needed",
                         (long long)d->num_partials);
    /* Element counts fit 64-bit byte arithmetic (each factor < 2^31). */
    const double elems = (double)d->num_partials * (double)d->batch *
                         (double)d->heads * (double)d->seqlen_q *
                         ((double)d->head_dim_v + 1.0) * 8.0;
    if (elems > 9.0e18)
        return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                         "num_partials * batch * heads * seqlen_q * "
                         "head_dim_v overflows");
    if (dtype_size(d->dtype) == 0)
        return set_error(ctx, FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                         "dtype = %d is not a flashcl_dtype", (int)d->dtype);
    if (d->dtype == FLASHCL_DTYPE_FP64 && !ctx->caps.has_fp64)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "dtype fp64 needs cl_khr_fp64, which %s lacks",
                         ctx->caps.name);
    const flashcl_status status = check_fp64_merge(ctx, d);
    if (status != FLASHCL_SUCCESS)
        return status;
    if (d->layout != FLASHCL_LAYOUT_BNHD && d->layout != FLASHCL_LAYOUT_BHND)
        return set_error(ctx, FLASHCL_ERROR_INVALID_LAYOUT,
                         "layout = %d is not a flashcl_layout", (int)d->layout);
    return FLASHCL_SUCCESS;
}

/* A partial tensor: the view of partial 0, and the view of the last one
 * (offset moved by (P - 1) steps) checked against the buffer as well, so
 * every partial lies inside it; `view` then spans them all for aliasing. */
static flashcl_status resolve_partials(flashcl_context *ctx,
                                       const flashcl_tensor *t,
                                       const view_shape *shape,
                                       uint64_t step, int64_t parts,
                                       tensor_view *view)
{
    flashcl_status status =
        resolve_view(ctx, t, shape, PROBLEM_FOR_LAUNCH, true, view);
    if (status != FLASHCL_SUCCESS || parts == 1)
        return status;
    const uint64_t shift_elems = step * (uint64_t)(parts - 1);
    if (step && (shift_elems / step != (uint64_t)(parts - 1) ||
                 shift_elems > (UINT64_MAX - t->offset) / shape->elem_size))
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_BOUNDS,
                         "%s: %lld partials of stride %llu overflow 64-bit "
                         "addressing",
                         shape->name, (long long)parts,
                         (unsigned long long)step);
    flashcl_tensor last = *t;
    last.offset += (size_t)(shift_elems * shape->elem_size);
    if (!t->stride_batch && !t->stride_head && !t->stride_seq &&
        !t->stride_dim) { /* keep partial 0's packed strides */
        last.stride_batch = (size_t)view->stride[0];
        last.stride_head = (size_t)view->stride[1];
        last.stride_seq = (size_t)view->stride[2];
        last.stride_dim = (size_t)view->stride[3];
    }
    tensor_view last_view;
    status = resolve_view(ctx, &last, shape, PROBLEM_FOR_LAUNCH, true,
                          &last_view);
    if (status == FLASHCL_SUCCESS && last_view.end_byte > view->end_byte)
        view->end_byte = last_view.end_byte;
    return status;
}

static flashcl_status check_outputs(flashcl_context *ctx,
                                    const combine_problem *p)
{
    const named_view all[4] = {{&p->o, "o"},
                               {&p->lse, "lse"},
                               {&p->o_part, "o_partial"},
                               {&p->lse_part, "lse_partial"}};
    return check_output_aliasing(ctx, all, 2, 4);
}

flashcl_status combine_problem_from_desc(flashcl_context *ctx,
                                         const flashcl_combine_desc *d,
                                         combine_problem *p)
{
    memset(p, 0, sizeof *p);
    flashcl_status status = problem_check_desc_header(
        ctx, d, sizeof *d, "desc", "FLASHCL_COMBINE_DESC_INIT");
    if (status == FLASHCL_SUCCESS)
        status = check_sizes(ctx, d);
    if (status != FLASHCL_SUCCESS)
        return status;
    p->parts = d->num_partials;
    p->batch = d->batch;
    p->heads = d->heads;
    p->seqlen_q = d->seqlen_q;
    p->head_dim_v = d->head_dim_v;
    p->dtype = d->dtype;
    p->partial_dtype = d->partial_dtype;
    p->lse_fp64 = d->lse_dtype == FLASHCL_DTYPE_FP64;
    const size_t lp_size = d->partial_dtype == FLASHCL_DTYPE_FP64
                               ? sizeof(double)
                               : sizeof(float);
    p->empty = !p->batch || !p->heads || !p->seqlen_q || !p->head_dim_v;
    const uint64_t b = (uint64_t)p->batch, h = (uint64_t)p->heads,
                   n = (uint64_t)p->seqlen_q, dv = (uint64_t)p->head_dim_v;
    p->o_part_step = d->o_partial_stride ? d->o_partial_stride : b * h * n * dv;
    p->lse_part_step = d->lse_partial_stride ? d->lse_partial_stride : b * h * n;
    const view_shape o_part = {"o_partial", {b, h, n, dv},
                               dtype_size(d->partial_dtype),
                               FLASHCL_LAYOUT_BHND, STRIDES_PACKED_LAYOUT};
    const view_shape lse_part = {"lse_partial", {b, h, n, 1}, lp_size,
                                 FLASHCL_LAYOUT_BHND, STRIDES_PACKED_LSE};
    const view_shape o = {"o", {b, h, n, dv}, dtype_size(d->dtype), d->layout,
                          STRIDES_PACKED_LAYOUT};
    const view_shape lse = {"lse", {b, h, n, 1},
                            p->lse_fp64 ? sizeof(double) : sizeof(float),
                            d->layout,
                            STRIDES_PACKED_LSE};
    status = resolve_partials(ctx, &d->o_partial, &o_part, p->o_part_step,
                              p->parts, &p->o_part);
    if (status == FLASHCL_SUCCESS)
        status = resolve_partials(ctx, &d->lse_partial, &lse_part,
                                  p->lse_part_step, p->parts, &p->lse_part);
    if (status == FLASHCL_SUCCESS)
        status = resolve_view(ctx, &d->o, &o, PROBLEM_FOR_LAUNCH, true, &p->o);
    if (status == FLASHCL_SUCCESS)
        status =
            resolve_view(ctx, &d->lse, &lse, PROBLEM_FOR_LAUNCH, false, &p->lse);
    if (status == FLASHCL_SUCCESS)
        status = check_outputs(ctx, p);
    return status;
}
