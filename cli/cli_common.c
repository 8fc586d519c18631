/* Shared pieces of the flashcl command-line tool (see cli_common.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli_common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- options ------------------------------------------------------- */

void usage_error(const char *command, const char *fmt, ...)
{
    fprintf(stderr, "flashcl%s%s: ", command ? " " : "", command ? command : "");
    va_list args;
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, " (see flashcl %s%s--help)\n", command ? command : "",
            command ? " " : "");
}

/* One argument: "--name value", "--name=value" or a flag. Returns how many
 * argv entries it used, or -1. */
static int parse_one(const char *command, int argc, char **argv, int i,
                     common_options *common, option_parser parse, void *opts)
{
    char name[64];
    const char *arg = argv[i];
    const char *equals = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (equals) {
        snprintf(name, sizeof name, "%.*s", (int)(equals - arg), arg);
        arg = name;
        value = equals + 1;
    }
    int used;
    if (!strcmp(arg, "--json") || !strcmp(arg, "--help") || !strcmp(arg, "-h")) {
        *(arg[2] == 'j' ? &common->json : &common->help) = true;
        used = 1;
    } else if (!strcmp(arg, "--device")) {
        if (!value || !*value) {
            usage_error(command, "--device needs a device spec");
            return -1;
        }
        common->device = value;
        used = 2;
    } else {
        used = parse ? parse(opts, arg, value) : 0;
        if (used == 0) {
            usage_error(command, "unknown option \"%s\"", argv[i]);
            return -1;
        }
        if (used < 0)
            return -1;
    }
    if (equals && used != 2) {
        usage_error(command, "%s takes no value", arg);
        return -1;
    }
    return equals ? 1 : used;
}

int parse_command_line(const char *command, int argc, char **argv, int first,
                       common_options *common, option_parser parse, void *opts)
{
    for (int i = first; i < argc;) {
        int used = parse_one(command, argc, argv, i, common, parse, opts);
        if (used < 0)
            return -1;
        i += used;
    }
    return 0;
}

bool parse_int(const char *text, long min, long max, long *out)
{
    if (!text || !*text)
        return false;
    errno = 0;
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < min || value > max)
        return false;
    *out = value;
    return true;
}

bool parse_int_list(const char *text, long min, long max, int *out, int cap,
                    int *count)
{
    *count = 0;
    if (!text || !*text)
        return false;
    char *copy = strdup(text);
    bool ok = copy != NULL;
    char *save = NULL;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; item && ok;
         item = strtok_r(NULL, ",", &save)) {
        long value;
        ok = *count < cap && parse_int(item, min, max, &value);
        if (ok)
            out[(*count)++] = (int)value;
    }
    free(copy);
    return ok && *count > 0;
}

bool parse_dtype(const char *text, flashcl_dtype *out)
{
    static const flashcl_dtype all[4] = {FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16,
                                         FLASHCL_DTYPE_BF16, FLASHCL_DTYPE_FP64};
    for (int i = 0; i < 4; ++i)
        if (!strcmp(text, dtype_name(all[i]))) {
            *out = all[i];
            return true;
        }
    return false;
}

bool parse_dtype_list(const char *text, flashcl_dtype *out, int cap,
                      int *count)
{
    *count = 0;
    char *copy = strdup(text ? text : "");
    bool ok = copy != NULL && *copy;
    char *save = NULL;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; item && ok;
         item = strtok_r(NULL, ",", &save))
        ok = *count < cap && parse_dtype(item, &out[(*count)++]);
    free(copy);
    return ok && *count > 0;
}

const char *dtype_name(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP32: return "fp32";
    case FLASHCL_DTYPE_FP16: return "fp16";
    case FLASHCL_DTYPE_BF16: return "bf16";
    case FLASHCL_DTYPE_FP64: return "fp64";
    }
    return "?";
}

size_t storage_size(flashcl_dtype dtype)
{
    return dtype == FLASHCL_DTYPE_FP64   ? 8
           : dtype == FLASHCL_DTYPE_FP32 ? 4
                                         : 2;
}

flashcl_context *open_device(const char *command, const char *spec)
{
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, spec);
    if (status == FLASHCL_SUCCESS)
        return ctx;
    /* The library's message lists the devices on further lines: keep the
     * first, the listing is what `flashcl info` is for. */
    const char *message = flashcl_last_create_error();
    const char *newline = strchr(message, '\n');
    int length = newline ? (int)(newline - message) : (int)strlen(message);
    const char *listing = strstr(message, "; available");
    if (listing && listing - message < length)
        length = (int)(listing - message);
    if (length > 0 && message[length - 1] == ':')
        --length;
    fprintf(stderr, "flashcl %s: %s: %.*s (see flashcl info)\n", command,
            flashcl_status_string(status), length, message);
    return NULL;
}

/* ---- storage ------------------------------------------------------- */

/* Round-to-nearest-even float -> fp16 bits, with subnormals, overflow to
 * infinity. */
static uint16_t float_to_half(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, 4);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    float magnitude = fabsf(value);
    if (isnan(value))
        return (uint16_t)(sign | 0x7e00u);
    if (magnitude >= 65520.0f)
        return (uint16_t)(sign | 0x7c00u);
    if (magnitude < 6.103515625e-05f) /* subnormal: steps of 2^-24 */
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

static float half_to_float(uint16_t bits)
{
    int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    float magnitude;
    if (exponent == 0x1f)
        magnitude = mantissa ? NAN : INFINITY;
    else if (exponent == 0)
        magnitude = ldexpf((float)mantissa, -24);
    else
        magnitude = ldexpf((float)(mantissa | 0x400), exponent - 25);
    return (bits & 0x8000) ? -magnitude : magnitude;
}

void store_value(void *data, size_t i, flashcl_dtype dtype, double value)
{
    float single = (float)value;
    uint32_t bits;
    memcpy(&bits, &single, 4);
    switch (dtype) {
    case FLASHCL_DTYPE_FP64: ((double *)data)[i] = value; break;
    case FLASHCL_DTYPE_FP32: ((float *)data)[i] = single; break;
    case FLASHCL_DTYPE_FP16: ((uint16_t *)data)[i] = float_to_half(single); break;
    case FLASHCL_DTYPE_BF16:
        ((uint16_t *)data)[i] =
            (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        break;
    }
}

double load_value(const void *data, size_t i, flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP64: return ((const double *)data)[i];
    case FLASHCL_DTYPE_FP32: return ((const float *)data)[i];
    case FLASHCL_DTYPE_FP16: return half_to_float(((const uint16_t *)data)[i]);
    case FLASHCL_DTYPE_BF16: {
        uint32_t wide = (uint32_t)((const uint16_t *)data)[i] << 16;
        float out;
        memcpy(&out, &wide, 4);
        return out;
    }
    }
    return NAN;
}

/* ---- one attention problem ----------------------------------------- */

static double next_uniform(unsigned *seed) /* [-1, 1) */
{
    *seed = *seed * 1664525u + 1013904223u;
    return (double)(*seed >> 8) / 8388608.0 - 1.0;
}

static void *fill_storage(size_t count, flashcl_dtype dtype, unsigned *seed)
{
    void *data = malloc((count ? count : 1) * storage_size(dtype));
    for (size_t i = 0; data && i < count; ++i)
        store_value(data, i, dtype, next_uniform(seed));
    return data;
}

static cl_mem upload(cl_context context, const void *data, size_t bytes,
                     cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    if (!data || bytes == 0)
        return clCreateBuffer(context, CL_MEM_READ_WRITE, 16, NULL, err);
    return clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                          bytes, (void *)data, err);
}

/* The optional inputs: slopes 2^-(h+1)/2-ish, sinks around 0, a bias with
 * some -inf entries, a mask that drops every third key of each row. */
static int create_optional(const problem_spec *s, problem *p, unsigned *seed)
{
    const size_t scores = (size_t)s->seqlen_q * (size_t)s->seqlen_k;
    if (s->alibi && (p->slopes = malloc((size_t)s->heads_q * 4)))
        for (int h = 0; h < s->heads_q; ++h)
            p->slopes[h] = (float)pow(2.0, -0.5 * (h + 1));
    if (s->sinks && (p->sinks = malloc((size_t)s->heads_q * 4)))
        for (int h = 0; h < s->heads_q; ++h)
            p->sinks[h] = (float)next_uniform(seed);
    if (s->bias && (p->bias = malloc((scores ? scores : 1) * 4)))
        for (size_t i = 0; i < scores; ++i)
            p->bias[i] = i % 7 == 3 ? -INFINITY : (float)next_uniform(seed);
    if (s->mask && (p->mask = malloc(scores ? scores : 1)))
        for (size_t i = 0; i < scores; ++i)
            p->mask[i] = (unsigned char)(i % 3 != 1);
    bool missing = (s->alibi && !p->slopes) || (s->sinks && !p->sinks) ||
                   (s->bias && !p->bias) || (s->mask && !p->mask);
    return missing ? -1 : 0;
}

static int upload_all(flashcl_context *ctx, problem *p)
{
    cl_context context = flashcl_context_cl_context(ctx);
    const size_t elem = storage_size(p->dtype);
    const problem_spec *s = &p->spec;
    const size_t scores = (size_t)s->seqlen_q * (size_t)s->seqlen_k;
    cl_int err = CL_SUCCESS;
    p->q_buf = upload(context, p->q, p->q_count * elem, &err);
    p->k_buf = upload(context, p->k, p->k_count * elem, &err);
    p->v_buf = upload(context, p->v, p->v_count * elem, &err);
    p->o_buf = upload(context, NULL, 0, &err);
    if (err == CL_SUCCESS && p->o_count) {
        clReleaseMemObject(p->o_buf);
        p->o_buf = clCreateBuffer(context, CL_MEM_READ_WRITE,
                                  p->o_count * elem, NULL, &err);
    }
    p->lse_buf = clCreateBuffer(context, CL_MEM_READ_WRITE,
                                (p->lse_count ? p->lse_count : 1) * 4, NULL,
                                &err);
    if (p->slopes)
        p->slopes_buf = upload(context, p->slopes, (size_t)s->heads_q * 4, &err);
    if (p->sinks)
        p->sinks_buf = upload(context, p->sinks, (size_t)s->heads_q * 4, &err);
    if (p->bias)
        p->bias_buf = upload(context, p->bias, scores * 4, &err);
    if (p->mask)
        p->mask_buf = upload(context, p->mask, scores, &err);
    if (err != CL_SUCCESS)
        fprintf(stderr, "flashcl: creating device buffers failed (OpenCL "
                        "error %d)\n",
                (int)err);
    return err == CL_SUCCESS ? 0 : -1;
}

int problem_create(flashcl_context *ctx, const problem_spec *spec,
                   flashcl_dtype dtype, unsigned seed, problem *p)
{
    memset(p, 0, sizeof *p);
    p->spec = *spec;
    if (!p->spec.head_dim_v)
        p->spec.head_dim_v = spec->head_dim;
    const problem_spec *s = &p->spec;
    p->dtype = dtype;
    const size_t b = (size_t)s->batch, nq = (size_t)s->seqlen_q,
                 nk = (size_t)s->seqlen_k;
    p->q_count = b * nq * (size_t)s->heads_q * (size_t)s->head_dim;
    p->k_count = b * nk * (size_t)s->heads_kv * (size_t)s->head_dim;
    p->v_count = b * nk * (size_t)s->heads_kv * (size_t)s->head_dim_v;
    p->o_count = b * nq * (size_t)s->heads_q * (size_t)s->head_dim_v;
    p->lse_count = b * nq * (size_t)s->heads_q;
    p->q = fill_storage(p->q_count, dtype, &seed);
    p->k = fill_storage(p->k_count, dtype, &seed);
    p->v = fill_storage(p->v_count, dtype, &seed);
    p->o = malloc((p->o_count ? p->o_count : 1) * storage_size(dtype));
    p->lse = malloc((p->lse_count ? p->lse_count : 1) * sizeof *p->lse);
    if (!p->q || !p->k || !p->v || !p->o || !p->lse ||
        create_optional(s, p, &seed) != 0) {
        fprintf(stderr, "flashcl: out of host memory for %s\n", s->name);
        problem_release(p);
        return -1;
    }
    if (upload_all(ctx, p) != 0) {
        problem_release(p);
        return -1;
    }
    return 0;
}

void problem_release(problem *p)
{
    cl_mem buffers[9] = {p->q_buf,      p->k_buf,     p->v_buf,
                         p->o_buf,      p->lse_buf,   p->slopes_buf,
                         p->sinks_buf,  p->bias_buf,  p->mask_buf};
    for (int i = 0; i < 9; ++i)
        if (buffers[i])
            clReleaseMemObject(buffers[i]);
    void *host[9] = {p->q, p->k, p->v, p->o, p->lse, p->slopes, p->sinks,
                     p->bias, p->mask};
    for (int i = 0; i < 9; ++i)
        free(host[i]);
    memset(p, 0, sizeof *p);
}

flashcl_attention_desc problem_desc(const problem *p, flashcl_backend backend)
{
    const problem_spec *s = &p->spec;
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d);
    d.batch = s->batch;
    d.heads_q = s->heads_q;
    d.heads_kv = s->heads_kv;
    d.seqlen_q = s->seqlen_q;
    d.seqlen_k = s->seqlen_k;
    d.head_dim = s->head_dim;
    d.head_dim_v = s->head_dim_v == s->head_dim ? 0 : s->head_dim_v;
    d.dtype = p->dtype;
    d.causal = s->causal;
    d.causal_align = s->top_left ? FLASHCL_CAUSAL_TOP_LEFT
                                 : FLASHCL_CAUSAL_BOTTOM_RIGHT;
    d.window = s->window;
    d.window_left = s->window_left;
    d.window_right = s->window_right;
    d.softcap = s->softcap;
    d.backend = backend;
    d.q.buffer = p->q_buf;
    d.k.buffer = p->k_buf;
    d.v.buffer = p->v_buf;
    d.o.buffer = p->o_buf;
    d.lse.buffer = p->lse_buf;
    d.alibi_slopes.buffer = p->slopes_buf;
    d.sinks.buffer = p->sinks_buf;
    /* [seqlen_q, seqlen_k] shared by every batch and head: literal strides,
     * 0 broadcasts. */
    d.bias.buffer = p->bias_buf;
    d.bias_dtype = FLASHCL_DTYPE_FP32;
    d.bias.stride_seq = (size_t)s->seqlen_k;
    d.bias.stride_dim = 1;
    d.mask.buffer = p->mask_buf;
    d.mask.stride_seq = (size_t)s->seqlen_k;
    d.mask.stride_dim = 1;
    return d;
}

flashcl_status problem_run(flashcl_context *ctx, problem *p,
                           flashcl_backend backend)
{
    flashcl_attention_desc desc = problem_desc(p, backend);
    flashcl_status status =
        flashcl_attention_forward(ctx, NULL, &desc, 0, NULL, NULL);
    if (status != FLASHCL_SUCCESS)
        return status;
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_int err = CL_SUCCESS;
    if (p->o_count)
        err = clEnqueueReadBuffer(queue, p->o_buf, CL_TRUE, 0,
                                  p->o_count * storage_size(p->dtype), p->o,
                                  0, NULL, NULL);
    if (err == CL_SUCCESS && p->lse_count)
        err = clEnqueueReadBuffer(queue, p->lse_buf, CL_TRUE, 0,
                                  p->lse_count * 4, p->lse, 0, NULL, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : FLASHCL_ERROR_OPENCL;
}

/* ---- float64 host reference ---------------------------------------- */

/* Score of (i, j) for head h after softcap, ALiBi, bias and masks, or
 * -inf. */
static double host_score(const problem *p, int h, long i, long j, double dot)
{
    const problem_spec *s = &p->spec;
    const long diag = s->top_left ? 0 : (long)s->seqlen_k - s->seqlen_q;
    long right = s->window ? s->window_right : -1;
    const long left = s->window ? s->window_left : -1;
    if (s->causal && right != 0)
        right = 0;
    if ((left >= 0 && j < i + diag - left) || (right >= 0 && j > i + diag + right))
        return -INFINITY;
    double x = dot;
    if (s->softcap > 0)
        x = s->softcap * tanh(x / s->softcap);
    if (p->slopes)
        x -= p->slopes[h] * fabs((double)(i + diag - j));
    const size_t at = (size_t)i * (size_t)s->seqlen_k + (size_t)j;
    if (p->bias)
        x += p->bias[at];
    if (p->mask && !p->mask[at])
        return -INFINITY;
    return x;
}

static double host_dot(const problem *p, int b, int h, int i, int j)
{
    const problem_spec *s = &p->spec;
    const int hk = h / (s->heads_q / s->heads_kv);
    const size_t qi = (((size_t)b * s->seqlen_q + i) * s->heads_q + h) *
                      s->head_dim;
    const size_t ki = (((size_t)b * s->seqlen_k + j) * s->heads_kv + hk) *
                      s->head_dim;
    double dot = 0;
    for (int d = 0; d < s->head_dim; ++d)
        dot += load_value(p->q, qi + d, p->dtype) *
               load_value(p->k, ki + d, p->dtype);
    return dot;
}

/* One row: O[b, i, h, :] and LSE[b, h, i]. `w` has seqlen_k entries. */
static void host_row(const problem *p, int b, int h, int i, double *w,
                     double *o, double *lse)
{
    const problem_spec *s = &p->spec;
    const double scale = 1.0 / sqrt((double)s->head_dim);
    double row_max = p->sinks ? p->sinks[h] : -INFINITY;
    for (int j = 0; j < s->seqlen_k; ++j) {
        w[j] = host_score(p, h, i, j, scale * host_dot(p, b, h, i, j));
        row_max = fmax(row_max, w[j]);
    }
    double sum = 0;
    for (int j = 0; j < s->seqlen_k; ++j)
        sum += (w[j] = row_max == -INFINITY ? 0 : exp(w[j] - row_max));
    if (p->sinks && row_max != -INFINITY)
        sum += exp(p->sinks[h] - row_max);
    *lse = sum > 0 ? row_max + log(sum) : -INFINITY;
    const int hk = h / (s->heads_q / s->heads_kv);
    for (int d = 0; d < s->head_dim_v; ++d) {
        double acc = 0;
        for (int j = 0; j < s->seqlen_k && sum > 0; ++j)
            acc += w[j] * load_value(p->v,
                                     (((size_t)b * s->seqlen_k + j) *
                                          s->heads_kv + hk) * s->head_dim_v + d,
                                     p->dtype);
        o[d] = sum > 0 ? acc / sum : 0;
    }
}

int problem_host_reference(const problem *p, double *o, double *lse)
{
    const problem_spec *s = &p->spec;
    double *w = malloc(((size_t)s->seqlen_k + 1) * sizeof *w);
    if (!w)
        return -1;
    for (int b = 0; b < s->batch; ++b)
        for (int h = 0; h < s->heads_q; ++h)
            for (int i = 0; i < s->seqlen_q; ++i)
                host_row(p, b, h, i, w,
                         o + (((size_t)b * s->seqlen_q + i) * s->heads_q + h) *
                                 s->head_dim_v,
                         lse + ((size_t)b * s->heads_q + h) * s->seqlen_q + i);
    free(w);
    return 0;
}

void problem_snapshot(const problem *p, double *o, double *lse)
{
    for (size_t i = 0; i < p->o_count; ++i)
        o[i] = load_value(p->o, i, p->dtype);
    for (size_t i = 0; i < p->lse_count; ++i)
        lse[i] = p->lse[i];
}

error_pair problem_error(const problem *p, const double *ref_o,
                         const double *ref_lse)
{
    error_pair e = {0, 0};
    double max_ref = 0;
    for (size_t i = 0; i < p->o_count; ++i) {
        double got = load_value(p->o, i, p->dtype);
        double err = fabs(got - ref_o[i]);
        e.o = isnan(err) ? INFINITY : fmax(e.o, err);
        max_ref = fmax(max_ref, fabs(ref_o[i]));
    }
    e.o = max_ref > 0 ? e.o / max_ref : e.o;
    for (size_t i = 0; i < p->lse_count; ++i) {
        double got = p->lse[i], want = ref_lse[i];
        double err = isinf(want) || isinf(got)
                         ? (got == want ? 0 : INFINITY)
                         : fabs(got - want) / fmax(1.0, fabs(want));
        e.lse = isnan(err) ? INFINITY : fmax(e.lse, err);
    }
    return e;
}

double o_tolerance(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP64: return 1e-10;
    case FLASHCL_DTYPE_FP32: return 2e-5;
    case FLASHCL_DTYPE_FP16: return 2e-3;
    case FLASHCL_DTYPE_BF16: return 1.6e-2;
    }
    return 0;
}

double lse_tolerance(flashcl_dtype dtype)
{
    /* LSE is fp32 whatever the storage type. */
    return dtype == FLASHCL_DTYPE_FP64 ? 1e-6 : 1e-5;
}

/* ---- timing -------------------------------------------------------- */

double host_ms(void)
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

double time_calls(flashcl_context *ctx, const flashcl_attention_desc *desc,
                  int warmup, int reps, flashcl_status *status)
{
    cl_command_queue queue = flashcl_context_queue(ctx);
    double *times = malloc((size_t)(reps > 0 ? reps : 1) * sizeof *times);
    *status = times ? FLASHCL_SUCCESS : FLASHCL_ERROR_OUT_OF_MEMORY;
    for (int i = -warmup; *status == FLASHCL_SUCCESS && i < reps; ++i) {
        double start = host_ms();
        *status = flashcl_attention_forward(ctx, queue, desc, 0, NULL, NULL);
        if (clFinish(queue) != CL_SUCCESS && *status == FLASHCL_SUCCESS)
            *status = FLASHCL_ERROR_OPENCL;
        if (i >= 0)
            times[i] = host_ms() - start;
    }
    double median = -1;
    if (*status == FLASHCL_SUCCESS && reps > 0) {
        qsort(times, (size_t)reps, sizeof *times, compare_double);
        median = times[reps / 2];
    }
    free(times);
    return median;
}

/* ---- JSON ---------------------------------------------------------- */

void json_string(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c; ++c) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(out, "\\u%04x", *c);
        else
            fputc(*c, out);
    }
    fputc('"', out);
}

void json_number(FILE *out, double value)
{
    if (isfinite(value))
        fprintf(out, "%.6g", value);
    else
        fputs("null", out);
}
