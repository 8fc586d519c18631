/* The reference backward: the gradients of attention unfused, with
 * CLBlast GEMMs around our own kernels (cl/reference/reference_attention.cl).
 * For each KV head, for each of its query heads in order, for each chunk
 * of query rows:
 *
 *   S  = scale * Q K^T           GEMM
 *   dP = dO V^T                  GEMM
 *   P, dS = P (dP - Delta)       ref_bwd_ds (P from the forward's LSE)
 *   dV += P^T dO                 GEMM, beta 1
 *   dK += scale * dS^T Q         GEMM, beta 1
 *   dQ  = scale * dS K           GEMM, then ref_bwd_store
 *
 * dK and dV of the KV head are then stored. The sums over query heads
 * (GQA) and row chunks are the GEMMs' beta = 1 accumulations, enqueued in
 * a fixed order on an in-order queue: deterministic. Every GEMM is a
 * plain one on buffers at offset 0 (no strided batch: reference.c says
 * why). Scratch is O(rows * seqlen_k) and cut into row chunks under the
 * context's scratch limit; it lives for one call (OpenCL frees it once
 * the commands that use it are done). */
#include "problem/variants.h"
#include "reference/reference.h"

#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BWD_K, BWD_V, BWD_DK, BWD_DV,      /* seqlen_k rows: one KV head */
    BWD_Q, BWD_DO, BWD_S, BWD_DP,      /* chunk rows */
    BWD_DQ, BWD_SINK, BWD_SINK_ACC, BWD_COUNT
};

typedef struct bwd_run {
    flashcl_context *ctx;
    cl_command_queue queue;
    const problem *p;
    const reference_bwd_views *w;
    compiled_program *program;
    cl_kernel pack, ds, store, dsinks;
    cl_mem mem[BWD_COUNT];
    uint64_t rows_per_chunk;
} bwd_run;

static flashcl_status bwd_cl_failed(flashcl_context *ctx, const char *what,
                                    cl_int err)
{
    return set_error(ctx, FLASHCL_ERROR_OPENCL,
                     "reference backward: %s: %s", what, cl_error_name(err));
}

/* Elements per slot for `rows` rows a chunk. */
static void bwd_elements(const problem *p, uint64_t rows,
                         uint64_t n[BWD_COUNT])
{
    const uint64_t nk = (uint64_t)p->seqlen_k, d = (uint64_t)p->head_dim,
                   dv = (uint64_t)p->head_dim_v;
    n[BWD_K] = n[BWD_DK] = nk * d;
    n[BWD_V] = n[BWD_DV] = nk * dv;
    n[BWD_Q] = n[BWD_DQ] = rows * d;
    n[BWD_DO] = rows * dv;
    n[BWD_S] = n[BWD_DP] = rows * nk;
    n[BWD_SINK] = rows;
    n[BWD_SINK_ACC] = (uint64_t)p->heads_q;
}

static bool bwd_fits(const problem *p, uint64_t rows, size_t elem,
                     uint64_t limit, uint64_t max_alloc)
{
    uint64_t n[BWD_COUNT], total = 0;
    bwd_elements(p, rows, n);
    for (int i = 0; i < BWD_COUNT; ++i) {
        if (n[i] > UINT64_MAX / 16 || n[i] * elem > max_alloc)
            return false;
        total += n[i] * elem;
    }
    return total <= limit;
}

/* The most query rows a chunk may have under the scratch limit. */
static flashcl_status plan_rows(flashcl_context *ctx, const problem *p,
                                size_t elem, uint64_t *rows)
{
    size_t limit = 0;
    flashcl_status status = flashcl_context_get_scratch_limit(ctx, &limit);
    if (status != FLASHCL_SUCCESS)
        return status;
    const uint64_t max_alloc =
        ctx->caps.max_alloc ? ctx->caps.max_alloc : UINT64_MAX;
    uint64_t lo = 0, hi = p->seqlen_q ? (uint64_t)p->seqlen_q : 1;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo + 1) / 2;
        if (bwd_fits(p, mid, elem, limit, max_alloc))
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "reference backward: the scratch limit of %zu "
                         "bytes is below what one query row needs (K, V, "
                         "dK and dV of one head plus one row); raise it "
                         "with flashcl_context_set_scratch_limit",
                         limit);
    *rows = lo;
    return FLASHCL_SUCCESS;
}

/* Zeroed: a GEMM with beta = 0 may still read C (0 * NaN garbage). */
static flashcl_status alloc_scratch(bwd_run *r, size_t elem)
{
    uint64_t n[BWD_COUNT];
    bwd_elements(r->p, r->rows_per_chunk, n);
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < BWD_COUNT && err == CL_SUCCESS; ++i) {
        const size_t bytes = n[i] ? (size_t)(n[i] * elem) : 16;
        r->mem[i] = clCreateBuffer(r->ctx->cl_ctx, CL_MEM_READ_WRITE, bytes,
                                   NULL, &err);
        const cl_uchar zero = 0;
        if (err == CL_SUCCESS)
            err = clEnqueueFillBuffer(r->queue, r->mem[i], &zero, 1, 0, bytes,
                                      0, NULL, NULL);
    }
    if (err != CL_SUCCESS)
        return set_error(r->ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "reference backward: allocating scratch: %s",
                         cl_error_name(err));
    return FLASHCL_SUCCESS;
}

typedef struct bwd_gemm {
    const char *what;
    CLBlastTranspose ta, tb;
    size_t m, n, k;
    double alpha, beta;
    cl_mem a, b, c;
    size_t lda, ldb, ldc;
} bwd_gemm;

static flashcl_status gemm(const bwd_run *r, const bwd_gemm *g)
{
    CLBlastStatusCode code;
    cl_command_queue queue = r->queue;
    if (r->p->dtype == FLASHCL_DTYPE_FP64)
        code = CLBlastDgemm(CLBlastLayoutRowMajor, g->ta, g->tb, g->m, g->n,
                            g->k, g->alpha, g->a, 0, g->lda, g->b, 0, g->ldb,
                            g->beta, g->c, 0, g->ldc, &queue, NULL);
    else
        code = CLBlastSgemm(CLBlastLayoutRowMajor, g->ta, g->tb, g->m, g->n,
                            g->k, (float)g->alpha, g->a, 0, g->lda, g->b, 0,
                            g->ldb, (float)g->beta, g->c, 0, g->ldc, &queue,
                            NULL);
    if (code != CLBlastSuccess)
        return set_error(r->ctx, FLASHCL_ERROR_BACKEND,
                         "reference backward: GEMM %s (m=%zu n=%zu k=%zu) "
                         "failed with CLBlast status %d",
                         g->what, g->m, g->n, g->k, (int)code);
    return FLASHCL_SUCCESS;
}

typedef struct kernel_arg {
    size_t size;
    const void *value;
} kernel_arg;
#define KARG(x) {sizeof(x), &(x)}

static cl_int enqueue_kernel(const bwd_run *r, cl_kernel k,
                             const kernel_arg *args, cl_uint count,
                             bool variants, cl_uint dims,
                             const size_t *global)
{
    cl_int err = CL_SUCCESS;
    for (cl_uint i = 0; i < count && err == CL_SUCCESS; ++i)
        err = clSetKernelArg(k, i, args[i].size, args[i].value);
    if (err == CL_SUCCESS && variants)
        err = set_variant_args(k, &count, &r->p->vargs,
                               r->p->dtype == FLASHCL_DTYPE_FP64);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(r->queue, k, dims, NULL, global, NULL, 0,
                                     NULL, NULL);
    return err;
}

/* Rows [row0, row0 + rows) of query or KV head (b, head) into packed real_t
 * (ref_pack reads head bh / group of a batch's heads). */
static cl_int pack(const bwd_run *r, const tensor_view *view, cl_mem dest,
                   cl_int row0, cl_int rows, cl_int dim, cl_long bh,
                   cl_int group)
{
    const cl_ulong base = view->base;
    cl_ulong4 stride;
    for (int i = 0; i < 4; ++i)
        stride.s[i] = view->stride[i];
    const cl_int heads_q = (cl_int)r->p->heads_q;
    const kernel_arg args[] = {KARG(view->given), KARG(base), KARG(stride),
                               KARG(dest), KARG(rows), KARG(dim), KARG(row0),
                               KARG(bh), KARG(heads_q), KARG(group)};
    const size_t global[3] = {(size_t)dim, (size_t)rows, 1};
    return enqueue_kernel(r, r->pack, args, 10, false, 3, global);
}

/* Packed src (rows x dim) into rows of head (b, h) of the output view. */
static cl_int store(const bwd_run *r, cl_mem src, const tensor_view *view,
                    cl_int row0, cl_int rows, cl_int dim, cl_long b,
                    cl_long h, double factor)
{
    const cl_ulong base = view->base;
    cl_ulong4 stride;
    for (int i = 0; i < 4; ++i)
        stride.s[i] = view->stride[i];
    const bool fp64 = r->p->dtype == FLASHCL_DTYPE_FP64;
    const float factor_f = (float)factor;
    const kernel_arg args[] = {
        KARG(src), KARG(view->given), KARG(base), KARG(stride), KARG(rows),
        KARG(dim), KARG(row0), KARG(b), KARG(h),
        fp64 ? (kernel_arg)KARG(factor) : (kernel_arg)KARG(factor_f)};
    const size_t global[2] = {(size_t)dim, (size_t)rows};
    return enqueue_kernel(r, r->store, args, 10, false, 2, global);
}

static cl_int enqueue_ds(const bwd_run *r, cl_long bh, cl_int row0,
                         cl_int rows)
{
    const problem *p = r->p;
    const cl_ulong o_base = p->o.base, lse_base = p->lse.base;
    cl_ulong4 o_stride, lse_stride;
    for (int i = 0; i < 4; ++i) {
        o_stride.s[i] = p->o.stride[i];
        lse_stride.s[i] = p->lse.stride[i];
    }
    const cl_int nk = (cl_int)p->seqlen_k, dim_v = (cl_int)p->head_dim_v,
                 heads_q = (cl_int)p->heads_q;
    const cl_long diag = p->diag, left = p->left, right = p->right;
    const kernel_arg args[] = {
        KARG(r->mem[BWD_S]), KARG(r->mem[BWD_DP]), KARG(r->mem[BWD_DO]),
        KARG(p->o.given), KARG(o_base), KARG(o_stride), KARG(p->lse.given),
        KARG(lse_base), KARG(lse_stride), KARG(r->mem[BWD_SINK]), KARG(rows),
        KARG(nk), KARG(dim_v), KARG(row0), KARG(bh), KARG(heads_q),
        KARG(diag), KARG(left), KARG(right)};
    const size_t global[1] = {(size_t)rows};
    return enqueue_kernel(r, r->ds, args, 19, true, 1, global);
}

static cl_int enqueue_dsinks(const bwd_run *r, cl_int rows, cl_int h,
                             cl_int finish)
{
    const tensor_view *ds = r->w->d_sinks;
    const cl_ulong base = ds->base, stride = ds->stride[1];
    const cl_int heads_q = (cl_int)r->p->heads_q;
    const kernel_arg args[] = {
        KARG(r->mem[BWD_SINK]), KARG(r->mem[BWD_SINK_ACC]), KARG(ds->given),
        KARG(base), KARG(stride), KARG(rows), KARG(h), KARG(heads_q),
        KARG(finish)};
    const size_t global[1] = {finish ? (size_t)heads_q : 1};
    return enqueue_kernel(r, r->dsinks, args, 9, false, 1, global);
}

/* The GEMMs of one row chunk of query head bh (K, V packed). */
static flashcl_status chunk_gemms(const bwd_run *r, size_t rows, bool after_ds)
{
    const problem *p = r->p;
    const size_t nk = (size_t)p->seqlen_k, d = (size_t)p->head_dim,
                 dv = (size_t)p->head_dim_v;
    const CLBlastTranspose no = CLBlastTransposeNo, yes = CLBlastTransposeYes;
    const cl_mem *m = r->mem;
    const bwd_gemm before[2] = {
        {"S = scale Q K^T", no, yes, rows, nk, d, p->scale, 0.0, m[BWD_Q],
         m[BWD_K], m[BWD_S], d, d, nk},
        {"dP = dO V^T", no, yes, rows, nk, dv, 1.0, 0.0, m[BWD_DO], m[BWD_V],
         m[BWD_DP], dv, dv, nk}};
    const bwd_gemm after[3] = {
        {"dV += P^T dO", yes, no, nk, dv, rows, 1.0, 1.0, m[BWD_S], m[BWD_DO],
         m[BWD_DV], nk, dv, dv},
        {"dK += scale dS^T Q", yes, no, nk, d, rows, p->scale, 1.0, m[BWD_DP],
         m[BWD_Q], m[BWD_DK], nk, d, d},
        {"dQ = scale dS K", no, no, rows, d, nk, p->scale, 0.0, m[BWD_DP],
         m[BWD_K], m[BWD_DQ], nk, d, d}};
    const bwd_gemm *list = after_ds ? after : before;
    const int count = after_ds ? 3 : 2;
    flashcl_status status = FLASHCL_SUCCESS;
    for (int i = 0; i < count && status == FLASHCL_SUCCESS; ++i)
        status = gemm(r, &list[i]);
    return status;
}

/* One row chunk of query head (b, h): dQ stored, dK/dV and the sink sum
 * accumulated. */
static flashcl_status run_rows(const bwd_run *r, cl_long b, cl_long h,
                               cl_int row0, cl_int rows)
{
    const problem *p = r->p;
    const cl_long bh = b * p->heads_q + h;
    const cl_int d = (cl_int)p->head_dim, dv = (cl_int)p->head_dim_v;
    const bool keys = p->seqlen_k > 0;
    cl_int err = pack(r, &p->q, r->mem[BWD_Q], row0, rows, d, bh, 1);
    if (err == CL_SUCCESS)
        err = pack(r, r->w->d_o, r->mem[BWD_DO], row0, rows, dv, bh, 1);
    if (err != CL_SUCCESS)
        return bwd_cl_failed(r->ctx, "enqueueing ref_pack", err);
    flashcl_status status =
        keys ? chunk_gemms(r, (size_t)rows, false) : FLASHCL_SUCCESS;
    if (status != FLASHCL_SUCCESS)
        return status;
    err = enqueue_ds(r, bh, row0, rows);
    if (err != CL_SUCCESS)
        return bwd_cl_failed(r->ctx, "enqueueing ref_bwd_ds", err);
    status = keys ? chunk_gemms(r, (size_t)rows, true) : FLASHCL_SUCCESS;
    if (status != FLASHCL_SUCCESS)
        return status;
    /* Without keys dQ stays the zeros run_kv_head filled it with. */
    err = store(r, r->mem[BWD_DQ], r->w->d_q, row0, rows, d, b, h, 1.0);
    if (err == CL_SUCCESS && r->w->d_sinks->present)
        err = enqueue_dsinks(r, rows, (cl_int)h, 0);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : bwd_cl_failed(r->ctx, "enqueueing dQ", err);
}

static cl_int zero(const bwd_run *r, int slot, size_t elements, size_t elem)
{
    const cl_uchar z = 0;
    return elements ? clEnqueueFillBuffer(r->queue, r->mem[slot], &z, 1, 0,
                                          elements * elem, 0, NULL, NULL)
                    : CL_SUCCESS;
}

/* KV head (b, kv): its query heads in order, then dK and dV stored. */
static flashcl_status run_kv_head(const bwd_run *r, cl_long b, cl_long kv,
                                  size_t elem)
{
    const problem *p = r->p;
    const cl_int group = (cl_int)problem_group_size(p);
    const cl_int nk = (cl_int)p->seqlen_k, d = (cl_int)p->head_dim,
                 dv = (cl_int)p->head_dim_v;
    const cl_long bh_first = b * p->heads_q + kv * group;
    cl_int err = zero(r, BWD_DK, (size_t)nk * (size_t)d, elem);
    if (err == CL_SUCCESS)
        err = zero(r, BWD_DV, (size_t)nk * (size_t)dv, elem);
    /* Without keys dQ is stored from this slot untouched; a varlen call's
     * earlier sequences have used it. */
    if (err == CL_SUCCESS && nk == 0)
        err = zero(r, BWD_DQ, (size_t)r->rows_per_chunk * (size_t)d, elem);
    if (err == CL_SUCCESS && nk > 0)
        err = pack(r, &p->k, r->mem[BWD_K], 0, nk, d, bh_first, group);
    if (err == CL_SUCCESS && nk > 0)
        err = pack(r, &p->v, r->mem[BWD_V], 0, nk, dv, bh_first, group);
    if (err != CL_SUCCESS)
        return bwd_cl_failed(r->ctx, "preparing a KV head", err);
    for (cl_long h = kv * group; h < (kv + 1) * group; ++h)
        for (uint64_t row0 = 0; row0 < (uint64_t)p->seqlen_q;
             row0 += r->rows_per_chunk) {
            const uint64_t left = (uint64_t)p->seqlen_q - row0;
            const cl_int rows = (cl_int)(left < r->rows_per_chunk
                                             ? left
                                             : r->rows_per_chunk);
            flashcl_status status = run_rows(r, b, h, (cl_int)row0, rows);
            if (status != FLASHCL_SUCCESS)
                return status;
        }
    if (nk == 0)
        return FLASHCL_SUCCESS;
    err = store(r, r->mem[BWD_DK], r->w->d_k, 0, nk, d, b, kv, 1.0);
    if (err == CL_SUCCESS)
        err = store(r, r->mem[BWD_DV], r->w->d_v, 0, nk, dv, b, kv, 1.0);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : bwd_cl_failed(r->ctx, "storing dK/dV", err);
}

static flashcl_status get_kernels(bwd_run *r)
{
    char options[512];
    flashcl_status status =
        reference_kernel_options(r->ctx, r->p, 1, options, sizeof options);
    if (status != FLASHCL_SUCCESS)
        return status;
    const program_request request = {
        "reference_attention.cl", options,
        {"ref_pack", "ref_bwd_ds", "ref_bwd_store", "ref_bwd_dsinks"}, 4};
    compiled_program *program;
    status = program_cache_get(r->ctx, &request, &program, NULL);
    if (status != FLASHCL_SUCCESS)
        return status;
    r->program = program;
    r->pack = program->kernels[0];
    r->ds = program->kernels[1];
    r->store = program->kernels[2];
    r->dsinks = program->kernels[3];
    return FLASHCL_SUCCESS;
}

/* Sequence b of a varlen problem, as a dense batch-1 problem on views
 * moved to its rows (reference_infer.c reads it as the forward does). */
static flashcl_status run_sequence(bwd_run *r, const int *cu_q,
                                   const int *cu_k, int b, size_t elem)
{
    const problem *p = r->p;
    const reference_bwd_views *w = r->w;
    tensor_view d_o = *w->d_o, d_q = *w->d_q, d_k = *w->d_k, d_v = *w->d_v;
    tensor_view *query_views[2] = {&d_o, &d_q}, *key_views[2] = {&d_k, &d_v};
    const problem sp = reference_varlen_sequence(p, cu_q, cu_k, b,
                                                 query_views, 2, key_views, 2);
    const reference_bwd_views sw = {&d_o, &d_q, &d_k, &d_v, w->d_sinks};
    r->p = &sp;
    r->w = &sw;
    flashcl_status status = FLASHCL_SUCCESS;
    for (cl_long kv = 0; kv < p->heads_kv && status == FLASHCL_SUCCESS; ++kv)
        status = run_kv_head(r, 0, kv, elem);
    r->p = p;
    r->w = w;
    return status;
}

static flashcl_status run_all(bwd_run *r, size_t elem)
{
    const problem *p = r->p;
    flashcl_status status = alloc_scratch(r, elem);
    const bool varlen = p->infer.varlen_q || p->infer.kv == KV_VARLEN;
    int *cu_q = NULL, *cu_k = NULL;
    if (status == FLASHCL_SUCCESS && varlen)
        status = reference_read_prefix_sums(r->ctx, r->queue, p, &cu_q, &cu_k);
    for (cl_long b = 0; b < p->batch && status == FLASHCL_SUCCESS; ++b) {
        if (varlen) {
            status = run_sequence(r, cu_q, cu_k, (int)b, elem);
            continue;
        }
        for (cl_long kv = 0; kv < p->heads_kv && status == FLASHCL_SUCCESS;
             ++kv)
            status = run_kv_head(r, b, kv, elem);
    }
    free(cu_q);
    free(cu_k);
    if (status == FLASHCL_SUCCESS && r->w->d_sinks->present) {
        const cl_int err = enqueue_dsinks(r, 0, 0, 1);
        if (err != CL_SUCCESS)
            status = bwd_cl_failed(r->ctx, "enqueueing d_sinks", err);
    }
    return status;
}

flashcl_status launch_reference_backward(flashcl_context *ctx,
                                         const reference_bwd_call *call)
{
    const problem *p = call->p;
    cl_command_queue queue = call->queue;
    flashcl_status status = reference_check_in_order(ctx, queue);
    if (status != FLASHCL_SUCCESS)
        return status;
    const size_t elem =
        p->dtype == FLASHCL_DTYPE_FP64 ? sizeof(double) : sizeof(float);
    bwd_run r = {.ctx = ctx, .queue = queue, .p = p, .w = &call->views};
    status = plan_rows(ctx, p, elem, &r.rows_per_chunk);
    if (status == FLASHCL_SUCCESS)
        status = get_kernels(&r);
    if (status != FLASHCL_SUCCESS)
        return status; /* nothing enqueued yet */
    cl_int err = call->num_wait
                     ? clEnqueueBarrierWithWaitList(queue, call->num_wait,
                                                    call->wait_list, NULL)
                     : CL_SUCCESS;
    if (err != CL_SUCCESS)
        return bwd_cl_failed(ctx, "enqueueing the entry barrier", err);
    /* Every buffer belongs to this call; only the cached kernels (their
     * arguments) are shared with other threads. */
    pthread_mutex_lock(&r.program->launch_lock);
    status = run_all(&r, elem);
    pthread_mutex_unlock(&r.program->launch_lock);
    for (int i = 0; i < BWD_COUNT; ++i)
        if (r.mem[i])
            clReleaseMemObject(r.mem[i]);
    if (status == FLASHCL_SUCCESS && call->event) {
        err = clEnqueueMarkerWithWaitList(queue, 0, NULL, call->event);
        if (err != CL_SUCCESS)
            status = bwd_cl_failed(ctx, "enqueueing the exit marker", err);
    }
    return status;
}
