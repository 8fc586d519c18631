/* flashcl-bench: throughput of the fused forward over the FlashAttention-2
 * paper's protocol (batch * seqlen = tokens, heads = hidden / head_dim),
 * timed with OpenCL profiling events: median of repeated runs, warm-up and
 * first-call (compile) time excluded and printed separately. A peer is
 * measured in the same run: CLBlast's SGEMM on the same device. Timing and
 * medians come from support/timing.h and the --check rows from the float64
 * oracle (support/oracle.h), shared with the tests and the `flashcl` tool. */
#define _POSIX_C_SOURCE 200809L
#include "flashcl.h"
#include "oracle.h"
#include "oracle_bwd.h"
#include "kv_quant_oracle.h"
#include "timing.h"

#include <clblast_c.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    /* --decode: shapes B:HQ:HKV:NK of the decode table (issue 11). */
    long decode[MAX_LIST][4];
    int num_decode;
    int decode_nq, decode_splits, decode_page;
    int decode_dense; /* --dense: no cache fields, the plain call */
    int decode_bhnd;  /* --layout bhnd: [B, H, N, D], torch's own layout */
    int decode_kv;    /* --kv-dtype: flashcl_kv_storage of K and V (0: dtype) */
    /* --varlen: sequence lengths of one packed prefill batch (issue 11) */
    int varlen[MAX_LIST], num_varlen;
    int describe;     /* --describe: a describe| line per row */
    int backward;     /* --backward: time the backward after the forward */
    double bandwidth_gbs; /* --bandwidth: the figure to report against */
    double busy_us; /* --busy-us: device work queued before each timed call */
    int busy_read;  /* --busy-kind read: that work only reads (clean L2) */
} bench_options;

typedef struct bench_row {
    const char *variant;
    const char *dtype;
    int head_dim, causal, seqlen, batch, heads;
    double first_call_ms, median_ms, min_ms, tflops, gbps;
    double last_kernel_ms; /* median of the call's last command alone */
    /* --backward: its median, TFLOP/s (FA's 2.5 x forward convention) and
     * its time over the forward's; 0 without --backward. */
    double bwd_median_ms, bwd_tflops, bwd_ratio;
    /* The forward and the backward in one timed interval, as FA2's
     * benchmark_fwd_bwd times them; TFLOP/s on its convention (3.5 x the
     * forward's FLOPs). */
    double fwdbwd_median_ms, fwdbwd_tflops;
} bench_row;

/* A comma list of ints into out; -1 (with a message naming `what`) when
 * it has more than `max` (they used to be dropped silently). */
static int parse_list(const char *what, const char *text, int *out, int max)
{
    int count = 0;
    char *copy = strdup(text), *save = NULL;
    if (!copy)
        return -1;
    for (char *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (count == max) {
            fprintf(stderr, "flashcl-bench: %s takes at most %d values\n",
                    what, max);
            free(copy);
            return -1;
        }
        out[count++] = atoi(tok);
    }
    free(copy);
    return count;
}

static const char *dtype_name(int dtype)
{
    return oracle_dtype_name((flashcl_dtype)dtype);
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
           "  --busy-us N          keep the device busy about N us (a buffer "
           "fill) before\n"
           "                       each timed call, so that the host's "
           "enqueue time is not\n"
           "                       timed (default 200; 0: the marker alone, "
           "as before 2026-12-01T21:30Z)\n"
           "  --busy-kind K        fill (default: a buffer fill, which "
           "leaves the L2 dirty,\n"
           "                       as torch's do_bench flush does) or read "
           "(a kernel that only\n"
           "                       reads the buffer: the L2 holds clean "
           "lines)\n"
           "  --sgemm N            also time CLBlast SGEMM NxNxN as the peer "
           "(default 2048 on CPU, 8192 on GPU; 0 = off)\n"
           "  --variants LIST      each a '+'-joined set of plain, windowW, "
           "alibi, bias,\n"
           "                       mask, softcap, sinks, gqaG, dvX (default "
           "plain); windowW:\n"
           "                       W keys left of the diagonal; gqaG: G query "
           "heads per KV\n"
           "                       head; dvX: head_dim_v = X; biasrow, "
           "maskrow: one\n"
           "                       [N] row for every query (stride 0: cache-"
           "resident);\n"
           "                       bias16: the bias in the call's 16-bit "
           "type; tf32: allow_tf32;\n"
           "                       maskpad: the last N/16 keys hidden (key "
           "padding); maskprefix:\n"
           "                       a prefix LM mask (N/4 keys for all, "
           "causal after)\n"
           "  --csv FILE           also write the rows as CSV\n"
           "  --decode LIST        decode table instead of the sweep: shapes "
           "B:HQ:HKV:NK,... against a KV cache of NK keys per sequence "
           "(first --dtype and --head-dim)\n"
           "  --nq N               decode: query rows per sequence (default "
           "1)\n"
           "  --splits N           decode: num_splits (default 0, automatic)"
           "\n"
           "  --page N             decode: paged cache of N-row pages "
           "(default 0, dense cache)\n"
           "  --kv-dtype T         decode: K and V stored as T (e4m3, e5m2, "
           "int8, int4; issue 45); the peer column is then the same call on "
           "a cache of the dtype\n"
           "  --dense              decode: no cache fields (the plain call "
           "on K/V of NK rows)\n"
           "  --layout L           decode: bnhd (default: a key's heads side "
           "by side, as caches usually are) or bhnd (a head's keys "
           "contiguous, as torch's SDPA peers take them)\n"
           "  --varlen LENS        varlen table instead of the sweep: one "
           "packed prefill batch of these sequence lengths (cu_seqlens_q/k, "
           "Nq = Nk each), beside the padded dense call [B, max length] "
           "(first --dtype and --head-dim, heads = --hidden / head dim)\n"
           "  --bandwidth GBS      decode: report GB/s as a fraction of this "
           "figure (e.g. 4280 for a measured copy bandwidth)\n"
           "  --check ROWS         every row, its variant too: relative L2 error of ROWS "
           "sampled output rows vs the float64 oracle (prints check| lines)\n"
           "  --backward           also time flashcl_attention_backward "
           "after each forward (bwd columns, and the forward and backward\n"
           "                       in one timed interval: fwd+bwd, FLOPs 3.5x the\n"
           "                       forward's; --check compares dQ, dK, dV)\n"
           "  --describe           per row, what ran (path, tiles, the tuning "
           "database entry; prints describe| lines)\n");
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
        if (!strcmp(arg, "--dense")) { /* the flags without a value */
            opt->decode_dense = 1;
            continue;
        }
        if (!strcmp(arg, "--backward")) {
            opt->backward = 1;
            continue;
        }
        if (!strcmp(arg, "--describe")) {
            opt->describe = 1;
            continue;
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
        else if (!strcmp(arg, "--head-dim")) {
            opt->num_head_dims =
                parse_list(arg, value, opt->head_dims, MAX_LIST);
            if (opt->num_head_dims < 0)
                return -1;
        } else if (!strcmp(arg, "--seqlen")) {
            opt->num_seqlens = parse_list(arg, value, opt->seqlens, MAX_LIST);
            if (opt->num_seqlens < 0)
                return -1;
        } else if (!strcmp(arg, "--causal")) {
            /* anything else used to mean both ("no" ran causal too) */
            if (strcmp(value, "0") && strcmp(value, "1") &&
                strcmp(value, "both")) {
                fprintf(stderr, "flashcl-bench: --causal takes 0, 1 or "
                                "both, not %s\n", value);
                return -1;
            }
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
        else if (!strcmp(arg, "--busy-us"))
            opt->busy_us = atof(value);
        else if (!strcmp(arg, "--busy-kind")) {
            if (strcmp(value, "fill") && strcmp(value, "read")) {
                fprintf(stderr, "flashcl-bench: --busy-kind takes fill or "
                                "read, not %s\n", value);
                return -1;
            }
            opt->busy_read = !strcmp(value, "read");
        }
        else if (!strcmp(arg, "--check"))
            opt->check_rows = atoi(value);
        else if (!strcmp(arg, "--decode")) {
            char *copy = strdup(value), *save = NULL;
            opt->num_decode = 0;
            for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok;
                 tok = strtok_r(NULL, ",", &save)) {
                if (opt->num_decode == MAX_LIST) {
                    fprintf(stderr, "flashcl-bench: --decode takes at most "
                                    "%d shapes\n", MAX_LIST);
                    free(copy);
                    return -1;
                }
                long *d = opt->decode[opt->num_decode];
                if (sscanf(tok, "%ld:%ld:%ld:%ld", &d[0], &d[1], &d[2],
                           &d[3]) != 4 || d[0] < 1 || d[1] < 1 || d[2] < 1 ||
                    d[3] < 1) {
                    fprintf(stderr, "flashcl-bench: --decode shape \"%s\" is "
                                    "not B:HQ:HKV:NK\n", tok);
                    free(copy);
                    return -1;
                }
                ++opt->num_decode;
            }
            free(copy);
        } else if (!strcmp(arg, "--varlen")) {
            opt->num_varlen = parse_list(arg, value, opt->varlen, MAX_LIST);
            if (opt->num_varlen < 0)
                return -1;
            for (int n = 0; n < opt->num_varlen; ++n)
                if (opt->varlen[n] < 1) {
                    fprintf(stderr, "flashcl-bench: --varlen lengths must "
                                    "be positive\n");
                    return -1;
                }
        } else if (!strcmp(arg, "--layout")) {
            if (strcmp(value, "bnhd") && strcmp(value, "bhnd")) {
                fprintf(stderr, "flashcl-bench: --layout takes bnhd or "
                                "bhnd\n");
                return -1;
            }
            opt->decode_bhnd = !strcmp(value, "bhnd");
        } else if (!strcmp(arg, "--nq"))
            opt->decode_nq = atoi(value);
        else if (!strcmp(arg, "--splits"))
            opt->decode_splits = atoi(value);
        else if (!strcmp(arg, "--page"))
            opt->decode_page = atoi(value);
        else if (!strcmp(arg, "--kv-dtype")) {
            opt->decode_kv = kvq_type_parse(value);
            if (opt->decode_kv < 0) {
                fprintf(stderr, "flashcl-bench: --kv-dtype takes e4m3, e5m2, "
                                "int8, int4 or same\n");
                return -1;
            }
        }
        else if (!strcmp(arg, "--bandwidth"))
            opt->bandwidth_gbs = atof(value);
        else if (!strcmp(arg, "--sgemm"))
            opt->sgemm_n = atoi(value);
        else if (!strcmp(arg, "--variants")) {
            static char storage[256];
            snprintf(storage, sizeof storage, "%s", value);
            opt->num_variants = 0;
            char *save = NULL;
            const int cap =
                (int)(sizeof opt->variants / sizeof opt->variants[0]);
            for (char *tok = strtok_r(storage, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                if (opt->num_variants == cap) { /* (was dropped silently) */
                    fprintf(stderr, "flashcl-bench: --variants takes at most "
                                    "%d variants\n", cap);
                    return -1;
                }
                opt->variants[opt->num_variants++] = tok;
            }
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
static void apply_defaults(flashcl_context *ctx, bench_options *opt)
{
    cl_device_type type = 0;
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_TYPE, sizeof type,
                    &type, NULL);
    const bool is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
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

/* A device buffer initialised from `host`, which the caller frees; NULL
 * when creation failed. */
static cl_mem host_copy_buffer(cl_context context, cl_mem_flags flags,
                               const void *host, size_t bytes)
{
    cl_int err;
    cl_mem buffer = clCreateBuffer(context, flags | CL_MEM_COPY_HOST_PTR,
                                   bytes, (void *)host, &err);
    return err == CL_SUCCESS ? buffer : NULL;
}

static cl_mem filled_buffer(cl_context context, size_t count, float value)
{
    float *host = malloc(count * sizeof *host);
    if (!host)
        return NULL;
    for (size_t i = 0; i < count; ++i)
        host[i] = value * (float)(i % 7 + 1) / 7.0f;
    cl_mem buffer = host_copy_buffer(context, CL_MEM_READ_ONLY, host,
                                     count * sizeof *host);
    free(host);
    return buffer;
}

/* filled_buffer's values in a 16-bit storage type (a bias16 part) */
static cl_mem filled_buffer16(cl_context context, size_t count, float value,
                              flashcl_dtype dtype)
{
    unsigned short *host = malloc(count * sizeof *host);
    if (!host)
        return NULL;
    for (size_t i = 0; i < count; ++i)
        oracle_store(host, i, dtype, value * (float)(i % 7 + 1) / 7.0f);
    cl_mem buffer = host_copy_buffer(context, CL_MEM_READ_ONLY, host,
                                     count * sizeof *host);
    free(host);
    return buffer;
}

/* A variant name is '+'-joined parts: plain, windowW (W keys to the left
 * of the diagonal), softcap, alibi, bias, mask, sinks, gqaG (G query heads
 * per KV head), dvX (D_v = X), tf32 (allow_tf32 for fp32), biasrow and
 * maskrow (bias / mask of one [N] row that every query reads: its stride
 * over queries is 0, so it stays in cache, which tells the cost of the
 * score code from the cost of the memory traffic), bias16 (the bias in
 * the call's fp16/bf16 type instead of fp32). */
typedef struct variant_spec {
    long window; /* -1: none */
    bool softcap, alibi, bias, mask, sinks, tf32;
    bool bias_row, mask_row; /* one [N] row for all queries */
    /* the mask's pattern: every eighth key hidden (0), the last sixteenth
     * of the keys hidden (1, key padding), or a prefix of a quarter of
     * the keys seen by every query and causal after it (2, prefix LM) */
    int mask_form;
    bool bias16; /* the bias in the call's 16-bit type, not fp32 */
    long gqa, dv; /* 1 and 0 (= D) when absent */
} variant_spec;

static int parse_variant(const char *name, variant_spec *v)
{
    *v = (variant_spec){.window = -1, .gqa = 1};
    char copy[128];
    snprintf(copy, sizeof copy, "%s", name);
    char *save = NULL;
    for (char *part = strtok_r(copy, "+", &save); part;
         part = strtok_r(NULL, "+", &save)) {
        if (!strcmp(part, "plain"))
            continue;
        else if (!strncmp(part, "window", 6) && atol(part + 6) > 0)
            v->window = atol(part + 6);
        else if (!strncmp(part, "gqa", 3) && atol(part + 3) > 0)
            v->gqa = atol(part + 3);
        else if (!strncmp(part, "dv", 2) && atol(part + 2) > 0)
            v->dv = atol(part + 2);
        else if (!strcmp(part, "softcap"))
            v->softcap = true;
        else if (!strcmp(part, "alibi"))
            v->alibi = true;
        else if (!strcmp(part, "bias"))
            v->bias = true;
        else if (!strcmp(part, "mask"))
            v->mask = true;
        else if (!strcmp(part, "bias16"))
            v->bias = v->bias16 = true;
        else if (!strcmp(part, "biasrow"))
            v->bias = v->bias_row = true;
        else if (!strcmp(part, "maskrow"))
            v->mask = v->mask_row = true;
        else if (!strcmp(part, "maskpad")) {
            v->mask = v->mask_row = true;
            v->mask_form = 1;
        } else if (!strcmp(part, "maskprefix")) {
            v->mask = true;
            v->mask_form = 2;
        }
        else if (!strcmp(part, "sinks"))
            v->sinks = true;
        else if (!strcmp(part, "tf32"))
            v->tf32 = true;
        else
            return -1;
    }
    return 0;
}

/* A [N, N] boolean mask, broadcast over batch and heads. Form 0: every
 * key but each eighth one visible (a mask that hides few pairs, so that
 * the FLOP count of the full problem stays the honest one, and none of
 * whose tiles is all visible). Form 1: the last N / 16 keys hidden, as a
 * padded batch's key-padding mask hides its padding. Form 2: a prefix LM,
 * the first N / 4 keys seen by every query and key k <= query q after
 * them (the FLOP count is of the full problem: compare times with plain
 * and causal ones). */
static cl_mem mask_buffer(cl_context context, size_t n, int form)
{
    unsigned char *host = malloc(n * n);
    if (!host)
        return NULL;
    for (size_t i = 0; i < n * n; ++i) {
        const size_t q = i / n, k = i % n;
        host[i] = form == 1   ? k < n - n / 16
                  : form == 2 ? k < n / 4 || k <= q
                              : (i % 8) != 3;
    }
    cl_mem buffer = host_copy_buffer(context, CL_MEM_READ_ONLY, host, n * n);
    free(host);
    return buffer;
}

/* Sets the descriptor fields of the variant's score parts; the extra
 * buffers go to extra[0..3]. 0, or -1 when an allocation failed. */
static int apply_variant(const variant_spec *v, flashcl_attention_desc *desc,
                         cl_context context, cl_mem extra[4])
{
    const size_t n = (size_t)desc->seqlen_q;
    int failed = 0;
    if (v->window >= 0) {
        desc->window = 1;
        desc->window_left = v->window;
        desc->window_right = desc->causal ? 0 : -1;
    }
    if (v->softcap)
        desc->softcap = 30.0f;
    desc->allow_tf32 = v->tf32;
    if (v->alibi) {
        extra[0] = filled_buffer(context, (size_t)desc->heads_q, 0.0625f);
        desc->alibi_slopes.buffer = extra[0];
        failed |= !extra[0];
    }
    if (v->bias) { /* one [N, N] (or [N]) fp32 bias for all heads */
        const bool b16 = v->bias16 && (desc->dtype == FLASHCL_DTYPE_FP16 ||
                                       desc->dtype == FLASHCL_DTYPE_BF16);
        extra[1] = b16 ? filled_buffer16(context, v->bias_row ? n : n * n,
                                         -0.5f, desc->dtype)
                       : filled_buffer(context, v->bias_row ? n : n * n, -0.5f);
        desc->bias.buffer = extra[1];
        desc->bias_dtype = b16 ? desc->dtype : FLASHCL_DTYPE_FP32;
        desc->bias.stride_seq = v->bias_row ? 0 : n;
        desc->bias.stride_dim = 1;
        failed |= !extra[1];
    }
    if (v->mask) { /* the [N] row: the first row of the [N, N] mask */
        extra[2] = mask_buffer(context, n, v->mask_form);
        desc->mask.buffer = extra[2];
        desc->mask.stride_seq = v->mask_row ? 0 : n;
        desc->mask.stride_dim = 1;
        failed |= !extra[2];
    }
    if (v->sinks) {
        extra[3] = filled_buffer(context, (size_t)desc->heads_q, 2.0f);
        desc->sinks.buffer = extra[3];
        failed |= !extra[3];
    }
    return failed ? -1 : 0;
}

/* Uniform in [-1, 1), rounded to the storage type. */
static void fill_random(void *data, size_t count, int dtype, unsigned *seed)
{
    for (size_t i = 0; i < count; ++i) {
        *seed = *seed * 1664525u + 1013904223u;
        oracle_store(data, i, (flashcl_dtype)dtype,
                     (double)(*seed >> 8) / 8388608.0 - 1.0);
    }
}

static cl_mem random_buffer(cl_context context, size_t count, int dtype,
                            unsigned *seed)
{
    size_t elem = oracle_dtype_size((flashcl_dtype)dtype);
    void *host = malloc(count * elem);
    if (!host)
        return NULL;
    fill_random(host, count, dtype, seed);
    cl_mem buffer = host_copy_buffer(context, CL_MEM_READ_WRITE, host,
                                     count * elem);
    free(host);
    return buffer;
}

/* Q, K, V and O of the last row, kept for the next: in the paper's
 * protocol every row of a dtype has the same sizes (batch * seqlen =
 * tokens, heads * D = hidden), and filling 4 x 33.5 M random elements
 * took longer than timing the row (0.4 s a tensor on the CPU machine).
 * The pool holds one reference; each row takes its own. */
static struct pooled {
    cl_mem buffer;
    size_t count;
    int dtype;
} pool[4];

static cl_mem pooled_buffer(int role, cl_context context, size_t count,
                            int dtype, unsigned *seed)
{
    struct pooled *p = &pool[role];
    if (!p->buffer || p->count != count || p->dtype != dtype) {
        if (p->buffer)
            clReleaseMemObject(p->buffer);
        p->buffer = random_buffer(context, count, dtype, seed);
        p->count = count;
        p->dtype = dtype;
    }
    if (p->buffer)
        clRetainMemObject(p->buffer);
    return p->buffer;
}

static void release_pool(void)
{
    for (int i = 0; i < 4; ++i)
        if (pool[i].buffer)
            clReleaseMemObject(pool[i].buffer);
    memset(pool, 0, sizeof pool);
}

/* A host copy of the whole buffer (NULL buffer: none, and success), so
 * that the descriptor's offsets and strides read it as they do the
 * device's. */
static int read_tensor(cl_command_queue queue, cl_mem buffer, void **out)
{
    *out = NULL;
    if (!buffer)
        return 1;
    size_t bytes = 0;
    if (clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof bytes, &bytes, NULL) !=
        CL_SUCCESS)
        return 0;
    *out = malloc(bytes ? bytes : 1);
    return *out && clEnqueueReadBuffer(queue, buffer, CL_TRUE, 0, bytes, *out,
                                       0, NULL, NULL) == CL_SUCCESS;
}

/* Columns of an output row: head_dim_v, which 0 makes head_dim. */
static long out_dim(const flashcl_attention_desc *d)
{
    return (long)(d->head_dim_v > 0 ? d->head_dim_v : d->head_dim);
}

/* Squared error and squared reference of one row b, h, i against the
 * oracle. */
static void check_one_row(oracle *ref, const flashcl_attention_desc *d,
                          const void *o, long b, long h, long i, double *row,
                          double *err2, double *ref2)
{
    const long n = (long)d->seqlen_q, hq = (long)d->heads_q,
               dim = out_dim(d);
    double lse;
    oracle_row(ref, (size_t)b, (size_t)h, (size_t)i, row, &lse);
    for (long e = 0; e < dim; ++e) {
        double got = oracle_load(o, (size_t)(((b * n + i) * hq + h) * dim + e),
                                 d->dtype);
        *err2 += (got - row[e]) * (got - row[e]);
        *ref2 += row[e] * row[e];
    }
}

/* --check: relative L2 error of `rows` sampled output rows (packed BNHD)
 * against the float64 oracle, which reads the variant's own inputs (ALiBi
 * slopes, bias, mask, sinks) from host copies of their buffers. -1 on
 * failure. */
static double check_rows(cl_command_queue queue, const flashcl_attention_desc *d,
                         int rows)
{
    enum { TENSORS = 8 };
    void *host[TENSORS];
    const cl_mem bufs[TENSORS] = {d->q.buffer,     d->k.buffer,
                                  d->v.buffer,     d->o.buffer,
                                  d->alibi_slopes.buffer, d->bias.buffer,
                                  d->mask.buffer,  d->sinks.buffer};
    int ok = 1;
    for (int i = 0; i < TENSORS; ++i)
        ok = read_tensor(queue, bufs[i], &host[i]) && ok;
    const oracle_inputs in = {.q = host[0],
                              .k = host[1],
                              .v = host[2],
                              .alibi_slopes = host[4],
                              .bias = host[5],
                              .mask = host[6],
                              .sinks = host[7]};
    oracle_problem problem;
    char why[256];
    oracle *ref = NULL;
    if (ok && oracle_problem_from_desc(d, &in, &problem, why, sizeof why) == 0)
        ref = oracle_create(&problem);
    double *row = malloc((size_t)out_dim(d) * sizeof *row);
    double err2 = 0, ref2 = 0, result = -1;
    unsigned seed = 99u;
    for (int r = 0; ref && row && r < rows; ++r) {
        seed = seed * 1664525u + 1013904223u;
        long b = (long)(seed >> 8) % d->batch;
        seed = seed * 1664525u + 1013904223u;
        long h = (long)(seed >> 8) % d->heads_q;
        seed = seed * 1664525u + 1013904223u;
        long i = r == 0   ? (long)d->seqlen_q - 1
                 : r == 1 ? 0
                          : (long)(seed >> 8) % (long)d->seqlen_q;
        check_one_row(ref, d, host[3], b, h, i, row, &err2, &ref2);
    }
    if (ref && row)
        result = isfinite(err2) ? sqrt(err2 / ref2) : INFINITY;
    oracle_release(ref);
    free(row);
    for (int i = 0; i < TENSORS; ++i)
        free(host[i]);
    return result;
}

/* Warm-up and timed calls of the fused backend, each timed on the device:
 * from a marker enqueued just before the call to the end of the call's
 * event, so that a call of several kernels (a fix-up pass, split-KV) is
 * timed whole. The marker completes as soon as the queue before it is
 * done: on an idle device that is at once, and the device then waits for
 * the host to enqueue the call (tens of microseconds, much of a decode
 * call), so a buffer fill of about --busy-us of device time goes first
 * and the call is queued while it runs. The fill also evicts the caches,
 * as torch's do_bench does between runs. */
typedef struct busy_fill {
    cl_mem buffer;
    size_t bytes; /* 0: none */
    /* --busy-kind read: a kernel that only reads the buffer, so the
     * caches it evicts hold clean lines (a fill leaves the L2 dirty: the
     * timed call then pays for writing those lines back as it evicts
     * them, as after torch's do_bench flush) */
    cl_program program;
    cl_kernel reader;
    cl_mem sink;
} busy_fill;

static busy_fill g_busy; /* one per process, sized on first use */

/* The reader's work-items: enough to stream at the device's bandwidth. */
#define BUSY_READ_ITEMS ((size_t)1 << 18)

static const char busy_read_source[] =
    "__kernel void busy_read(__global const uint4 *src, ulong n,\n"
    "                        __global uint *sink)\n"
    "{\n"
    "    uint acc = 0;\n"
    "    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {\n"
    "        const uint4 v = src[i];\n"
    "        acc ^= v.x ^ v.y ^ v.z ^ v.w;\n"
    "    }\n"
    "    if (acc == 0x9e3779b9u) /* the buffer is zero: never */\n"
    "        sink[0] = acc;\n"
    "}\n";

/* One busy command over `bytes` of the buffer: the fill, or the reader
 * when it was built. */
static cl_int busy_enqueue(cl_command_queue queue, cl_mem buffer,
                           size_t bytes, cl_event *event)
{
    const cl_uint zero = 0;
    if (!g_busy.reader)
        return clEnqueueFillBuffer(queue, buffer, &zero, sizeof zero, 0,
                                   bytes, 0, NULL, event);
    const cl_ulong n = bytes / 16;
    cl_int err = clSetKernelArg(g_busy.reader, 0, sizeof buffer, &buffer);
    err |= clSetKernelArg(g_busy.reader, 1, sizeof n, &n);
    err |= clSetKernelArg(g_busy.reader, 2, sizeof g_busy.sink, &g_busy.sink);
    if (err != CL_SUCCESS)
        return err;
    const size_t global = BUSY_READ_ITEMS;
    return clEnqueueNDRangeKernel(queue, g_busy.reader, 1, NULL, &global,
                                  NULL, 0, NULL, event);
}

/* Device time of one busy command over `bytes`, in microseconds (-1 on
 * failure). */
static double fill_us(cl_command_queue queue, cl_mem buffer, size_t bytes)
{
    cl_event event = NULL;
    if (busy_enqueue(queue, buffer, bytes, &event) != CL_SUCCESS)
        return -1;
    clWaitForEvents(1, &event);
    const double ms = timing_event_ms(event);
    clReleaseEvent(event);
    return ms > 0 ? ms * 1e3 : -1;
}

/* The reader kernel of --busy-kind read; false when it cannot be built
 * (the fill is used then, and the header says which ran). */
static bool busy_reader_build(flashcl_context *ctx)
{
    cl_context context = flashcl_context_cl_context(ctx);
    cl_device_id device = flashcl_context_device(ctx);
    const char *text = busy_read_source;
    cl_int err = CL_SUCCESS;
    cl_program program =
        clCreateProgramWithSource(context, 1, &text, NULL, &err);
    if (err != CL_SUCCESS)
        return false;
    cl_kernel kernel = NULL;
    cl_mem sink = NULL;
    if (clBuildProgram(program, 1, &device, "", NULL, NULL) == CL_SUCCESS)
        kernel = clCreateKernel(program, "busy_read", &err);
    if (kernel)
        sink = clCreateBuffer(context, CL_MEM_READ_WRITE, sizeof(cl_uint),
                              NULL, &err);
    if (!kernel || !sink) {
        if (kernel)
            clReleaseKernel(kernel);
        clReleaseProgram(program);
        return false;
    }
    g_busy.program = program;
    g_busy.reader = kernel;
    g_busy.sink = sink;
    return true;
}

/* Sizes the busy command for `us` of device time: measured on 16 MiB,
 * scaled, within [64 KiB, a quarter of the largest allocation, 1 GiB].
 * None (bytes 0) when us <= 0 or the device will not do it. */
static void busy_prepare(flashcl_context *ctx, double us, bool read)
{
    if (g_busy.buffer || us <= 0)
        return;
    cl_device_id device = flashcl_context_device(ctx);
    cl_ulong max_alloc = 0;
    clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                    &max_alloc, NULL);
    size_t cap = (size_t)1 << 30;
    if (max_alloc / 4 < cap)
        cap = (size_t)(max_alloc / 4) / 16 * 16;
    const size_t probe = cap < ((size_t)16 << 20) ? cap : (size_t)16 << 20;
    cl_int err = CL_SUCCESS;
    cl_mem buffer = clCreateBuffer(flashcl_context_cl_context(ctx),
                                   CL_MEM_READ_WRITE, cap, NULL, &err);
    if (err != CL_SUCCESS || !buffer)
        return;
    cl_command_queue queue = flashcl_context_queue(ctx);
    const cl_uint zero = 0;
    if (read && (clEnqueueFillBuffer(queue, buffer, &zero, sizeof zero, 0,
                                     cap, 0, NULL, NULL) != CL_SUCCESS ||
                 !busy_reader_build(ctx))) {
        clReleaseMemObject(buffer);
        return;
    }
    fill_us(queue, buffer, probe); /* the first one pays for setup */
    const double t = fill_us(queue, buffer, probe);
    if (t <= 0) {
        clReleaseMemObject(buffer);
        return;
    }
    double bytes = (double)probe * us / t;
    if (bytes > (double)cap)
        bytes = (double)cap;
    if (bytes < 65536.0)
        bytes = 65536.0;
    g_busy.buffer = buffer;
    g_busy.bytes = (size_t)bytes / 16 * 16;
}

static void busy_release(void)
{
    if (g_busy.buffer)
        clReleaseMemObject(g_busy.buffer);
    if (g_busy.sink)
        clReleaseMemObject(g_busy.sink);
    if (g_busy.reader)
        clReleaseKernel(g_busy.reader);
    if (g_busy.program)
        clReleaseProgram(g_busy.program);
    memset(&g_busy, 0, sizeof g_busy);
}

/* What went before each timed call's marker, for the headers. */
static const char *busy_what(void)
{
    return g_busy.reader ? "read" : "fill";
}

typedef struct timed_call {
    flashcl_context *ctx;
    const flashcl_attention_desc *desc;
    /* Set: the backward is timed instead, its outputs poisoned (NaN)
     * before each call's marker, outside the timed interval. */
    const flashcl_backward_desc *bwd;
    /* With bwd: the forward is enqueued first, in the same interval. */
    int with_forward;
    flashcl_status status;
    /* The call's last command alone (its start to its end), per call:
     * with split-KV, the merge kernel, or the attention kernel when it
     * merges its own parts. The samples of the last `reps` calls are the
     * timed ones. */
    double last_ms[TIMING_MAX_REPS];
    int calls;
} timed_call;

/* All-ones bytes: a NaN in every dtype, so an element the backward
 * forgets cannot pass --check. */
static cl_int poison_gradients(cl_command_queue queue,
                               const flashcl_backward_desc *bwd)
{
    const cl_mem outs[3] = {bwd->d_q.buffer, bwd->d_k.buffer, bwd->d_v.buffer};
    const cl_uchar nan_bytes = 0xff;
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 3 && err == CL_SUCCESS; ++i) {
        size_t bytes = 0;
        err = clGetMemObjectInfo(outs[i], CL_MEM_SIZE, sizeof bytes, &bytes,
                                 NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueFillBuffer(queue, outs[i], &nan_bytes, 1, 0, bytes,
                                      0, NULL, NULL);
    }
    return err;
}

static int one_event_call(void *arg, double *ms)
{
    timed_call *t = arg;
    cl_command_queue queue = flashcl_context_queue(t->ctx);
    cl_event before = NULL, event = NULL;
    if (g_busy.bytes &&
        busy_enqueue(queue, g_busy.buffer, g_busy.bytes, NULL) != CL_SUCCESS)
        return 1;
    if (t->bwd && poison_gradients(queue, t->bwd) != CL_SUCCESS)
        return 1;
    if (clEnqueueMarkerWithWaitList(queue, 0, NULL, &before) != CL_SUCCESS)
        return 1;
    if (t->bwd && t->with_forward &&
        flashcl_attention_forward(t->ctx, NULL, t->desc, 0, NULL, NULL) !=
            FLASHCL_SUCCESS) {
        clReleaseEvent(before);
        return 1;
    }
    t->status = t->bwd ? flashcl_attention_backward(t->ctx, NULL, t->desc,
                                                    t->bwd, 0, NULL, &event)
                       : flashcl_attention_forward(t->ctx, NULL, t->desc, 0,
                                                   NULL, &event);
    if (t->status != FLASHCL_SUCCESS) {
        clReleaseEvent(before);
        return 1;
    }
    clWaitForEvents(1, &event);
    *ms = timing_interval_ms(before, event);
    t->last_ms[t->calls++ % TIMING_MAX_REPS] = timing_event_ms(event);
    clReleaseEvent(before);
    clReleaseEvent(event);
    return *ms < 0 ? 1 : 0;
}

/* The descriptor and device buffers of one point; -1 when allocation
 * failed or the variant is unknown (window: -1 none, else the width). */
static int setup_shape(flashcl_context *ctx, const bench_options *opt,
                       const char *variant, int dtype, int head_dim,
                       int causal, int seqlen, flashcl_attention_desc *desc,
                       cl_mem extra[4], long *window)
{
    variant_spec spec;
    const int known = parse_variant(variant, &spec) == 0;
    const long heads = opt->hidden / head_dim;
    const long heads_kv = heads / spec.gqa > 0 ? heads / spec.gqa : 1;
    const long dv = spec.dv ? spec.dv : head_dim;
    const long batch = opt->tokens / seqlen > 0 ? opt->tokens / seqlen : 1;
    const size_t rows = (size_t)batch * (size_t)seqlen;
    cl_context context = flashcl_context_cl_context(ctx);
    unsigned seed = 12345u + (unsigned)seqlen;
    flashcl_attention_desc_init(desc);
    desc->batch = batch;
    desc->heads_q = heads;
    desc->heads_kv = heads_kv;
    desc->seqlen_q = desc->seqlen_k = seqlen;
    desc->head_dim = head_dim;
    desc->head_dim_v = dv;
    desc->dtype = (flashcl_dtype)dtype;
    desc->causal = causal;
    /* Profiling events time the fused kernel; the reference path (several
     * kernels and CLBlast calls) is timed by `flashcl bench`. */
    desc->backend = FLASHCL_BACKEND_FUSED;
    *window = spec.window;
    if (known) {
        desc->q.buffer = pooled_buffer(
            0, context, rows * (size_t)(heads * head_dim), dtype, &seed);
        desc->k.buffer = pooled_buffer(
            1, context, rows * (size_t)(heads_kv * head_dim), dtype, &seed);
        desc->v.buffer = pooled_buffer(
            2, context, rows * (size_t)(heads_kv * dv), dtype, &seed);
        desc->o.buffer = pooled_buffer(
            3, context, rows * (size_t)(heads * dv), dtype, &seed);
    }
    if (known && desc->q.buffer && desc->k.buffer && desc->v.buffer &&
        desc->o.buffer && apply_variant(&spec, desc, context, extra) == 0)
        return 0;
    const size_t count = rows * (size_t)(heads * head_dim);
    fprintf(stderr,
            "flashcl-bench: allocation failed or unknown variant \"%s\" "
            "(%zu elements)\n",
            variant, count);
    return -1;
}

static void release_shape(flashcl_attention_desc *desc, cl_mem extra[4])
{
    cl_mem all[8] = {desc->q.buffer, desc->k.buffer, desc->v.buffer,
                     desc->o.buffer, extra[0], extra[1], extra[2], extra[3]};
    for (int i = 0; i < 8; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
}

/* First call (compile + run, host clock), then warm-up and timed calls. */
static int time_shape(flashcl_context *ctx, const bench_options *opt,
                      const flashcl_attention_desc *desc, bench_row *row,
                      timing_result *time)
{
    cl_command_queue queue = flashcl_context_queue(ctx);
    const double start = timing_host_ms();
    static timed_call call; /* its samples are too large for the stack */
    call = (timed_call){.ctx = ctx, .desc = desc, .status = FLASHCL_SUCCESS};
    call.status = flashcl_attention_forward(ctx, queue, desc, 0, NULL, NULL);
    clFinish(queue);
    row->first_call_ms = timing_host_ms() - start;
    if (call.status == FLASHCL_SUCCESS &&
        timing_repeat(opt->warmup, opt->reps, one_event_call, &call, time) ==
            0) {
        const int n = call.calls < opt->reps ? call.calls : opt->reps;
        double last[TIMING_MAX_REPS];
        for (int i = 0; i < n; ++i)
            last[i] = call.last_ms[(call.calls - n + i) % TIMING_MAX_REPS];
        row->last_kernel_ms = n > 0 ? timing_median(last, n) : -1;
        return 0;
    }
    fprintf(stderr, "flashcl-bench: %s: %s\n",
            flashcl_status_string(call.status),
            call.status == FLASHCL_SUCCESS ? "no profiling information"
                                           : flashcl_context_last_error(ctx));
    return -1;
}

static void fill_row(const char *variant,
                     const flashcl_attention_desc *d, long window,
                     const timing_result *time, bench_row *row)
{
    const int seqlen = (int)d->seqlen_q;
    const size_t count = (size_t)d->batch * (size_t)d->heads_q *
                         (size_t)seqlen * (size_t)d->head_dim;
    /* The paper's convention (N^2, halved for causal) for plain rows; the
     * visible pairs for windows, whose point is to skip the rest. */
    double pairs = window >= 0 ? visible_pairs(seqlen, d->causal, window)
                               : (double)seqlen * seqlen *
                                     (d->causal ? 0.5 : 1.0);
    const double dv = d->head_dim_v ? (double)d->head_dim_v : (double)d->head_dim;
    double flops = 2.0 * (double)d->batch * (double)d->heads_q * pairs *
                   ((double)d->head_dim + dv);
    row->variant = variant;
    row->dtype = dtype_name(d->dtype);
    row->head_dim = (int)d->head_dim;
    row->causal = d->causal;
    row->seqlen = seqlen;
    row->batch = (int)d->batch;
    row->heads = (int)d->heads_q;
    row->median_ms = time->median_ms;
    row->min_ms = time->min_ms;
    row->tflops = flops / (row->median_ms * 1e-3) / 1e12;
    row->gbps = 4.0 * (double)count * (double)oracle_dtype_size(d->dtype) /
                (row->median_ms * 1e-3) / 1e9;
}

/* What the row ran on: path, tiles and the tuning entry behind them
 * (bench/tuned_vs_table.py reads these lines). */
static void print_describe(flashcl_context *ctx,
                           const flashcl_attention_desc *desc,
                           const char *variant, int dtype, int head_dim,
                           int causal, int seqlen)
{
    flashcl_variant_info v;
    if (flashcl_describe_variant(ctx, desc, &v) != FLASHCL_SUCCESS) {
        printf("describe| %s | %s | %d | %d | %d | ? | %s\n", variant,
               dtype_name(dtype), head_dim, causal, seqlen,
               flashcl_context_last_error(ctx));
        return;
    }
    printf("describe| %s | %s | %d | %d | %d | %s %dx%d wg %d vec %d "
           "splits %d | %s\n", variant, dtype_name(dtype), head_dim, causal,
           seqlen, v.path, v.block_m, v.block_n, v.work_group_size,
           v.vector_width, v.num_splits,
           v.tuning[0] ? v.tuning : "no database entry: the path's table");
}

/* ---- --backward ------------------------------------------------------ */

/* LSE, dO and the three gradients: the forward writes LSE for the
 * backward to read, and dO is random like the inputs. */
typedef struct backward_setup {
    flashcl_backward_desc bwd;
    cl_mem lse;
} backward_setup;

static int setup_backward(flashcl_context *ctx, flashcl_attention_desc *desc,
                          backward_setup *s)
{
    cl_context context = flashcl_context_cl_context(ctx);
    const size_t rows = (size_t)desc->batch * (size_t)desc->seqlen_q,
                 rows_k = (size_t)desc->batch * (size_t)desc->seqlen_k,
                 elem = oracle_dtype_size(desc->dtype);
    const size_t dv = (size_t)out_dim(desc), d = (size_t)desc->head_dim;
    unsigned seed = 777u;
    cl_int err = CL_SUCCESS;
    flashcl_backward_desc_init(&s->bwd);
    s->lse = clCreateBuffer(context, CL_MEM_READ_WRITE,
                            rows * (size_t)desc->heads_q * sizeof(float), NULL,
                            &err);
    s->bwd.d_o.buffer = random_buffer(
        context, rows * (size_t)desc->heads_q * dv, desc->dtype, &seed);
    s->bwd.d_q.buffer = clCreateBuffer(
        context, CL_MEM_READ_WRITE, rows * (size_t)desc->heads_q * d * elem,
        NULL, &err);
    s->bwd.d_k.buffer = clCreateBuffer(
        context, CL_MEM_READ_WRITE, rows_k * (size_t)desc->heads_kv * d * elem,
        NULL, &err);
    s->bwd.d_v.buffer = clCreateBuffer(
        context, CL_MEM_READ_WRITE, rows_k * (size_t)desc->heads_kv * dv * elem,
        NULL, &err);
    desc->lse.buffer = s->lse;
    if (s->lse && s->bwd.d_o.buffer && s->bwd.d_q.buffer &&
        s->bwd.d_k.buffer && s->bwd.d_v.buffer)
        return 0;
    fprintf(stderr, "flashcl-bench: --backward: allocation failed\n");
    return -1;
}

static void release_backward(backward_setup *s)
{
    cl_mem all[5] = {s->lse, s->bwd.d_o.buffer, s->bwd.d_q.buffer,
                     s->bwd.d_k.buffer, s->bwd.d_v.buffer};
    for (int i = 0; i < 5; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
}

/* The backward after the forward has written O and LSE: one untimed call
 * (the compile), then warm-up and timed calls as the forward's. */
static int time_backward(flashcl_context *ctx, const bench_options *opt,
                         const flashcl_attention_desc *desc,
                         const flashcl_backward_desc *bwd, bench_row *row)
{
    static timed_call call; /* its samples are too large for the stack */
    call = (timed_call){.ctx = ctx, .desc = desc, .bwd = bwd};
    timing_result time;
    call.status = flashcl_attention_backward(ctx, NULL, desc, bwd, 0, NULL,
                                             NULL);
    clFinish(flashcl_context_queue(ctx));
    if (call.status == FLASHCL_SUCCESS &&
        timing_repeat(opt->warmup, opt->reps, one_event_call, &call, &time) ==
            0) {
        row->bwd_median_ms = time.median_ms;
        /* FlashAttention's convention (its benchmark_flash_attention.py):
         * the backward counts 2.5 x the forward's FLOPs. */
        row->bwd_tflops = row->tflops * 2.5 * row->median_ms / time.median_ms;
        row->bwd_ratio = time.median_ms / row->median_ms;
        call.with_forward = 1;
        call.calls = 0;
        if (timing_repeat(opt->warmup, opt->reps, one_event_call, &call,
                          &time) != 0)
            return -1;
        row->fwdbwd_median_ms = time.median_ms;
        row->fwdbwd_tflops =
            row->tflops * 3.5 * row->median_ms / time.median_ms;
        return 0;
    }
    fprintf(stderr, "flashcl-bench: backward: %s: %s\n",
            flashcl_status_string(call.status),
            call.status == FLASHCL_SUCCESS ? "no profiling information"
                                           : flashcl_context_last_error(ctx));
    return -1;
}

/* Relative L2 error of sampled rows r of one gradient: device BNHD
 * (heads `h`) against the oracle's packed BHND doubles. */
static double grad_rows_error(const void *got, const double *want,
                              flashcl_dtype dtype, long batch, long heads,
                              long n, long dim, int rows)
{
    double err2 = 0, ref2 = 0;
    unsigned seed = 4321u;
    for (int r = 0; r < rows; ++r) {
        seed = seed * 1664525u + 1013904223u;
        const long b = (long)(seed >> 8) % batch;
        seed = seed * 1664525u + 1013904223u;
        const long h = (long)(seed >> 8) % heads;
        seed = seed * 1664525u + 1013904223u;
        const long i = r == 0 ? n - 1 : r == 1 ? 0 : (long)(seed >> 8) % n;
        for (long e = 0; e < dim; ++e) {
            const double g = oracle_load(
                got, (size_t)(((b * n + i) * heads + h) * dim + e), dtype);
            const double w = want[((b * heads + h) * n + i) * dim + e];
            err2 += (g - w) * (g - w);
            ref2 += w * w;
        }
    }
    return isfinite(err2) ? sqrt(err2 / (ref2 > 0 ? ref2 : 1)) : INFINITY;
}

/* dO of the device (BNHD) as the oracle's packed BHND doubles. */
static double *oracle_d_o(const void *d_o, const flashcl_attention_desc *d)
{
    const long b_n = (long)d->batch, h_n = (long)d->heads_q,
               n = (long)d->seqlen_q, dim = out_dim(d);
    double *out = malloc((size_t)(b_n * h_n * n * dim) * sizeof *out);
    for (long b = 0; out && b < b_n; ++b)
        for (long h = 0; h < h_n; ++h)
            for (long i = 0; i < n; ++i)
                for (long e = 0; e < dim; ++e)
                    out[((b * h_n + h) * n + i) * dim + e] = oracle_load(
                        d_o, (size_t)(((b * n + i) * h_n + h) * dim + e),
                        d->dtype);
    return out;
}

/* --check with --backward: the float64 oracle's whole gradients (so keep
 * the shape small), compared on `rows` sampled rows of dQ, dK and dV. */
static void check_backward(cl_command_queue queue,
                           const flashcl_attention_desc *d,
                           const flashcl_backward_desc *bwd, int rows,
                           double err[3])
{
    enum { TENSORS = 11 };
    void *host[TENSORS];
    const cl_mem bufs[TENSORS] = {
        d->q.buffer,          d->k.buffer,         d->v.buffer,
        bwd->d_o.buffer,      d->alibi_slopes.buffer, d->bias.buffer,
        d->mask.buffer,       d->sinks.buffer,     bwd->d_q.buffer,
        bwd->d_k.buffer,      bwd->d_v.buffer};
    int ok = 1;
    for (int i = 0; i < TENSORS; ++i)
        ok = read_tensor(queue, bufs[i], &host[i]) && ok;
    const oracle_inputs in = {.q = host[0], .k = host[1], .v = host[2],
                              .alibi_slopes = host[4], .bias = host[5],
                              .mask = host[6], .sinks = host[7]};
    oracle_problem p;
    char why[256];
    err[0] = err[1] = err[2] = -1;
    ok = ok && oracle_problem_from_desc(d, &in, &p, why, sizeof why) == 0;
    const size_t nq = p.batch * p.heads_q * p.seqlen_q,
                 nk = p.batch * p.heads_kv * p.seqlen_k;
    double *d_o = ok ? oracle_d_o(host[3], d) : NULL;
    oracle_grads g = {malloc(nq * p.head_dim * sizeof(double)),
                      malloc(nk * p.head_dim * sizeof(double)),
                      malloc(nk * p.head_dim_v * sizeof(double)), NULL};
    if (d_o && g.dq && g.dk && g.dv &&
        oracle_backward(&p, d_o, FLASHCL_DTYPE_FP64, &g) == 0) {
        const long b = (long)p.batch, hq = (long)p.heads_q,
                   hk = (long)p.heads_kv;
        err[0] = grad_rows_error(host[8], g.dq, d->dtype, b, hq,
                                 (long)p.seqlen_q, (long)p.head_dim, rows);
        err[1] = grad_rows_error(host[9], g.dk, d->dtype, b, hk,
                                 (long)p.seqlen_k, (long)p.head_dim, rows);
        err[2] = grad_rows_error(host[10], g.dv, d->dtype, b, hk,
                                 (long)p.seqlen_k, (long)p.head_dim_v, rows);
    }
    free(d_o);
    free(g.dq);
    free(g.dk);
    free(g.dv);
    for (int i = 0; i < TENSORS; ++i)
        free(host[i]);
}

/* The backward half of a row: timing, then --check's gradient line. */
static int run_backward(flashcl_context *ctx, const bench_options *opt,
                        const flashcl_attention_desc *desc,
                        const backward_setup *s, bench_row *row)
{
    if (time_backward(ctx, opt, desc, &s->bwd, row) != 0)
        return -1;
    /* The oracle computes every gradient in scalar float64 on the host:
     * B H N^2 D of 2^31 (B 1 H 8 N 2048 D 64) took about 30 s on the
     * 2-core CPU machine, so the cap of 2^33 about 2 minutes; a GPU row
     * of the FA2 protocol (2^37 and more) would take hours. */
    const double oracle_work = (double)desc->batch * (double)desc->heads_q *
                               (double)desc->seqlen_q *
                               (double)desc->seqlen_k * (double)desc->head_dim;
    if (opt->check_rows > 0 && oracle_work > 8589934592.0)
        printf("check-bwd| %s | %s | %d | %d | %d | skipped: B H N^2 D "
               "%.3g over 2^33, too large for the float64 oracle\n",
               row->variant, row->dtype, row->head_dim, row->causal,
               row->seqlen, oracle_work);
    else if (opt->check_rows > 0) {
        double err[3];
        check_backward(flashcl_context_queue(ctx), desc, &s->bwd,
                       opt->check_rows, err);
        printf("check-bwd| %s | %s | %d | %d | %d | dq %.3e | dk %.3e | "
               "dv %.3e | rows %d\n",
               row->variant, row->dtype, row->head_dim, row->causal,
               row->seqlen, err[0], err[1], err[2], opt->check_rows);
    }
    return 0;
}

static int run_shape(flashcl_context *ctx, const bench_options *opt,
                     const char *variant, int dtype, int head_dim, int causal,
                     int seqlen, bench_row *row)
{
    flashcl_attention_desc desc;
    cl_mem extra[4] = {NULL, NULL, NULL, NULL};
    long window = -1;
    timing_result time;
    backward_setup bwd = {{0}, NULL};
    int failed = setup_shape(ctx, opt, variant, dtype, head_dim, causal,
                             seqlen, &desc, extra, &window) != 0 ||
                 (opt->backward && setup_backward(ctx, &desc, &bwd) != 0) ||
                 time_shape(ctx, opt, &desc, row, &time) != 0;
    if (!failed)
        fill_row(variant, &desc, window, &time, row);
    if (!failed && opt->check_rows > 0) {
        double err = check_rows(flashcl_context_queue(ctx), &desc,
                                opt->check_rows);
        printf("check| %s | %s | %d | %d | %d | rel_l2 %.3e | rows %d\n",
               variant, dtype_name(dtype), head_dim, causal, seqlen, err,
               opt->check_rows);
    }
    if (!failed && opt->backward)
        failed = run_backward(ctx, opt, &desc, &bwd, row) != 0;
    if (!failed && opt->describe)
        print_describe(ctx, &desc, variant, dtype, head_dim, causal, seqlen);
    release_backward(&bwd);
    release_shape(&desc, extra);
    return failed ? -1 : 0;
}

typedef struct sgemm_call {
    cl_command_queue queue;
    cl_mem a, b, c;
    size_t n;
    CLBlastStatusCode status;
} sgemm_call;

/* Host clock around clFinish: CLBlast's own event covers only its last
 * internal kernel. */
static int one_sgemm(void *arg, double *ms)
{
    sgemm_call *g = arg;
    const double start = timing_host_ms();
    g->status = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                             CLBlastTransposeNo, g->n, g->n, g->n, 1.0f, g->a,
                             0, g->n, g->b, 0, g->n, 0.0f, g->c, 0, g->n,
                             &g->queue, NULL);
    clFinish(g->queue);
    *ms = timing_host_ms() - start;
    return g->status == CLBlastSuccess ? 0 : 1;
}

/* CLBlast SGEMM NxNxN on the same queue, median of `reps` after one
 * warm-up. */
static double sgemm_gflops(flashcl_context *ctx, int n, int reps)
{
    cl_context context = flashcl_context_cl_context(ctx);
    size_t count = (size_t)n * (size_t)n;
    unsigned seed = 7;
    sgemm_call g = {flashcl_context_queue(ctx),
                    random_buffer(context, count, FLASHCL_DTYPE_FP32, &seed),
                    random_buffer(context, count, FLASHCL_DTYPE_FP32, &seed),
                    random_buffer(context, count, FLASHCL_DTYPE_FP32, &seed),
                    (size_t)n, CLBlastSuccess};
    double result = -1;
    timing_result time;
    if (g.a && g.b && g.c) {
        if (timing_repeat(1, reps, one_sgemm, &g, &time) == 0)
            result = 2.0 * n * (double)n * n / (time.median_ms * 1e-3) / 1e9;
        else
            fprintf(stderr, "flashcl-bench: CLBlastSgemm failed: %d\n",
                    (int)g.status);
    }
    cl_mem all[3] = {g.a, g.b, g.c};
    for (int i = 0; i < 3; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
    return result;
}

/* --backward appends its columns after the old ones, so readers of the
 * forward's CSV (bench/summarize.py) still find theirs. */
static void print_row(FILE *csv, const bench_row *r, int backward)
{
    printf("| %-10s | %-4s | %3d | %-6s | %5d | %3d | %3d | %10.3f | %10.3f | "
           "%9.4f | %8.2f | %9.1f |",
           r->variant, r->dtype, r->head_dim, r->causal ? "yes" : "no",
           r->seqlen, r->batch, r->heads, r->median_ms, r->min_ms, r->tflops,
           r->tflops * 1e3, r->gbps);
    if (backward)
        printf(" %10.3f | %9.4f | %6.2f | %10.3f | %9.4f |", r->bwd_median_ms,
               r->bwd_tflops, r->bwd_ratio, r->fwdbwd_median_ms,
               r->fwdbwd_tflops);
    printf("\n");
    fflush(stdout);
    if (!csv)
        return;
    fprintf(csv, "%s,%s,%d,%d,%d,%d,%d,%.4f,%.4f,%.4f,%.6f,%.3f",
            r->variant, r->dtype, r->head_dim, r->causal, r->seqlen, r->batch,
            r->heads, r->first_call_ms, r->median_ms, r->min_ms, r->tflops,
            r->gbps);
    if (backward)
        fprintf(csv, ",%.4f,%.6f,%.4f,%.4f,%.6f", r->bwd_median_ms,
                r->bwd_tflops, r->bwd_ratio, r->fwdbwd_median_ms,
                r->fwdbwd_tflops);
    fprintf(csv, "\n");
}

/* A table of rows as they are measured; the first-call times after it. */
typedef struct row_log {
    bench_row rows[4 * 8 * MAX_LIST * MAX_LIST];
    int count, failures;
} row_log;

static void sweep(flashcl_context *ctx, const bench_options *opt, FILE *csv,
                  row_log *log)
{
    for (int t = 0; t < opt->num_dtypes; ++t)
        for (int h = 0; h < opt->num_head_dims; ++h)
            for (int c = 0; c < opt->num_causal; ++c)
                for (int s = 0; s < opt->num_seqlens; ++s)
                    for (int w = 0; w < opt->num_variants; ++w) {
                        bench_row row = {0};
                        if (run_shape(ctx, opt, opt->variants[w],
                                      opt->dtypes[t], opt->head_dims[h],
                                      opt->causal_modes[c], opt->seqlens[s],
                                      &row) != 0) {
                            ++log->failures;
                            continue;
                        }
                        print_row(csv, &row, opt->backward);
                        if (log->count < (int)(sizeof log->rows /
                                               sizeof log->rows[0]))
                            log->rows[log->count++] = row;
                    }
}

static void print_first_calls(const row_log *log)
{
    printf("\nfirst call (kernel compile + first run), host clock:\n");
    for (int i = 0; i < log->count; ++i) {
        const bench_row *r = &log->rows[i];
        printf("  %s %s D=%d causal=%d N=%d: %.1f ms\n", r->variant, r->dtype,
               r->head_dim, r->causal, r->seqlen, r->first_call_ms);
    }
}

static void print_peer(flashcl_context *ctx, const bench_options *opt,
                       FILE *csv)
{
    if (opt->sgemm_n <= 0)
        return;
    double gflops = sgemm_gflops(ctx, opt->sgemm_n, 3);
    printf("\npeer, same run: CLBlast SGEMM %dx%dx%d: %.2f GFLOP/s "
           "(median of 3, host clock around clFinish)\n",
           opt->sgemm_n, opt->sgemm_n, opt->sgemm_n, gflops);
    if (csv)
        fprintf(csv, "# clblast_sgemm_%d_gflops,%.3f\n", opt->sgemm_n, gflops);
}

static void print_header(flashcl_context *ctx, bench_options *opt)
{
    cl_device_id device = flashcl_context_device(ctx);
    char name[256] = "", driver[128] = "";
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(device, CL_DRIVER_VERSION, sizeof driver, driver, NULL);
    apply_defaults(ctx, opt);
    printf("flashcl %s on %s (driver %s); median of %d runs after %d "
           "warm-up, OpenCL profiling events (%zu-byte %s before each "
           "call's marker)\n\n",
           flashcl_version_string(), name, driver, opt->reps, opt->warmup,
           g_busy.bytes, busy_what());
    printf("| variant | dtype | D | causal | N | B | H | median ms | min ms | "
           "TFLOP/s | GFLOP/s | GB/s |%s\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|%s\n",
           opt->backward ? " bwd median ms | bwd TFLOP/s | bwd/fwd | "
                           "fwd+bwd median ms | fwd+bwd TFLOP/s |"
                         : "",
           opt->backward ? "---|---|---|---|---|" : "");
}

/* ---- decode (issue 11) ---------------------------------------------- */

typedef struct decode_setup {
    flashcl_attention_desc desc;
    cl_mem lens, table;
    cl_mem quant[6]; /* --kv-dtype: K, V bytes, their scales and zeros */
    cl_mem dtype_k, dtype_v; /* K and V in the dtype (the peer's cache) */
    double kv_bytes, total_bytes;
} decode_setup;

/* Random codes of a quantized type (fp8: small exponents, never NaN). */
static cl_mem random_codes(cl_context context, size_t bytes, int type,
                           unsigned *seed)
{
    unsigned char *host = malloc(bytes ? bytes : 1);
    if (!host)
        return NULL;
    for (size_t i = 0; i < bytes; ++i) {
        *seed = *seed * 1664525u + 1013904223u;
        const unsigned byte = *seed >> 24;
        host[i] = (unsigned char)(type == FLASHCL_KV_FP8_E4M3 ||
                                          type == FLASHCL_KV_FP8_E5M2
                                      ? (byte & 0xbfu)
                                      : byte);
    }
    cl_mem buffer = host_copy_buffer(context, CL_MEM_READ_WRITE, host, bytes);
    free(host);
    return buffer;
}

static cl_mem filled_floats(cl_context context, size_t count, float value)
{
    float *host = malloc((count ? count : 1) * sizeof *host);
    if (!host)
        return NULL;
    for (size_t i = 0; i < count; ++i)
        host[i] = value;
    cl_mem buffer = host_copy_buffer(context, CL_MEM_READ_ONLY, host,
                                     count * sizeof *host);
    free(host);
    return buffer;
}

/* --kv-dtype: the cache's K and V as `type` codes with their scales;
 * the bytes a call reads go to s->kv_bytes. */
static int quantize_decode(cl_context context, int type, size_t rows,
                           long hkv, int d, decode_setup *s, unsigned *seed)
{
    flashcl_attention_desc *desc = &s->desc;
    const size_t row_bytes = kvq_row_bytes(type, (size_t)d);
    const size_t per_row = kvq_row_scales(type, (size_t)d);
    const size_t scales = per_row ? rows * per_row : (size_t)hkv;
    s->quant[0] = desc->k.buffer = random_codes(context, rows * row_bytes,
                                                type, seed);
    s->quant[1] = desc->v.buffer = random_codes(context, rows * row_bytes,
                                                type, seed);
    s->quant[2] = desc->k_scale.buffer = filled_floats(context, scales, 0.02f);
    s->quant[3] = desc->v_scale.buffer = filled_floats(context, scales, 0.02f);
    if (type == FLASHCL_KV_INT4) {
        s->quant[4] = desc->k_zero.buffer = filled_floats(context, scales, 8);
        s->quant[5] = desc->v_zero.buffer = filled_floats(context, scales, 8);
    }
    desc->k_storage = desc->v_storage = (flashcl_kv_storage)type;
    desc->k_scale_per_head = desc->v_scale_per_head = per_row == 0;
    s->kv_bytes = 2.0 * (double)(rows * row_bytes + (per_row ? scales : 0) *
                                                        (type == 4 ? 8 : 4));
    for (int i = 0; i < (type == FLASHCL_KV_INT4 ? 6 : 4); ++i)
        if (!s->quant[i])
            return -1;
    return 0;
}

static cl_mem int_buffer(cl_context context, const int *values, size_t count)
{
    return host_copy_buffer(context, CL_MEM_READ_ONLY, values,
                            count * sizeof(int));
}

/* A KV cache of nk keys for every sequence (paged: pages in order). */
static int setup_decode(flashcl_context *ctx, const bench_options *opt,
                        const long shape[4], decode_setup *s)
{
    const int dtype = opt->dtypes[0], d = opt->head_dims[0];
    const long b = shape[0], hq = shape[1], hkv = shape[2], nk = shape[3];
    const int nq = opt->decode_nq > 0 ? opt->decode_nq : 1;
    const int page = opt->decode_page;
    const long pages = page > 0 ? (nk + page - 1) / page : 0;
    const long cap = page > 0 ? pages * page : nk;
    cl_context context = flashcl_context_cl_context(ctx);
    unsigned seed = 777u;
    flashcl_attention_desc *desc = &s->desc;
    flashcl_attention_desc_init(desc);
    desc->batch = b;
    desc->heads_q = hq;
    desc->heads_kv = hkv;
    desc->seqlen_q = nq;
    desc->seqlen_k = cap;
    desc->head_dim = d;
    desc->dtype = (flashcl_dtype)dtype;
    desc->causal = nq > 1;
    desc->backend = FLASHCL_BACKEND_FUSED;
    desc->num_splits = opt->decode_splits;
    desc->layout = opt->decode_bhnd ? FLASHCL_LAYOUT_BHND : FLASHCL_LAYOUT_BNHD;
    const size_t q_count = (size_t)(b * nq * hq * d);
    const size_t kv_count = (size_t)(b * cap * hkv * d);
    desc->q.buffer = random_buffer(context, q_count, dtype, &seed);
    desc->o.buffer = random_buffer(context, q_count, dtype, &seed);
    desc->k.buffer = random_buffer(context, kv_count, dtype, &seed);
    desc->v.buffer = random_buffer(context, kv_count, dtype, &seed);
    const double elem = dtype == FLASHCL_DTYPE_FP32 ? 4 : 2;
    s->kv_bytes = 2.0 * (double)b * (double)hkv * (double)nk * d * elem;
    memset(s->quant, 0, sizeof s->quant);
    s->dtype_k = desc->k.buffer;
    s->dtype_v = desc->v.buffer;
    if (opt->decode_kv &&
        quantize_decode(context, opt->decode_kv, (size_t)(b * cap * hkv), hkv,
                        d, s, &seed) != 0)
        return -1;
    int *host = malloc((size_t)(b * (pages > 0 ? pages : 1)) * sizeof(int));
    for (long i = 0; i < b; ++i)
        host[i] = (int)nk;
    s->lens = int_buffer(context, host, (size_t)b);
    if (!opt->decode_dense)
        desc->cache_seqlens.buffer = s->lens;
    s->table = NULL;
    if (page > 0) {
        for (long i = 0; i < b * pages; ++i)
            host[i] = (int)i;
        s->table = int_buffer(context, host, (size_t)(b * pages));
        desc->block_table.buffer = s->table;
        desc->page_size = page;
        desc->max_pages = pages;
        desc->kv_batch = b * pages;
    }
    free(host);
    s->total_bytes = s->kv_bytes + 2.0 * (double)q_count * elem;
    return desc->q.buffer && desc->o.buffer && desc->k.buffer &&
                   desc->v.buffer && s->lens && (page == 0 || s->table)
               ? 0
               : -1;
}

static void release_decode(decode_setup *s)
{
    cl_mem all[6] = {s->desc.q.buffer, s->dtype_k, s->dtype_v,
                     s->desc.o.buffer, s->lens, s->table};
    for (int i = 0; i < 6; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
    for (int i = 0; i < 6; ++i)
        if (s->quant[i])
            clReleaseMemObject(s->quant[i]);
}

/* One decode row: the chosen splits, and the unsplit call as the peer in
 * the same run. */
static int decode_row(flashcl_context *ctx, const bench_options *opt,
                      const long shape[4])
{
    decode_setup s;
    if (setup_decode(ctx, opt, shape, &s) != 0) {
        fprintf(stderr, "flashcl-bench: decode allocation failed\n");
        release_decode(&s);
        return -1;
    }
    flashcl_variant_info info;
    flashcl_status st = flashcl_describe_variant(ctx, &s.desc, &info);
    bench_row row = {0};
    timing_result split_time, peer_time;
    int failed = st != FLASHCL_SUCCESS ||
                 time_shape(ctx, opt, &s.desc, &row, &split_time) != 0;
    flashcl_attention_desc peer = s.desc;
    peer.num_splits = 1;
    if (opt->decode_kv) { /* the same call on the dtype's cache */
        flashcl_attention_desc plain = FLASHCL_ATTENTION_DESC_INIT;
        peer = s.desc;
        peer.k = plain.k, peer.v = plain.v;
        peer.k.buffer = s.dtype_k;
        peer.v.buffer = s.dtype_v;
        peer.k_storage = peer.v_storage = FLASHCL_KV_SAME;
        peer.k_scale_per_head = peer.v_scale_per_head = 0;
        peer.k_scale = peer.v_scale = peer.k_zero = peer.v_zero = plain.k;
    }
    bench_row peer_row = {0};
    failed = failed || time_shape(ctx, opt, &peer, &peer_row, &peer_time) != 0;
    if (!failed) {
        const double gbs = s.total_bytes / (split_time.median_ms * 1e6);
        const double kv_gbs = s.kv_bytes / (split_time.median_ms * 1e6);
        char fraction[32] = "-", kv_mode[32] = "cache";
        if (opt->decode_dense)
            snprintf(kv_mode, sizeof kv_mode, "dense");
        else if (opt->decode_page)
            snprintf(kv_mode, sizeof kv_mode, "paged %d", opt->decode_page);
        if (opt->decode_bhnd)
            strncat(kv_mode, " bhnd", sizeof kv_mode - strlen(kv_mode) - 1);
        if (opt->bandwidth_gbs > 0)
            snprintf(fraction, sizeof fraction, "%.3f",
                     gbs / opt->bandwidth_gbs);
        printf("| %ld | %ld | %ld | %ld | %d | %s | %s | %d | %.4f | %.4f | "
               "%.1f | %.1f | %s | %.4f | %.2fx | %.0f ms |\n",
               shape[0], shape[1], shape[2], shape[3],
               opt->decode_nq > 0 ? opt->decode_nq : 1,
               kv_mode, info.path, info.num_splits, split_time.median_ms,
               row.last_kernel_ms, kv_gbs, gbs, fraction,
               peer_time.median_ms, peer_time.median_ms / split_time.median_ms,
               row.first_call_ms);
    } else {
        fprintf(stderr, "flashcl-bench: decode %ld:%ld:%ld:%ld: %s\n",
                shape[0], shape[1], shape[2], shape[3],
                flashcl_context_last_error(ctx));
    }
    release_decode(&s);
    return failed ? -1 : 0;
}

static int decode_table(flashcl_context *ctx, bench_options *opt)
{
    apply_defaults(ctx, opt);
    printf("decode, %s, D = %d; GB/s counts K, V, Q and O once (KV GB/s: K "
           "and V only, with their scales); peer: the same call %s\n\n",
           dtype_name(opt->dtypes[0]), opt->head_dims[0],
           opt->decode_kv ? "on a cache of the dtype (K and V stored as "
                            "the dtype: \"unsplit ms\" is its time)"
                          : "with num_splits = 1");
    if (opt->decode_kv)
        printf("K and V stored as %s\n\n", kvq_type_name(opt->decode_kv));
    printf("| B | HQ | HKV | NK | Nq | KV | path | splits | median ms | "
           "last kernel ms | KV GB/s | GB/s | of --bandwidth | unsplit ms | speedup | first "
           "call |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int failures = 0;
    for (int i = 0; i < opt->num_decode; ++i)
        failures += decode_row(ctx, opt, opt->decode[i]) != 0;
    return failures;
}

/* ---- varlen (issue 11) ---------------------------------------------- */

/* Query-key pairs of one sequence of n rows attending its own n keys. */
static double sequence_pairs(int n, int causal)
{
    return causal ? 0.5 * (double)n * (double)(n + 1) : (double)n * n;
}

/* One varlen row: the packed batch, then the padded dense call of the
 * same sequences (every sequence padded to the longest). TFLOP/s of the
 * varlen call count useful pairs only; the dense call's, every pair it
 * computes, so that "varlen / dense" is the varlen call's rate against
 * the dense kernel's. */
static int varlen_row(flashcl_context *ctx, const bench_options *opt,
                      int causal)
{
    const int dtype = opt->dtypes[0], d = opt->head_dims[0];
    const int batch = opt->num_varlen;
    const long heads = opt->hidden / d > 0 ? opt->hidden / d : 1;
    int cu[MAX_LIST + 1], longest = 0;
    cu[0] = 0;
    double useful = 0;
    for (int i = 0; i < batch; ++i) {
        cu[i + 1] = cu[i] + opt->varlen[i];
        longest = opt->varlen[i] > longest ? opt->varlen[i] : longest;
        useful += sequence_pairs(opt->varlen[i], causal);
    }
    const double flop_per_pair = 4.0 * d * (double)heads;
    cl_context context = flashcl_context_cl_context(ctx);
    unsigned seed = 4242u;
    flashcl_attention_desc packed, padded;
    flashcl_attention_desc_init(&packed);
    packed.batch = batch;
    packed.heads_q = packed.heads_kv = heads;
    packed.seqlen_q = packed.seqlen_k = cu[batch];
    packed.head_dim = d;
    packed.dtype = (flashcl_dtype)dtype;
    packed.causal = causal;
    packed.backend = FLASHCL_BACKEND_FUSED;
    padded = packed;
    padded.seqlen_q = padded.seqlen_k = longest;
    const size_t packed_count = (size_t)cu[batch] * (size_t)(heads * d);
    const size_t padded_count =
        (size_t)batch * (size_t)longest * (size_t)(heads * d);
    cl_mem buffers[9] = {NULL};
    buffers[0] = packed.q.buffer = random_buffer(context, packed_count, dtype, &seed);
    buffers[1] = packed.k.buffer = random_buffer(context, packed_count, dtype, &seed);
    buffers[2] = packed.v.buffer = random_buffer(context, packed_count, dtype, &seed);
    buffers[3] = packed.o.buffer = random_buffer(context, packed_count, dtype, &seed);
    buffers[4] = int_buffer(context, cu, (size_t)batch + 1);
    packed.cu_seqlens_q.buffer = packed.cu_seqlens_k.buffer = buffers[4];
    packed.max_seqlen_q = packed.max_seqlen_k = longest;
    buffers[5] = padded.q.buffer = random_buffer(context, padded_count, dtype, &seed);
    buffers[6] = padded.k.buffer = random_buffer(context, padded_count, dtype, &seed);
    buffers[7] = padded.v.buffer = random_buffer(context, padded_count, dtype, &seed);
    buffers[8] = padded.o.buffer = random_buffer(context, padded_count, dtype, &seed);
    int failed = 0;
    for (int i = 0; i < 9; ++i)
        failed |= buffers[i] == NULL;
    flashcl_variant_info packed_info, padded_info;
    bench_row packed_row = {0}, padded_row = {0};
    timing_result packed_time, padded_time;
    failed = failed ||
             flashcl_describe_variant(ctx, &packed, &packed_info) !=
                 FLASHCL_SUCCESS ||
             flashcl_describe_variant(ctx, &padded, &padded_info) !=
                 FLASHCL_SUCCESS ||
             time_shape(ctx, opt, &packed, &packed_row, &packed_time) != 0 ||
             time_shape(ctx, opt, &padded, &padded_row, &padded_time) != 0;
    if (!failed) {
        const double packed_tf =
            useful * flop_per_pair / (packed_time.median_ms * 1e9);
        const double padded_tf = batch * sequence_pairs(longest, causal) *
                                 flop_per_pair /
                                 (padded_time.median_ms * 1e9);
        printf("| %d | %s | %d | %s | %.4f | %.1f | %s | %.4f | %.1f | "
               "%.2f | %.0f ms |\n",
               cu[batch], causal ? "yes" : "no", longest, packed_info.path,
               packed_time.median_ms, packed_tf, padded_info.path,
               padded_time.median_ms, padded_tf, packed_tf / padded_tf,
               packed_row.first_call_ms);
    } else {
        fprintf(stderr, "flashcl-bench: varlen: %s\n",
                flashcl_context_last_error(ctx));
    }
    for (int i = 0; i < 9; ++i)
        if (buffers[i])
            clReleaseMemObject(buffers[i]);
    return failed ? -1 : 0;
}

static int varlen_table(flashcl_context *ctx, bench_options *opt)
{
    apply_defaults(ctx, opt);
    printf("varlen, %s, D = %d, %ld heads, lengths", dtype_name(opt->dtypes[0]),
           opt->head_dims[0],
           opt->hidden / opt->head_dims[0] > 0 ? opt->hidden / opt->head_dims[0]
                                               : 1);
    for (int i = 0; i < opt->num_varlen; ++i)
        printf("%s%d", i ? "," : " ", opt->varlen[i]);
    printf("; varlen TFLOP/s count useful pairs, dense TFLOP/s every pair "
           "of the padded call\n\n"
           "| rows | causal | longest | varlen path | varlen ms | varlen "
           "TFLOP/s | dense path | dense ms | dense TFLOP/s | varlen / dense "
           "| first call |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n");
    int failures = 0;
    for (int c = 0; c < opt->num_causal; ++c)
        failures += varlen_row(ctx, opt, opt->causal_modes[c]) != 0;
    return failures;
}

/* The decode or varlen table behind its line of method: the device, the
 * repetitions and the fill queued before each call's marker. */
static int one_table(flashcl_context *ctx, bench_options *opt,
                     int (*table)(flashcl_context *, bench_options *))
{
    char name[256] = "";
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof name,
                    name, NULL);
    busy_prepare(ctx, opt->busy_us, opt->busy_read);
    printf("flashcl %s on %s; median of %d runs after %d warm-up, OpenCL "
           "profiling events (marker before the call to the call's last "
           "event; %zu-byte %s before the marker)\n\n",
           flashcl_version_string(), name, opt->reps, opt->warmup,
           g_busy.bytes, busy_what());
    const int failures = table(ctx, opt);
    busy_release();
    return failures;
}

int main(int argc, char **argv)
{
    bench_options opt = {.reps = 10, .warmup = 2, .sgemm_n = -1,
                         .busy_us = 200};
    if (parse_options(argc, argv, &opt) != 0)
        return 2;
    if (opt.reps < 1)
        opt.reps = 1;
    if (opt.reps > TIMING_MAX_REPS)
        opt.reps = TIMING_MAX_REPS;
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, opt.device);
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl-bench: %s: %s\n",
                flashcl_status_string(status), flashcl_last_create_error());
        return 1;
    }
    if (opt.num_varlen > 0 || opt.num_decode > 0) {
        const int failures = one_table(
            ctx, &opt, opt.num_varlen > 0 ? varlen_table : decode_table);
        flashcl_context_release(ctx);
        return failures ? 1 : 0;
    }
    busy_prepare(ctx, opt.busy_us, opt.busy_read);
    print_header(ctx, &opt);
    FILE *csv = opt.csv_path ? fopen(opt.csv_path, "w") : NULL;
    if (csv)
        fprintf(csv, "variant,dtype,head_dim,causal,seqlen,batch,heads,"
                     "first_call_ms,"
                     "median_ms,min_ms,tflops,gbps%s\n",
                opt.backward ? ",bwd_median_ms,bwd_tflops,bwd_fwd_ratio,"
                               "fwdbwd_median_ms,fwdbwd_tflops"
                             : "");
    static row_log log; /* large: not on the stack */
    sweep(ctx, &opt, csv, &log);
    print_first_calls(&log);
    print_peer(ctx, &opt, csv);
    if (csv)
        fclose(csv);
    release_pool();
    busy_release();
    flashcl_context_release(ctx);
    return log.failures ? 1 : 0;
}
