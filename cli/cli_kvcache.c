/* KV-cache mode of a problem (`flashcl run --kv-cache`, `--kv-dtype`,
 * `--page-size`, `--append`): K and V become a cache read through
 * cache_seqlens, dense or paged, whose last keys may come as k_new / v_new
 * for the call to append. A quantized side is written by the host
 * quantizer (support/kv_quant_oracle.h), and the rows the call appends
 * are quantized by it too, the way docs/kv-quantization.md says the
 * append does, so that the kernel's dequantizing loads and its quantizing
 * append are both checked against a float64 oracle of values the host
 * derived on its own. */
#define _POSIX_C_SOURCE 200809L
#include "cli_problem.h"

#include "kv_quant_oracle.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows no one wrote (the slack past the keys, the rows the append must
 * fill) hold a finite code under a large scale, so that a key read by
 * mistake outweighs the real ones instead of being masked as a NaN scale
 * would make it; a cache in the dtype holds NaN there. */
#define POISON_BYTE 0x5a
#define POISON_SCALE 0.75f

static cl_mem copy_to_device(cl_context context, const void *data,
                             size_t bytes, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    return clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                          bytes, (void *)data, err);
}

/* One per-tensor scale, as vLLM's fp8 cache keeps: the tensor's amax maps
 * to the type's largest finite value, so that no value saturates. The
 * appended rows count too: an engine sets the scale before it sees them,
 * and a test that let them saturate would check the clamp, not the
 * rounding. */
static float fp8_tensor_scale(int type, const void *x, size_t count,
                              flashcl_dtype dtype)
{
    double amax = 0;
    for (size_t i = 0; i < count; ++i)
        amax = fmax(amax, fabs(oracle_load(x, i, dtype)));
    return amax > 0 ? (float)(amax / kvq_fp8_max(type)) : 1.0f;
}

/* ---- where the rows live -------------------------------------------- */

/* Pages handed out in a shuffled order (a fixed seed), so that a kernel
 * that took page b * max_pages + i for the block table's entry reads the
 * wrong keys. */
static int layout_create(problem *p)
{
    const problem_spec *s = &p->spec;
    problem_kv_layout *l = &p->layout;
    l->cache_len = s->seqlen_k - s->append;
    if (s->page_size <= 0) {
        l->capacity = l->slots = s->seqlen_k + s->append;
        l->kv_batch = s->batch;
        return 0;
    }
    l->slots = s->page_size;
    l->max_pages = (s->seqlen_k + s->page_size - 1) / s->page_size;
    l->max_pages = l->max_pages > 0 ? l->max_pages : 1;
    l->capacity = l->max_pages * s->page_size;
    l->kv_batch = s->batch * l->max_pages;
    l->table = malloc((size_t)l->kv_batch * sizeof *l->table);
    if (!l->table)
        return -1;
    unsigned seed = 0x9e3779b9u;
    for (int i = 0; i < l->kv_batch; ++i)
        l->table[i] = i;
    for (int i = l->kv_batch - 1; i > 0; --i) {
        seed = seed * 1664525u + 1013904223u;
        const int j = (int)((seed >> 8) % (unsigned)(i + 1));
        const int swap = l->table[i];
        l->table[i] = l->table[j];
        l->table[j] = swap;
    }
    return 0;
}

/* Cache row of key t of sequence b, head h: its index in rows of one
 * head's values (docs/kv-quantization.md's "Rows"). */
static size_t cache_row(const problem *p, size_t b, size_t t, size_t h)
{
    const problem_kv_layout *l = &p->layout;
    size_t row = b, slot = t;
    if (l->table) {
        row = (size_t)l->table[b * (size_t)l->max_pages +
                               t / (size_t)l->slots];
        slot = t % (size_t)l->slots;
    }
    return (row * (size_t)l->slots + slot) * (size_t)p->spec.heads_kv + h;
}

/* ---- one side, on the host ------------------------------------------ */

typedef struct host_side {
    unsigned char *bytes; /* the cache's rows, poison where unwritten */
    float *scales, *zeros;
    size_t dim, row_bytes, per_row, rows, scale_count;
    float fp8_scale;
    float row[256]; /* one row of the dtype's values (head_dim <= 256) */
    unsigned char code[256];
    float row_scales[256 / KVQ_GROUP + 1], row_zeros[256 / KVQ_GROUP + 1];
} host_side;

static int host_side_create(const problem *p, int which, host_side *h)
{
    const int type = p->kv[which].type;
    const size_t elem = oracle_dtype_size(p->dtype);
    h->dim = (size_t)(which ? p->spec.head_dim_v : p->spec.head_dim);
    h->row_bytes = type ? kvq_row_bytes(type, h->dim) : h->dim * elem;
    h->per_row = kvq_row_scales(type, h->dim);
    h->rows = (size_t)p->layout.kv_batch * (size_t)p->layout.slots *
              (size_t)p->spec.heads_kv;
    h->scale_count = h->per_row ? h->rows * h->per_row : 1;
    h->bytes = malloc(h->rows * h->row_bytes + 1);
    h->scales = malloc(h->scale_count * sizeof *h->scales);
    h->zeros = calloc(h->scale_count, sizeof *h->zeros);
    if (!h->bytes || !h->scales || !h->zeros || h->dim > 256)
        return -1;
    memset(h->bytes, POISON_BYTE, h->rows * h->row_bytes + 1);
    for (size_t i = 0; !type && i < h->rows * h->dim; ++i)
        oracle_store(h->bytes, i, p->dtype, NAN);
    for (size_t i = 0; i < h->scale_count; ++i)
        h->scales[i] = POISON_SCALE;
    return 0;
}

static void host_side_free(host_side *h)
{
    free(h->bytes);
    free(h->scales);
    free(h->zeros);
}

/* Quantizes logical row r (key t of its sequence) as the host writes it
 * or, for an appended key, as the append must: the values the kernel
 * reads either way go to side->values, and only a cached key's bytes and
 * scales go into the cache. */
static void quantize_row(const problem *p, problem_kv_side *side,
                         host_side *h, const void *x, size_t r, size_t t,
                         size_t cache_at)
{
    for (size_t d = 0; d < h->dim; ++d)
        h->row[d] = (float)oracle_load(x, r * h->dim + d, p->dtype);
    kvq_quantize_row(side->type, h->row, h->dim, h->fp8_scale, h->code,
                     h->row_scales, h->row_zeros);
    const float *scales = h->per_row ? h->row_scales : NULL;
    const float *zeros = side->type == FLASHCL_KV_INT4 ? h->row_zeros : NULL;
    for (size_t d = 0; d < h->dim; ++d)
        side->values[r * h->dim + d] = kvq_dequant(
            side->type, h->code, d, scales, zeros, h->fp8_scale);
    if ((long)t >= (long)p->layout.cache_len)
        return;
    memcpy(h->bytes + cache_at * h->row_bytes, h->code, h->row_bytes);
    for (size_t g = 0; g < h->per_row; ++g) {
        h->scales[cache_at * h->per_row + g] = h->row_scales[g];
        h->zeros[cache_at * h->per_row + g] = h->row_zeros[g];
    }
}

/* Every key of every sequence into the host's cache rows: quantized, or
 * copied in the dtype. */
static void fill_side(const problem *p, problem_kv_side *side, host_side *h,
                      const void *x)
{
    const problem_spec *s = &p->spec;
    const size_t elem = oracle_dtype_size(p->dtype);
    /* int4 rows are whole groups of 32, or the library refuses the call
     * (the refusal is what such a run shows): nothing to quantize then. */
    if (side->type == FLASHCL_KV_INT4 && h->dim % KVQ_GROUP != 0)
        return;
    for (size_t b = 0; b < (size_t)s->batch; ++b)
        for (size_t t = 0; t < (size_t)s->seqlen_k; ++t)
            for (size_t hd = 0; hd < (size_t)s->heads_kv; ++hd) {
                const size_t r = (b * (size_t)s->seqlen_k + t) *
                                     (size_t)s->heads_kv + hd;
                const size_t at = cache_row(p, b, t, hd);
                if (side->type)
                    quantize_row(p, side, h, x, r, t, at);
                else if ((long)t < (long)p->layout.cache_len)
                    memcpy(h->bytes + at * h->row_bytes,
                           (const unsigned char *)x + r * h->dim * elem,
                           h->row_bytes);
            }
}

/* k_new / v_new: the last `append` keys of each sequence, in the dtype. */
static cl_mem upload_new_rows(cl_context context, const problem *p,
                              const void *x, size_t dim, cl_int *err)
{
    const problem_spec *s = &p->spec;
    const size_t elem = oracle_dtype_size(p->dtype);
    const size_t run = (size_t)s->append * (size_t)s->heads_kv * dim * elem;
    unsigned char *rows = malloc(run * (size_t)s->batch + 1);
    if (!rows) {
        *err = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    for (size_t b = 0; b < (size_t)s->batch; ++b)
        memcpy(rows + b * run,
               (const unsigned char *)x +
                   (b * (size_t)s->seqlen_k + (size_t)p->layout.cache_len) *
                       (size_t)s->heads_kv * dim * elem,
               run);
    cl_mem buffer = copy_to_device(context, rows, run * (size_t)s->batch + 1,
                                   err);
    free(rows);
    return buffer;
}

/* K (which 0) or V (1): host rows, then their device copies. */
static int create_side(cl_context context, problem *p, int which, char *why,
                       size_t why_cap)
{
    problem_kv_side *side = &p->kv[which];
    const size_t count = which ? p->v_count : p->k_count;
    const void *x = which ? p->v : p->k;
    host_side h = {0};
    cl_int err = CL_SUCCESS;
    side->values =
        side->type ? calloc(count ? count : 1, sizeof *side->values) : NULL;
    const bool ok = host_side_create(p, which, &h) == 0 &&
                    (!side->type || side->values);
    if (ok) {
        h.fp8_scale = h.per_row || !side->type
                          ? 0
                          : fp8_tensor_scale(side->type, x, count, p->dtype);
        if (!h.per_row)
            h.scales[0] = h.fp8_scale;
        side->fp8_scale = h.fp8_scale;
        fill_side(p, side, &h, x);
        side->bytes_buf = copy_to_device(
            context, h.bytes, h.rows * h.row_bytes + 1, &err);
        if (side->type)
            side->scale_buf = copy_to_device(
                context, h.scales, h.scale_count * sizeof(float), &err);
        if (side->type == FLASHCL_KV_INT4)
            side->zero_buf = copy_to_device(
                context, h.zeros, h.scale_count * sizeof(float), &err);
        if (p->spec.append)
            side->new_buf = upload_new_rows(context, p, x, h.dim, &err);
    }
    host_side_free(&h);
    if (!ok)
        snprintf(why, why_cap, "out of host memory for the %s cache",
                 which ? "V" : "K");
    else if (err != CL_SUCCESS)
        snprintf(why, why_cap, "creating the %s cache's buffers failed "
                               "(OpenCL error %d)",
                 which ? "V" : "K", (int)err);
    return ok && err == CL_SUCCESS ? 0 : -1;
}

/* ---- the problem's cache -------------------------------------------- */

static cl_int upload_lengths(cl_context context, problem *p)
{
    const problem_kv_layout *l = &p->layout;
    cl_int err = CL_SUCCESS;
    int *lens = malloc((size_t)p->spec.batch * sizeof *lens);
    if (!lens)
        return CL_OUT_OF_HOST_MEMORY;
    for (int b = 0; b < p->spec.batch; ++b)
        lens[b] = l->cache_len;
    p->seqlens_buf = copy_to_device(
        context, lens, (size_t)p->spec.batch * sizeof *lens, &err);
    free(lens);
    if (l->table)
        p->table_buf = copy_to_device(
            context, l->table, (size_t)l->kv_batch * sizeof *l->table, &err);
    return err;
}

int problem_kv_create(flashcl_context *ctx, problem *p, char *why,
                      size_t why_cap)
{
    cl_context context = flashcl_context_cl_context(ctx);
    p->kv[0].type = p->spec.k_storage;
    p->kv[1].type = p->spec.v_storage;
    if (layout_create(p) != 0) {
        snprintf(why, why_cap, "out of host memory for the block table");
        return -1;
    }
    const cl_int err = upload_lengths(context, p);
    if (err != CL_SUCCESS) {
        snprintf(why, why_cap, "creating cache_seqlens and the block table "
                               "failed (OpenCL error %d)",
                 (int)err);
        return -1;
    }
    for (int which = 0; which < 2; ++which)
        if (create_side(context, p, which, why, why_cap) != 0)
            return -1;
    return 0;
}

void problem_kv_release(problem *p)
{
    cl_mem shared[2] = {p->seqlens_buf, p->table_buf};
    for (int i = 0; i < 2; ++i)
        if (shared[i])
            clReleaseMemObject(shared[i]);
    for (int which = 0; which < 2; ++which) {
        problem_kv_side *side = &p->kv[which];
        cl_mem buffers[4] = {side->bytes_buf, side->scale_buf,
                             side->zero_buf, side->new_buf};
        for (int i = 0; i < 4; ++i)
            if (buffers[i])
                clReleaseMemObject(buffers[i]);
        free(side->values);
    }
    free(p->layout.table);
    p->seqlens_buf = p->table_buf = NULL;
    memset(&p->layout, 0, sizeof p->layout);
    memset(p->kv, 0, sizeof p->kv);
}

/* ---- the appended rows, read back ---------------------------------- */

/* Host copies of a side's device cache: rows, scales and zero points. */
static int read_side(cl_command_queue queue, const problem *p, int which,
                     host_side *h)
{
    const problem_kv_side *side = &p->kv[which];
    if (host_side_create(p, which, h) != 0)
        return CL_OUT_OF_HOST_MEMORY;
    cl_int err = clEnqueueReadBuffer(queue, side->bytes_buf, CL_TRUE, 0,
                                     h->rows * h->row_bytes, h->bytes, 0,
                                     NULL, NULL);
    if (err == CL_SUCCESS && side->scale_buf)
        err = clEnqueueReadBuffer(queue, side->scale_buf, CL_TRUE, 0,
                                  h->scale_count * sizeof(float), h->scales,
                                  0, NULL, NULL);
    if (err == CL_SUCCESS && side->zero_buf)
        err = clEnqueueReadBuffer(queue, side->zero_buf, CL_TRUE, 0,
                                  h->scale_count * sizeof(float), h->zeros,
                                  0, NULL, NULL);
    return err;
}

/* Values of appended row r (key t of its sequence, at cache row `at`)
 * that differ from the host's. */
static size_t row_differences(const problem *p, int which,
                              const host_side *h, size_t r, size_t at)
{
    const problem_kv_side *side = &p->kv[which];
    const unsigned char *got = h->bytes + at * h->row_bytes;
    if (!side->type) {
        const size_t elem = oracle_dtype_size(p->dtype);
        const unsigned char *want =
            (const unsigned char *)(which ? p->v : p->k) + r * h->dim * elem;
        size_t differing = 0;
        for (size_t d = 0; d < h->dim; ++d)
            differing += memcmp(got + d * elem, want + d * elem, elem) != 0;
        return differing;
    }
    const float *scales = h->per_row ? h->scales + at * h->per_row : NULL;
    const float *zeros =
        side->type == FLASHCL_KV_INT4 ? h->zeros + at * h->per_row : NULL;
    size_t differing = 0;
    for (size_t d = 0; d < h->dim; ++d) {
        const double value =
            kvq_dequant(side->type, got, d, scales, zeros, side->fp8_scale);
        const double want = side->values[r * h->dim + d];
        /* NaN == NaN is false: a NaN where the host has one agrees */
        differing += !(value == want || (isnan(value) && isnan(want)));
    }
    return differing;
}

int problem_kv_check_append(flashcl_context *ctx, const problem *p,
                            size_t *differing, size_t *checked, char *why,
                            size_t why_cap)
{
    const problem_spec *s = &p->spec;
    *differing = *checked = 0;
    for (int which = 0; which < 2 && s->append; ++which) {
        host_side h = {0};
        const cl_int err =
            read_side(flashcl_context_queue(ctx), p, which, &h);
        for (size_t b = 0; err == CL_SUCCESS && b < (size_t)s->batch; ++b)
            for (size_t t = (size_t)p->layout.cache_len;
                 t < (size_t)s->seqlen_k; ++t)
                for (size_t hd = 0; hd < (size_t)s->heads_kv; ++hd) {
                    const size_t r = (b * (size_t)s->seqlen_k + t) *
                                         (size_t)s->heads_kv + hd;
                    *differing += row_differences(p, which, &h, r,
                                                  cache_row(p, b, t, hd));
                    *checked += h.dim;
                }
        host_side_free(&h);
        if (err != CL_SUCCESS) {
            snprintf(why, why_cap, "reading the %s cache back failed "
                                   "(OpenCL error %d)",
                     which ? "V" : "K", (int)err);
            return -1;
        }
    }
    return 0;
}

/* A side's packed view of the cache and, when quantized, its storage,
 * its scale (fp8: one per tensor) and int4's zero points. */
static void side_fields(const problem_kv_side *side, flashcl_tensor *t,
                        flashcl_kv_storage *storage, flashcl_tensor *scale,
                        flashcl_tensor *zero)
{
    const flashcl_tensor packed = {0};
    *t = packed;
    t->buffer = side->bytes_buf;
    if (!side->type)
        return;
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
    const problem_kv_layout *l = &p->layout;
    d->seqlen_k = l->capacity;
    d->cache_seqlens.buffer = p->seqlens_buf;
    if (l->table) {
        d->block_table.buffer = p->table_buf;
        d->page_size = p->spec.page_size;
        d->max_pages = l->max_pages;
        d->kv_batch = l->kv_batch;
    }
    if (p->spec.append) {
        d->seqlen_new = p->spec.append;
        d->k_new.buffer = p->kv[0].new_buf;
        d->v_new.buffer = p->kv[1].new_buf;
    }
    side_fields(&p->kv[0], &d->k, &d->k_storage, &d->k_scale, &d->k_zero);
    side_fields(&p->kv[1], &d->v, &d->v_storage, &d->v_scale, &d->v_zero);
}

bool problem_kv_quantized(const problem *p)
{
    return p->kv[0].type || p->kv[1].type;
}
