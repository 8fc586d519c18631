/*
 * libflashcl_mpi under mpirun (tests/CMakeLists.txt runs it on 1 to 4
 * ranks). Every rank makes the same whole inputs from one seed, computes
 * the whole call on its own device (the single-device result, which knows
 * nothing of shards), then its shard through flashcl_cp_attention_forward,
 * and compares its rows: ring and all-gather, contiguous and zig-zag,
 * causal, window, ALiBi, sinks, softcap, GQA, bias and a broadcast mask,
 * fp32/fp16/bf16/fp64 (both modes; fp64 with its fp64 LSE, lse_dtype,
 * against the whole call's at 1e-12 too); bhnd shards with padded
 * K/V rows; and the backward (ring and all-gather, every dtype, d_sinks
 * with sinks) against the single-device backward. A second call must
 * give the same bits. Then the faults: shards that disagree, a rank whose
 * own call fails, an unsupported request, a bias too small: every rank
 * returns an error and writes nothing, none hangs (ctest's timeout bounds
 * it).
 * Rank 0 prints "N passed, N failed".
 */
#include "flashcl_mpi.h"
#include "oracle.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 96
#define BATCH 2
#define HQ 2
#define HKV 1
#define DIM 32

typedef struct cp_case {
    const char *name;
    flashcl_dtype dtype;
    int causal, window, left, right, alibi, sinks;
    float softcap;
    int bias; /* an fp32 bias per (batch, head) and a mask broadcast */
} cp_case;

static const cp_case cases[] = {
    {"causal", FLASHCL_DTYPE_FP32, 1, 0, 0, 0, 0, 0, 0, 0},
    {"window 20/3", FLASHCL_DTYPE_FP32, 0, 1, 20, 3, 0, 0, 0, 0},
    {"causal + ALiBi + sinks", FLASHCL_DTYPE_FP32, 1, 0, 0, 0, 1, 1, 0, 0},
    {"softcap, no mask", FLASHCL_DTYPE_FP32, 0, 0, 0, 0, 0, 0, 5.0f, 0},
    {"causal fp16", FLASHCL_DTYPE_FP16, 1, 0, 0, 0, 0, 0, 0, 0},
    {"causal + window 30/-1 bf16", FLASHCL_DTYPE_BF16, 1, 1, 30, -1, 0, 0, 0,
     0},
    /* fp64: the forward in both modes (the ring's steps merged through
     * fp64 LSEs) with an fp64 lse, and the backward in both modes (its
     * host sums in fp64) */
    {"causal + ALiBi + sinks fp64", FLASHCL_DTYPE_FP64, 1, 0, 0, 0, 1, 1, 0,
     0},
    {"bias + mask + window 40/8", FLASHCL_DTYPE_FP32, 0, 1, 40, 8, 0, 0, 0,
     1},
};

static int rank, ranks, failures, passes;
/* Non-zero: the shards' q, k, v, o (and dO, dQ, dK, dV) are laid out bhnd,
 * [batch, heads, rows, dim], which K/V's and the gradients' trips through
 * host memory must read and write in rows (the whole call stays bnhd). */
static int shard_bhnd;
static flashcl_context *ctx;

static void check(int ok, const char *what, const char *detail)
{
    if (ok) {
        ++passes;
        return;
    }
    ++failures;
    fprintf(stderr, "rank %d: FAIL %s: %s\n", rank, what, detail);
}

static cl_mem device_copy(const void *bytes, size_t size)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx),
                              CL_MEM_READ_WRITE, size, NULL, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "rank %d: clCreateBuffer failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (bytes)
        clEnqueueWriteBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0, size,
                             bytes, 0, NULL, NULL);
    return m;
}

static void poison(cl_mem m, size_t size)
{
    const unsigned char pattern = 0xFF;
    clEnqueueFillBuffer(flashcl_context_queue(ctx), m, &pattern, 1, 0, size, 0,
                        NULL, NULL);
    clFinish(flashcl_context_queue(ctx));
}

static void *read_back(cl_mem m, size_t size)
{
    void *bytes = malloc(size);
    clEnqueueReadBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0, size, bytes,
                        0, NULL, NULL);
    return bytes;
}

/* Whole [BATCH, N, heads, dim] inputs in `dtype`, the same on every rank. */
static void *random_tensor(flashcl_dtype dtype, int heads, uint64_t seed)
{
    const size_t count = (size_t)BATCH * N * heads * DIM;
    void *bytes = malloc(count * oracle_dtype_size(dtype));
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < count; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(state >> 11) / 9007199254740992.0;
        oracle_store(bytes, i, dtype, 2.0 * u - 1.0);
    }
    return bytes;
}

/* bhnd shards' K, V, dK and dV rows are PITCH elements apart (padded),
 * with explicit strides: not the layout's packed ones. */
#define PITCH (DIM + 3)

/* A [BATCH, n, heads, DIM] host tensor as [BATCH, heads, n, pitch]
 * (to_bhnd) or back; the input is freed. */
static void *relayout(void *src, int heads, int64_t n, size_t elem,
                      int to_bhnd, int pitch)
{
    unsigned char *out = calloc((size_t)BATCH * n * heads * pitch, elem);
    const unsigned char *in = src;
    for (int b = 0; b < BATCH; ++b)
        for (int64_t i = 0; i < n; ++i)
            for (int h = 0; h < heads; ++h) {
                const size_t bnhd = (((size_t)b * n + i) * heads + h) * DIM;
                const size_t bhnd =
                    (((size_t)b * heads + h) * n + i) * (size_t)pitch;
                memcpy(out + (to_bhnd ? bhnd : bnhd) * elem,
                       in + (to_bhnd ? bnhd : bhnd) * elem, DIM * elem);
            }
    free(src);
    return out;
}

/* The shard's rows of a whole [BATCH, N, heads, DIM] tensor, in order. */
static void *shard_of(const void *whole, const flashcl_cp_desc *cp, int heads,
                      size_t elem)
{
    int64_t first[2], rows;
    const int chunks = flashcl_cp_shard_rows(cp, rank, ranks, first, &rows);
    const size_t row = (size_t)heads * DIM * elem, n = (size_t)rows * chunks;
    unsigned char *out = malloc((size_t)BATCH * n * row);
    for (int b = 0; b < BATCH; ++b)
        for (int c = 0; c < chunks; ++c)
            memcpy(out + ((size_t)b * n + (size_t)c * rows) * row,
                   (const unsigned char *)whole +
                       ((size_t)b * N + (size_t)first[c]) * row,
                   (size_t)rows * row);
    return out;
}

static flashcl_attention_desc call_desc(const cp_case *c, int64_t rows)
{
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = BATCH;
    d.heads_q = HQ;
    d.heads_kv = HKV;
    d.head_dim = DIM;
    d.seqlen_q = d.seqlen_k = rows;
    d.dtype = c->dtype;
    d.causal = c->causal;
    d.window = c->window;
    d.window_left = c->window ? c->left : 0;
    d.window_right = c->window ? c->right : 0;
    d.softcap = c->softcap;
    return d;
}

typedef struct inputs {
    void *q, *k, *v;
    cl_mem slopes, sinks;
    float *bias;         /* [BATCH, HQ, N, N] */
    unsigned char *mask; /* [N, N], broadcast over batch and heads */
} inputs;

/* The bias and mask of rows `first` .. of the whole call (with cp: the
 * shard's rows, in its order) against all N keys, set on d with literal
 * strides: bias [BATCH, HQ, rows, N], mask [rows, N] broadcast. */
static void attach_bias(flashcl_attention_desc *d, const inputs *in,
                        const flashcl_cp_desc *cp)
{
    int64_t first[2] = {0, 0}, rows = N;
    const int chunks =
        cp ? flashcl_cp_shard_rows(cp, rank, ranks, first, &rows) : 1;
    const size_t n = (size_t)rows * chunks;
    float *bias = malloc((size_t)BATCH * HQ * n * N * sizeof *bias);
    unsigned char *mask = malloc(n * N);
    for (int c = 0; c < chunks; ++c)
        for (int64_t i = 0; i < rows; ++i) {
            const size_t to = (size_t)(c * rows + i), from = first[c] + i;
            memcpy(mask + to * N, in->mask + from * N, N);
            for (size_t bh = 0; bh < (size_t)BATCH * HQ; ++bh)
                memcpy(bias + (bh * n + to) * N,
                       in->bias + (bh * N + from) * N, N * sizeof *bias);
        }
    d->bias.buffer = device_copy(bias, (size_t)BATCH * HQ * n * N * 4);
    d->bias.stride_batch = (size_t)HQ * n * N;
    d->bias.stride_head = n * N;
    d->bias.stride_seq = N;
    d->bias.stride_dim = 1;
    d->bias_dtype = FLASHCL_DTYPE_FP32;
    d->mask.buffer = device_copy(mask, n * N);
    d->mask.stride_seq = N;
    d->mask.stride_dim = 1;
    free(bias);
    free(mask);
}

static void release_desc(flashcl_attention_desc *d)
{
    cl_mem all[] = {d->q.buffer, d->k.buffer,    d->v.buffer,
                    d->o.buffer, d->bias.buffer, d->mask.buffer};
    for (int i = 0; i < 6; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
}

/* The shard's rows of a whole [BATCH, HQ, N] fp64 LSE, in order. */
static double *lse_shard_of(const double *whole, const flashcl_cp_desc *cp)
{
    int64_t first[2], rows;
    const int chunks = flashcl_cp_shard_rows(cp, rank, ranks, first, &rows);
    const size_t n = (size_t)rows * chunks;
    double *out = malloc((size_t)BATCH * HQ * n * sizeof *out);
    for (size_t bh = 0; bh < (size_t)BATCH * HQ; ++bh)
        for (int c = 0; c < chunks; ++c)
            memcpy(out + bh * n + (size_t)c * rows,
                   whole + bh * N + (size_t)first[c],
                   (size_t)rows * sizeof *out);
    return out;
}

/* An fp64 LSE output of `rows` rows on d (lse_dtype fp64). */
static void attach_fp64_lse(flashcl_attention_desc *d, int64_t rows)
{
    d->lse.buffer = device_copy(NULL, (size_t)BATCH * HQ * rows * 8);
    d->lse_dtype = FLASHCL_DTYPE_FP64;
}

/* The single-device result's rows of this shard, and with `lse` (fp64
 * calls) its fp64 LSE's rows. */
static void *whole_rows(const cp_case *c, const inputs *in,
                        const flashcl_cp_desc *cp, double **lse)
{
    const size_t elem = oracle_dtype_size(c->dtype);
    const size_t o_bytes = (size_t)BATCH * N * HQ * DIM * elem;
    flashcl_attention_desc d = call_desc(c, N);
    d.q.buffer = device_copy(in->q, (size_t)BATCH * N * HQ * DIM * elem);
    d.k.buffer = device_copy(in->k, (size_t)BATCH * N * HKV * DIM * elem);
    d.v.buffer = device_copy(in->v, (size_t)BATCH * N * HKV * DIM * elem);
    d.o.buffer = device_copy(NULL, o_bytes);
    d.alibi_slopes.buffer = c->alibi ? in->slopes : NULL;
    d.sinks.buffer = c->sinks ? in->sinks : NULL;
    if (c->bias)
        attach_bias(&d, in, NULL);
    if (lse)
        attach_fp64_lse(&d, N);
    if (flashcl_attention_forward(ctx, NULL, &d, 0, NULL, NULL) !=
        FLASHCL_SUCCESS) {
        fprintf(stderr, "rank %d: the whole call failed: %s\n", rank,
                flashcl_context_last_error(ctx));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    void *o = read_back(d.o.buffer, o_bytes);
    void *mine = shard_of(o, cp, HQ, elem);
    if (lse) {
        double *all = read_back(d.lse.buffer, (size_t)BATCH * HQ * N * 8);
        *lse = lse_shard_of(all, cp);
        free(all);
        clReleaseMemObject(d.lse.buffer);
    }
    release_desc(&d);
    free(o);
    return mine;
}

/* The shard's call: its descriptor over device copies of its rows. */
/* The explicit strides of a [BATCH, heads, n, PITCH] tensor. */
static void padded_strides(flashcl_tensor *t, int heads, int64_t n)
{
    t->stride_dim = 1;
    t->stride_seq = PITCH;
    t->stride_head = (size_t)n * PITCH;
    t->stride_batch = (size_t)heads * n * PITCH;
}

static flashcl_attention_desc shard_desc(const cp_case *c, const inputs *in,
                                         const flashcl_cp_desc *cp,
                                         size_t *o_bytes)
{
    const size_t elem = oracle_dtype_size(c->dtype);
    const int64_t n = cp->seqlen_total / ranks;
    flashcl_attention_desc d = call_desc(c, n);
    void *q = shard_of(in->q, cp, HQ, elem), *k = shard_of(in->k, cp, HKV, elem),
         *v = shard_of(in->v, cp, HKV, elem);
    if (shard_bhnd) {
        q = relayout(q, HQ, n, elem, 1, DIM);
        k = relayout(k, HKV, n, elem, 1, PITCH);
        v = relayout(v, HKV, n, elem, 1, PITCH);
        d.layout = FLASHCL_LAYOUT_BHND;
    }
    const size_t kv_bytes =
        (size_t)BATCH * n * HKV * (shard_bhnd ? PITCH : DIM) * elem;
    *o_bytes = (size_t)BATCH * n * HQ * DIM * elem;
    d.q.buffer = device_copy(q, *o_bytes);
    d.k.buffer = device_copy(k, kv_bytes);
    d.v.buffer = device_copy(v, kv_bytes);
    if (shard_bhnd) {
        padded_strides(&d.k, HKV, n);
        padded_strides(&d.v, HKV, n);
    }
    d.o.buffer = device_copy(NULL, *o_bytes);
    d.alibi_slopes.buffer = c->alibi ? in->slopes : NULL;
    d.sinks.buffer = c->sinks ? in->sinks : NULL;
    if (c->bias)
        attach_bias(&d, in, cp);
    free(q);
    free(k);
    free(v);
    return d;
}

static double tolerance(flashcl_dtype dtype)
{
    return dtype == FLASHCL_DTYPE_FP64   ? 1e-12
           : dtype == FLASHCL_DTYPE_FP32 ? 2e-5
           : dtype == FLASHCL_DTYPE_FP16 ? 2e-3
                                         : 1.6e-2;
}

/* The shard's fp64 LSE of two calls against the whole call's rows: the
 * ring's merge must keep fp64 accuracy (fp32 LSEs left ~1e-7). */
static void check_fp64_lse(const char *what, double *const got[2],
                           const double *want, size_t bytes)
{
    double worst = 0;
    for (size_t i = 0; i < bytes / 8; ++i) {
        const double err = want[i] == -INFINITY
                               ? (got[0][i] == -INFINITY ? 0 : INFINITY)
                               : fabs(got[0][i] - want[i]) /
                                     fmax(1.0, fabs(want[i]));
        worst = isnan(err) ? INFINITY : fmax(worst, err);
    }
    char detail[96];
    snprintf(detail, sizeof detail,
             "fp64 LSE: max error %.3g against the whole call", worst);
    check(worst <= tolerance(FLASHCL_DTYPE_FP64), what, detail);
    check(memcmp(got[0], got[1], bytes) == 0, what,
          "two calls gave different LSE bits");
}

static void run_case(const cp_case *c, const inputs *in, flashcl_cp_mode mode,
                     flashcl_cp_layout layout)
{
    char what[160];
    snprintf(what, sizeof what, "%s, %s, %s%s, %d ranks", c->name,
             mode == FLASHCL_CP_RING ? "ring" : "all-gather",
             layout == FLASHCL_CP_ZIGZAG ? "zig-zag" : "contiguous",
             shard_bhnd ? ", bhnd shards" : "", ranks);
    flashcl_cp_desc cp = FLASHCL_CP_DESC_INIT;
    cp.mode = mode;
    cp.layout = layout;
    cp.seqlen_total = N;
    const int fp64 = c->dtype == FLASHCL_DTYPE_FP64;
    double *want_lse = NULL;
    void *want = whole_rows(c, in, &cp, fp64 ? &want_lse : NULL);
    size_t o_bytes;
    flashcl_attention_desc d = shard_desc(c, in, &cp, &o_bytes);
    const size_t lse_bytes = (size_t)BATCH * HQ * (N / ranks) * 8;
    if (fp64)
        attach_fp64_lse(&d, N / ranks);
    void *runs[2] = {NULL, NULL};
    double *lses[2] = {NULL, NULL};
    for (int r = 0; r < 2; ++r) {
        poison(d.o.buffer, o_bytes);
        if (fp64)
            poison(d.lse.buffer, lse_bytes);
        const flashcl_status st =
            flashcl_cp_attention_forward(MPI_COMM_WORLD, ctx, NULL, &d, &cp);
        check(st == FLASHCL_SUCCESS, what, flashcl_cp_last_error());
        runs[r] = read_back(d.o.buffer, o_bytes);
        if (fp64)
            lses[r] = read_back(d.lse.buffer, lse_bytes);
        if (shard_bhnd)
            runs[r] = relayout(runs[r], HQ, N / ranks,
                               oracle_dtype_size(c->dtype), 0, DIM);
    }
    const size_t elem = oracle_dtype_size(c->dtype), count = o_bytes / elem;
    double worst = 0;
    for (size_t i = 0; i < count; ++i) {
        const double got = oracle_load(runs[0], i, c->dtype);
        const double ref = oracle_load(want, i, c->dtype);
        const double err = fabs(got - ref) / fmax(1.0, fabs(ref));
        worst = isnan(err) ? INFINITY : fmax(worst, err);
    }
    char detail[96];
    snprintf(detail, sizeof detail, "max error %.3g against the whole call",
             worst);
    check(worst <= tolerance(c->dtype), what, detail);
    check(memcmp(runs[0], runs[1], o_bytes) == 0, what,
          "two calls gave different bits");
    if (fp64)
        check_fp64_lse(what, lses, want_lse, lse_bytes);
    free(runs[0]);
    free(runs[1]);
    free(lses[0]);
    free(lses[1]);
    free(want);
    free(want_lse);
    if (d.lse.buffer)
        clReleaseMemObject(d.lse.buffer);
    release_desc(&d);
}

/* ---- backward --------------------------------------------------------- */

typedef struct grads {
    void *dq, *dk, *dv; /* host, in the shard's (or the whole's) rows */
    float *dsinks;      /* [HQ] when the call has sinks, else NULL */
} grads;

/* Forward then backward of `d` (its q, k, v, o set) with d_o = dout, on one
 * device (cp NULL) or across the ranks. */
static grads backward_of(flashcl_attention_desc *d, const void *dout,
                         int64_t rows, const flashcl_cp_desc *cp)
{
    const size_t elem = oracle_dtype_size(d->dtype);
    const size_t q_bytes = (size_t)BATCH * rows * HQ * DIM * elem;
    const int bhnd = cp && shard_bhnd; /* d->layout says so too */
    const size_t k_bytes =
        (size_t)BATCH * rows * HKV * (bhnd ? PITCH : DIM) * elem;
    d->lse.buffer = device_copy(NULL, (size_t)BATCH * HQ * rows * 4);
    flashcl_backward_desc b = FLASHCL_BACKWARD_DESC_INIT;
    void *d_o = malloc(q_bytes);
    memcpy(d_o, dout, q_bytes);
    if (bhnd)
        d_o = relayout(d_o, HQ, rows, elem, 1, DIM);
    b.d_o.buffer = device_copy(d_o, q_bytes);
    free(d_o);
    b.d_q.buffer = device_copy(NULL, q_bytes);
    b.d_k.buffer = device_copy(NULL, k_bytes);
    b.d_v.buffer = device_copy(NULL, k_bytes);
    if (bhnd) {
        padded_strides(&b.d_k, HKV, rows);
        padded_strides(&b.d_v, HKV, rows);
    }
    poison(b.d_q.buffer, q_bytes);
    poison(b.d_k.buffer, k_bytes);
    poison(b.d_v.buffer, k_bytes);
    if (d->sinks.buffer) {
        b.d_sinks.buffer = device_copy(NULL, HQ * 4);
        poison(b.d_sinks.buffer, HQ * 4);
    }
    flashcl_status st =
        cp ? flashcl_cp_attention_forward(MPI_COMM_WORLD, ctx, NULL, d, cp)
           : flashcl_attention_forward(ctx, NULL, d, 0, NULL, NULL);
    if (st == FLASHCL_SUCCESS)
        st = cp ? flashcl_cp_attention_backward(MPI_COMM_WORLD, ctx, NULL, d,
                                                &b, cp)
                : flashcl_attention_backward(ctx, NULL, d, &b, 0, NULL, NULL);
    check(st == FLASHCL_SUCCESS, cp ? "backward across ranks" : "backward",
          cp ? flashcl_cp_last_error() : flashcl_context_last_error(ctx));
    grads g = {read_back(b.d_q.buffer, q_bytes),
               read_back(b.d_k.buffer, k_bytes),
               read_back(b.d_v.buffer, k_bytes),
               b.d_sinks.buffer ? read_back(b.d_sinks.buffer, HQ * 4) : NULL};
    if (bhnd) {
        g.dq = relayout(g.dq, HQ, rows, elem, 0, DIM);
        g.dk = relayout(g.dk, HKV, rows, elem, 0, PITCH);
        g.dv = relayout(g.dv, HKV, rows, elem, 0, PITCH);
    }
    cl_mem all[] = {d->lse.buffer, b.d_o.buffer, b.d_q.buffer, b.d_k.buffer,
                    b.d_v.buffer, b.d_sinks.buffer};
    for (int i = 0; i < 6; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
    d->lse.buffer = NULL;
    return g;
}

static void release_grads(grads *g)
{
    free(g->dq);
    free(g->dk);
    free(g->dv);
    free(g->dsinks);
}

/* max |got - want| / max |want| of one gradient stored in `dtype` */
static double relative_error(const void *got, const void *want, size_t n,
                             flashcl_dtype dtype)
{
    double err = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) {
        const double g = oracle_load(got, i, dtype),
                     w = oracle_load(want, i, dtype);
        err = fmax(err, isnan(g) ? INFINITY : fabs(g - w));
        scale = fmax(scale, fabs(w));
    }
    return err / fmax(scale, 1e-30);
}

/* The gradients' bound against the single-device backward, of max |grad|:
 * fp32 agrees to its rounding; 16-bit storage rounds each pair of chunks'
 * gradients before the fp32 sum, where the single device rounds once
 * (measured on 3 ranks: fp16 8.2e-4, bf16 5.5e-3; the forward's bounds). */
static double gradient_tolerance(flashcl_dtype dtype)
{
    return dtype == FLASHCL_DTYPE_FP64   ? 1e-12
           : dtype == FLASHCL_DTYPE_FP32 ? 1e-5
           : dtype == FLASHCL_DTYPE_FP16 ? 2e-3
                                         : 1.6e-2;
}

static void run_backward_case(const cp_case *c, const inputs *in,
                              flashcl_cp_mode mode, flashcl_cp_layout layout)
{
    char what[160];
    snprintf(what, sizeof what, "backward, %s, %s, %s%s, %d ranks", c->name,
             mode == FLASHCL_CP_RING ? "ring" : "all-gather",
             layout == FLASHCL_CP_ZIGZAG ? "zig-zag" : "contiguous",
             shard_bhnd ? ", bhnd shards" : "", ranks);
    flashcl_cp_desc cp = FLASHCL_CP_DESC_INIT;
    cp.mode = mode;
    cp.layout = layout;
    cp.seqlen_total = N;
    void *dout = random_tensor(c->dtype, HQ, 99);
    const size_t elem = oracle_dtype_size(c->dtype);
    flashcl_attention_desc whole = call_desc(c, N);
    whole.q.buffer = device_copy(in->q, (size_t)BATCH * N * HQ * DIM * elem);
    whole.k.buffer = device_copy(in->k, (size_t)BATCH * N * HKV * DIM * elem);
    whole.v.buffer = device_copy(in->v, (size_t)BATCH * N * HKV * DIM * elem);
    whole.o.buffer = device_copy(NULL, (size_t)BATCH * N * HQ * DIM * elem);
    whole.alibi_slopes.buffer = c->alibi ? in->slopes : NULL;
    whole.sinks.buffer = c->sinks ? in->sinks : NULL;
    if (c->bias)
        attach_bias(&whole, in, NULL);
    grads all = backward_of(&whole, dout, N, NULL);
    grads want = {shard_of(all.dq, &cp, HQ, elem),
                  shard_of(all.dk, &cp, HKV, elem),
                  shard_of(all.dv, &cp, HKV, elem), all.dsinks};
    all.dsinks = NULL; /* want's now */
    size_t o_bytes;
    flashcl_attention_desc d = shard_desc(c, in, &cp, &o_bytes);
    void *my_dout = shard_of(dout, &cp, HQ, elem);
    const int64_t n = N / ranks;
    grads got[2];
    for (int r = 0; r < 2; ++r)
        got[r] = backward_of(&d, my_dout, n, &cp);
    const size_t nq = (size_t)BATCH * n * HQ * DIM,
                 nk = (size_t)BATCH * n * HKV * DIM;
    const flashcl_dtype t = c->dtype;
    const double errs[4] = {
        relative_error(got[0].dq, want.dq, nq, t),
        relative_error(got[0].dk, want.dk, nk, t),
        relative_error(got[0].dv, want.dv, nk, t),
        want.dsinks ? relative_error(got[0].dsinks, want.dsinks, HQ,
                                     FLASHCL_DTYPE_FP32)
                    : 0};
    const double bound = gradient_tolerance(t);
    char detail[160];
    snprintf(detail, sizeof detail,
             "dQ %.3g, dK %.3g, dV %.3g, d_sinks %.3g of max |grad| from the "
             "whole call",
             errs[0], errs[1], errs[2], errs[3]);
    check(errs[0] <= bound && errs[1] <= bound && errs[2] <= bound &&
              errs[3] <= 1e-5,
          what, detail);
    check(!memcmp(got[0].dq, got[1].dq, nq * elem) &&
              !memcmp(got[0].dk, got[1].dk, nk * elem) &&
              !memcmp(got[0].dv, got[1].dv, nk * elem) &&
              (!want.dsinks || !memcmp(got[0].dsinks, got[1].dsinks, HQ * 4)),
          what, "two calls gave different bits");
    release_grads(&got[0]);
    release_grads(&got[1]);
    release_grads(&want);
    release_grads(&all);
    release_desc(&whole);
    release_desc(&d);
    free(dout);
    free(my_dout);
}

/* A fault on some ranks: every rank must fail and keep its O poisoned. */
static void expect_all_fail(const char *what, flashcl_attention_desc *d,
                            const flashcl_cp_desc *cp, size_t o_bytes,
                            const char *needle)
{
    poison(d->o.buffer, o_bytes);
    const flashcl_status st =
        flashcl_cp_attention_forward(MPI_COMM_WORLD, ctx, NULL, d, cp);
    char detail[640];
    snprintf(detail, sizeof detail, "status %s (%s)", flashcl_status_string(st),
             flashcl_cp_last_error());
    check(st != FLASHCL_SUCCESS && *flashcl_cp_last_error(), what, detail);
    check(!needle || strstr(flashcl_cp_last_error(), needle), what, detail);
    unsigned char *o = read_back(d->o.buffer, o_bytes);
    size_t written = 0;
    for (size_t i = 0; i < o_bytes; ++i)
        written += o[i] != 0xFF;
    check(written == 0, what, "O was written");
    free(o);
}

static void run_faults(const inputs *in)
{
    const cp_case *c = &cases[0];
    flashcl_cp_desc cp = FLASHCL_CP_DESC_INIT;
    cp.seqlen_total = N;
    size_t o_bytes;
    flashcl_attention_desc d = shard_desc(c, in, &cp, &o_bytes);
    const flashcl_attention_desc good = d;
    if (ranks > 1) {
        if (rank == 1)
            d.causal = 0; /* one rank asks for another call */
        expect_all_fail("shards that disagree (causal on some ranks)", &d,
                        &cp, o_bytes, NULL);
    }
    d = good;
    if (rank == ranks - 1)
        d.q.buffer = NULL; /* the last rank's own check fails */
    expect_all_fail("a rank that fails its own check", &d, &cp, o_bytes,
                    NULL);
    d = good;
    if (rank == 0) /* an fp64 LSE asked of an fp32 call */
        d.lse_dtype = FLASHCL_DTYPE_FP64;
    expect_all_fail("lse_dtype fp64 of an fp32 call", &d, &cp, o_bytes,
                    rank == 0 ? "lse_dtype" : NULL);
    d = good;
    d.k.stride_dim = 2; /* K's rows not contiguous: no host rectangle */
    d.k.stride_seq = HKV * DIM * 2;
    d.k.stride_head = DIM * 2;
    d.k.stride_batch = (size_t)(N / ranks) * HKV * DIM * 2;
    expect_all_fail("a K view of non-contiguous rows", &d, &cp, o_bytes,
                    "stride_dim 1");
    d = good;
    if (ranks > 1) { /* a bias of the shard's own keys only: too small */
        const size_t n = (size_t)N / ranks;
        d.bias.buffer = device_copy(NULL, (size_t)BATCH * HQ * n * n * 4);
        d.bias.stride_batch = HQ * n * n;
        d.bias.stride_head = n * n;
        d.bias.stride_seq = n;
        d.bias.stride_dim = 1;
        expect_all_fail("a bias without the whole sequence's columns", &d,
                        &cp, o_bytes, "keys");
        clReleaseMemObject(d.bias.buffer);
    }
    d = good;
    cp.seqlen_total = N + 1;
    expect_all_fail("seqlen_total that does not split", &d, &cp, o_bytes,
                    NULL);
    release_desc(&d);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "rank %d: no OpenCL device: %s\n", rank,
                flashcl_last_create_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char device[256] = "";
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof device,
                    device, NULL);
    printf("rank %d of %d on %s\n", rank, ranks, device);
    flashcl_device_info info;
    memset(&info, 0, sizeof info);
    const int has_fp64 =
        flashcl_context_device_info(ctx, &info) == FLASHCL_SUCCESS &&
        info.has_fp64;
    const float slopes[HQ] = {0.25f, 0.0625f}, sinks[HQ] = {0.5f, -1.0f};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const cp_case *c = &cases[i];
        inputs in = {random_tensor(c->dtype, HQ, 3 * i),
                     random_tensor(c->dtype, HKV, 3 * i + 1),
                     random_tensor(c->dtype, HKV, 3 * i + 2),
                     device_copy(slopes, sizeof slopes),
                     device_copy(sinks, sizeof sinks),
                     random_tensor(FLASHCL_DTYPE_FP32, HQ * N / DIM, 77),
                     malloc((size_t)N * N)};
        for (size_t m = 0; m < (size_t)N * N; ++m) /* some keys masked */
            in.mask[m] = (m * 2654435761u >> 7) % 5 != 0;
        if (c->dtype == FLASHCL_DTYPE_FP64 && !has_fp64)
            continue; /* test_fp64_absent covers the core's refusal */
        for (int layout = 0; layout < 2; ++layout)
            for (int mode = 0; mode < 2; ++mode)
                run_case(c, &in, (flashcl_cp_mode)mode,
                         (flashcl_cp_layout)layout);
        for (int layout = 0; layout < 2; ++layout)
            for (int mode = 0; mode < 2; ++mode)
                run_backward_case(c, &in, (flashcl_cp_mode)mode,
                                  (flashcl_cp_layout)layout);
        if (i == 0 || i == 2) { /* bhnd shards: fp32, then sinks */
            shard_bhnd = 1;
            for (int layout = 0; layout < 2; ++layout)
                for (int mode = 0; mode < 2; ++mode) {
                    run_case(c, &in, (flashcl_cp_mode)mode,
                             (flashcl_cp_layout)layout);
                    run_backward_case(c, &in, (flashcl_cp_mode)mode,
                                      (flashcl_cp_layout)layout);
                }
            shard_bhnd = 0;
        }
        if (i == 0)
            run_faults(&in);
        free(in.q);
        free(in.k);
        free(in.v);
        free(in.bias);
        free(in.mask);
        clReleaseMemObject(in.slopes);
        clReleaseMemObject(in.sinks);
    }
    int totals[2] = {passes, failures}, sums[2];
    MPI_Reduce(totals, sums, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("cp on %d ranks: %d passed, %d failed\n", ranks, sums[0],
               sums[1]);
    flashcl_context_release(ctx);
    int any = failures, all = 0;
    MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return all ? 1 : 0;
}
