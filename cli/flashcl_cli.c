/* flashcl: command-line tool. `info` lists every OpenCL device with what
 * flashcl would run there; `run` computes one attention on the chosen device
 * and prints its error against a float64 host reference and its speed. */
#define _POSIX_C_SOURCE 200809L
#include "flashcl.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flashcl <command> [options]\n"
            "commands:\n"
            "  info                 every OpenCL device and what flashcl runs "
            "there\n"
            "  run [--device SPEC] [--seqlen N] [--head-dim D] [--heads H]\n"
            "      [--dtype fp32|fp16|bf16] [--causal]\n"
            "                       one attention on the device: error vs a "
            "float64\n"
            "                       reference and time (OpenCL profiling)\n"
            "device SPEC: index (0), platform:device (1:0), gpu|cpu|"
            "accelerator, or a\n"
            "name substring (nvidia, pocl); default FLASHCL_DEVICE, else the "
            "first GPU,\nelse the first device.\n"
            "exit status: 0 ok, 1 failure, 2 usage error\n");
}

/* ---- info ----------------------------------------------------------- */

static void print_variant(flashcl_context *ctx, int head_dim, flashcl_dtype dtype)
{
    flashcl_attention_desc desc = {0};
    desc.batch = desc.heads_q = 1;
    desc.seqlen_q = desc.seqlen_k = 1024;
    desc.head_dim = head_dim;
    desc.dtype = dtype;
    flashcl_variant_info v;
    if (flashcl_describe_variant(ctx, &desc, &v) != FLASHCL_SUCCESS) {
        printf("    D=%d: %s\n", head_dim, flashcl_context_last_error(ctx));
        return;
    }
    printf("    D=%-3d %s: %s, BLOCK_M=%d BLOCK_N=%d WG=%d%s (%s)\n", head_dim,
           dtype == FLASHCL_DTYPE_FP32   ? "fp32"
           : dtype == FLASHCL_DTYPE_FP16 ? "fp16"
                                         : "bf16",
           v.kernel_file, v.block_m, v.block_n, v.work_group_size,
           v.vector_width ? (v.vector_width == 16 ? " VEC=16"
                             : v.vector_width == 8 ? " VEC=8"
                                                   : " VEC=4")
                          : "",
           v.reason);
}

static void print_device(flashcl_context *ctx, const char *label, bool chosen,
                         const char *why)
{
    flashcl_device_info d;
    flashcl_context_device_info(ctx, &d);
    printf("%s %s%s\n", label, d.name, chosen ? "   <== selected" : "");
    if (chosen)
        printf("  selected because: %s\n", why);
    printf("  vendor: %s (0x%04x), platform: %s\n", d.vendor, d.vendor_id,
           d.platform);
    printf("  driver: %s, %s\n", d.driver_version, d.opencl_c_version);
    printf("  compute units: %u, clock: %u MHz\n", d.compute_units,
           d.clock_mhz);
    printf("  global memory: %.2f GiB, local: %.0f KiB, max allocation: "
           "%.2f GiB, max work-group: %zu\n",
           (double)d.global_mem_bytes / 1073741824.0,
           (double)d.local_mem_bytes / 1024.0,
           (double)d.max_alloc_bytes / 1073741824.0, d.max_work_group_size);
    printf("  fp16 storage: yes (cl_khr_fp16 %s), bf16 storage: yes, fp64: "
           "%s, subgroups: %s\n",
           d.has_fp16_ext ? "listed" : "not listed, not needed",
           d.has_fp64 ? "yes" : "no", d.has_subgroups ? "yes" : "no");
    printf("  matrix instructions: %s\n", d.matrix_path);
    printf("  flashcl path: %s\n", d.flashcl_path);
    printf("  variants (N=1024, non-causal):\n");
    const flashcl_dtype dtypes[2] = {FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16};
    for (int t = 0; t < 2; ++t) {
        print_variant(ctx, 64, dtypes[t]);
        print_variant(ctx, 128, dtypes[t]);
    }
}

static int cmd_info(void)
{
    flashcl_context *selected = NULL;
    flashcl_status status = flashcl_context_create(&selected, NULL);
    const char *env = getenv("FLASHCL_DEVICE");
    char why[256];
    if (env && *env)
        snprintf(why, sizeof why, "FLASHCL_DEVICE=\"%s\"", env);
    else
        snprintf(why, sizeof why,
                 "default (first GPU, else first device; FLASHCL_DEVICE "
                 "unset)");
    cl_device_id selected_device =
        status == FLASHCL_SUCCESS ? flashcl_context_device(selected) : NULL;
    if (status != FLASHCL_SUCCESS)
        printf("no device selected: %s: %s\n\n", flashcl_status_string(status),
               flashcl_last_create_error());
    printf("flashcl %s\n", flashcl_version_string());
    cl_uint num_platforms = 0;
    clGetPlatformIDs(0, NULL, &num_platforms);
    cl_platform_id platforms[16];
    if (num_platforms > 16)
        num_platforms = 16;
    if (num_platforms == 0 ||
        clGetPlatformIDs(num_platforms, platforms, NULL) != CL_SUCCESS) {
        printf("no OpenCL platform found\n");
        flashcl_context_release(selected);
        return EXIT_FAILED;
    }
    unsigned flat = 0;
    for (cl_uint p = 0; p < num_platforms; ++p) {
        cl_device_id devices[16];
        cl_uint num_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devices,
                           &num_devices) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < num_devices && d < 16; ++d, ++flat) {
            char spec[32], label[64];
            snprintf(spec, sizeof spec, "%u:%u", p, d);
            snprintf(label, sizeof label, "\ndevice %u (%s):", flat, spec);
            flashcl_context *ctx = NULL;
            if (flashcl_context_create(&ctx, spec) != FLASHCL_SUCCESS) {
                printf("%s cannot create a context: %s\n", label,
                       flashcl_last_create_error());
                continue;
            }
            print_device(ctx, label, devices[d] == selected_device, why);
            flashcl_context_release(ctx);
        }
    }
    flashcl_context_release(selected);
    return status == FLASHCL_SUCCESS ? EXIT_OK : EXIT_FAILED;
}

/* ---- run ------------------------------------------------------------ */

typedef struct run_options {
    const char *device;
    int seqlen, head_dim, heads, causal;
    flashcl_dtype dtype;
} run_options;


/* Round-to-nearest-even float -> fp16/bf16 bits, for finite inputs of
 * moderate size (the demo's data is in [-1, 1]). */
static uint16_t to_storage_bits(float value, flashcl_dtype dtype)
{
    uint32_t bits;
    memcpy(&bits, &value, 4);
    if (dtype == FLASHCL_DTYPE_BF16)
        return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    float magnitude = fabsf(value);
    if (magnitude < 6.103515625e-05f) /* subnormal range: steps of 2^-24 */
        return (uint16_t)(sign | (uint16_t)lrintf(magnitude * 16777216.0f));
    int exponent;
    float fraction = frexpf(magnitude, &exponent); /* [0.5, 1) */
    long mantissa = lrintf((fraction * 2.0f - 1.0f) * 1024.0f);
    int biased = exponent - 1 + 15;
    if (mantissa == 1024) {
        mantissa = 0;
        ++biased;
    }
    return (uint16_t)(sign | (uint16_t)(biased << 10) | (uint16_t)mantissa);
}

static float from_storage(const void *data, size_t i, flashcl_dtype dtype)
{
    if (dtype == FLASHCL_DTYPE_FP32)
        return ((const float *)data)[i];
    uint16_t bits = ((const uint16_t *)data)[i];
    if (dtype == FLASHCL_DTYPE_BF16) {
        uint32_t wide = (uint32_t)bits << 16;
        float out;
        memcpy(&out, &wide, 4);
        return out;
    }
    int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    float magnitude = exponent == 0
                          ? ldexpf((float)mantissa, -24)
                          : ldexpf((float)(mantissa | 0x400), exponent - 25);
    return (bits & 0x8000) ? -magnitude : magnitude;
}

static void fill_inputs(void *data, size_t count, flashcl_dtype dtype,
                        unsigned *seed)
{
    for (size_t i = 0; i < count; ++i) {
        *seed = *seed * 1664525u + 1013904223u;
        float value = (float)(*seed >> 8) / 8388608.0f - 1.0f;
        if (dtype == FLASHCL_DTYPE_FP32)
            ((float *)data)[i] = value;
        else
            ((uint16_t *)data)[i] = to_storage_bits(value, dtype);
    }
}

/* Relative L2 error of O against float64 attention on the same inputs
 * ([1, N, H, D] layout, one batch). */
static double reference_error(const run_options *opt, const void *q,
                              const void *k, const void *v, const void *o)
{
    const int n = opt->seqlen, h_count = opt->heads, d_count = opt->head_dim;
    const double scale = 1.0 / sqrt((double)d_count);
    double *score = malloc((size_t)n * sizeof *score);
    double err2 = 0, ref2 = 0;
    for (int h = 0; h < h_count && score; ++h)
        for (int i = 0; i < n; ++i) {
            const int last = opt->causal ? i : n - 1;
            double row_max = -INFINITY;
            for (int j = 0; j <= last; ++j) {
                double dot = 0;
                for (int d = 0; d < d_count; ++d)
                    dot += (double)from_storage(q, ((size_t)i * h_count + h) * d_count + d, opt->dtype) *
                           from_storage(k, ((size_t)j * h_count + h) * d_count + d, opt->dtype);
                score[j] = dot * scale;
                row_max = fmax(row_max, score[j]);
            }
            double sum = 0;
            for (int j = 0; j <= last; ++j)
                sum += (score[j] = exp(score[j] - row_max));
            for (int d = 0; d < d_count; ++d) {
                double ref = 0;
                for (int j = 0; j <= last; ++j)
                    ref += score[j] * from_storage(v, ((size_t)j * h_count + h) * d_count + d, opt->dtype);
                ref /= sum;
                double got = from_storage(o, ((size_t)i * h_count + h) * d_count + d, opt->dtype);
                err2 += (got - ref) * (got - ref);
                ref2 += ref * ref;
            }
        }
    free(score);
    return score ? sqrt(err2 / ref2) : -1;
}

static int parse_run(int argc, char **argv, run_options *opt)
{
    for (int i = 2; i < argc; ++i) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--causal")) {
            opt->causal = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "flashcl run: %s needs a value (flashcl --help)\n",
                    arg);
            return -1;
        }
        const char *value = argv[++i];
        if (!strcmp(arg, "--device"))
            opt->device = value;
        else if (!strcmp(arg, "--seqlen"))
            opt->seqlen = atoi(value);
        else if (!strcmp(arg, "--head-dim"))
            opt->head_dim = atoi(value);
        else if (!strcmp(arg, "--heads"))
            opt->heads = atoi(value);
        else if (!strcmp(arg, "--dtype")) {
            if (!strcmp(value, "fp32"))
                opt->dtype = FLASHCL_DTYPE_FP32;
            else if (!strcmp(value, "fp16"))
                opt->dtype = FLASHCL_DTYPE_FP16;
            else if (!strcmp(value, "bf16"))
                opt->dtype = FLASHCL_DTYPE_BF16;
            else {
                fprintf(stderr, "flashcl run: unknown dtype %s\n", value);
                return -1;
            }
        } else {
            fprintf(stderr, "flashcl run: unknown option %s (flashcl --help)\n",
                    arg);
            return -1;
        }
    }
    if (opt->seqlen < 1 || opt->head_dim < 1 || opt->heads < 1) {
        fprintf(stderr, "flashcl run: --seqlen, --head-dim and --heads must "
                        "be positive\n");
        return -1;
    }
    return 0;
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

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Time `reps` launches on device buffers; median in ms. */
static double time_forward(flashcl_context *ctx, flashcl_attention_desc *desc,
                           const void *q, const void *k, const void *v,
                           size_t bytes, int reps)
{
    cl_context context = flashcl_context_cl_context(ctx);
    cl_int err;
    const void *inputs[3] = {q, k, v};
    cl_mem buffers[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; ++i)
        buffers[i] = clCreateBuffer(
            context, CL_MEM_READ_WRITE | (i < 3 ? CL_MEM_COPY_HOST_PTR : 0),
            bytes, i < 3 ? (void *)inputs[i] : NULL, &err);
    desc->q.buffer = buffers[0];
    desc->k.buffer = buffers[1];
    desc->v.buffer = buffers[2];
    desc->o.buffer = buffers[3];
    double times[64], median = -1;
    int done = 0;
    for (int i = -1; i < reps && i < 64; ++i) { /* i = -1 warms up */
        cl_event event = NULL;
        if (flashcl_attention_forward(ctx, NULL, desc, 0, NULL, &event) !=
            FLASHCL_SUCCESS)
            break;
        clWaitForEvents(1, &event);
        if (i >= 0)
            times[done++] = event_ms(event);
        clReleaseEvent(event);
    }
    if (done > 0) {
        qsort(times, (size_t)done, sizeof times[0], compare_double);
        median = times[done / 2];
    }
    for (int i = 0; i < 4; ++i)
        if (buffers[i])
            clReleaseMemObject(buffers[i]);
    return median;
}

static int cmd_run(int argc, char **argv)
{
    run_options opt = {NULL, 1024, 64, 8, 0, FLASHCL_DTYPE_FP32};
    if (parse_run(argc, argv, &opt) != 0)
        return EXIT_USAGE;
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, opt.device);
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl run: %s: %s\n", flashcl_status_string(status),
                flashcl_last_create_error());
        return EXIT_FAILED;
    }
    flashcl_device_info dev;
    flashcl_context_device_info(ctx, &dev);
    const size_t count = (size_t)opt.seqlen * opt.heads * opt.head_dim;
    const size_t elem = opt.dtype == FLASHCL_DTYPE_FP32 ? 4 : 2;
    void *q = malloc(count * elem), *k = malloc(count * elem),
         *v = malloc(count * elem), *o = malloc(count * elem);
    int rc = EXIT_FAILED;
    if (q && k && v && o) {
        unsigned seed = 2024;
        fill_inputs(q, count, opt.dtype, &seed);
        fill_inputs(k, count, opt.dtype, &seed);
        fill_inputs(v, count, opt.dtype, &seed);
        flashcl_attention_desc desc = {0};
        desc.batch = 1;
        desc.heads_q = opt.heads;
        desc.seqlen_q = desc.seqlen_k = opt.seqlen;
        desc.head_dim = opt.head_dim;
        desc.dtype = opt.dtype;
        desc.causal = opt.causal;
        double compile_ms = 0;
        status = flashcl_prepare(ctx, &desc, &compile_ms);
        if (status == FLASHCL_SUCCESS)
            status = flashcl_attention_forward_host(ctx, &desc, q, k, v, o,
                                                    NULL);
        if (status != FLASHCL_SUCCESS) {
            fprintf(stderr, "flashcl run: %s: %s\n",
                    flashcl_status_string(status),
                    flashcl_context_last_error(ctx));
        } else {
            double error = reference_error(&opt, q, k, v, o);
            double ms = time_forward(ctx, &desc, q, k, v, count * elem, 5);
            double flops = 4.0 * opt.heads * (double)opt.seqlen * opt.seqlen *
                           opt.head_dim * (opt.causal ? 0.5 : 1.0);
            printf("device: %s (%s)\n", dev.name, dev.platform);
            printf("attention: batch 1, heads %d, seqlen %d, head_dim %d, %s%s\n",
                   opt.heads, opt.seqlen, opt.head_dim,
                   opt.dtype == FLASHCL_DTYPE_FP32   ? "fp32"
                   : opt.dtype == FLASHCL_DTYPE_FP16 ? "fp16"
                                                     : "bf16",
                   opt.causal ? ", causal" : "");
            printf("kernel compile: %.1f ms (0 = cached)\n", compile_ms);
            printf("relative L2 error vs float64 reference: %.3e\n", error);
            printf("time: %.3f ms (median of 5, profiling events), %.2f "
                   "GFLOP/s\n",
                   ms, flops / (ms * 1e-3) / 1e9);
            const double tolerance = opt.dtype == FLASHCL_DTYPE_FP32   ? 1e-5
                                     : opt.dtype == FLASHCL_DTYPE_FP16 ? 2e-3
                                                                       : 1e-2;
            rc = error >= 0 && error < tolerance && ms > 0 ? EXIT_OK
                                                           : EXIT_FAILED;
            printf("%s (tolerance %.0e)\n", rc == EXIT_OK ? "PASS" : "FAIL",
                   tolerance);
        }
    }
    free(q);
    free(k);
    free(v);
    free(o);
    flashcl_context_release(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    if (!strcmp(argv[1], "info"))
        return cmd_info();
    if (!strcmp(argv[1], "run"))
        return cmd_run(argc, argv);
    fprintf(stderr, "flashcl: unknown command \"%s\" (try flashcl --help)\n",
            argv[1]);
    return EXIT_USAGE;
}
