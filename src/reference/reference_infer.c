/* The reference backend's inference features (issue 11), as a host loop:
 * the length arrays, batch index and block table are read back to the
 * host, the append is done with rectangular buffer copies, and every
 * sequence is one dense reference call on views into the caller's
 * buffers (paged keys are first gathered into a dense buffer). Slow and
 * synchronous by design: it exists to check the split-KV kernels with an
 * independent computation, and applies the same clamps and skips
 * (include/flashcl.h). Needs unit-stride head dims (stride_dim 1) for
 * appends and paged caches, which the copies move row by row. */
#include "reference/reference.h"
#include "problem/variants.h"

#include <stdlib.h>
#include <string.h>

typedef struct host_arrays {
    int *cu_q, *cu_k, *seqlens, *batch_idx, *table;
} host_arrays;

static flashcl_status failed(flashcl_context *ctx, const char *what, cl_int err)
{
    return set_error(ctx, FLASHCL_ERROR_OPENCL, "reference backend: %s: %s",
                     what, cl_error_name(err));
}

/* A rows x cols int32 view (row stride view->stride[0]) read into a packed
 * host array. */
static flashcl_status read_ints(flashcl_context *ctx, cl_command_queue queue,
                                const tensor_view *view, size_t rows,
                                size_t cols, int **out)
{
    *out = NULL;
    if (!view->present)
        return FLASHCL_SUCCESS;
    *out = calloc(rows * cols + 1, sizeof(int));
    if (!*out)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY, "host lengths");
    for (size_t r = 0; r < rows; ++r) {
        const size_t at = (size_t)(view->base + r * view->stride[0]) * 4;
        cl_int err = clEnqueueReadBuffer(queue, view->given, CL_TRUE, at,
                                         cols * 4, *out + r * cols, 0, NULL,
                                         NULL);
        if (err != CL_SUCCESS)
            return failed(ctx, "reading a length array", err);
    }
    return FLASHCL_SUCCESS;
}

static void free_arrays(host_arrays *a)
{
    free(a->cu_q), free(a->cu_k), free(a->seqlens), free(a->batch_idx);
    free(a->table);
}

static int clampi(int64_t v, int64_t lo, int64_t hi)
{
    return (int)(v < lo ? lo : v > hi ? hi : v);
}

/* One sequence as the kernels see it (cl/inference/flash_split.cl). */
typedef struct seq {
    int q0, nq, k0, nk, cached, row; /* row: cache row, -1 skipped */
} seq;

static seq sequence_of(const problem *p, const host_arrays *a, int b)
{
    const inference *in = &p->infer;
    seq s = {0, (int)p->seqlen_q, 0, (int)p->seqlen_k, 0, b};
    if (in->varlen_q) {
        s.q0 = clampi(a->cu_q[b], 0, in->total_q);
        const int end = clampi(a->cu_q[b + 1], s.q0, in->total_q);
        s.nq = end - s.q0 < p->seqlen_q ? end - s.q0 : (int)p->seqlen_q;
    }
    if (in->kv == KV_VARLEN) {
        s.k0 = clampi(a->cu_k[b], 0, in->total_k);
        const int end = clampi(a->cu_k[b + 1], s.k0, in->total_k);
        s.nk = end - s.k0 < p->seqlen_k ? end - s.k0 : (int)p->seqlen_k;
    } else if (in->kv >= KV_CACHE) {
        /* new rows past the capacity are dropped, as the kernels do */
        s.cached = clampi(a->seqlens[b], 0, p->seqlen_k);
        s.nk = clampi(s.cached + in->seqlen_new, 0, p->seqlen_k);
        if (in->batch_idx) {
            s.row = a->batch_idx[b];
            if (s.row < 0 || s.row >= in->kv_batch)
                s.row = -1, s.nk = 0;
        }
    }
    return s;
}

/* Byte offset of key `key` of sequence `s` (KV head 0, dim 0) in a K/V
 * view, or -1 for a skipped page. */
static int64_t key_byte(const problem *p, const host_arrays *a, int b,
                        const seq *s, const tensor_view *t, int key)
{
    const inference *in = &p->infer;
    uint64_t at;
    if (in->kv == KV_PAGED) {
        const int page =
            a->table[(size_t)b * (size_t)in->max_pages + (size_t)(key / in->page_size)];
        if (page < 0 || page >= in->kv_batch)
            return -1;
        at = t->base + (uint64_t)page * t->stride[0] +
             (uint64_t)(key % in->page_size) * t->stride[2];
    } else if (in->kv == KV_VARLEN) {
        at = t->base + (uint64_t)(s->k0 + key) * t->stride[2];
    } else {
        at = t->base + (uint64_t)s->row * t->stride[0] +
             (uint64_t)key * t->stride[2];
    }
    return (int64_t)(at * p->elem_size);
}

/* Rows of all KV heads: width dim elements, heads rows of pitch stride[1]. */
static cl_int copy_heads(cl_command_queue q, const problem *p, cl_mem src,
                         size_t src_at, size_t src_pitch, cl_mem dst,
                         size_t dst_at, size_t dst_pitch, int64_t dim)
{
    const size_t e = p->elem_size;
    const size_t src_origin[3] = {src_at, 0, 0}, dst_origin[3] = {dst_at, 0, 0};
    const size_t region[3] = {(size_t)dim * e, (size_t)p->heads_kv, 1};
    return clEnqueueCopyBufferRect(q, src, dst, src_origin, dst_origin, region,
                                   src_pitch * e, 0, dst_pitch * e, 0, 0, NULL,
                                   NULL);
}

static flashcl_status append_rows(flashcl_context *ctx, cl_command_queue q,
                                  const problem *p, const host_arrays *a)
{
    const inference *in = &p->infer;
    for (int b = 0; b < p->batch; ++b) {
        const seq s = sequence_of(p, a, b);
        if (s.row < 0)
            continue;
        for (int j = 0; j < s.nk - s.cached; ++j) {
            const tensor_view *news[2] = {&in->k_new, &in->v_new};
            const tensor_view *caches[2] = {&p->k, &p->v};
            const int64_t dims[2] = {p->head_dim, p->head_dim_v};
            for (int t = 0; t < 2; ++t) {
                const int64_t dst = key_byte(p, a, b, &s, caches[t], s.cached + j);
                if (dst < 0)
                    continue; /* a skipped page */
                const size_t src = (size_t)(news[t]->base +
                                            (uint64_t)b * news[t]->stride[0] +
                                            (uint64_t)j * news[t]->stride[2]) *
                                   p->elem_size;
                cl_int err = copy_heads(q, p, news[t]->given, src,
                                        (size_t)news[t]->stride[1],
                                        caches[t]->given, (size_t)dst,
                                        (size_t)caches[t]->stride[1], dims[t]);
                if (err != CL_SUCCESS)
                    return failed(ctx, "appending a row", err);
            }
        }
    }
    return FLASHCL_SUCCESS;
}

/* Paged keys of one sequence into packed [1, nk, heads_kv, dim] buffers,
 * each key at its own position: a skipped page's rows stay zero and
 * keep[j] is 0 for them, so that later keys keep their positions (the
 * causal band, ALiBi, bias and mask index keys by position). */
static flashcl_status gather(flashcl_context *ctx, cl_command_queue q,
                             const problem *p, const host_arrays *a, int b,
                             const seq *s, cl_mem dst[2], unsigned char *keep)
{
    const tensor_view *src[2] = {&p->k, &p->v};
    const int64_t dims[2] = {p->head_dim, p->head_dim_v};
    for (int t = 0; t < 2; ++t) {
        cl_int err;
        const size_t row_bytes = (size_t)(p->heads_kv * dims[t]) * p->elem_size;
        const size_t bytes = (size_t)(s->nk ? s->nk : 1) * row_bytes;
        dst[t] = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL,
                                &err);
        if (err != CL_SUCCESS)
            return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                             "reference backend: gathering pages: %s",
                             cl_error_name(err));
        /* zeros, not garbage: a masked key's V still meets P = 0 in P V */
        const cl_uchar zero = 0;
        err = clEnqueueFillBuffer(q, dst[t], &zero, 1, 0, bytes, 0, NULL,
                                  NULL);
        if (err != CL_SUCCESS)
            return failed(ctx, "clearing the gathered keys", err);
        for (int j = 0; j < s->nk; ++j) {
            const int64_t at = key_byte(p, a, b, s, src[t], j);
            keep[j] = at >= 0;
            if (at < 0)
                continue;
            err = copy_heads(q, p, src[t]->given, (size_t)at,
                             (size_t)src[t]->stride[1], dst[t],
                             (size_t)j * row_bytes, (size_t)dims[t], dims[t]);
            if (err != CL_SUCCESS)
                return failed(ctx, "gathering a page row", err);
        }
    }
    return FLASHCL_SUCCESS;
}

/* The caller's mask of the sequence, (h, i, j) packed [heads_q][nq][nk],
 * read back, or NULL with an error set. */
static unsigned char *read_sequence_mask(flashcl_context *ctx,
                                         cl_command_queue q,
                                         const problem *sp)
{
    const uint64_t *st = sp->vargs.mask_stride.s;
    const uint64_t hq = (uint64_t)sp->heads_q, nq = (uint64_t)sp->seqlen_q,
                   nk = (uint64_t)sp->seqlen_k;
    const uint64_t span = (hq - 1) * st[1] + (nq - 1) * st[2] +
                          (nk - 1) * st[3] + 1;
    unsigned char *bytes = malloc((size_t)span);
    unsigned char *packed = malloc((size_t)(hq * nq * nk));
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    if (bytes && packed)
        err = clEnqueueReadBuffer(q, sp->vargs.mask, CL_TRUE,
                                  (size_t)sp->vargs.mask_base, (size_t)span,
                                  bytes, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        for (uint64_t h = 0; h < hq; ++h)
            for (uint64_t i = 0; i < nq; ++i)
                for (uint64_t j = 0; j < nk; ++j)
                    packed[(h * nq + i) * nk + j] =
                        bytes[h * st[1] + i * st[2] + j * st[3]];
    free(bytes);
    if (err != CL_SUCCESS) {
        free(packed);
        if (err == CL_OUT_OF_HOST_MEMORY)
            set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY, "host mask copy");
        else
            failed(ctx, "reading the mask", err);
        return NULL;
    }
    return packed;
}

/* Skipped keys (keep[j] == 0) masked out of the sequence's problem, on top
 * of the caller's mask if there is one; *mask_out gets the buffer the
 * problem then reads (NULL when no key is skipped). */
static flashcl_status mask_skipped_keys(flashcl_context *ctx,
                                        cl_command_queue q, problem *sp,
                                        const unsigned char *keep,
                                        cl_mem *mask_out)
{
    *mask_out = NULL;
    const int nk = (int)sp->seqlen_k;
    if (nk == 0 || memchr(keep, 0, (size_t)nk) == NULL)
        return FLASHCL_SUCCESS;
    const int index = VARIANT_MASK;
    const bool own = variant_active(sp, VARIANT_MASK);
    const size_t rows = own ? (size_t)(sp->heads_q * sp->seqlen_q) : 1;
    unsigned char *host = own ? read_sequence_mask(ctx, q, sp)
                              : malloc((size_t)nk);
    if (!host)
        return own ? FLASHCL_ERROR_OUT_OF_MEMORY /* error set */
                   : set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY, "host mask");
    for (size_t r = 0; r < rows; ++r)
        for (int j = 0; j < nk; ++j)
            host[r * (size_t)nk + (size_t)j] =
                (own ? host[r * (size_t)nk + (size_t)j] != 0 : 1) && keep[j];
    cl_int err;
    *mask_out = clCreateBuffer(ctx->cl_ctx,
                               CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                               rows * (size_t)nk, host, &err);
    free(host);
    if (err != CL_SUCCESS) {
        *mask_out = NULL;
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "reference backend: the skipped pages' mask");
    }
    sp->variants |= 1u << index;
    sp->variant_value[index] = 1;
    sp->vargs.mask = *mask_out;
    sp->vargs.mask_base = 0;
    const cl_ulong4 packed = {{0, own ? (cl_ulong)(sp->seqlen_q * nk) : 0,
                               own ? (cl_ulong)nk : 0, 1}};
    sp->vargs.mask_stride = packed;
    return FLASHCL_SUCCESS;
}

static void shift(tensor_view *t, uint64_t elems)
{
    t->base += elems;
}

/* A query-side view (q, o, lse, dO, dQ) moved to sequence b's rows. */
static void move_query_view(const problem *p, const seq *s, int b,
                            tensor_view *t)
{
    shift(t, p->infer.varlen_q ? (uint64_t)s->q0 * t->stride[2]
                               : (uint64_t)b * t->stride[0]);
    t->size[0] = 1;
    t->size[2] = (uint64_t)s->nq;
}

/* A key-side view (k, v, dK, dV) moved to sequence b's keys. */
static void move_key_view(const problem *p, const seq *s, tensor_view *t)
{
    if (p->infer.kv == KV_VARLEN)
        shift(t, (uint64_t)s->k0 * t->stride[2]);
    else if (p->infer.kv != KV_PAGED)
        shift(t, (uint64_t)(s->row > 0 ? s->row : 0) * t->stride[0]);
    t->size[0] = 1;
    t->size[2] = (uint64_t)s->nk;
}

/* The dense problem of sequence b: views moved to its rows. */
static problem sequence_problem(const problem *p, const seq *s, int b)
{
    problem sp = *p;
    memset(&sp.infer, 0, sizeof sp.infer);
    sp.batch = 1;
    sp.seqlen_q = s->nq;
    sp.seqlen_k = s->nk;
    sp.diag = aligned_diag(p->infer.top_left, s->nq, s->nk);
    tensor_view *qs[3] = {&sp.q, &sp.o, &sp.lse};
    for (int i = 0; i < 3; ++i)
        move_query_view(p, s, b, qs[i]);
    move_key_view(p, s, &sp.k);
    move_key_view(p, s, &sp.v);
    /* Score tensors are [batch, heads, max_q, max_k]: move to row b. */
    sp.vargs.bias_base += (cl_ulong)b * p->vargs.bias_stride.s[0];
    sp.vargs.mask_base += (cl_ulong)b * p->vargs.mask_stride.s[0];
    sp.vargs.alibi_base += (cl_ulong)b * p->vargs.alibi_stride.s[0];
    sp.empty = s->nq == 0;
    return sp;
}

flashcl_status reference_read_prefix_sums(flashcl_context *ctx,
                                          cl_command_queue queue,
                                          const problem *p, int **cu_q,
                                          int **cu_k)
{
    const size_t b = (size_t)p->batch;
    flashcl_status st =
        read_ints(ctx, queue, &p->infer.cu_q, b + 1, 1, cu_q);
    if (st == FLASHCL_SUCCESS)
        st = read_ints(ctx, queue, &p->infer.cu_k, b + 1, 1, cu_k);
    else
        *cu_k = NULL;
    if (st != FLASHCL_SUCCESS) {
        free(*cu_q), free(*cu_k);
        *cu_q = *cu_k = NULL;
    }
    return st;
}

problem reference_varlen_sequence(const problem *p, const int *cu_q,
                                  const int *cu_k, int b,
                                  tensor_view *const *query_views,
                                  size_t query_count,
                                  tensor_view *const *key_views,
                                  size_t key_count)
{
    const host_arrays a = {(int *)cu_q, (int *)cu_k, NULL, NULL, NULL};
    const seq s = sequence_of(p, &a, b);
    for (size_t i = 0; i < query_count; ++i)
        move_query_view(p, &s, b, query_views[i]);
    for (size_t i = 0; i < key_count; ++i)
        move_key_view(p, &s, key_views[i]);
    return sequence_problem(p, &s, b);
}

static void packed_view(tensor_view *t, cl_mem buffer, const problem *p,
                        int64_t dim, int nk)
{
    t->given = t->root = buffer;
    t->base = 0;
    t->stride[3] = 1;
    t->stride[1] = (uint64_t)dim;
    t->stride[2] = (uint64_t)(p->heads_kv * dim);
    t->stride[0] = (uint64_t)nk * t->stride[2];
    t->size[2] = (uint64_t)nk;
}

static flashcl_status run_sequences(flashcl_context *ctx, cl_command_queue q,
                                    const problem *p, const host_arrays *a)
{
    for (int b = 0; b < p->batch; ++b) {
        const seq s = sequence_of(p, a, b);
        problem sp = sequence_problem(p, &s, b);
        if (sp.empty)
            continue;
        cl_mem gathered[3] = {NULL, NULL, NULL}; /* K, V, mask */
        flashcl_status st = FLASHCL_SUCCESS;
        if (p->infer.kv == KV_PAGED) {
            unsigned char *keep = malloc((size_t)s.nk + 1);
            st = keep ? gather(ctx, q, p, a, b, &s, gathered, keep)
                      : set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                                  "host page flags");
            if (st == FLASHCL_SUCCESS) {
                packed_view(&sp.k, gathered[0], p, p->head_dim, s.nk);
                packed_view(&sp.v, gathered[1], p, p->head_dim_v, s.nk);
                st = mask_skipped_keys(ctx, q, &sp, keep, &gathered[2]);
            }
            free(keep);
        }
        if (st == FLASHCL_SUCCESS)
            st = launch_reference(ctx, q, &sp, 0, NULL, NULL);
        for (int i = 0; i < 3; ++i)
            if (gathered[i])
                clReleaseMemObject(gathered[i]);
        if (st != FLASHCL_SUCCESS)
            return st;
    }
    return FLASHCL_SUCCESS;
}

/* 1 when sequence b's prefix sums needed a clamp or a cut. */
static int span_clamped(const int *cu, int b, int64_t total, int64_t most)
{
    const int64_t start = cu[b], end = cu[b + 1];
    return start < 0 || start > total || end < 0 || end > total ||
           end < start || end - start > most;
}

/* The caller's FLASHCL_INFER_STATUS_* counters, from the same rules as
 * the kernels' (flash_split.cl, flashcl_split_status). */
static flashcl_status write_status(flashcl_context *ctx, cl_command_queue q,
                                   const problem *p, const host_arrays *a)
{
    const inference *in = &p->infer;
    cl_int count[FLASHCL_INFER_STATUS_COUNT] = {0};
    for (int b = 0; b < p->batch; ++b) {
        if (in->varlen_q)
            count[FLASHCL_INFER_STATUS_LENGTHS_CLAMPED] +=
                span_clamped(a->cu_q, b, in->total_q, p->seqlen_q);
        if (in->kv == KV_VARLEN)
            count[FLASHCL_INFER_STATUS_LENGTHS_CLAMPED] +=
                span_clamped(a->cu_k, b, in->total_k, p->seqlen_k);
        if (in->kv < KV_CACHE)
            continue;
        count[FLASHCL_INFER_STATUS_LENGTHS_CLAMPED] +=
            a->seqlens[b] < 0 || a->seqlens[b] > p->seqlen_k;
        const seq s = sequence_of(p, a, b);
        if (s.row < 0) {
            count[FLASHCL_INFER_STATUS_ROWS_SKIPPED] += 1;
            count[FLASHCL_INFER_STATUS_APPENDS_DROPPED] += (cl_int)in->seqlen_new;
            continue;
        }
        count[FLASHCL_INFER_STATUS_APPENDS_DROPPED] +=
            (cl_int)in->seqlen_new - (s.nk - s.cached);
        for (int j = 0; in->kv == KV_PAGED && j < s.nk; ++j) {
            if (key_byte(p, a, b, &s, &p->k, j) >= 0)
                continue;
            count[FLASHCL_INFER_STATUS_PAGES_SKIPPED] += j % in->page_size == 0;
            count[FLASHCL_INFER_STATUS_APPENDS_DROPPED] += j >= s.cached;
        }
    }
    const cl_int err = clEnqueueWriteBuffer(
        q, in->status.given, CL_TRUE, (size_t)in->status.base * sizeof(cl_int),
        sizeof count, count, 0, NULL, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : failed(ctx, "writing infer_status", err);
}

static bool unit_dims(const problem *p)
{
    const inference *in = &p->infer;
    if (in->kv != KV_PAGED && !in->append)
        return true;
    return p->k.stride[3] == 1 && p->v.stride[3] == 1 &&
           (!in->append || (in->k_new.stride[3] == 1 && in->v_new.stride[3] == 1));
}

flashcl_status launch_reference_inference(flashcl_context *ctx,
                                          cl_command_queue queue,
                                          const problem *p, cl_uint num_wait,
                                          const cl_event *wait_list,
                                          cl_event *event)
{
    if (!unit_dims(p))
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "reference backend: appends and paged caches need "
                         "stride_dim = 1 for k, v, k_new and v_new");
    if (num_wait) {
        cl_int err = clWaitForEvents(num_wait, wait_list);
        if (err != CL_SUCCESS)
            return failed(ctx, "waiting for the wait list", err);
    }
    const size_t b = (size_t)p->batch;
    host_arrays a = {0};
    flashcl_status st = read_ints(ctx, queue, &p->infer.cu_q, b + 1, 1, &a.cu_q);
    if (st == FLASHCL_SUCCESS)
        st = read_ints(ctx, queue, &p->infer.cu_k, b + 1, 1, &a.cu_k);
    if (st == FLASHCL_SUCCESS)
        st = read_ints(ctx, queue, &p->infer.seqlens, b, 1, &a.seqlens);
    if (st == FLASHCL_SUCCESS)
        st = read_ints(ctx, queue, &p->infer.batch_idx_view, b, 1, &a.batch_idx);
    if (st == FLASHCL_SUCCESS)
        st = read_ints(ctx, queue, &p->infer.table, b,
                       (size_t)p->infer.max_pages, &a.table);
    if (st == FLASHCL_SUCCESS && p->infer.status.present)
        st = write_status(ctx, queue, p, &a);
    if (st == FLASHCL_SUCCESS && p->infer.append)
        st = append_rows(ctx, queue, p, &a);
    if (st == FLASHCL_SUCCESS)
        st = run_sequences(ctx, queue, p, &a);
    free_arrays(&a);
    if (st == FLASHCL_SUCCESS && event) {
        cl_int err = clEnqueueMarkerWithWaitList(queue, 0, NULL, event);
        if (err != CL_SUCCESS)
            return failed(ctx, "enqueueing the call's marker", err);
    }
    return st;
}
