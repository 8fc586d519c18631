/* `flashcl run`: one attention on the chosen device, its error against a
 * float64 host reference and its time. */
#define _POSIX_C_SOURCE 200809L
#include "cli_common.h"

#include <stdlib.h>
#include <string.h>

static const char run_usage[] =
    "usage: flashcl run [--device SPEC] [--seqlen N] [--head-dim D]\n"
    "                   [--heads H] [--batch B] [--dtype fp32|fp16|bf16|fp64]\n"
    "                   [--causal] [--backend fused|reference] [--json]\n"
    "One attention (packed BNHD, random inputs in [-1, 1)) on the device:\n"
    "max |O - O_ref| / max |O_ref| and LSE error against a float64 host\n"
    "reference, and the median of 5 timed calls (host clock around\n"
    "clFinish, after one warm-up). Defaults: N 1024, D 64, H 8, B 1, fp32,\n"
    "fused.\n";

typedef struct run_options {
    problem_spec spec;
    flashcl_dtype dtype;
    flashcl_backend backend;
} run_options;

static int parse_run_option(void *opaque, const char *arg, const char *value)
{
    run_options *o = opaque;
    struct {
        const char *name;
        int *field;
        long max;
    } ints[] = {{"--seqlen", &o->spec.seqlen_q, 1L << 24},
                {"--head-dim", &o->spec.head_dim, 256},
                {"--heads", &o->spec.heads_q, 4096},
                {"--batch", &o->spec.batch, 65536}};
    if (!strcmp(arg, "--causal")) {
        o->spec.causal = 1;
        return 1;
    }
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; ++i)
        if (!strcmp(arg, ints[i].name)) {
            long v;
            if (!parse_int(value, 1, ints[i].max, &v)) {
                usage_error("run", "%s needs an integer in 1..%ld", arg,
                            ints[i].max);
                return -1;
            }
            *ints[i].field = (int)v;
            return 2;
        }
    if (!strcmp(arg, "--dtype")) {
        if (!value || !parse_dtype(value, &o->dtype)) {
            usage_error("run", "--dtype needs fp32, fp16, bf16 or fp64");
            return -1;
        }
        return 2;
    }
    if (!strcmp(arg, "--backend")) {
        if (value && !strcmp(value, "fused"))
            o->backend = FLASHCL_BACKEND_FUSED;
        else if (value && !strcmp(value, "reference"))
            o->backend = FLASHCL_BACKEND_REFERENCE;
        else {
            usage_error("run", "--backend needs fused or reference");
            return -1;
        }
        return 2;
    }
    return 0;
}

typedef struct run_result {
    double compile_ms, ms, gflops;
    error_pair error;
    size_t scratch;
    bool pass;
} run_result;

static void print_run(const run_options *o, const flashcl_device_info *dev,
                      const run_result *r, bool json)
{
    const problem_spec *s = &o->spec;
    const char *backend =
        o->backend == FLASHCL_BACKEND_REFERENCE ? "reference" : "fused";
    if (json) {
        printf("{\"device\": ");
        json_string(stdout, dev->name);
        printf(", \"platform\": ");
        json_string(stdout, dev->platform);
        printf(", \"backend\": \"%s\", \"batch\": %d, \"heads\": %d, "
               "\"seqlen\": %d, \"head_dim\": %d, \"dtype\": \"%s\", "
               "\"causal\": %s, \"compile_ms\": ",
               backend, s->batch, s->heads_q, s->seqlen_q, s->head_dim,
               dtype_name(o->dtype), s->causal ? "true" : "false");
        json_number(stdout, r->compile_ms);
        printf(", \"o_error\": ");
        json_number(stdout, r->error.o);
        printf(", \"lse_error\": ");
        json_number(stdout, r->error.lse);
        printf(", \"tolerance\": %g, \"median_ms\": ", o_tolerance(o->dtype));
        json_number(stdout, r->ms);
        printf(", \"gflops\": ");
        json_number(stdout, r->gflops);
        printf(", \"scratch_bytes\": %zu, \"pass\": %s}\n", r->scratch,
               r->pass ? "true" : "false");
        return;
    }
    printf("device: %s (%s)\n", dev->name, dev->platform);
    printf("attention: batch %d, heads %d, seqlen %d, head_dim %d, %s%s\n",
           s->batch, s->heads_q, s->seqlen_q, s->head_dim,
           dtype_name(o->dtype), s->causal ? ", causal" : "");
    printf("backend: %s (scratch %.1f MiB)\n", backend,
           (double)r->scratch / 1048576.0);
    if (o->backend == FLASHCL_BACKEND_REFERENCE)
        printf("first call (builds CLBlast's and our kernels): %.1f ms\n",
               r->compile_ms);
    else
        printf("kernel compile: %.1f ms (0 = cached)\n", r->compile_ms);
    printf("max |O - O_ref| / max |O_ref| vs float64 reference: %.3e, LSE "
           "error %.3e\n",
           r->error.o, r->error.lse);
    printf("time: %.3f ms (median of 5, host clock), %.2f GFLOP/s\n", r->ms,
           r->gflops);
    printf("%s (tolerance %.1e)\n", r->pass ? "PASS" : "FAIL",
           o_tolerance(o->dtype));
}

/* Everything after the context exists. */
static int run_on(flashcl_context *ctx, const run_options *o, bool json)
{
    problem p;
    if (problem_create(ctx, &o->spec, o->dtype, 2024, &p) != 0)
        return EXIT_DEVICE;
    run_result r = {0};
    flashcl_attention_desc desc = problem_desc(&p, o->backend);
    /* The fused kernel compiles in flashcl_prepare; the reference backend
     * (CLBlast and its own kernels) on its first call, timed instead. */
    flashcl_status status = FLASHCL_SUCCESS;
    if (o->backend == FLASHCL_BACKEND_REFERENCE)
        status = flashcl_reference_scratch_bytes(ctx, &desc, &r.scratch);
    else
        status = flashcl_prepare(ctx, &desc, &r.compile_ms);
    const double start = host_ms();
    if (status == FLASHCL_SUCCESS)
        status = problem_run(ctx, &p, o->backend);
    if (o->backend == FLASHCL_BACKEND_REFERENCE)
        r.compile_ms = host_ms() - start;
    double *ref_o = malloc((p.o_count + 1) * sizeof *ref_o);
    double *ref_lse = malloc((p.lse_count + 1) * sizeof *ref_lse);
    int rc = EXIT_DEVICE;
    if (status == FLASHCL_SUCCESS && ref_o && ref_lse &&
        problem_host_reference(&p, ref_o, ref_lse) == 0) {
        r.error = problem_error(&p, ref_o, ref_lse);
        r.ms = time_calls(ctx, &desc, 1, 5, &status);
        const problem_spec *s = &o->spec;
        double flops = 4.0 * s->batch * s->heads_q * (double)s->seqlen_q *
                       s->seqlen_q * s->head_dim * (s->causal ? 0.5 : 1.0);
        r.gflops = r.ms > 0 ? flops / (r.ms * 1e-3) / 1e9 : 0;
        r.pass = status == FLASHCL_SUCCESS &&
                 r.error.o <= o_tolerance(o->dtype) &&
                 r.error.lse <= lse_tolerance(o->dtype);
        flashcl_device_info dev;
        flashcl_context_device_info(ctx, &dev);
        print_run(o, &dev, &r, json);
        rc = r.pass ? EXIT_OK : EXIT_FAILED;
    }
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl run: %s: %s\n", flashcl_status_string(status),
                flashcl_context_last_error(ctx));
        rc = EXIT_DEVICE;
    }
    free(ref_o);
    free(ref_lse);
    problem_release(&p);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    run_options o = {.spec = {.name = "run", .batch = 1, .heads_q = 8,
                              .seqlen_q = 1024, .head_dim = 64},
                     .dtype = FLASHCL_DTYPE_FP32,
                     .backend = FLASHCL_BACKEND_FUSED};
    common_options common = {0};
    if (parse_command_line("run", argc, argv, 2, &common, parse_run_option,
                           &o) != 0)
        return EXIT_USAGE;
    if (common.help) {
        printf("%s", run_usage);
        return EXIT_OK;
    }
    o.spec.heads_kv = o.spec.heads_q;
    o.spec.seqlen_k = o.spec.seqlen_q;
    flashcl_context *ctx = open_device("run", common.device);
    if (!ctx)
        return EXIT_DEVICE;
    int rc = run_on(ctx, &o, common.json);
    flashcl_context_release(ctx);
    return rc;
}
