/* The wgmma path's mask-packing pass (cl/common/mask_bits.cl,
 * src/paths/mask_bits.c) on the test device: the kernel is portable
 * OpenCL C, so it runs here though its consumer runs only on sm_90. Each
 * case packs a boolean mask given through a view (shared or not along
 * batch and heads, keys contiguous or strided, an offset, key counts that
 * are not multiples of 32) into a poisoned buffer, and the words read
 * back through the view the forward kernel gets (mask_bits_view) must
 * give every byte's verdict, and 0 for every key from seqlen_k to the end
 * of the packed row. The library's sources are compiled into the test
 * (mask_bits.c is internal). */
#include "core/core.h"
#include "paths/mask_bits.h"
#include "problem/problem.h"
#include "problem/variants.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pack_case {
    const char *name;
    int batch, heads, seqlen_q, seqlen_k;
    int per_batch, per_head; /* the mask's own slices, else shared */
    int key_stride;          /* elements between keys (1: contiguous) */
    int offset;              /* elements before the view's first byte */
} pack_case;

static const pack_case cases[] = {
    {"shared [Nq, Nk], contiguous, 1000 keys", 2, 3, 37, 1000, 0, 0, 1, 0},
    {"per head, 300 keys, offset 5", 2, 3, 19, 300, 0, 1, 1, 5},
    {"per batch and head, 31 keys", 3, 2, 9, 31, 1, 1, 1, 0},
    {"per batch, keys strided by 3, 129 keys", 2, 4, 11, 129, 1, 0, 3, 7},
    {"one row, 128 keys", 1, 1, 1, 128, 0, 0, 1, 0},
};

#define LENGTH(a) (sizeof(a) / sizeof((a)[0]))

static flashcl_context *ctx;

static cl_mem make(size_t bytes, const void *host)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(
        flashcl_context_cl_context(ctx),
        CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
        (void *)host, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

/* The mask's byte of (b, h, i, key) in the host copy, by the view's
 * strides. */
static size_t mask_at(const pack_case *c, int b, int h, int i, int key)
{
    const size_t row = (size_t)c->seqlen_k * (size_t)c->key_stride;
    const size_t head = c->per_head ? row * (size_t)c->seqlen_q : 0;
    const size_t batch =
        c->per_batch ? row * (size_t)c->seqlen_q *
                           (size_t)(c->per_head ? c->heads : 1)
                     : 0;
    return (size_t)c->offset + (size_t)b * batch + (size_t)h * head +
           (size_t)i * row + (size_t)key * (size_t)c->key_stride;
}

START_TEST(packs_every_view)
{
    const pack_case *c = &cases[_i];
    const size_t mask_bytes =
        mask_at(c, c->batch - 1, c->heads - 1, c->seqlen_q - 1,
                c->seqlen_k - 1) + 1;
    unsigned char *mask = malloc(mask_bytes);
    ck_assert_ptr_nonnull(mask);
    unsigned seed = 12345u + (unsigned)_i;
    for (size_t i = 0; i < mask_bytes; ++i) {
        seed = seed * 1664525u + 1013904223u;
        /* non-zero values other than 1 must attend too */
        mask[i] = (seed >> 24) % 3 == 0 ? 0 : (unsigned char)(seed >> 16);
    }
    const int d = 16;
    const size_t qo = (size_t)c->batch * c->heads * c->seqlen_q * d * 2;
    const size_t kv = (size_t)c->batch * c->heads * c->seqlen_k * d * 2;
    cl_mem q = make(qo, NULL), k = make(kv, NULL), v = make(kv, NULL),
           o = make(qo, NULL), m = make(mask_bytes, mask);
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.batch = c->batch;
    desc.heads_q = desc.heads_kv = c->heads;
    desc.seqlen_q = c->seqlen_q;
    desc.seqlen_k = c->seqlen_k;
    desc.head_dim = d;
    desc.dtype = FLASHCL_DTYPE_FP16;
    desc.q.buffer = q;
    desc.k.buffer = k;
    desc.v.buffer = v;
    desc.o.buffer = o;
    desc.mask.buffer = m;
    desc.mask.offset = (size_t)c->offset;
    desc.mask.stride_dim = c->key_stride;
    desc.mask.stride_seq = (size_t)c->seqlen_k * (size_t)c->key_stride;
    desc.mask.stride_head =
        c->per_head ? desc.mask.stride_seq * c->seqlen_q : 0;
    desc.mask.stride_batch =
        c->per_batch ? desc.mask.stride_seq * c->seqlen_q *
                           (c->per_head ? c->heads : 1)
                     : 0;
    problem p;
    ck_assert_msg(problem_from_desc(ctx, &desc, PROBLEM_FOR_LAUNCH, &p) ==
                      FLASHCL_SUCCESS,
                  "%s: %s", c->name, flashcl_context_last_error(ctx));

    kernel_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.source = "flash_fwd_wgmma.cl";
    plan.head_dim_padded = plan.head_dim_v_padded = 64;
    plan.block_m = plan.block_n = 64;
    plan.wg_size = 128;
    mask_bits_plan(&p, &plan);
    const mask_bits_layout l = mask_bits_layout_of(&p);
    ck_assert_int_eq(l.pitch % 4, 0);
    ck_assert_int_ge(l.pitch * 32, c->seqlen_k);
    ck_assert_int_eq(l.batch, c->per_batch ? c->batch : 1);
    ck_assert_int_eq(l.heads, c->per_head ? c->heads : 1);
    compiled_program *programs[2];
    ck_assert_msg(plan_programs(ctx, &plan, programs, NULL) == FLASHCL_SUCCESS,
                  "%s: %s", c->name, flashcl_context_last_error(ctx));
    ck_assert_ptr_nonnull(programs[1]);

    unsigned char *words = malloc(l.bytes);
    ck_assert_ptr_nonnull(words);
    memset(words, 0xa5, l.bytes); /* poison: every word must be written */
    cl_mem packed = make(l.bytes, words);
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_event done = NULL;
    ck_assert_msg(mask_bits_enqueue_pack(ctx, queue, &p, &plan, &l, programs[1],
                                         packed, 0, NULL, &done) ==
                      FLASHCL_SUCCESS,
                  "%s: %s", c->name, flashcl_context_last_error(ctx));
    ck_assert_int_eq(clEnqueueReadBuffer(queue, packed, CL_TRUE, 0, l.bytes,
                                         words, 1, &done, NULL),
                     CL_SUCCESS);
    clReleaseEvent(done);

    variant_args view = p.vargs;
    mask_bits_view(&l, &p, packed, &view);
    ck_assert_uint_eq(view.mask_base, 0);
    long wrong = 0;
    for (int b = 0; b < c->batch; ++b)
        for (int h = 0; h < c->heads; ++h)
            for (int i = 0; i < c->seqlen_q; ++i) {
                const size_t row = (size_t)b * view.mask_stride.s[0] +
                                   (size_t)h * view.mask_stride.s[1] +
                                   (size_t)i * view.mask_stride.s[2];
                ck_assert_uint_eq(row % 16, 0); /* the kernel's loads */
                for (int key = 0; key < l.pitch * 32; ++key) {
                    uint32_t word;
                    memcpy(&word, words + row + (size_t)key / 32 * 4, 4);
                    const int bit = (int)(word >> (key % 32)) & 1;
                    const int want =
                        key < c->seqlen_k && mask[mask_at(c, b, h, i, key)];
                    wrong += bit != want;
                }
            }
    ck_assert_msg(wrong == 0, "%s: %ld wrong bits", c->name, wrong);
    free(words);
    free(mask);
    cl_mem owned[] = {q, k, v, o, m, packed};
    for (size_t i = 0; i < LENGTH(owned); ++i)
        clReleaseMemObject(owned[i]);
}
END_TEST

int main(void)
{
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "test_mask_bits: no OpenCL device: %s\n",
                flashcl_last_create_error());
        return 1;
    }
    Suite *suite = suite_create("mask_bits");
    TCase *tc = tcase_create("mask_bits");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, packs_every_view, 0, (int)LENGTH(cases));
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    flashcl_context_release(ctx);
    return failed ? 1 : 0;
}
