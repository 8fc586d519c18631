/* flashcl-bench: throughput of the fused forward over the FlashAttention-2
 * paper's protocol (batch * seqlen = tokens, heads = hidden / head_dim),
 * timed with OpenCL profiling events: median of repeated runs, warm-up and
 * first-call (compile) time excluded and printed separately. A peer is
 * measured in the same run: CLBlast's SGEMM on the same device. */
#define _POSIX_C_SOURCE 200809L
#include "flashcl.h"

#include <clblast_c.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LIST 16

typedef struct bench_options {
    const char *device;
    const char *csv_path;
    int dtypes[3], num_dtypes;
    int head_dims[MAX_LIST], num_head_dims;
    int seqlens[MAX_LIST], num_seqlens;
    int causal_modes[2], num_causal;
    long tokens, hidden;
    int reps, warmup;
    int sgemm_n; /* 0: no peer */
    const char *variants[8];
    int num_variants;
    int check_rows; /* --check: rows compared with float64, 0 = off */
} bench_options;

typedef struct bench_row {
    const char *variant;
    const char *dtype;
    int head_dim, causal, seqlen, batch, heads;
    double first_call_ms, median_ms, min_ms, tflops, gbps;
} bench_row;

static double host_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_list(const char *text, int *out, int max)
{
    int count = 0;
    char *copy = strdup(text), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && count < max;
         tok = strtok_r(NULL, ",", &save))
        out[count++] = atoi(tok);
    free(copy);
    return count;
}

static const char *dtype_name(int dtype)
{
    return dtype == FLASHCL_DTYPE_FP16   ? "fp16"
           : dtype == FLASHCL_DTYPE_BF16 ? "bf16"
                                         : "fp32";
}

static void usage(void)
{
    printf("usage: flashcl-bench [options]\n"
           "  --device SPEC        device (flashcl spec grammar; default: "
           "FLASHCL_DEVICE, first GPU, first device)\n"
           "  --dtype LIST         fp32,fp16,bf16 (default fp32 on CPU, "
           "fp16,bf16 on GPU)\n"
           "  --head-dim LIST      head dims (default 64,128; CPU: 64)\n"
           "  --seqlen LIST        sequence lengths (default 512..16384; "
           "CPU: 256..2048)\n"
           "  --causal MODE        0, 1 or both (default both; CPU: 0)\n"
           "  --tokens N           batch * seqlen (default 16384; CPU: 2048)\n"
           "  --hidden N           heads * head_dim (default 2048; CPU: 256)\n"
           "  --reps N --warmup N  timed and warm-up runs (default 10, 2)\n"
           "  --sgemm N            also time CLBlast SGEMM NxNxN as the peer "
           "(default 2048 on CPU, 8192 on GPU; 0 = off)\n"
           "  --variants LIST      plain,windowW,alibi,bias,softcap (default "
           "plain); windowW: sliding window of W keys left of the diagonal\n"
           "  --csv FILE           also write the rows as CSV\n"
           "  --check ROWS         plain rows: relative L2 error of ROWS "
           "sampled output rows vs float64 on the host (prints check| lines)\n");
}

static int parse_dtypes(const char *text, int *out)
{
    int count = 0;
    if (strstr(text, "fp32"))
        out[count++] = FLASHCL_DTYPE_FP32;
    if (strstr(text, "fp16"))
        out[count++] = FLASHCL_DTYPE_FP16;
    if (strstr(text, "bf16"))
        out[count++] = FLASHCL_DTYPE_BF16;
    return count;
}

static int parse_options(int argc, char **argv, bench_options *opt)
{
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage();
            exit(0);
        }
        if (!value) {
            fprintf(stderr, "flashcl-bench: %s needs a value (see --help)\n",
                    arg);
            return -1;
        }
        ++i;
        if (!strcmp(arg, "--device"))
            opt->device = value;
        else if (!strcmp(arg, "--csv"))
            opt->csv_path = value;
        else if (!strcmp(arg, "--dtype"))
            opt->num_dtypes = parse_dtypes(value, opt->dtypes);
        else if (!strcmp(arg, "--head-dim"))
            opt->num_head_dims = parse_list(value, opt->head_dims, MAX_LIST);
        else if (!strcmp(arg, "--seqlen"))
            opt->num_seqlens = parse_list(value, opt->seqlens, MAX_LIST);
        else if (!strcmp(arg, "--causal")) {
            opt->num_causal = 0;
            if (strcmp(value, "1") != 0)
                opt->causal_modes[opt->num_causal++] = 0;
            if (strcmp(value, "0") != 0)
                opt->causal_modes[opt->num_causal++] = 1;
        } else if (!strcmp(arg, "--tokens"))
            opt->tokens = atol(value);
        else if (!strcmp(arg, "--hidden"))
            opt->hidden = atol(value);
        else if (!strcmp(arg, "--reps"))
            opt->reps = atoi(value);
        else if (!strcmp(arg, "--warmup"))
            opt->warmup = atoi(value);
        else if (!strcmp(arg, "--check"))
            opt->check_rows = atoi(value);
        else if (!strcmp(arg, "--sgemm"))
            opt->sgemm_n = atoi(value);
        else if (!strcmp(arg, "--variants")) {
            static char storage[256];
            snprintf(storage, sizeof storage, "%s", value);
            opt->num_variants = 0;
            char *save = NULL;
            for (char *tok = strtok_r(storage, ",", &save);
                 tok && opt->num_variants < 8; tok = strtok_r(NULL, ",", &save))
                opt->variants[opt->num_variants++] = tok;
        } else {
            fprintf(stderr, "flashcl-bench: unknown option %s (see --help)\n",
                    arg);
            return -1;
        }
    }
    return 0;
}

/* Defaults depend on the device: the paper's sweep on a GPU, a smaller one
 * that finishes in minutes on a CPU. */
static void apply_defaults(bench_options *opt, bool is_cpu)
{
    if (opt->num_dtypes == 0) {
        if (is_cpu)
            opt->dtypes[opt->num_dtypes++] = FLASHCL_DTYPE_FP32;
        else {
            opt->dtypes[opt->num_dtypes++] = FLASHCL_DTYPE_FP16;
            opt->dtypes[opt->num_dtypes++] = FLASHCL_DTYPE_BF16;
        }
    }
    if (opt->num_head_dims == 0) {
        opt->head_dims[opt->num_head_dims++] = 64;
        if (!is_cpu)
            opt->head_dims[opt->num_head_dims++] = 128;
    }
    if (opt->num_seqlens == 0) {
        int lo = is_cpu ? 256 : 512, hi = is_cpu ? 2048 : 16384;
        for (int n = lo; n <= hi; n *= 2)
            opt->seqlens[opt->num_seqlens++] = n;
    }
    if (opt->num_causal == 0) {
        opt->causal_modes[opt->num_causal++] = 0;
        if (!is_cpu)
            opt->causal_modes[opt->num_causal++] = 1;
    }
    if (opt->tokens == 0)
        opt->tokens = is_cpu ? 2048 : 16384;
    if (opt->hidden == 0)
        opt->hidden = is_cpu ? 256 : 2048;
    if (opt->sgemm_n < 0)
        opt->sgemm_n = is_cpu ? 2048 : 8192;
    if (opt->num_variants == 0)
        opt->variants[opt->num_variants++] = "plain";
}

/* Query-key pairs a row sees: causal and/or a window of `window` keys to
 * the left of the diagonal (-1: none). Gives the FLOPs actually needed. */
static double visible_pairs(int seqlen, int causal, long window)
{
    double pairs = 0;
    for (long i = 0; i < seqlen; ++i) {
        long hi = causal ? i : seqlen - 1;
        long lo = window >= 0 ? i - window : 0;
        if (lo < 0)
            lo = 0;
        pairs += (double)(hi - lo + 1);
    }
    return pairs;
}

static cl_mem filled_buffer(cl_context context, size_t count, float value)
{
    float *host = malloc(count * sizeof *host);
    if (!host)
        return NULL;
    for (size_t i = 0; i < count; ++i)
        host[i] = value * (float)(i % 7 + 1) / 7.0f;
    cl_int err;
    cl_mem buffer =
        clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                       count * sizeof *host, host, &err);
    free(host);
    return err == CL_SUCCESS ? buffer : NULL;
}

/* Sets the descriptor fields of a named variant; returns the window (-1
 * when none) or -2 for an unknown name. The extra buffer goes to *extra. */
static long apply_variant(const char *variant, flashcl_attention_desc *desc,
                          cl_context context, cl_mem *extra)
{
    *extra = NULL;
    if (!strcmp(variant, "plain"))
        return -1;
    if (!strncmp(variant, "window", 6) && atol(variant + 6) > 0) {
        desc->window = 1;
        desc->window_left = atol(variant + 6);
        desc->window_right = desc->causal ? 0 : -1;
        return desc->window_left;
    }
    if (!strcmp(variant, "softcap")) {
        desc->softcap = 30.0f;
        return -1;
    }
    if (!strcmp(variant, "alibi")) {
        *extra = filled_buffer(context, (size_t)desc->heads_q, 0.0625f);
        desc->alibi_slopes.buffer = *extra;
        return *extra ? -1 : -2;
    }
    if (!strcmp(variant, "bias")) { /* one [N, N] fp32 bias for all heads */
        size_t n = (size_t)desc->seqlen_q;
        *extra = filled_buffer(context, n * n, -0.5f);
        desc->bias.buffer = *extra;
        desc->bias_dtype = FLASHCL_DTYPE_FP32;
        desc->bias.stride_seq = n;
        desc->bias.stride_dim = 1;
        return *extra ? -1 : -2;
    }
    return -2;
}

/* Random bits of the storage type, uniform in [-1, 1). */
static void fill_random(void *data, size_t count, int dtype, unsigned *seed)
{
    for (size_t i = 0; i < count; ++i) {
        *seed = *seed * 1664525u + 1013904223u;
        float value = (float)(*seed >> 8) / 8388608.0f - 1.0f;
        if (dtype == FLASHCL_DTYPE_FP32) {
            ((float *)data)[i] = value;
        } else {
            uint32_t bits;
            memcpy(&bits, &value, 4);
            if (dtype == FLASHCL_DTYPE_BF16)
                ((uint16_t *)data)[i] = (uint16_t)(bits >> 16);
            else { /* fp16 of a value in [-1, 1): normal or tiny-zero */
                uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
                int exponent = (int)((bits >> 23) & 0xff) - 127 + 15;
                uint16_t mantissa = (uint16_t)((bits >> 13) & 0x3ffu);
                ((uint16_t *)data)[i] =
                    exponent <= 0
                        ? sign
                        : (uint16_t)(sign | (exponent << 10) | mantissa);
            }
        }
    }
}

static cl_mem random_buffer(cl_context context, size_t count, int dtype,
                            unsigned *seed)
{
    size_t elem = dtype == FLASHCL_DTYPE_FP32 ? 4 : 2;
    void *host = malloc(count * elem);
    if (!host)
        return NULL;
    fill_random(host, count, dtype, seed);
    cl_int err;
    cl_mem buffer =
        clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                       count * elem, host, &err);
    free(host);
    return err == CL_SUCCESS ? buffer : NULL;
}

static double event_ms(cl_event event)
{
    cl_ulong start = 0, end = 0;
    clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_START, sizeof start,
                            &start, NULL);
    clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof end, &end,
                            NULL);
    return (double)(end - start) / 1e6;
}

static double storage_to_double(const uint16_t *data, size_t i, int dtype)
{
    uint32_t bits = data[i];
    float out;
    if (dtype == FLASHCL_DTYPE_BF16) {
        bits <<= 16;
        memcpy(&out, &bits, 4);
        return out;
    }
    int exponent = (int)((bits >> 10) & 0x1f), mantissa = (int)(bits & 0x3ff);
    double magnitude = exponent == 0 ? ldexp(mantissa, -24)
                                     : ldexp(mantissa | 0x400, exponent - 25);
    return (bits & 0x8000) ? -magnitude : magnitude;
}

/* --check: relative L2 error of `rows` sampled output rows (packed BNHD,
 * fp16/bf16) against float64 attention on the host. -1 on failure. */
static double check_rows(cl_command_queue queue, const flashcl_attention_desc *d,
                         int rows)
{
    const size_t count = (size_t)d->batch * (size_t)d->heads_q *
                         (size_t)d->seqlen_q * (size_t)d->head_dim;
    const long n = (long)d->seqlen_q, hq = (long)d->heads_q,
               dim = (long)d->head_dim;
    uint16_t *host[4] = {malloc(count * 2), malloc(count * 2),
                         malloc(count * 2), malloc(count * 2)};
    double *score = malloc((size_t)n * sizeof *score);
    double err2 = 0, ref2 = 0, result = -1;
    const cl_mem bufs[4] = {d->q.buffer, d->k.buffer, d->v.buffer, d->o.buffer};
    int ok = score != NULL;
    for (int i = 0; i < 4; ++i)
        ok = ok && host[i] &&
             clEnqueueReadBuffer(queue, bufs[i], CL_TRUE, 0, count * 2, host[i],
                                 0, NULL, NULL) == CL_SUCCESS;
    const double scale = 1.0 / sqrt((double)dim);
    unsigned seed = 99u;
    for (int r = 0; ok && r < rows; ++r) {
        seed = seed * 1664525u + 1013904223u;
        long b = (long)(seed >> 8) % d->batch;
        seed = seed * 1664525u + 1013904223u;
        long h = (long)(seed >> 8) % hq;
        seed = seed * 1664525u + 1013904223u;
        long i = r == 0 ? n - 1 : r == 1 ? 0 : (long)(seed >> 8) % n;
        const long last = d->causal ? i : n - 1;
        double row_max = -INFINITY, sum = 0;
        for (long j = 0; j <= last; ++j) {
            double dot = 0;
            for (long e = 0; e < dim; ++e)
                dot += storage_to_double(host[0], (size_t)(((b * n + i) * hq + h) * dim + e), d->dtype) *
                       storage_to_double(host[1], (size_t)(((b * n + j) * hq + h) * dim + e), d->dtype);
            score[j] = dot * scale;
            row_max = fmax(row_max, score[j]);
        }
        for (long j = 0; j <= last; ++j)
            sum += (score[j] = exp(score[j] - row_max));
        for (long e = 0; e < dim; ++e) {
            double ref = 0;
            for (long j = 0; j <= last; ++j)
                ref += score[j] * storage_to_double(host[2], (size_t)(((b * n + j) * hq + h) * dim + e), d->dtype);
            ref /= sum;
            double got = storage_to_double(host[3], (size_t)(((b * n + i) * hq + h) * dim + e), d->dtype);
            err2 += (got - ref) * (got - ref);
            ref2 += ref * ref;
        }
    }
    if (ok)
        result = isfinite(err2) ? sqrt(err2 / ref2) : INFINITY;
    for (int i = 0; i < 4; ++i)
        free(host[i]);
    free(score);
    return result;
}

static int run_shape(flashcl_context *ctx, const bench_options *opt,
                     const char *variant, int dtype, int head_dim, int causal,
                     int seqlen, bench_row *row)
{
    const long heads = opt->hidden / head_dim;
    const long batch = opt->tokens / seqlen > 0 ? opt->tokens / seqlen : 1;
    const size_t count =
        (size_t)batch * (size_t)heads * (size_t)seqlen * (size_t)head_dim;
    const size_t elem = dtype == FLASHCL_DTYPE_FP32 ? 4 : 2;
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    unsigned seed = 12345u + (unsigned)seqlen;
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.batch = batch;
    desc.heads_q = heads;
    desc.seqlen_q = desc.seqlen_k = seqlen;
    desc.head_dim = head_dim;
    desc.dtype = (flashcl_dtype)dtype;
    desc.causal = causal;
    /* Profiling events time the fused kernel; the reference path (several
     * kernels and CLBlast calls) is timed by `flashcl bench`. */
    desc.backend = FLASHCL_BACKEND_FUSED;
    desc.q.buffer = random_buffer(context, count, dtype, &seed);
    desc.k.buffer = random_buffer(context, count, dtype, &seed);
    desc.v.buffer = random_buffer(context, count, dtype, &seed);
    desc.o.buffer = random_buffer(context, count, dtype, &seed);
    cl_mem extra = NULL;
    const long window = apply_variant(variant, &desc, context, &extra);
    int failed = !desc.q.buffer || !desc.k.buffer || !desc.v.buffer ||
                 !desc.o.buffer || window == -2;
    double *times = calloc((size_t)opt->reps, sizeof *times);
    if (failed || !times) {
        fprintf(stderr,
                "flashcl-bench: allocation failed or unknown variant \"%s\" "
                "(%zu elements)\n",
                variant, count);
        failed = 1;
        goto done;
    }
    double start = host_ms();
    flashcl_status status =
        flashcl_attention_forward(ctx, queue, &desc, 0, NULL, NULL);
    clFinish(queue);
    row->first_call_ms = host_ms() - start;
    for (int i = 0; status == FLASHCL_SUCCESS && i < opt->warmup; ++i)
        status = flashcl_attention_forward(ctx, queue, &desc, 0, NULL, NULL);
    clFinish(queue);
    for (int i = 0; status == FLASHCL_SUCCESS && i < opt->reps; ++i) {
        cl_event event = NULL;
        status = flashcl_attention_forward(ctx, queue, &desc, 0, NULL, &event);
        if (status == FLASHCL_SUCCESS) {
            clWaitForEvents(1, &event);
            times[i] = event_ms(event);
            clReleaseEvent(event);
        }
    }
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl-bench: %s: %s\n",
                flashcl_status_string(status), flashcl_context_last_error(ctx));
        failed = 1;
        goto done;
    }
    qsort(times, (size_t)opt->reps, sizeof *times, compare_double);
    /* The paper's convention (N^2, halved for causal) for plain rows; the
     * visible pairs for windows, whose point is to skip the rest. */
    double pairs = window >= 0 ? visible_pairs(seqlen, causal, window)
                               : (double)seqlen * seqlen * (causal ? 0.5 : 1.0);
    double flops =
        4.0 * (double)batch * (double)heads * pairs * (double)head_dim;
    *row = (bench_row){variant,
                       dtype_name(dtype),
                       head_dim,
                       causal,
                       seqlen,
                       (int)batch,
                       (int)heads,
                       row->first_call_ms,
                       times[opt->reps / 2],
                       times[0],
                       0,
                       0};
    row->tflops = flops / (row->median_ms * 1e-3) / 1e12;
    if (opt->check_rows > 0 && window == -1 && !strcmp(variant, "plain") &&
        dtype != FLASHCL_DTYPE_FP32) {
        double err = check_rows(queue, &desc, opt->check_rows);
        printf("check| %s | %d | %d | %d | rel_l2 %.3e | rows %d\n",
               dtype_name(dtype), head_dim, causal, seqlen, err,
               opt->check_rows);
    }
    row->gbps =
        4.0 * (double)count * (double)elem / (row->median_ms * 1e-3) / 1e9;
done:
    free(times);
    cl_mem all[5] = {desc.q.buffer, desc.k.buffer, desc.v.buffer, desc.o.buffer,
                     extra};
    for (int i = 0; i < 5; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
    return failed ? -1 : 0;
}

/* CLBlast SGEMM NxNxN on the same queue, timed by host clock around
 * clFinish (CLBlast's own event covers only its last internal kernel). */
static double sgemm_gflops(flashcl_context *ctx, int n, int reps)
{
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    size_t count = (size_t)n * (size_t)n;
    unsigned seed = 7;
    cl_mem a = random_buffer(context, count, FLASHCL_DTYPE_FP32, &seed);
    cl_mem b = random_buffer(context, count, FLASHCL_DTYPE_FP32, &seed);
    cl_mem c = random_buffer(context, count, FLASHCL_DTYPE_FP32, &seed);
    double result = -1;
    double *times = calloc((size_t)reps, sizeof *times);
    if (a && b && c && times) {
        CLBlastStatusCode status = CLBlastSuccess;
        for (int i = -1; i < reps && status == CLBlastSuccess; ++i) {
            double start = host_ms();
            status = CLBlastSgemm(
                CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                (size_t)n, (size_t)n, (size_t)n, 1.0f, a, 0, (size_t)n, b, 0,
                (size_t)n, 0.0f, c, 0, (size_t)n, &queue, NULL);
            clFinish(queue);
            if (i >= 0)
                times[i] = host_ms() - start; /* i = -1 is the warm-up */
        }
        if (status == CLBlastSuccess) {
            qsort(times, (size_t)reps, sizeof *times, compare_double);
            result = 2.0 * n * (double)n * n / (times[reps / 2] * 1e-3) / 1e9;
        } else {
            fprintf(stderr, "flashcl-bench: CLBlastSgemm failed: %d\n",
                    (int)status);
        }
    }
    free(times);
    cl_mem all[3] = {a, b, c};
    for (int i = 0; i < 3; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
    return result;
}

static void print_row(FILE *csv, const bench_row *r)
{
    printf("| %-10s | %-4s | %3d | %-6s | %5d | %3d | %3d | %10.3f | %10.3f | "
           "%9.4f | %8.2f | %9.1f |\n",
           r->variant, r->dtype, r->head_dim, r->causal ? "yes" : "no",
           r->seqlen, r->batch, r->heads, r->median_ms, r->min_ms, r->tflops,
           r->tflops * 1e3, r->gbps);
    fflush(stdout);
    if (csv)
        fprintf(csv, "%s,%s,%d,%d,%d,%d,%d,%.4f,%.4f,%.4f,%.6f,%.3f\n",
                r->variant, r->dtype, r->head_dim, r->causal, r->seqlen,
                r->batch, r->heads, r->first_call_ms, r->median_ms, r->min_ms,
                r->tflops, r->gbps);
}

int main(int argc, char **argv)
{
    bench_options opt = {.reps = 10, .warmup = 2, .sgemm_n = -1};
    if (parse_options(argc, argv, &opt) != 0)
        return 2;
    if (opt.reps < 1)
        opt.reps = 1;
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, opt.device);
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl-bench: %s: %s\n",
                flashcl_status_string(status), flashcl_last_create_error());
        return 1;
    }
    cl_device_id device = flashcl_context_device(ctx);
    char name[256] = "", driver[128] = "";
    cl_device_type type = 0;
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(device, CL_DRIVER_VERSION, sizeof driver, driver, NULL);
    clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    apply_defaults(&opt, (type & CL_DEVICE_TYPE_CPU) != 0);
    printf("flashcl %s on %s (driver %s); median of %d runs after %d "
           "warm-up, OpenCL profiling events\n\n",
           flashcl_version_string(), name, driver, opt.reps, opt.warmup);
    FILE *csv = opt.csv_path ? fopen(opt.csv_path, "w") : NULL;
    if (csv)
        fprintf(csv, "variant,dtype,head_dim,causal,seqlen,batch,heads,"
                     "first_call_ms,"
                     "median_ms,min_ms,tflops,gbps\n");
    printf("| variant | dtype | D | causal | N | B | H | median ms | min ms | "
           "TFLOP/s | GFLOP/s | GB/s |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int failures = 0;
    bench_row rows[4 * 8 * MAX_LIST * MAX_LIST];
    int num_rows = 0;
    for (int t = 0; t < opt.num_dtypes; ++t)
        for (int h = 0; h < opt.num_head_dims; ++h)
            for (int c = 0; c < opt.num_causal; ++c)
                for (int s = 0; s < opt.num_seqlens; ++s)
                    for (int w = 0; w < opt.num_variants; ++w) {
                        bench_row row = {0};
                        if (run_shape(ctx, &opt, opt.variants[w], opt.dtypes[t],
                                      opt.head_dims[h], opt.causal_modes[c],
                                      opt.seqlens[s], &row) != 0) {
                            ++failures;
                            continue;
                        }
                        print_row(csv, &row);
                        if (num_rows < (int)(sizeof rows / sizeof rows[0]))
                            rows[num_rows++] = row;
                    }
    printf("\nfirst call (kernel compile + first run), host clock:\n");
    for (int i = 0; i < num_rows; ++i)
        printf("  %s %s D=%d causal=%d N=%d: %.1f ms\n", rows[i].variant,
               rows[i].dtype, rows[i].head_dim, rows[i].causal, rows[i].seqlen,
               rows[i].first_call_ms);
    if (opt.sgemm_n > 0) {
        double gflops = sgemm_gflops(ctx, opt.sgemm_n, 3);
        printf("\npeer, same run: CLBlast SGEMM %dx%dx%d: %.2f GFLOP/s "
               "(median of 3, host clock around clFinish)\n",
               opt.sgemm_n, opt.sgemm_n, opt.sgemm_n, gflops);
        if (csv)
            fprintf(csv, "# clblast_sgemm_%d_gflops,%.3f\n", opt.sgemm_n,
                    gflops);
    }
    if (csv)
        fclose(csv);
    flashcl_context_release(ctx);
    return failures ? 1 : 0;
}
