/*
 * Quantized KV caches (issue 45): fp8 e4m3 / e5m2, int8 and int4 keys and
 * values with their scales, on the split-KV row kernel (and, as ctest's
 * test_kv_quant_wide and test_kv_quant_lanes, on the wide and lane-group
 * ones: FLASHCL_SPLIT_KERNEL=wide or lanes, checked to be the one
 * planned; scripts/test.sh runs the tensor-core kernel, emulated, with
 * FLASHCL_SPLIT_KERNEL=mma and the fp32 cases in 16 bits,
 * FLASHCL_KVQ_DTYPE).
 *
 * The cache is written by the host's quantizer (support/kv_quant_oracle.h,
 * written from docs/kv-quantization.md, not from the kernels) and the
 * oracle dequantizes it in float64, so the kernel's own error is measured
 * apart from the quantization error: it must agree to the accuracy of a
 * 16-bit call. Every type, K/V pairs that differ, dense and paged caches,
 * cache_batch_idx, decode and chunked prefill, GQA, num_splits, variants
 * (causal, window, softcap, sinks), the in-place append (which quantizes
 * the new rows in the kernel; checked against the rounding bound of each
 * type, and the rest of the cache left as it was), non-finite scales on
 * the device (the key masked, or the V element read as 0), and every bad
 * input (status, message, nothing written). One more test prints (does
 * not assert) the error of quantized against unquantized attention per
 * type, on normal inputs and with one channel 30x the rest.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include "kv_quant_oracle.h"
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 2
#define CAPACITY 64
#define PAGE 16
#define MAX_PAGES (CAPACITY / PAGE)
#define PAGES (BATCH * MAX_PAGES + 1) /* page 0 is never mapped */
#define DENSE_ROWS 3                  /* rows for cache_batch_idx */

enum { E4M3 = 1, E5M2 = 2, INT8 = 3, INT4 = 4 };

typedef struct kvq_case {
    const char *name;
    int k_type, v_type;
    int paged, batch_idx;
    int seqlen_q, heads_q, heads_kv, head_dim, head_dim_v;
    flashcl_dtype dtype;
    int per_head;    /* fp8 scales per KV head */
    int causal;
    int window_left; /* > 0: window (left only) */
    float softcap;
    int sinks;
    int append;      /* seqlen_new */
    int num_splits;
    int bad_scales;  /* 1: a NaN K scale and an infinite V scale; 2: every
                        byte of the cache random (all fp8 codes, NaN and
                        infinities included); 3: fp8 subnormal codes only,
                        with scales that make them count */
    int varlen_q;    /* packed queries (cu_seqlens_q): varlen_rows each */
} kvq_case;

static const kvq_case cases[] = {
    {"e4m3 dense decode GQA4", E4M3, E4M3, 0, 0, 1, 8, 2, 64, 64,
     FLASHCL_DTYPE_FP32, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"e5m2 paged decode per-head", E5M2, E5M2, 1, 0, 1, 8, 2, 64, 64,
     FLASHCL_DTYPE_FP32, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {"int8 dense decode GQA4", INT8, INT8, 0, 0, 1, 8, 2, 64, 64,
     FLASHCL_DTYPE_FP32, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"int4 paged decode, 3 splits", INT4, INT4, 1, 0, 1, 8, 2, 64, 64,
     FLASHCL_DTYPE_FP32, 0, 0, 0, 0, 0, 0, 3, 0, 0},
    {"int8 K int4 V, batch_idx, prefill 5 causal", INT8, INT4, 0, 1, 5, 4,
     2, 64, 32, FLASHCL_DTYPE_FP32, 0, 1, 0, 0, 0, 0, 0, 0, 0},
    {"int4 K int8 V paged prefill 4, window, softcap", INT4, INT8, 1, 0, 4,
     4, 1, 32, 64, FLASHCL_DTYPE_FP32, 0, 1, 20, 30.0f, 0, 0, 0, 0, 0},
    {"e4m3 K fp16 V, fp16, sinks", E4M3, 0, 0, 0, 1, 4, 4, 64, 64,
     FLASHCL_DTYPE_FP16, 1, 0, 0, 0, 1, 0, 0, 0, 0},
    {"int8 dense append 3 causal", INT8, INT8, 0, 0, 3, 8, 2, 64, 64,
     FLASHCL_DTYPE_FP32, 0, 1, 0, 0, 0, 3, 0, 0, 0},
    {"int4 paged append 2 causal bf16", INT4, INT4, 1, 0, 2, 4, 2, 64, 64,
     FLASHCL_DTYPE_BF16, 0, 1, 0, 0, 0, 2, 0, 0, 0},
    {"e4m3 K e5m2 V paged append 1", E4M3, E5M2, 1, 0, 1, 8, 2, 64, 64,
     FLASHCL_DTYPE_FP32, 1, 0, 0, 0, 0, 1, 0, 0, 0},
    {"int8 dense decode, NaN K / inf V scales", INT8, INT8, 0, 0, 1, 8, 2,
     64, 64, FLASHCL_DTYPE_FP32, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"e4m3 K e5m2 V paged, every code", E4M3, E5M2, 1, 0, 1, 8, 2, 64, 64,
     FLASHCL_DTYPE_FP32, 1, 0, 0, 0, 0, 0, 0, 2, 0},
    {"e4m3 K e5m2 V dense, subnormal codes", E4M3, E5M2, 0, 0, 1, 8, 2, 64,
     64, FLASHCL_DTYPE_FP32, 0, 0, 0, 0, 0, 0, 0, 3, 0},
    {"int8 K e4m3 V paged, varlen queries 2 and 5, causal", INT8, E4M3, 1,
     0, 5, 4, 2, 64, 64, FLASHCL_DTYPE_FP32, 0, 1, 0, 0, 0, 0, 0, 0, 1},
    {"e5m2 K int8 V dense, head dims 18 and 22", E5M2, INT8, 0, 0, 2, 2, 1,
     18, 22, FLASHCL_DTYPE_FP32, 0, 1, 0, 0, 0, 1, 0, 2, 0},
};

static const int cache_lens[BATCH] = {37, 50};
static const int batch_rows[BATCH] = {2, 0}; /* cache_batch_idx */
static const int varlen_rows[BATCH] = {2, 5}; /* at most seqlen_q */
static const int varlen_cu[BATCH + 1] = {0, 2, 7};

/* ---- one side (K or V) of the cache on the host --------------------- */

typedef struct side {
    int type;
    size_t dim, rows, slots, heads; /* rows x slots x heads rows of dim */
    float *truth;                   /* the values before quantization */
    unsigned char *bytes;           /* the cache as stored */
    float *scales, *zeros;          /* per row (int8/int4), or fp8's */
    size_t scale_count, zero_count, byte_count;
    cl_mem bytes_mem, scale_mem, zero_mem;
} side;

static size_t row_index(const side *s, size_t row, size_t slot, size_t head)
{
    return (row * s->slots + slot) * s->heads + head;
}

static size_t dtype_bytes(flashcl_dtype dtype)
{
    return oracle_dtype_size(dtype);
}

static size_t stored_row_bytes(const side *s, flashcl_dtype dtype)
{
    return s->type ? kvq_row_bytes(s->type, s->dim) : s->dim * dtype_bytes(dtype);
}

static float fp8_scale_of(const side *s, size_t head)
{
    return s->scales[s->scale_count == 1 ? 0 : head];
}

/* Rows of `s` (all of them) quantized from s->truth; fp8 scales from the
 * amax of the tensor or of each head, so that every value fits. */
static void quantize_side(side *s, flashcl_dtype dtype)
{
    const size_t count = s->rows * s->slots * s->heads;
    if (s->type == E4M3 || s->type == E5M2) {
        for (size_t i = 0; i < s->scale_count; ++i)
            s->scales[i] = 0;
        for (size_t r = 0; r < count; ++r)
            for (size_t d = 0; d < s->dim; ++d) {
                float *amax = &s->scales[s->scale_count == 1 ? 0
                                                             : r % s->heads];
                *amax = fmaxf(*amax, fabsf(s->truth[r * s->dim + d]));
            }
        for (size_t i = 0; i < s->scale_count; ++i)
            s->scales[i] /= (float)kvq_fp8_max(s->type);
    }
    const size_t row_bytes = stored_row_bytes(s, dtype);
    const size_t per_row = kvq_row_scales(s->type, s->dim);
    for (size_t r = 0; r < count; ++r) {
        unsigned char *out = s->bytes + r * row_bytes;
        const float *x = s->truth + r * s->dim;
        if (!s->type) {
            for (size_t d = 0; d < s->dim; ++d)
                oracle_store(out, d, dtype, x[d]);
            continue;
        }
        kvq_quantize_row(s->type, x, s->dim, fp8_scale_of(s, r % s->heads),
                         out, per_row ? s->scales + r * per_row : NULL,
                         s->type == INT4 ? s->zeros + r * per_row : NULL);
    }
}

/* Element d of row r as the kernel must see it, in float64. */
static double side_value(const side *s, flashcl_dtype dtype, size_t r,
                         size_t d)
{
    const unsigned char *row = s->bytes + r * stored_row_bytes(s, dtype);
    if (!s->type)
        return oracle_load(row, d, dtype);
    const size_t per_row = kvq_row_scales(s->type, s->dim);
    return kvq_dequant(s->type, row, d,
                       per_row ? s->scales + r * per_row : NULL,
                       s->type == INT4 ? s->zeros + r * per_row : NULL,
                       per_row ? 0 : fp8_scale_of(s, r % s->heads));
}

static void side_make(side *s, int type, size_t dim, size_t rows,
                      size_t slots, size_t heads, int per_head,
                      flashcl_dtype dtype, rng *r, int outlier)
{
    memset(s, 0, sizeof *s);
    s->type = type;
    s->dim = dim;
    s->rows = rows;
    s->slots = slots;
    s->heads = heads;
    const size_t count = rows * slots * heads;
    s->truth = malloc(count * dim * sizeof *s->truth);
    ck_assert_ptr_nonnull(s->truth);
    for (size_t i = 0; i < count * dim; ++i)
        s->truth[i] = (float)rng_normal(r) * (outlier && i % dim == 3 ? 30 : 1);
    s->byte_count = count * stored_row_bytes(s, dtype);
    s->bytes = calloc(s->byte_count, 1);
    ck_assert_ptr_nonnull(s->bytes);
    s->scale_count = type == E4M3 || type == E5M2
                         ? (per_head ? heads : 1)
                         : count * kvq_row_scales(type, dim);
    s->zero_count = type == INT4 ? s->scale_count : 0;
    s->scales = calloc(s->scale_count + 1, sizeof *s->scales);
    s->zeros = calloc(s->zero_count + 1, sizeof *s->zeros);
    ck_assert_ptr_nonnull(s->scales);
    ck_assert_ptr_nonnull(s->zeros);
    quantize_side(s, dtype);
}

static cl_mem upload(const void *bytes, size_t size)
{
    flashcl_context *ctx = shared_context();
    cl_mem buffer = create_buffer(flashcl_context_cl_context(ctx), size);
    write_buffer(flashcl_context_queue(ctx), buffer, bytes, size);
    return buffer;
}

static void side_upload(side *s)
{
    s->bytes_mem = upload(s->bytes, s->byte_count);
    s->scale_mem = s->type ? upload(s->scales, s->scale_count * 4) : NULL;
    s->zero_mem = s->type == INT4 ? upload(s->zeros, s->zero_count * 4) : NULL;
}

static void side_download(side *s)
{
    cl_command_queue queue = flashcl_context_queue(shared_context());
    read_buffer(queue, s->bytes_mem, s->bytes, s->byte_count);
    if (s->scale_mem)
        read_buffer(queue, s->scale_mem, s->scales, s->scale_count * 4);
    if (s->zero_mem)
        read_buffer(queue, s->zero_mem, s->zeros, s->zero_count * 4);
}

static void side_release(side *s)
{
    cl_mem all[3] = {s->bytes_mem, s->scale_mem, s->zero_mem};
    for (int i = 0; i < 3; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(s->truth);
    free(s->bytes);
    free(s->scales);
    free(s->zeros);
}

/* ---- the call ------------------------------------------------------ */

typedef struct setup {
    const kvq_case *c;
    side k, v;
    size_t kv_rows, slots;
    int table[BATCH * MAX_PAGES];
    float *q, *k_new, *v_new, sinks[16];
    size_t q_count, o_count, lse_count, new_k_count, new_v_count;
    int q_total; /* query rows of all sequences */
    cl_mem q_mem, o_mem, lse_mem, lens_mem, idx_mem, table_mem, sinks_mem,
        k_new_mem, v_new_mem, cu_mem;
    flashcl_attention_desc desc;
} setup;

/* Where key j of sequence b lives: (cache row or page, slot). */
static void key_slot(const setup *s, int b, int j, size_t *row, size_t *slot)
{
    if (s->c->paged) {
        *row = (size_t)s->table[b * MAX_PAGES + j / PAGE];
        *slot = (size_t)(j % PAGE);
    } else {
        *row = (size_t)(s->c->batch_idx ? batch_rows[b] : b);
        *slot = (size_t)j;
    }
}

static void *dtype_array(const float *x, size_t count, flashcl_dtype dtype)
{
    unsigned char *out = malloc(count * dtype_bytes(dtype));
    ck_assert_ptr_nonnull(out);
    for (size_t i = 0; i < count; ++i)
        oracle_store(out, i, dtype, x[i]);
    return out;
}

static cl_mem upload_dtype(const float *x, size_t count, flashcl_dtype dtype)
{
    void *bytes = dtype_array(x, count, dtype);
    cl_mem m = upload(bytes, count * dtype_bytes(dtype));
    free(bytes);
    return m;
}

static float *random_floats(size_t count, rng *r, flashcl_dtype dtype)
{
    float *x = malloc(count * sizeof *x);
    ck_assert_ptr_nonnull(x);
    unsigned char tmp[8];
    for (size_t i = 0; i < count; ++i) { /* rounded to the dtype */
        oracle_store(tmp, 0, dtype, rng_normal(r));
        x[i] = (float)oracle_load(tmp, 0, dtype);
    }
    return x;
}

static void make_setup(setup *s, const kvq_case *c, uint64_t seed,
                       int outlier)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    rng r = rng_seeded(seed);
    s->kv_rows = c->paged ? PAGES : c->batch_idx ? DENSE_ROWS : BATCH;
    s->slots = c->paged ? PAGE : CAPACITY;
    for (int i = 0; i < BATCH * MAX_PAGES; ++i)
        s->table[i] = PAGES - 1 - i; /* reversed, page 0 left out */
    side_make(&s->k, c->k_type, (size_t)c->head_dim, s->kv_rows, s->slots,
              (size_t)c->heads_kv, c->per_head, c->dtype, &r, outlier);
    side_make(&s->v, c->v_type, (size_t)c->head_dim_v, s->kv_rows, s->slots,
              (size_t)c->heads_kv, c->per_head, c->dtype, &r, outlier);
    if (c->bad_scales == 2) {
        unsigned char *bytes[2] = {s->k.bytes, s->v.bytes};
        const size_t counts[2] = {s->k.byte_count, s->v.byte_count};
        for (int t = 0; t < 2; ++t)
            for (size_t i = 0; i < counts[t]; ++i)
                bytes[t][i] = (unsigned char)(rng_next(&r) >> 56);
    }
    side *fp8_sides[2] = {&s->k, &s->v};
    for (int t = 0; c->bad_scales == 3 && t < 2; ++t) {
        side *sd = fp8_sides[t];
        const int e4m3 = sd->type == E4M3;
        for (size_t i = 0; i < sd->byte_count; ++i)
            sd->bytes[i] = (unsigned char)((rng_next(&r) >> 56) &
                                           (e4m3 ? 0x87u : 0x83u));
        for (size_t i = 0; i < sd->scale_count; ++i)
            sd->scales[i] = e4m3 ? 64.0f : 16384.0f;
    }
    if (c->bad_scales == 1) { /* key 5 of sequence 0, key 7 of sequence 1 */
        size_t row, slot;
        key_slot(s, 0, 5, &row, &slot);
        s->k.scales[row_index(&s->k, row, slot, 0)] = NAN;
        key_slot(s, 1, 7, &row, &slot);
        s->v.scales[row_index(&s->v, row, slot, 1)] = INFINITY;
    }
    side_upload(&s->k);
    side_upload(&s->v);
    s->q_total = c->varlen_q ? varlen_cu[BATCH] : BATCH * c->seqlen_q;
    s->q_count = (size_t)(s->q_total * c->heads_q * c->head_dim);
    s->q = random_floats(s->q_count, &r, c->dtype);
    s->q_mem = upload_dtype(s->q, s->q_count, c->dtype);
    s->o_count = (size_t)(s->q_total * c->heads_q * c->head_dim_v);
    s->lse_count = (size_t)(c->heads_q * s->q_total);
    cl_context cl_ctx = flashcl_context_cl_context(shared_context());
    s->o_mem = create_buffer(cl_ctx, s->o_count * dtype_bytes(c->dtype));
    s->lse_mem = create_buffer(cl_ctx, s->lse_count * 4);
    s->lens_mem = upload(cache_lens, sizeof cache_lens);
    s->idx_mem = upload(batch_rows, sizeof batch_rows);
    s->table_mem = upload(s->table, sizeof s->table);
    for (int h = 0; h < 16; ++h)
        s->sinks[h] = (float)(0.5 * rng_normal(&r));
    s->sinks_mem = upload(s->sinks, sizeof s->sinks);
    if (c->append) {
        s->new_k_count = (size_t)(BATCH * c->append * c->heads_kv * c->head_dim);
        s->new_v_count =
            (size_t)(BATCH * c->append * c->heads_kv * c->head_dim_v);
        s->k_new = random_floats(s->new_k_count, &r, c->dtype);
        s->v_new = random_floats(s->new_v_count, &r, c->dtype);
        s->k_new_mem = upload_dtype(s->k_new, s->new_k_count, c->dtype);
        s->v_new_mem = upload_dtype(s->v_new, s->new_v_count, c->dtype);
    }

    flashcl_attention_desc *d = &s->desc;
    flashcl_attention_desc_init(d);
    d->batch = BATCH;
    d->heads_q = c->heads_q;
    d->heads_kv = c->heads_kv;
    d->seqlen_q = c->seqlen_q;
    if (c->varlen_q) { /* packed [1, total, heads, dim] */
        s->cu_mem = upload(varlen_cu, sizeof varlen_cu);
        d->cu_seqlens_q.buffer = s->cu_mem;
        d->seqlen_q = s->q_total;
        d->max_seqlen_q = c->seqlen_q;
    }
    d->seqlen_k = CAPACITY;
    d->head_dim = c->head_dim;
    d->head_dim_v = c->head_dim_v;
    d->dtype = c->dtype;
    d->causal = c->causal;
    if (c->window_left > 0) {
        d->window = 1;
        d->window_left = c->window_left;
        d->window_right = -1;
    }
    d->softcap = c->softcap;
    if (c->sinks)
        d->sinks.buffer = s->sinks_mem;
    d->num_splits = c->num_splits;
    d->q.buffer = s->q_mem;
    d->k.buffer = s->k.bytes_mem;
    d->v.buffer = s->v.bytes_mem;
    d->o.buffer = s->o_mem;
    d->lse.buffer = s->lse_mem;
    d->cache_seqlens.buffer = s->lens_mem;
    d->kv_batch = (int64_t)s->kv_rows;
    if (c->batch_idx)
        d->cache_batch_idx.buffer = s->idx_mem;
    if (c->paged) {
        d->block_table.buffer = s->table_mem;
        d->page_size = PAGE;
        d->max_pages = MAX_PAGES;
    }
    if (c->append) {
        d->seqlen_new = c->append;
        d->k_new.buffer = s->k_new_mem;
        d->v_new.buffer = s->v_new_mem;
    }
    d->k_storage = (flashcl_kv_storage)c->k_type;
    d->v_storage = (flashcl_kv_storage)c->v_type;
    d->k_scale_per_head = c->per_head && (c->k_type == E4M3 || c->k_type == E5M2);
    d->v_scale_per_head = c->per_head && (c->v_type == E4M3 || c->v_type == E5M2);
    d->k_scale.buffer = s->k.scale_mem;
    d->v_scale.buffer = s->v.scale_mem;
    d->k_zero.buffer = s->k.zero_mem;
    d->v_zero.buffer = s->v.zero_mem;
}

static void release_setup(setup *s)
{
    cl_mem all[] = {s->q_mem,    s->o_mem,     s->lse_mem,   s->lens_mem,
                    s->idx_mem,  s->table_mem, s->sinks_mem, s->k_new_mem,
                    s->v_new_mem, s->cu_mem};
    for (size_t i = 0; i < LENGTH(all); ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
    side_release(&s->k);
    side_release(&s->v);
    free(s->q);
    free(s->k_new);
    free(s->v_new);
}

/* ---- the oracle ---------------------------------------------------- */

/* Visible keys of sequence b after the append. */
static int keys_of(const setup *s, int b)
{
    const int n = cache_lens[b] + s->c->append;
    return n < CAPACITY ? n : CAPACITY;
}

/* Query rows of sequence b, and its first row in the (packed) q / o. */
static int query_rows(const setup *s, int b)
{
    return s->c->varlen_q ? varlen_rows[b] : s->c->seqlen_q;
}

static int query_row0(const setup *s, int b)
{
    return s->c->varlen_q ? varlen_cu[b] : b * s->c->seqlen_q;
}

/* LSE [batch, heads_q, seqlen_q], or [1, heads_q, total] packed. */
static size_t lse_index(const setup *s, int b, int h, int i)
{
    if (s->c->varlen_q)
        return (size_t)h * (size_t)s->q_total + (size_t)(varlen_cu[b] + i);
    return ((size_t)b * (size_t)s->c->heads_q + (size_t)h) *
               (size_t)s->c->seqlen_q +
           (size_t)i;
}

/* O [batch, seqlen_q, heads_q, dv] and LSE [batch, heads_q, seqlen_q] in
 * float64 over the cache as the kernel must read it (`truth`: the values
 * before quantization instead); `bound` (if not NULL, LSE's shape): the
 * largest scale * sum_d |q_d k_d| over a row's keys, which bounds how far
 * a score moves when the kernel rounds the dequantized K to a 16-bit
 * dtype (the tensor-core kernel reads it so). */
static void kvq_oracle(const setup *s, int truth, double *o, double *lse,
                       double *bound)
{
    const kvq_case *c = s->c;
    const int group = c->heads_q / c->heads_kv;
    const double scale = 1.0 / sqrt((double)c->head_dim);
    double *p = malloc(CAPACITY * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (int b = 0; b < BATCH; ++b)
        for (int h = 0; h < c->heads_q; ++h)
            for (int i = 0; i < query_rows(s, b); ++i) {
                const int nk = keys_of(s, b), kvh = h / group;
                const long diag = nk - query_rows(s, b);
                const size_t row = (size_t)(query_row0(s, b) + i);
                const float *qrow =
                    s->q + (row * (size_t)c->heads_q + (size_t)h) *
                               (size_t)c->head_dim;
                double m = c->sinks ? s->sinks[h] : -INFINITY;
                double row_bound = 0;
                for (int j = 0; j < nk; ++j) {
                    p[j] = -INFINITY;
                    if ((c->causal && j > i + diag) ||
                        (c->window_left > 0 && j < i + diag - c->window_left))
                        continue;
                    size_t row, slot;
                    key_slot(s, b, j, &row, &slot);
                    const size_t kr = row_index(&s->k, row, slot, (size_t)kvh);
                    double dot = 0, magnitude = 0;
                    int finite = 1;
                    for (int d = 0; d < c->head_dim; ++d) {
                        const double kval =
                            truth ? s->k.truth[kr * s->k.dim + d]
                                  : side_value(&s->k, c->dtype, kr, (size_t)d);
                        finite = finite && isfinite(kval);
                        dot += qrow[d] * kval;
                        magnitude += fabs(qrow[d] * kval);
                    }
                    if (!finite)
                        continue; /* a bad quantized key is masked */
                    row_bound = fmax(row_bound, scale * magnitude);
                    double score = scale * dot;
                    if (c->softcap > 0)
                        score = c->softcap * tanh(score / c->softcap);
                    p[j] = score;
                    m = fmax(m, score);
                }
                double sum = c->sinks && m > -INFINITY ? exp(s->sinks[h] - m)
                                                       : 0;
                double *orow = o + (row * (size_t)c->heads_q + (size_t)h) *
                                       (size_t)c->head_dim_v;
                for (int d = 0; d < c->head_dim_v; ++d)
                    orow[d] = 0;
                for (int j = 0; j < nk; ++j) {
                    if (p[j] == -INFINITY)
                        continue;
                    const double w = exp(p[j] - m);
                    sum += w;
                    size_t row, slot;
                    key_slot(s, b, j, &row, &slot);
                    const size_t vr = row_index(&s->v, row, slot, (size_t)kvh);
                    for (int d = 0; d < c->head_dim_v; ++d) {
                        double val =
                            truth ? s->v.truth[vr * s->v.dim + d]
                                  : side_value(&s->v, c->dtype, vr, (size_t)d);
                        orow[d] += w * (isfinite(val) ? val : 0);
                    }
                }
                for (int d = 0; d < c->head_dim_v; ++d)
                    orow[d] = sum > 0 ? orow[d] / sum : 0;
                lse[lse_index(s, b, h, i)] =
                    sum > 0 ? m + log(sum) : -INFINITY;
                if (bound)
                    bound[lse_index(s, b, h, i)] = row_bound;
            }
    free(p);
}

/* ---- checks -------------------------------------------------------- */

/* The appended rows' values, by the rounding bound of each type, and the
 * truth of those rows set to k_new/v_new (the unquantized oracle's). */
static void check_appended(setup *s, side *sd, const float *fresh,
                           const char *what)
{
    const kvq_case *c = s->c;
    const size_t per_row = kvq_row_scales(sd->type, sd->dim);
    for (int b = 0; b < BATCH; ++b)
        for (int j = 0; j < c->append; ++j)
            for (int h = 0; h < c->heads_kv; ++h) {
                size_t row, slot;
                key_slot(s, b, cache_lens[b] + j, &row, &slot);
                const size_t r = row_index(sd, row, slot, (size_t)h);
                const float *x =
                    fresh + ((size_t)(b * c->append + j) * c->heads_kv + h) *
                                sd->dim;
                for (size_t d = 0; d < sd->dim; ++d) {
                    sd->truth[r * sd->dim + d] = x[d];
                    const double got = side_value(sd, c->dtype, r, d);
                    double bound = 0;
                    if (sd->type == INT8)
                        bound = 0.5001 * sd->scales[r * per_row];
                    else if (sd->type == INT4)
                        bound = 0.5001 * sd->scales[r * per_row + d / KVQ_GROUP] +
                                1e-6 * fabs(x[d]);
                    else if (sd->type) {
                        const double f = fp8_scale_of(sd, (size_t)h);
                        const int man = sd->type == E4M3 ? 3 : 2;
                        const int bias = sd->type == E4M3 ? 7 : 15;
                        bound = f * (fabs(x[d]) / f * ldexp(1.0, -man - 1) +
                                     ldexp(1.0, -bias - man)) *
                                1.0001;
                    }
                    ck_assert_msg(fabs(got - x[d]) <= bound,
                                  "%s: appended %s row (seq %d, new row %d, "
                                  "head %d) dim %zu reads %.7g for %.7g "
                                  "(bound %.3g)",
                                  c->name, what, b, j, h, d, got, (double)x[d],
                                  bound);
                }
            }
}

/* Bytes of rows that no append touched must be as uploaded. */
static void check_untouched(const setup *s, const side *sd,
                            const unsigned char *before, const char *what)
{
    const size_t row_bytes = stored_row_bytes(sd, s->c->dtype);
    for (size_t row = 0; row < sd->rows; ++row)
        for (size_t slot = 0; slot < sd->slots; ++slot) {
            int appended = 0;
            for (int b = 0; b < BATCH && !appended; ++b)
                for (int j = 0; j < s->c->append; ++j) {
                    size_t r2, s2;
                    key_slot(s, b, cache_lens[b] + j, &r2, &s2);
                    appended = appended || (r2 == row && s2 == slot);
                }
            if (appended)
                continue;
            const size_t at = row_index(sd, row, slot, 0) * row_bytes;
            ck_assert_msg(!memcmp(sd->bytes + at, before + at,
                                  row_bytes * sd->heads),
                          "%s: %s cache row %zu slot %zu changed, but no "
                          "append lands there",
                          s->c->name, what, row, slot);
        }
}

/* A run forced onto a kernel (ctest's test_kv_quant_wide and
 * test_kv_quant_lanes) must run on it, not on a fallback: the plan's
 * switches name the kernel it compiles. */
static void expect_forced_kernel(const kvq_case *c,
                                 const flashcl_attention_desc *desc)
{
    const char *kernel = getenv("FLASHCL_SPLIT_KERNEL");
    /* forced mma: the tensor-core kernel where it serves the case (16-bit
     * dtype, head dims multiples of 32 up to 128), else the lane kernel */
    const int mma_fits = c->dtype != FLASHCL_DTYPE_FP32 &&
                         c->head_dim % 32 == 0 && c->head_dim_v % 32 == 0 &&
                         c->head_dim <= 128 && c->head_dim_v <= 128;
    const char *want = !kernel                   ? NULL
                       : !strcmp(kernel, "lanes") ? "FLASHCL_SPLIT_LANES="
                       : !strcmp(kernel, "wide")  ? "FLASHCL_SPLIT_WIDE="
                       : !strcmp(kernel, "mma")   ? (mma_fits
                                                         ? "FLASHCL_SPLIT_MMA="
                                                         : "FLASHCL_SPLIT_LANES=")
                                                  : NULL;
    if (!want)
        return;
    flashcl_variant_info info;
    ck_assert_int_eq(flashcl_describe_variant(shared_context(), desc, &info),
                     FLASHCL_SUCCESS);
    const char *at = strstr(info.build_options, want);
    ck_assert_msg(at && at[strlen(want)] >= '1' && at[strlen(want)] <= '9',
                  "%s: FLASHCL_SPLIT_KERNEL=%s planned another kernel: %s",
                  c->name, kernel, clip(info.build_options));
}

/* Runs the case; asserts O and LSE against the float64 oracle of the
 * quantized cache; returns max |O - O_truth| / max |O_truth| (the
 * unquantized attention). */
static double run_kvq(const kvq_case *c, int outlier)
{
    setup s;
    make_setup(&s, c, 0x4b5155 + (uint64_t)outlier * 977, outlier);
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    poison_buffer(queue, s.o_mem, s.o_count * dtype_bytes(c->dtype));
    poison_buffer(queue, s.lse_mem, s.lse_count * 4);
    unsigned char *k_before = malloc(s.k.byte_count);
    unsigned char *v_before = malloc(s.v.byte_count);
    ck_assert_ptr_nonnull(k_before);
    ck_assert_ptr_nonnull(v_before);
    memcpy(k_before, s.k.bytes, s.k.byte_count);
    memcpy(v_before, s.v.bytes, s.v.byte_count);
    expect_forced_kernel(c, &s.desc);
    const flashcl_status st =
        flashcl_attention_forward(ctx, NULL, &s.desc, 0, NULL, NULL);
    ck_assert_msg(st == FLASHCL_SUCCESS, "%s: %s (%s)", c->name,
                  flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
    CL_CHECK(clFinish(queue));
    if (c->append) {
        side_download(&s.k);
        side_download(&s.v);
        check_untouched(&s, &s.k, k_before, "K");
        check_untouched(&s, &s.v, v_before, "V");
        check_appended(&s, &s.k, s.k_new, "K");
        check_appended(&s, &s.v, s.v_new, "V");
    }
    unsigned char *o_dev = malloc(s.o_count * dtype_bytes(c->dtype));
    float *lse_dev = malloc(s.lse_count * 4);
    double *o_ref = malloc(s.o_count * sizeof *o_ref);
    double *o_true = malloc(s.o_count * sizeof *o_true);
    double *lse_ref = malloc(s.lse_count * sizeof *lse_ref);
    double *bound = malloc(s.lse_count * sizeof *bound);
    ck_assert(o_dev && lse_dev && o_ref && o_true && lse_ref && bound);
    read_buffer(queue, s.o_mem, o_dev, s.o_count * dtype_bytes(c->dtype));
    read_buffer(queue, s.lse_mem, lse_dev, s.lse_count * 4);
    kvq_oracle(&s, 0, o_ref, lse_ref, bound);
    double max_ref = 0, max_true = 0, max_err_true = 0;
    for (size_t i = 0; i < s.o_count; ++i)
        max_ref = fmax(max_ref, fabs(o_ref[i]));
    /* a 16-bit call's accuracy: fp16 / bf16 rounding of O, and the
     * kernel's fp32 arithmetic well inside it */
    const double rel = c->dtype == FLASHCL_DTYPE_BF16   ? 8e-3
                       : c->dtype == FLASHCL_DTYPE_FP16 ? 2e-3
                                                        : 1e-4;
    for (size_t i = 0; i < s.o_count; ++i) {
        const double got = oracle_load(o_dev, i, c->dtype);
        ck_assert_msg(fabs(got - o_ref[i]) <= rel * (fabs(o_ref[i]) + max_ref),
                      "%s: O[%zu] = %.7g, oracle %.7g (max |O| %.4g)", c->name,
                      i, got, o_ref[i], max_ref);
    }
    /* twice the unit roundoff of K rounded to a 16-bit dtype, times the
     * row's bound: how far rounding K moves a score, so the LSE */
    const double k_rounding = c->dtype == FLASHCL_DTYPE_BF16   ? 0x1p-8
                              : c->dtype == FLASHCL_DTYPE_FP16 ? 0x1p-10
                                                               : 0;
    for (size_t i = 0; i < s.lse_count; ++i)
        ck_assert_msg((isinf(lse_ref[i]) && isinf(lse_dev[i])) ||
                          fabs(lse_dev[i] - lse_ref[i]) <=
                              1e-4 * fmax(1, fabs(lse_ref[i])) +
                                  k_rounding * bound[i],
                      "%s: LSE[%zu] = %.7g, oracle %.7g", c->name, i,
                      (double)lse_dev[i], lse_ref[i]);
    kvq_oracle(&s, 1, o_true, lse_ref, NULL);
    for (size_t i = 0; i < s.o_count; ++i) {
        max_true = fmax(max_true, fabs(o_true[i]));
        max_err_true =
            fmax(max_err_true, fabs(oracle_load(o_dev, i, c->dtype) - o_true[i]));
    }
    free(o_dev);
    free(lse_dev);
    free(o_ref);
    free(o_true);
    free(lse_ref);
    free(bound);
    free(k_before);
    free(v_before);
    release_setup(&s);
    return max_true > 0 ? max_err_true / max_true : max_err_true;
}

/* FLASHCL_KVQ_DTYPE=bf16, fp16 or bf16,fp16 (alternating by case): the
 * fp32 cases run in that 16-bit dtype, so that the tensor-core split
 * kernel, which reads only 16-bit storage, serves them (ctest's
 * test_kv_quant_mma). */
static kvq_case case_in_test_dtype(int i)
{
    kvq_case c = cases[i];
    const char *dtype = getenv("FLASHCL_KVQ_DTYPE");
    if (!dtype || c.dtype != FLASHCL_DTYPE_FP32)
        return c;
    const int fp16 = !strcmp(dtype, "fp16") ||
                     (!strcmp(dtype, "bf16,fp16") && i % 2 == 1);
    c.dtype = fp16 ? FLASHCL_DTYPE_FP16 : FLASHCL_DTYPE_BF16;
    return c;
}

START_TEST(quantized_cache_matches_oracle)
{
    if (test_case_skipped("FLASHCL_KVQ_CASES", _i))
        return;
    const kvq_case c = case_in_test_dtype(_i);
    const double err = run_kvq(&c, 0);
    printf("kv_quant: %-48s %s ok (vs unquantized: %.2e)\n", c.name,
           c.dtype == FLASHCL_DTYPE_FP32   ? "fp32"
           : c.dtype == FLASHCL_DTYPE_FP16 ? "fp16"
                                           : "bf16",
           err);
}
END_TEST

/* Not asserted beyond the kernel's agreement with its oracle: the error
 * quantization itself brings, as the KV-quantization papers report it. */
START_TEST(report_quantization_error)
{
    static const int types[4] = {E4M3, E5M2, INT8, INT4};
    if (getenv("FLASHCL_KVQ_CASES"))
        return; /* a subset of the cases (Oclgrind, emulations) */
    printf("kv_quant: max |O_quant - O| / max |O|, B=%d Hq=8 Hkv=2 D=64, "
           "decode over %d/%d keys\n",
           BATCH, cache_lens[0], cache_lens[1]);
    printf("  %-6s %-12s %-12s\n", "type", "normal", "outlier x30");
    for (int t = 0; t < 4; ++t) {
        kvq_case c = cases[2]; /* the dense decode */
        c.k_type = c.v_type = types[t];
        c.name = kvq_type_name(types[t]);
        const double normal = run_kvq(&c, 0), outlier = run_kvq(&c, 1);
        printf("  %-6s %-12.3e %-12.3e\n", kvq_type_name(types[t]), normal,
               outlier);
    }
}
END_TEST

/* ---- bad input ----------------------------------------------------- */

typedef struct bad_case {
    const char *name;
    flashcl_status want;
    const char *needle;
} bad_case;

static const bad_case bad_cases[] = {
    {"k_storage out of the enum", FLASHCL_ERROR_INVALID_VALUE,
     "not a flashcl_kv_storage"},
    {"quantized without cache_seqlens", FLASHCL_ERROR_UNSUPPORTED,
     "without cache_seqlens"},
    {"int4 head_dim not a multiple of 32", FLASHCL_ERROR_HEAD_DIM_UNSUPPORTED,
     "multiple of 32"},
    {"int8 k_scale missing", FLASHCL_ERROR_NULL_ARGUMENT, "k_scale.buffer"},
    {"int4 v_zero missing", FLASHCL_ERROR_NULL_ARGUMENT, "v_zero.buffer"},
    {"k_scale too small", FLASHCL_ERROR_OUT_OF_BOUNDS, "k_scale"},
    {"zero point with int8", FLASHCL_ERROR_INVALID_VALUE, "only int4"},
    {"scale without quantized storage", FLASHCL_ERROR_INVALID_VALUE,
     "not quantized"},
    {"per-head flag with int8", FLASHCL_ERROR_INVALID_VALUE,
     "only fp8"},
    {"reference backend", FLASHCL_ERROR_UNSUPPORTED, "reference backend"},
    {"scale overlaps o", FLASHCL_ERROR_ALIASING, "overlaps o"},
    {"appended scales overlap each other", FLASHCL_ERROR_ALIASING,
     "overlaps v_scale"},
    {"FLASHCL_PATH=nv_mma", FLASHCL_ERROR_UNSUPPORTED, "FLASHCL_PATH=nv_mma"},
    {"fp64 dtype", FLASHCL_ERROR_UNSUPPORTED, "fp64"},
};

/* The int8 append case, broken as bad_cases[i] says. */
static void break_desc(int i, setup *s, cl_mem small, cl_mem *extra)
{
    flashcl_attention_desc *d = &s->desc;
    switch (i) {
    case 0:
        d->k_storage = (flashcl_kv_storage)9;
        break;
    case 1: /* a dense call: the cache fields off */
        d->cache_seqlens.buffer = NULL;
        d->seqlen_new = 0;
        d->k_new.buffer = d->v_new.buffer = NULL;
        d->kv_batch = 0;
        break;
    case 2:
        d->v_storage = FLASHCL_KV_INT4;
        d->v_zero.buffer = s->v.scale_mem;
        d->head_dim_v = 48;
        break;
    case 3:
        d->k_scale.buffer = NULL;
        break;
    case 4:
        d->v_storage = FLASHCL_KV_INT4;
        d->head_dim_v = 64;
        break;
    case 5:
        d->k_scale.buffer = small;
        break;
    case 6:
        d->k_zero.buffer = s->k.scale_mem;
        break;
    case 7: /* V in the dtype, its buffer big enough, the scale kept */
        d->v_storage = FLASHCL_KV_SAME;
        *extra = create_buffer(flashcl_context_cl_context(shared_context()),
                               s->v.rows * s->v.slots * s->v.heads *
                                   s->v.dim * dtype_bytes(s->c->dtype));
        d->v.buffer = *extra;
        return;
    case 8:
        d->k_scale_per_head = 1;
        break;
    case 9:
        d->backend = FLASHCL_BACKEND_REFERENCE;
        break;
    case 10:
        d->k_scale.buffer = d->o.buffer;
        break;
    case 11:
        d->v_scale.buffer = d->k_scale.buffer;
        break;
    case 12:
        setenv("FLASHCL_PATH", "nv_mma", 1);
        break;
    case 13: /* no append: k_new's views come first (inference.c) */
        d->dtype = FLASHCL_DTYPE_FP64;
        d->seqlen_new = 0;
        d->k_new.buffer = d->v_new.buffer = NULL;
        break;
    }
    *extra = NULL;
}

START_TEST(bad_input_is_refused)
{
    const bad_case *bad = &bad_cases[_i];
    /* the run's forced kernel (ctest's test_kv_quant_wide), put back */
    const char *kernel_env = getenv("FLASHCL_SPLIT_KERNEL");
    char kernel[16] = "";
    if (kernel_env)
        snprintf(kernel, sizeof kernel, "%s", kernel_env);
    setup s;
    make_setup(&s, &cases[7], 77, 0); /* int8 dense append */
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    const float tiny[2] = {1, 1};
    cl_mem small = upload(tiny, sizeof tiny), extra = NULL;
    break_desc(_i, &s, small, &extra);
    poison_buffer(queue, s.o_mem, s.o_count * dtype_bytes(s.c->dtype));
    poison_buffer(queue, s.lse_mem, s.lse_count * 4);
    const flashcl_status st =
        flashcl_attention_forward(ctx, NULL, &s.desc, 0, NULL, NULL);
    CL_CHECK(clFinish(queue));
    unsetenv("FLASHCL_PATH");
    if (kernel_env)
        setenv("FLASHCL_SPLIT_KERNEL", kernel, 1);
    else
        unsetenv("FLASHCL_SPLIT_KERNEL");
    const char *message = flashcl_context_last_error(ctx);
    ck_assert_msg(st == bad->want, "%s: got %s (%s), want %s", bad->name,
                  flashcl_status_string(st), clip(message),
                  flashcl_status_string(bad->want));
    ck_assert_msg(strstr(message, bad->needle) != NULL,
                  "%s: message \"%s\" does not say \"%s\"", bad->name,
                  clip(message), bad->needle);
    ck_assert_msg(buffer_is_poisoned(queue, s.o_mem,
                                     s.o_count * dtype_bytes(s.c->dtype)),
                  "%s: O was written by a refused call", bad->name);
    ck_assert_msg(buffer_is_poisoned(queue, s.lse_mem, s.lse_count * 4),
                  "%s: LSE was written by a refused call", bad->name);
    /* nothing appended: the cache and its scales as uploaded */
    unsigned char *k_before = malloc(s.k.byte_count);
    float *ks_before = malloc(s.k.scale_count * 4);
    ck_assert(k_before && ks_before);
    memcpy(k_before, s.k.bytes, s.k.byte_count);
    memcpy(ks_before, s.k.scales, s.k.scale_count * 4);
    side_download(&s.k);
    ck_assert_msg(!memcmp(k_before, s.k.bytes, s.k.byte_count) &&
                      !memcmp(ks_before, s.k.scales, s.k.scale_count * 4),
                  "%s: the K cache or its scales changed", bad->name);
    free(k_before);
    free(ks_before);
    clReleaseMemObject(small);
    if (extra)
        clReleaseMemObject(extra);
    release_setup(&s);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {
        {quantized_cache_matches_oracle, (int)LENGTH(cases)},
        {bad_input_is_refused, (int)LENGTH(bad_cases)},
        {report_quantization_error, 0},
    };
    return run_tests("kv_quant", 300, NULL, NULL, tests, LENGTH(tests));
}
