/*
 * Semantics around the numbers: masked rows, empty problems, the scale,
 * large offsets, contexts from the caller's queue, device specs, versions,
 * status strings, events and concurrent use from several threads.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include "test_common.h"


#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- */
/* Rows that see no key                                              */
/* ---------------------------------------------------------------- */

/* Rows [0, masked) of every head: O exactly 0 and LSE exactly -inf. */
static void expect_empty_rows(const case_data *data, size_t masked,
                              const char *label)
{
    const test_tensor *o = &data->o, *lse = &data->lse;
    for (size_t b = 0; b < o->shape.batch; b++)
        for (size_t h = 0; h < o->shape.heads; h++)
            for (size_t i = 0; i < masked; i++) {
                for (size_t d = 0; d < o->shape.dim; d++) {
                    double got = ref_load(o->host, tensor_index(o, b, h, i, d),
                                          o->dtype);
                    ck_assert_msg(got == 0.0, "%s: O[%zu,%zu,%zu,%zu] = %g",
                                  label, b, h, i, d, got);
                }
                double l = ref_load(lse->host, tensor_index(lse, b, h, i, 0),
                                    REF_FP32);
                ck_assert_msg(isinf(l) && l < 0, "%s: LSE[%zu,%zu,%zu] = %g",
                              label, b, h, i, l);
            }
}

/* Causal with seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows see
 * no key; the rest must still match the reference (run_case_keep). */
START_TEST(test_fully_masked_rows)
{
    static const struct { size_t nq, nk, dim; } shapes[] = {
        {70, 5, 32}, {203, 64, 64}, {9, 1, 16}};
    for (int dtype = REF_FP32; dtype <= REF_BF16; dtype++) {
        attention_case c = small_case((ref_dtype)dtype, shapes[_i].nq,
                                      shapes[_i].nk, 1, 300 + _i);
        c.head_dim = shapes[_i].dim;
        c.view = _i == 1 ? VIEW_PADDED : VIEW_PACKED;
        char label[256];
        case_describe(&c, label, sizeof label);
        case_data data;
        run_case_keep(shared_context(), NULL, &c, &data);
        expect_empty_rows(&data, c.seqlen_q - c.seqlen_k, label);
        case_release(&data);
    }
}
END_TEST

/* No keys at all: every row is O = 0, LSE = -inf, causal or not. */
START_TEST(test_no_keys)
{
    for (int causal = 0; causal < 2; causal++) {
        attention_case c = small_case(_i == 0 ? REF_FP32 : REF_BF16, 13, 0,
                                      causal, 310);
        char label[256];
        case_describe(&c, label, sizeof label);
        case_data data;
        run_case_keep(shared_context(), NULL, &c, &data);
        expect_empty_rows(&data, c.seqlen_q, label);
        case_release(&data);
    }
}
END_TEST

/* ---------------------------------------------------------------- */
/* Zero-size problems                                                */
/* ---------------------------------------------------------------- */

/* batch 0, heads 0 or seqlen_q 0: success, a completed marker event, and
 * the poisoned O and LSE untouched. */
START_TEST(test_zero_size_is_noop)
{
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    attention_case c = small_case(REF_FP16, 16, 16, 0, 320);
    case_data data;
    case_prepare(&c, flashcl_context_cl_context(ctx), queue, &data);
    flashcl_attention_desc desc = case_desc(&c, &data);
    const char *what[] = {"batch 0", "heads 0", "seqlen_q 0",
                          "seqlen_q and seqlen_k 0"};
    if (_i == 0)
        desc.batch = 0;
    else if (_i == 1)
        desc.heads_q = desc.heads_kv = 0;
    else
        desc.seqlen_q = 0;
    if (_i == 3)
        desc.seqlen_k = 0;

    cl_event event = NULL;
    flashcl_status status =
        flashcl_attention_forward(ctx, NULL, &desc, 0, NULL, &event);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s: %s: %s", what[_i],
                  flashcl_status_string(status),
                  clip(flashcl_context_last_error(ctx)));
    ck_assert_msg(event != NULL, "%s: no event", what[_i]);
    CL_CHECK(clWaitForEvents(1, &event));
    clReleaseEvent(event);
    ck_assert_msg(buffer_is_poisoned(queue, data.o.view.buffer,
                                     tensor_bytes(&data.o)),
                  "%s: O was written", what[_i]);
    ck_assert_msg(buffer_is_poisoned(queue, data.lse.view.buffer,
                                     tensor_bytes(&data.lse)),
                  "%s: LSE was written", what[_i]);
    case_release(&data);
}
END_TEST

/* Zero heads (heads_kv 0 meaning heads_q) is an empty problem that
 * describe still plans: no path may divide by the heads (the descriptor
 * fuzzer, tests/fuzz_desc.c, found the split-KV path doing so for this
 * shape; a plain build may drop the division, UBSan in the sanitizer
 * build reports it). */
START_TEST(test_zero_heads_describe)
{
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.batch = 1;
    desc.seqlen_q = 17;
    desc.seqlen_k = 5;
    desc.head_dim = 8;
    desc.dtype = _i ? FLASHCL_DTYPE_FP32 : FLASHCL_DTYPE_FP16;
    flashcl_variant_info info;
    flashcl_context *ctx = shared_context();
    const flashcl_status status = flashcl_describe_variant(ctx, &desc, &info);
    ck_assert_msg(status == FLASHCL_SUCCESS, "describe: %s: %s",
                  flashcl_status_string(status),
                  clip(flashcl_context_last_error(ctx)));
}
END_TEST

/* ---------------------------------------------------------------- */
/* Scale                                                             */
/* ---------------------------------------------------------------- */

/* scale 0 means 1/sqrt(head_dim): the same result as passing it. */
START_TEST(test_default_scale)
{
    attention_case c = small_case(REF_FP32, 33, 47, 0, 330);
    c.head_dim = 40;
    case_data by_default, explicit_scale;
    run_case_keep(shared_context(), NULL, &c, &by_default);
    c.scale = (float)(1.0 / sqrt(40.0));
    run_case_keep(shared_context(), NULL, &c, &explicit_scale);
    const test_tensor *a = &by_default.o, *b = &explicit_scale.o;
    double largest = 0, max_diff = 0;
    for (size_t e = 0; e < c.heads_q * c.seqlen_q * c.head_dim; e++) {
        double x = ref_load(a->host, e, REF_FP32);
        double y = ref_load(b->host, e, REF_FP32);
        largest = fmax(largest, fabs(x));
        max_diff = fmax(max_diff, fabs(x - y));
    }
    ck_assert_msg(max_diff <= tolerance_for(REF_FP32).floor_rel * largest,
                  "default and explicit 1/sqrt(D) differ by %g", max_diff);
    case_release(&by_default);
    case_release(&explicit_scale);
}
END_TEST

/* Explicit scales are applied (the reference uses the same scale, and at
 * these values the results are far apart), negative ones too (FlashAttention
 * and PyTorch accept any finite scale). */
START_TEST(test_explicit_scale)
{
    const float scales[] = {1e-3f, 0.3f, 2.5f, -0.7f, -1e-3f};
    attention_case c = small_case(_i == 0 ? REF_FP32 : REF_FP16, 40, 90,
                                  _i, 340 + _i);
    for (int s = 0; s < 5; s++) {
        c.scale = scales[s];
        run_case(&c);
    }
}
END_TEST

/* explicit_scale with scale 0 is exactly 0: every visible key weighs the
 * same, so O is the mean of the visible V rows (the oracle computes that
 * independently of the default 1/sqrt(D) rule). */
START_TEST(test_exact_zero_scale)
{
    attention_case c = small_case(_i == 0 ? REF_FP32 : REF_BF16, 40, 90,
                                  _i, 350 + _i);
    c.scale = 0.0f;
    c.explicit_scale = 1;
    run_case(&c);
}
END_TEST

/* allow_tf32 is an opt-in for fp32: where a path has TF32 (the NVIDIA
 * tensor-core kernel) it runs there, within TF32's tolerance (widened in
 * tolerance_for_desc); elsewhere the result is exact fp32. Without the
 * flag fp32 never runs on that kernel. Head dims below, at and above the
 * TF32 tiles' 128, odd ones (padding), GQA, Nq != Nk, causal. */
START_TEST(test_allow_tf32)
{
    const size_t dims[] = {16, 40, 64, 100, 128, 160};
    attention_case c = small_case(REF_FP32, 70, 133, _i, 360 + _i);
    c.heads_q = 4;
    c.heads_kv = 2;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) {
        c.head_dim = dims[d];
        c.allow_tf32 = 0;
        flashcl_attention_desc shape = case_shape_desc(&c);
        flashcl_variant_info info;
        ck_assert_int_eq(flashcl_describe_variant(shared_context(), &shape,
                                                  &info),
                         FLASHCL_SUCCESS);
        ck_assert_msg(strcmp(info.path, "nv_mma") != 0,
                      "fp32 without allow_tf32 ran on the TF32 kernel");
        c.allow_tf32 = 1;
        c.seed += 10;
        run_case(&c);
    }
}
END_TEST

/* ---------------------------------------------------------------- */
/* Large offsets                                                     */
/* ---------------------------------------------------------------- */

/*
 * 64-bit offsets. Q, K and V share one "arena" buffer, O has a second and
 * LSE a third (outputs may not share a range with anything else): batch 0
 * of each tensor near the start of its arena and batch 1 near the end,
 * through stride_batch = high / elem_size, so element indices reach
 * high / elem_size. With fp16 and arenas over 4 GiB that is beyond 2^31
 * elements and 2^32 bytes, which is the real test of 64-bit address
 * arithmetic. Arenas are as large as the device allows, up to that
 * (CL_DEVICE_MAX_MEM_ALLOC_SIZE, and a quarter of the global memory each):
 * PoCL here allows 1 GiB per buffer, so on it indices only reach about 2^29
 * elements (byte offsets near 2^30). That still catches offsets truncated
 * to 16 or 24 bits or products in too narrow a type, but not 32-bit
 * overflow: that needs a device allowing > 4 GiB buffers, where the same
 * test then covers it. Only pages written are touched, so host memory use
 * stays small.
 */
typedef struct arena_problem {
    attention_case c;
    test_tensor q, k, v, o, lse; /* packed host copies (BHND per batch) */
    double *ref_o, *ref_lse;
    cl_mem arena[3];             /* Q, K, V | O | LSE */
    size_t arena_bytes, high, chunk;
} arena_problem;

static size_t device_limit(flashcl_context *ctx, cl_device_info what)
{
    cl_ulong value = 0;
    CL_CHECK(clGetDeviceInfo(flashcl_context_device(ctx), what, sizeof value,
                             &value, NULL));
    return (size_t)value;
}

static cl_mem arena_of(const arena_problem *a, int slot)
{
    return a->arena[slot < 3 ? 0 : slot - 2];
}

/* Byte offset of tensor `slot` (0..4 = Q, K, V, O, LSE), batch `b`. */
static size_t arena_offset(const arena_problem *a, int slot, size_t b)
{
    return (size_t)(slot < 3 ? slot : 0) * a->chunk + b * a->high;
}

static test_tensor *arena_tensor(arena_problem *a, int slot)
{
    test_tensor *slots[] = {&a->q, &a->k, &a->v, &a->o, &a->lse};
    return slots[slot];
}

static size_t batch_bytes(const test_tensor *t)
{
    return tensor_bytes(t) / t->shape.batch;
}

static void arena_transfer(arena_problem *a, cl_command_queue queue,
                           int slot, int upload)
{
    test_tensor *t = arena_tensor(a, slot);
    for (size_t b = 0; b < t->shape.batch; b++) {
        unsigned char *host = t->host + b * batch_bytes(t);
        size_t at = arena_offset(a, slot, b);
        if (upload)
            CL_CHECK(clEnqueueWriteBuffer(queue, arena_of(a, slot), CL_TRUE,
                                          at, batch_bytes(t), host, 0, NULL,
                                          NULL));
        else
            CL_CHECK(clEnqueueReadBuffer(queue, arena_of(a, slot), CL_TRUE,
                                         at, batch_bytes(t), host, 0, NULL,
                                         NULL));
    }
}

static flashcl_tensor arena_view(arena_problem *a, int slot)
{
    const test_tensor *t = arena_tensor(a, slot);
    size_t size = ref_dtype_size(t->dtype);
    flashcl_tensor view = {arena_of(a, slot), arena_offset(a, slot, 0),
                           a->high / size, t->stride[1], t->stride[2],
                           slot == 4 ? 0 : 1};
    return view;
}

static unsigned char *poisoned_host(size_t bytes)
{
    unsigned char *host = malloc(bytes);
    ck_assert_ptr_nonnull(host);
    memset(host, POISON_BYTE, bytes);
    return host;
}

static void arena_prepare(arena_problem *a, flashcl_context *ctx)
{
    attention_case *c = &a->c;
    rng r = rng_seeded(c->seed);
    tensor_shape q_shape = {c->batch, c->heads_q, c->seqlen_q, c->head_dim};
    tensor_shape kv_shape = {c->batch, c->heads_kv, c->seqlen_k, c->head_dim};
    tensor_layout(&a->q, q_shape, c->dtype, FLASHCL_LAYOUT_BHND, VIEW_PACKED);
    tensor_layout(&a->k, kv_shape, c->dtype, FLASHCL_LAYOUT_BHND, VIEW_PACKED);
    tensor_layout(&a->v, kv_shape, c->dtype, FLASHCL_LAYOUT_BHND, VIEW_PACKED);
    tensor_layout(&a->o, q_shape, c->dtype, FLASHCL_LAYOUT_BHND, VIEW_PACKED);
    lse_layout(&a->lse, c->batch, c->heads_q, c->seqlen_q, VIEW_PACKED);
    tensor_fill_random_host(&a->q, &r, 1.0);
    tensor_fill_random_host(&a->k, &r, 1.0);
    tensor_fill_random_host(&a->v, &r, 1.0);
    a->o.host = poisoned_host(tensor_bytes(&a->o));
    a->lse.host = poisoned_host(tensor_bytes(&a->lse));

    a->chunk = (batch_bytes(&a->q) + 4095) / 4096 * 4096;
    size_t arena = ((size_t)1 << 32) + 4096 + 4 * a->chunk; /* wanted */
    size_t max_alloc = device_limit(ctx, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    size_t quarter = device_limit(ctx, CL_DEVICE_GLOBAL_MEM_SIZE) / 4;
    arena = arena < max_alloc ? arena : max_alloc;
    a->arena_bytes = arena < quarter ? arena : quarter;
    a->high = (a->arena_bytes - 3 * a->chunk) / 4096 * 4096;
    for (int i = 0; i < 3; i++)
        a->arena[i] = create_buffer(flashcl_context_cl_context(ctx),
                                    a->arena_bytes);
    for (int slot = 0; slot < 5; slot++)
        arena_transfer(a, flashcl_context_queue(ctx), slot, 1);
}

static void arena_reference(arena_problem *a)
{
    const attention_case *c = &a->c;
    case_reference(c, 1.0 / sqrt((double)c->head_dim), &a->q, &a->k, &a->v,
                   &a->ref_o, &a->ref_lse);
}

static void arena_release(arena_problem *a)
{
    for (int slot = 0; slot < 5; slot++)
        free(arena_tensor(a, slot)->host);
    free(a->ref_o);
    free(a->ref_lse);
    for (int i = 0; i < 3; i++)
        clReleaseMemObject(a->arena[i]);
}

START_TEST(test_large_offsets)
{
    flashcl_context *ctx = shared_context();
    arena_problem a;
    memset(&a, 0, sizeof a);
    a.c = small_case(REF_FP16, 65, 70, 1, 350);
    a.c.batch = 2;
    a.c.head_dim = 64;
    size_t max_alloc = device_limit(ctx, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    if (max_alloc < ((size_t)64 << 20)) {
        printf("test_large_offsets: max allocation %zu bytes is too small; "
               "not run\n", max_alloc);
        return;
    }
    arena_prepare(&a, ctx);
    arena_reference(&a);
    printf("test_large_offsets: arena %zu bytes, batch 1 at byte %zu "
           "(element %zu)\n",
           a.arena_bytes, a.high, a.high / 2);

    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc);
    desc.batch = 2;
    desc.heads_q = (int64_t)a.c.heads_q;
    desc.heads_kv = (int64_t)a.c.heads_kv;
    desc.seqlen_q = (int64_t)a.c.seqlen_q;
    desc.seqlen_k = (int64_t)a.c.seqlen_k;
    desc.head_dim = (int64_t)a.c.head_dim;
    desc.dtype = FLASHCL_DTYPE_FP16;
    desc.causal = 1;
    desc.q = arena_view(&a, 0);
    desc.k = arena_view(&a, 1);
    desc.v = arena_view(&a, 2);
    desc.o = arena_view(&a, 3);
    desc.lse = arena_view(&a, 4);
    flashcl_status status = flashcl_attention_forward(ctx, NULL, &desc, 0,
                                                      NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s: %s",
                  flashcl_status_string(status),
                  clip(flashcl_context_last_error(ctx)));
    CL_CHECK(clFinish(flashcl_context_queue(ctx)));
    arena_transfer(&a, flashcl_context_queue(ctx), 3, 0);
    arena_transfer(&a, flashcl_context_queue(ctx), 4, 0);
    compare_result r = compare_output(&a.o, a.ref_o, &a.lse, a.ref_lse,
                                      tolerance_for_desc(REF_FP16, &desc));
    arena_release(&a);
    ck_assert_msg(r.ok, "large offsets: %s", r.detail);
}
END_TEST

/* ---------------------------------------------------------------- */
/* A context around the caller's queue                               */
/* ---------------------------------------------------------------- */

static cl_uint ref_count(cl_command_queue queue, cl_context context)
{
    cl_uint count = 0;
    if (queue)
        CL_CHECK(clGetCommandQueueInfo(queue, CL_QUEUE_REFERENCE_COUNT,
                                       sizeof count, &count, NULL));
    else
        CL_CHECK(clGetContextInfo(context, CL_CONTEXT_REFERENCE_COUNT,
                                  sizeof count, &count, NULL));
    return count;
}

/* Reference count of the queue (or context) once it has settled: PoCL's
 * worker threads drop the retains of finished commands asynchronously, so
 * under load the count can stay one higher for a moment after clFinish. A
 * leaked object keeps it high for good; give it up to 5 s. */
static cl_uint settled_ref_count(cl_command_queue queue, cl_context context,
                                 cl_uint want)
{
    struct timespec pause = {0, 10 * 1000 * 1000};
    cl_uint count = ref_count(queue, context);
    for (int tries = 0; tries < 500 && count != want; tries++) {
        nanosleep(&pause, NULL);
        count = ref_count(queue, context);
    }
    return count;
}

START_TEST(test_context_from_caller_queue)
{
    cl_device_id device = flashcl_context_device(shared_context());
    cl_int err = CL_SUCCESS;
    cl_context mine = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_command_queue queue = clCreateCommandQueue(mine, device, 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_uint queue_refs = ref_count(queue, NULL);
    cl_uint context_refs = ref_count(NULL, mine);

    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create_from_queue(&ctx, queue),
                     FLASHCL_SUCCESS);
    ck_assert_ptr_eq(flashcl_context_queue(ctx), queue);
    ck_assert_ptr_eq(flashcl_context_cl_context(ctx), mine);
    ck_assert_ptr_eq(flashcl_context_device(ctx), device);
    attention_case c = small_case(REF_BF16, 21, 34, 1, 360);
    case_data data;
    run_case_keep(ctx, NULL, &c, &data);
    case_release(&data);
    flashcl_context_release(ctx);

    CL_CHECK(clFinish(queue));
    /* The reference backend's GEMMs leave CLBlast's process-wide program
     * cache holding the cl_context; flashcl does not clear that cache by
     * itself (it is other users' too), and the caller can, as here. */
    flashcl_clear_reference_cache();
    ck_assert_uint_eq(settled_ref_count(queue, NULL, queue_refs), queue_refs);
    ck_assert_uint_eq(settled_ref_count(NULL, mine, context_refs),
                      context_refs);
    /* Both still work. */
    cl_mem buffer = create_buffer(mine, 64);
    unsigned char out[64], in[64];
    memset(out, 0x5a, sizeof out);
    write_buffer(queue, buffer, out, sizeof out);
    read_buffer(queue, buffer, in, sizeof in);
    ck_assert_mem_eq(in, out, sizeof out);
    CL_CHECK(clFinish(queue));
    clReleaseMemObject(buffer);
    clReleaseCommandQueue(queue);
    clReleaseContext(mine);
}
END_TEST

START_TEST(test_context_from_null_queue)
{
    flashcl_context *ctx = (flashcl_context *)&ctx; /* must not be used */
    ck_assert_int_eq(flashcl_context_create_from_queue(&ctx, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_int_eq(flashcl_context_create(NULL, "0"),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    flashcl_context_release(NULL); /* accepted and ignored */
}
END_TEST

/* ---------------------------------------------------------------- */
/* Device specs                                                      */
/* ---------------------------------------------------------------- */

/* All devices in platform order, as the spec grammar counts them. */
typedef struct device_list {
    cl_device_id id[64];
    cl_uint platform_index[64], index_in_platform[64];
    cl_uint count;
} device_list;

static device_list list_devices(void)
{
    device_list list;
    memset(&list, 0, sizeof list);
    cl_platform_id platforms[16];
    cl_uint platform_count = 0;
    CL_CHECK(clGetPlatformIDs(16, platforms, &platform_count));
    for (cl_uint p = 0; p < platform_count && p < 16; p++) {
        cl_device_id ids[64];
        cl_uint n = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 64, ids, &n) !=
            CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < n && list.count < 64; d++) {
            list.id[list.count] = ids[d];
            list.platform_index[list.count] = p;
            list.index_in_platform[list.count] = d;
            list.count++;
        }
    }
    ck_assert_msg(list.count > 0, "no OpenCL device");
    return list;
}

static void device_string(cl_device_id device, cl_device_info what,
                          char *out, size_t size)
{
    out[0] = '\0';
    CL_CHECK(clGetDeviceInfo(device, what, size - 1, out, NULL));
    out[size - 1] = '\0';
}

/* Creates a context from `spec` and checks it opened `want`. */
static void expect_spec_opens(const char *spec, cl_device_id want)
{
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, spec);
    ck_assert_msg(status == FLASHCL_SUCCESS, "spec \"%s\": %s: %s",
                  spec ? spec : "(null)", flashcl_status_string(status),
                  clip(flashcl_last_create_error()));
    ck_assert_msg(flashcl_context_device(ctx) == want,
                  "spec \"%s\" opened another device", spec ? spec : "(null)");
    flashcl_context_release(ctx);
}

static void expect_spec_not_found(const char *spec, const char *device_name)
{
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, spec);
    if (status == FLASHCL_SUCCESS)
        flashcl_context_release(ctx);
    ck_assert_msg(status == FLASHCL_ERROR_DEVICE_NOT_FOUND,
                  "spec \"%s\": got %s", spec ? spec : "(null)",
                  flashcl_status_string(status));
    const char *message = flashcl_last_create_error();
    ck_assert_msg(message && strstr(message, device_name),
                  "spec \"%s\": message \"%s\" does not list \"%s\"",
                  spec ? spec : "(null)", message ? clip(message) : "(null)",
                  device_name);
}

static const char *type_word(cl_device_id device)
{
    cl_device_type type = 0;
    CL_CHECK(clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type,
                             NULL));
    return (type & CL_DEVICE_TYPE_GPU)           ? "gpu"
           : (type & CL_DEVICE_TYPE_CPU)         ? "cpu"
           : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                                                 : NULL;
}

/* First device of the type `word` names, as the grammar picks it. */
static cl_device_id first_of_type(const device_list *list, const char *word)
{
    for (cl_uint i = 0; i < list->count; i++) {
        const char *t = type_word(list->id[i]);
        if (t && !strcmp(t, word))
            return list->id[i];
    }
    return NULL;
}

static int contains_ignoring_case(const char *text, const char *part)
{
    size_t n = strlen(part);
    for (; *text; text++) {
        size_t i = 0;
        while (i < n && text[i] &&
               tolower((unsigned char)text[i]) ==
                   tolower((unsigned char)part[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* First device whose name or vendor, or whose platform's name or vendor,
 * contains `part` ("vendor" in the grammar: PoCL's device vendor is the
 * CPU's maker, and "pocl" appears only in its platform vendor, "The pocl
 * project"; the platform name is "Portable Computing Language"). */
static cl_device_id first_matching(const device_list *list, const char *part)
{
    for (cl_uint i = 0; i < list->count; i++) {
        char text[4][256];
        cl_platform_id platform;
        device_string(list->id[i], CL_DEVICE_NAME, text[0], sizeof text[0]);
        device_string(list->id[i], CL_DEVICE_VENDOR, text[1], sizeof text[1]);
        CL_CHECK(clGetDeviceInfo(list->id[i], CL_DEVICE_PLATFORM,
                                 sizeof platform, &platform, NULL));
        CL_CHECK(clGetPlatformInfo(platform, CL_PLATFORM_NAME,
                                   sizeof text[2], text[2], NULL));
        CL_CHECK(clGetPlatformInfo(platform, CL_PLATFORM_VENDOR,
                                   sizeof text[3], text[3], NULL));
        for (int t = 0; t < 4; t++)
            if (contains_ignoring_case(text[t], part))
                return list->id[i];
    }
    return NULL;
}

/* Environment variable FLASHCL_DEVICE saved and cleared around a test. */
static char *saved_device_env;

static void clear_device_env(void)
{
    const char *value = getenv("FLASHCL_DEVICE");
    saved_device_env = value ? strdup(value) : NULL;
    unsetenv("FLASHCL_DEVICE");
}

static void restore_device_env(void)
{
    if (saved_device_env)
        setenv("FLASHCL_DEVICE", saved_device_env, 1);
    else
        unsetenv("FLASHCL_DEVICE");
    free(saved_device_env);
    saved_device_env = NULL;
}

static cl_device_id default_device(const device_list *list)
{
    cl_device_id gpu = first_of_type(list, "gpu");
    return gpu ? gpu : list->id[0];
}

START_TEST(test_device_spec_indices_and_types)
{
    device_list list = list_devices();
    char spec[32];
    for (cl_uint i = 0; i < list.count && i < 4; i++) {
        snprintf(spec, sizeof spec, "%u", i);
        expect_spec_opens(spec, list.id[i]);
        snprintf(spec, sizeof spec, "%u:%u", list.platform_index[i],
                 list.index_in_platform[i]);
        expect_spec_opens(spec, list.id[i]);
    }
    const char *types[] = {"gpu", "cpu", "accelerator"};
    for (int t = 0; t < 3; t++) {
        cl_device_id want = first_of_type(&list, types[t]);
        if (want)
            expect_spec_opens(types[t], want);
    }
    expect_spec_opens(NULL, default_device(&list));
    expect_spec_opens("", default_device(&list));
}
END_TEST

static void upper(char *text)
{
    for (; *text; text++)
        *text = (char)toupper((unsigned char)*text);
}

START_TEST(test_device_spec_substrings)
{
    device_list list = list_devices();
    /* "pocl" in any case, where a PoCL device exists (the test machine). */
    cl_device_id pocl = first_matching(&list, "pocl");
    if (pocl) {
        expect_spec_opens("pocl", pocl);
        expect_spec_opens("POCL", pocl);
        expect_spec_opens("PoCl", pocl);
    }
    /* Any device: a piece of its own name, upper-cased. */
    char name[256], piece[8];
    device_string(list.id[0], CL_DEVICE_NAME, name, sizeof name);
    size_t length = strlen(name), take = length < 6 ? length : 6;
    ck_assert_uint_gt(take, 0);
    memcpy(piece, name + (length - take) / 2, take);
    piece[take] = '\0';
    upper(piece);
    if (!isdigit((unsigned char)piece[0]) && !first_of_type(&list, piece))
        expect_spec_opens(piece, first_matching(&list, piece));
}
END_TEST

START_TEST(test_device_spec_not_found)
{
    device_list list = list_devices();
    char name[256], spec[32];
    device_string(list.id[0], CL_DEVICE_NAME, name, sizeof name);
    expect_spec_not_found("no-such-device-xyzzy", name);
    snprintf(spec, sizeof spec, "%u", list.count);
    expect_spec_not_found(spec, name);
    expect_spec_not_found("0:999", name);
    expect_spec_not_found("999:0", name);
}
END_TEST

START_TEST(test_device_env_var)
{
    device_list list = list_devices();
    char name[256];
    device_string(list.id[0], CL_DEVICE_NAME, name, sizeof name);

    setenv("FLASHCL_DEVICE", "no-such-device-xyzzy", 1);
    expect_spec_not_found(NULL, name);
    expect_spec_not_found("", name);
    expect_spec_opens("0", list.id[0]); /* the argument wins */

    char spec[32];
    cl_uint last = list.count - 1;
    snprintf(spec, sizeof spec, "%u:%u", list.platform_index[last],
             list.index_in_platform[last]);
    setenv("FLASHCL_DEVICE", spec, 1);
    expect_spec_opens(NULL, list.id[last]);

    setenv("FLASHCL_DEVICE", "", 1); /* empty: as if unset */
    expect_spec_opens(NULL, default_device(&list));
}
END_TEST

/* ---------------------------------------------------------------- */
/* Version and status strings                                        */
/* ---------------------------------------------------------------- */

START_TEST(test_version)
{
    ck_assert_uint_eq(flashcl_version_number(), FLASHCL_VERSION_NUMBER);
    ck_assert_uint_eq(FLASHCL_VERSION_NUMBER,
                      FLASHCL_VERSION_MAJOR * 10000u +
                          FLASHCL_VERSION_MINOR * 100u +
                          FLASHCL_VERSION_PATCH);
    ck_assert_str_eq(flashcl_version_string(), FLASHCL_VERSION_STRING);
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", FLASHCL_VERSION_MAJOR,
             FLASHCL_VERSION_MINOR, FLASHCL_VERSION_PATCH);
    ck_assert_str_eq(flashcl_version_string(), expected);
}
END_TEST

START_TEST(test_status_strings)
{
    for (int s = 0; s < FLASHCL_STATUS_COUNT_; s++) {
        const char *text = flashcl_status_string((flashcl_status)s);
        ck_assert_msg(text && *text, "status %d has no string", s);
        ck_assert_str_ne(text, "unknown status");
        for (int t = 0; t < s; t++)
            ck_assert_msg(strcmp(text, flashcl_status_string(
                                           (flashcl_status)t)) != 0,
                          "statuses %d and %d share \"%s\"", t, s, text);
    }
    const int unknown[] = {FLASHCL_STATUS_COUNT_, 9999, -1};
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(flashcl_status_string((flashcl_status)unknown[i]),
                         "unknown status");
}
END_TEST

/* ---------------------------------------------------------------- */
/* Events                                                            */
/* ---------------------------------------------------------------- */

/* The call waits for its wait list: O stays poisoned while a user event
 * holds it back, and is right once released. */
START_TEST(test_event_wait_list)
{
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    attention_case c = small_case(REF_FP32, 50, 60, 0, 370);
    case_data data;
    case_prepare(&c, flashcl_context_cl_context(ctx), queue, &data);
    flashcl_attention_desc desc = case_desc(&c, &data);
    cl_int err = CL_SUCCESS;
    cl_event gate = clCreateUserEvent(flashcl_context_cl_context(ctx), &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event done = NULL;
    ck_assert_int_eq(flashcl_attention_forward(ctx, NULL, &desc, 1, &gate,
                                               &done),
                     FLASHCL_SUCCESS);
    ck_assert_ptr_nonnull(done);
    CL_CHECK(clFlush(queue));
    cl_int state = CL_COMPLETE;
    CL_CHECK(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS,
                            sizeof state, &state, NULL));
    ck_assert_int_ne(state, CL_COMPLETE);
    CL_CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
    CL_CHECK(clWaitForEvents(1, &done));
    clReleaseEvent(done);
    clReleaseEvent(gate);
    compare_result r = case_check(&c, &data, queue);
    case_release(&data);
    ck_assert_msg(r.ok, "%s", r.detail);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Threads                                                           */
/* ---------------------------------------------------------------- */

enum { THREADS = 4, CASES_PER_THREAD = 3 };

typedef struct worker {
    flashcl_context *ctx;
    cl_command_queue queue;
    attention_case cases[CASES_PER_THREAD];
    case_data data[CASES_PER_THREAD];
    flashcl_status status[CASES_PER_THREAD];
    cl_int wait_error[CASES_PER_THREAD];
} worker;

/* No Check assertions here (they cannot unwind another thread): results
 * are recorded and asserted by the main thread. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < CASES_PER_THREAD; i++) {
        flashcl_attention_desc desc = case_desc(&w->cases[i], &w->data[i]);
        cl_event done = NULL;
        w->status[i] = flashcl_attention_forward(w->ctx, w->queue, &desc, 0,
                                                 NULL, &done);
        if (w->status[i] == FLASHCL_SUCCESS) {
            w->wait_error[i] = clWaitForEvents(1, &done);
            clReleaseEvent(done);
        }
    }
    return NULL;
}

/* Threads share some kernel variants (racing on one cache entry) and
 * have some of their own (compiling concurrently). */
static attention_case thread_case(int thread, int index)
{
    const ref_dtype dtypes[] = {REF_FP32, REF_FP16, REF_BF16};
    attention_case c = small_case(dtypes[(thread + index) % 3],
                                  17 + 13 * (size_t)index,
                                  29 + 7 * (size_t)thread, index == 1,
                                  400 + 10 * (uint64_t)thread + index);
    c.head_dim = index == 2 ? 24 + 8 * (size_t)thread : 48;
    return c;
}

static void prepare_worker(worker *w, int thread)
{
    cl_context context = flashcl_context_cl_context(w->ctx);
    w->queue = create_queue(w->ctx);
    for (int i = 0; i < CASES_PER_THREAD; i++) {
        w->cases[i] = thread_case(thread, i);
        case_prepare(&w->cases[i], context, w->queue, &w->data[i]);
    }
}

static void check_worker(worker *w, int thread)
{
    for (int i = 0; i < CASES_PER_THREAD; i++) {
        char text[256];
        case_describe(&w->cases[i], text, sizeof text);
        ck_assert_msg(w->status[i] == FLASHCL_SUCCESS,
                      "thread %d, %s: %s", thread, text,
                      flashcl_status_string(w->status[i]));
        ck_assert_msg(w->wait_error[i] == CL_SUCCESS,
                      "thread %d, %s: clWaitForEvents %d", thread, text,
                      (int)w->wait_error[i]);
        compare_result r = case_check(&w->cases[i], &w->data[i], w->queue);
        ck_assert_msg(r.ok, "thread %d, %s: %s", thread, text, r.detail);
        case_release(&w->data[i]);
    }
    clReleaseCommandQueue(w->queue);
}

START_TEST(test_threads_share_context)
{
    flashcl_context *ctx = NULL;
    /* A fresh context, so the threads find its program cache empty. */
    ck_assert_int_eq(flashcl_context_create(&ctx, NULL), FLASHCL_SUCCESS);
    static worker workers[THREADS];
    memset(workers, 0, sizeof workers);
    for (int t = 0; t < THREADS; t++) {
        workers[t].ctx = ctx;
        prepare_worker(&workers[t], t);
    }
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_create(&threads[t], NULL, worker_main,
                                        &workers[t]),
                         0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    for (int t = 0; t < THREADS; t++)
        check_worker(&workers[t], t);
    flashcl_context_release(ctx);
}
END_TEST

int main(void)
{
    const test_entry rows[] = {
        {test_fully_masked_rows, 3}, {test_no_keys, 2},
        {test_zero_size_is_noop, 4}, {test_zero_heads_describe, 2},
        {test_default_scale, 0},
        {test_explicit_scale, 2},    {test_exact_zero_scale, 2},
        {test_allow_tf32, 2},
        {test_large_offsets, 0},     {test_event_wait_list, 0}};
    const test_entry contexts[] = {
        {test_context_from_caller_queue, 0},
        {test_context_from_null_queue, 0},
        {test_device_spec_indices_and_types, 0},
        {test_device_spec_substrings, 0},
        {test_device_spec_not_found, 0},
        {test_device_env_var, 0},
        {test_version, 0},
        {test_status_strings, 0},
        {test_threads_share_context, 0}};
    const test_group groups[] = {
        {"rows", 0, NULL, NULL, rows, LENGTH(rows)},
        {"contexts", 0, clear_device_env, restore_device_env, contexts,
         LENGTH(contexts)}};
    return run_groups("semantics", groups, LENGTH(groups));
}
