/* A descriptor fuzzer: random valid calls, then 1-4 random mutations of
 * any field (shapes, dtypes and enums out of range, NaN and huge scalars,
 * tensors with NULL, aliased or foreign-sized buffers, wild offsets and
 * strides, every variant's and inference field's tensors and counts (the
 * infer_status counters included; tests/fuzz_infer.c fuzzes the values
 * in the device buffers),
 * struct_size), each passed to flashcl_describe_variant and
 * flashcl_attention_forward on the default device; every fourth call is a
 * flashcl_combine_partials with its own wild fields, and another fourth
 * a flashcl_attention_backward (and flashcl_describe_backward) with a
 * wild backward descriptor too. What must hold, for every call:
 *
 *   - the status is one of the enum's, and an error comes with a message
 *     (flashcl_context_last_error non-empty);
 *   - a call that fails writes nothing: O and LSE keep their poison and
 *     the K/V buffers (which an append writes) their contents;
 *   - nothing crashes, leaks or reads out of bounds (run under ASan/UBSan
 *     in CI: scripts/test.sh's sanitizer build runs it too).
 *
 * Deterministic: FLASHCL_FUZZ_SEED (default 1) and FLASHCL_FUZZ_ITERS
 * (default 1500; CI's figure). Valid calls that reach a kernel compile
 * (slow on PoCL) are capped at FLASHCL_FUZZ_RUNS (default 24); the rest
 * of the valid calls are described only. Prints one line per finding and
 * "fuzz_desc: N passed, N failed" at the end. */
#include "flashcl.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_rng.h"

enum { DATA_BYTES = 256 * 1024, SMALL_BYTES = 4096, POISON = 0xA5, TAIL = 64 };

typedef struct pool {
    cl_mem data[6]; /* q, k, v, o, bias, mask pools */
    cl_mem lse, ints, floats, tiny;
} pool;


static int64_t pick(const int64_t *values, size_t n)
{
    return values[next() % n];
}
#define PICK(...)                                                              \
    pick((const int64_t[]){__VA_ARGS__},                                       \
         sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static cl_mem make_buffer(cl_context cl, size_t bytes, int fill)
{
    cl_int err;
    unsigned char *init = malloc(bytes);
    if (!init)
        return NULL;
    for (size_t i = 0; i < bytes; ++i)
        init[i] = fill >= 0 ? (unsigned char)fill : (unsigned char)next();
    cl_mem mem = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                bytes, init, &err);
    free(init);
    return err == CL_SUCCESS ? mem : NULL;
}

/* Small int32 values (lengths, prefix sums, page indices), some wild. */
static cl_mem int_buffer(cl_context cl)
{
    int32_t values[SMALL_BYTES / 4];
    for (size_t i = 0; i < sizeof values / sizeof values[0]; ++i)
        values[i] = (int32_t)(next() % 8 == 0 ? (int64_t)PICK(-1, -100, INT32_MAX,
                                                              INT32_MIN, 1 << 20)
                                              : (int64_t)(i * 3 % 70));
    cl_int err;
    cl_mem mem = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                sizeof values, values, &err);
    return err == CL_SUCCESS ? mem : NULL;
}

static cl_mem any_buffer(const pool *p)
{
    switch (next() % 6) {
    case 0: return NULL;
    case 1: return p->tiny;
    case 2: return p->ints;
    case 3: return p->lse;
    default: return p->data[next() % 6];
    }
}

static void wild_tensor(const pool *p, flashcl_tensor *t)
{
    switch (next() % 4) {
    case 0:
        t->buffer = any_buffer(p);
        break;
    case 1:
        t->offset = (size_t)PICK(1, 2, 3, 6, 4096, DATA_BYTES, DATA_BYTES - 2,
                                 INT64_MAX, -1);
        break;
    default: {
        size_t *s[4] = {&t->stride_batch, &t->stride_head, &t->stride_seq,
                        &t->stride_dim};
        *s[next() % 4] = (size_t)PICK(0, 1, 2, 3, 7, 64, 1 << 20, INT64_MAX,
                                      -1, (int64_t)1 << 62);
    }
    }
}

/* A valid call on small shapes, packed tensors. */
static void base_desc(const pool *p, flashcl_attention_desc *d)
{
    *d = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    d->batch = PICK(1, 2);
    d->heads_kv = PICK(1, 2);
    d->heads_q = d->heads_kv * PICK(1, 2);
    d->seqlen_q = PICK(1, 3, 17, 40);
    d->seqlen_k = PICK(1, 5, 33, 64);
    d->head_dim = PICK(8, 16, 32);
    d->dtype = (flashcl_dtype)PICK(FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16);
    d->layout = (flashcl_layout)PICK(0, 1);
    d->causal = (int)PICK(0, 1);
    d->q.buffer = p->data[0];
    d->k.buffer = p->data[1];
    d->v.buffer = p->data[2];
    d->o.buffer = p->data[3];
    if (next() % 2)
        d->lse.buffer = p->lse;
}

static void mutate(const pool *p, flashcl_attention_desc *d)
{
    switch (next() % 25) {
    case 0: d->batch = PICK(-1, 0, 3, INT64_MAX, (int64_t)1 << 40); break;
    case 1: d->heads_q = PICK(-1, 0, 3, 5, INT64_MAX); break;
    case 2: d->heads_kv = PICK(-1, 0, 3, 7, INT64_MAX); break;
    case 3: d->seqlen_q = PICK(-1, 0, 1 << 20, INT64_MAX); break;
    case 4: d->seqlen_k = PICK(-1, 0, 1 << 20, INT64_MAX); break;
    case 5: d->head_dim = PICK(-5, 0, 1, 255, 256, 257, 1 << 30); break;
    case 6: d->head_dim_v = PICK(-1, 1, 40, 257, INT64_MAX); break;
    case 7: d->dtype = (flashcl_dtype)PICK(-1, 2, 3, 4, 99); break;
    case 8:
        d->layout = (flashcl_layout)PICK(-1, 2, 7);
        d->causal_align = (flashcl_causal_align)PICK(-3, 0, 1, 2);
        d->backend = (flashcl_backend)PICK(-1, 0, 1, 3);
        break;
    case 9:
        d->scale = (float)(next() % 2 ? NAN : PICK(-1, 0, 1) * INFINITY);
        d->explicit_scale = (int)PICK(0, 1, 5);
        break;
    case 10: wild_tensor(p, &d->q); break;
    case 11: wild_tensor(p, next() % 2 ? &d->k : &d->v); break;
    case 12: /* outputs: wild, or aliased with an input */
        if (next() % 2)
            wild_tensor(p, next() % 2 ? &d->o : &d->lse);
        else
            d->o.buffer = d->lse.buffer = p->data[next() % 3];
        break;
    case 13:
        d->window = (int)PICK(0, 1, 2);
        d->window_left = PICK(-2, -1, 0, 3, INT64_MAX, INT64_MIN);
        d->window_right = PICK(-2, -1, 0, 3, INT64_MAX, INT64_MIN);
        break;
    case 14:
        d->softcap = (float)(next() % 2 ? NAN : PICK(-1, 0, 1) * INFINITY);
        if (next() % 2)
            d->softcap = (float)PICK(-5, 1, 50) * 1e-3f * (float)(next() % 2000);
        break;
    case 15:
        d->alibi_slopes.buffer = any_buffer(p);
        if (next() % 2)
            wild_tensor(p, &d->alibi_slopes);
        d->sinks.buffer = next() % 2 ? p->floats : NULL;
        break;
    case 16:
        d->bias.buffer = any_buffer(p);
        d->bias_dtype = (flashcl_dtype)PICK(-1, 0, 1, 2, 3, 9);
        if (next() % 2)
            wild_tensor(p, &d->bias);
        break;
    case 17:
        d->mask.buffer = any_buffer(p);
        if (next() % 2)
            wild_tensor(p, &d->mask);
        break;
    case 18: d->num_splits = (int)PICK(-1, 0, 1, 3, 64, 256, 257, INT_MAX); break;
    case 19: /* KV cache, append */
        d->cache_seqlens.buffer = next() % 4 ? p->ints : any_buffer(p);
        d->kv_batch = PICK(-1, 0, 1, 2, 5, INT64_MAX);
        if (next() % 2) {
            d->k_new.buffer = p->data[4];
            d->v_new.buffer = next() % 4 ? p->data[5] : any_buffer(p);
            d->seqlen_new = PICK(-1, 0, 1, 4, INT64_MAX);
        }
        if (next() % 3 == 0)
            d->cache_batch_idx.buffer = any_buffer(p);
        break;
    case 20: /* varlen */
        d->cu_seqlens_q.buffer = next() % 4 ? p->ints : any_buffer(p);
        d->cu_seqlens_k.buffer = next() % 2 ? p->ints : NULL;
        d->max_seqlen_q = PICK(-1, 0, 1, 40, INT64_MAX);
        d->max_seqlen_k = PICK(-1, 0, 1, 64, INT64_MAX);
        if (next() % 2)
            wild_tensor(p, &d->cu_seqlens_q);
        break;
    case 21: /* paged */
        d->cache_seqlens.buffer = p->ints;
        d->block_table.buffer = next() % 4 ? p->ints : any_buffer(p);
        d->page_size = PICK(-16, 0, 8, 15, 16, 32, 65536, 65552);
        d->max_pages = PICK(-1, 0, 1, 4, INT64_MAX);
        d->kv_batch = PICK(0, 1, 4, 16);
        break;
    case 22: /* smaller than any descriptor, or a newer, larger one (the
              * bytes past ours live in the caller's wrapper: see main) */
        d->struct_size = (size_t)PICK(0, 8, 100, sizeof *d - 8,
                                      sizeof *d + 8, sizeof *d + TAIL);
        break;
    case 23: /* the status counters: anywhere, or over another tensor */
        d->infer_status.buffer = next() % 2 ? p->lse : any_buffer(p);
        if (next() % 2)
            wild_tensor(p, &d->infer_status);
        if (next() % 2)
            d->cache_seqlens.buffer = p->ints;
        break;
    default:
        d->allow_tf32 = (int)PICK(0, 1, -1);
        break;
    }
}

/* flashcl_combine_partials: a valid merge, then the same kind of wild
 * fields. */
static void combine_desc(const pool *p, flashcl_combine_desc *c)
{
    *c = (flashcl_combine_desc)FLASHCL_COMBINE_DESC_INIT;
    c->num_partials = PICK(1, 2, 3);
    c->batch = PICK(1, 2);
    c->heads = PICK(1, 2);
    c->seqlen_q = PICK(1, 5, 17);
    c->head_dim_v = PICK(1, 16, 64);
    c->dtype = (flashcl_dtype)PICK(FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16);
    c->layout = (flashcl_layout)PICK(0, 1);
    c->o_partial.buffer = p->data[4];
    c->lse_partial.buffer = p->floats;
    c->o.buffer = p->data[3];
    if (next() % 2)
        c->lse.buffer = p->lse;
    const int mutations = (int)(next() % 4);
    for (int m = 0; m < mutations; ++m) {
        switch (next() % 9) {
        case 0: c->num_partials = PICK(-1, 0, 257, INT64_MAX); break;
        case 1: c->batch = PICK(-1, 0, INT64_MAX, (int64_t)1 << 33); break;
        case 2: c->heads = PICK(-1, 0, INT64_MAX); break;
        case 3: c->seqlen_q = PICK(-1, 0, 1 << 20, INT64_MAX); break;
        case 4: c->head_dim_v = PICK(-1, 0, 257, 1 << 20, INT64_MAX); break;
        case 5:
            c->dtype = (flashcl_dtype)PICK(-1, 3, 4, 77);
            c->layout = (flashcl_layout)PICK(-1, 2);
            break;
        case 6: {
            flashcl_tensor *t[4] = {&c->o_partial, &c->lse_partial, &c->o,
                                    &c->lse};
            wild_tensor(p, t[next() % 4]);
            break;
        }
        case 7:
            c->o_partial_stride = (size_t)PICK(0, 1, 1 << 20, INT64_MAX, -1);
            c->lse_partial_stride = (size_t)PICK(0, 1, 1 << 20, INT64_MAX);
            break;
        default:
            c->struct_size = (size_t)PICK(0, 8, sizeof *c - 8, sizeof *c + 8);
            break;
        }
    }
}

/* flashcl_attention_backward: the forward's (mutated) descriptor, and a
 * backward descriptor whose outputs lie in the O pool past any O view,
 * then 0-2 wild tensors or a wrong struct_size. Returns the number of
 * mutations. */
static int backward_desc(const pool *p, flashcl_backward_desc *b)
{
    *b = (flashcl_backward_desc)FLASHCL_BACKWARD_DESC_INIT;
    b->d_o.buffer = p->data[0];
    b->d_q = (flashcl_tensor){p->data[3], 1 << 16, 0, 0, 0, 0};
    b->d_k = (flashcl_tensor){p->data[3], 2 << 16, 0, 0, 0, 0};
    b->d_v = (flashcl_tensor){p->data[3], 3 << 16, 0, 0, 0, 0};
    const int mutations = (int)(next() % 3);
    flashcl_tensor *const tensors[5] = {&b->d_o, &b->d_q, &b->d_k, &b->d_v,
                                        &b->d_sinks};
    for (int m = 0; m < mutations; ++m) {
        if (next() % 8 == 0)
            b->struct_size = (size_t)PICK(0, 1, sizeof *b + 8);
        else if (next() % 8 == 0)
            b->nondeterministic = (int)PICK(-1, 2, INT_MAX);
        else
            wild_tensor(p, tensors[next() % 5]);
    }
    return mutations;
}

typedef struct snapshot {
    unsigned char *bytes[4]; /* k, v, o, lse */
} snapshot;

static int read_all(cl_command_queue queue, const pool *p, snapshot *s)
{
    const cl_mem mem[4] = {p->data[1], p->data[2], p->data[3], p->lse};
    const size_t size[4] = {DATA_BYTES, DATA_BYTES, DATA_BYTES, SMALL_BYTES};
    for (int i = 0; i < 4; ++i)
        if (clEnqueueReadBuffer(queue, mem[i], CL_TRUE, 0, size[i], s->bytes[i],
                                0, NULL, NULL) != CL_SUCCESS)
            return -1;
    return 0;
}

static void memcpy_all(snapshot *to, const snapshot *from)
{
    for (int i = 0; i < 4; ++i)
        memcpy(to->bytes[i], from->bytes[i], DATA_BYTES);
}

/* What every call must satisfy: a known status; an error explained and
 * nothing written (k, v, o, lse as before); a success's writes become the
 * reference of the next calls. 1 on a finding. */
static int check_call(flashcl_context *ctx, cl_command_queue queue,
                      const pool *p, flashcl_status status, long it,
                      snapshot *before, snapshot *after)
{
    static const size_t size[4] = {DATA_BYTES, DATA_BYTES, DATA_BYTES,
                                   SMALL_BYTES};
    static const char *const name[4] = {"k", "v", "o", "lse"};
    if ((unsigned)status >= FLASHCL_STATUS_COUNT_) {
        printf("iteration %ld: status %d is not a flashcl_status\n", it,
               (int)status);
        return 1;
    }
    if (status == FLASHCL_SUCCESS)
        return read_all(queue, p, before) != 0;
    int bad = 0;
    if (!*flashcl_context_last_error(ctx)) {
        printf("iteration %ld: %s with no message\n", it,
               flashcl_status_string(status));
        bad = 1;
    }
    if (read_all(queue, p, after) != 0) {
        printf("iteration %ld: reading the buffers back failed\n", it);
        return 1;
    }
    for (int i = 0; i < 4; ++i)
        if (memcmp(before->bytes[i], after->bytes[i], size[i])) {
            printf("iteration %ld: the call failed (%s: %s) but changed %s\n",
                   it, flashcl_status_string(status),
                   flashcl_context_last_error(ctx), name[i]);
            bad = 1;
        }
    if (bad) /* one finding, not a cascade: compare anew */
        memcpy_all(before, after);
    return bad;
}

int main(void)
{
    const char *seed = getenv("FLASHCL_FUZZ_SEED");
    const char *iters_env = getenv("FLASHCL_FUZZ_ITERS");
    const char *runs_env = getenv("FLASHCL_FUZZ_RUNS");
    fuzz_seed((uint64_t)(seed ? atoll(seed) : 1));
    const long iters = iters_env ? atol(iters_env) : 1500;
    long runs_left = runs_env ? atol(runs_env) : 24;

    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "fuzz_desc: no device: %s\n",
                flashcl_last_create_error());
        return 1;
    }
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    pool p;
    memset(&p, 0, sizeof p);
    int ok = 1;
    for (int i = 0; i < 6; ++i)
        ok &= (p.data[i] = make_buffer(cl, DATA_BYTES, i == 3 ? POISON : -1)) != NULL;
    ok &= (p.lse = make_buffer(cl, SMALL_BYTES, POISON)) != NULL;
    ok &= (p.ints = int_buffer(cl)) != NULL;
    ok &= (p.floats = make_buffer(cl, SMALL_BYTES, 0)) != NULL;
    ok &= (p.tiny = make_buffer(cl, 16, 0)) != NULL;
    snapshot before, after;
    for (int i = 0; i < 4; ++i) {
        before.bytes[i] = malloc(DATA_BYTES);
        after.bytes[i] = malloc(DATA_BYTES);
        ok &= before.bytes[i] && after.bytes[i];
    }
    if (!ok || read_all(queue, &p, &before) != 0) {
        fprintf(stderr, "fuzz_desc: setting up the buffers failed\n");
        return 1;
    }

    long passed = 0, failed = 0, errors = 0, ran = 0;
    for (long it = 0; it < iters; ++it) {
        /* a caller of a newer header passes a larger descriptor: its
         * struct_size may reach into `tail` (zero, or one byte set) */
        struct {
            flashcl_attention_desc desc;
            unsigned char tail[TAIL];
        } wrapper;
        memset(wrapper.tail, 0, sizeof wrapper.tail);
        if (next() % 8 == 0)
            wrapper.tail[next() % TAIL] = 1;
        flashcl_attention_desc *const d = &wrapper.desc;
        base_desc(&p, d);
        const int mutations = (int)(next() % 5); /* 0: a valid call */
        for (int m = 0; m < mutations; ++m)
            mutate(&p, d);
        int bad = 0;
        if (it % 4 == 3) { /* every fourth call: the public merge */
            flashcl_combine_desc c;
            combine_desc(&p, &c);
            const flashcl_status merged =
                flashcl_combine_partials(ctx, queue, &c, 0, NULL, NULL);
            clFinish(queue);
            bad = check_call(ctx, queue, &p, merged, it, &before, &after);
            bad ? ++failed : ++passed;
            merged == FLASHCL_SUCCESS ? (void)0 : (void)++errors;
            continue;
        }
        if (it % 4 == 1) { /* another fourth: the backward */
            flashcl_backward_desc b;
            const int wild = backward_desc(&p, &b);
            if (mutations == 0 && wild == 0 && runs_left <= 0)
                continue; /* valid: it would compile */
            /* The backward's describe: a known status, a message with
             * every refusal, nothing written (check_call below). */
            flashcl_variant_info planned_info;
            const flashcl_status planned =
                flashcl_describe_backward(ctx, d, &b, &planned_info);
            const int describe_bad =
                (unsigned)planned >= FLASHCL_STATUS_COUNT_ ||
                (planned != FLASHCL_SUCCESS &&
                 !*flashcl_context_last_error(ctx));
            if (describe_bad)
                printf("iteration %ld: describe_backward returned %d with "
                       "message \"%s\"\n",
                       it, (int)planned, flashcl_context_last_error(ctx));
            const flashcl_status back =
                flashcl_attention_backward(ctx, queue, d, &b, 0, NULL, NULL);
            clFinish(queue);
            if (back == FLASHCL_SUCCESS) {
                --runs_left;
                ++ran;
            } else
                ++errors;
            bad = check_call(ctx, queue, &p, back, it, &before, &after) ||
                  describe_bad;
            bad ? ++failed : ++passed;
            continue;
        }
        if (getenv("FLASHCL_FUZZ_VERBOSE")) /* the call about to be made */
            printf("iteration %ld: batch %lld heads %lld/%lld seqlen %lld/%lld"
                   " D %lld/%lld dtype %d splits %d cache %d varlen %d paged "
                   "%d size %zu\n",
                   it, (long long)d->batch, (long long)d->heads_q,
                   (long long)d->heads_kv, (long long)d->seqlen_q,
                   (long long)d->seqlen_k, (long long)d->head_dim,
                   (long long)d->head_dim_v, (int)d->dtype, d->num_splits,
                   d->cache_seqlens.buffer != NULL,
                   d->cu_seqlens_q.buffer != NULL,
                   d->block_table.buffer != NULL, d->struct_size);
        if (getenv("FLASHCL_FUZZ_VERBOSE"))
            fflush(stdout);
        flashcl_variant_info info;
        const flashcl_status described = flashcl_describe_variant(ctx, d, &info);
        if ((unsigned)described >= FLASHCL_STATUS_COUNT_ ||
            (described != FLASHCL_SUCCESS &&
             !*flashcl_context_last_error(ctx))) {
            printf("iteration %ld: describe returned %d with message \"%s\"\n",
                   it, (int)described, flashcl_context_last_error(ctx));
            bad = 1;
        }
        /* Kernel compiles are slow on CPU devices: only so many valid
         * calls run; every call that fails validation does. */
        if (described == FLASHCL_SUCCESS && runs_left <= 0) {
            bad ? ++failed : ++passed;
            continue;
        }
        const flashcl_status status =
            flashcl_attention_forward(ctx, queue, d, 0, NULL, NULL);
        clFinish(queue);
        if (status != FLASHCL_SUCCESS)
            ++errors;
        else {
            ++ran;
            --runs_left;
        }
        bad |= check_call(ctx, queue, &p, status, it, &before, &after);
        bad ? ++failed : ++passed;
    }
    printf("fuzz_desc: %ld calls, %ld refused with a status, %ld ran "
           "kernels\n", iters, errors, ran);
    printf("fuzz_desc: %ld passed, %ld failed\n", passed, failed);
    for (int i = 0; i < 4; ++i) {
        free(before.bytes[i]);
        free(after.bytes[i]);
    }
    for (int i = 0; i < 6; ++i)
        clReleaseMemObject(p.data[i]);
    clReleaseMemObject(p.lse);
    clReleaseMemObject(p.ints);
    clReleaseMemObject(p.floats);
    clReleaseMemObject(p.tiny);
    flashcl_context_release(ctx);
    return failed ? 1 : 0;
}
