/* `flashcl bench`: the benchmark sweep (FlashAttention-2 paper protocol:
 * batch * seqlen = tokens, heads = hidden / head_dim) for the fused and the
 * reference backend side by side, with the speed-up and each one's scratch
 * memory. */
#define _POSIX_C_SOURCE 200809L
#include "cli_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 16

static const char bench_usage[] =
    "usage: flashcl bench [--device SPEC] [options] [--json]\n"
    "  --dtype LIST       fp32,fp16,bf16,fp64 (default: fp32 on a CPU,\n"
    "                     fp16,bf16 on a GPU)\n"
    "  --head-dim LIST    head dims (default 64; GPU 64,128)\n"
    "  --seqlen LIST      sequence lengths (default 256,512,1024,2048; GPU\n"
    "                     512..16384)\n"
    "  --causal MODE      0, 1 or both (default 0 on a CPU, both on a GPU)\n"
    "  --window N         sliding window of N keys to the left (default off)\n"
    "  --tokens N         batch * seqlen (default 2048; GPU 16384)\n"
    "  --hidden N         heads * head_dim (default 256; GPU 2048)\n"
    "  --backend LIST     fused,reference (default both)\n"
    "  --reps N           timed calls per point, median (default 5)\n"
    "  --warmup N         untimed calls first (default 1)\n"
    "  --no-progress      no progress line on stderr (it is shown only\n"
    "                     when stderr is a terminal anyway)\n"
    "Times are host clock around enqueue + clFinish for both backends (the\n"
    "reference path is many commands). Scratch is the device memory a call\n"
    "allocates besides its inputs and outputs: 0 for fused.\n";

typedef struct bench_options {
    flashcl_dtype dtypes[4];
    int num_dtypes;
    int head_dims[MAX_LIST], num_head_dims;
    int seqlens[MAX_LIST], num_seqlens;
    int causal_modes[2], num_causal;
    int window; /* 0: off */
    long tokens, hidden;
    bool fused, reference;
    int reps, warmup;
    bool no_progress;
} bench_options;

static int parse_causal(bench_options *o, const char *value)
{
    o->num_causal = 0;
    if (!value || (strcmp(value, "0") && strcmp(value, "1") &&
                   strcmp(value, "both"))) {
        usage_error("bench", "--causal needs 0, 1 or both");
        return -1;
    }
    if (strcmp(value, "1") != 0)
        o->causal_modes[o->num_causal++] = 0;
    if (strcmp(value, "0") != 0)
        o->causal_modes[o->num_causal++] = 1;
    return 2;
}

static int parse_backends(bench_options *o, const char *value)
{
    o->fused = value && strstr(value, "fused");
    o->reference = value && strstr(value, "reference");
    char *copy = strdup(value ? value : "");
    bool ok = copy && *copy;
    char *save = NULL;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; item && ok;
         item = strtok_r(NULL, ",", &save))
        ok = !strcmp(item, "fused") || !strcmp(item, "reference");
    free(copy);
    if (!ok) {
        usage_error("bench", "--backend needs fused, reference or both");
        return -1;
    }
    return 2;
}

static int parse_number(const char *arg, const char *value, long min,
                        long max, long *out)
{
    if (!parse_int(value, min, max, out)) {
        usage_error("bench", "%s needs an integer in %ld..%ld", arg, min, max);
        return -1;
    }
    return 2;
}

static int parse_list_option(const char *arg, const char *value, long min,
                             long max, int *out, int *count)
{
    if (!parse_int_list(value, min, max, out, MAX_LIST, count)) {
        usage_error("bench", "%s needs a list like 64,128 (each %ld..%ld, "
                    "at most %d)", arg, min, max, MAX_LIST);
        return -1;
    }
    return 2;
}

static int parse_bench_option(void *opaque, const char *arg, const char *value)
{
    bench_options *o = opaque;
    long n = 0;
    int used = 0;
    if (!strcmp(arg, "--no-progress")) {
        o->no_progress = true;
        return 1;
    }
    if (!strcmp(arg, "--dtype")) {
        if (!parse_dtype_list(value, o->dtypes, 4, &o->num_dtypes)) {
            usage_error("bench", "--dtype needs a list of fp32, fp16, bf16, "
                                 "fp64");
            return -1;
        }
        return 2;
    }
    if (!strcmp(arg, "--head-dim"))
        return parse_list_option(arg, value, 1, 256, o->head_dims,
                                 &o->num_head_dims);
    if (!strcmp(arg, "--seqlen"))
        return parse_list_option(arg, value, 1, 1 << 24, o->seqlens,
                                 &o->num_seqlens);
    if (!strcmp(arg, "--causal"))
        return parse_causal(o, value);
    if (!strcmp(arg, "--backend"))
        return parse_backends(o, value);
    const struct {
        const char *name;
        long min, max;
    } numbers[] = {{"--window", 0, 1L << 24}, {"--tokens", 1, 1L << 30},
                   {"--hidden", 1, 1L << 20}, {"--reps", 1, 1000},
                   {"--warmup", 0, 100}};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; ++i)
        if (!strcmp(arg, numbers[i].name)) {
            used = parse_number(arg, value, numbers[i].min, numbers[i].max, &n);
            if (used < 0)
                return used;
            if (i == 0) o->window = (int)n;
            if (i == 1) o->tokens = n;
            if (i == 2) o->hidden = n;
            if (i == 3) o->reps = (int)n;
            if (i == 4) o->warmup = (int)n;
            return used;
        }
    return 0;
}

/* The paper's sweep on a GPU, a smaller one that finishes in a minute or
 * two on a CPU. */
static void apply_defaults(bench_options *o, bool is_cpu)
{
    if (!o->num_dtypes) {
        o->dtypes[o->num_dtypes++] =
            is_cpu ? FLASHCL_DTYPE_FP32 : FLASHCL_DTYPE_FP16;
        if (!is_cpu)
            o->dtypes[o->num_dtypes++] = FLASHCL_DTYPE_BF16;
    }
    if (!o->num_head_dims) {
        o->head_dims[o->num_head_dims++] = 64;
        if (!is_cpu)
            o->head_dims[o->num_head_dims++] = 128;
    }
    if (!o->num_seqlens)
        for (int n = is_cpu ? 256 : 512; n <= (is_cpu ? 2048 : 16384); n *= 2)
            o->seqlens[o->num_seqlens++] = n;
    if (!o->num_causal) {
        o->causal_modes[o->num_causal++] = 0;
        if (!is_cpu)
            o->causal_modes[o->num_causal++] = 1;
    }
    if (!o->tokens)
        o->tokens = is_cpu ? 2048 : 16384;
    if (!o->hidden)
        o->hidden = is_cpu ? 256 : 2048;
}

/* ---- one point ------------------------------------------------------ */

typedef struct bench_point {
    flashcl_dtype dtype;
    int head_dim, causal, seqlen, batch, heads;
    double ms[2];       /* fused, reference; <0 not run */
    double gflops[2];
    size_t scratch[2];
    char failure[256];
} bench_point;

static void progress(const bench_options *o, int index, int total,
                     const bench_point *p, const char *what)
{
    if (o->no_progress || !isatty(STDERR_FILENO))
        return;
    fprintf(stderr, "\r\033[K[%d/%d] %s D=%d N=%d B=%d H=%d%s: %s", index,
            total, dtype_name(p->dtype), p->head_dim, p->seqlen, p->batch,
            p->heads, p->causal ? " causal" : "", what);
    fflush(stderr);
}

static void clear_progress(const bench_options *o)
{
    if (!o->no_progress && isatty(STDERR_FILENO))
        fprintf(stderr, "\r\033[K");
}

/* Attention FLOPs: QK^T and PV, halved by causal (windows are counted
 * in full: the number says how fast the dense equivalent would run). */
static double point_flops(const bench_point *p)
{
    return 4.0 * p->batch * p->heads * (double)p->seqlen * p->seqlen *
           p->head_dim * (p->causal ? 0.5 : 1.0);
}

static void time_backend(flashcl_context *ctx, const bench_options *o,
                         problem *prob, int which, bench_point *p)
{
    flashcl_backend backend =
        which ? FLASHCL_BACKEND_REFERENCE : FLASHCL_BACKEND_FUSED;
    flashcl_attention_desc desc = problem_desc(prob, backend);
    flashcl_status status = FLASHCL_SUCCESS;
    if (which)
        status = flashcl_reference_scratch_bytes(ctx, &desc, &p->scratch[1]);
    if (status == FLASHCL_SUCCESS)
        p->ms[which] = time_calls(ctx, &desc, o->warmup, o->reps, &status);
    if (status != FLASHCL_SUCCESS) {
        p->ms[which] = -1;
        snprintf(p->failure, sizeof p->failure, "%s: %s: %.180s",
                 which ? "reference" : "fused", flashcl_status_string(status),
                 flashcl_context_last_error(ctx));
        return;
    }
    p->gflops[which] = point_flops(p) / (p->ms[which] * 1e-3) / 1e9;
}

static void run_point(flashcl_context *ctx, const bench_options *o,
                      bench_point *p, int index, int total)
{
    problem_spec spec = {.name = "bench", .batch = p->batch,
                         .heads_q = p->heads, .heads_kv = p->heads,
                         .seqlen_q = p->seqlen, .seqlen_k = p->seqlen,
                         .head_dim = p->head_dim, .causal = p->causal,
                         .window = o->window > 0, .window_left = o->window,
                         .window_right = -1};
    p->ms[0] = p->ms[1] = -1;
    problem prob;
    progress(o, index, total, p, "preparing inputs");
    if (problem_create(ctx, &spec, p->dtype, 12345u + (unsigned)index,
                       &prob) != 0) {
        snprintf(p->failure, sizeof p->failure, "could not allocate inputs");
        return;
    }
    for (int which = 0; which < 2; ++which) {
        if (!(which ? o->reference : o->fused))
            continue;
        progress(o, index, total, p, which ? "reference" : "fused");
        time_backend(ctx, o, &prob, which, p);
    }
    problem_release(&prob);
    clear_progress(o);
}

/* ---- output --------------------------------------------------------- */

static void print_cell(double ms)
{
    if (ms < 0)
        printf(" - |");
    else
        printf(" %.2f |", ms);
}

static void print_point_text(const bench_point *p)
{
    printf("| %s | %d | %s | %d | %d | %d |", dtype_name(p->dtype),
           p->head_dim, p->causal ? "yes" : "no", p->seqlen, p->batch,
           p->heads);
    print_cell(p->ms[0]);
    print_cell(p->ms[1]);
    if (p->ms[0] > 0 && p->ms[1] > 0)
        printf(" %.2fx |", p->ms[1] / p->ms[0]);
    else
        printf(" - |");
    printf(" %.1f | %.1f | %.1f | %.1f |%s%s\n", p->gflops[0], p->gflops[1],
           (double)p->scratch[0] / 1048576.0,
           (double)p->scratch[1] / 1048576.0, p->failure[0] ? " " : "",
           p->failure);
    fflush(stdout);
}

static void print_point_json(const bench_point *p, bool first)
{
    printf("%s\n    {\"dtype\": \"%s\", \"head_dim\": %d, \"causal\": %s, "
           "\"seqlen\": %d, \"batch\": %d, \"heads\": %d, \"fused_ms\": ",
           first ? "" : ",", dtype_name(p->dtype), p->head_dim,
           p->causal ? "true" : "false", p->seqlen, p->batch, p->heads);
    json_number(stdout, p->ms[0] >= 0 ? p->ms[0] : NAN);
    printf(", \"reference_ms\": ");
    json_number(stdout, p->ms[1] >= 0 ? p->ms[1] : NAN);
    printf(", \"speedup\": ");
    json_number(stdout, p->ms[0] > 0 && p->ms[1] > 0 ? p->ms[1] / p->ms[0]
                                                      : NAN);
    printf(", \"fused_gflops\": ");
    json_number(stdout, p->ms[0] > 0 ? p->gflops[0] : NAN);
    printf(", \"reference_gflops\": ");
    json_number(stdout, p->ms[1] > 0 ? p->gflops[1] : NAN);
    printf(", \"fused_scratch_bytes\": %zu, \"reference_scratch_bytes\": "
           "%zu, \"error\": ",
           p->scratch[0], p->scratch[1]);
    json_string(stdout, p->failure);
    printf("}");
}

static void print_header(const bench_options *o, const flashcl_device_info *d,
                         bool json)
{
    if (json) {
        printf("{\"flashcl_version\": \"%s\", \"device\": ",
               flashcl_version_string());
        json_string(stdout, d->name);
        printf(", \"driver\": ");
        json_string(stdout, d->driver_version);
        printf(", \"reps\": %d, \"warmup\": %d, \"window\": %d, "
               "\"timing\": \"host clock, median\", \"rows\": [",
               o->reps, o->warmup, o->window);
        return;
    }
    printf("flashcl %s bench on %s (driver %s)\nmedian of %d calls after %d "
           "warm-up, host clock around enqueue + clFinish%s\n\n",
           flashcl_version_string(), d->name, d->driver_version, o->reps,
           o->warmup, o->window ? "; sliding window" : "");
    if (o->window)
        printf("window: %d keys to the left of the diagonal\n\n", o->window);
    printf("| dtype | D | causal | N | B | H | fused ms | reference ms | "
           "speed-up | fused GFLOP/s | reference GFLOP/s | fused scratch "
           "MiB | reference scratch MiB |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

/* Runs the sweep; returns the number of failed points. */
static int sweep(flashcl_context *ctx, const bench_options *o, bool json)
{
    const int total = o->num_dtypes * o->num_head_dims * o->num_causal *
                      o->num_seqlens;
    int index = 0, failures = 0;
    for (int t = 0; t < o->num_dtypes; ++t)
        for (int h = 0; h < o->num_head_dims; ++h)
            for (int c = 0; c < o->num_causal; ++c)
                for (int s = 0; s < o->num_seqlens; ++s) {
                    bench_point p = {0};
                    p.dtype = o->dtypes[t];
                    p.head_dim = o->head_dims[h];
                    p.causal = o->causal_modes[c];
                    p.seqlen = o->seqlens[s];
                    p.batch = o->tokens / p.seqlen > 0
                                  ? (int)(o->tokens / p.seqlen)
                                  : 1;
                    p.heads = o->hidden / p.head_dim > 0
                                  ? (int)(o->hidden / p.head_dim)
                                  : 1;
                    run_point(ctx, o, &p, ++index, total);
                    failures += p.failure[0] != '\0';
                    if (json)
                        print_point_json(&p, index == 1);
                    else
                        print_point_text(&p);
                }
    return failures;
}

int cmd_bench(int argc, char **argv)
{
    bench_options o = {.fused = true, .reference = true, .reps = 5,
                       .warmup = 1};
    common_options common = {0};
    if (parse_command_line("bench", argc, argv, 2, &common,
                           parse_bench_option, &o) != 0)
        return EXIT_USAGE;
    if (common.help) {
        printf("%s", bench_usage);
        return EXIT_OK;
    }
    flashcl_context *ctx = open_device("bench", common.device);
    if (!ctx)
        return EXIT_DEVICE;
    flashcl_device_info dev;
    flashcl_context_device_info(ctx, &dev);
    apply_defaults(&o, dev.is_cpu);
    print_header(&o, &dev, common.json);
    int failures = sweep(ctx, &o, common.json);
    if (common.json)
        printf("\n  ], \"failed_points\": %d}\n", failures);
    flashcl_context_release(ctx);
    return failures ? EXIT_DEVICE : EXIT_OK;
}
