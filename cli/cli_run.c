/* `flashcl run`: one attention on the chosen device, its error against the
 * float64 oracle and its time. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "cli_args.h"
#include "cli_backward.h"
#include "cli_device.h"
#include "cli_problem.h"
#include "cli_report.h"
#include "kv_quant_oracle.h"

#include <stdlib.h>
#include <string.h>

typedef struct run_options {
    int batch, heads, heads_kv, seqlen, seqlen_q, seqlen_k, head_dim, reps;
    bool causal, window, backward, kv_cache;
    int k_storage, v_storage; /* --kv-dtype, flashcl_kv_storage */
    int page_size, append;    /* --page-size, --append */
    long window_left, window_right;
    float softcap;
    flashcl_dtype dtype;
    flashcl_backend backend;
    bool backend_given;
} run_options;

static bool parse_run_dtype(void *opts, const char *value)
{
    return parse_dtype(value, &((run_options *)opts)->dtype);
}

static bool parse_backend(void *opts, const char *value)
{
    run_options *o = opts;
    o->backend_given = true;
    if (!strcmp(value, "auto"))
        o->backend = FLASHCL_BACKEND_AUTO;
    else if (!strcmp(value, "fused"))
        o->backend = FLASHCL_BACKEND_FUSED;
    else if (!strcmp(value, "reference"))
        o->backend = FLASHCL_BACKEND_REFERENCE;
    else
        return false;
    return true;
}

/* "L,R": keys to the left and right of the diagonal, -1 unbounded. */
static bool parse_window(void *opts, const char *value)
{
    run_options *o = opts;
    const char *comma = strchr(value, ',');
    char left[32];
    if (!comma || (size_t)(comma - value) >= sizeof left)
        return false;
    snprintf(left, sizeof left, "%.*s", (int)(comma - value), value);
    o->window = true;
    return parse_int(left, -1, 1L << 30, &o->window_left) &&
           parse_int(comma + 1, -1, 1L << 30, &o->window_right);
}

static bool parse_softcap(void *opts, const char *value)
{
    double cap;
    if (!parse_double(value, &cap) ||
        (cap != 0 && (cap < FLASHCL_MIN_SOFTCAP || cap > FLASHCL_MAX_SCALE)))
        return false;
    ((run_options *)opts)->softcap = (float)cap;
    return true;
}

/* "T" (K and V) or "K,V": a quantized type or "same" (the dtype). */
static bool parse_kv_dtype(void *opts, const char *value)
{
    run_options *o = opts;
    const char *comma = strchr(value, ',');
    char first[32];
    if (comma && (size_t)(comma - value) >= sizeof first)
        return false;
    snprintf(first, sizeof first, "%.*s",
             comma ? (int)(comma - value) : (int)sizeof first - 1, value);
    o->k_storage = kvq_type_parse(first);
    o->v_storage = comma ? kvq_type_parse(comma + 1) : o->k_storage;
    o->kv_cache = true;
    return o->k_storage >= 0 && o->v_storage >= 0;
}

#define RUN_INT(field) CLI_INT, offsetof(run_options, field)

static const cli_option run_table[] = {
    {"seqlen", "N", "query rows and keys (default 1024)", RUN_INT(seqlen), 1,
     1L << 24, NULL, NULL},
    {"seqlen-q", "N", "query rows (default: --seqlen)", RUN_INT(seqlen_q), 1,
     1L << 24, NULL, NULL},
    {"seqlen-k", "N", "keys (default: --seqlen; 0: no keys)", RUN_INT(seqlen_k),
     0, 1L << 24, NULL, NULL},
    {"head-dim", "D", "head dim (default 64)", RUN_INT(head_dim), 1, 256, NULL,
     NULL},
    {"heads", "H", "query heads (default 8)", RUN_INT(heads), 1, 4096, NULL,
     NULL},
    {"heads-kv", "H", "key/value heads, dividing --heads (default:\n--heads; "
                      "fewer is GQA/MQA)",
     RUN_INT(heads_kv), 1, 4096, NULL, NULL},
    {"batch", "B", "batch (default 1)", RUN_INT(batch), 1, 65536, NULL, NULL},
    {"dtype", "T", "fp32|fp16|bf16|fp64 storage (default fp32)", CLI_CUSTOM, 0,
     0, 0, parse_run_dtype, "fp32, fp16, bf16 or fp64"},
    {"causal", NULL, "causal mask, bottom-right aligned", CLI_FLAG,
     offsetof(run_options, causal), 0, 0, NULL, NULL},
    {"window", "L,R", "sliding window: L keys left and R right of the\n"
                      "diagonal, -1 unbounded (with --causal R is 0)",
     CLI_CUSTOM, 0, 0, 0, parse_window,
     "L,R with L, R integers >= -1 (-1: unbounded)"},
    {"softcap", "X", "softcap X * tanh(s / X) (default 0: off)", CLI_CUSTOM, 0,
     0, 0, parse_softcap, "0 (off) or a number in [1e-30, 1e30]"},
    {"backend", "B", "auto|fused|reference (default: FLASHCL_BACKEND,\n"
                     "else fused)",
     CLI_CUSTOM, 0, 0, 0, parse_backend, "auto, fused or reference"},
    {"kv-cache", NULL, "K and V as a KV cache of --seqlen-k keys (a\n"
                       "decode with --seqlen-q 1)",
     CLI_FLAG, offsetof(run_options, kv_cache), 0, 0, NULL, NULL},
    {"kv-dtype", "T", "KV cache stored as e4m3|e5m2|int8|int4|same, or\n"
                      "K,V types (int8,int4); implies --kv-cache",
     CLI_CUSTOM, 0, 0, 0, parse_kv_dtype,
     "e4m3, e5m2, int8, int4 or same, or two of them as K,V"},
    {"page-size", "P", "paged KV cache of P-row pages (a multiple of\n"
                       "16), shuffled block table; implies --kv-cache",
     RUN_INT(page_size), 1, 65536, NULL, NULL},
    {"append", "N", "the last N keys appended by the call (k_new,\n"
                    "v_new; quantized by it); implies --kv-cache",
     RUN_INT(append), 1, 1L << 24, NULL, NULL},
    {"reps", "N", "timed calls, median (default 5)", RUN_INT(reps), 1, 1000,
     NULL, NULL},
    {"backward", NULL, "then the backward: dQ, dK, dV error vs float64\n"
                       "and its device time (events, median of --reps)",
     CLI_FLAG, offsetof(run_options, backward), 0, 0, NULL, NULL},
    CLI_OPTIONS_END,
};

const cli_command run_command = {
    "run", "one attention: error vs float64, compile and time",
    "One attention (packed BNHD, random inputs in [-1, 1)) on the device.\n"
    "Prints max |O - O_ref| / max |O_ref| and the LSE error against the\n"
    "float64 oracle with their tolerances (PASS needs both), whether the\n"
    "kernel was compiled in this process or already cached (flashcl_prepare;\n"
    "the reference backend builds CLBlast's kernels on its first call), the\n"
    "first call's time, and the median of --reps calls after one warm-up\n"
    "(host clock around enqueue + clFinish). GFLOP/s count 2 (D + D_v)\n"
    "FLOPs per query-key pair the causal mask and window leave. --backward\n"
    "then runs the backward on the same case (the portable kernel, with a\n"
    "random dO): dQ, dK, dV's max error against the float64 gradient oracle,\n"
    "the first call (host clock, compile included) and the median device\n"
    "time of --reps calls from events; PASS needs these too.\n"
    "--kv-cache makes K and V a dense KV cache (cache_seqlens: --seqlen-k\n"
    "for every sequence); --kv-dtype stores it quantized by the host\n"
    "(docs/kv-quantization.md's rows; fp8 with one scale per tensor): the\n"
    "error is then against the float64 oracle of the dequantized cache,\n"
    "and the error against the unquantized K and V is printed beside it\n"
    "(the quantization's own, not part of PASS). --page-size makes the\n"
    "cache paged; --append N passes each sequence's last N keys as k_new /\n"
    "v_new, which the call writes (and quantizes) into the cache at\n"
    "cache_seqlens = --seqlen-k - N; the oracle's appended rows are the\n"
    "host's quantization of them, as docs/kv-quantization.md's append.\n",
    run_table};

/* ---- options -------------------------------------------------------- */

/* --backend wins; else FLASHCL_BACKEND, read as the library reads it. */
static int resolve_backend(run_options *o, char *source, size_t cap)
{
    const char *env = getenv("FLASHCL_BACKEND");
    if (o->backend_given && o->backend != FLASHCL_BACKEND_AUTO) {
        snprintf(source, cap, "--backend");
        return 0;
    }
    if (!env || !*env) {
        o->backend = FLASHCL_BACKEND_FUSED;
        snprintf(source, cap, "default; FLASHCL_BACKEND unset");
        return 0;
    }
    snprintf(source, cap, "FLASHCL_BACKEND=%.40s", env);
    if (!strcmp(env, "auto") || !strcmp(env, "fused"))
        o->backend = FLASHCL_BACKEND_FUSED;
    else if (!strcmp(env, "reference"))
        o->backend = FLASHCL_BACKEND_REFERENCE;
    else {
        usage_error("run", "FLASHCL_BACKEND=\"%s\" is not auto, fused or "
                           "reference", env);
        return -1;
    }
    return 0;
}

static int resolve_options(run_options *o, problem_spec *spec)
{
    if (o->heads % o->heads_kv != 0) {
        usage_error("run", "--heads %d is not a multiple of --heads-kv %d",
                    o->heads, o->heads_kv);
        return -1;
    }
    o->kv_cache = o->kv_cache || o->page_size || o->append;
    const int seqlen_k = o->seqlen_k >= 0 ? o->seqlen_k : o->seqlen;
    if (o->append > seqlen_k) {
        usage_error("run", "--append %d is more than the %d keys of "
                           "--seqlen-k",
                    o->append, seqlen_k);
        return -1;
    }
    if (o->backward && o->kv_cache) {
        usage_error("run", "--backward has no KV-cache mode (--kv-cache, "
                           "--kv-dtype, --page-size, --append)");
        return -1;
    }
    *spec = (problem_spec){.name = "run", .batch = o->batch,
                           .heads_q = o->heads, .heads_kv = o->heads_kv,
                           .seqlen_q = o->seqlen_q ? o->seqlen_q : o->seqlen,
                           .seqlen_k = seqlen_k,
                           .head_dim = o->head_dim, .causal = o->causal,
                           .window = o->window,
                           .window_left = o->window_left,
                           .window_right = o->window_right,
                           .softcap = o->softcap,
                           .kv_cache = o->kv_cache,
                           .k_storage = o->k_storage,
                           .v_storage = o->v_storage,
                           .page_size = o->page_size, .append = o->append};
    return 0;
}

/* ---- the run -------------------------------------------------------- */

typedef struct run_result {
    char backend_source[96];
    double compile_ms, first_call_ms, gflops;
    bool compiled;
    bool from_binary_cache; /* loaded from the persistent cache */
    char path[32];          /* the kernel path that ran (fused) */
    int block_m, block_n;   /* its tiles: queries x keys a work-group takes */
    timing_result time;
    error_pair error;
    double o_error_unquantized; /* --kv-dtype: O vs the unquantized oracle */
    size_t append_checked, append_differing; /* --append: values read back */
    size_t scratch;
    bool pass;
    bool backward;
    backward_result bwd;
} run_result;

/* Compile (fused: flashcl_prepare, which says whether it compiled) or size
 * the scratch (reference), then the first call, timed on its own. */
static flashcl_status first_call(flashcl_context *ctx, problem *p,
                                 flashcl_backend backend, run_result *r)
{
    flashcl_attention_desc desc = problem_desc(p, backend);
    flashcl_cache_stats before, after;
    flashcl_get_cache_stats(&before);
    flashcl_status status =
        backend == FLASHCL_BACKEND_REFERENCE
            ? flashcl_reference_scratch_bytes(ctx, &desc, &r->scratch)
            : flashcl_prepare(ctx, &desc, &r->compile_ms);
    flashcl_get_cache_stats(&after);
    r->compiled = r->compile_ms > 0;
    r->from_binary_cache = after.hits > before.hits;
    flashcl_variant_info info;
    if (backend != FLASHCL_BACKEND_REFERENCE &&
        flashcl_describe_variant(ctx, &desc, &info) == FLASHCL_SUCCESS) {
        snprintf(r->path, sizeof r->path, "%s", info.path);
        r->block_m = info.block_m;
        r->block_n = info.block_n;
    }
    const double start = timing_host_ms();
    if (status == FLASHCL_SUCCESS)
        status = problem_enqueue(ctx, p, backend);
    r->first_call_ms = timing_host_ms() - start;
    return status == FLASHCL_SUCCESS ? problem_read(ctx, p) : status;
}

static flashcl_status measure(flashcl_context *ctx, problem *p,
                              const run_options *o, run_result *r,
                              char *why, size_t why_cap)
{
    flashcl_status status = first_call(ctx, p, o->backend, r);
    if (status != FLASHCL_SUCCESS) {
        snprintf(why, why_cap, "%s", flashcl_context_last_error(ctx));
        return status;
    }
    reference_result ref = problem_reference(p);
    if (!ref.o) {
        snprintf(why, why_cap, "out of host memory for the float64 oracle");
        return FLASHCL_ERROR_OUT_OF_MEMORY;
    }
    r->error = problem_error(p, ref.o, ref.lse);
    reference_free(&ref);
    if (problem_kv_quantized(p)) {
        ref = problem_reference_unquantized(p);
        if (!ref.o) {
            snprintf(why, why_cap, "out of host memory for the float64 "
                                   "oracle");
            return FLASHCL_ERROR_OUT_OF_MEMORY;
        }
        r->o_error_unquantized = problem_error(p, ref.o, ref.lse).o;
        reference_free(&ref);
    }
    if (p->spec.append &&
        problem_kv_check_append(ctx, p, &r->append_differing,
                                &r->append_checked, why, why_cap) != 0)
        return FLASHCL_ERROR_OPENCL;
    flashcl_attention_desc desc = problem_desc(p, o->backend);
    status = time_forward(ctx, &desc, 1, o->reps, &r->time);
    if (status != FLASHCL_SUCCESS) {
        snprintf(why, why_cap, "%s", flashcl_context_last_error(ctx));
        return status;
    }
    const problem_spec *s = &p->spec;
    const double flops = problem_visible_pairs(s) * s->batch * s->heads_q *
                         2.0 * (s->head_dim + s->head_dim_v);
    r->gflops = flops / (r->time.median_ms * 1e-3) / 1e9;
    r->pass = within_tolerance(r->error, p->dtype);
    if (!o->backward)
        return FLASHCL_SUCCESS;
    r->backward = true;
    status = problem_backward(ctx, p, o->reps, &r->bwd, why, why_cap);
    r->pass = r->pass && r->bwd.pass;
    return status;
}

/* ---- output --------------------------------------------------------- */

static const char *backend_name(flashcl_backend backend)
{
    return backend == FLASHCL_BACKEND_REFERENCE ? "reference" : "fused";
}

static void json_shape(json_writer *j, const problem *p)
{
    const problem_spec *s = &p->spec;
    const flashcl_dtype dtype = p->dtype;
    json_integer(j, "batch", s->batch);
    json_integer(j, "heads", s->heads_q);
    json_integer(j, "heads_kv", s->heads_kv);
    json_integer(j, "seqlen_q", s->seqlen_q);
    json_integer(j, "seqlen_k", s->seqlen_k);
    json_integer(j, "head_dim", s->head_dim);
    json_string(j, "dtype", dtype_name(dtype));
    json_bool(j, "causal", s->causal);
    json_bool(j, "window", s->window);
    json_integer(j, "window_left", s->window ? s->window_left : -1);
    json_integer(j, "window_right", s->window ? s->window_right : -1);
    json_number(j, "softcap", s->softcap);
    json_bool(j, "kv_cache", s->kv_cache);
    json_string(j, "k_storage", kvq_type_name(s->k_storage));
    json_string(j, "v_storage", kvq_type_name(s->v_storage));
    json_integer(j, "page_size", s->page_size);
    json_integer(j, "append", s->append);
    json_integer(j, "cache_seqlens", s->kv_cache ? p->layout.cache_len : 0);
    json_integer(j, "kv_capacity", s->kv_cache ? p->layout.capacity : 0);
}

static void print_json(const problem *p, flashcl_backend backend,
                       const flashcl_device_info *dev, const run_result *r)
{
    json_writer j;
    json_begin(&j, stdout, 0);
    json_object(&j, NULL);
    json_string(&j, "device", dev->name);
    json_string(&j, "platform", dev->platform);
    json_string(&j, "backend", backend_name(backend));
    json_string(&j, "backend_source", r->backend_source);
    json_shape(&j, p);
    json_bool(&j, "kernel_compiled", r->compiled);
    json_number(&j, "compile_ms", r->compile_ms);
    json_bool(&j, "from_binary_cache", r->from_binary_cache);
    json_string(&j, "path", r->path);
    json_integer(&j, "block_m", r->block_m);
    json_integer(&j, "block_n", r->block_n);
    json_number(&j, "first_call_ms", r->first_call_ms);
    json_number(&j, "o_error", r->error.o);
    json_number(&j, "o_tolerance", o_tolerance(p->dtype));
    json_number(&j, "lse_error", r->error.lse);
    json_number(&j, "lse_tolerance", lse_tolerance(p->dtype));
    if (problem_kv_quantized(p))
        json_number(&j, "o_error_unquantized", r->o_error_unquantized);
    if (p->spec.append) {
        json_integer(&j, "append_values", (long long)r->append_checked);
        json_integer(&j, "append_values_differing",
                     (long long)r->append_differing);
    }
    json_integer(&j, "reps", r->time.reps);
    json_number(&j, "median_ms", r->time.median_ms);
    json_number(&j, "min_ms", r->time.min_ms);
    json_number(&j, "gflops", r->gflops);
    json_integer(&j, "scratch_bytes", (long long)r->scratch);
    if (r->backward) {
        json_number(&j, "dq_error", r->bwd.dq_error);
        json_number(&j, "dk_error", r->bwd.dk_error);
        json_number(&j, "dv_error", r->bwd.dv_error);
        json_number(&j, "grad_tolerance", grad_tolerance(p->dtype));
        json_number(&j, "backward_first_call_ms", r->bwd.first_call_ms);
        json_number(&j, "backward_median_ms", r->bwd.median_ms);
        json_string(&j, "backward_path", r->bwd.path);
        json_integer(&j, "backward_work_group", r->bwd.work_group_size);
        json_integer(&j, "backward_tile_rows", r->bwd.tile_rows);
    }
    json_bool(&j, "pass", r->pass);
    json_close(&j);
    json_end(&j);
}

static void print_shape(const problem *p)
{
    const problem_spec *s = &p->spec;
    printf("attention: batch %d, heads %d", s->batch, s->heads_q);
    if (s->heads_kv != s->heads_q)
        printf(" (kv %d)", s->heads_kv);
    if (s->seqlen_q == s->seqlen_k)
        printf(", seqlen %d", s->seqlen_q);
    else
        printf(", seqlen_q %d, seqlen_k %d", s->seqlen_q, s->seqlen_k);
    printf(", head_dim %d, %s%s", s->head_dim, dtype_name(p->dtype),
           s->causal ? ", causal" : "");
    if (s->window)
        printf(", window %ld,%ld", s->window_left, s->window_right);
    if (s->softcap > 0)
        printf(", softcap %g", (double)s->softcap);
    if (s->kv_cache)
        printf(", KV cache (K %s, V %s", kvq_type_name(s->k_storage),
               kvq_type_name(s->v_storage));
    if (s->kv_cache && s->page_size)
        printf(", pages of %d", s->page_size);
    if (s->kv_cache && s->append)
        printf(", %d cached + %d appended", p->layout.cache_len, s->append);
    if (s->kv_cache)
        printf(", capacity %d)", p->layout.capacity);
    printf("\n");
}

/* Whether this process compiled the kernel, and what the first call cost:
 * separate facts, so neither is passed off as the other. */
static void print_first_call(flashcl_backend backend, const run_result *r)
{
    if (backend == FLASHCL_BACKEND_REFERENCE)
        printf("kernels: CLBlast's GEMMs and flashcl's softmax kernel, built "
               "by the first call\nfirst call: %.1f ms (host clock, builds "
               "included)\n",
               r->first_call_ms);
    else if (r->compiled && r->from_binary_cache)
        printf("kernel: loaded by flashcl_prepare from the binary cache in "
               "%.1f ms\nfirst call: %.1f ms (host clock, after the "
               "load)\n",
               r->compile_ms, r->first_call_ms);
    else if (r->compiled)
        printf("kernel: compiled in this process by flashcl_prepare in "
               "%.1f ms\nfirst call: %.1f ms (host clock, after the "
               "compile)\n",
               r->compile_ms, r->first_call_ms);
    else
        printf("kernel: already compiled (flashcl_prepare found it cached)\n"
               "first call: %.1f ms (host clock)\n",
               r->first_call_ms);
}

static void print_text(const problem *p, flashcl_backend backend,
                       const flashcl_device_info *dev, const run_result *r)
{
    printf("device: %s (%s)\n", dev->name, dev->platform);
    print_shape(p);
    printf("backend: %s (%s), scratch %.1f MiB\n", backend_name(backend),
           r->backend_source, (double)r->scratch / 1048576.0);
    if (backend != FLASHCL_BACKEND_REFERENCE)
        printf("path: %s, tiles %dx%d (queries x keys)\n", r->path,
               r->block_m, r->block_n);
    print_first_call(backend, r);
    printf("max |O - O_ref| / max |O_ref| vs float64 oracle%s: %.3e "
           "(tolerance %.1e)\n",
           problem_kv_quantized(p) ? " of the dequantized cache" : "",
           r->error.o, o_tolerance(p->dtype));
    if (problem_kv_quantized(p))
        printf("max |O - O_ref| / max |O_ref| vs float64 oracle of the "
               "unquantized K, V: %.3e (quantization error, not checked)\n",
               r->o_error_unquantized);
    printf("max |LSE - LSE_ref| / max(1, |LSE_ref|): %.3e (tolerance "
           "%.1e)\n",
           r->error.lse, lse_tolerance(p->dtype));
    if (p->spec.append)
        printf("appended rows read back: %zu of %zu values differ from the "
               "host's append (not part of PASS)\n",
               r->append_differing, r->append_checked);
    printf("time: %.3f ms (median of %d after 1 warm-up, host clock), "
           "%.2f GFLOP/s\n",
           r->time.median_ms, r->time.reps, r->gflops);
    if (r->backward) {
        printf("backward: max |dQ - ref| / max |ref| %.3e, dK %.3e, dV "
               "%.3e vs float64 oracle (tolerance %.1e)\n",
               r->bwd.dq_error, r->bwd.dk_error, r->bwd.dv_error,
               grad_tolerance(p->dtype));
        printf("backward first call: %.1f ms (host clock, compile "
               "included)\n",
               r->bwd.first_call_ms);
        printf("backward time: %.3f ms (device, events, median of %d)\n",
               r->bwd.median_ms, r->bwd.reps);
        printf("backward plan: %s, work-group %d, tiles of %d rows\n",
               r->bwd.path, r->bwd.work_group_size, r->bwd.tile_rows);
    }
    printf("%s\n", r->pass ? "PASS" : "FAIL");
}

/* ---- the command ---------------------------------------------------- */

static int run_on(flashcl_context *ctx, const run_options *o,
                  const problem_spec *spec, run_result *r, bool json)
{
    char why[1024];
    problem p;
    flashcl_status status =
        problem_create(ctx, spec, o->dtype, 2024, &p, why, sizeof why);
    if (status == FLASHCL_SUCCESS) {
        status = measure(ctx, &p, o, r, why, sizeof why);
        if (status != FLASHCL_SUCCESS)
            problem_release(&p);
    }
    if (status != FLASHCL_SUCCESS)
        return report_failure("run", json, status, why, EXIT_DEVICE);
    flashcl_device_info dev;
    flashcl_context_device_info(ctx, &dev);
    if (json)
        print_json(&p, o->backend, &dev, r);
    else
        print_text(&p, o->backend, &dev, r);
    problem_release(&p);
    return r->pass ? EXIT_OK : EXIT_FAILED;
}

int cmd_run(int argc, char **argv)
{
    run_options o = {.batch = 1, .heads = 8, .seqlen = 1024,
                     .seqlen_k = -1, .head_dim = 64, .reps = 5,
                     .dtype = FLASHCL_DTYPE_FP32};
    common_options common = {0};
    int rc = cli_start(&run_command, argc, argv, &common, &o);
    if (rc != CLI_GO_ON)
        return rc;
    if (!o.heads_kv)
        o.heads_kv = o.heads;
    run_result r = {0};
    problem_spec spec;
    if (resolve_options(&o, &spec) != 0 ||
        resolve_backend(&o, r.backend_source, sizeof r.backend_source) != 0)
        return EXIT_USAGE;
    flashcl_context *ctx = open_device("run", common.device, common.json, &rc);
    if (!ctx)
        return rc;
    rc = run_on(ctx, &o, &spec, &r, common.json);
    flashcl_context_release(ctx);
    return rc;
}
