/* `flashcl selftest`: builds every plain kernel variant the device would
 * use, then checks fused against the reference backend and both against the
 * float64 oracle on a handful of awkward shapes, in every dtype the device
 * can store. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "cli_args.h"
#include "cli_backward.h"
#include "cli_device.h"
#include "cli_problem.h"
#include "cli_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct selftest_options {
    bool no_progress;
} selftest_options;

static const cli_option selftest_table[] = {
    {"no-progress", NULL, "no progress on stderr", CLI_FLAG,
     offsetof(selftest_options, no_progress), 0, 0, NULL, NULL},
    CLI_OPTIONS_END,
};

const cli_command selftest_command = {
    "selftest", "build every kernel variant; fused vs reference vs float64",
    "1. builds the fused kernel for every head-dim class (16..256), dtype\n"
    "   (fp32, fp16, bf16, and fp64 where the device has cl_khr_fp64) and\n"
    "   causal/non-causal, as flashcl_prepare would;\n"
    "2. runs awkward shapes (Nq != Nk both ways, GQA/MQA, rows that see no\n"
    "   key, no keys at all, D = 256, every variant at once) in each dtype\n"
    "   on the fused and the reference backend and compares both with the\n"
    "   float64 oracle and with each other; a row passes when every O error\n"
    "   is within the O tolerance and every LSE error within the LSE one;\n"
    "3. runs one small backward per dtype (GQA, causal, softcap, sinks) and\n"
    "   compares dQ, dK, dV with the float64 gradient oracle.\n"
    "Prints a PASS/FAIL table and the wall time; exit status 1 if anything\n"
    "failed. Progress goes to stderr: one line rewritten in place on a\n"
    "terminal, else one \"[k/n] step\" line per step; a step still running\n"
    "is shown again every 2 s.\n",
    selftest_table};

/* Head dims, one per padded class of the portable kernel. */
static const int build_dims[] = {16, 32, 48, 64, 80, 96, 112, 128,
                                 160, 192, 224, 256};
#define BUILD_DIMS ((int)(sizeof build_dims / sizeof build_dims[0]))

static const flashcl_dtype dtypes[4] = {FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16,
                                        FLASHCL_DTYPE_BF16, FLASHCL_DTYPE_FP64};

static const problem_spec shapes[] = {
    {.name = "one query, one key", .batch = 1, .heads_q = 1, .heads_kv = 1,
     .seqlen_q = 1, .seqlen_k = 1, .head_dim = 64},
    {.name = "GQA 4/2, Nq<Nk, causal", .batch = 2, .heads_q = 4,
     .heads_kv = 2, .seqlen_q = 65, .seqlen_k = 203, .head_dim = 40,
     .causal = 1},
    {.name = "Nq>Nk causal: rows see no key", .batch = 1, .heads_q = 2,
     .heads_kv = 1, .seqlen_q = 203, .seqlen_k = 65, .head_dim = 96,
     .causal = 1},
    {.name = "MQA 8/1, odd sizes", .batch = 1, .heads_q = 8, .heads_kv = 1,
     .seqlen_q = 127, .seqlen_k = 129, .head_dim = 128},
    {.name = "no keys (Nk = 0)", .batch = 1, .heads_q = 2, .heads_kv = 2,
     .seqlen_q = 33, .seqlen_k = 0, .head_dim = 64},
    {.name = "D = 256", .batch = 1, .heads_q = 2, .heads_kv = 2,
     .seqlen_q = 64, .seqlen_k = 100, .head_dim = 256},
    {.name = "top-left causal + window 16/-", .batch = 1, .heads_q = 3,
     .heads_kv = 3, .seqlen_q = 90, .seqlen_k = 150, .head_dim = 32,
     .causal = 1, .top_left = 1, .window = 1, .window_left = 16,
     .window_right = -1},
    {.name = "all variants, GQA 2, Dv 48", .batch = 2, .heads_q = 4,
     .heads_kv = 2, .seqlen_q = 77, .seqlen_k = 130, .head_dim = 64,
     .head_dim_v = 48, .causal = 1, .window = 1, .window_left = 50,
     .window_right = -1, .alibi = 1, .bias = 1, .mask = 1, .sinks = 1,
     .softcap = 20.0f},
};
#define SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

typedef struct tally {
    int passed, failed, step;
    bool json;
    json_writer j;
    progress progress;
} tally;

static void record(tally *t, bool ok)
{
    if (ok)
        ++t->passed;
    else
        ++t->failed;
}

/* ---- builds --------------------------------------------------------- */

/* All head-dim classes of one (dtype, causal); returns ok. */
static bool build_group(flashcl_context *ctx, flashcl_dtype dtype, int causal,
                        double *total_ms, char *failure, size_t cap)
{
    *total_ms = 0;
    for (int i = 0; i < BUILD_DIMS; ++i) {
        flashcl_attention_desc desc;
        flashcl_attention_desc_init(&desc);
        desc.batch = desc.heads_q = 1;
        desc.seqlen_q = desc.seqlen_k = 128;
        desc.head_dim = build_dims[i];
        desc.dtype = dtype;
        desc.causal = causal;
        double ms = 0;
        if (flashcl_prepare(ctx, &desc, &ms) != FLASHCL_SUCCESS) {
            snprintf(failure, cap, "D=%d: %.200s", build_dims[i],
                     flashcl_context_last_error(ctx));
            return false;
        }
        *total_ms += ms;
    }
    return true;
}

static void print_build(tally *t, flashcl_dtype dtype, int causal, double ms,
                        bool ok, const char *failure)
{
    progress_clear(&t->progress);
    if (t->json) {
        json_object(&t->j, NULL);
        json_string(&t->j, "kind", "build");
        json_string(&t->j, "dtype", dtype_name(dtype));
        json_bool(&t->j, "causal", causal);
        json_number(&t->j, "compile_ms", ms);
        json_string(&t->j, "detail", failure);
        json_bool(&t->j, "pass", ok);
        json_close(&t->j);
        return;
    }
    printf("| %s | %s | %.0f | %s%s%s |\n", dtype_name(dtype),
           causal ? "yes" : "no", ms, ok ? "PASS" : "FAIL", ok ? "" : ": ",
           failure);
    fflush(stdout);
}

static void run_builds(flashcl_context *ctx, int num_dtypes, tally *t)
{
    if (!t->json)
        printf("\nkernel builds (%d head-dim classes, 16..256, each):\n"
               "| dtype | causal | compile ms in this process (0: was "
               "cached) | result |\n|---|---|---|---|\n",
               BUILD_DIMS);
    for (int d = 0; d < num_dtypes; ++d)
        for (int causal = 0; causal < 2; ++causal) {
            progress_step(&t->progress, ++t->step, "build %s%s",
                          dtype_name(dtypes[d]), causal ? " causal" : "");
            double ms;
            char failure[256] = "";
            bool ok = build_group(ctx, dtypes[d], causal, &ms, failure,
                                  sizeof failure);
            record(t, ok);
            print_build(t, dtypes[d], causal, ms, ok, failure);
        }
}

/* ---- checks --------------------------------------------------------- */

typedef struct check_result {
    error_pair fused, reference, between;
    double lse; /* the worst of the three */
    char failure[256];
    bool ok;
} check_result;

/* Fused and reference on the same inputs, each against the oracle, and
 * against each other. */
static flashcl_status compare_backends(flashcl_context *ctx, problem *p,
                                       const reference_result *ref,
                                       check_result *r)
{
    double *fused_o = malloc((p->o_count + 1) * sizeof *fused_o);
    double *fused_lse = malloc((p->lse_count + 1) * sizeof *fused_lse);
    flashcl_status status = fused_o && fused_lse
                                ? problem_run(ctx, p, FLASHCL_BACKEND_FUSED)
                                : FLASHCL_ERROR_OUT_OF_MEMORY;
    if (status == FLASHCL_SUCCESS) {
        r->fused = problem_error(p, ref->o, ref->lse);
        problem_snapshot(p, fused_o, fused_lse);
        status = problem_run(ctx, p, FLASHCL_BACKEND_REFERENCE);
    }
    if (status == FLASHCL_SUCCESS) {
        r->reference = problem_error(p, ref->o, ref->lse);
        r->between = problem_error(p, fused_o, fused_lse);
    }
    free(fused_o);
    free(fused_lse);
    return status;
}

static void check_shape(flashcl_context *ctx, const problem_spec *spec,
                        flashcl_dtype dtype, check_result *r)
{
    memset(r, 0, sizeof *r);
    problem p;
    flashcl_status status = problem_create(ctx, spec, dtype, 77, &p,
                                           r->failure, sizeof r->failure);
    if (status != FLASHCL_SUCCESS)
        return;
    reference_result ref = problem_reference(&p);
    status = ref.o ? compare_backends(ctx, &p, &ref, r)
                   : FLASHCL_ERROR_OUT_OF_MEMORY;
    if (status == FLASHCL_SUCCESS) {
        r->lse = fmax(fmax(r->fused.lse, r->reference.lse), r->between.lse);
        r->ok = within_tolerance(r->fused, dtype) &&
                within_tolerance(r->reference, dtype) &&
                within_tolerance(r->between, dtype);
    } else {
        snprintf(r->failure, sizeof r->failure, "%s: %.200s",
                 flashcl_status_string(status),
                 flashcl_context_last_error(ctx));
    }
    reference_free(&ref);
    problem_release(&p);
}

static void print_check_json(tally *t, const problem_spec *s,
                             flashcl_dtype dtype, const check_result *r)
{
    json_object(&t->j, NULL);
    json_string(&t->j, "kind", "check");
    json_string(&t->j, "shape", s->name);
    json_string(&t->j, "dtype", dtype_name(dtype));
    json_number(&t->j, "fused_error", r->fused.o);
    json_number(&t->j, "reference_error", r->reference.o);
    json_number(&t->j, "fused_vs_reference", r->between.o);
    json_number(&t->j, "o_tolerance", o_tolerance(dtype));
    json_number(&t->j, "lse_error", r->lse);
    json_number(&t->j, "lse_tolerance", lse_tolerance(dtype));
    json_string(&t->j, "detail", r->failure);
    json_bool(&t->j, "pass", r->ok);
    json_close(&t->j);
}

static void print_check(tally *t, const problem_spec *s, flashcl_dtype dtype,
                        const check_result *r)
{
    progress_clear(&t->progress);
    if (t->json) {
        print_check_json(t, s, dtype, r);
        return;
    }
    printf("| %-30s | %s | %.1e | %.1e | %.1e | %.1e | %.1e | %.1e | %s%s%s "
           "|\n",
           s->name, dtype_name(dtype), r->fused.o, r->reference.o,
           r->between.o, o_tolerance(dtype), r->lse, lse_tolerance(dtype),
           r->ok ? "PASS" : "FAIL", r->failure[0] ? ": " : "", r->failure);
    fflush(stdout);
}

static void run_checks(flashcl_context *ctx, int num_dtypes, tally *t)
{
    if (!t->json)
        printf("\nfused vs reference vs float64 oracle (O: max |err| / max "
               "|O|; LSE: max |err| / max(1, |LSE|), the worst of the "
               "three):\n| shape | dtype | fused | reference | fused-ref | "
               "O tol | LSE | LSE tol | result |\n"
               "|---|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < SHAPES; ++s)
        for (int d = 0; d < num_dtypes; ++d) {
            progress_step(&t->progress, ++t->step, "check %s, %s",
                          shapes[s].name, dtype_name(dtypes[d]));
            check_result r;
            check_shape(ctx, &shapes[s], dtypes[d], &r);
            record(t, r.ok);
            print_check(t, &shapes[s], dtypes[d], &r);
        }
}

/* ---- the backward ------------------------------------------------- */

static const problem_spec backward_shape = {
    .name = "GQA 4/2, causal, softcap, sinks", .batch = 1, .heads_q = 4,
    .heads_kv = 2, .seqlen_q = 33, .seqlen_k = 47, .head_dim = 32,
    .causal = 1, .sinks = 1, .softcap = 20.0f};

/* The forward then the backward on one problem; returns ok. */
static bool check_backward(flashcl_context *ctx, flashcl_dtype dtype,
                           backward_result *r, char *failure, size_t cap)
{
    memset(r, 0, sizeof *r);
    problem p;
    flashcl_status status =
        problem_create(ctx, &backward_shape, dtype, 77, &p, failure, cap);
    if (status != FLASHCL_SUCCESS)
        return false;
    status = problem_run(ctx, &p, FLASHCL_BACKEND_FUSED);
    if (status == FLASHCL_SUCCESS)
        status = problem_backward(ctx, &p, 1, r, failure, cap);
    else
        snprintf(failure, cap, "%s: %.200s", flashcl_status_string(status),
                 flashcl_context_last_error(ctx));
    problem_release(&p);
    return status == FLASHCL_SUCCESS && r->pass;
}

static void print_backward(tally *t, flashcl_dtype dtype,
                           const backward_result *r, bool ok,
                           const char *failure)
{
    progress_clear(&t->progress);
    if (t->json) {
        json_object(&t->j, NULL);
        json_string(&t->j, "kind", "backward");
        json_string(&t->j, "shape", backward_shape.name);
        json_string(&t->j, "dtype", dtype_name(dtype));
        json_number(&t->j, "dq_error", r->dq_error);
        json_number(&t->j, "dk_error", r->dk_error);
        json_number(&t->j, "dv_error", r->dv_error);
        json_number(&t->j, "grad_tolerance", grad_tolerance(dtype));
        json_string(&t->j, "detail", failure);
        json_bool(&t->j, "pass", ok);
        json_close(&t->j);
        return;
    }
    printf("| %s | %s | %.1e | %.1e | %.1e | %.1e | %s%s%s |\n",
           backward_shape.name, dtype_name(dtype), r->dq_error, r->dk_error,
           r->dv_error, grad_tolerance(dtype), ok ? "PASS" : "FAIL",
           failure[0] ? ": " : "", failure);
    fflush(stdout);
}

static void run_backward_checks(flashcl_context *ctx, int num_dtypes,
                                tally *t)
{
    if (!t->json)
        printf("\nbackward vs float64 gradient oracle (max |err| / max "
               "|ref|):\n| shape | dtype | dQ | dK | dV | tol | result |\n"
               "|---|---|---|---|---|---|---|\n");
    for (int d = 0; d < num_dtypes; ++d) {
        progress_step(&t->progress, ++t->step, "backward %s",
                      dtype_name(dtypes[d]));
        backward_result r;
        char failure[256] = "";
        bool ok = check_backward(ctx, dtypes[d], &r, failure, sizeof failure);
        record(t, ok);
        print_backward(t, dtypes[d], &r, ok, failure);
    }
}

/* ---- the command ---------------------------------------------------- */

static void print_start(tally *t, const flashcl_device_info *dev)
{
    if (t->json) {
        json_begin(&t->j, stdout, 2);
        json_object(&t->j, NULL);
        json_string(&t->j, "device", dev->name);
        json_string(&t->j, "platform", dev->platform);
        json_array(&t->j, "rows");
        return;
    }
    printf("flashcl %s selftest on %s (%s)%s\n", flashcl_version_string(),
           dev->name, dev->platform,
           dev->has_fp64 ? "" : "; no cl_khr_fp64: fp64 skipped");
}

static void print_end(tally *t, double seconds)
{
    progress_clear(&t->progress);
    const char *result = t->failed ? "FAIL" : "PASS";
    if (!t->json) {
        printf("\n%s: %d passed, %d failed (%.1f s)\n", result, t->passed,
               t->failed, seconds);
        return;
    }
    json_close(&t->j);
    json_integer(&t->j, "passed", t->passed);
    json_integer(&t->j, "failed", t->failed);
    json_number(&t->j, "seconds", seconds);
    json_string(&t->j, "result", result);
    json_close(&t->j);
    json_end(&t->j);
}

int cmd_selftest(int argc, char **argv)
{
    selftest_options o = {0};
    common_options common = {0};
    int rc = cli_start(&selftest_command, argc, argv, &common, &o);
    if (rc != CLI_GO_ON)
        return rc;
    /* The printed time is the wall time: from here to after the release. */
    const double start = timing_host_ms();
    flashcl_context *ctx =
        open_device("selftest", common.device, common.json, &rc);
    if (!ctx)
        return rc;
    flashcl_device_info dev;
    flashcl_context_device_info(ctx, &dev);
    const int num_dtypes = dev.has_fp64 ? 4 : 3;
    tally t = {.json = common.json};
    progress_begin(&t.progress, num_dtypes * (3 + SHAPES) + 1,
                   !o.no_progress);
    progress_heartbeat_start(&t.progress);
    print_start(&t, &dev);
    run_builds(ctx, num_dtypes, &t);
    run_checks(ctx, num_dtypes, &t);
    run_backward_checks(ctx, num_dtypes, &t);
    progress_step(&t.progress, ++t.step, "releasing the context");
    flashcl_context_release(ctx);
    progress_heartbeat_stop(&t.progress);
    print_end(&t, (timing_host_ms() - start) / 1e3);
    return t.failed ? EXIT_FAILED : EXIT_OK;
}
