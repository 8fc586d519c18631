/* `flashcl selftest`: builds every plain kernel variant the device would
 * use, then checks fused against the reference backend and both against a
 * float64 host reference on a handful of awkward shapes, in every dtype
 * the device can store. */
#define _POSIX_C_SOURCE 200809L
#include "cli_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char selftest_usage[] =
    "usage: flashcl selftest [--device SPEC] [--json]\n"
    "1. builds the fused kernel for every head-dim class (16..256), dtype\n"
    "   (fp32, fp16, bf16, and fp64 where the device has cl_khr_fp64) and\n"
    "   causal/non-causal, as flashcl_prepare would;\n"
    "2. runs awkward shapes (Nq != Nk both ways, GQA/MQA, rows that see no\n"
    "   key, no keys at all, D = 256, every variant at once) in each dtype\n"
    "   on the fused and the reference backend and compares both with a\n"
    "   float64 host reference and with each other.\n"
    "Prints a PASS/FAIL table; exit status 1 if anything failed.\n";

/* Head dims, one per padded class of the portable kernel. */
static const int build_dims[] = {16, 32, 48, 64, 80, 96, 112, 128,
                                 160, 192, 224, 256};
#define BUILD_DIMS ((int)(sizeof build_dims / sizeof build_dims[0]))

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
    int passed, failed;
    bool json, first_row;
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

static void run_builds(flashcl_context *ctx, int num_dtypes, tally *t)
{
    static const flashcl_dtype dtypes[4] = {
        FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16, FLASHCL_DTYPE_BF16,
        FLASHCL_DTYPE_FP64};
    if (!t->json)
        printf("\nkernel builds (%d head-dim classes, 16..256, each):\n"
               "| dtype | causal | compile ms (0 = cached) | result |\n"
               "|---|---|---|---|\n",
               BUILD_DIMS);
    for (int d = 0; d < num_dtypes; ++d)
        for (int causal = 0; causal < 2; ++causal) {
            double ms;
            char failure[256] = "";
            bool ok = build_group(ctx, dtypes[d], causal, &ms, failure,
                                  sizeof failure);
            record(t, ok);
            if (t->json) {
                printf("%s\n    {\"kind\": \"build\", \"dtype\": \"%s\", "
                       "\"causal\": %s, \"compile_ms\": ",
                       t->first_row ? "" : ",", dtype_name(dtypes[d]),
                       causal ? "true" : "false");
                json_number(stdout, ms);
                printf(", \"detail\": ");
                json_string(stdout, failure);
                printf(", \"pass\": %s}", ok ? "true" : "false");
                t->first_row = false;
            } else {
                printf("| %s | %s | %.0f | %s%s%s |\n", dtype_name(dtypes[d]),
                       causal ? "yes" : "no", ms, ok ? "PASS" : "FAIL",
                       ok ? "" : ": ", failure);
            }
            fflush(stdout);
        }
}

/* ---- checks --------------------------------------------------------- */

typedef struct check_result {
    error_pair fused, reference, between;
    char failure[256];
    bool ok;
} check_result;

static bool within(error_pair e, flashcl_dtype dtype)
{
    return e.o <= o_tolerance(dtype) && e.lse <= lse_tolerance(dtype);
}

/* Fused, then reference, on the same inputs. */
static void check_shape(flashcl_context *ctx, const problem_spec *spec,
                        flashcl_dtype dtype, check_result *r)
{
    memset(r, 0, sizeof *r);
    problem p;
    if (problem_create(ctx, spec, dtype, 77, &p) != 0) {
        snprintf(r->failure, sizeof r->failure, "could not set up buffers");
        return;
    }
    const size_t o_n = p.o_count + 1, l_n = p.lse_count + 1;
    double *ref_o = malloc(o_n * sizeof *ref_o);
    double *ref_lse = malloc(l_n * sizeof *ref_lse);
    double *fused_o = malloc(o_n * sizeof *fused_o);
    double *fused_lse = malloc(l_n * sizeof *fused_lse);
    flashcl_status status = FLASHCL_ERROR_OUT_OF_MEMORY;
    if (ref_o && ref_lse && fused_o && fused_lse &&
        problem_host_reference(&p, ref_o, ref_lse) == 0)
        status = problem_run(ctx, &p, FLASHCL_BACKEND_FUSED);
    if (status == FLASHCL_SUCCESS) {
        r->fused = problem_error(&p, ref_o, ref_lse);
        problem_snapshot(&p, fused_o, fused_lse);
        status = problem_run(ctx, &p, FLASHCL_BACKEND_REFERENCE);
    }
    if (status == FLASHCL_SUCCESS) {
        r->reference = problem_error(&p, ref_o, ref_lse);
        r->between = problem_error(&p, fused_o, fused_lse);
        r->ok = within(r->fused, dtype) && within(r->reference, dtype) &&
                within(r->between, dtype);
    } else {
        snprintf(r->failure, sizeof r->failure, "%s: %.200s",
                 flashcl_status_string(status),
                 flashcl_context_last_error(ctx));
    }
    free(ref_o);
    free(ref_lse);
    free(fused_o);
    free(fused_lse);
    problem_release(&p);
}

static void print_check(const problem_spec *s, flashcl_dtype dtype,
                        const check_result *r, tally *t)
{
    if (t->json) {
        printf("%s\n    {\"kind\": \"check\", \"shape\": ",
               t->first_row ? "" : ",");
        json_string(stdout, s->name);
        printf(", \"dtype\": \"%s\", \"fused_error\": ", dtype_name(dtype));
        json_number(stdout, r->fused.o);
        printf(", \"reference_error\": ");
        json_number(stdout, r->reference.o);
        printf(", \"fused_vs_reference\": ");
        json_number(stdout, r->between.o);
        printf(", \"lse_error\": ");
        json_number(stdout, fmax(r->fused.lse, r->reference.lse));
        printf(", \"tolerance\": %g, \"detail\": ", o_tolerance(dtype));
        json_string(stdout, r->failure);
        printf(", \"pass\": %s}", r->ok ? "true" : "false");
        t->first_row = false;
        return;
    }
    printf("| %-30s | %s | %.1e | %.1e | %.1e | %.1e | %.1e | %s%s%s |\n",
           s->name, dtype_name(dtype), r->fused.o, r->reference.o,
           r->between.o, fmax(fmax(r->fused.lse, r->reference.lse),
                              r->between.lse),
           o_tolerance(dtype), r->ok ? "PASS" : "FAIL",
           r->failure[0] ? ": " : "", r->failure);
    fflush(stdout);
}

static void run_checks(flashcl_context *ctx, int num_dtypes, tally *t)
{
    static const flashcl_dtype dtypes[4] = {
        FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16, FLASHCL_DTYPE_BF16,
        FLASHCL_DTYPE_FP64};
    if (!t->json)
        printf("\nfused vs reference vs float64 host (max |err| / max |O|; "
               "LSE: max |err| / max(1, |LSE|)):\n"
               "| shape | dtype | fused | reference | fused-ref | LSE | "
               "tolerance | result |\n|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < SHAPES; ++s)
        for (int d = 0; d < num_dtypes; ++d) {
            check_result r;
            check_shape(ctx, &shapes[s], dtypes[d], &r);
            record(t, r.ok);
            print_check(&shapes[s], dtypes[d], &r, t);
        }
}

int cmd_selftest(int argc, char **argv)
{
    common_options common = {0};
    if (parse_command_line("selftest", argc, argv, 2, &common, NULL, NULL) !=
        0)
        return EXIT_USAGE;
    if (common.help) {
        printf("%s", selftest_usage);
        return EXIT_OK;
    }
    flashcl_context *ctx = open_device("selftest", common.device);
    if (!ctx)
        return EXIT_DEVICE;
    flashcl_device_info dev;
    flashcl_context_device_info(ctx, &dev);
    const int num_dtypes = dev.has_fp64 ? 4 : 3;
    tally t = {0, 0, common.json, true};
    const double start = host_ms();
    if (common.json) {
        printf("{\"device\": ");
        json_string(stdout, dev.name);
        printf(", \"platform\": ");
        json_string(stdout, dev.platform);
        printf(", \"rows\": [");
    } else {
        printf("flashcl %s selftest on %s (%s)%s\n", flashcl_version_string(),
               dev.name, dev.platform,
               dev.has_fp64 ? "" : "; no cl_khr_fp64: fp64 skipped");
    }
    run_builds(ctx, num_dtypes, &t);
    run_checks(ctx, num_dtypes, &t);
    const double seconds = (host_ms() - start) / 1e3;
    if (common.json)
        printf("\n  ], \"passed\": %d, \"failed\": %d, \"seconds\": %.1f, "
               "\"result\": \"%s\"}\n",
               t.passed, t.failed, seconds, t.failed ? "FAIL" : "PASS");
    else
        printf("\n%s: %d passed, %d failed (%.1f s)\n",
               t.failed ? "FAIL" : "PASS", t.passed, t.failed, seconds);
    flashcl_context_release(ctx);
    return t.failed ? EXIT_FAILED : EXIT_OK;
}
