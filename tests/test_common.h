/*
 * Helpers shared by the flashcl Check tests: the process-wide context,
 * random inputs, strided device tensors mirrored on the host, poisoning,
 * and the comparison of a device result with the float64 reference.
 */
#ifndef FLASHCL_TESTS_COMMON_H
#define FLASHCL_TESTS_COMMON_H

#include "flashcl.h"
#include "reference.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>

/* Byte every output buffer is filled with before a call: 0xFF.. is a NaN in
 * fp32, fp16 and bf16, so any element the library forgets to write shows. */
#define POISON_BYTE 0xFF

/* ---------------------------------------------------------------- */
/* Context and OpenCL                                                */
/* ---------------------------------------------------------------- */

/* The process-wide flashcl context (device from FLASHCL_DEVICE or the
 * default), created on first use. Fails the running test (never skips) if
 * no OpenCL device can be opened. */
flashcl_context *shared_context(void);
void release_shared_context(void);

/* Fails the running test if `err` is not CL_SUCCESS. */
#define CL_CHECK(call)                                                         \
    do {                                                                       \
        cl_int cl_check_err_ = (call);                                         \
        ck_assert_msg(cl_check_err_ == CL_SUCCESS, "%s failed: %d", #call,     \
                      (int)cl_check_err_);                                     \
    } while (0)

/* Another in-order queue on the context's device and cl_context. */
cl_command_queue create_queue(flashcl_context *ctx);
cl_mem create_buffer(cl_context context, size_t bytes);
void write_buffer(cl_command_queue queue, cl_mem buffer, const void *bytes,
                  size_t count);
void read_buffer(cl_command_queue queue, cl_mem buffer, void *bytes,
                 size_t count);
/* Fills a whole device buffer with POISON_BYTE. */
void poison_buffer(cl_command_queue queue, cl_mem buffer, size_t bytes);
/* 1 if every byte of the device buffer is still POISON_BYTE. */
int buffer_is_poisoned(cl_command_queue queue, cl_mem buffer, size_t bytes);

/* For CI's emulated runs, whose every kernel variant takes seconds to
 * compile on Intel's CPU runtime (scripts/test.sh): the environment
 * variable `name` set to "n" runs cases 0, n, 2n, ... of a table, "n+k"
 * cases k, k + n, ...; 1 if case `index` is left out (it then passes
 * without running). Unset: every case runs. */
int test_case_skipped(const char *name, int index);

/* `text` cut to fit a Check failure message (Check aborts the whole run on
 * a message over its limit, e.g. a kernel build log); a longer text is
 * printed in full on stderr first. Static buffer: main thread only. */
const char *clip(const char *text);

/* FLASHCL_EXPECT_PATH=<path>[:<dtype>,...] (CI runs it with
 * FLASHCL_PATH=<path>): fails the running test unless `desc` (a forward
 * call on `ctx`) ran on that path, or is excused: a storage dtype not in
 * the list, or a skip reason containing a phrase of
 * FLASHCL_EXPECT_PATH_EXCEPT. Calls on the reference backend are not
 * counted. Prints the path of each call; run_suite prints how many noted
 * calls ran on it and fails when none did. Nothing when unset. */
void expect_path_check(flashcl_context *ctx, const flashcl_attention_desc *desc,
                       const char *what);

/* expect_path_check's verdict on a call already described (the backward:
 * flashcl_describe_backward) of storage `dtype`. */
void expect_path_info(const flashcl_variant_info *info, flashcl_dtype dtype,
                      const char *what);

/* Runs a Check suite without forking (one process shares one context, so
 * each kernel variant is compiled once) and returns the exit status. */
int run_suite(Suite *suite);

/* A suite written as a table, so test files list their tests instead of
 * repeating Check's registration calls. */
typedef struct test_entry {
    const TTest *test;
    int loops; /* 0: a plain test; n: a loop test over _i in [0, n) */
} test_entry;

typedef struct test_group {
    const char *name;
    int timeout;          /* seconds; 0 keeps Check's default */
    SFun setup, teardown; /* checked fixture, NULL for none */
    const test_entry *tests;
    size_t count;
} test_group;

#define LENGTH(array) (sizeof(array) / sizeof((array)[0]))

Suite *suite_from_groups(const char *name, const test_group *groups,
                         size_t count);
/* run_suite() of the suite of `groups`. */
int run_groups(const char *name, const test_group *groups, size_t count);
/* run_groups() of one group, named as the suite. */
int run_tests(const char *name, int timeout, SFun setup, SFun teardown,
              const test_entry *tests, size_t count);

/* ---------------------------------------------------------------- */
/* Random numbers                                                    */
/* ---------------------------------------------------------------- */

typedef struct rng {
    uint64_t state;
} rng;

rng rng_seeded(uint64_t seed);
uint64_t rng_next(rng *r);
/* Standard normal (Box-Muller). */
double rng_normal(rng *r);

/* ---------------------------------------------------------------- */
/* Strided tensors                                                   */
/* ---------------------------------------------------------------- */

/* How a test lays a tensor out in its buffer. */
typedef enum view_kind {
    VIEW_PACKED = 0,      /* all strides 0: packed in desc.layout, offset 0 */
    VIEW_PADDED = 1,      /* explicit strides with padding, non-zero offset */
    VIEW_DIM_STRIDED = 2  /* as PADDED, and stride_dim = 2 */
} view_kind;

typedef struct tensor_shape {
    size_t batch, heads, seq, dim;
} tensor_shape;

/* A device tensor (its view in flashcl terms) with a host copy of the whole
 * buffer and the strides actually in effect. */
typedef struct test_tensor {
    flashcl_tensor view;   /* what goes into the descriptor */
    ref_dtype dtype;
    tensor_shape shape;
    size_t offset_elems;   /* the view's start, in elements */
    size_t stride[4];      /* effective element strides (b, h, s, d) */
    size_t total_elems;    /* elements in the buffer */
    unsigned char *host;   /* total_elems * element size bytes */
} test_tensor;

/* Lays a tensor out (host only; no device buffer yet). */
void tensor_layout(test_tensor *t, tensor_shape shape, ref_dtype dtype,
                   flashcl_layout layout, view_kind kind);
/* Host only: padding NaN, view elements normal(0, 1) * `amplitude`. */
void tensor_fill_random_host(test_tensor *t, rng *r, double amplitude);
/* Host: padding NaN, view elements normal(0, 1) * `amplitude` rounded to the
 * dtype. Then creates the device buffer and uploads. */
void tensor_fill_random(test_tensor *t, rng *r, double amplitude,
                        cl_context context, cl_command_queue queue);
/* Host and device buffer poisoned, for outputs. */
void tensor_make_poisoned(test_tensor *t, cl_context context,
                          cl_command_queue queue);
/* Reads the device buffer back into t->host. */
void tensor_download(test_tensor *t, cl_command_queue queue);
void tensor_release(test_tensor *t);
size_t tensor_bytes(const test_tensor *t);
size_t tensor_index(const test_tensor *t, size_t b, size_t h, size_t s,
                    size_t d);
ref_view tensor_ref_view(const test_tensor *t);
/* Number of elements outside the view that are no longer poisoned; the
 * first one's element index goes to *first (if any). */
size_t tensor_count_clobbered(const test_tensor *t, size_t *first);

/* LSE tensors use the same struct with shape (batch, heads_q, seqlen_q, 1)
 * and dtype fp32; VIEW_PACKED gives zero strides. */
void lse_layout(test_tensor *t, size_t batch, size_t heads_q,
                size_t seqlen_q, view_kind kind);

/* ---------------------------------------------------------------- */
/* Comparison with the reference                                     */
/* ---------------------------------------------------------------- */

/* Tolerance of one storage dtype; see tolerance_for() for the reasons. */
typedef struct tolerance {
    /* Per element: |err| <= elem_rel * |ref| + floor_rel * max|ref|. */
    double elem_rel, floor_rel;
    /* Overall: max |err| <= max_rel * max |ref|. */
    double max_rel;
    /* LSE (always fp32): |err| <= lse_rel * max(1, |ref|). */
    double lse_rel;
} tolerance;

tolerance tolerance_for(ref_dtype dtype);

typedef struct compare_result {
    int ok;
    double max_err, max_ref;
    double worst_bound_use; /* max over elements of |err| / bound */
    double lse_max_err;     /* max |err| / max(1, |ref|) over LSE rows */
    char detail[512]; /* first violation, if any */
} compare_result;

/* Compares O (and LSE if lse != NULL) of the device against the reference
 * arrays (packed, as ref_attention() writes them). */
compare_result compare_output(const test_tensor *o, const double *ref_o,
                              const test_tensor *lse, const double *ref_lse,
                              tolerance tol);

/* ---------------------------------------------------------------- */
/* One attention problem: inputs, outputs, reference                 */
/* ---------------------------------------------------------------- */

typedef struct attention_case {
    size_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    ref_dtype dtype;
    int causal;
    flashcl_layout layout;
    view_kind view;   /* for Q, K, V, O and LSE alike */
    float scale;      /* as in the descriptor: 0 means 1/sqrt(head_dim) */
    int with_lse;
    uint64_t seed;
    int explicit_scale; /* as in the descriptor: scale used as given */
    int allow_tf32;     /* as in the descriptor: fp32 may run as TF32 */
} attention_case;

typedef struct case_data {
    test_tensor q, k, v, o, lse;
    double *ref_o, *ref_lse;
} case_data;

/* The float64 O and LSE of `c` at `scale` for inputs q, k, v, in arrays
 * it allocates (packed, as ref_attention() writes them). */
void case_reference(const attention_case *c, double scale,
                    const test_tensor *q, const test_tensor *k,
                    const test_tensor *v, double **ref_o, double **ref_lse);
/* The tests' usual small problem: batch 1, two query heads sharing one KV
 * head, D 32, BNHD, packed views, LSE, default scale. */
attention_case small_case(ref_dtype dtype, size_t seqlen_q, size_t seqlen_k,
                          int causal, uint64_t seed);
/* "fp16 B2 Hq8/Hkv1 Nq65 Nk7 D40 causal BHND padded seed=..." */
void case_describe(const attention_case *c, char *text, size_t size);
/* Random inputs (seeded by c->seed) on the device and host, poisoned O and
 * LSE, and the float64 reference of the quantized inputs. */
void case_prepare(const attention_case *c, cl_context context,
                  cl_command_queue queue, case_data *data);
/* The descriptor's sizes and dtype only: no buffers, default layout. */
flashcl_attention_desc case_shape_desc(const attention_case *c);
flashcl_attention_desc case_desc(const attention_case *c,
                                 const case_data *data);
/* Downloads O and LSE and compares them with the reference. */
/* tolerance_for(c->dtype), widened by the P rounding of the NVIDIA
 * tensor-core kernel when that is the kernel the call runs on. */
tolerance tolerance_for_call(const attention_case *c, const case_data *data);
tolerance tolerance_for_desc(ref_dtype dtype,
                             const flashcl_attention_desc *desc);

compare_result case_check(const attention_case *c, case_data *data,
                          cl_command_queue queue);
void case_release(case_data *data);
/* Runs one case on the shared context end to end and fails the test with
 * the case's description (seed included) if the result is off. Returns
 * the comparison for the caller's statistics. */
compare_result run_case(const attention_case *c);
/* The same on any context and queue (NULL: the context's), leaving the
 * data (downloaded O and LSE included) to the caller to inspect and
 * release with case_release(). */
compare_result run_case_keep(flashcl_context *ctx, cl_command_queue queue,
                             const attention_case *c, case_data *data);

const char *ref_dtype_name(ref_dtype dtype);
flashcl_dtype to_flashcl_dtype(ref_dtype dtype);

#endif
