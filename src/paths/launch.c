/* Launch of the fused forward kernel: variant choice, arguments, NDRange. */
#include "../internal.h"

#include <math.h>
#include <string.h>

static bool dims_contiguous(const resolved_problem *p)
{
    return p->q.stride[3] == 1 && p->k.stride[3] == 1 &&
           p->v.stride[3] == 1 && p->o.stride[3] == 1;
}

static bool rows_aligned(const resolved_tensor *t, size_t elem_size)
{
    if ((t->base * elem_size) % 16 != 0)
        return false;
    for (int i = 0; i < 3; ++i)
        if ((t->stride[i] * elem_size) % 16 != 0)
            return false;
    return true;
}

static cl_ulong4 ulong4_of(const uint64_t v[4])
{
    cl_ulong4 out;
    for (int i = 0; i < 4; ++i)
        out.s[i] = v[i];
    return out;
}

typedef struct kernel_args {
    cl_ulong4 stride[5]; /* q, k, v, o, lse */
    cl_ulong4 base;
    cl_ulong lse_base;
    cl_int seqlen_q, seqlen_k, head_dim, group_size;
    cl_float scale_log2;
    cl_double scale_log2_fp64; /* fp64 kernels take real_t = double */
    cl_int write_lse;
    cl_mem lse;
    /* Portable-kernel extras. */
    cl_int head_dim_v;
    cl_long diag, window_left, window_right;
    cl_float softcap_log2;
    cl_double softcap_log2_fp64;
    cl_mem extra_buffer[4]; /* bias, mask, alibi, sinks (dummy if absent) */
    cl_ulong4 extra_stride[4];
    cl_ulong extra_base[4];
} kernel_args;

#define LOG2E 1.4426950408889634

static void pack_args(flashcl_context *ctx, const resolved_problem *p,
                      kernel_args *a)
{
    const resolved_tensor *views[5] = {&p->q, &p->k, &p->v, &p->o, &p->lse};
    for (int i = 0; i < 5; ++i)
        a->stride[i] = ulong4_of(views[i]->stride);
    const uint64_t bases[4] = {p->q.base, p->k.base, p->v.base, p->o.base};
    a->base = ulong4_of(bases);
    a->lse_base = p->lse.present ? p->lse.base : 0;
    a->seqlen_q = (cl_int)p->seqlen_q;
    a->seqlen_k = (cl_int)p->seqlen_k;
    a->head_dim = (cl_int)p->head_dim;
    a->group_size = (cl_int)(p->heads_q / p->heads_kv);
    a->scale_log2_fp64 = p->scale * LOG2E;
    a->scale_log2 = (cl_float)a->scale_log2_fp64;
    a->write_lse = p->lse.present ? 1 : 0;
    /* The original (sub-)buffer, not the root used for aliasing checks. */
    a->lse = p->lse.present ? NULL : ctx->dummy_lse;
    a->head_dim_v = (cl_int)p->head_dim_v;
    a->diag = p->diag;
    a->window_left = p->left;
    a->window_right = p->right;
    a->softcap_log2_fp64 = (double)p->softcap * LOG2E;
    a->softcap_log2 = (cl_float)a->softcap_log2_fp64;
    const resolved_tensor *extras[4] = {&p->bias, &p->mask, &p->alibi,
                                        &p->sinks};
    for (int i = 0; i < 4; ++i) {
        a->extra_buffer[i] = ctx->dummy_lse;
        a->extra_stride[i] = ulong4_of(extras[i]->stride);
        a->extra_base[i] = extras[i]->base;
    }
}

/* The caller's (sub-)buffers of the optional inputs, in ABI order. */
static void extra_buffers(const flashcl_attention_desc *desc,
                          const resolved_problem *p, kernel_args *a)
{
    const flashcl_tensor *given[4] = {&desc->bias, &desc->mask,
                                      &desc->alibi_slopes, &desc->sinks};
    const resolved_tensor *resolved[4] = {&p->bias, &p->mask, &p->alibi,
                                          &p->sinks};
    for (int i = 0; i < 4; ++i)
        if (resolved[i]->present)
            a->extra_buffer[i] = given[i]->buffer;
}

static cl_int set_args(cl_kernel kernel, kernel_family family,
                       const resolved_problem *p,
                       const flashcl_attention_desc *desc, const kernel_args *a)
{
    const bool fp64 = p->dtype == FLASHCL_DTYPE_FP64;
    cl_int err = CL_SUCCESS;
    cl_uint i = 0;
#define ARG(value)                                                             \
    do {                                                                       \
        if (err == CL_SUCCESS)                                                 \
            err = clSetKernelArg(kernel, i, sizeof(value), &(value));           \
        ++i;                                                                   \
    } while (0)
    ARG(desc->q.buffer);
    ARG(desc->k.buffer);
    ARG(desc->v.buffer);
    ARG(desc->o.buffer);
    if (p->lse.present)
        ARG(desc->lse.buffer);
    else
        ARG(a->lse);
    for (int t = 0; t < 5; ++t)
        ARG(a->stride[t]);
    ARG(a->base);
    ARG(a->lse_base);
    ARG(a->seqlen_q);
    ARG(a->seqlen_k);
    ARG(a->head_dim);
    ARG(a->group_size);
    if (fp64)
        ARG(a->scale_log2_fp64);
    else
        ARG(a->scale_log2);
    ARG(a->write_lse);
    if (family != KERNEL_PORTABLE)
        return err;
    ARG(a->head_dim_v);
    ARG(a->diag);
    ARG(a->window_left);
    ARG(a->window_right);
    if (fp64)
        ARG(a->softcap_log2_fp64);
    else
        ARG(a->softcap_log2);
    for (int t = 0; t < 4; ++t) {
        ARG(a->extra_buffer[t]);
        ARG(a->extra_stride[t]);
        ARG(a->extra_base[t]);
    }
#undef ARG
    return err;
}

void problem_variant_query(const resolved_problem *p, variant_query *query)
{
    query->seqlen_q = p->seqlen_q;
    query->head_dim = (int)p->head_dim;
    query->head_dim_v = (int)p->head_dim_v;
    query->dtype = p->dtype;
    query->causal = p->right >= 0;
    query->has_variants = p->has_variants;
    query->top_left = p->causal && p->diag != p->seqlen_k - p->seqlen_q;
    query->window_left = p->left >= 0;
    query->softcap = p->softcap != 0.0f;
    query->alibi = p->alibi.present;
    query->mask = p->mask.present;
    query->sinks = p->sinks.present;
    query->bias = !p->bias.present                      ? 0
                  : p->bias_dtype == FLASHCL_DTYPE_FP32 ? 1
                  : p->bias_dtype == FLASHCL_DTYPE_FP16 ? 2
                                                        : 3;
    query->dim_contiguous = dims_contiguous(p);
    query->rows_aligned_16B =
        rows_aligned(&p->q, p->elem_size) && rows_aligned(&p->k, p->elem_size) &&
        rows_aligned(&p->v, p->elem_size) && rows_aligned(&p->o, p->elem_size);
}

flashcl_status launch_fused(flashcl_context *ctx, cl_command_queue queue,
                            const flashcl_attention_desc *desc,
                            const resolved_problem *p, cl_uint num_wait,
                            const cl_event *wait_list, cl_event *event)
{
    variant_query query;
    problem_variant_query(p, &query);
    variant_key key;
    const char *reason;
    choose_variant(&ctx->caps, &query, &key, &reason);
    cached_kernel *entry;
    flashcl_status status = get_kernel(ctx, &key, &entry, NULL);
    if (status != FLASHCL_SUCCESS)
        return status;
    kernel_args args;
    pack_args(ctx, p, &args);
    extra_buffers(desc, p, &args);
    const size_t num_blocks =
        (size_t)((p->seqlen_q + key.block_m - 1) / key.block_m);
    const size_t local[3] = {(size_t)key.wg_size, 1, 1};
    const size_t global[3] = {num_blocks * (size_t)key.wg_size,
                              (size_t)p->heads_q, (size_t)p->batch};
    pthread_mutex_lock(&entry->launch_lock);
    cl_int err = set_args(entry->kernel, key.family, p, desc, &args);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, entry->kernel, 3, NULL, global,
                                     local, num_wait, wait_list, event);
    pthread_mutex_unlock(&entry->launch_lock);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "launching the fused kernel (%s, D=%d, BM=%d, BN=%d, "
                         "WG=%d): %s",
                         kernel_family_file(key.family), key.head_dim_padded,
                         key.block_m, key.block_n, key.wg_size,
                         cl_error_name(err));
    return FLASHCL_SUCCESS;
}
