/* KV-cache mode of a problem (`flashcl run --kv-cache / --kv-dtype`): K
 * and V become a dense cache read through cache_seqlens, and a quantized
 * side is written by the host quantizer (support/kv_quant_oracle.h), so
 * that the kernel's dequantizing loads are checked against a float64
 * oracle of the very bytes it reads. */
#define _POSIX_C_SOURCE 200809L
#include "cli_problem.h"

#include "kv_quant_oracle.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_mem copy_to_device(cl_context context, const void *data,
                             size_t bytes, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    return clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                          bytes, (void *)data, err);
}

/* One per-tensor scale, as vLLM's fp8 cache keeps: the tensor's amax maps
 * to the type's largest finite value, so that no value saturates. */
static float fp8_tensor_scale(int type, const void *x, size_t count,
                              flashcl_dtype dtype)
{
    double amax = 0;
    for (size_t i = 0; i < count; ++i)
        amax = fmax(amax, fabs(oracle_load(x, i, dtype)));
    return amax > 0 ? (float)(amax / kvq_fp8_max(type)) : 1.0f;
}

typedef struct host_side {
    unsigned char *bytes;
    float *scales, *zeros;
    float row[256]; /* one row of the dtype's values (head_dim <= 256) */
} host_side;

/* Quantizes every row of `x` (count values, rows of dim) and keeps the
 * values the kernel must read back in side->values. */
static void quantize_rows(problem_kv_side *side, host_side *h, const void *x,
                          size_t count, size_t dim, flashcl_dtype dtype,
                          float fp8_scale)
{
    const size_t row_bytes = kvq_row_bytes(side->type, dim);
    const size_t per_row = kvq_row_scales(side->type, dim);
    const bool int4 = side->type == FLASHCL_KV_INT4;
    for (size_t r = 0; r < count / dim; ++r) {
        for (size_t d = 0; d < dim; ++d)
            h->row[d] = (float)oracle_load(x, r * dim + d, dtype);
        unsigned char *bytes = h->bytes + r * row_bytes;
        float *scales = per_row ? h->scales + r * per_row : NULL;
        float *zeros = int4 ? h->zeros + r * per_row : NULL;
        kvq_quantize_row(side->type, h->row, dim, fp8_scale, bytes, scales,
                         zeros);
        for (size_t d = 0; d < dim; ++d)
            side->values[r * dim + d] =
                kvq_dequant(side->type, bytes, d, scales, zeros, fp8_scale);
    }
}

/* K (which 0) or V (1) quantized into side->type: host rows, then their
 * device copies. */
static int quantize_side(cl_context context, problem *p, int which,
                         char *why, size_t why_cap)
{
    problem_kv_side *side = &p->kv[which];
    const size_t dim = (size_t)(which ? p->spec.head_dim_v
                                      : p->spec.head_dim);
    const size_t count = which ? p->v_count : p->k_count;
    const void *x = which ? p->v : p->k;
    const size_t rows = count / dim;
    const size_t per_row = kvq_row_scales(side->type, dim);
    const size_t scales = per_row ? rows * per_row : 1;
    host_side h = {calloc(rows * kvq_row_bytes(side->type, dim) + 1, 1),
                   calloc(scales, sizeof(float)),
                   calloc(scales, sizeof(float)), {0}};
    side->values = calloc(count ? count : 1, sizeof *side->values);
    /* int4 rows are whole groups of 32, or the library refuses the call
     * (the refusal is what such a run shows): nothing to quantize then. */
    const bool whole_groups =
        side->type != FLASHCL_KV_INT4 || dim % KVQ_GROUP == 0;
    cl_int err = CL_SUCCESS;
    const bool ok = h.bytes && h.scales && h.zeros && side->values &&
                    dim <= sizeof h.row / sizeof h.row[0];
    if (ok) {
        const float fp8_scale =
            per_row ? 0 : fp8_tensor_scale(side->type, x, count, p->dtype);
        h.scales[0] = fp8_scale;
        if (whole_groups)
            quantize_rows(side, &h, x, count, dim, p->dtype, fp8_scale);
        side->bytes_buf = copy_to_device(
            context, h.bytes, rows * kvq_row_bytes(side->type, dim) + 1, &err);
        side->scale_buf =
            copy_to_device(context, h.scales, scales * sizeof(float), &err);
        if (side->type == FLASHCL_KV_INT4)
            side->zero_buf =
                copy_to_device(context, h.zeros, scales * sizeof(float), &err);
    }
    free(h.bytes);
    free(h.scales);
    free(h.zeros);
    if (!ok)
        snprintf(why, why_cap, "out of host memory quantizing %s",
                 which ? "V" : "K");
    else if (err != CL_SUCCESS)
        snprintf(why, why_cap, "creating the quantized %s buffers failed "
                               "(OpenCL error %d)",
                 which ? "V" : "K", (int)err);
    return ok && err == CL_SUCCESS ? 0 : -1;
}

int problem_kv_create(flashcl_context *ctx, problem *p, char *why,
                      size_t why_cap)
{
    cl_context context = flashcl_context_cl_context(ctx);
    p->kv[0].type = p->spec.k_storage;
    p->kv[1].type = p->spec.v_storage;
    int *lens = malloc((size_t)p->spec.batch * sizeof *lens);
    if (!lens) {
        snprintf(why, why_cap, "out of host memory for cache_seqlens");
        return -1;
    }
    for (int b = 0; b < p->spec.batch; ++b)
        lens[b] = p->spec.seqlen_k;
    cl_int err = CL_SUCCESS;
    p->seqlens_buf = copy_to_device(
        context, lens, (size_t)p->spec.batch * sizeof *lens, &err);
    free(lens);
    if (err != CL_SUCCESS) {
        snprintf(why, why_cap, "creating cache_seqlens failed (OpenCL "
                               "error %d)",
                 (int)err);
        return -1;
    }
    for (int which = 0; which < 2; ++which)
        if (p->kv[which].type &&
            quantize_side(context, p, which, why, why_cap) != 0)
            return -1;
    return 0;
}

void problem_kv_release(problem *p)
{
    if (p->seqlens_buf)
        clReleaseMemObject(p->seqlens_buf);
    for (int which = 0; which < 2; ++which) {
        problem_kv_side *side = &p->kv[which];
        cl_mem buffers[3] = {side->bytes_buf, side->scale_buf,
                             side->zero_buf};
        for (int i = 0; i < 3; ++i)
            if (buffers[i])
                clReleaseMemObject(buffers[i]);
        free(side->values);
    }
    p->seqlens_buf = NULL;
    memset(p->kv, 0, sizeof p->kv);
}

/* A quantized side's packed byte view, its scale (fp8: one per tensor)
 * and int4's zero points. */
static void quantized_fields(const problem_kv_side *side, flashcl_tensor *t,
                             flashcl_kv_storage *storage,
                             flashcl_tensor *scale, flashcl_tensor *zero)
{
    const flashcl_tensor packed = {0};
    *t = packed;
    t->buffer = side->bytes_buf;
    *storage = (flashcl_kv_storage)side->type;
    *scale = packed;
    scale->buffer = side->scale_buf;
    *zero = packed;
    zero->buffer = side->zero_buf;
}

void problem_kv_desc(const problem *p, flashcl_attention_desc *d)
{
    if (!p->spec.kv_cache)
        return;
    d->cache_seqlens.buffer = p->seqlens_buf;
    if (p->kv[0].type)
        quantized_fields(&p->kv[0], &d->k, &d->k_storage, &d->k_scale,
                         &d->k_zero);
    if (p->kv[1].type)
        quantized_fields(&p->kv[1], &d->v, &d->v_storage, &d->v_scale,
                         &d->v_zero);
}

bool problem_kv_quantized(const problem *p)
{
    return p->kv[0].type || p->kv[1].type;
}
