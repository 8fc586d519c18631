/*
 * Bad input: every case gets its specific status, a last-error message that
 * names the argument, no event, and leaves O and LSE byte-for-byte as they
 * were (poisoned before the call).
 */
#include "test_common.h"

#include <ctype.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A small valid problem: fp32, B 1, Hq 2, Hkv 1, Nq = Nk = 8, D 16, packed
 * BNHD (zero strides), LSE wanted. Buffers are exactly as large as needed. */
enum { BATCH = 1, HEADS_Q = 2, HEADS_KV = 1, SEQ = 8, DIM = 16 };
#define Q_BYTES ((size_t)BATCH * HEADS_Q * SEQ * DIM * 4)
#define KV_BYTES ((size_t)BATCH * HEADS_KV * SEQ * DIM * 4)
#define LSE_BYTES ((size_t)BATCH * HEADS_Q * SEQ * 4)

static flashcl_context *ctx;
static cl_context cl_ctx;
static cl_command_queue queue;
static cl_mem q_buf, k_buf, v_buf, o_buf, lse_buf;
static flashcl_attention_desc valid;
/* What Q, K and V hold after setup; a rejected call must not change it. */
static float q_init[Q_BYTES / 4], k_init[KV_BYTES / 4], v_init[KV_BYTES / 4];

static cl_mem random_buffer(size_t bytes, uint64_t seed)
{
    rng r = rng_seeded(seed);
    float *values = malloc(bytes);
    ck_assert_ptr_nonnull(values);
    for (size_t i = 0; i < bytes / 4; i++)
        values[i] = (float)rng_normal(&r);
    cl_mem buffer = create_buffer(cl_ctx, bytes);
    write_buffer(queue, buffer, values, bytes);
    free(values);
    return buffer;
}

static void setup(void)
{
    ctx = shared_context();
    cl_ctx = flashcl_context_cl_context(ctx);
    queue = flashcl_context_queue(ctx);
    q_buf = random_buffer(Q_BYTES, 1);
    k_buf = random_buffer(KV_BYTES, 2);
    v_buf = random_buffer(KV_BYTES, 3);
    o_buf = create_buffer(cl_ctx, Q_BYTES);
    lse_buf = create_buffer(cl_ctx, LSE_BYTES);
    read_buffer(queue, q_buf, q_init, Q_BYTES);
    read_buffer(queue, k_buf, k_init, KV_BYTES);
    read_buffer(queue, v_buf, v_init, KV_BYTES);
    const attention_case shape = {.batch = BATCH, .heads_q = HEADS_Q,
                                  .heads_kv = HEADS_KV, .seqlen_q = SEQ,
                                  .seqlen_k = SEQ, .head_dim = DIM,
                                  .dtype = REF_FP32};
    valid = case_shape_desc(&shape);
    valid.q.buffer = q_buf;
    valid.k.buffer = k_buf;
    valid.v.buffer = v_buf;
    valid.o.buffer = o_buf;
    valid.lse.buffer = lse_buf;
}

static void teardown(void)
{
    cl_mem all[] = {q_buf, k_buf, v_buf, o_buf, lse_buf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    q_buf = k_buf = v_buf = o_buf = lse_buf = NULL;
}

/* ---------------------------------------------------------------- */
/* Expectation helpers                                               */
/* ---------------------------------------------------------------- */

static int is_word_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* 1 if `text` contains `word` as a whole identifier, ignoring case
 * ("q.offset" mentions "q" and "offset"; "heads_q" does not mention "q"). */
static int mentions_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = text; *p; p++) {
        if (p > text && is_word_char(p[-1]))
            continue;
        size_t i = 0;
        while (i < n && p[i] &&
               tolower((unsigned char)p[i]) == tolower((unsigned char)word[i]))
            i++;
        if (i == n && !is_word_char(p[n]))
            return 1;
    }
    return 0;
}

/* `names`: words separated by '|'; 1 if the text mentions any of them. */
static int mentions_any(const char *text, const char *names)
{
    char word[64];
    while (*names) {
        size_t n = strcspn(names, "|");
        ck_assert_uint_lt(n, sizeof word);
        memcpy(word, names, n);
        word[n] = '\0';
        if (mentions_word(text, word))
            return 1;
        names += n + (names[n] == '|');
    }
    return 0;
}

typedef struct expectation {
    const char *label;
    flashcl_status status;
    flashcl_status also_ok; /* a second acceptable status, or SUCCESS */
    const char *names[2];   /* each: words one of which the message names */
} expectation;

static void expect_status(const expectation *e, flashcl_status got)
{
    int ok = got == e->status ||
             (e->also_ok != FLASHCL_SUCCESS && got == e->also_ok);
    ck_assert_msg(ok, "%s: got \"%s\" (%s), want \"%s\"", e->label,
                  flashcl_status_string(got), clip(flashcl_context_last_error(ctx)),
                  flashcl_status_string(e->status));
}

static void expect_message(const expectation *e)
{
    const char *message = flashcl_context_last_error(ctx);
    ck_assert_msg(message && *message, "%s: empty last error", e->label);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(!e->names[i] || mentions_any(message, e->names[i]),
                      "%s: message \"%s\" does not name %s", e->label,
                      clip(message), e->names[i]);
}

static void expect_outputs_untouched(const expectation *e)
{
    CL_CHECK(clFinish(queue));
    ck_assert_msg(buffer_is_poisoned(queue, o_buf, Q_BYTES),
                  "%s: O was written", e->label);
    ck_assert_msg(buffer_is_poisoned(queue, lse_buf, LSE_BYTES),
                  "%s: LSE was written", e->label);
    float q_now[Q_BYTES / 4], k_now[KV_BYTES / 4], v_now[KV_BYTES / 4];
    read_buffer(queue, q_buf, q_now, Q_BYTES);
    read_buffer(queue, k_buf, k_now, KV_BYTES);
    read_buffer(queue, v_buf, v_now, KV_BYTES);
    ck_assert_msg(!memcmp(q_now, q_init, Q_BYTES) &&
                      !memcmp(k_now, k_init, KV_BYTES) &&
                      !memcmp(v_now, v_init, KV_BYTES),
                  "%s: an input buffer was written", e->label);
}

/* Calls forward on `on_queue` with `desc` and checks the expectation. */
static void expect_rejected_on(const flashcl_attention_desc *desc,
                               cl_command_queue on_queue,
                               const expectation *e)
{
    poison_buffer(queue, o_buf, Q_BYTES);
    poison_buffer(queue, lse_buf, LSE_BYTES);
    cl_event event = NULL;
    flashcl_status got =
        flashcl_attention_forward(ctx, on_queue, desc, 0, NULL, &event);
    expect_status(e, got);
    ck_assert_msg(event == NULL, "%s: an event was returned", e->label);
    expect_message(e);
    expect_outputs_untouched(e);
}

static void expect_rejected(const flashcl_attention_desc *desc,
                            const expectation *e)
{
    expect_rejected_on(desc, NULL, e);
}

/* Shorthand for the common case: one status, one argument name. */
static void expect_error(const flashcl_attention_desc *desc,
                         flashcl_status status, const char *label,
                         const char *names)
{
    expectation e = {label, status, FLASHCL_SUCCESS, {names, NULL}};
    expect_rejected(desc, &e);
}

/* A descriptor field by name, for expect_each_refused(). */
#define FIELD(name)                                                            \
    #name, offsetof(flashcl_attention_desc, name),                             \
        sizeof(((flashcl_attention_desc *)0)->name)

/* Each of the `count` values of one integer or enum field is refused with
 * `status` by a message that names the field. The field is written through
 * its bytes so that one helper serves int64_t and enum fields alike. */
static void expect_each_refused(const char *field, size_t offset, size_t size,
                                const int64_t *bad, int count,
                                flashcl_status status)
{
    ck_assert(size == sizeof(int32_t) || size == sizeof(int64_t));
    for (int i = 0; i < count; i++) {
        flashcl_attention_desc d = valid;
        const int32_t narrow = (int32_t)bad[i];
        memcpy((unsigned char *)&d + offset,
               size == sizeof narrow ? (const void *)&narrow
                                     : (const void *)&bad[i],
               size);
        expect_error(&d, status, field, field);
    }
}

static void expect_success(const flashcl_attention_desc *desc,
                           const char *label)
{
    flashcl_status got = flashcl_attention_forward(ctx, NULL, desc, 0, NULL,
                                                   NULL);
    ck_assert_msg(got == FLASHCL_SUCCESS, "%s: %s: %s", label,
                  flashcl_status_string(got), clip(flashcl_context_last_error(ctx)));
    CL_CHECK(clFinish(queue));
}

/* ---------------------------------------------------------------- */
/* The valid problem really is valid                                 */
/* ---------------------------------------------------------------- */

START_TEST(test_valid_problem_runs)
{
    poison_buffer(queue, o_buf, Q_BYTES);
    poison_buffer(queue, lse_buf, LSE_BYTES);
    expect_success(&valid, "valid problem");
    float o[Q_BYTES / 4], lse[LSE_BYTES / 4];
    read_buffer(queue, o_buf, o, Q_BYTES);
    read_buffer(queue, lse_buf, lse, LSE_BYTES);
    for (size_t i = 0; i < Q_BYTES / 4; i++)
        ck_assert_msg(isfinite(o[i]), "O[%zu] = %g", i, (double)o[i]);
    for (size_t i = 0; i < LSE_BYTES / 4; i++)
        ck_assert_msg(isfinite(lse[i]), "LSE[%zu] = %g", i, (double)lse[i]);
}
END_TEST

/* ---------------------------------------------------------------- */
/* NULL                                                              */
/* ---------------------------------------------------------------- */

START_TEST(test_null_context_and_desc)
{
    poison_buffer(queue, o_buf, Q_BYTES);
    ck_assert_int_eq(flashcl_attention_forward(NULL, NULL, &valid, 0, NULL,
                                               NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert(buffer_is_poisoned(queue, o_buf, Q_BYTES));
    expect_error(NULL, FLASHCL_ERROR_NULL_ARGUMENT, "desc NULL", "desc");
}
END_TEST

START_TEST(test_null_buffers)
{
    static const char *names[] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++) {
        flashcl_attention_desc d = valid;
        flashcl_tensor *tensors[] = {&d.q, &d.k, &d.v, &d.o};
        tensors[i]->buffer = NULL;
        expect_error(&d, FLASHCL_ERROR_NULL_ARGUMENT, names[i], names[i]);
    }
}
END_TEST

START_TEST(test_null_host_pointers)
{
    float q[Q_BYTES / 4] = {0}, k[KV_BYTES / 4] = {0}, v[KV_BYTES / 4] = {0};
    unsigned char o[Q_BYTES], lse[LSE_BYTES];
    memset(o, POISON_BYTE, sizeof o);
    memset(lse, POISON_BYTE, sizeof lse);
    const void *inputs[3] = {q, k, v};
    for (int missing = 0; missing < 4; missing++) {
        const void *in[3] = {inputs[0], inputs[1], inputs[2]};
        if (missing < 3)
            in[missing] = NULL;
        flashcl_status got = flashcl_attention_forward_host(
            ctx, &valid, in[0], in[1], in[2], missing == 3 ? NULL : o,
            (float *)(void *)lse);
        ck_assert_msg(got == FLASHCL_ERROR_NULL_ARGUMENT,
                      "host call, pointer %d NULL: %s", missing,
                      flashcl_status_string(got));
        ck_assert(*flashcl_context_last_error(ctx));
    }
    for (size_t i = 0; i < sizeof o; i++)
        ck_assert_uint_eq(o[i], POISON_BYTE);
    for (size_t i = 0; i < sizeof lse; i++)
        ck_assert_uint_eq(lse[i], POISON_BYTE);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Dimensions                                                        */
/* ---------------------------------------------------------------- */

static int64_t *dim_field(flashcl_attention_desc *d, int which)
{
    int64_t *fields[] = {&d->batch, &d->heads_q, &d->heads_kv, &d->seqlen_q,
                         &d->seqlen_k};
    return fields[which];
}

static const char *const dim_names[] = {"batch", "heads_q", "heads_kv",
                                        "seqlen_q", "seqlen_k"};

START_TEST(test_negative_dimensions)
{
    const int64_t negatives[] = {-1, INT64_MIN};
    for (int which = 0; which < 5; which++)
        for (int n = 0; n < 2; n++) {
            flashcl_attention_desc d = valid;
            *dim_field(&d, which) = negatives[n];
            expect_error(&d, FLASHCL_ERROR_INVALID_DIMENSION,
                         dim_names[which], dim_names[which]);
        }
}
END_TEST

/* Products that overflow 64 bits must be rejected, not wrapped. */
START_TEST(test_overflowing_dimensions)
{
    flashcl_attention_desc d = valid;
    d.batch = INT64_C(1) << 40;
    d.heads_q = d.heads_kv = INT64_C(1) << 40;
    expect_error(&d, FLASHCL_ERROR_INVALID_DIMENSION, "batch*heads 2^80",
                 "batch|heads_q|heads_kv");

    d = valid;
    d.seqlen_q = INT64_MAX;
    expect_error(&d, FLASHCL_ERROR_INVALID_DIMENSION, "seqlen_q max",
                 "seqlen_q|seqlen");

    d = valid;
    d.seqlen_k = INT64_MAX / 2;
    expect_error(&d, FLASHCL_ERROR_INVALID_DIMENSION, "seqlen_k huge",
                 "seqlen_k|seqlen");

    d = valid;
    d.batch = INT64_MAX;
    expect_error(&d, FLASHCL_ERROR_INVALID_DIMENSION, "batch max", "batch");
}
END_TEST

/* seqlen 2^31 fits int64 but not the kernel's int and not the buffers:
 * either a dimension limit or the bounds check may catch it. */
START_TEST(test_seqlen_past_int32)
{
    flashcl_attention_desc d = valid;
    d.seqlen_k = INT64_C(1) << 31;
    expectation e = {"seqlen_k 2^31", FLASHCL_ERROR_INVALID_DIMENSION,
                     FLASHCL_ERROR_OUT_OF_BOUNDS, {"seqlen_k|k", NULL}};
    expect_rejected(&d, &e);
}
END_TEST

START_TEST(test_head_grouping)
{
    flashcl_attention_desc d = valid;
    d.heads_q = 3;
    d.heads_kv = 2;
    expect_error(&d, FLASHCL_ERROR_HEAD_GROUPING, "3 q heads over 2",
                 "heads_q|heads_kv");
    d = valid;
    d.heads_q = 1;
    d.heads_kv = 2;
    expect_error(&d, FLASHCL_ERROR_HEAD_GROUPING, "more kv heads than q",
                 "heads_q|heads_kv");
}
END_TEST

/* The header: head_dim outside 1..256 is HEAD_DIM_UNSUPPORTED (negative
 * included, since that rule is specific to head_dim). */
START_TEST(test_head_dim_unsupported)
{
    const int64_t bad[] = {0, 257, 1024, -1};
    expect_each_refused(FIELD(head_dim), bad, 4,
                        FLASHCL_ERROR_HEAD_DIM_UNSUPPORTED);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Enumerations and scale                                            */
/* ---------------------------------------------------------------- */

START_TEST(test_unknown_dtype)
{
    const int64_t bad[] = {4, 99, -1};
    expect_each_refused(FIELD(dtype), bad, 3, FLASHCL_ERROR_DTYPE_UNSUPPORTED);
}
END_TEST

START_TEST(test_unknown_layout)
{
    const int64_t bad[] = {2, 99, -1};
    expect_each_refused(FIELD(layout), bad, 3, FLASHCL_ERROR_INVALID_LAYOUT);
}
END_TEST

START_TEST(test_bad_scale)
{
    /* Negative scales are valid; beyond FLASHCL_MAX_SCALE, scale * log2(e)
     * would overflow in the kernels. */
    const float bad[] = {NAN, INFINITY, -INFINITY, 2e30f, -3e38f};
    for (int i = 0; i < 5; i++) {
        flashcl_attention_desc d = valid;
        d.scale = bad[i];
        expect_error(&d, FLASHCL_ERROR_INVALID_VALUE, "scale", "scale");
    }
}
END_TEST

START_TEST(test_unknown_enums)
{
    const int64_t bad[] = {99};
    expect_each_refused(FIELD(causal_align), bad, 1,
                        FLASHCL_ERROR_INVALID_VALUE);
    expect_each_refused(FIELD(backend), bad, 1, FLASHCL_ERROR_INVALID_VALUE);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Views outside their buffer, misaligned offsets                    */
/* ---------------------------------------------------------------- */

static const char *const tensor_names[] = {"q", "k", "v", "o", "lse"};

static flashcl_tensor *tensor_field(flashcl_attention_desc *d, int which)
{
    flashcl_tensor *fields[] = {&d->q, &d->k, &d->v, &d->o, &d->lse};
    return fields[which];
}

static size_t tensor_buffer_bytes(int which)
{
    const size_t bytes[] = {Q_BYTES, KV_BYTES, KV_BYTES, Q_BYTES, LSE_BYTES};
    return bytes[which];
}

/* Packed strides of the valid problem (BNHD; LSE [b, h, s]). */
static void set_packed_strides(flashcl_tensor *t, int which)
{
    size_t heads = which == 1 || which == 2 ? HEADS_KV : HEADS_Q;
    if (which == 4) {
        t->stride_batch = HEADS_Q * SEQ;
        t->stride_head = SEQ;
        t->stride_seq = 1;
        return;
    }
    t->stride_batch = SEQ * heads * DIM;
    t->stride_head = DIM;
    t->stride_seq = heads * DIM;
    t->stride_dim = 1;
}

static void expect_out_of_bounds(const flashcl_attention_desc *d, int which,
                                 const char *what)
{
    char label[96];
    snprintf(label, sizeof label, "%s: %s", tensor_names[which], what);
    expect_error(d, FLASHCL_ERROR_OUT_OF_BOUNDS, label, tensor_names[which]);
}

START_TEST(test_views_outside_buffer)
{
    int which = _i;
    flashcl_attention_desc d = valid;
    tensor_field(&d, which)->offset = tensor_buffer_bytes(which);
    expect_out_of_bounds(&d, which, "offset at the end");

    d = valid;
    tensor_field(&d, which)->offset = 4; /* one element: last one is past */
    expect_out_of_bounds(&d, which, "offset of one element");

    d = valid;
    set_packed_strides(tensor_field(&d, which), which);
    tensor_field(&d, which)->stride_seq += 1;
    expect_out_of_bounds(&d, which, "seq stride one too large");

    d = valid;
    set_packed_strides(tensor_field(&d, which), which);
    tensor_field(&d, which)->stride_seq = SIZE_MAX / 64; /* no wrap */
    expect_out_of_bounds(&d, which, "seq stride far beyond the buffer");
}
END_TEST

/* Strides whose byte reach is exactly 2^64: a wrapping computation would
 * see the view end at byte 4 and accept it. */
START_TEST(test_view_reach_wraps_64_bits)
{
    int which = _i;
    flashcl_attention_desc d = valid;
    flashcl_tensor *t = tensor_field(&d, which);
    set_packed_strides(t, which);
    d.seqlen_q = d.seqlen_k = 5; /* (5 - 1) * 2^62 * 4 bytes = 2^66 */
    t->stride_seq = (size_t)1 << 62;
    char label[64];
    snprintf(label, sizeof label, "%s: stride_seq 2^62", tensor_names[which]);
    expectation e = {label, FLASHCL_ERROR_OUT_OF_BOUNDS,
                     FLASHCL_ERROR_INVALID_DIMENSION,
                     {tensor_names[which], NULL}};
    expect_rejected(&d, &e);
}
END_TEST

START_TEST(test_buffer_too_small)
{
    int which = _i;
    cl_mem small = create_buffer(cl_ctx, tensor_buffer_bytes(which) - 4);
    flashcl_attention_desc d = valid;
    tensor_field(&d, which)->buffer = small;
    expect_out_of_bounds(&d, which, "buffer one element short");
    clReleaseMemObject(small);
}
END_TEST

START_TEST(test_misaligned_offset)
{
    int which = _i;
    flashcl_attention_desc d = valid;
    tensor_field(&d, which)->offset = 2; /* fp32 elements: 4 bytes */
    expectation e = {"fp32 offset 2", FLASHCL_ERROR_INVALID_LAYOUT,
                     FLASHCL_SUCCESS, {tensor_names[which], "offset"}};
    expect_rejected(&d, &e);

    if (which == 4)
        return; /* LSE is fp32 whatever the dtype */
    d = valid;
    d.dtype = FLASHCL_DTYPE_FP16;
    tensor_field(&d, which)->offset = 1;
    e.label = "fp16 offset 1";
    expect_rejected(&d, &e);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Other contexts                                                    */
/* ---------------------------------------------------------------- */

static cl_context other_context(void)
{
    cl_device_id device = flashcl_context_device(ctx);
    cl_int err = CL_SUCCESS;
    cl_context other = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateContext: %d", (int)err);
    return other;
}

START_TEST(test_buffer_of_other_context)
{
    cl_context other = other_context();
    for (int which = 0; which < 5; which++) {
        cl_mem foreign = create_buffer(other, tensor_buffer_bytes(which));
        flashcl_attention_desc d = valid;
        tensor_field(&d, which)->buffer = foreign;
        expect_error(&d, FLASHCL_ERROR_CONTEXT_MISMATCH, tensor_names[which],
                     tensor_names[which]);
        clReleaseMemObject(foreign);
    }
    clReleaseContext(other);
}
END_TEST

START_TEST(test_queue_of_other_context)
{
    cl_context other = other_context();
    cl_int err = CL_SUCCESS;
    cl_command_queue foreign = clCreateCommandQueue(
        other, flashcl_context_device(ctx), 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    expectation e = {"queue of another context",
                     FLASHCL_ERROR_CONTEXT_MISMATCH, FLASHCL_SUCCESS,
                     {"queue", NULL}};
    expect_rejected_on(&valid, foreign, &e);
    clReleaseCommandQueue(foreign);
    clReleaseContext(other);
}
END_TEST

/* ---------------------------------------------------------------- */
/* Aliasing                                                          */
/* ---------------------------------------------------------------- */

static void expect_aliasing(const flashcl_attention_desc *d,
                            const char *label, const char *out,
                            const char *in)
{
    expectation e = {label, FLASHCL_ERROR_ALIASING, FLASHCL_SUCCESS,
                     {out, in}};
    expect_rejected(d, &e);
}

START_TEST(test_output_aliases_input)
{
    flashcl_attention_desc d = valid;
    d.o.buffer = q_buf;
    expect_aliasing(&d, "O is Q", "o", "q");

    d = valid;
    d.o.buffer = k_buf; /* K has half of O's size: use one q head */
    d.heads_q = 1;
    d.lse.buffer = NULL;
    expect_aliasing(&d, "O is K", "o", "k");

    d.o.buffer = v_buf;
    expect_aliasing(&d, "O is V", "o", "v");

    d = valid;
    d.lse.buffer = o_buf;
    expect_aliasing(&d, "LSE inside O", "lse", "o");

    d = valid;
    d.lse.buffer = q_buf;
    d.lse.offset = Q_BYTES - LSE_BYTES;
    expect_aliasing(&d, "LSE in the tail of Q", "lse", "q");
}
END_TEST

/* Q and O in one buffer: overlapping by one element is aliasing; back to
 * back is fine. */
START_TEST(test_shared_buffer_ranges)
{
    cl_mem shared = create_buffer(cl_ctx, 2 * Q_BYTES);
    rng r = rng_seeded(9);
    float values[Q_BYTES / 4];
    for (size_t i = 0; i < Q_BYTES / 4; i++)
        values[i] = (float)rng_normal(&r);
    CL_CHECK(clEnqueueWriteBuffer(queue, shared, CL_TRUE, 0, Q_BYTES, values,
                                  0, NULL, NULL));
    flashcl_attention_desc d = valid;
    d.q.buffer = shared;
    d.o.buffer = shared;
    d.o.offset = Q_BYTES - 4;
    poison_buffer(queue, o_buf, Q_BYTES);
    expect_aliasing(&d, "O overlaps the last element of Q", "o", "q");

    d.o.offset = Q_BYTES;
    expect_success(&d, "O right after Q in the same buffer");
    float q_after[Q_BYTES / 4];
    read_buffer(queue, shared, q_after, Q_BYTES);
    ck_assert_mem_eq(q_after, values, Q_BYTES);
    clReleaseMemObject(shared);
}
END_TEST

/* A sub-buffer aliases its parent: O as a sub-buffer over Q's bytes. */
START_TEST(test_sub_buffer_aliasing)
{
    cl_uint align_bits = 0;
    CL_CHECK(clGetDeviceInfo(flashcl_context_device(ctx),
                             CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                             &align_bits, NULL));
    size_t align = align_bits / 8 ? align_bits / 8 : 1;
    size_t origin = (Q_BYTES / 2 + align - 1) / align * align;
    cl_mem parent = create_buffer(cl_ctx, origin + Q_BYTES);
    cl_buffer_region region = {origin, Q_BYTES};
    cl_int err = CL_SUCCESS;
    cl_mem sub = clCreateSubBuffer(parent, CL_MEM_READ_WRITE,
                                   CL_BUFFER_CREATE_TYPE_REGION, &region,
                                   &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_attention_desc d = valid;
    d.q.buffer = parent; /* Q: bytes [0, Q_BYTES) of parent */
    d.o.buffer = sub;    /* O: bytes [origin, origin + Q_BYTES) */
    if (origin < Q_BYTES)
        expect_aliasing(&d, "O sub-buffer over Q", "o", "q");
    clReleaseMemObject(sub);
    clReleaseMemObject(parent);
}
END_TEST

/* Errors leave the context usable. */
START_TEST(test_context_usable_after_errors)
{
    flashcl_attention_desc d = valid;
    d.heads_q = 3;
    d.heads_kv = 2;
    ck_assert_int_ne(flashcl_attention_forward(ctx, NULL, &d, 0, NULL, NULL),
                     FLASHCL_SUCCESS);
    expect_success(&valid, "valid call after an error");
}
END_TEST

/* ---------------------------------------------------------------- */
/* Fixes issue: values the kernels cannot compute, ignored fields,   */
/* self-overlapping outputs, the descriptor's size (ABI)             */
/* ---------------------------------------------------------------- */

/* softcap near FLT_MAX overflowed softcap * log2(e); tiny ones flush to
 * zero on some devices. */
START_TEST(test_bad_softcap)
{
    const float bad[] = {3e38f, 2e30f, 1e-38f, -1.0f, NAN};
    for (int i = 0; i < 5; i++) {
        flashcl_attention_desc d = valid;
        d.softcap = bad[i];
        expect_error(&d, FLASHCL_ERROR_INVALID_VALUE, "softcap", "softcap");
    }
}
END_TEST

/* window_left/right set while window == 0 used to be ignored silently. */
START_TEST(test_window_bounds_without_window)
{
    flashcl_attention_desc d = valid;
    d.window_left = 3;
    expect_error(&d, FLASHCL_ERROR_INVALID_VALUE, "window_left, window 0",
                 "window|window_left");
    d = valid;
    d.window_right = -1;
    expect_error(&d, FLASHCL_ERROR_INVALID_VALUE, "window_right, window 0",
                 "window|window_right");
}
END_TEST

/* Absolute positions: never ignored, bounded, and refused where the
 * kernels align each sequence themselves (split-KV; varlen in
 * test_variants_diagonal.c). */
START_TEST(test_absolute_positions)
{
    flashcl_attention_desc d = valid;
    d.q_position = 5;
    expect_error(&d, FLASHCL_ERROR_INVALID_VALUE, "q_position, bottom-right",
                 "q_position|causal_align");
    const int64_t bad[][2] = {{-1, 0}, {0, -3}, {FLASHCL_MAX_POSITION + 1LL, 0},
                              {0, INT64_MAX}};
    for (size_t i = 0; i < LENGTH(bad); i++) {
        d = valid;
        d.causal_align = FLASHCL_CAUSAL_ABSOLUTE;
        d.q_position = bad[i][0];
        d.k_position = bad[i][1];
        expect_error(&d, FLASHCL_ERROR_INVALID_VALUE, "positions out of range",
                     bad[i][0] ? "q_position" : "k_position");
    }
    d = valid;
    d.causal_align = FLASHCL_CAUSAL_ABSOLUTE;
    d.causal = 1;
    d.q_position = FLASHCL_MAX_POSITION;
    d.k_position = 7;
    expect_success(&d, "absolute positions at the limit");
    d.num_splits = 2;
    expect_error(&d, FLASHCL_ERROR_UNSUPPORTED, "absolute positions, split",
                 "num_splits|FLASHCL_CAUSAL_ABSOLUTE");
}
END_TEST

/* lse_dtype: fp64 for fp64 calls only, and only where an fp64 LSE is
 * written (the fused forward of a dense call); nothing written otherwise. */
START_TEST(test_lse_dtype)
{
    flashcl_attention_desc d = valid;
    d.lse_dtype = FLASHCL_DTYPE_FP64;
    expect_error(&d, FLASHCL_ERROR_DTYPE_UNSUPPORTED, "fp64 LSE, fp32 call",
                 "lse_dtype");
    d.lse_dtype = (flashcl_dtype)7;
    expect_error(&d, FLASHCL_ERROR_DTYPE_UNSUPPORTED, "lse_dtype 7",
                 "lse_dtype");
    d.lse_dtype = FLASHCL_DTYPE_FP16;
    expect_error(&d, FLASHCL_ERROR_DTYPE_UNSUPPORTED, "lse_dtype fp16",
                 "lse_dtype");
    flashcl_device_info info;
    memset(&info, 0, sizeof info);
    if (flashcl_context_device_info(ctx, &info) != FLASHCL_SUCCESS ||
        !info.has_fp64)
        return; /* fp64 calls are refused before lse_dtype is read */
    d = valid;
    d.dtype = FLASHCL_DTYPE_FP64;
    d.lse_dtype = FLASHCL_DTYPE_FP64;
    d.backend = FLASHCL_BACKEND_REFERENCE;
    expect_error(&d, FLASHCL_ERROR_UNSUPPORTED, "fp64 LSE, reference backend",
                 "lse_dtype");
    d.backend = FLASHCL_BACKEND_FUSED;
    /* fp64-sized host arrays: a call that went ahead would read them */
    double *q = calloc(Q_BYTES / 4, 8), *kv = calloc(KV_BYTES / 4, 8),
           *out = calloc(Q_BYTES / 4, 8);
    float *lse = calloc(LSE_BYTES / 4, 4);
    ck_assert(q && kv && out && lse);
    const flashcl_status st =
        flashcl_attention_forward_host(ctx, &d, q, kv, kv, out, lse);
    free(q), free(kv), free(out), free(lse);
    ck_assert_msg(st == FLASHCL_ERROR_UNSUPPORTED &&
                      mentions_word(flashcl_context_last_error(ctx),
                                    "lse_dtype"),
                  "fp64 LSE, host call: %s (%s)", flashcl_status_string(st),
                  clip(flashcl_context_last_error(ctx)));
}
END_TEST

/* O or LSE views whose distinct elements share bytes made the result
 * depend on write order. */
START_TEST(test_self_overlapping_outputs)
{
    flashcl_attention_desc d = valid;
    /* BNHD strides of O with the seq stride zeroed: rows collide. */
    d.o.stride_batch = (size_t)SEQ * HEADS_Q * DIM;
    d.o.stride_head = DIM;
    d.o.stride_seq = 0;
    d.o.stride_dim = 1;
    expect_error(&d, FLASHCL_ERROR_ALIASING, "o stride_seq 0", "o");
    d = valid;
    d.o.stride_batch = (size_t)SEQ * HEADS_Q * DIM;
    d.o.stride_head = DIM;
    d.o.stride_seq = DIM * HEADS_Q;
    d.o.stride_dim = 0;
    expect_error(&d, FLASHCL_ERROR_ALIASING, "o stride_dim 0", "o");
    d = valid;
    /* Heads overlap rows: head stride 1 with dim stride 1. */
    d.o.stride_batch = (size_t)SEQ * HEADS_Q * DIM;
    d.o.stride_head = 1;
    d.o.stride_seq = DIM * HEADS_Q;
    d.o.stride_dim = 1;
    expect_error(&d, FLASHCL_ERROR_ALIASING, "o heads interleaved", "o");
    d = valid;
    d.lse.stride_batch = (size_t)HEADS_Q * SEQ;
    d.lse.stride_head = SEQ;
    d.lse.stride_seq = 0;
    expect_error(&d, FLASHCL_ERROR_ALIASING, "lse stride_seq 0", "lse");
}
END_TEST

START_TEST(test_struct_size_zero)
{
    flashcl_attention_desc d = valid;
    d.struct_size = 0;
    expect_error(&d, FLASHCL_ERROR_INVALID_VALUE, "struct_size 0",
                 "struct_size");
    d.struct_size = 8;
    expect_error(&d, FLASHCL_ERROR_INVALID_VALUE, "struct_size 8",
                 "struct_size");
}
END_TEST

/* A newer caller's descriptor (larger) is accepted when its extra bytes
 * are zero, refused when they are not (a feature this library lacks). */
START_TEST(test_struct_size_newer_caller)
{
    const size_t extra = 64;
    unsigned char *bytes = calloc(1, sizeof valid + extra);
    ck_assert_ptr_nonnull(bytes);
    memcpy(bytes, &valid, sizeof valid);
    flashcl_attention_desc *d = (flashcl_attention_desc *)bytes;
    d->struct_size = sizeof valid + extra;
    poison_buffer(queue, o_buf, Q_BYTES);
    expect_success(d, "newer caller, extra bytes zero");
    bytes[sizeof valid + 7] = 1;
    expectation e = {"newer caller, extra byte set", FLASHCL_ERROR_UNSUPPORTED,
                     FLASHCL_SUCCESS, {"struct_size", NULL}};
    expect_rejected(d, &e);
    free(bytes);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {
        {test_valid_problem_runs, 0}, {test_null_context_and_desc, 0},
        {test_null_buffers, 0}, {test_null_host_pointers, 0},
        {test_negative_dimensions, 0}, {test_overflowing_dimensions, 0},
        {test_seqlen_past_int32, 0}, {test_head_grouping, 0},
        {test_head_dim_unsupported, 0}, {test_unknown_dtype, 0},
        {test_unknown_layout, 0}, {test_bad_scale, 0}, {test_unknown_enums, 0},
        {test_views_outside_buffer, 5}, {test_view_reach_wraps_64_bits, 5},
        {test_buffer_too_small, 5}, {test_misaligned_offset, 5},
        {test_buffer_of_other_context, 0}, {test_queue_of_other_context, 0},
        {test_output_aliases_input, 0}, {test_shared_buffer_ranges, 0},
        {test_sub_buffer_aliasing, 0}, {test_context_usable_after_errors, 0},
        {test_bad_softcap, 0}, {test_window_bounds_without_window, 0},
        {test_absolute_positions, 0},
        {test_lse_dtype, 0},
        {test_self_overlapping_outputs, 0}, {test_struct_size_zero, 0},
        {test_struct_size_newer_caller, 0}};
    return run_tests("errors", 0, setup, teardown, tests, LENGTH(tests));
}
