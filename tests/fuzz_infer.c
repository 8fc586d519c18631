/* The inference fuzzer (issue 42, item 13): random KV-cache, paged and
 * varlen calls whose device buffers hold hostile values (negative, huge,
 * INT32_MIN/MAX, non-monotonic or out-of-range prefix sums, cache
 * lengths at and past the capacity, cache rows and page indices out of
 * range, pages shared by sequences) and whose descriptors carry hostile
 * but legal fields (max_seqlen_* below or above the true maxima, appends
 * that overflow the cache), on both backends; plus calls with a refused
 * field. What must hold:
 *
 *   - a refused call returns an error status with a message and writes
 *     nothing (O, LSE, K and V as they were);
 *   - an accepted call computes what include/flashcl.h's clamping rules
 *     say, checked against the float64 oracle (support/oracle.h) applied
 *     to those rules as this file models them from the header: prefix
 *     sums clamped to [0, total], an end below its start empty, lengths
 *     cut to max_seqlen_*; cache lengths clamped to [0, capacity], new
 *     rows past the capacity dropped (never written over cached rows);
 *     a cache row out of range: no keys, nothing appended; a page out of
 *     range: its keys masked (later keys keep their positions), appends
 *     into it dropped;
 *   - O and LSE rows that no sequence owns keep their poison; the caches
 *     hold exactly the appended rows; nothing reads or writes out of
 *     bounds (ASan/UBSan in the sanitizer build, oclgrind by hand).
 *
 * Rows that two sequences own (overlapping prefix sums) may hold either
 * sequence's values, element by element. Appends never meet shared rows
 * or pages: the fuzzer keeps cache rows and pages distinct when it
 * appends (two sequences appending into one row is the caller's race).
 *
 * Deterministic: FLASHCL_FUZZ_SEED (default 1), FLASHCL_FUZZ_ITERS (default
 * 32 computed calls, each also on the reference backend when it is built,
 * and 3 refused calls per computed one). Prints one line per finding and
 * "fuzz_infer: N passed, N failed". */
#include "flashcl.h"
#include "oracle.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_rng.h"

enum { MAXB = 4, MAXP = 4, PAGE = 16, HQ = 2, HKV = 1, D = 16, TAIL = 64 };
enum { KV_VARLEN, KV_CACHE, KV_PAGED };
#define POISON_BYTE 0xA5


static int below(int n) { return n > 0 ? (int)(next() % (uint64_t)n) : 0; }

static int32_t pick32(const int32_t *values, int n)
{
    return values[below(n)];
}
#define PICK(...)                                                              \
    pick32((const int32_t[]){__VA_ARGS__},                                     \
           (int)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)))

/* One call: its shape, the device values and the host copies. */
typedef struct fcase {
    int batch, kv, varlen_q, batch_idx, seqlen_new, causal, alibi, splits;
    int mask; /* a caller's boolean mask (paged calls: over skipped pages) */
    int nq;                 /* query rows per sequence (dense q) */
    int total_q, max_q;     /* varlen q */
    int total_k, max_k;     /* varlen k */
    int cap, kv_rows, max_pages;
    int32_t cu_q[MAXB + 1], cu_k[MAXB + 1], seqlens[MAXB], rows[MAXB];
    int32_t table[MAXB * MAXP];
    float *q, *k, *v, *k_new, *v_new, slopes[HQ];
    unsigned char *mask_bytes; /* [batch][HQ][rows][seqlen_k] */
    size_t q_count, kv_count, new_count, o_count, lse_count, mask_count;
    size_t mask_stride[4];
} fcase;

static size_t q_rows(const fcase *c)
{
    return c->varlen_q ? (size_t)c->total_q : (size_t)(c->batch * c->nq);
}

static size_t kv_seq(const fcase *c)
{
    return c->kv == KV_VARLEN ? (size_t)c->total_k
           : c->kv == KV_PAGED ? (size_t)PAGE
                               : (size_t)c->cap;
}

static float *random_floats(size_t n)
{
    float *f = malloc((n + 1) * sizeof *f);
    for (size_t i = 0; i < n; ++i)
        f[i] = (float)((int)(next() % 2001) - 1000) / 500.0f;
    return f;
}

/* Prefix sums of `batch` sequences over `total` rows, some entries made
 * hostile: negative, past the total, INT32_MIN/MAX, out of order. */
static void hostile_prefix(int32_t *cu, int batch, int total)
{
    cu[0] = 0;
    for (int b = 1; b < batch; ++b)
        cu[b] = cu[b - 1] + below(total - cu[b - 1] + 1);
    cu[batch] = total;
    for (int b = 0; b <= batch; ++b)
        if (below(4) == 0)
            cu[b] = PICK(-3, total + 5, INT32_MAX, INT32_MIN,
                         (int32_t)below(total + 1));
}

static int max_len(const int32_t *cu, int batch, int total)
{
    int m = 0;
    for (int b = 0; b < batch; ++b) {
        const int lo = cu[b] < 0 ? 0 : cu[b] > total ? total : cu[b];
        const int hi = cu[b + 1] < 0 ? 0 : cu[b + 1] > total ? total : cu[b + 1];
        m = hi - lo > m ? hi - lo : m;
    }
    return m;
}

/* max_seqlen_*: the true maximum, or one that cuts, or one past it. */
static int hostile_max(int truth)
{
    switch (below(4)) {
    case 0: return truth > 1 ? truth - 1 - below(truth - 1) : truth;
    case 1: return truth + 1 + below(8);
    default: return truth;
    }
}

static void shuffle(int32_t *a, int n)
{
    for (int i = n - 1; i > 0; --i) {
        const int j = below(i + 1);
        const int32_t t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

static void make_case(fcase *c)
{
    memset(c, 0, sizeof *c);
    c->batch = 1 + below(MAXB);
    c->kv = below(3);
    c->seqlen_new = c->kv != KV_VARLEN && below(2) ? 1 + below(3) : 0;
    c->varlen_q = !c->seqlen_new && below(2);
    c->batch_idx = c->kv == KV_CACHE && below(2);
    /* together: each switch is another kernel to compile (PoCL: ~1 s) */
    c->causal = c->alibi = below(2);
    c->splits = below(2) ? 1 : 3;
    if (c->varlen_q) {
        c->total_q = below(24);
        hostile_prefix(c->cu_q, c->batch, c->total_q);
        c->max_q = hostile_max(max_len(c->cu_q, c->batch, c->total_q));
    } else {
        c->nq = 1 + below(4);
    }
    if (c->kv == KV_VARLEN) {
        c->total_k = below(80);
        hostile_prefix(c->cu_k, c->batch, c->total_k);
        c->max_k = hostile_max(max_len(c->cu_k, c->batch, c->total_k));
        c->kv_rows = 1;
    } else if (c->kv == KV_CACHE) {
        c->cap = PICK(16, 40, 64);
        c->kv_rows = c->batch + below(3);
        for (int b = 0; b < c->batch; ++b)
            c->rows[b] = b;
        shuffle(c->rows, c->batch);
    } else {
        c->max_pages = 1 + below(MAXP);
        c->cap = c->max_pages * PAGE;
        c->kv_rows = c->batch * c->max_pages + below(3);
        int32_t pages[MAXB * MAXP + 2];
        for (int i = 0; i < c->kv_rows; ++i)
            pages[i] = i;
        shuffle(pages, c->kv_rows);
        for (int i = 0; i < c->batch * c->max_pages; ++i)
            c->table[i] = pages[i];
        for (int i = 0; i < c->batch * c->max_pages; ++i) {
            if (below(6) == 0)
                c->table[i] = PICK(-1, INT32_MIN, INT32_MAX,
                                   (int32_t)c->kv_rows, (int32_t)c->kv_rows + 7);
            else if (!c->seqlen_new && below(6) == 0) /* shared, read only */
                c->table[i] = (int32_t)below(c->kv_rows);
        }
    }
    if (c->kv != KV_VARLEN)
        for (int b = 0; b < c->batch; ++b) {
            c->seqlens[b] = PICK(-5, 0, (int32_t)below(c->cap), c->cap - 1,
                                 c->cap, c->cap + 3, INT32_MAX, INT32_MIN,
                                 c->cap - c->seqlen_new);
            if (c->batch_idx && below(5) == 0)
                c->rows[b] = PICK(-1, (int32_t)c->kv_rows, INT32_MAX,
                                  INT32_MIN);
        }
    for (int h = 0; h < HQ; ++h)
        c->slopes[h] = 0.25f * (float)(h + 1);
    c->q_count = q_rows(c) * HQ * D;
    c->kv_count = (size_t)c->kv_rows * kv_seq(c) * HKV * D;
    c->new_count = (size_t)(c->batch * c->seqlen_new) * HKV * D;
    c->o_count = q_rows(c) * HQ * D;
    c->lse_count = q_rows(c) * HQ;
    c->q = random_floats(c->q_count);
    c->k = random_floats(c->kv_count);
    c->v = random_floats(c->kv_count);
    c->k_new = random_floats(c->new_count);
    c->v_new = random_floats(c->new_count);
    c->mask = c->kv == KV_PAGED && below(3) == 0;
    const size_t mq = (size_t)(c->varlen_q ? c->max_q : c->nq);
    const size_t st[4] = {HQ * mq * (size_t)c->cap, mq * (size_t)c->cap,
                          (size_t)c->cap, 1};
    memcpy(c->mask_stride, st, sizeof st);
    c->mask_count = c->mask ? (size_t)c->batch * st[0] : 0;
    c->mask_bytes = malloc(c->mask_count + 1);
    for (size_t i = 0; i < c->mask_count; ++i)
        c->mask_bytes[i] = below(4) != 0;
}

static void free_case(fcase *c)
{
    free(c->q), free(c->k), free(c->v), free(c->k_new), free(c->v_new);
    free(c->mask_bytes);
}

/* ---- the header's rules, modelled ------------------------------------ */

static int clampi(int64_t v, int64_t lo, int64_t hi)
{
    return (int)(v < lo ? lo : v > hi ? hi : v);
}

typedef struct seq_model {
    int q0, nq;          /* rows in q / o (q0: first row) */
    int k0, nk;          /* varlen: first packed key; visible keys */
    int cached, row;     /* cache: keys before the append; row -1 skipped */
} seq_model;

static void span(const int32_t *cu, int b, int total, int max, int *first,
                 int *count)
{
    *first = clampi(cu[b], 0, total);
    const int end = clampi(cu[b + 1], 0, total);
    *count = end > *first ? end - *first : 0;
    if (*count > max)
        *count = max;
}

static seq_model model_of(const fcase *c, int b)
{
    seq_model s = {0};
    s.row = b;
    if (c->varlen_q)
        span(c->cu_q, b, c->total_q, c->max_q, &s.q0, &s.nq);
    else
        s.q0 = b * c->nq, s.nq = c->nq;
    if (c->kv == KV_VARLEN) {
        span(c->cu_k, b, c->total_k, c->max_k, &s.k0, &s.nk);
        return s;
    }
    s.cached = clampi(c->seqlens[b], 0, c->cap);
    s.nk = clampi((int64_t)s.cached + c->seqlen_new, 0, c->cap);
    if (c->batch_idx) {
        s.row = c->rows[b];
        if (s.row < 0 || s.row >= c->kv_rows)
            s.row = -1, s.nk = 0;
    }
    return s;
}

/* Element offset of key `key` of sequence b in K/V, or -1 (skipped). */
static long key_at(const fcase *c, const seq_model *s, int b, int key)
{
    size_t row, pos;
    if (c->kv == KV_VARLEN) {
        row = 0, pos = (size_t)(s->k0 + key);
    } else if (c->kv == KV_CACHE) {
        if (s->row < 0)
            return -1;
        row = (size_t)s->row, pos = (size_t)key;
    } else {
        const int page = c->table[b * c->max_pages + key / PAGE];
        if (page < 0 || page >= c->kv_rows)
            return -1;
        row = (size_t)page, pos = (size_t)(key % PAGE);
    }
    return (long)((row * kv_seq(c) + pos) * HKV * D);
}

/* The caches after the call: each sequence's new rows at its length,
 * those past the capacity or in a skipped page or row left out. */
static void model_append(const fcase *c, float *k, float *v)
{
    memcpy(k, c->k, c->kv_count * sizeof *k);
    memcpy(v, c->v, c->kv_count * sizeof *v);
    for (int b = 0; b < c->batch; ++b) {
        const seq_model s = model_of(c, b);
        for (int j = 0; j < c->seqlen_new && s.cached + j < c->cap; ++j) {
            const long at = key_at(c, &s, b, s.cached + j);
            if (at < 0)
                continue;
            const size_t from = ((size_t)b * (size_t)c->seqlen_new + (size_t)j) *
                                HKV * D;
            memcpy(k + at, c->k_new + from, HKV * D * sizeof *k);
            memcpy(v + at, c->v_new + from, HKV * D * sizeof *v);
        }
    }
}

static bool span_clamped(const int32_t *cu, int b, int total, int max)
{
    return cu[b] < 0 || cu[b] > total || cu[b + 1] < 0 || cu[b + 1] > total ||
           cu[b + 1] < cu[b] || (int64_t)cu[b + 1] - cu[b] > max;
}

/* The FLASHCL_INFER_STATUS_* counters the header describes for this call. */
static void model_status(const fcase *c, int32_t *count)
{
    memset(count, 0, 4 * FLASHCL_INFER_STATUS_COUNT);
    for (int b = 0; b < c->batch; ++b) {
        if (c->varlen_q)
            count[FLASHCL_INFER_STATUS_LENGTHS_CLAMPED] +=
                span_clamped(c->cu_q, b, c->total_q, c->max_q);
        if (c->kv == KV_VARLEN) {
            count[FLASHCL_INFER_STATUS_LENGTHS_CLAMPED] +=
                span_clamped(c->cu_k, b, c->total_k, c->max_k);
            continue;
        }
        count[FLASHCL_INFER_STATUS_LENGTHS_CLAMPED] +=
            c->seqlens[b] < 0 || c->seqlens[b] > c->cap;
        const seq_model s = model_of(c, b);
        if (s.row < 0) {
            count[FLASHCL_INFER_STATUS_ROWS_SKIPPED] += 1;
            count[FLASHCL_INFER_STATUS_APPENDS_DROPPED] += c->seqlen_new;
            continue;
        }
        int written = 0;
        for (int j = 0; j < c->seqlen_new && s.cached + j < c->cap; ++j)
            written += key_at(c, &s, b, s.cached + j) >= 0;
        count[FLASHCL_INFER_STATUS_APPENDS_DROPPED] += c->seqlen_new - written;
        for (int p = 0; c->kv == KV_PAGED && p * PAGE < s.nk; ++p) {
            const int page = c->table[b * c->max_pages + p];
            count[FLASHCL_INFER_STATUS_PAGES_SKIPPED] +=
                page < 0 || page >= c->kv_rows;
        }
    }
}

/* Oracle O [nq][HQ][D] and LSE [HQ][nq] of sequence b over the caches as
 * the append left them; skipped keys masked in place. */
static void model_sequence(const fcase *c, const float *k, const float *v,
                           int b, const seq_model *s, double *o, double *lse)
{
    const size_t nk = (size_t)s->nk, nq = (size_t)s->nq;
    float *ks = calloc(nk * HKV * D + 1, sizeof *ks);
    float *vs = calloc(nk * HKV * D + 1, sizeof *vs);
    /* skipped keys and the caller's mask in one [HQ][nq][nk] mask */
    unsigned char *keep = calloc(HQ * nq * nk + 1, 1);
    bool masked = c->mask;
    for (size_t j = 0; j < nk; ++j) {
        const long at = key_at(c, s, b, (int)j);
        for (size_t r = 0; r < HQ * nq; ++r) {
            const size_t h = r / nq, i = r % nq;
            keep[r * nk + j] =
                at >= 0 && (!c->mask ||
                            c->mask_bytes[(size_t)b * c->mask_stride[0] +
                                          h * c->mask_stride[1] +
                                          i * c->mask_stride[2] + j]);
        }
        masked = masked || at < 0;
        if (at >= 0) {
            memcpy(ks + j * HKV * D, k + at, HKV * D * sizeof *ks);
            memcpy(vs + j * HKV * D, v + at, HKV * D * sizeof *vs);
        }
    }
    oracle_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1, p.heads_q = HQ, p.heads_kv = HKV;
    p.seqlen_q = (size_t)s->nq, p.seqlen_k = nk;
    p.head_dim = p.head_dim_v = D;
    p.scale = 0.5;
    p.causal = c->causal;
    p.causal_align = FLASHCL_CAUSAL_BOTTOM_RIGHT;
    p.q = (oracle_view){c->q + (size_t)s->q0 * HQ * D, 0, {0, D, HQ * D, 1},
                        FLASHCL_DTYPE_FP32};
    p.k = (oracle_view){ks, 0, {0, D, HKV * D, 1}, FLASHCL_DTYPE_FP32};
    p.v = (oracle_view){vs, 0, {0, D, HKV * D, 1}, FLASHCL_DTYPE_FP32};
    if (c->alibi)
        p.alibi = (oracle_view){c->slopes, 0, {0, 1, 0, 0}, FLASHCL_DTYPE_FP32};
    if (masked)
        p.mask = (oracle_view){keep, 0, {0, nq * nk, nk, 1}, FLASHCL_DTYPE_FP32};
    const size_t o_stride[4] = {0, D, HQ * D, 1};
    if (oracle_attention(&p, o, o_stride, lse) != 0) {
        fprintf(stderr, "fuzz_infer: out of host memory\n");
        exit(2);
    }
    free(ks), free(vs), free(keep);
}

/* ---- device ---------------------------------------------------------- */

typedef struct dev {
    cl_context cl;
    cl_command_queue queue;
    cl_mem q, k, v, k_new, v_new, o, lse, slopes, cu_q, cu_k, seqlens, rows,
        table, status, mask;
} dev;

static cl_mem device_buffer(cl_context cl, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL,
                              &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "fuzz_infer: clCreateBuffer: %d\n", err);
        exit(2);
    }
    return m;
}

static void write_bytes(const dev *g, cl_mem m, const void *host, size_t bytes)
{
    if (bytes && clEnqueueWriteBuffer(g->queue, m, CL_TRUE, 0, bytes, host, 0,
                                      NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "fuzz_infer: write failed\n");
        exit(2);
    }
}

static void read_bytes(const dev *g, cl_mem m, void *host, size_t bytes)
{
    if (bytes && clEnqueueReadBuffer(g->queue, m, CL_TRUE, 0, bytes, host, 0,
                                     NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "fuzz_infer: read failed\n");
        exit(2);
    }
}

static void poison(const dev *g, cl_mem m, size_t bytes)
{
    unsigned char *p = malloc(bytes);
    memset(p, POISON_BYTE, bytes);
    write_bytes(g, m, p, bytes);
    free(p);
}

static void upload_case(dev *g, const fcase *c)
{
    g->q = device_buffer(g->cl, c->q_count * 4);
    g->k = device_buffer(g->cl, c->kv_count * 4);
    g->v = device_buffer(g->cl, c->kv_count * 4);
    g->k_new = device_buffer(g->cl, c->new_count * 4);
    g->v_new = device_buffer(g->cl, c->new_count * 4);
    g->o = device_buffer(g->cl, c->o_count * 4 + TAIL);
    g->lse = device_buffer(g->cl, c->lse_count * 4 + TAIL);
    g->slopes = device_buffer(g->cl, sizeof c->slopes);
    g->cu_q = device_buffer(g->cl, sizeof c->cu_q);
    g->cu_k = device_buffer(g->cl, sizeof c->cu_k);
    g->seqlens = device_buffer(g->cl, sizeof c->seqlens);
    g->rows = device_buffer(g->cl, sizeof c->rows);
    g->table = device_buffer(g->cl, sizeof c->table);
    g->status = device_buffer(g->cl, 4 * FLASHCL_INFER_STATUS_COUNT + TAIL);
    g->mask = device_buffer(g->cl, c->mask_count);
    write_bytes(g, g->mask, c->mask_bytes, c->mask_count);
    write_bytes(g, g->q, c->q, c->q_count * 4);
    write_bytes(g, g->k_new, c->k_new, c->new_count * 4);
    write_bytes(g, g->v_new, c->v_new, c->new_count * 4);
    write_bytes(g, g->slopes, c->slopes, sizeof c->slopes);
    write_bytes(g, g->cu_q, c->cu_q, sizeof c->cu_q);
    write_bytes(g, g->cu_k, c->cu_k, sizeof c->cu_k);
    write_bytes(g, g->seqlens, c->seqlens, sizeof c->seqlens);
    write_bytes(g, g->rows, c->rows, sizeof c->rows);
    write_bytes(g, g->table, c->table, sizeof c->table);
}

/* Fresh inputs and poisoned outputs before each call. */
static void reset_outputs(const dev *g, const fcase *c)
{
    write_bytes(g, g->k, c->k, c->kv_count * 4);
    write_bytes(g, g->v, c->v, c->kv_count * 4);
    poison(g, g->o, c->o_count * 4 + TAIL);
    poison(g, g->lse, c->lse_count * 4 + TAIL);
    poison(g, g->status, 4 * FLASHCL_INFER_STATUS_COUNT + TAIL);
}

static void release_dev(dev *g)
{
    cl_mem all[] = {g->q, g->k, g->v, g->k_new, g->v_new, g->o, g->lse,
                    g->slopes, g->cu_q, g->cu_k, g->seqlens, g->rows,
                    g->table, g->status, g->mask};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        clReleaseMemObject(all[i]);
}

static flashcl_tensor tensor(cl_mem m)
{
    flashcl_tensor t = {0};
    t.buffer = m;
    return t;
}

static flashcl_attention_desc descriptor(const fcase *c, const dev *g)
{
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = c->batch;
    d.heads_q = HQ;
    d.heads_kv = HKV;
    d.seqlen_q = c->varlen_q ? c->total_q : c->nq;
    d.seqlen_k = c->kv == KV_VARLEN ? c->total_k : c->cap;
    d.head_dim = D;
    d.scale = 0.5f;
    d.causal = c->causal;
    d.num_splits = c->splits;
    d.q = tensor(g->q), d.k = tensor(g->k), d.v = tensor(g->v);
    d.o = tensor(g->o), d.lse = tensor(g->lse);
    if (c->alibi)
        d.alibi_slopes = tensor(g->slopes);
    if (c->mask) {
        d.mask = tensor(g->mask);
        d.mask.stride_batch = c->mask_stride[0];
        d.mask.stride_head = c->mask_stride[1];
        d.mask.stride_seq = c->mask_stride[2];
        d.mask.stride_dim = c->mask_stride[3];
    }
    if (c->varlen_q) {
        d.cu_seqlens_q = tensor(g->cu_q);
        d.max_seqlen_q = c->max_q;
    }
    if (c->kv == KV_VARLEN) {
        d.cu_seqlens_k = tensor(g->cu_k);
        d.max_seqlen_k = c->max_k;
        return d;
    }
    d.cache_seqlens = tensor(g->seqlens);
    d.kv_batch = c->kv_rows;
    if (c->batch_idx)
        d.cache_batch_idx = tensor(g->rows);
    if (c->kv == KV_PAGED) {
        d.block_table = tensor(g->table);
        d.page_size = PAGE;
        d.max_pages = c->max_pages;
    }
    if (c->seqlen_new) {
        d.seqlen_new = c->seqlen_new;
        d.k_new = tensor(g->k_new);
        d.v_new = tensor(g->v_new);
    }
    return d;
}

/* ---- checks ---------------------------------------------------------- */

static int failures, passes;
/* How often each counter was checked non-zero (the run's coverage). */
static int counted_nonzero[FLASHCL_INFER_STATUS_COUNT];

static void finding(const char *what, int iter, const char *backend,
                    const char *detail)
{
    ++failures;
    printf("FAIL iter %d (%s): %s%s%s\n", iter, backend, what,
           detail ? ": " : "", detail ? detail : "");
}

static bool poisoned(const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; ++i)
        if (p[i] != POISON_BYTE)
            return false;
    return true;
}

static bool close_to(double got, double want)
{
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= 2e-4 + 2e-4 * fabs(want);
}

/* Every O / LSE element against the sequences that own its row: one of
 * them must match (all of them agree unless prefix sums overlap); a row
 * no sequence owns keeps its poison, and so does the buffers' tail. */
static bool outputs_match(const fcase *c, const float *k, const float *v,
                          const float *o, const float *lse, char *why,
                          size_t cap)
{
    const size_t rows = q_rows(c);
    unsigned char *owned = calloc(rows * HQ * (D + 1) + 1, 1);
    double *want_o = malloc((size_t)(c->total_q + c->nq * MAXB + 1) * HQ * D *
                            sizeof *want_o);
    double *want_lse = malloc((size_t)(c->total_q + c->nq * MAXB + 1) * HQ *
                              sizeof *want_lse);
    bool ok = true;
    for (int b = 0; b < c->batch && ok; ++b) {
        const seq_model s = model_of(c, b);
        model_sequence(c, k, v, b, &s, want_o, want_lse);
        for (int i = 0; i < s.nq && ok; ++i)
            for (int h = 0; h < HQ && ok; ++h) {
                const size_t row = (size_t)(s.q0 + i);
                const size_t lse_at = c->varlen_q
                                          ? (size_t)h * rows + row
                                          : ((size_t)b * HQ + (size_t)h) *
                                                    (size_t)c->nq + (size_t)i;
                for (int e = 0; e <= D; ++e) {
                    const size_t slot = (row * HQ + (size_t)h) * (D + 1) + (size_t)e;
                    const double got = e < D ? o[(row * HQ + (size_t)h) * D + (size_t)e]
                                             : lse[lse_at];
                    const double want =
                        e < D ? want_o[((size_t)i * HQ + (size_t)h) * D + (size_t)e]
                              : want_lse[(size_t)h * (size_t)s.nq + (size_t)i];
                    if (close_to(got, want))
                        owned[slot] = 2; /* matched one owner */
                    else if (owned[slot] != 2)
                        owned[slot] = 1; /* owned, no match yet */
                }
            }
    }
    for (size_t r = 0; r < rows && ok; ++r)
        for (size_t h = 0; h < HQ && ok; ++h)
            for (size_t e = 0; e <= D && ok; ++e) {
                const unsigned char state = owned[(r * HQ + h) * (D + 1) + e];
                const size_t lse_at = c->varlen_q ? h * rows + r
                                                  : ((r / (size_t)c->nq) * HQ + h) *
                                                            (size_t)c->nq +
                                                        r % (size_t)c->nq;
                const void *at = e < D ? (const void *)&o[(r * HQ + h) * D + e]
                                       : (const void *)&lse[lse_at];
                if (state == 1 || (state == 0 && !poisoned(at, 4))) {
                    snprintf(why, cap, "row %zu head %zu %s %zu: %s", r, h,
                             e < D ? "dim" : "lse", e,
                             state ? "matches no owner's oracle"
                                   : "written, but no sequence owns it");
                    ok = false;
                }
            }
    if (ok && (!poisoned(o + c->o_count, TAIL) ||
               !poisoned(lse + c->lse_count, TAIL))) {
        snprintf(why, cap, "written past the end of O or LSE");
        ok = false;
    }
    free(owned), free(want_o), free(want_lse);
    return ok;
}

static void check_computed(flashcl_context *ctx, dev *g, const fcase *c,
                           int iter, flashcl_backend backend)
{
    const char *name = backend == FLASHCL_BACKEND_REFERENCE ? "reference"
                                                            : "fused";
    reset_outputs(g, c);
    flashcl_attention_desc d = descriptor(c, g);
    d.backend = backend;
    const bool counted = below(3) != 0;
    if (counted)
        d.infer_status = tensor(g->status);
    const flashcl_status st = flashcl_attention_forward(ctx, NULL, &d, 0, NULL,
                                                        NULL);
    if (st == FLASHCL_ERROR_UNSUPPORTED && backend == FLASHCL_BACKEND_REFERENCE)
        return; /* built without CLBlast */
    if (st != FLASHCL_SUCCESS) {
        finding("a valid call failed", iter, name,
                flashcl_context_last_error(ctx));
        return;
    }
    clFinish(g->queue);
    float *k_want = malloc(c->kv_count * 4 + 4), *v_want = malloc(c->kv_count * 4 + 4);
    float *k_got = malloc(c->kv_count * 4 + 4), *v_got = malloc(c->kv_count * 4 + 4);
    float *o = malloc(c->o_count * 4 + TAIL), *lse = malloc(c->lse_count * 4 + TAIL);
    model_append(c, k_want, v_want);
    read_bytes(g, g->k, k_got, c->kv_count * 4);
    read_bytes(g, g->v, v_got, c->kv_count * 4);
    read_bytes(g, g->o, o, c->o_count * 4 + TAIL);
    read_bytes(g, g->lse, lse, c->lse_count * 4 + TAIL);
    char why[200] = "";
    int32_t status[FLASHCL_INFER_STATUS_COUNT + TAIL / 4], expected[FLASHCL_INFER_STATUS_COUNT];
    read_bytes(g, g->status, status, sizeof status);
    model_status(c, expected);
    const bool empty = c->varlen_q && (c->total_q == 0 || c->max_q == 0);
    const bool status_ok =
        poisoned(status + FLASHCL_INFER_STATUS_COUNT, TAIL) &&
        (!counted || empty ? poisoned(status, sizeof expected)
                           : !memcmp(status, expected, sizeof expected));
    snprintf(why, sizeof why, "got %d %d %d %d, expected %d %d %d %d%s",
             status[0], status[1], status[2], status[3], expected[0],
             expected[1], expected[2], expected[3],
             counted ? "" : " (not asked for: untouched)");
    for (int i = 0; counted && !empty && i < FLASHCL_INFER_STATUS_COUNT; ++i)
        counted_nonzero[i] += expected[i] != 0;
    if (!status_ok)
        finding("infer_status differs from the header's counts", iter, name,
                why);
    else if (memcmp(k_want, k_got, c->kv_count * 4) ||
        memcmp(v_want, v_got, c->kv_count * 4))
        finding("the caches are not the old ones plus the rows that fit", iter,
                name, NULL);
    else if (!outputs_match(c, k_want, v_want, o, lse, why, sizeof why))
        finding("output differs from the oracle of the clamped call", iter,
                name, why);
    else
        ++passes;
    free(k_want), free(v_want), free(k_got), free(v_got), free(o), free(lse);
}

/* One field set to a value the header refuses. */
static const char *refuse(const fcase *c, flashcl_attention_desc *d)
{
    switch (below(12)) {
    case 10: /* the counters over another tensor of the call (an empty
              * view overlaps nothing: then a bad split count instead) */
        if (!c->o_count || !c->kv_count) {
            d->num_splits = -1;
            return "num_splits";
        }
        d->infer_status = tensor(next() % 2 ? d->o.buffer : d->k.buffer);
        return "infer_status overlapping o or k";
    case 11: /* three counters left in the buffer */
        d->infer_status = tensor(d->cache_seqlens.buffer ? d->cache_seqlens.buffer
                                                         : d->cu_seqlens_k.buffer);
        clGetMemObjectInfo(d->infer_status.buffer, CL_MEM_SIZE, sizeof(size_t),
                           &d->infer_status.offset, NULL);
        d->infer_status.offset -= 12;
        return "infer_status past its buffer";
    case 0: d->num_splits = PICK(-1, FLASHCL_MAX_SPLITS + 1, INT_MAX); return "num_splits";
    case 1: d->kv_batch = PICK(-1, INT32_MIN); return "kv_batch";
    case 2:
        if (c->kv == KV_VARLEN) {
            d->max_seqlen_k = PICK(-1, INT32_MAX);
            return "max_seqlen_k";
        }
        d->seqlen_new = d->seqlen_k + 1 + below(3);
        d->k_new = tensor(d->q.buffer), d->v_new = tensor(d->q.buffer);
        return "seqlen_new";
    case 3:
        d->cu_seqlens_q = tensor(d->cache_seqlens.buffer ? d->cache_seqlens.buffer
                                                         : d->cu_seqlens_k.buffer);
        /* one int32 left, [batch + 1] needed */
        clGetMemObjectInfo(d->cu_seqlens_q.buffer, CL_MEM_SIZE, sizeof(size_t),
                           &d->cu_seqlens_q.offset, NULL);
        d->cu_seqlens_q.offset -= 4;
        d->max_seqlen_q = 1;
        return "cu_seqlens_q past its buffer";
    case 4:
        d->max_seqlen_q = PICK(-1, INT32_MAX, INT32_MIN);
        if (!d->cu_seqlens_q.buffer)
            d->cu_seqlens_q = tensor(d->q.buffer);
        return "max_seqlen_q";
    case 5:
        if (c->kv != KV_PAGED) {
            d->page_size = PAGE;
            return "page_size without block_table";
        }
        d->page_size = PICK(0, 8, 24, 131072);
        return "page_size";
    case 6:
        if (c->kv != KV_PAGED) {
            d->block_table = tensor(d->q.buffer);
            d->block_table.stride_batch = (size_t)1 << 40;
            return "block_table";
        }
        d->max_pages += 1;
        return "max_pages";
    case 7:
        if (c->kv == KV_VARLEN) {
            d->cache_seqlens = tensor(d->cu_seqlens_k.buffer);
            return "cu_seqlens_k with cache_seqlens";
        }
        d->cache_seqlens.offset = 2; /* not a multiple of 4 */
        return "cache_seqlens offset";
    case 8:
        d->cache_batch_idx = tensor(d->q.buffer);
        d->cache_batch_idx.offset = (size_t)1 << 40;
        if (!d->cache_seqlens.buffer)
            return "cache_batch_idx without cache_seqlens";
        return "cache_batch_idx offset";
    default:
        d->k_new = tensor(d->k.buffer); /* in-place source is the cache */
        d->v_new = tensor(d->v.buffer);
        if (!d->seqlen_new)
            d->seqlen_new = 1;
        if (!d->cache_seqlens.buffer)
            return "seqlen_new without a cache";
        return "k_new aliasing the cache";
    }
}

static void check_refused(flashcl_context *ctx, dev *g, const fcase *c,
                          int iter)
{
    reset_outputs(g, c);
    flashcl_attention_desc d = descriptor(c, g);
    const char *field = refuse(c, &d);
    if (below(2))
        d.backend = FLASHCL_BACKEND_REFERENCE;
    const flashcl_status st = flashcl_attention_forward(ctx, NULL, &d, 0, NULL,
                                                        NULL);
    clFinish(g->queue);
    char detail[160];
    snprintf(detail, sizeof detail, "%s: %s", field, flashcl_status_string(st));
    if (st == FLASHCL_SUCCESS || (int)st < 0 || st >= FLASHCL_STATUS_COUNT_) {
        finding("a call with a refused field was not refused", iter, "host",
                detail);
        return;
    }
    if (!*flashcl_context_last_error(ctx)) {
        finding("a refusal without a message", iter, "host", detail);
        return;
    }
    float *k = malloc(c->kv_count * 4 + 4), *v = malloc(c->kv_count * 4 + 4);
    unsigned char *o = malloc(c->o_count * 4 + TAIL),
                  *lse = malloc(c->lse_count * 4 + TAIL);
    read_bytes(g, g->k, k, c->kv_count * 4);
    read_bytes(g, g->v, v, c->kv_count * 4);
    read_bytes(g, g->o, o, c->o_count * 4 + TAIL);
    read_bytes(g, g->lse, lse, c->lse_count * 4 + TAIL);
    unsigned char status[4 * FLASHCL_INFER_STATUS_COUNT + TAIL];
    read_bytes(g, g->status, status, sizeof status);
    if (memcmp(k, c->k, c->kv_count * 4) || memcmp(v, c->v, c->kv_count * 4) ||
        !poisoned(o, c->o_count * 4 + TAIL) || !poisoned(status, sizeof status) ||
        !poisoned(lse, c->lse_count * 4 + TAIL))
        finding("a refused call wrote", iter, "host", detail);
    else
        ++passes;
    free(k), free(v), free(o), free(lse);
}

static long env_long(const char *name, long fallback)
{
    const char *text = getenv(name);
    return text && *text ? strtol(text, NULL, 10) : fallback;
}

int main(void)
{
    fuzz_seed((uint64_t)env_long("FLASHCL_FUZZ_SEED", 1));
    const long iters = env_long("FLASHCL_FUZZ_ITERS", 32);
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "fuzz_infer: no device: %s\n",
                flashcl_last_create_error());
        return 1;
    }
    dev g;
    memset(&g, 0, sizeof g);
    g.cl = flashcl_context_cl_context(ctx);
    g.queue = flashcl_context_queue(ctx);
    char device[256] = "";
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof device,
                    device, NULL);
    printf("fuzz_infer: on %s\n", device);
    for (long it = 0; it < iters; ++it) {
        fcase c;
        make_case(&c);
        upload_case(&g, &c);
        check_computed(ctx, &g, &c, (int)it, FLASHCL_BACKEND_FUSED);
        check_computed(ctx, &g, &c, (int)it, FLASHCL_BACKEND_REFERENCE);
        for (int r = 0; r < 3; ++r)
            check_refused(ctx, &g, &c, (int)it);
        release_dev(&g);
        free_case(&c);
    }
    flashcl_context_release(ctx);
    flashcl_clear_reference_cache();
    printf("fuzz_infer: counters checked non-zero: %d appends dropped, %d "
           "pages skipped, %d lengths clamped, %d rows skipped\n",
           counted_nonzero[0], counted_nonzero[1], counted_nonzero[2],
           counted_nonzero[3]);
    printf("fuzz_infer: %d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
