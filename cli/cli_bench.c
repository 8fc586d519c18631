/* `flashcl bench`: the benchmark sweep (FlashAttention-2 paper protocol:
 * batch * seqlen = tokens, heads = hidden / head_dim) for the fused and the
 * reference backend side by side, with the speed-up and each one's scratch
 * memory. */
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

#define MAX_LIST 16

typedef struct bench_options {
    flashcl_dtype dtypes[4];
    int num_dtypes;
    int head_dims[MAX_LIST], num_head_dims;
    int seqlens[MAX_LIST], num_seqlens;
    int causal_modes[2], num_causal;
    int window; /* 0: off */
    long tokens, hidden;
    bool fused, reference, backends_given;
    int reps, warmup;
    bool no_progress;
    bool csv;
    bool backward;
} bench_options;

static bool parse_causal(void *opts, const char *value)
{
    bench_options *o = opts;
    o->num_causal = 0;
    if (strcmp(value, "0") && strcmp(value, "1") && strcmp(value, "both"))
        return false;
    if (strcmp(value, "1") != 0)
        o->causal_modes[o->num_causal++] = 0;
    if (strcmp(value, "0") != 0)
        o->causal_modes[o->num_causal++] = 1;
    return true;
}

static bool parse_backends(void *opts, const char *value)
{
    bench_options *o = opts;
    char *copy = strdup(value);
    bool ok = copy && *copy;
    o->fused = o->reference = false;
    o->backends_given = true;
    char *save = NULL;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; item && ok;
         item = strtok_r(NULL, ",", &save)) {
        bool fused = !strcmp(item, "fused");
        ok = fused || !strcmp(item, "reference");
        *(fused ? &o->fused : &o->reference) = true;
    }
    free(copy);
    return ok;
}

static bool parse_dtypes(void *opts, const char *value)
{
    bench_options *o = opts;
    return parse_dtype_list(value, o->dtypes, 4, &o->num_dtypes);
}

static bool parse_head_dims(void *opts, const char *value)
{
    bench_options *o = opts;
    return parse_int_list(value, 1, 256, o->head_dims, MAX_LIST,
                          &o->num_head_dims);
}

static bool parse_seqlens(void *opts, const char *value)
{
    bench_options *o = opts;
    return parse_int_list(value, 1, 1 << 24, o->seqlens, MAX_LIST,
                          &o->num_seqlens);
}

#define BENCH(kind, field) kind, offsetof(bench_options, field)

static const cli_option bench_table[] = {
    {"dtype", "LIST", "fp32,fp16,bf16,fp64 (default: fp32 on a CPU,\n"
                      "fp16,bf16 on a GPU)",
     CLI_CUSTOM, 0, 0, 0, parse_dtypes, "a list of fp32, fp16, bf16, fp64"},
    {"head-dim", "LIST", "head dims (default 64; GPU 64,128)", CLI_CUSTOM, 0,
     0, 0, parse_head_dims, "a list like 64,128 (each 1..256, at most 16)"},
    {"seqlen", "LIST", "sequence lengths (default 256,512,1024,2048; GPU\n"
                       "512..16384)",
     CLI_CUSTOM, 0, 0, 0, parse_seqlens,
     "a list like 512,1024 (each 1..16777216, at most 16)"},
    {"causal", "MODE", "0, 1 or both (default 0 on a CPU, both on a GPU)",
     CLI_CUSTOM, 0, 0, 0, parse_causal, "0, 1 or both"},
    {"window", "N", "sliding window of N keys to the left (default off)",
     BENCH(CLI_INT, window), 0, 1L << 24, NULL, NULL},
    {"tokens", "N", "batch * seqlen (default 2048; GPU 16384)",
     BENCH(CLI_LONG, tokens), 1, 1L << 30, NULL, NULL},
    {"hidden", "N", "heads * head_dim (default 256; GPU 2048)",
     BENCH(CLI_LONG, hidden), 1, 1L << 20, NULL, NULL},
    {"backend", "LIST", "fused,reference (default both)", CLI_CUSTOM, 0, 0, 0,
     parse_backends, "fused, reference or both"},
    {"reps", "N", "timed calls per point, median (default 5)",
     BENCH(CLI_INT, reps), 1, 1000, NULL, NULL},
    {"warmup", "N", "untimed calls first (default 1)", BENCH(CLI_INT, warmup),
     0, 100, NULL, NULL},
    {"no-progress", NULL, "no progress on stderr", BENCH(CLI_FLAG, no_progress),
     0, 0, NULL, NULL},
    {"backward", NULL, "also the backward: device-time medians of forward\n"
                       "and backward, backward TFLOP/s (10 B H N^2 D,\n"
                       "halved causal) and the backward/forward ratio",
     BENCH(CLI_FLAG, backward), 0, 0, NULL, NULL},
    {"csv", NULL, "CSV on stdout: a header, then a row per point with\n"
                  "the --json rows' fields (causal 0/1, no value: empty)",
     BENCH(CLI_FLAG, csv), 0, 0, NULL, NULL},
    CLI_OPTIONS_END,
};

const cli_command bench_command = {
    "bench", "fused and reference backends side by side",
    "Times are host clock around enqueue + clFinish for both backends (the\n"
    "reference path is many commands). Scratch is the device memory a call\n"
    "allocates besides its inputs and outputs: 0 for fused. Progress goes\n"
    "to stderr: one line rewritten in place on a terminal, else one\n"
    "\"[k/n] point\" line per backend and point.\n",
    bench_table};

/* The paper's sweep on a GPU, a smaller one that finishes in a minute or
 * two on a CPU. */
/* A list the user left empty gets `cpu` on a CPU, `gpu` then `gpu_too`
 * elsewhere. */
static void default_list(int *list, int *count, bool is_cpu, int cpu, int gpu,
                         int gpu_too)
{
    if (*count)
        return;
    list[(*count)++] = is_cpu ? cpu : gpu;
    if (!is_cpu)
        list[(*count)++] = gpu_too;
}

static void apply_defaults(bench_options *o, bool is_cpu)
{
    if (!o->num_dtypes) {
        o->dtypes[o->num_dtypes++] =
            is_cpu ? FLASHCL_DTYPE_FP32 : FLASHCL_DTYPE_FP16;
        if (!is_cpu)
            o->dtypes[o->num_dtypes++] = FLASHCL_DTYPE_BF16;
    }
    default_list(o->head_dims, &o->num_head_dims, is_cpu, 64, 64, 128);
    if (!o->num_seqlens)
        for (int n = is_cpu ? 256 : 512; n <= (is_cpu ? 2048 : 16384); n *= 2)
            o->seqlens[o->num_seqlens++] = n;
    default_list(o->causal_modes, &o->num_causal, is_cpu, 0, 0, 1);
    if (!o->tokens)
        o->tokens = is_cpu ? 2048 : 16384;
    if (!o->hidden)
        o->hidden = is_cpu ? 256 : 2048;
    if (!o->backends_given)
        o->fused = o->reference = true;
}

/* ---- one point ------------------------------------------------------ */

typedef struct bench_point {
    flashcl_dtype dtype;
    int head_dim, causal, seqlen, batch, heads;
    double ms[2]; /* fused, reference; <0 not run */
    double gflops[2];
    size_t scratch[2];
    bool backward; /* --backward: the fields below are measured */
    backward_timing bwd[2];
    char failure[256];
} bench_point;

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
    timing_result time;
    if (status == FLASHCL_SUCCESS)
        status = time_forward(ctx, &desc, o->warmup, o->reps, &time);
    if (status != FLASHCL_SUCCESS) {
        p->ms[which] = -1;
        snprintf(p->failure, sizeof p->failure, "%s: %s: %.180s",
                 which ? "reference" : "fused", flashcl_status_string(status),
                 flashcl_context_last_error(ctx));
        return;
    }
    p->ms[which] = time.median_ms;
    p->gflops[which] = point_flops(p) / (time.median_ms * 1e-3) / 1e9;
    if (!o->backward)
        return;
    char why[200];
    status = time_backward(ctx, prob, backend, o->warmup, o->reps,
                           &p->bwd[which], why, sizeof why);
    if (status != FLASHCL_SUCCESS) {
        p->bwd[which].backward_ms = -1;
        snprintf(p->failure, sizeof p->failure, "%s backward: %s: %.180s",
                 which ? "reference" : "fused", flashcl_status_string(status),
                 why);
    }
}

/* Backward TFLOP/s and backward/forward time ratio of a backend; NaN when
 * not measured. */
static double backward_tflops(const bench_point *p, int which)
{
    const problem_spec spec = {.batch = p->batch, .heads_q = p->heads,
                               .seqlen_q = p->seqlen, .seqlen_k = p->seqlen,
                               .head_dim = p->head_dim, .causal = p->causal};
    const double ms = p->bwd[which].backward_ms;
    return p->backward && ms > 0 ? backward_flops(&spec) / (ms * 1e-3) / 1e12
                                 : NAN;
}

static double backward_ratio(const bench_point *p, int which)
{
    const backward_timing *t = &p->bwd[which];
    return p->backward && t->backward_ms > 0 && t->forward_ms > 0
               ? t->backward_ms / t->forward_ms
               : NAN;
}

static void run_point(flashcl_context *ctx, const bench_options *o,
                      bench_point *p, int index, progress *bar)
{
    problem_spec spec = {.name = "bench", .batch = p->batch,
                         .heads_q = p->heads, .heads_kv = p->heads,
                         .seqlen_q = p->seqlen, .seqlen_k = p->seqlen,
                         .head_dim = p->head_dim, .causal = p->causal,
                         .window = o->window > 0, .window_left = o->window,
                         .window_right = -1};
    p->ms[0] = p->ms[1] = -1;
    p->bwd[0].backward_ms = p->bwd[1].backward_ms = -1;
    p->backward = o->backward;
    problem prob;
    if (problem_create(ctx, &spec, p->dtype, 12345u + (unsigned)index, &prob,
                       p->failure, sizeof p->failure) != FLASHCL_SUCCESS)
        return;
    for (int which = 0; which < 2; ++which) {
        if (!(which ? o->reference : o->fused))
            continue;
        progress_step(bar, index, "%s D=%d N=%d B=%d H=%d%s: %s",
                      dtype_name(p->dtype), p->head_dim, p->seqlen, p->batch,
                      p->heads, p->causal ? " causal" : "",
                      which ? "reference" : "fused");
        time_backend(ctx, o, &prob, which, p);
    }
    problem_release(&prob);
}

/* ---- output --------------------------------------------------------- */

static void print_cell(double value, const char *format)
{
    if (value < 0)
        printf(" - |");
    else
        printf(format, value);
}

static void print_point_text(const bench_point *p)
{
    printf("| %s | %d | %s | %d | %d | %d |", dtype_name(p->dtype),
           p->head_dim, p->causal ? "yes" : "no", p->seqlen, p->batch,
           p->heads);
    print_cell(p->ms[0], " %.2f |");
    print_cell(p->ms[1], " %.2f |");
    print_cell(p->ms[0] > 0 && p->ms[1] > 0 ? p->ms[1] / p->ms[0] : -1,
               " %.2fx |");
    printf(" %.1f | %.1f | %.1f | %.1f |", p->gflops[0], p->gflops[1],
           (double)p->scratch[0] / 1048576.0,
           (double)p->scratch[1] / 1048576.0);
    for (int which = 0; p->backward && which < 2; ++which) {
        print_cell(p->bwd[which].backward_ms, " %.2f |");
        const double tflops = backward_tflops(p, which),
                     ratio = backward_ratio(p, which);
        print_cell(isfinite(tflops) ? tflops : -1, " %.4f |");
        print_cell(isfinite(ratio) ? ratio : -1, " %.2f |");
    }
    printf("%s%s\n", p->failure[0] ? " " : "", p->failure);
    fflush(stdout);
}

/* One output row's fields, in order: the JSON rows and the CSV columns
 * are both written from this list, so they cannot drift apart. */
typedef enum field_kind {
    FIELD_TEXT,
    FIELD_INT,
    FIELD_NUMBER,
    FIELD_BOOL
} field_kind;

typedef struct point_field {
    const char *name;
    field_kind kind;
    const char *text;
    long long integer; /* FIELD_INT, FIELD_BOOL */
    double number;     /* FIELD_NUMBER; not finite: no value */
} point_field;

#define POINT_FIELDS 20 /* at most: 14, and 6 more with --backward */

/* Fills f; returns the number of fields. */
static int point_fields(const bench_point *p, point_field f[POINT_FIELDS])
{
    const bool both = p->ms[0] > 0 && p->ms[1] > 0;
    const point_field fields[POINT_FIELDS] = {
        {"dtype", FIELD_TEXT, dtype_name(p->dtype), 0, 0},
        {"head_dim", FIELD_INT, NULL, p->head_dim, 0},
        {"causal", FIELD_BOOL, NULL, p->causal, 0},
        {"seqlen", FIELD_INT, NULL, p->seqlen, 0},
        {"batch", FIELD_INT, NULL, p->batch, 0},
        {"heads", FIELD_INT, NULL, p->heads, 0},
        {"fused_ms", FIELD_NUMBER, NULL, 0, p->ms[0] >= 0 ? p->ms[0] : NAN},
        {"reference_ms", FIELD_NUMBER, NULL, 0,
         p->ms[1] >= 0 ? p->ms[1] : NAN},
        {"speedup", FIELD_NUMBER, NULL, 0, both ? p->ms[1] / p->ms[0] : NAN},
        {"fused_gflops", FIELD_NUMBER, NULL, 0,
         p->ms[0] > 0 ? p->gflops[0] : NAN},
        {"reference_gflops", FIELD_NUMBER, NULL, 0,
         p->ms[1] > 0 ? p->gflops[1] : NAN},
        {"fused_scratch_bytes", FIELD_INT, NULL, (long long)p->scratch[0], 0},
        {"reference_scratch_bytes", FIELD_INT, NULL,
         (long long)p->scratch[1], 0},
        {"fused_bwd_ms", FIELD_NUMBER, NULL, 0,
         p->bwd[0].backward_ms >= 0 ? p->bwd[0].backward_ms : NAN},
        {"reference_bwd_ms", FIELD_NUMBER, NULL, 0,
         p->bwd[1].backward_ms >= 0 ? p->bwd[1].backward_ms : NAN},
        {"fused_bwd_tflops", FIELD_NUMBER, NULL, 0, backward_tflops(p, 0)},
        {"reference_bwd_tflops", FIELD_NUMBER, NULL, 0,
         backward_tflops(p, 1)},
        {"fused_bwd_fwd_ratio", FIELD_NUMBER, NULL, 0, backward_ratio(p, 0)},
        {"reference_bwd_fwd_ratio", FIELD_NUMBER, NULL, 0,
         backward_ratio(p, 1)},
        {"error", FIELD_TEXT, p->failure, 0, 0},
    };
    /* Without --backward the rows keep their 14 fields, error last. */
    int count = 0;
    for (int i = 0; i < POINT_FIELDS; ++i)
        if (p->backward || !strstr(fields[i].name, "_bwd_"))
            f[count++] = fields[i];
    return count;
}

static void print_point_json(json_writer *j, const bench_point *p)
{
    point_field f[POINT_FIELDS];
    const int count = point_fields(p, f);
    json_object(j, NULL);
    for (int i = 0; i < count; ++i)
        switch (f[i].kind) {
        case FIELD_TEXT:
            json_string(j, f[i].name, f[i].text);
            break;
        case FIELD_INT:
            json_integer(j, f[i].name, f[i].integer);
            break;
        case FIELD_NUMBER:
            json_number(j, f[i].name, f[i].number);
            break;
        case FIELD_BOOL:
            json_bool(j, f[i].name, f[i].integer != 0);
            break;
        }
    json_close(j);
}

/* RFC 4180: a field with a comma, quote or line break is quoted, its
 * quotes doubled (an error message may hold any of them). */
static void print_csv_text(const char *text)
{
    if (!text[strcspn(text, ",\"\r\n")]) {
        fputs(text, stdout);
        return;
    }
    putchar('"');
    for (; *text; ++text) {
        if (*text == '"')
            putchar('"');
        putchar(*text);
    }
    putchar('"');
}

static void print_csv_header(bool backward)
{
    point_field f[POINT_FIELDS];
    const int count = point_fields(&(bench_point){.backward = backward}, f);
    for (int i = 0; i < count; ++i)
        printf("%s%s", i ? "," : "", f[i].name);
    putchar('\n');
}

static void print_point_csv(const bench_point *p)
{
    point_field f[POINT_FIELDS];
    const int count = point_fields(p, f);
    for (int i = 0; i < count; ++i) {
        if (i)
            putchar(',');
        if (f[i].kind == FIELD_TEXT)
            print_csv_text(f[i].text);
        else if (f[i].kind != FIELD_NUMBER)
            printf("%lld", f[i].integer);
        else if (isfinite(f[i].number))
            printf("%.6g", f[i].number);
    }
    putchar('\n');
    fflush(stdout);
}

static void print_header(json_writer *j, const bench_options *o,
                         const flashcl_device_info *d)
{
    if (o->csv) {
        print_csv_header(o->backward);
        return;
    }
    if (j) {
        json_object(j, NULL);
        json_string(j, "flashcl_version", flashcl_version_string());
        json_string(j, "device", d->name);
        json_string(j, "driver", d->driver_version);
        json_integer(j, "reps", o->reps);
        json_integer(j, "warmup", o->warmup);
        json_integer(j, "window", o->window);
        json_string(j, "timing", "host clock, median");
        json_array(j, "rows");
        return;
    }
    printf("flashcl %s bench on %s (driver %s)\nmedian of %d calls after %d "
           "warm-up, host clock around enqueue + clFinish%s\n\n",
           flashcl_version_string(), d->name, d->driver_version, o->reps,
           o->warmup, o->window ? "; sliding window" : "");
    if (o->window)
        printf("window: %d keys to the left of the diagonal\n\n", o->window);
    if (o->backward)
        printf("backward: device time from events, median; TFLOP/s on "
               "FlashAttention's 10 B H N^2 D (halved causal); bwd/fwd: "
               "device-time ratio\n\n");
    printf("| dtype | D | causal | N | B | H | fused ms | reference ms | "
           "speed-up | fused GFLOP/s | reference GFLOP/s | fused scratch "
           "MiB | reference scratch MiB |%s\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|%s\n",
           o->backward ? " fused bwd ms | fused bwd TFLOP/s | fused bwd/fwd "
                         "| reference bwd ms | reference bwd TFLOP/s | "
                         "reference bwd/fwd |"
                       : "",
           o->backward ? "---|---|---|---|---|---|" : "");
}

static bench_point make_point(const bench_options *o, int t, int h, int c,
                              int s)
{
    bench_point p = {0};
    p.dtype = o->dtypes[t];
    p.head_dim = o->head_dims[h];
    p.causal = o->causal_modes[c];
    p.seqlen = o->seqlens[s];
    p.batch = o->tokens / p.seqlen > 0 ? (int)(o->tokens / p.seqlen) : 1;
    p.heads = o->hidden / p.head_dim > 0 ? (int)(o->hidden / p.head_dim) : 1;
    return p;
}

/* Runs the sweep; returns the number of failed points. */
static int sweep(flashcl_context *ctx, const bench_options *o, json_writer *j)
{
    const int total = o->num_dtypes * o->num_head_dims * o->num_causal *
                      o->num_seqlens;
    progress bar;
    progress_begin(&bar, total, !o->no_progress);
    int index = 0, failures = 0;
    for (int t = 0; t < o->num_dtypes; ++t)
        for (int h = 0; h < o->num_head_dims; ++h)
            for (int c = 0; c < o->num_causal; ++c)
                for (int s = 0; s < o->num_seqlens; ++s) {
                    bench_point p = make_point(o, t, h, c, s);
                    run_point(ctx, o, &p, ++index, &bar);
                    progress_clear(&bar);
                    failures += p.failure[0] != '\0';
                    if (o->csv)
                        print_point_csv(&p);
                    else if (j)
                        print_point_json(j, &p);
                    else
                        print_point_text(&p);
                }
    return failures;
}

int cmd_bench(int argc, char **argv)
{
    bench_options o = {.reps = 5, .warmup = 1};
    common_options common = {0};
    int rc = cli_start(&bench_command, argc, argv, &common, &o);
    if (rc != CLI_GO_ON)
        return rc;
    if (o.csv && common.json) {
        usage_error("bench", "--csv and --json: give one output format");
        return EXIT_USAGE;
    }
    flashcl_context *ctx = open_device("bench", common.device, common.json,
                                       &rc);
    if (!ctx)
        return rc;
    flashcl_device_info dev;
    flashcl_context_device_info(ctx, &dev);
    apply_defaults(&o, dev.is_cpu);
    json_writer j;
    json_begin(&j, stdout, 2);
    print_header(common.json ? &j : NULL, &o, &dev);
    int failures = sweep(ctx, &o, common.json ? &j : NULL);
    if (common.json) {
        json_close(&j);
        json_integer(&j, "failed_points", failures);
        json_close(&j);
        json_end(&j);
    }
    flashcl_context_release(ctx);
    return failures ? EXIT_DEVICE : EXIT_OK;
}
