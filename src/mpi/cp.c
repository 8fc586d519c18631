/* Context parallelism over MPI (include/flashcl_mpi.h). Built on the
 * public API alone: each rank stages K/V through host memory, computes one
 * dense flashcl call per (query chunk, key chunk) with the chunks'
 * absolute positions (FLASHCL_CAUSAL_ABSOLUTE), and merges its partial
 * results with flashcl_combine_partials in a fixed order. */
#include "flashcl_mpi.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[512];

const char *flashcl_cp_last_error(void)
{
    return last_error;
}

static flashcl_status fail(flashcl_status status, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    return status;
}

int flashcl_cp_shard_rows(const flashcl_cp_desc *cp, int rank, int ranks,
                          int64_t first[2], int64_t *count)
{
    if (!cp || ranks < 1 || rank < 0 || rank >= ranks ||
        cp->seqlen_total <= 0 || cp->seqlen_total % ranks != 0)
        return 0;
    const int64_t n = cp->seqlen_total / ranks;
    if (cp->layout != FLASHCL_CP_ZIGZAG) {
        first[0] = rank * n;
        first[1] = 0;
        *count = n;
        return 1;
    }
    if (n % 2 != 0)
        return 0;
    *count = n / 2;
    first[0] = rank * *count;
    first[1] = (2 * (int64_t)ranks - 1 - rank) * *count;
    return 2;
}

/* ---- the shard ------------------------------------------------------- */

/* What one rank holds, resolved from its descriptor. */
typedef struct shard {
    int rank, ranks, chunks;
    int64_t first[2], rows; /* chunk positions and rows per chunk */
    int64_t batch, heads_q, heads_kv, dim, dim_v, n; /* n: shard rows */
    size_t elem, k_bytes, v_bytes;
    size_t k_elems, v_elems; /* the backward's host sums count these */
    /* bytes of a host sum and of a ring partial's LSE: 8 (fp64) for fp64,
     * else 4 (fp32) */
    size_t acc;
    size_t lse_elem; /* bytes of an element of the caller's lse */
} shard;

static size_t dtype_bytes(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP32: return 4;
    case FLASHCL_DTYPE_FP16:
    case FLASHCL_DTYPE_BF16: return 2;
    case FLASHCL_DTYPE_FP64: return 8;
    default: return 0;
    }
}

/* Refuses a view of with_buffer[0 .. buffers) that has no buffer; the
 * message names them. */
static flashcl_status check_views(const flashcl_tensor *const *with_buffer,
                                  size_t buffers, const char *no_buffer)
{
    for (size_t i = 0; i < buffers; ++i)
        if (!with_buffer[i]->buffer)
            return fail(FLASHCL_ERROR_NULL_ARGUMENT, "%s", no_buffer);
    return FLASHCL_SUCCESS;
}

static flashcl_status check_tensors(const flashcl_attention_desc *d)
{
    const flashcl_tensor *views[] = {&d->q, &d->k, &d->v, &d->o};
    return check_views(views, 4, "q, k, v and o need buffers");
}

static flashcl_status check_options(const flashcl_attention_desc *d,
                                    bool backward)
{
    if (d->causal_align != FLASHCL_CAUSAL_BOTTOM_RIGHT || d->q_position ||
        d->k_position)
        return fail(FLASHCL_ERROR_INVALID_VALUE,
                    "causal_align / q_position / k_position: the shards' "
                    "positions come from the layout; leave them 0");
    if (d->num_splits > 1 || d->cache_seqlens.buffer ||
        d->cu_seqlens_q.buffer || d->cu_seqlens_k.buffer ||
        d->block_table.buffer || d->seqlen_new || d->infer_status.buffer)
        return fail(FLASHCL_ERROR_UNSUPPORTED,
                    "inference fields (KV cache, varlen, num_splits > 1): "
                    "not across ranks");
    if (d->lse_dtype != FLASHCL_DTYPE_FP32 &&
        (d->lse_dtype != FLASHCL_DTYPE_FP64 ||
         d->dtype != FLASHCL_DTYPE_FP64))
        return fail(FLASHCL_ERROR_DTYPE_UNSUPPORTED,
                    "lse_dtype = %d: fp32, or fp64 for an fp64 call",
                    (int)d->lse_dtype);
    if (backward && d->lse_dtype != FLASHCL_DTYPE_FP32)
        return fail(FLASHCL_ERROR_UNSUPPORTED,
                    "lse_dtype fp64 in the backward: it reads an fp32 lse");
    return FLASHCL_SUCCESS;
}

/* A shard's [batch, n, heads, dim] view with its strides spelled out, so
 * that row slices of it keep the caller's strides and layout: all-zero
 * strides are the layout's packed ones (as the core reads them). */
static flashcl_tensor explicit_view(const flashcl_tensor *t,
                                    flashcl_layout layout, int64_t n,
                                    int64_t heads, int64_t dim)
{
    flashcl_tensor v = *t;
    if (!t->buffer || t->stride_batch || t->stride_head || t->stride_seq ||
        t->stride_dim)
        return v;
    v.stride_batch = (size_t)(n * heads * dim);
    v.stride_dim = 1;
    v.stride_seq = (size_t)(layout == FLASHCL_LAYOUT_BHND ? dim : heads * dim);
    v.stride_head = (size_t)(layout == FLASHCL_LAYOUT_BHND ? n * dim : dim);
    return v;
}

/* An LSE view [batch, heads, n] with its strides spelled out. */
static flashcl_tensor explicit_lse(const flashcl_tensor *t, int64_t n,
                                   int64_t heads)
{
    flashcl_tensor v = *t;
    if (!t->buffer || t->stride_batch || t->stride_head || t->stride_seq)
        return v;
    v.stride_batch = (size_t)(heads * n);
    v.stride_head = (size_t)n;
    v.stride_seq = 1;
    return v;
}

static bool packed_bnhd(const flashcl_tensor *t, int64_t n, int64_t heads,
                        int64_t dim)
{
    return t->stride_dim == 1 && t->stride_head == (size_t)dim &&
           t->stride_seq == (size_t)(heads * dim) &&
           t->stride_batch == (size_t)(n * heads * dim);
}

/* Bytes from the view's offset to the end of its last element. */
static size_t view_extent(const flashcl_tensor *t, int64_t batch,
                          int64_t heads, int64_t n, int64_t dim, size_t elem)
{
    return elem * ((size_t)(batch - 1) * t->stride_batch +
                   (size_t)(heads - 1) * t->stride_head +
                   (size_t)(n - 1) * t->stride_seq +
                   (size_t)(dim - 1) * t->stride_dim + 1);
}

/* K, V (read to the host) and the backward's dQ, dK, dV (written from it)
 * move as rectangles of rows, one per batch and head, when not packed: a
 * row of `dim` contiguous elements is what a rectangle copies. */
static flashcl_status host_movable(const flashcl_tensor *t, int64_t heads,
                                   int64_t dim, const char *name)
{
    if (t->stride_dim == 1 && t->stride_seq >= (size_t)dim &&
        (heads == 1 || t->stride_head >= (size_t)dim))
        return FLASHCL_SUCCESS;
    return fail(FLASHCL_ERROR_UNSUPPORTED,
                "%s: strides (batch %zu, head %zu, seq %zu, dim %zu) pass "
                "through host memory as rows of head_dim contiguous elements "
                "(stride_dim 1, seq and head strides >= head_dim): not yet "
                "other views",
                name, t->stride_batch, t->stride_head, t->stride_seq,
                t->stride_dim);
}

static flashcl_status buffer_holds(const flashcl_tensor *t, size_t bytes,
                                   const char *name)
{
    size_t size = 0;
    if (clGetMemObjectInfo(t->buffer, CL_MEM_SIZE, sizeof size, &size,
                           NULL) != CL_SUCCESS)
        return fail(FLASHCL_ERROR_INVALID_VALUE, "%s.buffer is no cl_mem",
                    name);
    if (t->offset > size || size - t->offset < bytes)
        return fail(FLASHCL_ERROR_OUT_OF_BOUNDS,
                    "%s: %zu bytes from offset %zu pass its buffer's %zu",
                    name, bytes, t->offset, size);
    return FLASHCL_SUCCESS;
}

/* Bias and mask on shards: rows are the shard's query rows (in the
 * shard's order), columns the whole sequence's keys at their absolute
 * positions, [batch, heads_q, shard rows, seqlen_total] with the core's
 * literal strides (0 broadcasts); each call takes the columns of its key
 * chunk. The whole of it must lie in its buffer, so that no call fails
 * after another wrote. */
static flashcl_status check_bias_mask(const flashcl_attention_desc *d,
                                      const flashcl_cp_desc *cp,
                                      const shard *s)
{
    const flashcl_tensor *views[] = {&d->bias, &d->mask};
    const char *names[] = {"bias", "mask"};
    for (int i = 0; i < 2; ++i) {
        if (!views[i]->buffer)
            continue;
        const size_t elem = i == 0 ? dtype_bytes(d->bias_dtype) : 1;
        if (elem == 0 || elem == 8)
            return fail(FLASHCL_ERROR_INVALID_VALUE,
                        "bias_dtype = %d: fp32, fp16 or bf16",
                        (int)d->bias_dtype);
        const flashcl_status st = buffer_holds(
            views[i],
            view_extent(views[i], s->batch, s->heads_q, s->n,
                        cp->seqlen_total, elem),
            names[i]);
        if (st != FLASHCL_SUCCESS) {
            char why[sizeof last_error];
            snprintf(why, sizeof why, "%s", last_error);
            return fail(st, "%s (a shard's rows against all %lld keys): %s",
                        names[i], (long long)cp->seqlen_total, why);
        }
    }
    return FLASHCL_SUCCESS;
}

static flashcl_status resolve_shard(const flashcl_attention_desc *d,
                                    const flashcl_cp_desc *cp, bool backward,
                                    int rank, int ranks, shard *s)
{
    if (!d || !cp)
        return fail(FLASHCL_ERROR_NULL_ARGUMENT, "local or cp is NULL");
    if (cp->struct_size != sizeof *cp)
        return fail(FLASHCL_ERROR_INVALID_VALUE,
                    "cp.struct_size = %zu, expected %zu (FLASHCL_CP_DESC_INIT)",
                    cp->struct_size, sizeof *cp);
    if ((cp->mode != FLASHCL_CP_RING && cp->mode != FLASHCL_CP_ALLGATHER) ||
        (cp->layout != FLASHCL_CP_CONTIGUOUS &&
         cp->layout != FLASHCL_CP_ZIGZAG))
        return fail(FLASHCL_ERROR_INVALID_VALUE,
                    "cp.mode = %d or cp.layout = %d is not a known value",
                    (int)cp->mode, (int)cp->layout);
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->ranks = ranks;
    s->chunks = flashcl_cp_shard_rows(cp, rank, ranks, s->first, &s->rows);
    if (s->chunks == 0)
        return fail(FLASHCL_ERROR_INVALID_DIMENSION,
                    "cp.seqlen_total = %lld does not split into %d equal "
                    "shards (of an even number of rows for zig-zag)",
                    (long long)cp->seqlen_total, ranks);
    s->n = s->rows * s->chunks;
    if (d->seqlen_q != s->n || d->seqlen_k != s->n)
        return fail(FLASHCL_ERROR_INVALID_DIMENSION,
                    "seqlen_q = %lld, seqlen_k = %lld: rank %d's shard holds "
                    "%lld rows of the %lld",
                    (long long)d->seqlen_q, (long long)d->seqlen_k, rank,
                    (long long)s->n, (long long)cp->seqlen_total);
    s->elem = dtype_bytes(d->dtype);
    s->acc = d->dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
    s->lse_elem = d->lse_dtype == FLASHCL_DTYPE_FP64 ? 8 : 4;
    if (s->elem == 0 || d->batch <= 0 || d->heads_q <= 0 || d->head_dim <= 0)
        return fail(FLASHCL_ERROR_INVALID_DIMENSION,
                    "batch, heads_q, head_dim and dtype must describe a "
                    "non-empty shard");
    s->batch = d->batch;
    s->heads_q = d->heads_q;
    s->heads_kv = d->heads_kv ? d->heads_kv : d->heads_q;
    s->dim = d->head_dim;
    s->dim_v = d->head_dim_v ? d->head_dim_v : d->head_dim;
    const size_t rows = (size_t)s->batch * (size_t)s->n * s->elem;
    s->k_bytes = rows * (size_t)(s->heads_kv * s->dim);
    s->v_bytes = rows * (size_t)(s->heads_kv * s->dim_v);
    s->k_elems = s->k_bytes / s->elem;
    s->v_elems = s->v_bytes / s->elem;
    flashcl_status st = check_tensors(d);
    if (st == FLASHCL_SUCCESS)
        st = check_options(d, backward);
    const flashcl_tensor k = explicit_view(&d->k, d->layout, s->n,
                                           s->heads_kv, s->dim);
    const flashcl_tensor v = explicit_view(&d->v, d->layout, s->n,
                                           s->heads_kv, s->dim_v);
    if (st == FLASHCL_SUCCESS)
        st = host_movable(&k, s->heads_kv, s->dim, "k");
    if (st == FLASHCL_SUCCESS)
        st = host_movable(&v, s->heads_kv, s->dim_v, "v");
    if (st == FLASHCL_SUCCESS)
        st = buffer_holds(&k, view_extent(&k, s->batch, s->heads_kv, s->n,
                                          s->dim, s->elem), "k");
    if (st == FLASHCL_SUCCESS)
        st = buffer_holds(&v, view_extent(&v, s->batch, s->heads_kv, s->n,
                                          s->dim_v, s->elem), "v");
    if (st == FLASHCL_SUCCESS)
        st = check_bias_mask(d, cp, s);
    if (st == FLASHCL_SUCCESS && s->k_bytes + s->v_bytes > (size_t)INT32_MAX)
        st = fail(FLASHCL_ERROR_INVALID_DIMENSION,
                  "a shard's K and V hold %zu bytes: MPI counts stop at 2 "
                  "GiB (not yet larger shards)",
                  s->k_bytes + s->v_bytes);
    return st;
}

/* ---- agreement ------------------------------------------------------- */

/* Every rank's verdict, so that no rank waits on one that gave up: the
 * first failing rank's number on every rank, or -1. */
static int first_failure(MPI_Comm comm, flashcl_status mine, int rank)
{
    int bad = mine != FLASHCL_SUCCESS ? rank : INT32_MAX, first = INT32_MAX;
    MPI_Allreduce(&bad, &first, 1, MPI_INT, MPI_MIN, comm);
    return first == INT32_MAX ? -1 : first;
}

static flashcl_status verdict(MPI_Comm comm, flashcl_status mine, int rank,
                              const char *what)
{
    const int first = first_failure(comm, mine, rank);
    if (first < 0)
        return FLASHCL_SUCCESS;
    if (mine != FLASHCL_SUCCESS)
        return mine;
    return fail(FLASHCL_ERROR_INVALID_VALUE,
                "rank %d failed %s: nothing was computed here", first, what);
}

static int64_t float_bits(float value)
{
    int32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

/* The shards must describe one call: the same shape and options. */
static flashcl_status same_call(MPI_Comm comm, const flashcl_attention_desc *d,
                                const flashcl_backward_desc *bwd,
                                const flashcl_cp_desc *cp)
{
    static const char *const names[] = {
        "batch", "heads_q", "heads_kv", "head_dim", "head_dim_v", "dtype",
        "seqlen_q", "causal", "window", "window_left", "window_right",
        "scale", "explicit_scale", "softcap", "alibi_slopes", "sinks",
        "cp.mode", "cp.layout", "cp.seqlen_total", "allow_tf32",
        "d_sinks", "bias", "bias_dtype", "mask"};
    enum { FIELDS = sizeof names / sizeof names[0] };
    const int64_t mine[FIELDS] = {
        d->batch, d->heads_q, d->heads_kv ? d->heads_kv : d->heads_q,
        d->head_dim, d->head_dim_v ? d->head_dim_v : d->head_dim, d->dtype,
        d->seqlen_q, d->causal != 0, d->window != 0, d->window_left,
        d->window_right, float_bits(d->scale), d->explicit_scale != 0,
        float_bits(d->softcap), d->alibi_slopes.buffer != NULL,
        d->sinks.buffer != NULL, cp->mode, cp->layout, cp->seqlen_total,
        d->allow_tf32 != 0, bwd && bwd->d_sinks.buffer != NULL,
        d->bias.buffer != NULL, d->bias.buffer ? d->bias_dtype : 0,
        d->mask.buffer != NULL};
    int64_t lo[FIELDS], hi[FIELDS];
    MPI_Allreduce(mine, lo, FIELDS, MPI_INT64_T, MPI_MIN, comm);
    MPI_Allreduce(mine, hi, FIELDS, MPI_INT64_T, MPI_MAX, comm);
    for (int i = 0; i < FIELDS; ++i)
        if (lo[i] != hi[i])
            return fail(FLASHCL_ERROR_INVALID_VALUE,
                        "the shards disagree: %s differs across ranks (%lld "
                        "to %lld)",
                        names[i], (long long)lo[i], (long long)hi[i]);
    return FLASHCL_SUCCESS;
}

/* ---- one chunk pair -------------------------------------------------- */

/* A [batch, rows, heads, dim] view of `rows` rows from row `row0` of a
 * [batch, n, heads, dim] tensor (element size elem) at `offset`. */
static flashcl_tensor rows_view(cl_mem buffer, size_t offset, int64_t row0,
                                int64_t n, int64_t heads, int64_t dim,
                                size_t elem)
{
    flashcl_tensor t;
    memset(&t, 0, sizeof t);
    t.buffer = buffer;
    t.offset = offset + (size_t)(row0 * heads * dim) * elem;
    t.stride_batch = (size_t)(n * heads * dim);
    t.stride_seq = (size_t)(heads * dim);
    t.stride_head = (size_t)dim;
    t.stride_dim = 1;
    return t;
}

/* Rows from row0 on of an explicit view (element size elem): the same
 * strides, the offset moved. */
static flashcl_tensor rows_of(const flashcl_tensor *t, int64_t row0,
                              size_t elem)
{
    flashcl_tensor v = *t;
    v.offset += (size_t)row0 * t->stride_seq * elem;
    return v;
}

/* An LSE view [batch, heads, rows] of rows from row0 of [batch, heads, n]
 * (elements of elem bytes). */
static flashcl_tensor lse_view(cl_mem buffer, size_t offset, int64_t row0,
                               int64_t n, int64_t heads, size_t elem)
{
    flashcl_tensor t;
    memset(&t, 0, sizeof t);
    t.buffer = buffer;
    t.offset = offset + (size_t)row0 * elem;
    t.stride_batch = (size_t)(heads * n);
    t.stride_head = (size_t)n;
    t.stride_seq = 1;
    return t;
}

/* Whether any query of the chunk at q0 sees a key of the chunk at k0
 * (both of `rows` rows) through the causal band and the window. */
static bool chunk_sees_keys(const flashcl_attention_desc *d, int64_t q0,
                            int64_t k0, int64_t rows)
{
    int64_t right = d->window && d->window_right >= 0 ? d->window_right : -1;
    if (d->causal && right != 0)
        right = 0;
    const int64_t left = d->window && d->window_left >= 0 ? d->window_left
                                                          : -1;
    if (right >= 0 && k0 > q0 + rows - 1 + right)
        return false;
    if (left >= 0 && k0 + rows - 1 < q0 - left)
        return false;
    return true;
}

/* The local descriptor turned into the call of query chunk qc (rows
 * from row q_row of the shard) against keys at position k_position. */
static flashcl_attention_desc chunk_call(const flashcl_attention_desc *d,
                                         const shard *s, int qc,
                                         int64_t seqlen_k, int64_t k_position)
{
    flashcl_attention_desc c = *d;
    c.seqlen_q = s->rows;
    c.seqlen_k = seqlen_k;
    c.causal_align = FLASHCL_CAUSAL_ABSOLUTE;
    c.q_position = s->first[qc];
    c.k_position = k_position;
    c.q = rows_of(&d->q, qc * s->rows, s->elem);
    flashcl_tensor *cols[] = {&c.bias, &c.mask};
    for (int i = 0; i < 2; ++i)
        if (cols[i]->buffer)
            cols[i]->offset +=
                (i == 0 ? dtype_bytes(d->bias_dtype) : 1) *
                ((size_t)(qc * s->rows) * cols[i]->stride_seq +
                 (size_t)k_position * cols[i]->stride_dim);
    return c;
}

/* An explicit [batch, n, heads, dim] view read into (or, with `write`,
 * written from) `host`, packed [batch, n, heads, dim]: one copy when the
 * view is packed so, else a rectangle of n rows per batch and head
 * (host_movable's views). Blocks until done. */
static cl_int move_rows(cl_command_queue queue, bool write,
                        const flashcl_tensor *t, const shard *s,
                        int64_t heads, int64_t dim, unsigned char *host)
{
    const size_t e = s->elem, row = (size_t)(heads * dim) * e;
    const size_t all = (size_t)(s->batch * s->n) * row;
    if (packed_bnhd(t, s->n, heads, dim))
        return write ? clEnqueueWriteBuffer(queue, t->buffer, CL_TRUE,
                                            t->offset, all, host, 0, NULL,
                                            NULL)
                     : clEnqueueReadBuffer(queue, t->buffer, CL_TRUE,
                                           t->offset, all, host, 0, NULL,
                                           NULL);
    cl_int err = CL_SUCCESS;
    const size_t region[3] = {(size_t)dim * e, (size_t)s->n, 1};
    for (int64_t b = 0; b < s->batch && err == CL_SUCCESS; ++b)
        for (int64_t h = 0; h < heads && err == CL_SUCCESS; ++h) {
            const size_t at[3] = {t->offset + ((size_t)b * t->stride_batch +
                                               (size_t)h * t->stride_head) *
                                                  e,
                                  0, 0};
            const size_t to[3] = {(size_t)b * (size_t)s->n * row +
                                      (size_t)(h * dim) * e,
                                  0, 0};
            const size_t pitch = t->stride_seq * e;
            err = write ? clEnqueueWriteBufferRect(queue, t->buffer, CL_FALSE,
                                                   at, to, region, pitch, 0,
                                                   row, 0, host, 0, NULL, NULL)
                        : clEnqueueReadBufferRect(queue, t->buffer, CL_FALSE,
                                                  at, to, region, pitch, 0,
                                                  row, 0, host, 0, NULL, NULL);
        }
    const cl_int done = clFinish(queue);
    return err != CL_SUCCESS ? err : done;
}

/* The shard's K then V, packed, read into `host` (k_bytes + v_bytes). */
static flashcl_status read_shard_kv(cl_command_queue queue,
                                    const flashcl_attention_desc *d,
                                    const shard *s, unsigned char *host)
{
    if (move_rows(queue, false, &d->k, s, s->heads_kv, s->dim, host) !=
            CL_SUCCESS ||
        move_rows(queue, false, &d->v, s, s->heads_kv, s->dim_v,
                  host + s->k_bytes) != CL_SUCCESS)
        return fail(FLASHCL_ERROR_OPENCL, "reading the shard's K/V failed");
    return FLASHCL_SUCCESS;
}

/* ---- ring ------------------------------------------------------------ */

typedef struct ring_buffers {
    unsigned char *host[2]; /* K then V of a shard, in flight or in hand */
    cl_mem kv, o_parts, lse_parts;
    size_t o_slot, lse_slot; /* bytes per partial */
} ring_buffers;

static void ring_release(ring_buffers *b)
{
    free(b->host[0]);
    free(b->host[1]);
    cl_mem all[] = {b->kv, b->o_parts, b->lse_parts};
    for (size_t i = 0; i < 3; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
}

static flashcl_status ring_allocate(flashcl_context *ctx, const shard *s,
                                    ring_buffers *b)
{
    memset(b, 0, sizeof *b);
    const size_t kv = s->k_bytes + s->v_bytes;
    const int partials = s->ranks * s->chunks;
    b->o_slot = (size_t)(s->batch * s->n * s->heads_q * s->dim_v) * s->elem;
    b->lse_slot = (size_t)(s->batch * s->heads_q * s->n) * s->acc;
    b->host[0] = malloc(kv);
    b->host[1] = malloc(kv);
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_int err = CL_SUCCESS, e2 = CL_SUCCESS, e3 = CL_SUCCESS;
    b->kv = clCreateBuffer(cl, CL_MEM_READ_WRITE, kv, NULL, &err);
    b->o_parts = clCreateBuffer(cl, CL_MEM_READ_WRITE,
                                b->o_slot * (size_t)partials, NULL, &e2);
    b->lse_parts = clCreateBuffer(cl, CL_MEM_READ_WRITE,
                                  b->lse_slot * (size_t)partials, NULL, &e3);
    if (!b->host[0] || !b->host[1] || err || e2 || e3)
        return fail(FLASHCL_ERROR_OUT_OF_MEMORY,
                    "ring buffers: %zu bytes of K/V twice on the host, %d "
                    "partial outputs on the device",
                    kv, partials);
    return FLASHCL_SUCCESS;
}

/* The steps' LSEs in fp64 for fp64 calls, so that the merge's weights
 * keep fp64 accuracy (fp32 ones cost ~1e-7 of max |O|). */
static flashcl_dtype ring_lse_dtype(const shard *s)
{
    return s->acc == 8 ? FLASHCL_DTYPE_FP64 : FLASHCL_DTYPE_FP32;
}

/* The partials of one step: this rank's query chunks against the K/V
 * block of rank `source` (packed, at k_block and v_block), into slots
 * step * chunks + kc. The sinks join one partial per row only (the
 * first), so that the merge counts them once. */
static flashcl_status ring_step(flashcl_context *ctx, cl_command_queue queue,
                                const flashcl_attention_desc *d,
                                const flashcl_cp_desc *cp, const shard *s,
                                const ring_buffers *b,
                                const flashcl_tensor *k_block,
                                const flashcl_tensor *v_block, int step,
                                int source)
{
    int64_t k_first[2], k_rows;
    const int k_chunks =
        flashcl_cp_shard_rows(cp, source, s->ranks, k_first, &k_rows);
    /* -inf in the partials' LSE type (s->acc bytes) */
    const float minus_inf32 = -INFINITY;
    const double minus_inf64 = -INFINITY;
    const void *minus_inf =
        s->acc == 8 ? (const void *)&minus_inf64 : (const void *)&minus_inf32;
    for (int kc = 0; kc < k_chunks; ++kc) {
        const int slot = step * s->chunks + kc;
        if (clEnqueueFillBuffer(queue, b->lse_parts, minus_inf, s->acc,
                                b->lse_slot * (size_t)slot,
                                b->lse_slot, 0, NULL, NULL) != CL_SUCCESS)
            return fail(FLASHCL_ERROR_OPENCL, "filling a partial LSE failed");
        for (int qc = 0; qc < s->chunks; ++qc) {
            const bool first = slot == 0;
            if (!first && !chunk_sees_keys(d, s->first[qc], k_first[kc],
                                           s->rows))
                continue;
            flashcl_attention_desc c =
                chunk_call(d, s, qc, s->rows, k_first[kc]);
            c.k = rows_of(k_block, kc * s->rows, s->elem);
            c.v = rows_of(v_block, kc * s->rows, s->elem);
            c.o = rows_view(b->o_parts, b->o_slot * (size_t)slot,
                            qc * s->rows, s->n, s->heads_q, s->dim_v, s->elem);
            c.lse = lse_view(b->lse_parts, b->lse_slot * (size_t)slot,
                             qc * s->rows, s->n, s->heads_q, s->acc);
            c.lse_dtype = ring_lse_dtype(s);
            if (!first)
                memset(&c.sinks, 0, sizeof c.sinks);
            const flashcl_status st =
                flashcl_attention_forward(ctx, queue, &c, 0, NULL, NULL);
            if (st != FLASHCL_SUCCESS)
                return fail(st, "rank %d, step %d: %s", s->rank, step,
                            flashcl_context_last_error(ctx));
        }
    }
    return clFinish(queue) == CL_SUCCESS
               ? FLASHCL_SUCCESS
               : fail(FLASHCL_ERROR_OPENCL, "a step's attention failed");
}

/* The P = ranks * chunks partials merged into the shard's O and LSE. */
static flashcl_status ring_merge(flashcl_context *ctx, cl_command_queue queue,
                                 const flashcl_attention_desc *d,
                                 const shard *s, const ring_buffers *b)
{
    flashcl_combine_desc m = FLASHCL_COMBINE_DESC_INIT;
    m.num_partials = (int64_t)s->ranks * s->chunks;
    m.batch = s->batch;
    m.heads = s->heads_q;
    m.seqlen_q = s->n;
    m.head_dim_v = s->dim_v;
    m.dtype = m.partial_dtype = d->dtype;
    m.lse_dtype = d->lse_dtype;
    m.layout = FLASHCL_LAYOUT_BNHD;
    m.o_partial =
        rows_view(b->o_parts, 0, 0, s->n, s->heads_q, s->dim_v, s->elem);
    m.o_partial_stride = b->o_slot / s->elem;
    m.lse_partial = lse_view(b->lse_parts, 0, 0, s->n, s->heads_q, s->acc);
    m.lse_partial_stride = b->lse_slot / s->acc;
    m.o = d->o;
    m.lse = d->lse;
    flashcl_status st = flashcl_combine_partials(ctx, queue, &m, 0, NULL, NULL);
    if (st != FLASHCL_SUCCESS)
        return fail(st, "merging the partials: %s",
                    flashcl_context_last_error(ctx));
    return clFinish(queue) == CL_SUCCESS
               ? FLASHCL_SUCCESS
               : fail(FLASHCL_ERROR_OPENCL, "merging the partials failed");
}

/* Step t computes with the block of rank (rank - t) while the block moves
 * on to the next rank; every rank takes part in every exchange whatever
 * its own calls returned, so that none waits on one that failed. */
static flashcl_status ring_forward(MPI_Comm comm, flashcl_context *ctx,
                                   cl_command_queue queue,
                                   const flashcl_attention_desc *d,
                                   const flashcl_cp_desc *cp, const shard *s)
{
    ring_buffers b;
    flashcl_status st = ring_allocate(ctx, s, &b);
    const size_t kv = s->k_bytes + s->v_bytes;
    if (st == FLASHCL_SUCCESS)
        st = read_shard_kv(queue, d, s, b.host[0]);
    st = verdict(comm, st, s->rank, "to set up its ring buffers");
    if (st == FLASHCL_SUCCESS) {
        const int next = (s->rank + 1) % s->ranks;
        const int prev = (s->rank + s->ranks - 1) % s->ranks;
        const flashcl_tensor received_k =
            rows_view(b.kv, 0, 0, s->n, s->heads_kv, s->dim, s->elem);
        const flashcl_tensor received_v = rows_view(
            b.kv, s->k_bytes, 0, s->n, s->heads_kv, s->dim_v, s->elem);
        for (int step = 0; step < s->ranks; ++step) {
            const int hand = step % 2;
            MPI_Request moves[2];
            int moving = 0;
            if (step + 1 < s->ranks) {
                MPI_Isend(b.host[hand], (int)kv, MPI_BYTE, next, step, comm,
                          &moves[moving++]);
                MPI_Irecv(b.host[1 - hand], (int)kv, MPI_BYTE, prev, step,
                          comm, &moves[moving++]);
            }
            /* step 0 computes on the shard's own K and V in place; later
             * steps on the block received, uploaded */
            if (st == FLASHCL_SUCCESS && step > 0 &&
                clEnqueueWriteBuffer(queue, b.kv, CL_TRUE, 0, kv,
                                     b.host[hand], 0, NULL,
                                     NULL) != CL_SUCCESS)
                st = fail(FLASHCL_ERROR_OPENCL,
                          "uploading a K/V block failed");
            if (st == FLASHCL_SUCCESS)
                st = ring_step(ctx, queue, d, cp, s, &b,
                               step ? &received_k : &d->k,
                               step ? &received_v : &d->v, step,
                               (s->rank + s->ranks - step) % s->ranks);
            MPI_Waitall(moving, moves, MPI_STATUSES_IGNORE);
        }
        st = verdict(comm, st, s->rank, "a ring step");
        if (st == FLASHCL_SUCCESS)
            st = ring_merge(ctx, queue, d, s, &b);
    }
    ring_release(&b);
    return st;
}

/* ---- all-gather ------------------------------------------------------ */

/* Shard `source`'s K (or V) rows, [batch, n, heads, dim] as gathered,
 * copied to their positions in the whole [batch, N, heads, dim]. */
static void place_rows(unsigned char *whole, const unsigned char *block,
                       const flashcl_cp_desc *cp, const shard *s, int source,
                       size_t row_bytes)
{
    int64_t first[2], rows;
    const int chunks = flashcl_cp_shard_rows(cp, source, s->ranks, first,
                                             &rows);
    const int64_t total = cp->seqlen_total;
    for (int c = 0; c < chunks; ++c)
        for (int64_t b = 0; b < s->batch; ++b)
            memcpy(whole + (size_t)(b * total + first[c]) * row_bytes,
                   block + (size_t)(b * s->n + c * rows) * row_bytes,
                   (size_t)rows * row_bytes);
}

static cl_mem upload(flashcl_context *ctx, cl_command_queue queue,
                     const void *bytes, size_t size)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx),
                              CL_MEM_READ_ONLY, size, NULL, &err);
    if (err == CL_SUCCESS &&
        clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, size, bytes, 0, NULL,
                             NULL) != CL_SUCCESS) {
        clReleaseMemObject(m);
        m = NULL;
    }
    return err == CL_SUCCESS ? m : NULL;
}

/* Each rank's K and V gathered on every rank and laid out as the whole
 * sequence's, on the device in *k and *v. Collective. */
static flashcl_status gather_whole_kv(MPI_Comm comm, flashcl_context *ctx,
                                      cl_command_queue queue,
                                      const flashcl_attention_desc *d,
                                      const flashcl_cp_desc *cp,
                                      const shard *s, cl_mem *k, cl_mem *v)
{
    const size_t kv = s->k_bytes + s->v_bytes;
    const size_t k_row = (size_t)(s->heads_kv * s->dim) * s->elem;
    const size_t v_row = (size_t)(s->heads_kv * s->dim_v) * s->elem;
    const size_t k_whole = s->k_bytes * (size_t)s->ranks;
    unsigned char *mine = malloc(kv);
    unsigned char *gathered = malloc(kv * (size_t)s->ranks);
    unsigned char *whole = malloc(kv * (size_t)s->ranks);
    flashcl_status st = FLASHCL_SUCCESS;
    *k = *v = NULL;
    if (!mine || !gathered || !whole)
        st = fail(FLASHCL_ERROR_OUT_OF_MEMORY,
                  "%zu bytes of gathered K/V on the host",
                  kv * (size_t)s->ranks);
    else
        st = read_shard_kv(queue, d, s, mine);
    st = verdict(comm, st, s->rank, "to read its K/V");
    if (st == FLASHCL_SUCCESS) {
        MPI_Allgather(mine, (int)kv, MPI_BYTE, gathered, (int)kv, MPI_BYTE,
                      comm);
        for (int r = 0; r < s->ranks; ++r) {
            const unsigned char *block = gathered + kv * (size_t)r;
            place_rows(whole, block, cp, s, r, k_row);
            place_rows(whole + k_whole, block + s->k_bytes, cp, s, r, v_row);
        }
        *k = upload(ctx, queue, whole, k_whole);
        *v = upload(ctx, queue, whole + k_whole,
                    s->v_bytes * (size_t)s->ranks);
        if (!*k || !*v)
            st = fail(FLASHCL_ERROR_OUT_OF_MEMORY,
                      "the whole K/V on the device");
    }
    free(mine);
    free(gathered);
    free(whole);
    return st;
}

static void release_kv(cl_mem k, cl_mem v)
{
    if (k)
        clReleaseMemObject(k);
    if (v)
        clReleaseMemObject(v);
}

/* Query chunk qc's call over the whole gathered K and V. */
static flashcl_attention_desc whole_keys_call(const flashcl_attention_desc *d,
                                              const flashcl_cp_desc *cp,
                                              const shard *s, int qc,
                                              cl_mem k, cl_mem v)
{
    flashcl_attention_desc c = chunk_call(d, s, qc, cp->seqlen_total, 0);
    memset(&c.k, 0, sizeof c.k);
    memset(&c.v, 0, sizeof c.v);
    c.k.buffer = k;
    c.v.buffer = v;
    c.o = rows_of(&d->o, qc * s->rows, s->elem);
    if (d->lse.buffer)
        c.lse = rows_of(&d->lse, qc * s->rows, s->lse_elem);
    return c;
}

/* The whole K and V on every rank, then one call per local query chunk
 * over all keys. */
static flashcl_status allgather_forward(MPI_Comm comm, flashcl_context *ctx,
                                        cl_command_queue queue,
                                        const flashcl_attention_desc *d,
                                        const flashcl_cp_desc *cp,
                                        const shard *s)
{
    cl_mem k, v;
    flashcl_status st = gather_whole_kv(comm, ctx, queue, d, cp, s, &k, &v);
    for (int qc = 0; qc < s->chunks && st == FLASHCL_SUCCESS; ++qc) {
        flashcl_attention_desc c = whole_keys_call(d, cp, s, qc, k, v);
        st = flashcl_attention_forward(ctx, queue, &c, 0, NULL, NULL);
        if (st != FLASHCL_SUCCESS)
            st = fail(st, "rank %d, query chunk %d: %s", s->rank, qc,
                      flashcl_context_last_error(ctx));
    }
    if (st == FLASHCL_SUCCESS && clFinish(queue) != CL_SUCCESS)
        st = fail(FLASHCL_ERROR_OPENCL, "the shard's attention failed");
    release_kv(k, v);
    return st;
}

/* ---- host storage conversions ---------------------------------------- */

/* The backward sums gradients in fp32 on the host; 16-bit storage is read
 * and written here (libflashcl_mpi sees the public API only). */
static float half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1fu)
        bits = sign | 0x7f800000u | (man << 13);
    else if (exp)
        bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man)
        bits = sign;
    else { /* subnormal: normalised */
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Rounded to nearest even, as vstore_half_rte. */
static uint16_t float_to_half(float value)
{
    uint32_t x;
    memcpy(&x, &value, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x47800000u)
        return (uint16_t)(sign | 0x7c00u);
    uint32_t h, rest, half;
    if (a >= 0x38800000u) { /* a normal half: exponent rebiased */
        h = (a - 0x38000000u) >> 13;
        rest = a & 0x1fffu;
        half = 0x1000u;
    } else { /* a subnormal half, in units of 2^-24 */
        const uint32_t e = a >> 23;
        if (e < 102)
            return (uint16_t)sign;
        const uint32_t man = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
        h = man >> shift;
        rest = man & ((1u << shift) - 1);
        half = 1u << (shift - 1);
    }
    if (rest > half || (rest == half && (h & 1u)))
        ++h; /* a carry into the exponent is the right rounding */
    return (uint16_t)(sign | h);
}

static double load_value(const unsigned char *base, size_t i,
                         flashcl_dtype dtype)
{
    if (dtype == FLASHCL_DTYPE_FP64) {
        double x;
        memcpy(&x, base + i * 8, 8);
        return x;
    }
    if (dtype == FLASHCL_DTYPE_FP32) {
        float f;
        memcpy(&f, base + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, base + i * 2, 2);
    if (dtype == FLASHCL_DTYPE_FP16)
        return half_to_float(h);
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void store_value(unsigned char *base, size_t i, flashcl_dtype dtype,
                        double wide)
{
    if (dtype == FLASHCL_DTYPE_FP64) {
        memcpy(base + i * 8, &wide, 8);
        return;
    }
    const float value = (float)wide; /* exact: an fp32 sum */
    if (dtype == FLASHCL_DTYPE_FP32) {
        memcpy(base + i * 4, &value, 4);
        return;
    }
    uint16_t h;
    if (dtype == FLASHCL_DTYPE_FP16) {
        h = float_to_half(value);
    } else {
        uint32_t bits;
        memcpy(&bits, &value, sizeof bits);
        h = isnan(value) ? (uint16_t)((bits >> 16) | 0x40u)
                         : (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >>
                                      16);
    }
    memcpy(base + i * 2, &h, 2);
}

/* The backward's host sums are fp32 (acc 4) for fp32, fp16 and bf16, and
 * fp64 (acc 8) for fp64, so that fp64 gradients keep fp64 accuracy; an
 * fp32 sum adds in fp32, as before there were fp64 ones. */
static double acc_get(const void *sums, size_t i, size_t acc)
{
    return acc == 8 ? ((const double *)sums)[i] : ((const float *)sums)[i];
}

static void acc_add(void *sums, size_t i, size_t acc, double value)
{
    if (acc == 8)
        ((double *)sums)[i] += value;
    else
        ((float *)sums)[i] += (float)value;
}

static void *acc_at(void *sums, size_t i, size_t acc)
{
    return (unsigned char *)sums + i * acc;
}

static MPI_Datatype acc_type(size_t acc)
{
    return acc == 8 ? MPI_DOUBLE : MPI_FLOAT;
}

/* `count` host sums stored in `dtype` into `out`. */
static void store_all(unsigned char *out, const void *values, size_t count,
                      flashcl_dtype dtype, size_t acc)
{
    for (size_t i = 0; i < count; ++i)
        store_value(out, i, dtype, acc_get(values, i, acc));
}

/* ---- d_sinks across ranks ------------------------------------------- */

/* A query row's sink gradient depends on that row alone (its LSE, and its
 * Δ from O and dO), not on which keys a call sees: each rank takes it from
 * one call per query chunk, into `part`, sums its chunks into `sum`, and
 * the ranks' sums are added in rank order. */
typedef struct sinks_grad {
    cl_mem part; /* NULL: d_sinks not wanted */
    float *sum;  /* [heads_q] */
} sinks_grad;

static flashcl_status sinks_begin(flashcl_context *ctx,
                                  const flashcl_backward_desc *g,
                                  const shard *s, sinks_grad *sg)
{
    memset(sg, 0, sizeof *sg);
    if (!g->d_sinks.buffer)
        return FLASHCL_SUCCESS;
    cl_int err = CL_SUCCESS;
    sg->part = clCreateBuffer(flashcl_context_cl_context(ctx),
                              CL_MEM_READ_WRITE,
                              (size_t)s->heads_q * sizeof(float), NULL, &err);
    sg->sum = calloc((size_t)s->heads_q, sizeof(float));
    return err == CL_SUCCESS && sg->sum
               ? FLASHCL_SUCCESS
               : fail(FLASHCL_ERROR_OUT_OF_MEMORY, "d_sinks partials");
}

static void sinks_release(sinks_grad *sg)
{
    if (sg->part)
        clReleaseMemObject(sg->part);
    free(sg->sum);
}

/* The d_sinks view of a call: the partial when this call gives it. */
static flashcl_tensor sinks_view(const sinks_grad *sg, bool gives)
{
    flashcl_tensor t;
    memset(&t, 0, sizeof t);
    t.buffer = gives ? sg->part : NULL;
    return t;
}

static flashcl_status sinks_add(cl_command_queue queue, const sinks_grad *sg,
                                const shard *s)
{
    float part[256];
    const size_t heads = (size_t)s->heads_q;
    for (size_t h0 = 0; h0 < heads; h0 += 256) {
        const size_t n = heads - h0 < 256 ? heads - h0 : 256;
        if (clEnqueueReadBuffer(queue, sg->part, CL_TRUE, h0 * 4, n * 4, part,
                                0, NULL, NULL) != CL_SUCCESS)
            return fail(FLASHCL_ERROR_OPENCL, "reading d_sinks failed");
        for (size_t h = 0; h < n; ++h)
            sg->sum[h0 + h] += part[h];
    }
    return FLASHCL_SUCCESS;
}

/* The ranks' sums gathered and added in rank order, written to d_sinks on
 * every rank. Collective. */
static flashcl_status sinks_finish(MPI_Comm comm, cl_command_queue queue,
                                   const flashcl_backward_desc *g,
                                   const shard *s, const sinks_grad *sg)
{
    if (!sg->part)
        return FLASHCL_SUCCESS;
    const size_t heads = (size_t)s->heads_q;
    float *all = malloc(heads * (size_t)s->ranks * sizeof *all);
    int ok = all != NULL, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (!all_ok) {
        free(all);
        return fail(FLASHCL_ERROR_OUT_OF_MEMORY, "gathering d_sinks");
    }
    MPI_Allgather(sg->sum, (int)heads, MPI_FLOAT, all, (int)heads, MPI_FLOAT,
                  comm);
    const size_t step = g->d_sinks.stride_head ? g->d_sinks.stride_head : 1;
    flashcl_status st = FLASHCL_SUCCESS;
    for (size_t h = 0; h < heads && st == FLASHCL_SUCCESS; ++h) {
        float total = 0;
        for (int r = 0; r < s->ranks; ++r)
            total += all[(size_t)r * heads + h];
        if (clEnqueueWriteBuffer(queue, g->d_sinks.buffer, CL_TRUE,
                                 g->d_sinks.offset + h * step * 4, 4, &total,
                                 0, NULL, NULL) != CL_SUCCESS)
            st = fail(FLASHCL_ERROR_OPENCL, "writing d_sinks failed");
    }
    free(all);
    return st;
}

/* ---- backward: checks, all-gather ----------------------------------- */

static flashcl_status check_backward(const flashcl_attention_desc *d,
                                     const flashcl_backward_desc *g,
                                     const shard *s)
{
    if (!g)
        return fail(FLASHCL_ERROR_NULL_ARGUMENT, "bwd is NULL");
    if (g->struct_size != sizeof *g)
        return fail(FLASHCL_ERROR_INVALID_VALUE,
                    "bwd.struct_size = %zu, expected %zu", g->struct_size,
                    sizeof *g);
    const flashcl_tensor *views[] = {&d->lse, &g->d_o, &g->d_q, &g->d_k,
                                     &g->d_v};
    flashcl_status st = check_views(
        views, 5, "lse (the forward's), d_o, d_q, d_k and d_v need buffers");
    if (st != FLASHCL_SUCCESS)
        return st;
    const flashcl_tensor dq = explicit_view(&g->d_q, d->layout, s->n,
                                            s->heads_q, s->dim);
    const flashcl_tensor dk = explicit_view(&g->d_k, d->layout, s->n,
                                            s->heads_kv, s->dim);
    const flashcl_tensor dv = explicit_view(&g->d_v, d->layout, s->n,
                                            s->heads_kv, s->dim_v);
    if ((st = host_movable(&dq, s->heads_q, s->dim, "d_q")) !=
            FLASHCL_SUCCESS ||
        (st = host_movable(&dk, s->heads_kv, s->dim, "d_k")) !=
            FLASHCL_SUCCESS ||
        (st = host_movable(&dv, s->heads_kv, s->dim_v, "d_v")) !=
            FLASHCL_SUCCESS)
        return st;
    if (g->d_sinks.buffer && !d->sinks.buffer)
        return fail(FLASHCL_ERROR_NULL_ARGUMENT,
                    "d_sinks is wanted but the call has no sinks");
    const size_t sinks_step =
        g->d_sinks.stride_head ? g->d_sinks.stride_head : 1;
    if (g->d_sinks.buffer &&
        (st = buffer_holds(&g->d_sinks,
                           ((size_t)(s->heads_q - 1) * sinks_step + 1) * 4,
                           "d_sinks")) != FLASHCL_SUCCESS)
        return st;
    const size_t extents[3] = {
        view_extent(&dq, s->batch, s->heads_q, s->n, s->dim, s->elem),
        view_extent(&dk, s->batch, s->heads_kv, s->n, s->dim, s->elem),
        view_extent(&dv, s->batch, s->heads_kv, s->n, s->dim_v, s->elem)};
    if ((st = buffer_holds(&dq, extents[0], "d_q")) != FLASHCL_SUCCESS ||
        (st = buffer_holds(&dk, extents[1], "d_k")) != FLASHCL_SUCCESS)
        return st;
    return buffer_holds(&dv, extents[2], "d_v");
}

/* The backward of each local query chunk over the whole K and V: dQ of
 * its rows straight into d_q, and its dK/dV over every key summed on the
 * host, chunk after chunk, into whole[] (dK then dV, fp32). */
static flashcl_status local_gradients(flashcl_context *ctx,
                                      cl_command_queue queue,
                                      const flashcl_attention_desc *d,
                                      const flashcl_backward_desc *g,
                                      const flashcl_cp_desc *cp,
                                      const shard *s, cl_mem k, cl_mem v,
                                      void *whole, sinks_grad *sg)
{
    const size_t k_floats = s->k_elems * (size_t)s->ranks;
    const size_t floats = (s->k_elems + s->v_elems) * (size_t)s->ranks;
    const size_t elem = s->elem;
    cl_int e1 = CL_SUCCESS, e2 = CL_SUCCESS;
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_mem part_k = clCreateBuffer(cl, CL_MEM_READ_WRITE, k_floats * elem,
                                   NULL, &e1);
    cl_mem part_v = clCreateBuffer(cl, CL_MEM_READ_WRITE,
                                   (floats - k_floats) * elem, NULL, &e2);
    unsigned char *part = malloc(floats * elem);
    flashcl_status st = e1 || e2 || !part
                            ? fail(FLASHCL_ERROR_OUT_OF_MEMORY,
                                   "whole dK/dV partials")
                            : FLASHCL_SUCCESS;
    memset(whole, 0, floats * s->acc);
    for (int qc = 0; qc < s->chunks && st == FLASHCL_SUCCESS; ++qc) {
        flashcl_attention_desc c = whole_keys_call(d, cp, s, qc, k, v);
        flashcl_backward_desc b = *g;
        b.d_o = rows_of(&g->d_o, qc * s->rows, elem);
        b.d_q = rows_of(&g->d_q, qc * s->rows, elem);
        memset(&b.d_k, 0, sizeof b.d_k);
        memset(&b.d_v, 0, sizeof b.d_v);
        b.d_k.buffer = part_k;
        b.d_v.buffer = part_v;
        b.d_sinks = sinks_view(sg, true);
        st = flashcl_attention_backward(ctx, queue, &c, &b, 0, NULL, NULL);
        if (st != FLASHCL_SUCCESS) {
            st = fail(st, "rank %d, query chunk %d: %s", s->rank, qc,
                      flashcl_context_last_error(ctx));
            break;
        }
        if (sg->part)
            st = sinks_add(queue, sg, s);
        if (clEnqueueReadBuffer(queue, part_k, CL_TRUE, 0, k_floats * elem,
                                part, 0, NULL, NULL) != CL_SUCCESS ||
            clEnqueueReadBuffer(queue, part_v, CL_TRUE, 0,
                                (floats - k_floats) * elem,
                                part + k_floats * elem, 0, NULL,
                                NULL) != CL_SUCCESS)
            st = fail(FLASHCL_ERROR_OPENCL, "reading dK/dV partials failed");
        for (size_t i = 0; i < floats && st == FLASHCL_SUCCESS; ++i)
            acc_add(whole, i, s->acc, load_value(part, i, d->dtype));
    }
    release_kv(part_k, part_v);
    free(part);
    return st;
}

/* This shard's rows of a whole [batch, N, heads, dim] tensor of host
 * sums, each the sum over the ranks' contributions in rank order. */
static void own_rows(void *out, const void *gathered, size_t stride,
                     const flashcl_cp_desc *cp, const shard *s, size_t row)
{
    const int64_t total = cp->seqlen_total;
    for (int c = 0; c < s->chunks; ++c)
        for (int64_t b = 0; b < s->batch; ++b) {
            const size_t to = (size_t)(b * s->n + c * s->rows) * row;
            const size_t from = (size_t)(b * total + s->first[c]) * row;
            memset(acc_at(out, to, s->acc), 0, (size_t)s->rows * row * s->acc);
            for (size_t i = 0; i < (size_t)s->rows * row; ++i)
                for (int r = 0; r < s->ranks; ++r)
                    acc_add(out, to + i, s->acc,
                            acc_get(gathered, stride * (size_t)r + from + i,
                                    s->acc));
        }
}

/* The ranks' dK/dV partials gathered, and this shard's rows summed in
 * rank order into d_k and d_v: the same bits on every call. */
static flashcl_status reduce_gradients(MPI_Comm comm, cl_command_queue queue,
                                       const flashcl_backward_desc *g,
                                       const flashcl_cp_desc *cp,
                                       const shard *s, flashcl_dtype dtype,
                                       const void *whole)
{
    const size_t floats = (s->k_elems + s->v_elems) * (size_t)s->ranks;
    const size_t k_floats = s->k_elems * (size_t)s->ranks;
    void *gathered = malloc(floats * s->acc * (size_t)s->ranks);
    void *mine = malloc((s->k_elems + s->v_elems) * s->acc);
    unsigned char *stored = malloc(s->k_bytes + s->v_bytes);
    const int ok = gathered && mine && stored;
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    flashcl_status st = FLASHCL_SUCCESS;
    if (!all_ok) {
        st = fail(FLASHCL_ERROR_OUT_OF_MEMORY,
                  "gathering the ranks' dK/dV partials");
    } else if (floats * s->acc > (size_t)INT32_MAX) {
        st = fail(FLASHCL_ERROR_INVALID_DIMENSION,
                  "dK/dV partials over 2 GiB: not yet");
    } else {
        MPI_Allgather(whole, (int)(floats * s->acc), MPI_BYTE, gathered,
                      (int)(floats * s->acc), MPI_BYTE, comm);
        own_rows(mine, gathered, floats, cp, s,
                 (size_t)(s->heads_kv * s->dim));
        own_rows(acc_at(mine, s->k_elems, s->acc),
                 acc_at(gathered, k_floats, s->acc), floats, cp, s,
                 (size_t)(s->heads_kv * s->dim_v));
        store_all(stored, mine, s->k_elems + s->v_elems, dtype, s->acc);
        if (move_rows(queue, true, &g->d_k, s, s->heads_kv, s->dim,
                      stored) != CL_SUCCESS ||
            move_rows(queue, true, &g->d_v, s, s->heads_kv, s->dim_v,
                      stored + s->k_bytes) != CL_SUCCESS)
            st = fail(FLASHCL_ERROR_OPENCL, "writing dK/dV failed");
    }
    free(gathered);
    free(mine);
    free(stored);
    return st;
}

/* ---- backward (ring) ------------------------------------------------- */

/* The ring backward's buffers: K/V blocks as the forward's ring moves
 * them, and beside them the dK/dV sums of the block in hand, which
 * follow it around the ring and reach its owner one step after the
 * last. */
typedef struct ring_grads {
    unsigned char *kv[2]; /* K then V: the block in hand, the next one */
    void *sum[2];         /* dK then dV of a block: in hand, arriving */
    void *mine;           /* this rank's contribution to the block in hand */
    void *dq;             /* the shard's dQ, summed over the steps */
    unsigned char *part;  /* one call's dQ, dK, dV read back (storage) */
    cl_mem kv_dev, part_q, part_k, part_v;
    sinks_grad sinks;
} ring_grads;

static void ring_grads_release(ring_grads *r)
{
    void *host[] = {r->kv[0], r->kv[1], r->sum[0], r->sum[1],
                    r->mine,  r->dq,    r->part};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; ++i)
        free(host[i]);
    cl_mem dev[] = {r->kv_dev, r->part_q, r->part_k, r->part_v};
    for (size_t i = 0; i < 4; ++i)
        if (dev[i])
            clReleaseMemObject(dev[i]);
    sinks_release(&r->sinks);
}

static flashcl_status ring_grads_allocate(flashcl_context *ctx,
                                          const flashcl_backward_desc *g,
                                          const shard *s, ring_grads *r)
{
    memset(r, 0, sizeof *r);
    if (sinks_begin(ctx, g, s, &r->sinks) != FLASHCL_SUCCESS)
        return FLASHCL_ERROR_OUT_OF_MEMORY;
    const size_t kv = s->k_bytes + s->v_bytes;
    const size_t sums = s->k_elems + s->v_elems; /* dK then dV */
    const size_t elem = s->elem;
    const size_t q_chunk = (size_t)(s->batch * s->rows * s->heads_q * s->dim);
    const size_t k_chunk = (size_t)(s->batch * s->rows * s->heads_kv * s->dim);
    const size_t v_chunk =
        (size_t)(s->batch * s->rows * s->heads_kv * s->dim_v);
    for (int i = 0; i < 2; ++i) {
        r->kv[i] = malloc(kv);
        r->sum[i] = malloc(sums * s->acc);
    }
    r->mine = calloc(sums, s->acc);
    r->dq = calloc(q_chunk * (size_t)s->chunks, s->acc);
    r->part = malloc((q_chunk + k_chunk + v_chunk) * elem);
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_int e[4];
    r->kv_dev = clCreateBuffer(cl, CL_MEM_READ_WRITE, kv, NULL, &e[0]);
    r->part_q =
        clCreateBuffer(cl, CL_MEM_READ_WRITE, q_chunk * elem, NULL, &e[1]);
    r->part_k =
        clCreateBuffer(cl, CL_MEM_READ_WRITE, k_chunk * elem, NULL, &e[2]);
    r->part_v =
        clCreateBuffer(cl, CL_MEM_READ_WRITE, v_chunk * elem, NULL, &e[3]);
    const bool host_ok = r->kv[0] && r->kv[1] && r->sum[0] && r->sum[1] &&
                         r->mine && r->dq && r->part;
    if (!host_ok || e[0] || e[1] || e[2] || e[3])
        return fail(FLASHCL_ERROR_OUT_OF_MEMORY,
                    "ring backward buffers: K/V blocks of %zu bytes and "
                    "their dK/dV sums, twice each, on the host",
                    kv);
    if (sums * s->acc > (size_t)INT32_MAX)
        return fail(FLASHCL_ERROR_INVALID_DIMENSION,
                    "a shard's dK/dV sums hold %zu bytes: MPI counts stop at "
                    "2 GiB (not yet larger shards)",
                    sums * s->acc);
    return FLASHCL_SUCCESS;
}

/* part (a [batch, rows, heads * dim] chunk in `dtype`) added to rows of
 * chunk c of a [batch, n, heads * dim] shard-shaped host sum. */
static void add_chunk(void *sum, const unsigned char *part,
                      flashcl_dtype dtype, const shard *s, int c, size_t row)
{
    for (int64_t b = 0; b < s->batch; ++b) {
        const size_t to = (size_t)(b * s->n + c * s->rows) * row;
        const size_t from = (size_t)(b * s->rows) * row;
        for (size_t i = 0; i < (size_t)s->rows * row; ++i)
            acc_add(sum, to + i, s->acc, load_value(part, from + i, dtype));
    }
}

/* The backward of query chunk qc against key chunk kc of the block in
 * hand (of rank `source`, at k_block/v_block): its dQ rows added to
 * r->dq, its dK/dV rows to r->mine. */
static flashcl_status ring_chunk_gradients(
    flashcl_context *ctx, cl_command_queue queue,
    const flashcl_attention_desc *d, const flashcl_backward_desc *g,
    const shard *s, ring_grads *r, const flashcl_tensor *k_block,
    const flashcl_tensor *v_block, int qc, int kc, int64_t k_position,
    bool gives_sinks)
{
    const size_t elem = s->elem;
    flashcl_attention_desc c = chunk_call(d, s, qc, s->rows, k_position);
    c.k = rows_of(k_block, kc * s->rows, elem);
    c.v = rows_of(v_block, kc * s->rows, elem);
    c.o = rows_of(&d->o, qc * s->rows, elem);
    c.lse = rows_of(&d->lse, qc * s->rows, sizeof(float));
    flashcl_backward_desc b = *g;
    b.d_o = rows_of(&g->d_o, qc * s->rows, elem);
    b.d_q = rows_view(r->part_q, 0, 0, s->rows, s->heads_q, s->dim, elem);
    b.d_k = rows_view(r->part_k, 0, 0, s->rows, s->heads_kv, s->dim, elem);
    b.d_v = rows_view(r->part_v, 0, 0, s->rows, s->heads_kv, s->dim_v, elem);
    b.d_sinks = sinks_view(&r->sinks, gives_sinks);
    const flashcl_status st =
        flashcl_attention_backward(ctx, queue, &c, &b, 0, NULL, NULL);
    if (st != FLASHCL_SUCCESS)
        return fail(st, "rank %d, query chunk %d, key chunk %d: %s", s->rank,
                    qc, kc, flashcl_context_last_error(ctx));
    if (gives_sinks && r->sinks.part &&
        sinks_add(queue, &r->sinks, s) != FLASHCL_SUCCESS)
        return FLASHCL_ERROR_OPENCL;
    const size_t q_row = (size_t)(s->heads_q * s->dim);
    const size_t k_row = (size_t)(s->heads_kv * s->dim);
    const size_t v_row = (size_t)(s->heads_kv * s->dim_v);
    const size_t rows = (size_t)(s->batch * s->rows);
    unsigned char *pq = r->part, *pk = pq + rows * q_row * elem,
                  *pv = pk + rows * k_row * elem;
    if (clEnqueueReadBuffer(queue, r->part_q, CL_TRUE, 0, rows * q_row * elem,
                            pq, 0, NULL, NULL) != CL_SUCCESS ||
        clEnqueueReadBuffer(queue, r->part_k, CL_TRUE, 0, rows * k_row * elem,
                            pk, 0, NULL, NULL) != CL_SUCCESS ||
        clEnqueueReadBuffer(queue, r->part_v, CL_TRUE, 0, rows * v_row * elem,
                            pv, 0, NULL, NULL) != CL_SUCCESS)
        return fail(FLASHCL_ERROR_OPENCL, "reading a step's gradients failed");
    add_chunk(r->dq, pq, d->dtype, s, qc, q_row);
    add_chunk(r->mine, pk, d->dtype, s, kc, k_row);
    add_chunk(acc_at(r->mine, s->k_elems, s->acc), pv, d->dtype, s, kc,
              v_row);
    return FLASHCL_SUCCESS;
}

/* This rank's contribution to the dK/dV of rank `source`'s block, into
 * r->mine, and to its own dQ: every pair of chunks that sees keys, in a
 * fixed order. */
static flashcl_status ring_step_gradients(
    flashcl_context *ctx, cl_command_queue queue,
    const flashcl_attention_desc *d, const flashcl_backward_desc *g,
    const flashcl_cp_desc *cp, const shard *s, ring_grads *r,
    const flashcl_tensor *k_block, const flashcl_tensor *v_block, int source)
{
    int64_t k_first[2], k_rows;
    const int k_chunks =
        flashcl_cp_shard_rows(cp, source, s->ranks, k_first, &k_rows);
    memset(r->mine, 0, (s->k_elems + s->v_elems) * s->acc);
    flashcl_status st = FLASHCL_SUCCESS;
    for (int kc = 0; kc < k_chunks && st == FLASHCL_SUCCESS; ++kc)
        for (int qc = 0; qc < s->chunks && st == FLASHCL_SUCCESS; ++qc)
            if (chunk_sees_keys(d, s->first[qc], k_first[kc], s->rows))
                st = ring_chunk_gradients(
                    ctx, queue, d, g, s, r, k_block, v_block, qc, kc,
                    k_first[kc], source == s->rank && kc == qc);
    return st;
}

/* The shard's dQ and its own block's dK/dV, summed around the ring,
 * written to the outputs (once every rank has succeeded). */
static flashcl_status ring_write_gradients(cl_command_queue queue,
                                           const flashcl_backward_desc *g,
                                           const shard *s, flashcl_dtype dtype,
                                           const void *dq, const void *dkv)
{
    const size_t q_elems = (size_t)(s->batch * s->n * s->heads_q * s->dim);
    const size_t kv_elems = s->k_elems + s->v_elems;
    unsigned char *out = malloc((q_elems + kv_elems) * s->elem);
    if (!out)
        return fail(FLASHCL_ERROR_OUT_OF_MEMORY, "dQ, dK, dV in storage");
    store_all(out, dq, q_elems, dtype, s->acc);
    unsigned char *dk = out + q_elems * s->elem;
    store_all(dk, dkv, kv_elems, dtype, s->acc);
    flashcl_status st = FLASHCL_SUCCESS;
    if (move_rows(queue, true, &g->d_q, s, s->heads_q, s->dim, out) !=
            CL_SUCCESS ||
        move_rows(queue, true, &g->d_k, s, s->heads_kv, s->dim, dk) !=
            CL_SUCCESS ||
        move_rows(queue, true, &g->d_v, s, s->heads_kv, s->dim_v,
                  dk + s->k_bytes) != CL_SUCCESS)
        st = fail(FLASHCL_ERROR_OPENCL, "writing dQ, dK, dV failed");
    free(out);
    return st;
}

/* Step t works on the K/V block of rank (rank - t), as the forward's
 * ring, while the block moves on; the block's dK/dV sum arrives from
 * the previous rank during the step (it worked on the block at step
 * t - 1), takes this rank's contribution and moves on. After the last
 * step each sum reaches the block's owner: every contribution added in
 * ring order, so the result is bitwise repeatable. Every rank takes part
 * in every exchange whatever its own calls returned. */
static flashcl_status ring_backward(MPI_Comm comm, flashcl_context *ctx,
                                    cl_command_queue queue,
                                    const flashcl_attention_desc *d,
                                    const flashcl_backward_desc *g,
                                    const flashcl_cp_desc *cp, const shard *s)
{
    ring_grads r;
    flashcl_status st = ring_grads_allocate(ctx, g, s, &r);
    const size_t kv = s->k_bytes + s->v_bytes;
    const size_t sums = s->k_elems + s->v_elems;
    const int R = s->ranks;
    if (st == FLASHCL_SUCCESS)
        st = read_shard_kv(queue, d, s, r.kv[0]);
    st = verdict(comm, st, s->rank, "to set up its ring buffers");
    if (st == FLASHCL_SUCCESS) {
        const int next = (s->rank + 1) % R, prev = (s->rank + R - 1) % R;
        const flashcl_tensor held_k =
            rows_view(r.kv_dev, 0, 0, s->n, s->heads_kv, s->dim, s->elem);
        const flashcl_tensor held_v = rows_view(
            r.kv_dev, s->k_bytes, 0, s->n, s->heads_kv, s->dim_v, s->elem);
        MPI_Request sum_sent = MPI_REQUEST_NULL, sum_due = MPI_REQUEST_NULL;
        for (int step = 0; step < R; ++step) {
            const int hand = step % 2;
            MPI_Request moves[2];
            int moving = 0;
            if (step + 1 < R) {
                MPI_Isend(r.kv[hand], (int)kv, MPI_BYTE, next, step, comm,
                          &moves[moving++]);
                MPI_Irecv(r.kv[1 - hand], (int)kv, MPI_BYTE, prev, step, comm,
                          &moves[moving++]);
            }
            if (st == FLASHCL_SUCCESS && step > 0 &&
                clEnqueueWriteBuffer(queue, r.kv_dev, CL_TRUE, 0, kv,
                                     r.kv[hand], 0, NULL, NULL) != CL_SUCCESS)
                st = fail(FLASHCL_ERROR_OPENCL, "uploading a K/V block failed");
            if (st == FLASHCL_SUCCESS)
                st = ring_step_gradients(ctx, queue, d, g, cp, s, &r,
                                         step ? &held_k : &d->k,
                                         step ? &held_v : &d->v,
                                         (s->rank + R - step) % R);
            void *sum = r.sum[hand];
            MPI_Wait(&sum_due, MPI_STATUS_IGNORE);
            if (step == 0)
                memcpy(sum, r.mine, sums * s->acc);
            else
                for (size_t i = 0; i < sums; ++i)
                    acc_add(sum, i, s->acc, acc_get(r.mine, i, s->acc));
            /* the other sum buffer is still on its way to the next rank */
            MPI_Wait(&sum_sent, MPI_STATUS_IGNORE);
            MPI_Isend(sum, (int)sums, acc_type(s->acc), next, R + step, comm,
                      &sum_sent);
            MPI_Irecv(r.sum[1 - hand], (int)sums, acc_type(s->acc), prev,
                      R + step, comm, &sum_due);
            MPI_Waitall(moving, moves, MPI_STATUSES_IGNORE);
        }
        MPI_Wait(&sum_due, MPI_STATUS_IGNORE);
        MPI_Wait(&sum_sent, MPI_STATUS_IGNORE);
        st = verdict(comm, st, s->rank, "a ring step");
        if (st == FLASHCL_SUCCESS)
            st = sinks_finish(comm, queue, g, s, &r.sinks);
        if (st == FLASHCL_SUCCESS)
            st = ring_write_gradients(queue, g, s, d->dtype, r.dq,
                                      r.sum[R % 2]);
    }
    ring_grads_release(&r);
    return st;
}

/* Every rank's own checks (the backward's too for a backward), then
 * whether all passed and the shards describe one call: collective, the
 * same verdict class on every rank. */
static flashcl_status begin_call(MPI_Comm comm, flashcl_context *ctx,
                                 const flashcl_attention_desc *local,
                                 const flashcl_backward_desc *bwd,
                                 bool backward, const flashcl_cp_desc *cp,
                                 shard *s)
{
    int rank = 0, ranks = 1;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &ranks) != MPI_SUCCESS)
        return fail(FLASHCL_ERROR_INVALID_VALUE, "comm is no communicator");
    flashcl_status st = ctx ? resolve_shard(local, cp, backward, rank, ranks, s)
                            : fail(FLASHCL_ERROR_NULL_ARGUMENT, "ctx is NULL");
    if (st == FLASHCL_SUCCESS && backward)
        st = check_backward(local, bwd, s);
    st = verdict(comm, st, rank, "its own checks");
    return st == FLASHCL_SUCCESS ? same_call(comm, local, bwd, cp) : st;
}

/* The shard's descriptors with every view's strides spelled out (its
 * layout's, where they are zero), and the layout set to bnhd for the
 * packed buffers of its own that the calls pass with zero strides. */
static flashcl_attention_desc explicit_desc(const flashcl_attention_desc *d,
                                            const shard *s)
{
    flashcl_attention_desc c = *d;
    c.q = explicit_view(&d->q, d->layout, s->n, s->heads_q, s->dim);
    c.k = explicit_view(&d->k, d->layout, s->n, s->heads_kv, s->dim);
    c.v = explicit_view(&d->v, d->layout, s->n, s->heads_kv, s->dim_v);
    c.o = explicit_view(&d->o, d->layout, s->n, s->heads_q, s->dim_v);
    c.lse = explicit_lse(&d->lse, s->n, s->heads_q);
    c.layout = FLASHCL_LAYOUT_BNHD;
    return c;
}

static flashcl_backward_desc explicit_bwd(const flashcl_backward_desc *g,
                                          flashcl_layout layout,
                                          const shard *s)
{
    flashcl_backward_desc c = *g;
    c.d_o = explicit_view(&g->d_o, layout, s->n, s->heads_q, s->dim_v);
    c.d_q = explicit_view(&g->d_q, layout, s->n, s->heads_q, s->dim);
    c.d_k = explicit_view(&g->d_k, layout, s->n, s->heads_kv, s->dim);
    c.d_v = explicit_view(&g->d_v, layout, s->n, s->heads_kv, s->dim_v);
    return c;
}

flashcl_status flashcl_cp_attention_backward(
    MPI_Comm comm, flashcl_context *ctx, cl_command_queue queue,
    const flashcl_attention_desc *shard_desc,
    const flashcl_backward_desc *shard_bwd, const flashcl_cp_desc *cp)
{
    shard s;
    flashcl_status st =
        begin_call(comm, ctx, shard_desc, shard_bwd, true, cp, &s);
    if (st != FLASHCL_SUCCESS)
        return st;
    const flashcl_attention_desc explicit = explicit_desc(shard_desc, &s);
    const flashcl_backward_desc explicit_g =
        explicit_bwd(shard_bwd, shard_desc->layout, &s);
    const flashcl_attention_desc *local = &explicit;
    const flashcl_backward_desc *bwd = &explicit_g;
    const int rank = s.rank, ranks = s.ranks;
    if (!queue)
        queue = flashcl_context_queue(ctx);
    if (cp->mode == FLASHCL_CP_RING)
        return verdict(comm, ring_backward(comm, ctx, queue, local, bwd, cp, &s),
                       rank, "its part of the backward");
    cl_mem k, v;
    sinks_grad sg;
    st = sinks_begin(ctx, bwd, &s, &sg);
    st = verdict(comm, st, rank, "to set up its d_sinks partials");
    if (st == FLASHCL_SUCCESS)
        st = gather_whole_kv(comm, ctx, queue, local, cp, &s, &k, &v);
    else
        k = v = NULL;
    void *whole = NULL;
    if (st == FLASHCL_SUCCESS) {
        whole = malloc((s.k_elems + s.v_elems) * s.acc * (size_t)ranks);
        st = whole ? local_gradients(ctx, queue, local, bwd, cp, &s, k, v,
                                     whole, &sg)
                   : fail(FLASHCL_ERROR_OUT_OF_MEMORY, "whole dK/dV");
        st = verdict(comm, st, rank, "its gradients");
        if (st == FLASHCL_SUCCESS)
            st = sinks_finish(comm, queue, bwd, &s, &sg);
        if (st == FLASHCL_SUCCESS)
            st = reduce_gradients(comm, queue, bwd, cp, &s, local->dtype,
                                  whole);
    }
    release_kv(k, v);
    sinks_release(&sg);
    free(whole);
    return verdict(comm, st, rank, "its part of the backward");
}

/* ---- the call -------------------------------------------------------- */

flashcl_status flashcl_cp_attention_forward(MPI_Comm comm,
                                            flashcl_context *ctx,
                                            cl_command_queue queue,
                                            const flashcl_attention_desc *given,
                                            const flashcl_cp_desc *cp)
{
    shard s;
    flashcl_status st = begin_call(comm, ctx, given, NULL, false, cp, &s);
    if (st != FLASHCL_SUCCESS)
        return st;
    const flashcl_attention_desc explicit = explicit_desc(given, &s);
    const flashcl_attention_desc *local = &explicit;
    const int rank = s.rank;
    if (!queue)
        queue = flashcl_context_queue(ctx);
    st = cp->mode == FLASHCL_CP_RING
             ? ring_forward(comm, ctx, queue, local, cp, &s)
             : allgather_forward(comm, ctx, queue, local, cp, &s);
    return verdict(comm, st, rank, "its part of the call");
}
