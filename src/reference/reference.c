/* The reference backend: attention unfused, as three steps per chunk of
 * (batch, head) pairs:
 *
 *   S  = scale * Q K^T          CLBlast strided-batched GEMM
 *   P  = softmax(masked S)      ref_softmax (ours), LSE out
 *   O  = (P V) / rowsum         CLBlast GEMM, then ref_store (ours)
 *
 * P V is one GEMM over all keys while seqlen_k <= REF_KEY_CHUNK. Longer
 * rows are cut into chunks of REF_KEY_CHUNK keys (the last one shorter),
 * one partial product each (one plain GEMM per head and chunk), and
 * ref_store adds the partial products with a
 * compensated sum: inside a GEMM the error of O grows with its k (CLBlast
 * sums each output element over k in one running sum), so cutting k keeps
 * the error of any seqlen_k at that of a REF_KEY_CHUNK-key problem.
 *
 * Q, K and V are first copied into packed scratch of the compute type
 * (fp32, or fp64 for fp64 storage) by ref_pack. That one copy handles every
 * layout, stride and GQA mapping, and converts fp16/bf16 on the device:
 * CLBlast's half-precision GEMM refuses devices without cl_khr_fp16, and
 * its results would be rounded to half anyway.
 *
 * Scratch is O(N^2) per head, so a call is cut into chunks of heads (and,
 * when one head alone exceeds the cap, of query rows) whose scratch fits
 * the context's limit. The buffers live in the context and are reused:
 * a call holds the context's reference lock while it enqueues, and its
 * first command waits for the last command of the previous call that used
 * the scratch (the `busy` event), so calls on different queues never share
 * scratch at the same time and no call has to block on the host. */
#include "core/scratch.h"
#include "problem/variants.h"
#include "reference/reference.h"

#include <clblast_c.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_DEFAULT_LIMIT_DIVISOR 4
#define REF_MAX_WG 64
/* Keys per P V partial product. The error of a GEMM's running sum over k
 * keys grows about like sqrt(k) to k ulps (fp32, evenly spread attention:
 * 6e-6 of max|O| at k = 64K keys, 2e-5 at 1M, 7e-5 at 4M); at 1024 it is
 * under 1e-6, the level every problem of up to 1024 keys has anyway, and
 * the partial products take dv / 1024 of S's memory (6 % at D = 64, 25 %
 * at 256), about what the error level buys: at 256 they would equal S at
 * D = 256. Problems with seqlen_k <= 1024 keep the single GEMM and their
 * scratch. */
#define REF_KEY_CHUNK 1024
#define REF_SCRATCH_ENV "FLASHCL_REFERENCE_SCRATCH_LIMIT"


typedef enum scratch_slot {
    SLOT_Q = 0,  /* chunk heads x rows x D */
    SLOT_K,      /* chunk heads x Nk x D */
    SLOT_V,      /* chunk heads x Nk x Dv */
    SLOT_S,      /* chunk heads x rows x Nk: scores, then P */
    SLOT_O,      /* key chunks x chunk heads x rows x Dv: the partial
                  * products P V (one key chunk: P V itself) */
    SLOT_FACTOR, /* chunk heads x rows: 1 / row sum */
    SLOT_COUNT
} scratch_slot;

/* The three kernels of cl/reference/reference_attention.cl, from the
 * context's program cache (compiled per dtype and variant switches). */
typedef struct ref_program {
    cl_kernel pack, softmax, store;
} ref_program;

struct reference_state {
    /* Held while a call enqueues: guards scratch, kernel arguments and
     * `busy`. */
    pthread_mutex_t lock;
    int wg_size;
    cl_mem scratch[SLOT_COUNT];
    size_t capacity[SLOT_COUNT];
    /* Completes when the last call that used the scratch is done. */
    cl_event busy;
    /* Set by flashcl_context_set_scratch_limit; 0: env var or default. */
    size_t limit;
};

/* How one call is cut into chunks. */
typedef struct ref_plan {
    size_t elem;               /* compute type size: 4 or 8 */
    uint64_t heads_total;      /* batch * heads_q */
    uint64_t heads_per_chunk;
    uint64_t rows_per_chunk;   /* seqlen_q unless one head alone is too big */
    size_t bytes[SLOT_COUNT];
    size_t total_bytes;
} ref_plan;

/* The sizes a plan depends on. */
typedef struct ref_shape {
    uint64_t heads_total, seqlen_q, seqlen_k, head_dim, head_dim_v;
    size_t elem;
} ref_shape;

/* ---- state ---------------------------------------------------------- */

static void release_state(void *opaque);

static flashcl_status get_state(flashcl_context *ctx, reference_state **out)
{
    /* The cache lock already serialises lazy per-context setup. */
    pthread_mutex_lock(&ctx->cache_lock);
    if (!ctx->backend_state) {
        reference_state *state = calloc(1, sizeof *state);
        if (state) {
            pthread_mutex_init(&state->lock, NULL);
            size_t wg = REF_MAX_WG;
            while (ctx->caps.max_work_group && wg > ctx->caps.max_work_group)
                wg /= 2;
            state->wg_size = (int)wg;
            ctx->backend_state = state;
            ctx->backend_state_release = release_state;
        }
    }
    *out = ctx->backend_state;
    pthread_mutex_unlock(&ctx->cache_lock);
    if (!*out)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "allocating the reference backend's state");
    return FLASHCL_SUCCESS;
}

/* Caller holds state->lock (or is the only user, at release). */
static void free_scratch(reference_state *state)
{
    for (int i = 0; i < SLOT_COUNT; ++i) {
        /* OpenCL deletes the buffer only after enqueued commands that use
         * it have finished, so this is safe while work is in flight. */
        if (state->scratch[i])
            clReleaseMemObject(state->scratch[i]);
        state->scratch[i] = NULL;
        state->capacity[i] = 0;
    }
    if (state->busy)
        clReleaseEvent(state->busy);
    state->busy = NULL;
}

/* The context's release hook (core.h's backend_state_release). */
static void release_state(void *opaque)
{
    reference_state *state = opaque;
    free_scratch(state);
    pthread_mutex_destroy(&state->lock);
    free(state);
    /* CLBlast's program cache is process-wide and also serves other users
     * of CLBlast in the process, so it is left alone (flashcl.h says how
     * to clear it). */
}

/* ---- scratch limit -------------------------------------------------- */

/* The cap in bytes: the setter's value, else the environment variable,
 * else a fraction of the device's largest allocation. */
static flashcl_status scratch_limit(flashcl_context *ctx, size_t set_value,
                                    size_t *limit)
{
    const uint64_t max_alloc = ctx->caps.max_alloc ? ctx->caps.max_alloc
                                                   : (uint64_t)128 << 20;
    return scratch_cap_from(ctx, set_value, REF_SCRATCH_ENV,
                            (size_t)(max_alloc / REF_DEFAULT_LIMIT_DIVISOR),
                            limit);
}

/* ---- planning ------------------------------------------------------- */

/* a * b, or UINT64_MAX when that overflows: a saturated size never fits. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

/* Partial products of P V: seqlen_k cut into REF_KEY_CHUNK-key chunks, 1
 * when it fits one (and for seqlen_k = 0). */
static uint64_t key_parts(uint64_t seqlen_k)
{
    return seqlen_k <= REF_KEY_CHUNK
               ? 1
               : (seqlen_k + REF_KEY_CHUNK - 1) / REF_KEY_CHUNK;
}

/* Elements of every slot for `heads` chunk heads of `rows` rows. */
static void slot_elements(const ref_shape *s, uint64_t heads, uint64_t rows,
                          uint64_t elements[SLOT_COUNT])
{
    const uint64_t cells = mul_sat(heads, rows);
    elements[SLOT_Q] = mul_sat(cells, s->head_dim);
    elements[SLOT_K] = mul_sat(mul_sat(heads, s->seqlen_k), s->head_dim);
    elements[SLOT_V] = mul_sat(mul_sat(heads, s->seqlen_k), s->head_dim_v);
    elements[SLOT_S] = mul_sat(cells, s->seqlen_k);
    elements[SLOT_O] =
        mul_sat(mul_sat(cells, s->head_dim_v), key_parts(s->seqlen_k));
    elements[SLOT_FACTOR] = cells;
}

/* Whether a chunk fits the cap in total and the device's largest
 * allocation per buffer. */
static bool chunk_fits(const ref_shape *s, uint64_t heads, uint64_t rows,
                       uint64_t limit, uint64_t max_alloc)
{
    uint64_t elements[SLOT_COUNT], total = 0;
    slot_elements(s, heads, rows, elements);
    for (int i = 0; i < SLOT_COUNT; ++i) {
        const uint64_t bytes = mul_sat(elements[i], s->elem);
        if (bytes > max_alloc || bytes > limit - total)
            return false;
        total += bytes;
    }
    return true;
}

/* Largest value in [1, hi] for which fits(value) holds (fits is monotone),
 * or 0. */
static uint64_t largest_fitting(const ref_shape *s, uint64_t hi, bool by_heads,
                                uint64_t limit, uint64_t max_alloc)
{
    uint64_t lo = 0;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        bool fits = by_heads ? chunk_fits(s, mid, s->seqlen_q, limit, max_alloc)
                             : chunk_fits(s, 1, mid, limit, max_alloc);
        if (fits)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Same number of chunks, sizes as even as possible. */
static uint64_t balanced(uint64_t total, uint64_t per_chunk)
{
    uint64_t chunks = (total + per_chunk - 1) / per_chunk;
    return (total + chunks - 1) / chunks;
}

static flashcl_status make_plan(flashcl_context *ctx, const ref_shape *s,
                                size_t limit, ref_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    const uint64_t max_alloc = ctx->caps.max_alloc ? ctx->caps.max_alloc
                                                   : UINT64_MAX;
    plan->elem = s->elem;
    plan->heads_total = s->heads_total;
    uint64_t heads_cap = s->heads_total < INT32_MAX ? s->heads_total : INT32_MAX;
    uint64_t heads = largest_fitting(s, heads_cap, true, limit, max_alloc);
    uint64_t rows = s->seqlen_q;
    if (heads == 0) { /* one head is too big: cut its query rows */
        heads = 1;
        rows = largest_fitting(s, s->seqlen_q, false, limit, max_alloc);
        if (rows == 0) {
            uint64_t need[SLOT_COUNT], total = 0;
            slot_elements(s, 1, 1, need);
            for (int i = 0; i < SLOT_COUNT; ++i)
                total += mul_sat(need[i], s->elem);
            return set_error(
                ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                "reference backend: the scratch limit of %zu bytes is below "
                "the %llu bytes of the smallest chunk (K and V of one head "
                "plus one query row); raise it with "
                "flashcl_context_set_scratch_limit or %s",
                limit, (unsigned long long)total, REF_SCRATCH_ENV);
        }
        rows = balanced(s->seqlen_q, rows);
    } else {
        heads = balanced(s->heads_total, heads);
    }
    plan->heads_per_chunk = heads;
    plan->rows_per_chunk = rows;
    uint64_t elements[SLOT_COUNT];
    slot_elements(s, heads, rows, elements);
    for (int i = 0; i < SLOT_COUNT; ++i) {
        plan->bytes[i] = (size_t)(elements[i] * s->elem);
        plan->total_bytes += plan->bytes[i];
    }
    return FLASHCL_SUCCESS;
}

static size_t compute_size(flashcl_dtype dtype)
{
    return dtype == FLASHCL_DTYPE_FP64 ? sizeof(double) : sizeof(float);
}

static ref_shape shape_of_problem(const problem *p)
{
    ref_shape s = {(uint64_t)p->batch * (uint64_t)p->heads_q,
                   (uint64_t)p->seqlen_q, (uint64_t)p->seqlen_k,
                   (uint64_t)p->head_dim, (uint64_t)p->head_dim_v,
                   compute_size(p->dtype)};
    return s;
}

/* ---- programs ------------------------------------------------------- */

flashcl_status reference_kernel_options(flashcl_context *ctx,
                                        const problem *p, int wg_size,
                                        char *text, size_t cap)
{
    options_buf out = options_begin(text, cap);
    options_add(&out, "-cl-std=CL1.2%s -DFLASHCL_DTYPE=%d -DREF_WG=%d",
                verbose_enabled() ? "" : " -w", (int)p->dtype, wg_size);
    variants_add_defines(p, &out);
    return out.overflow ? set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                                    "the reference kernels' build options "
                                    "do not fit %zu bytes",
                                    cap)
                        : FLASHCL_SUCCESS;
}

/* The reference kernels compiled with the problem's dtype and variant
 * switches (the same -D names the fused kernels read). */
static flashcl_status get_program(flashcl_context *ctx,
                                  const reference_state *state,
                                  const problem *p, ref_program *out)
{
    char options[512];
    flashcl_status status = reference_kernel_options(
        ctx, p, state->wg_size, options, sizeof options);
    if (status != FLASHCL_SUCCESS)
        return status;
    const program_request request = {
        "reference_attention.cl", options,
        {"ref_pack", "ref_softmax", "ref_store"}, 3};
    compiled_program *program;
    status = program_cache_get(ctx, &request, &program, NULL);
    if (status != FLASHCL_SUCCESS)
        return status;
    out->pack = program->kernels[0];
    out->softmax = program->kernels[1];
    out->store = program->kernels[2];
    return FLASHCL_SUCCESS;
}

/* ---- scratch buffers ------------------------------------------------ */

/* Grow the buffers to the plan. New S and O buffers are zeroed once: a
 * GEMM with beta = 0 may still read C, and 0 * NaN garbage would be NaN.
 * Caller holds state->lock; `queue` already waits for `busy`. */
static flashcl_status ensure_scratch(flashcl_context *ctx,
                                     reference_state *state,
                                     cl_command_queue queue,
                                     const ref_plan *plan)
{
    for (int i = 0; i < SLOT_COUNT; ++i) {
        size_t need = plan->bytes[i] ? plan->bytes[i] : 16;
        if (state->scratch[i] && state->capacity[i] >= need)
            continue;
        if (state->scratch[i])
            clReleaseMemObject(state->scratch[i]);
        state->capacity[i] = 0;
        cl_int err;
        state->scratch[i] = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, need,
                                           NULL, &err);
        if (err == CL_SUCCESS && (i == SLOT_S || i == SLOT_O)) {
            const cl_uchar zero = 0;
            err = clEnqueueFillBuffer(queue, state->scratch[i], &zero, 1, 0,
                                      need, 0, NULL, NULL);
        }
        if (err != CL_SUCCESS) {
            if (state->scratch[i])
                clReleaseMemObject(state->scratch[i]);
            state->scratch[i] = NULL;
            return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                             "reference backend: allocating %zu bytes of "
                             "scratch failed: %s",
                             need, cl_error_name(err));
        }
        state->capacity[i] = need;
    }
    return FLASHCL_SUCCESS;
}

/* ---- one chunk ------------------------------------------------------ */

/* What every kernel of one chunk needs to know. */
typedef struct chunk {
    const problem *p;
    reference_state *state;
    const ref_program *program;
    cl_command_queue queue;
    cl_long bh0;   /* first (batch * heads_q + head) of the chunk */
    cl_int count;  /* heads in the chunk */
    cl_int row0, rows;
} chunk;

/* One kernel argument: its size and where its value is. */
typedef struct kernel_arg {
    size_t size;
    const void *value;
} kernel_arg;
#define KARG(x) {sizeof(x), &(x)}

/* Sets arguments 0..count-1; the first failure is returned. */
static cl_int set_arg_list(cl_kernel kernel, const kernel_arg *args,
                           cl_uint count)
{
    cl_int err = CL_SUCCESS;
    for (cl_uint i = 0; i < count && err == CL_SUCCESS; ++i)
        err = clSetKernelArg(kernel, i, args[i].size, args[i].value);
    return err;
}

/* Packs rows [row0, row0 + rows) of every chunk head of one input. */
static cl_int enqueue_pack(const chunk *c, cl_mem source,
                           const tensor_view *view, cl_mem dest,
                           cl_int row0, cl_int rows, cl_int dim, cl_int group)
{
    cl_kernel k = c->program->pack;
    const cl_ulong base = view->base;
    const cl_ulong4 stride = ulong4_from(view->stride);
    const cl_int heads_q = (cl_int)c->p->heads_q;
    cl_int err = CL_SUCCESS;
    const kernel_arg args[] = {
        KARG(source), KARG(base), KARG(stride), KARG(dest), KARG(rows),
        KARG(dim), KARG(row0), KARG(c->bh0), KARG(heads_q), KARG(group)
    };
    if (err == CL_SUCCESS)
        err = set_arg_list(k, args, sizeof args / sizeof args[0]);
    const size_t global[3] = {(size_t)dim, (size_t)rows, (size_t)c->count};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(c->queue, k, 3, NULL, global, NULL, 0,
                                     NULL, NULL);
    return err;
}

static cl_int enqueue_softmax(flashcl_context *ctx, const chunk *c)
{
    const problem *p = c->p;
    cl_kernel k = c->program->softmax;
    const cl_mem lse = p->lse.present ? p->lse.given : ctx->dummy;
    const cl_ulong lse_base = p->lse.base;
    const cl_ulong4 lse_stride = ulong4_from(p->lse.stride);
    const cl_int nk = (cl_int)p->seqlen_k, heads_q = (cl_int)p->heads_q;
    const cl_long diag = p->diag, left = p->left, right = p->right;
    const cl_int write_lse = p->lse.present ? 1 : 0;
    cl_int err = CL_SUCCESS;
    const kernel_arg args[] = {
        KARG(c->state->scratch[SLOT_S]), KARG(c->state->scratch[SLOT_FACTOR]),
        KARG(lse), KARG(lse_base), KARG(lse_stride), KARG(c->rows), KARG(nk),
        KARG(c->row0), KARG(c->bh0), KARG(heads_q), KARG(diag), KARG(left),
        KARG(right), KARG(write_lse)
    };
    if (err == CL_SUCCESS)
        err = set_arg_list(k, args, sizeof args / sizeof args[0]);
    /* Then the variants' arguments, as the kernels' take them. */
    cl_uint index = (cl_uint)(sizeof args / sizeof args[0]);
    if (err == CL_SUCCESS)
        err = set_variant_args(k, &index, &p->vargs,
                               p->dtype == FLASHCL_DTYPE_FP64);
    const size_t wg = (size_t)c->state->wg_size;
    const size_t global[3] = {wg, (size_t)c->rows, (size_t)c->count};
    const size_t local[3] = {wg, 1, 1};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(c->queue, k, 3, NULL, global, local, 0,
                                     NULL, NULL);
    return err;
}

static cl_int enqueue_store(const chunk *c)
{
    const problem *p = c->p;
    cl_kernel k = c->program->store;
    const cl_ulong base = p->o.base;
    const cl_ulong4 stride = ulong4_from(p->o.stride);
    const cl_int dim = (cl_int)p->head_dim_v, heads_q = (cl_int)p->heads_q;
    const cl_int has_keys = p->seqlen_k > 0;
    const cl_int parts = (cl_int)key_parts((uint64_t)p->seqlen_k);
    /* Partial products [key chunk][chunk head][row][column]. */
    const cl_ulong part_stride =
        (cl_ulong)c->count * (cl_ulong)c->rows * (cl_ulong)dim;
    cl_int err = CL_SUCCESS;
    const kernel_arg args[] = {
        KARG(c->state->scratch[SLOT_O]), KARG(c->state->scratch[SLOT_FACTOR]),
        KARG(p->o.given), KARG(base), KARG(stride), KARG(c->rows), KARG(dim),
        KARG(c->row0), KARG(c->bh0), KARG(heads_q), KARG(has_keys),
        KARG(parts), KARG(part_stride)
    };
    if (err == CL_SUCCESS)
        err = set_arg_list(k, args, sizeof args / sizeof args[0]);
    const size_t global[3] = {(size_t)dim, (size_t)c->rows, (size_t)c->count};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(c->queue, k, 3, NULL, global, NULL, 0,
                                     NULL, NULL);
    return err;
}


/* One strided-batched row-major GEMM C = alpha * A op(B), in the compute
 * type of the problem; offsets and strides in elements. */
typedef struct gemm_call {
    const char *what;
    CLBlastTranspose b_transpose;
    size_t m, n, k;
    double alpha;
    cl_mem a, b, c;
    size_t a_ld, b_ld, c_ld, a_stride, b_stride, c_stride, batch;
    size_t a_offset, b_offset, c_offset;
} gemm_call;

static flashcl_status run_gemm(flashcl_context *ctx, cl_command_queue queue,
                               flashcl_dtype dtype, const gemm_call *g)
{
    CLBlastStatusCode code;
    const char *routine;
    if (g->batch == 1 && dtype == FLASHCL_DTYPE_FP64) {
        routine = "CLBlastDgemm";
        code = CLBlastDgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                            g->b_transpose, g->m, g->n, g->k, g->alpha, g->a,
                            g->a_offset, g->a_ld, g->b, g->b_offset, g->b_ld,
                            0.0, g->c, g->c_offset, g->c_ld, &queue, NULL);
    } else if (g->batch == 1) {
        routine = "CLBlastSgemm";
        code = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                            g->b_transpose, g->m, g->n, g->k, (float)g->alpha,
                            g->a, g->a_offset, g->a_ld, g->b, g->b_offset,
                            g->b_ld, 0.0f, g->c, g->c_offset, g->c_ld, &queue,
                            NULL);
    } else if (dtype == FLASHCL_DTYPE_FP64) {
        routine = "CLBlastDgemmStridedBatched";
        code = CLBlastDgemmStridedBatched(
            CLBlastLayoutRowMajor, CLBlastTransposeNo, g->b_transpose, g->m,
            g->n, g->k, g->alpha, g->a, g->a_offset, g->a_ld, g->a_stride,
            g->b, g->b_offset, g->b_ld, g->b_stride, 0.0, g->c, g->c_offset,
            g->c_ld, g->c_stride, g->batch, &queue, NULL);
    } else {
        routine = "CLBlastSgemmStridedBatched";
        code = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, CLBlastTransposeNo, g->b_transpose, g->m,
            g->n, g->k, (float)g->alpha, g->a, g->a_offset, g->a_ld,
            g->a_stride, g->b, g->b_offset, g->b_ld, g->b_stride, 0.0f, g->c,
            g->c_offset, g->c_ld, g->c_stride, g->batch, &queue, NULL);
    }
    if (code != CLBlastSuccess)
        return set_error(ctx, FLASHCL_ERROR_BACKEND,
                         "reference backend: %s for %s (m=%zu n=%zu k=%zu "
                         "batch=%zu) failed with CLBlast status %d",
                         routine, g->what, g->m, g->n, g->k, g->batch,
                         (int)code);
    return FLASHCL_SUCCESS;
}

/* S = scale * Q K^T for the chunk. */
static flashcl_status gemm_scores(flashcl_context *ctx, const chunk *c)
{
    const problem *p = c->p;
    const size_t rows = (size_t)c->rows, nk = (size_t)p->seqlen_k,
                 d = (size_t)p->head_dim;
    const gemm_call g = {
        "S = scale * Q K^T", CLBlastTransposeYes, rows, nk, d, p->scale,
        c->state->scratch[SLOT_Q], c->state->scratch[SLOT_K],
        c->state->scratch[SLOT_S], d, d, nk, rows * d, nk * d, rows * nk,
        (size_t)c->count, 0, 0, 0};
    return run_gemm(ctx, c->queue, p->dtype, &g);
}

/* O' = P V for the chunk: one GEMM when the keys fit one key chunk, else
 * the partial products of the key chunks, [key chunk][head][row][column],
 * which ref_store adds up. */
static flashcl_status gemm_values(flashcl_context *ctx, const chunk *c)
{
    const problem *p = c->p;
    const size_t rows = (size_t)c->rows, nk = (size_t)p->seqlen_k,
                 dv = (size_t)p->head_dim_v, count = (size_t)c->count;
    cl_mem s = c->state->scratch[SLOT_S], v = c->state->scratch[SLOT_V],
           o = c->state->scratch[SLOT_O];
    if (key_parts(nk) == 1) {
        const gemm_call g = {"O = P V", CLBlastTransposeNo, rows, dv, nk, 1.0,
                             s, v, o, nk, dv, dv, rows * nk, nk * dv,
                             rows * dv, count, 0, 0, 0};
        return run_gemm(ctx, c->queue, p->dtype, &g);
    }
    const size_t parts = (size_t)key_parts(nk);
    const size_t part_stride = count * rows * dv;
    /* One plain GEMM per (head, key chunk), never a strided batch with
     * offsets: CLBlast's strided-batched GEMM returned wrong products for
     * the heads after the first here (on PoCL and on Intel's CPU runtime;
     * issue 42, test long_keys_many_rows). */
    for (size_t h = 0; h < count; ++h)
        for (size_t part = 0; part < parts; ++part) {
            const size_t first = part * REF_KEY_CHUNK;
            const size_t keys =
                nk - first < REF_KEY_CHUNK ? nk - first : REF_KEY_CHUNK;
            const gemm_call g = {
                "O = P V (one head, one key chunk)", CLBlastTransposeNo,
                rows, dv, keys, 1.0, s, v, o, nk, dv, dv, 0, 0, 0, 1,
                h * rows * nk + first, (h * nk + first) * dv,
                part * part_stride + h * rows * dv};
            flashcl_status status = run_gemm(ctx, c->queue, p->dtype, &g);
            if (status != FLASHCL_SUCCESS)
                return status;
        }
    return FLASHCL_SUCCESS;
}

static flashcl_status cl_failed(flashcl_context *ctx, const char *what,
                                cl_int err)
{
    return set_error(ctx, FLASHCL_ERROR_OPENCL, "reference backend: %s: %s",
                     what, cl_error_name(err));
}

static flashcl_status run_chunk(flashcl_context *ctx, const chunk *c)
{
    const problem *p = c->p;
    reference_state *s = c->state;
    const cl_int nk = (cl_int)p->seqlen_k;
    const cl_int group = (cl_int)(problem_group_size(p));
    cl_int err = CL_SUCCESS;
    if (nk > 0) {
        /* K and V of a head serve all its row chunks: pack them once. */
        if (c->row0 == 0)
            err = enqueue_pack(c, p->k.given, &p->k, s->scratch[SLOT_K], 0,
                               nk, (cl_int)p->head_dim, group);
        if (err == CL_SUCCESS && c->row0 == 0)
            err = enqueue_pack(c, p->v.given, &p->v, s->scratch[SLOT_V], 0,
                               nk, (cl_int)p->head_dim_v, group);
        if (err == CL_SUCCESS)
            err = enqueue_pack(c, p->q.given, &p->q, s->scratch[SLOT_Q],
                               c->row0, c->rows, (cl_int)p->head_dim, 1);
        if (err != CL_SUCCESS)
            return cl_failed(ctx, "enqueueing ref_pack", err);
        flashcl_status status = gemm_scores(ctx, c);
        if (status != FLASHCL_SUCCESS)
            return status;
    }
    err = enqueue_softmax(ctx, c);
    if (err != CL_SUCCESS)
        return cl_failed(ctx, "enqueueing ref_softmax", err);
    if (nk > 0) {
        flashcl_status status = gemm_values(ctx, c);
        if (status != FLASHCL_SUCCESS)
            return status;
    }
    err = enqueue_store(c);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : cl_failed(ctx, "enqueueing ref_store", err);
}

/* ---- the call ------------------------------------------------------- */

flashcl_status reference_check_in_order(flashcl_context *ctx,
                                        cl_command_queue queue)
{
    cl_command_queue_properties props = 0;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props,
                                       &props, NULL);
    if (err != CL_SUCCESS)
        return cl_failed(ctx, "querying the queue's properties", err);
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "queue: the reference backend needs an in-order "
                         "queue (CLBlast chains its kernels by queue order)");
    return FLASHCL_SUCCESS;
}

/* First command of a call: waits for the caller's events and for the
 * previous user of the scratch; in-order queue order does the rest. */
static flashcl_status enqueue_entry_barrier(flashcl_context *ctx,
                                            reference_state *state,
                                            cl_command_queue queue,
                                            cl_uint num_wait,
                                            const cl_event *wait_list)
{
    cl_event stack_list[16];
    cl_event *list = stack_list;
    cl_uint count = num_wait + (state->busy ? 1 : 0);
    if (count > 16 && !(list = malloc(count * sizeof *list)))
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "allocating the event wait list");
    for (cl_uint i = 0; i < num_wait; ++i)
        list[i] = wait_list[i];
    if (state->busy)
        list[num_wait] = state->busy;
    cl_int err = count ? clEnqueueBarrierWithWaitList(queue, count, list, NULL)
                       : CL_SUCCESS;
    if (list != stack_list)
        free(list);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : cl_failed(ctx, "enqueueing the entry barrier",
                                         err);
}

/* Last command of a call: a marker that completes after every command of
 * the call (CLBlast's own event would cover only its last kernel). It
 * becomes the scratch's `busy` event and the caller's event. */
static flashcl_status enqueue_exit_marker(flashcl_context *ctx,
                                          reference_state *state,
                                          cl_command_queue queue,
                                          cl_event *event)
{
    cl_event marker = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(queue, 0, NULL, &marker);
    if (err != CL_SUCCESS) {
        /* Without a marker nobody could wait for this call: finish it. */
        clFinish(queue);
        if (state->busy)
            clReleaseEvent(state->busy);
        state->busy = NULL;
        return cl_failed(ctx, "enqueueing the exit marker", err);
    }
    /* Calls on other queues wait on `busy`; OpenCL 1.2 (5.13) wants the
     * queue that holds it flushed before another queue waits on it. */
    err = clFlush(queue);
    if (state->busy)
        clReleaseEvent(state->busy);
    state->busy = marker;
    if (err != CL_SUCCESS)
        return cl_failed(ctx, "flushing after the exit marker", err);
    if (event) {
        clRetainEvent(marker);
        *event = marker;
    }
    return FLASHCL_SUCCESS;
}

static flashcl_status run_chunks(flashcl_context *ctx, reference_state *state,
                                 const ref_program *program,
                                 cl_command_queue queue, const problem *p,
                                 const ref_plan *plan)
{
    chunk c = {p, state, program, queue, 0, 0, 0, 0};
    for (uint64_t bh0 = 0; bh0 < plan->heads_total;
         bh0 += plan->heads_per_chunk) {
        uint64_t left = plan->heads_total - bh0;
        c.bh0 = (cl_long)bh0;
        c.count = (cl_int)(left < plan->heads_per_chunk ? left
                                                        : plan->heads_per_chunk);
        for (uint64_t row0 = 0; row0 < (uint64_t)p->seqlen_q;
             row0 += plan->rows_per_chunk) {
            uint64_t rows_left = (uint64_t)p->seqlen_q - row0;
            c.row0 = (cl_int)row0;
            c.rows = (cl_int)(rows_left < plan->rows_per_chunk
                                  ? rows_left
                                  : plan->rows_per_chunk);
            flashcl_status status = run_chunk(ctx, &c);
            if (status != FLASHCL_SUCCESS)
                return status;
        }
    }
    return FLASHCL_SUCCESS;
}

/* Everything after the lock is taken. */
static flashcl_status launch_locked(flashcl_context *ctx,
                                    reference_state *state,
                                    cl_command_queue queue, const problem *p,
                                    cl_uint num_wait,
                                    const cl_event *wait_list, cl_event *event)
{
    size_t limit;
    flashcl_status status = scratch_limit(ctx, state->limit, &limit);
    ref_plan plan;
    const ref_shape shape = shape_of_problem(p);
    if (status == FLASHCL_SUCCESS)
        status = make_plan(ctx, &shape, limit, &plan);
    ref_program program;
    if (status == FLASHCL_SUCCESS)
        status = get_program(ctx, state, p, &program);
    if (status != FLASHCL_SUCCESS)
        return status; /* nothing enqueued yet */
    status = enqueue_entry_barrier(ctx, state, queue, num_wait, wait_list);
    if (status != FLASHCL_SUCCESS)
        return status;
    status = ensure_scratch(ctx, state, queue, &plan);
    if (status == FLASHCL_SUCCESS)
        status = run_chunks(ctx, state, &program, queue, p, &plan);
    /* Also after a failure: commands already enqueued may use scratch. */
    flashcl_status marker_status =
        enqueue_exit_marker(ctx, state, queue,
                            status == FLASHCL_SUCCESS ? event : NULL);
    return status != FLASHCL_SUCCESS ? status : marker_status;
}

flashcl_status launch_reference(flashcl_context *ctx, cl_command_queue queue,
                                const problem *p, cl_uint num_wait,
                                const cl_event *wait_list, cl_event *event)
{
    flashcl_status status = reference_check_in_order(ctx, queue);
    reference_state *state = NULL;
    if (status == FLASHCL_SUCCESS)
        status = get_state(ctx, &state);
    if (status != FLASHCL_SUCCESS)
        return status;
    pthread_mutex_lock(&state->lock);
    status = launch_locked(ctx, state, queue, p, num_wait, wait_list, event);
    pthread_mutex_unlock(&state->lock);
    return status;
}

/* ---- public scratch API --------------------------------------------- */

flashcl_status flashcl_context_set_scratch_limit(flashcl_context *ctx,
                                                 size_t bytes)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    reference_state *state;
    flashcl_status status = get_state(ctx, &state);
    if (status != FLASHCL_SUCCESS)
        return status;
    pthread_mutex_lock(&state->lock);
    state->limit = bytes;
    pthread_mutex_unlock(&state->lock);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_get_scratch_limit(flashcl_context *ctx,
                                                 size_t *bytes)
{
    flashcl_status status = begin_call_out(ctx, bytes, "bytes");
    if (status != FLASHCL_SUCCESS)
        return status;
    reference_state *state;
    status = get_state(ctx, &state);
    if (status != FLASHCL_SUCCESS)
        return status;
    pthread_mutex_lock(&state->lock);
    status = scratch_limit(ctx, state->limit, bytes);
    pthread_mutex_unlock(&state->lock);
    return status;
}

flashcl_status flashcl_context_release_scratch(flashcl_context *ctx)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    pthread_mutex_lock(&ctx->cache_lock); /* guards the lazy creation */
    reference_state *state = ctx->backend_state;
    pthread_mutex_unlock(&ctx->cache_lock);
    context_scratch_release(ctx, false);
    if (!state)
        return FLASHCL_SUCCESS; /* never used: nothing to free */
    pthread_mutex_lock(&state->lock);
    free_scratch(state);
    pthread_mutex_unlock(&state->lock);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_reference_scratch_bytes(flashcl_context *ctx,
                                               const flashcl_attention_desc *desc,
                                               size_t *bytes)
{
    problem p;
    size_t limit = 0;
    ref_plan plan;
    flashcl_status status = problem_begin_call(ctx, desc, PROBLEM_FOR_PLANNING,
                                               bytes, "bytes", &p);
    if (status == FLASHCL_SUCCESS)
        status = flashcl_context_get_scratch_limit(ctx, &limit);
    if (status != FLASHCL_SUCCESS)
        return status;
    const ref_shape shape = shape_of_problem(&p);
    /* An empty problem runs nothing and needs no scratch. */
    plan.total_bytes = 0;
    if (shape.heads_total && shape.seqlen_q)
        status = make_plan(ctx, &shape, limit, &plan);
    if (status == FLASHCL_SUCCESS)
        *bytes = plan.total_bytes;
    return status;
}

void flashcl_clear_reference_cache(void) { CLBlastClearCache(); }
