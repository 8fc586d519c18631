/* `flashcl tune`: searches each kernel path's tunables (declared beside
 * its tile table, read through flashcl_path_tunable) on the device at
 * hand over a set of shapes. A candidate is forced with
 * flashcl_context_force_tiles; the path's own legality rules (the host's
 * copy of the kernel's #error rules, local memory, work-group size) refuse
 * illegal ones before anything compiles; every legal one is checked
 * against the float64 oracle (a wrong one is recorded invalid, never
 * chosen) and timed by profiling events (median after warm-up). The JSON
 * it writes after every candidate (atomically) is also what a rerun
 * resumes from and what FLASHCL_TUNING_FILE and scripts/tuning_db.py read
 * (docs/tuning.md). `--backward` searches the backward's tunables
 * instead (path "nv_mma_bwd" where the tensor-core backward runs the
 * shape, "portable_bwd" where the portable one does): gradients checked
 * against the float64 gradient oracle, the backward call timed. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "cli_args.h"
#include "cli_backward.h"
#include "cli_device.h"
#include "cli_problem.h"
#include "cli_report.h"
#include "core/json_scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LIST 8
#define MAX_TUNABLES 8
#define MAX_CANDIDATES 8192
#define PARAMS_CAP 96

/* The library's paths (flashcl_path_name), at most MAX_PATHS of them. */
#define MAX_PATHS 16
static int num_paths(void)
{
    int n = 0;
    while (n < MAX_PATHS && flashcl_path_name(n))
        ++n;
    return n;
}
/* Paths with a large, slow search (nv_wgmma: a build takes seconds and its
 * space has hundreds of sets per head dim) are tuned only when --path
 * names them. */
static bool forced_only(const char *path) { return !strcmp(path, "nv_wgmma"); }
static const char *const seq_names[] = {"long", "short", "decode"};

typedef struct tune_options {
    bool paths[MAX_PATHS], paths_given;
    flashcl_dtype dtypes[4];
    int num_dtypes;
    int head_dims[MAX_LIST], num_head_dims;
    int causal_modes[2], num_causal;
    bool seqs[3], seqs_given;
    int seqlen;     /* 0: the class's default */
    double budget;  /* seconds */
    int max_candidates;
    int reps, warmup;
    const char *output;
    bool fresh, inject_wrong, no_progress;
    bool backward; /* the backward's tunables (backward_keys) */
} tune_options;

/* `--backward` tunes the backward's "paths": the tensor-core backward's
 * tiles (src/paths/nv_mma_bwd_tiles.h) and the portable backward's
 * tunables (src/paths/portable_bwd_tiles.h), each filed under its name
 * and tuned on the shapes its kernels (kernel file) run here, timed on
 * backward calls. */
static const struct {
    const char *name, *kernel_file;
} backward_keys[] = {{"nv_mma_bwd", "flash_bwd_mma.cl"},
                     {"portable_bwd", "flash_bwd.cl"}};
#define BACKWARD_KEYS ((int)(sizeof backward_keys / sizeof backward_keys[0]))

/* The kernel file the backward key `path` runs. */
static const char *backward_kernel(const char *path)
{
    for (int i = 0; i < BACKWARD_KEYS; ++i)
        if (!strcmp(path, backward_keys[i].name))
            return backward_keys[i].kernel_file;
    return "";
}

/* What the run tunes: the forward paths, or the backward's keys. */
static int tuned_count(const tune_options *o)
{
    return o->backward ? BACKWARD_KEYS : num_paths();
}

static const char *tuned_name(const tune_options *o, int i)
{
    return o->backward ? backward_keys[i].name : flashcl_path_name(i);
}

static bool tuned_wanted(const tune_options *o, int i)
{
    return o->backward || o->paths[i];
}

/* ---- options -------------------------------------------------------- */

static bool parse_paths(void *opts, const char *value)
{
    tune_options *o = opts;
    char *copy = strdup(value), *save = NULL;
    bool ok = copy && *copy;
    memset(o->paths, 0, sizeof o->paths);
    o->paths_given = true;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; item && ok;
         item = strtok_r(NULL, ",", &save)) {
        ok = false;
        for (int i = 0; i < num_paths(); ++i)
            if (!strcmp(item, flashcl_path_name(i)))
                o->paths[i] = ok = true;
    }
    free(copy);
    return ok;
}

static bool parse_seqs(void *opts, const char *value)
{
    tune_options *o = opts;
    char *copy = strdup(value), *save = NULL;
    bool ok = copy && *copy;
    memset(o->seqs, 0, sizeof o->seqs);
    o->seqs_given = true;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; item && ok;
         item = strtok_r(NULL, ",", &save)) {
        ok = false;
        for (int i = 0; i < 3; ++i)
            if (!strcmp(item, seq_names[i]))
                o->seqs[i] = ok = true;
    }
    free(copy);
    return ok;
}

static bool parse_dtypes(void *opts, const char *value)
{
    tune_options *o = opts;
    return parse_dtype_list(value, o->dtypes, 4, &o->num_dtypes);
}

static bool parse_head_dims(void *opts, const char *value)
{
    tune_options *o = opts;
    return parse_int_list(value, 1, 256, o->head_dims, MAX_LIST,
                          &o->num_head_dims);
}

static bool parse_causal(void *opts, const char *value)
{
    tune_options *o = opts;
    o->num_causal = 0;
    if (strcmp(value, "0") && strcmp(value, "1") && strcmp(value, "both"))
        return false;
    if (strcmp(value, "1") != 0)
        o->causal_modes[o->num_causal++] = 0;
    if (strcmp(value, "0") != 0)
        o->causal_modes[o->num_causal++] = 1;
    return true;
}

static bool parse_output(void *opts, const char *value)
{
    ((tune_options *)opts)->output = value;
    return *value != '\0' && *value != '-'; /* not an option taken as it */
}

static bool parse_budget(void *opts, const char *value)
{
    tune_options *o = opts;
    return parse_double(value, &o->budget) && o->budget > 0;
}

#define TUNE(kind, field) kind, offsetof(tune_options, field)

static const cli_option tune_table[] = {
    {"path", "LIST", "kernel paths, as FLASHCL_PATH names them (flashcl\n"
                     "--help lists them; default: every path that runs\n"
                     "the shape here, but nv_wgmma, whose search is long,\n"
                     "only when named)",
     CLI_CUSTOM, 0, 0, 0, parse_paths, "a list of kernel paths (flashcl "
                                       "--help lists them)"},
    {"dtype", "LIST", "fp32,fp16,bf16,fp64 (default: fp32 on a CPU,\n"
                      "fp16,bf16 on a GPU)",
     CLI_CUSTOM, 0, 0, 0, parse_dtypes, "a list of fp32, fp16, bf16, fp64"},
    {"head-dim", "LIST", "head dims (default 64; GPU 64,128)", CLI_CUSTOM, 0,
     0, 0, parse_head_dims, "a list like 64,128 (each 1..256, at most 8)"},
    {"causal", "MODE", "0, 1 or both (default 0 on a CPU, both on a GPU)",
     CLI_CUSTOM, 0, 0, 0, parse_causal, "0, 1 or both"},
    {"seq", "LIST", "sequence classes long,short,decode (default long):\n"
                    "long B=1 H=4 N=1024 (GPU B=4 H=16 N=4096), short B=4\n"
                    "H=4 N=256 (GPU B=32 H=16 N=512), decode B=8 H=8 1 query\n"
                    "x 2048 keys (GPU B=32 H=16 x 8192)",
     CLI_CUSTOM, 0, 0, 0, parse_seqs, "a list of long, short, decode"},
    {"seqlen", "N", "sequence length of the long class (keys of decode)",
     TUNE(CLI_INT, seqlen), 1, 1 << 20, NULL, NULL},
    {"budget", "SECONDS", "time budget of the whole run (default 300); split\n"
                          "evenly over the shapes left",
     CLI_CUSTOM, 0, 0, 0, parse_budget, "a positive number of seconds"},
    {"max-candidates", "N", "candidates per shape and path, nearest the\n"
                            "path's table first (default 0: all legal ones)",
     TUNE(CLI_INT, max_candidates), 0, MAX_CANDIDATES, NULL, NULL},
    {"reps", "N", "timed calls per candidate, median (default 5)",
     TUNE(CLI_INT, reps), 1, 1000, NULL, NULL},
    {"warmup", "N", "untimed calls first (default 2)", TUNE(CLI_INT, warmup),
     0, 100, NULL, NULL},
    {"output", "FILE", "results (default flashcl-tuning.json); a rerun with\n"
                       "the same file skips what it has measured",
     CLI_CUSTOM, 0, 0, 0, parse_output, "a file name (not starting with -)"},
    {"fresh", NULL, "ignore the results already in --output",
     TUNE(CLI_FLAG, fresh), 0, 0, NULL, NULL},
    {"inject-wrong", NULL, "testing: add a deliberately wrong portable\n"
                           "candidate per shape (output scaled by 1.0625),\n"
                           "which the oracle check must reject",
     TUNE(CLI_FLAG, inject_wrong), 0, 0, NULL, NULL},
    {"no-progress", NULL, "no progress on stderr", TUNE(CLI_FLAG, no_progress),
     0, 0, NULL, NULL},
    {"backward", NULL, "tune the backward on backward calls instead of\n"
                       "the forward paths: path nv_mma_bwd (the\n"
                       "tensor-core tiles: fp16/bf16 on NVIDIA cc >= 8.0,\n"
                       "or FLASHCL_NV_EMULATE=1) where it runs the shape,\n"
                       "portable_bwd (the portable kernels' switches)\n"
                       "elsewhere (--path is ignored; default dtype CPU\n"
                       "fp32, GPU fp16,bf16)",
     TUNE(CLI_FLAG, backward), 0, 0, NULL, NULL},
    CLI_OPTIONS_END,
};

const cli_command tune_command = {
    "tune", "search each path's tiles here, write a tuning database file",
    "For each shape (dtype x head dim x causal x sequence class) and each\n"
    "path that runs it here, every legal combination of the path's\n"
    "tunables is forced (flashcl_context_force_tiles), checked against the\n"
    "float64 oracle on a problem of the same shape class (B=1 H=2 300x300;\n"
    "decode: the timed problem itself) and timed by OpenCL profiling events\n"
    "(median of --reps after --warmup) on the timed problem. The path's own\n"
    "table is measured first, as the baseline. Illegal combinations are\n"
    "refused by the path before they compile. The JSON file (--output) is\n"
    "rewritten after every measured one: stop at any time and rerun the same\n"
    "command to resume. It lists the device, driver, date, command, every\n"
    "candidate (time, or why illegal/invalid) and the winners, which\n"
    "FLASHCL_TUNING_FILE reads as a user database and\n"
    "scripts/tuning_db.py compiles into the library (docs/tuning.md).\n"
    "--backward tunes the backward the same way: each candidate's dQ, dK\n"
    "and dV checked against the float64 gradient oracle, its backward call\n"
    "timed by events after the forward it reads; winners are filed under\n"
    "path nv_mma_bwd where the tensor-core backward runs the shape, else\n"
    "portable_bwd (the portable backward's TUNABLE switches).\n"
    "FLASHCL_TILES, FLASHCL_NV_TILE, FLASHCL_NVB_TILE, FLASHCL_SPLIT_TILE,\n"
    "FLASHCL_SPLIT_LANES, FLASHCL_SPLIT_MMA, FLASHCL_BWD_ROWS and\n"
    "FLASHCL_BWD_FUSED_DQ are unset for the run.\n",
    tune_table};

/* ---- shapes --------------------------------------------------------- */

typedef struct tune_shape {
    flashcl_dtype dtype;
    int head_dim, causal, seq; /* seq: index into seq_names */
    problem_spec timed, check;
} tune_shape;

static problem_spec spec_of(int batch, int heads, int q, int k, int d,
                            int causal)
{
    problem_spec s;
    memset(&s, 0, sizeof s);
    s.name = "tune";
    s.batch = batch;
    s.heads_q = s.heads_kv = heads;
    s.seqlen_q = q;
    s.seqlen_k = k;
    s.head_dim = s.head_dim_v = d;
    s.causal = causal;
    return s;
}

static void make_shape(const tune_options *o, bool cpu, tune_shape *s)
{
    const int d = s->head_dim, c = s->causal;
    const int n = o->seqlen;
    switch (s->seq) {
    case 0:
        s->timed = cpu ? spec_of(1, 4, n ? n : 1024, n ? n : 1024, d, c)
                       : spec_of(4, 16, n ? n : 4096, n ? n : 4096, d, c);
        s->check = spec_of(1, 2, 300, 300, d, c);
        break;
    case 1:
        s->timed = cpu ? spec_of(4, 4, 256, 256, d, c)
                       : spec_of(32, 16, 512, 512, d, c);
        s->check = spec_of(1, 2, 300, 300, d, c);
        break;
    default:
        s->timed = cpu ? spec_of(8, 8, 1, n ? n : 2048, d, c)
                       : spec_of(32, 16, 1, n ? n : 8192, d, c);
        s->check = s->timed; /* a smaller one would split the keys */
        break;
    }
}

/* ---- results -------------------------------------------------------- */

typedef struct candidate {
    char path[16], dtype[8], seq[8], params[PARAMS_CAP], shape[48];
    int head_dim, head_dim_padded, causal;
    char status[12]; /* ok, invalid, illegal, error */
    double median_ms, min_ms, compile_ms, error_o;
    /* the median of the confirmation rounds (NaN: not confirmed) */
    double confirm_ms;
    bool table; /* the path's own table (the baseline) */
    char reason[200];
    char date[24]; /* when it was measured (UTC) */
} candidate;

typedef struct tune_state {
    const tune_options *o;
    flashcl_context *ctx;
    flashcl_device_info dev;
    char command[1024], date[32];
    candidate *cands;
    int count;
    double start_ms;
    bool complete;  /* every candidate of every shape measured */
    bool cut_short; /* the budget stopped a shape */
} tune_state;

static void shape_text(const problem_spec *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%dx%dx%dx%d", s->batch, s->heads_q, s->seqlen_q,
             s->seqlen_k);
}

static const candidate *find_result(const tune_state *t, const candidate *c)
{
    for (int i = 0; i < t->count; ++i) {
        const candidate *r = &t->cands[i];
        if (!strcmp(r->path, c->path) && !strcmp(r->dtype, c->dtype) &&
            !strcmp(r->seq, c->seq) && !strcmp(r->params, c->params) &&
            !strcmp(r->shape, c->shape) && r->head_dim == c->head_dim &&
            r->causal == c->causal && r->table == c->table)
            return r;
    }
    return NULL;
}

static bool same_group(const candidate *a, const candidate *b)
{
    return !strcmp(a->path, b->path) && !strcmp(a->dtype, b->dtype) &&
           !strcmp(a->seq, b->seq) && !strcmp(a->shape, b->shape) &&
           a->head_dim == b->head_dim && a->causal == b->causal;
}

/* The time a candidate is ranked by: its confirmation median where its
 * (path, shape) was confirmed, else its first median. */
static double rank_ms(const candidate *c, bool confirmed)
{
    return confirmed ? c->confirm_ms : c->median_ms;
}

static bool group_confirmed(const tune_state *t, const candidate *key)
{
    for (int i = 0; i < t->count; ++i)
        if (same_group(&t->cands[i], key) && isfinite(t->cands[i].confirm_ms))
            return true;
    return false;
}

/* The best valid candidate of (path, shape), its time and its table's
 * time; the table's own run (params "": the path's table) when nothing
 * beat it. */
static const candidate *winner_of(const tune_state *t, const candidate *key,
                                  double *win_ms, double *table_ms)
{
    const bool confirmed = group_confirmed(t, key);
    const candidate *best = NULL, *table = NULL;
    *table_ms = *win_ms = NAN;
    for (int i = 0; i < t->count; ++i) {
        const candidate *r = &t->cands[i];
        if (!same_group(r, key) || strcmp(r->status, "ok") ||
            !isfinite(rank_ms(r, confirmed)))
            continue;
        if (r->table)
            table = r;
        else if (!best || rank_ms(r, confirmed) < rank_ms(best, confirmed))
            best = r;
    }
    if (table)
        *table_ms = rank_ms(table, confirmed);
    /* the table's own tiles, found again by the search, are the table */
    const bool same_as_table =
        table && best && !strcmp(best->reason, table->reason);
    const candidate *w =
        table && (!best || same_as_table ||
                  rank_ms(table, confirmed) <= rank_ms(best, confirmed))
            ? table
            : best;
    if (w)
        *win_ms = rank_ms(w, confirmed);
    return w;
}

static void write_candidate(json_writer *j, const candidate *c)
{
    json_object(j, NULL);
    json_string(j, "path", c->path);
    json_string(j, "dtype", c->dtype);
    json_integer(j, "head_dim", c->head_dim);
    json_integer(j, "head_dim_padded", c->head_dim_padded);
    json_integer(j, "causal", c->causal);
    json_string(j, "seq", c->seq);
    json_string(j, "shape", c->shape);
    json_string(j, "params", c->params);
    json_bool(j, "table", c->table);
    json_string(j, "status", c->status);
    json_number(j, "median_ms", c->median_ms);
    json_number(j, "min_ms", c->min_ms);
    json_number(j, "compile_ms", c->compile_ms);
    json_number(j, "error_o", c->error_o);
    json_number(j, "confirm_ms", c->confirm_ms);
    json_string(j, "reason", c->reason);
    json_string(j, "date", c->date);
    json_close(j);
}

static void write_winners(json_writer *j, const tune_state *t)
{
    json_array(j, "winners");
    for (int i = 0; i < t->count; ++i) {
        const candidate *c = &t->cands[i];
        double table_ms, win_ms;
        if (!c->table || winner_of(t, c, &win_ms, &table_ms) == NULL)
            continue;
        const candidate *w = winner_of(t, c, &win_ms, &table_ms);
        json_object(j, NULL);
        json_string(j, "path", w->path);
        json_string(j, "dtype", w->dtype);
        json_string(j, "vendor", t->dev.tuning_vendor);
        json_string(j, "arch", t->dev.tuning_arch);
        json_string(j, "device", t->dev.tuning_device);
        json_integer(j, "head_dim", w->head_dim_padded);
        json_integer(j, "causal", w->causal);
        json_string(j, "seq", w->seq);
        json_string(j, "params", w->params);
        json_number(j, "median_ms", win_ms);
        json_number(j, "table_ms", table_ms);
        json_bool(j, "confirmed", group_confirmed(t, w));
        json_string(j, "shape", w->shape);
        json_string(j, "date", w->date[0] ? w->date : t->date);
        json_string(j, "measured_on", t->dev.name);
        json_close(j);
    }
    json_close(j);
}

static void write_device(json_writer *j, const flashcl_device_info *d)
{
    json_object(j, "device");
    json_string(j, "name", d->name);
    json_string(j, "vendor", d->vendor);
    json_string(j, "platform", d->platform);
    json_string(j, "driver", d->driver_version);
    json_string(j, "tuning_vendor", d->tuning_vendor);
    json_string(j, "tuning_arch", d->tuning_arch);
    json_string(j, "tuning_device", d->tuning_device);
    json_close(j);
}

/* The whole file, through a temporary one and a rename (a reader never
 * sees half of it, a kill loses at most the candidate being measured). */
static bool save(const tune_state *t)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", t->o->output);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return false;
    json_writer j;
    json_begin(&j, f, 2);
    json_object(&j, NULL);
    json_string(&j, "format", "flashcl-tuning-1");
    write_device(&j, &t->dev);
    json_string(&j, "date", t->date);
    json_string(&j, "command", t->command);
    json_number(&j, "budget_s", t->o->budget);
    json_number(&j, "elapsed_s", (timing_host_ms() - t->start_ms) / 1e3);
    json_bool(&j, "complete", t->complete);
    json_array(&j, "candidates");
    for (int i = 0; i < t->count; ++i)
        write_candidate(&j, &t->cands[i]);
    json_close(&j);
    write_winners(&j, t);
    json_close(&j);
    json_end(&j);
    const bool ok = !ferror(f);
    return (fclose(f) == 0) & ok && rename(tmp, t->o->output) == 0;
}

/* Candidates of an earlier run of the same device (resume). */
static void load_previous(tune_state *t)
{
    char *text = json_read_file(t->o->output, 64u << 20);
    if (!text)
        return;
    const char *dev = strstr(text, "\"tuning_device\"");
    char key[160];
    snprintf(key, sizeof key, "\"tuning_device\": \"%s\"",
             t->dev.tuning_device);
    if (!dev || strncmp(dev, key, strlen(key)) != 0) {
        fprintf(stderr, "flashcl tune: %s is another device's: not resumed "
                "(it will be overwritten)\n", t->o->output);
        free(text);
        return;
    }
    const char *b, *e;
    for (const char *at = json_array_start(text, "candidates");
         at && t->count < MAX_CANDIDATES && json_next_object(&at, &b, &e);) {
        candidate *c = &t->cands[t->count];
        memset(c, 0, sizeof *c);
        double v = 0;
        json_get_string(b, e, "path", c->path, sizeof c->path);
        json_get_string(b, e, "dtype", c->dtype, sizeof c->dtype);
        json_get_string(b, e, "seq", c->seq, sizeof c->seq);
        json_get_string(b, e, "shape", c->shape, sizeof c->shape);
        json_get_string(b, e, "params", c->params, sizeof c->params);
        json_get_string(b, e, "status", c->status, sizeof c->status);
        json_get_string(b, e, "reason", c->reason, sizeof c->reason);
        json_get_string(b, e, "date", c->date, sizeof c->date);
        c->head_dim = json_get_number(b, e, "head_dim", &v) ? (int)v : 0;
        c->head_dim_padded =
            json_get_number(b, e, "head_dim_padded", &v) ? (int)v : 0;
        c->causal = json_get_number(b, e, "causal", &v) ? (int)v : 0;
        c->median_ms = json_get_number(b, e, "median_ms", &v) ? v : NAN;
        c->min_ms = json_get_number(b, e, "min_ms", &v) ? v : NAN;
        c->compile_ms = json_get_number(b, e, "compile_ms", &v) ? v : NAN;
        c->error_o = json_get_number(b, e, "error_o", &v) ? v : NAN;
        c->confirm_ms = json_get_number(b, e, "confirm_ms", &v) ? v : NAN;
        c->table = json_get_true(b, e, "table");
        if (c->path[0] && c->status[0])
            ++t->count;
    }
    free(text);
}

/* ---- measuring ------------------------------------------------------ */

static void utc_now(char *buf, size_t cap)
{
    const time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &utc);
}

typedef struct timed_call {
    flashcl_context *ctx;
    const flashcl_attention_desc *desc;
} timed_call;

/* Device time of one call: a marker just ahead of it to the end of its
 * last kernel (covers a path's several kernels). */
static int one_call(void *arg, double *ms)
{
    const timed_call *t = arg;
    cl_command_queue queue = flashcl_context_queue(t->ctx);
    cl_event before = NULL, done = NULL;
    if (clEnqueueMarkerWithWaitList(queue, 0, NULL, &before) != CL_SUCCESS)
        return (int)FLASHCL_ERROR_OPENCL;
    flashcl_status status =
        flashcl_attention_forward(t->ctx, queue, t->desc, 0, NULL, &done);
    if (status == FLASHCL_SUCCESS && clWaitForEvents(1, &done) != CL_SUCCESS)
        status = FLASHCL_ERROR_OPENCL;
    *ms = status == FLASHCL_SUCCESS ? timing_interval_ms(before, done) : -1;
    clReleaseEvent(before);
    if (done)
        clReleaseEvent(done);
    if (status == FLASHCL_SUCCESS && *ms < 0)
        status = FLASHCL_ERROR_OPENCL; /* no profiling on this queue */
    return (int)status;
}

/* What one shape needs: its problems and the oracle's answer. */
typedef struct shape_run {
    tune_shape shape;
    problem timed, check;
    reference_result ref;
    bool ready;
} shape_run;

static void candidate_key(const shape_run *r, const char *path,
                          const char *params, bool table, candidate *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    snprintf(c->dtype, sizeof c->dtype, "%s", dtype_name(r->shape.dtype));
    snprintf(c->seq, sizeof c->seq, "%s", seq_names[r->shape.seq]);
    snprintf(c->params, sizeof c->params, "%s", params);
    shape_text(&r->shape.timed, c->shape, sizeof c->shape);
    c->head_dim = r->shape.head_dim;
    c->causal = r->shape.causal;
    c->table = table;
    c->median_ms = c->min_ms = c->compile_ms = c->error_o = NAN;
    c->confirm_ms = NAN;
}

static bool same_tiles(const flashcl_variant_info *a,
                       const flashcl_variant_info *b)
{
    return a->block_m == b->block_m && a->block_n == b->block_n &&
           a->work_group_size == b->work_group_size &&
           a->vector_width == b->vector_width && !strcmp(a->path, b->path);
}

static bool fail(candidate *c, const char *status, const char *what,
                 flashcl_context *ctx)
{
    snprintf(c->status, sizeof c->status, "%s", status);
    snprintf(c->reason, sizeof c->reason, "%s%s%.150s", what,
             ctx ? ": " : "", ctx ? flashcl_context_last_error(ctx) : "");
    return false;
}

/* A tunable's value in the tiles describe reports; false for the others. */
static bool option_value(const char *name, const flashcl_variant_info *v,
                         int *value);

static bool tiles_value(const char *name, const flashcl_variant_info *v,
                        int *value)
{
    if (!strcmp(name, "block_m"))
        *value = v->block_m;
    else if (!strcmp(name, "block_n"))
        *value = v->block_n;
    else if (!strcmp(name, "vec"))
        *value = v->vector_width;
    else if (!strcmp(name, "warps"))
        *value = v->work_group_size / 32;
    else if (!strcmp(name, "wg")) /* split_kv */
        *value = v->work_group_size;
    else if (!strcmp(name, "warpgroups") && !strcmp(v->path, "nv_wgmma")) {
        /* the consumers: the warp-specialized schedule adds a producer */
        int ws = 0;
        option_value("ws", v, &ws);
        *value = v->work_group_size / 128 - (ws > 0 ? 1 : 0);
    }
    else
        return false;
    return true;
}

/* The value of a tunable the tiles do not show, from the build options'
 * "-D..._<NAME>=<value>" (nv_wgmma's ring, lag, sahead, overlap,
 * maxnreg); false when no define has its name. */
static bool option_value(const char *name, const flashcl_variant_info *v,
                         int *value)
{
    char key[40] = "_";
    size_t n = 1;
    for (const char *c = name; *c && n + 2 < sizeof key; ++c)
        key[n++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
    key[n++] = '=';
    key[n] = '\0';
    const char *at = strstr(v->build_options, key);
    return at && sscanf(at + n, "%d", value) == 1;
}

/* The table's value of a tunable, from what describe reports; false when
 * it does not say. */
static bool table_value(const char *name, const flashcl_variant_info *v,
                        int *value)
{
    return tiles_value(name, v, value) || option_value(name, v, value);
}

/* The planned values of the path's tunables the tiles do not show (the
 * wgmma schedule, the split-KV lane kernel's unroll and prefetch, and
 * the split count the split-KV groups give), so that two schedules on the
 * same tiles differ in `reason` (which tells the table's own tiles found
 * again by the search). */
static void append_schedule(candidate *c, const flashcl_variant_info *info)
{
    const bool split = !strcmp(c->path, "split_kv");
    flashcl_tunable t;
    for (int i = 0; flashcl_path_tunable(c->path, i, &t) == FLASHCL_SUCCESS;
         ++i) {
        int v = 0;
        const size_t len = strlen(c->reason);
        if (!tiles_value(t.name, info, &v) &&
            (split || !strcmp(c->path, "nv_wgmma")) &&
            option_value(t.name, info, &v))
            snprintf(c->reason + len, sizeof c->reason - len, ", %s %d",
                     t.name, v);
    }
    const size_t len = strlen(c->reason);
    if (split)
        snprintf(c->reason + len, sizeof c->reason - len, ", %d split%s",
                 info->num_splits, info->num_splits == 1 ? "" : "s");
}

/* "ran warps 4, rows 32, ...": the backward's planned tunables, from
 * its build options (two sets that ran the same tiles say the same). */
static void backward_tiles_text(const char *path,
                                const flashcl_variant_info *info, char *buf,
                                size_t cap)
{
    flashcl_tunable tn;
    size_t len = (size_t)snprintf(buf, cap, "ran");
    for (int i = 0; flashcl_path_tunable(path, i, &tn) ==
                        FLASHCL_SUCCESS && len < cap;
         ++i) {
        int v = 0;
        if (option_value(tn.name, info, &v))
            len += (size_t)snprintf(buf + len, cap - len, "%s %s %d",
                                    i ? "," : "", tn.name, v);
    }
}

/* A set the plan took as forced, else "illegal" with the plan's why. */
static bool forced_taken(const flashcl_variant_info *info, candidate *c,
                         flashcl_context *ctx)
{
    if (!strncmp(info->tuning, "forced candidate", 16))
        return true;
    /* the why, not the set again (the candidate's params are it) */
    const char *why = strstr(flashcl_context_last_error(ctx), " refused for ");
    if (!why)
        return fail(c, "illegal", "refused by the path", ctx);
    snprintf(c->status, sizeof c->status, "illegal");
    snprintf(c->reason, sizeof c->reason, "refused by the path:%.170s",
             why + 12);
    return false;
}

/* The backward's device time on the timed problem (the forward it reads
 * first, untimed in this figure), median of --reps after --warmup; NaN
 * when a call fails. */
static double backward_median(tune_state *t, shape_run *r)
{
    backward_timing bt;
    char why[200];
    return time_backward(t->ctx, &r->timed, FLASHCL_BACKEND_FUSED,
                         t->o->warmup, t->o->reps, &bt, why,
                         sizeof why) == FLASHCL_SUCCESS
               ? bt.backward_ms
               : NAN;
}

/* The candidate's tiles forced, and the timed problem's plan (the
 * backward's when t->o->backward) described into *info; false (c failed)
 * when either fails. */
static bool force_and_describe(tune_state *t, shape_run *r,
                               const char *forced, candidate *c,
                               flashcl_variant_info *info)
{
    flashcl_attention_desc timed = problem_desc(&r->timed,
                                                FLASHCL_BACKEND_FUSED);
    const flashcl_status described =
        flashcl_context_force_tiles(t->ctx, c->path, forced) !=
                FLASHCL_SUCCESS
            ? FLASHCL_ERROR_INVALID_VALUE
        : t->o->backward
            ? flashcl_describe_backward(t->ctx, &timed, NULL, info)
            : flashcl_describe_variant(t->ctx, &timed, info);
    if (described != FLASHCL_SUCCESS)
        return fail(c, "error", "describe", t->ctx);
    c->head_dim_padded = info->head_dim_padded;
    return true;
}

/* measure's backward (--backward): forces the set on its backward key,
 * checks dQ, dK and dV of the check problem against the float64 gradient
 * oracle (its first call, the kernels' compile included, is compile_ms),
 * then times the backward alone on the timed problem. */
static bool measure_backward(tune_state *t, shape_run *r, const char *forced,
                             candidate *c)
{
    flashcl_context *ctx = t->ctx;
    flashcl_attention_desc check = problem_desc(&r->check,
                                                FLASHCL_BACKEND_FUSED);
    flashcl_variant_info info, check_info;
    if (!force_and_describe(t, r, forced, c, &info))
        return false;
    if (strcmp(info.kernel_file, backward_kernel(c->path)) != 0)
        return fail(c, "gone", "the backward stopped running here", NULL);
    if (!forced_taken(&info, c, ctx))
        return false;
    /* The portable backward's hand rules size the work-group by the
     * sequence (no padding rows): the table's check runs its own rules,
     * a forced set's must run that set. */
    if (flashcl_describe_backward(ctx, &check, NULL, &check_info) !=
            FLASHCL_SUCCESS ||
        (!c->table &&
         strcmp(info.build_options, check_info.build_options) != 0))
        return fail(c, "error", "the check problem plans other tiles", NULL);
    backward_result res;
    char why[200] = "";
    memset(&res, 0, sizeof res);
    if (problem_run(ctx, &r->check, FLASHCL_BACKEND_FUSED) != FLASHCL_SUCCESS)
        return fail(c, "error", "check forward", ctx);
    if (problem_backward(ctx, &r->check, 1, &res, why, sizeof why) !=
        FLASHCL_SUCCESS)
        return fail(c, "error", why[0] ? why : "check backward", NULL);
    c->compile_ms = res.first_call_ms;
    c->error_o = fmax(res.dq_error, fmax(res.dk_error, res.dv_error));
    if (!res.pass) {
        snprintf(c->status, sizeof c->status, "invalid");
        snprintf(c->reason, sizeof c->reason,
                 "wrong gradients: dQ %.3g, dK %.3g, dV %.3g against the "
                 "float64 oracle (tolerance %.3g)", res.dq_error,
                 res.dk_error, res.dv_error, grad_tolerance(r->shape.dtype));
        return false;
    }
    c->median_ms = backward_median(t, r);
    if (!isfinite(c->median_ms))
        return fail(c, "error", "timing", ctx);
    snprintf(c->status, sizeof c->status, "ok");
    backward_tiles_text(c->path, &info, c->reason, sizeof c->reason);
    return true;
}

/* Forces, plans, compiles, checks and times one candidate into *c. */
static bool measure(tune_state *t, shape_run *r, const char *forced,
                    candidate *c)
{
    if (t->o->backward)
        return measure_backward(t, r, forced, c);
    flashcl_context *ctx = t->ctx;
    flashcl_attention_desc timed = problem_desc(&r->timed,
                                                FLASHCL_BACKEND_FUSED);
    flashcl_attention_desc check = problem_desc(&r->check,
                                                FLASHCL_BACKEND_FUSED);
    flashcl_variant_info info, check_info;
    if (!force_and_describe(t, r, forced, c, &info))
        return false;
    /* path_runs saw the path run this shape: it stopped (nv_wgmma after a
     * failed patched build falls back for the rest of the process) */
    if (strcmp(info.path, c->path) != 0)
        return fail(c, "gone", "the path stopped running here", NULL);
    if (!forced_taken(&info, c, ctx))
        return false;
    if (flashcl_prepare(ctx, &timed, &c->compile_ms) != FLASHCL_SUCCESS)
        return fail(c, "error", "compile", ctx);
    if (flashcl_describe_variant(ctx, &check, &check_info) !=
            FLASHCL_SUCCESS ||
        !same_tiles(&info, &check_info))
        return fail(c, "error", "the check problem plans other tiles", NULL);
    if (problem_run(ctx, &r->check, FLASHCL_BACKEND_FUSED) != FLASHCL_SUCCESS)
        return fail(c, "error", "check run", ctx);
    const error_pair e = problem_error(&r->check, r->ref.o, r->ref.lse);
    c->error_o = e.o;
    if (!within_tolerance(e, r->shape.dtype)) {
        snprintf(c->status, sizeof c->status, "invalid");
        snprintf(c->reason, sizeof c->reason,
                 "wrong result: O error %.3g, LSE error %.3g against the "
                 "float64 oracle (tolerance %.3g / %.3g)",
                 e.o, e.lse, o_tolerance(r->shape.dtype),
                 lse_tolerance(r->shape.dtype));
        return false;
    }
    timed_call call = {ctx, &timed};
    timing_result time;
    const int code = timing_repeat(t->o->warmup, t->o->reps, one_call, &call,
                                   &time);
    if (code != 0)
        return fail(c, "error", "timing", ctx);
    c->median_ms = time.median_ms;
    c->min_ms = time.min_ms;
    snprintf(c->status, sizeof c->status, "ok");
    snprintf(c->reason, sizeof c->reason, "ran %dx%d tiles, work-group %d, "
             "vector width %d", info.block_m, info.block_n,
             info.work_group_size, info.vector_width);
    append_schedule(c, &info);
    return true;
}

/* ---- candidates ----------------------------------------------------- */

typedef struct space {
    flashcl_tunable t[MAX_TUNABLES];
    int count;
} space;

static void read_space(const char *path, space *s)
{
    memset(s, 0, sizeof *s);
    while (s->count < MAX_TUNABLES &&
           flashcl_path_tunable(path, s->count, &s->t[s->count]) ==
               FLASHCL_SUCCESS)
        ++s->count;
}


typedef struct ranked {
    char params[PARAMS_CAP];
    double distance;
    /* ties: changes of the first declared tunables first (a path lists
     * its most promising first), then enumeration order (qsort is not
     * stable) */
    unsigned changed; /* bit i: tunable i differs from the table */
    int order;
} ranked;

static int by_distance(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    if (x->changed != y->changed)
        return x->changed < y->changed ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

/* Every combination of the space, nearest the table's tiles first (log2
 * steps), so that a short budget explores around the known start. */
static int enumerate(const space *s, const flashcl_variant_info *table,
                     ranked *out, int cap)
{
    int n = 0, index[MAX_TUNABLES] = {0};
    for (;;) {
        if (n == cap)
            break;
        ranked *r = &out[n];
        r->order = n++;
        r->changed = 0;
        r->params[0] = '\0';
        r->distance = 0;
        for (int i = 0; i < s->count; ++i) {
            const int v = s->t[i].values[index[i]];
            int base = 0;
            const bool known = table_value(s->t[i].name, table, &base);
            size_t len = strlen(r->params);
            snprintf(r->params + len, sizeof r->params - len, "%s%s=%d",
                     i ? "," : "", s->t[i].name, v);
            if (!known || v != base)
                r->changed |= 1u << i;
            r->distance += known && v == base          ? 0
                           : known && base > 0 && v > 0 ? fabs(log2((double)v / base))
                                                        : 1;
        }
        int i = 0;
        while (i < s->count && ++index[i] == s->t[i].count)
            index[i++] = 0;
        if (i == s->count)
            break;
    }
    qsort(out, (size_t)n, sizeof *out, by_distance);
    return n;
}

/* ---- the run -------------------------------------------------------- */

static void apply_defaults(tune_options *o, bool cpu)
{
    if (!o->num_dtypes && o->backward && !cpu) { /* the tensor cores' */
        o->dtypes[o->num_dtypes++] = FLASHCL_DTYPE_FP16;
        o->dtypes[o->num_dtypes++] = FLASHCL_DTYPE_BF16;
    }
    if (!o->num_dtypes) {
        o->dtypes[o->num_dtypes++] = cpu ? FLASHCL_DTYPE_FP32
                                         : FLASHCL_DTYPE_FP16;
        if (!cpu)
            o->dtypes[o->num_dtypes++] = FLASHCL_DTYPE_BF16;
    }
    if (!o->num_head_dims) {
        o->head_dims[o->num_head_dims++] = 64;
        if (!cpu)
            o->head_dims[o->num_head_dims++] = 128;
    }
    if (!o->num_causal) {
        o->causal_modes[o->num_causal++] = 0;
        if (!cpu)
            o->causal_modes[o->num_causal++] = 1;
    }
    if (!o->seqs_given)
        o->seqs[0] = true;
    if (!o->paths_given)
        for (int i = 0; i < num_paths(); ++i)
            o->paths[i] = !forced_only(flashcl_path_name(i));
}

static bool shape_prepare(tune_state *t, shape_run *r, char *why, size_t cap)
{
    if (problem_create(t->ctx, &r->shape.timed, r->shape.dtype, 1515,
                       &r->timed, why, cap) != FLASHCL_SUCCESS)
        return false;
    if (problem_create(t->ctx, &r->shape.check, r->shape.dtype, 2727,
                       &r->check, why, cap) != FLASHCL_SUCCESS) {
        problem_release(&r->timed);
        return false;
    }
    r->ref = problem_reference(&r->check);
    if (!r->ref.o || !r->ref.lse) {
        snprintf(why, cap, "out of host memory for the oracle");
        reference_free(&r->ref);
        problem_release(&r->check);
        problem_release(&r->timed);
        return false;
    }
    r->ready = true;
    return true;
}

static void shape_release(shape_run *r)
{
    if (!r->ready)
        return;
    reference_free(&r->ref);
    problem_release(&r->check);
    problem_release(&r->timed);
    r->ready = false;
}

/* Measures (or finds from an earlier run) one candidate; false when the
 * result table is full or the path stopped running the shape. */
static bool run_candidate(tune_state *t, shape_run *r, const char *path,
                          const char *params, bool table, const char *forced,
                          const candidate **result)
{
    candidate key;
    candidate_key(r, path, params, table, &key);
    if ((*result = find_result(t, &key)) != NULL)
        return true;
    if (t->count == MAX_CANDIDATES)
        return false;
    utc_now(key.date, sizeof key.date);
    measure(t, r, forced, &key);
    if (!strcmp(key.status, "gone")) { /* not kept: a rerun tries again */
        fprintf(stderr, "flashcl tune: %s stopped running %s here; its "
                "search for this shape ends (rerun to resume)\n", path,
                key.shape);
        return false;
    }
    t->cands[t->count] = key;
    *result = &t->cands[t->count++];
    /* an illegal one costs nothing to find again: the file is rewritten
     * after measured ones only (the final save has them all) */
    if (strcmp(key.status, "illegal") != 0 && !save(t))
        fprintf(stderr, "flashcl tune: cannot write %s\n", t->o->output);
    return true;
}

/* Whether `path` runs the shape here; records it when not, with why in
 * `why` (NULL: not wanted). Needs only r->timed's spec and dtype. */
static bool path_runs(tune_state *t, shape_run *r, const char *path,
                      flashcl_variant_info *table, char *why, size_t why_cap)
{
    flashcl_attention_desc desc = problem_desc(&r->timed,
                                               FLASHCL_BACKEND_FUSED);
    candidate key;
    candidate_key(r, path, "", true, &key);
    memset(table, 0, sizeof *table);
    if (t->o->backward) {
        if (flashcl_context_force_tiles(t->ctx, path, "") ==
                FLASHCL_SUCCESS &&
            flashcl_describe_backward(t->ctx, &desc, NULL, table) ==
                FLASHCL_SUCCESS &&
            !strcmp(table->kernel_file, backward_kernel(path)))
            return true;
        /* the other backward key's shape: its own, not a skip to file */
        for (int i = 0; i < BACKWARD_KEYS; ++i)
            if (strcmp(path, backward_keys[i].name) != 0 &&
                !strcmp(table->kernel_file, backward_keys[i].kernel_file)) {
                if (why)
                    snprintf(why, why_cap, "the %s backward runs it here",
                             backward_keys[i].name);
                return false;
            }
        snprintf(key.reason, sizeof key.reason, "%.190s",
                 table->skipped[0] ? table->skipped
                                   : flashcl_context_last_error(t->ctx));
    } else if (flashcl_context_force_tiles(t->ctx, path, "") ==
                   FLASHCL_SUCCESS &&
        flashcl_describe_variant(t->ctx, &desc, table) == FLASHCL_SUCCESS &&
        !strcmp(table->path, path)) {
        if (strcmp(path, "split_kv") != 0 &&
            !strcmp(table->kernel_file, "flash_split.cl")) {
            snprintf(key.reason, sizeof key.reason, "the split-KV kernels "
                     "run it (%d parts): tuned as path split_kv",
                     table->num_splits);
        } else {
            return true;
        }
    } else {
        /* the path's own part of "a: why; b: why" */
        char mine[40];
        snprintf(mine, sizeof mine, "%s: ", path);
        const char *at = strstr(table->skipped, mine);
        at = at ? at + strlen(mine) : table->skipped;
        const char *stop = strstr(at, "; ");
        snprintf(key.reason, sizeof key.reason, "%.*s",
                 (int)(stop ? (size_t)(stop - at) : strlen(at)), at);
        if (!key.reason[0])
            snprintf(key.reason, sizeof key.reason, "%s",
                     flashcl_context_last_error(t->ctx));
    }
    if (why)
        snprintf(why, why_cap, "%s", key.reason);
    if (!find_result(t, &key) && t->count < MAX_CANDIDATES) {
        snprintf(key.status, sizeof key.status, "unsupported");
        t->cands[t->count++] = key;
    }
    return false;
}

/* A measured candidate's median once more (NaN: a call failed). */
static double time_again(tune_state *t, shape_run *r, const candidate *c)
{
    if (flashcl_context_force_tiles(t->ctx, c->path, c->params) !=
        FLASHCL_SUCCESS)
        return NAN;
    if (t->o->backward)
        return backward_median(t, r);
    flashcl_attention_desc desc = problem_desc(&r->timed,
                                               FLASHCL_BACKEND_FUSED);
    timed_call call = {t->ctx, &desc};
    timing_result time;
    return timing_repeat(t->o->warmup, t->o->reps, one_call, &call, &time) ==
                   0
               ? time.median_ms
               : NAN;
}

#define CONFIRM_TOP 3
#define CONFIRM_ROUNDS 3

/* The table and the CONFIRM_TOP fastest candidates of its (path, shape)
 * timed again, interleaved, CONFIRM_ROUNDS rounds: a shared machine's
 * load moves during a search, and this ranks them under the same load.
 * Each gets the median of its rounds' medians. */
static void confirm(tune_state *t, shape_run *r, candidate *table)
{
    candidate *picked[CONFIRM_TOP + 1] = {table};
    int n = 1;
    if (group_confirmed(t, table) || strcmp(table->status, "ok"))
        return;
    for (int k = 0; k < CONFIRM_TOP; ++k) {
        candidate *best = NULL;
        for (int i = 0; i < t->count; ++i) {
            candidate *c = &t->cands[i];
            bool taken = false;
            for (int j = 0; j < n; ++j)
                taken |= picked[j] == c;
            if (!taken && !c->table && same_group(c, table) &&
                !strcmp(c->status, "ok") &&
                (!best || c->median_ms < best->median_ms))
                best = c;
        }
        if (best)
            picked[n++] = best;
    }
    if (n < 2)
        return;
    double samples[CONFIRM_TOP + 1][CONFIRM_ROUNDS];
    for (int round = 0; round < CONFIRM_ROUNDS; ++round)
        for (int i = 0; i < n; ++i)
            samples[i][round] = time_again(t, r, picked[i]);
    for (int i = 0; i < n; ++i)
        picked[i]->confirm_ms = timing_median(samples[i], CONFIRM_ROUNDS);
    if (!save(t))
        fprintf(stderr, "flashcl tune: cannot write %s\n", t->o->output);
}

static void tune_path(tune_state *t, shape_run *r, const char *path,
                      double deadline, progress *bar, int step)
{
    flashcl_variant_info table;
    if (!path_runs(t, r, path, &table, NULL, 0))
        return;
    static ranked list[MAX_CANDIDATES];
    space s;
    read_space(path, &s);
    const int n = enumerate(&s, &table, list, MAX_CANDIDATES);
    const int limit = t->o->max_candidates ? t->o->max_candidates : n;
    const candidate *c;
    int done = 0;
    char label[96];
    snprintf(label, sizeof label, "%s %s D=%d%s %s", path,
             dtype_name(r->shape.dtype), r->shape.head_dim,
             r->shape.causal ? " causal" : "", seq_names[r->shape.seq]);
    if (!run_candidate(t, r, path, "", true, "", &c))
        return;
    progress_step(bar, step, "%s: table %.3f ms", label, c->median_ms);
    if (t->o->inject_wrong && !strcmp(path, "portable"))
        run_candidate(t, r, path, "debug_corrupt=1", false, "debug_corrupt=1",
                      &c);
    for (int i = 0; i < n && done < limit; ++i) {
        if (timing_host_ms() > deadline) {
            t->cut_short = true;
            break;
        }
        if (!run_candidate(t, r, path, list[i].params, false, list[i].params,
                           &c))
            break;
        if (strcmp(c->status, "illegal") != 0)
            ++done;
        progress_step(bar, step, "%s: %d/%d %s %s %.3f ms", label, i + 1, n,
                      list[i].params, c->status, c->median_ms);
    }
    candidate key, *baseline = NULL;
    candidate_key(r, path, "", true, &key);
    for (int i = 0; i < t->count && !baseline; ++i)
        if (t->cands[i].table && same_group(&t->cands[i], &key))
            baseline = &t->cands[i];
    if (baseline) {
        progress_step(bar, step, "%s: confirming the fastest", label);
        confirm(t, r, baseline);
    }
}

static void print_summary(const tune_state *t)
{
    printf("flashcl tune: %s (%s/%s/%s), %d candidates, %.0f s%s -> %s\n",
           t->dev.name, t->dev.tuning_vendor, t->dev.tuning_arch,
           t->dev.tuning_device, t->count,
           (timing_host_ms() - t->start_ms) / 1e3,
           t->complete ? "" : " (budget spent: rerun to resume)",
           t->o->output);
    int invalid = 0;
    for (int i = 0; i < t->count; ++i)
        invalid += !strcmp(t->cands[i].status, "invalid");
    printf("  %d invalid (wrong results, never chosen)\n", invalid);
    for (int i = 0; i < t->count; ++i) {
        const candidate *c = &t->cands[i];
        double table_ms, win_ms;
        const candidate *w =
            c->table ? winner_of(t, c, &win_ms, &table_ms) : NULL;
        if (w)
            printf("  %-8s %s D=%d %s %-6s %s: %s %.3f ms (table %.3f ms, "
                   "%.2fx%s)\n", w->path, w->dtype, w->head_dim,
                   w->causal ? "causal" : "non-causal", w->seq, w->shape,
                   w->table ? "the table's tiles" : w->params, win_ms,
                   table_ms, table_ms / win_ms,
                   group_confirmed(t, w) ? ", confirmed" : "");
    }
}

static void join_command(int argc, char **argv, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "flashcl");
    for (int i = 0; i < argc && len < cap; ++i)
        len += (size_t)snprintf(buf + len, cap - len, " %s", argv[i]);
}

#define MAX_SHAPES (4 * MAX_LIST * 2 * 3)

/* The shapes to tune, in order (dtype, head dim, causal, sequence). */
static int list_shapes(const tune_options *o, bool cpu, tune_shape *out)
{
    int n = 0;
    for (int di = 0; di < o->num_dtypes; ++di)
        for (int hi = 0; hi < o->num_head_dims; ++hi)
            for (int ci = 0; ci < o->num_causal; ++ci)
                for (int si = 0; si < 3; ++si) {
                    if (!o->seqs[si] || n == MAX_SHAPES)
                        continue;
                    tune_shape *s = &out[n++];
                    memset(s, 0, sizeof *s);
                    s->dtype = o->dtypes[di];
                    s->head_dim = o->head_dims[hi];
                    s->causal = o->causal_modes[ci];
                    s->seq = si;
                    make_shape(o, cpu, s);
                }
    return n;
}

/* Which (shape, path) pairs run here, asked before any buffer exists, so
 * that the progress counts only what runs; a path that cannot run gets a
 * line saying why (once for all shapes when the reason is the same).
 * Returns how many pairs run. */
static int plan_runs(tune_state *t, const tune_shape *shapes, int count,
                     bool runs[][MAX_PATHS])
{
    int total = 0;
    for (int p = 0; p < tuned_count(t->o); ++p) {
        if (!tuned_wanted(t->o, p))
            continue;
        static char why[MAX_SHAPES][200];
        int skipped = 0, same = 0, first = -1;
        for (int i = 0; i < count; ++i) {
            shape_run r;
            memset(&r, 0, sizeof r);
            r.shape = shapes[i];
            r.timed.spec = shapes[i].timed;
            r.timed.dtype = shapes[i].dtype;
            flashcl_variant_info table;
            runs[i][p] = path_runs(t, &r, tuned_name(t->o, p), &table, why[i],
                                   sizeof why[i]);
            total += runs[i][p];
            if (runs[i][p])
                continue;
            if (!skipped++)
                first = i;
            same += !strcmp(why[first], why[i]);
        }
        if (skipped && skipped == count && same == count)
            fprintf(stderr, "flashcl tune: skipped %s: %s\n", tuned_name(t->o, p),
                    why[first]);
        else
            for (int i = 0; skipped && i < count; ++i)
                if (!runs[i][p])
                    fprintf(stderr, "flashcl tune: skipped %s for %s D=%d%s "
                            "%s: %s\n",
                            tuned_name(t->o, p), dtype_name(shapes[i].dtype),
                            shapes[i].head_dim,
                            shapes[i].causal ? " causal" : "",
                            seq_names[shapes[i].seq], why[i]);
    }
    return total;
}

static void run_all(tune_state *t, bool cpu)
{
    const tune_options *o = t->o;
    const double end = t->start_ms + o->budget * 1e3;
    static tune_shape shapes[MAX_SHAPES];
    static bool runs[MAX_SHAPES][MAX_PATHS];
    const int count = list_shapes(o, cpu, shapes);
    int shapes_left = count, step = 0;
    progress bar;
    progress_begin(&bar, plan_runs(t, shapes, count, runs), !o->no_progress);
    t->complete = false; /* until the end (the file is saved as it goes) */
    for (int i = 0; i < count; ++i) {
        shape_run r;
        memset(&r, 0, sizeof r);
        r.shape = shapes[i];
        char why[256];
        int paths_left = 0;
        for (int p = 0; p < tuned_count(t->o); ++p)
            paths_left += runs[i][p];
        if (!paths_left) {
            --shapes_left;
            continue;
        }
        if (!shape_prepare(t, &r, why, sizeof why)) {
            fprintf(stderr, "flashcl tune: shape skipped: %s\n", why);
            step += paths_left;
            continue;
        }
        const double now = timing_host_ms();
        double shape_end = now + (end - now) / shapes_left--;
        for (int p = 0; p < tuned_count(t->o); ++p) {
            if (!runs[i][p])
                continue;
            const double at = timing_host_ms();
            tune_path(t, &r, tuned_name(t->o, p),
                      at + (shape_end - at) / paths_left--, &bar, ++step);
        }
        shape_release(&r);
    }
    progress_clear(&bar);
    t->complete = !t->cut_short;
    flashcl_context_force_tiles(t->ctx, NULL, NULL);
}

int cmd_tune(int argc, char **argv)
{
    common_options common = {0};
    tune_options o;
    memset(&o, 0, sizeof o);
    o.budget = 300;
    o.reps = 5;
    o.warmup = 2;
    o.output = "flashcl-tuning.json";
    int rc = cli_start(&tune_command, argc, argv, &common, &o);
    if (rc != CLI_GO_ON)
        return rc;
    if (o.seqlen && o.seqlen <= 512 && (o.seqs[0] || !o.seqs_given)) {
        /* the database files it under "long", which starts above 512 */
        usage_error("tune", "--seqlen %d is not a long sequence (above 512)",
                    o.seqlen);
        return EXIT_USAGE;
    }
    /* the run forces its own candidates */
    static const char *const knobs[] = {
        "FLASHCL_TILES",       "FLASHCL_NV_TILE",  "FLASHCL_NVB_TILE",
        "FLASHCL_SPLIT_TILE",  "FLASHCL_SPLIT_LANES", "FLASHCL_SPLIT_MMA",
        "FLASHCL_BWD_ROWS",    "FLASHCL_BWD_FUSED_DQ"};
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; ++i)
        unsetenv(knobs[i]);
    flashcl_context *ctx = open_device("tune", common.device, common.json,
                                       &rc);
    if (!ctx)
        return rc;
    tune_state t;
    memset(&t, 0, sizeof t);
    t.o = &o;
    t.ctx = ctx;
    t.cands = calloc(MAX_CANDIDATES, sizeof *t.cands);
    if (!t.cands || flashcl_context_device_info(ctx, &t.dev) !=
                        FLASHCL_SUCCESS) {
        free(t.cands);
        flashcl_context_release(ctx);
        return report_failure("tune", common.json, FLASHCL_ERROR_OUT_OF_MEMORY,
                              "no memory for the results", EXIT_DEVICE);
    }
    apply_defaults(&o, t.dev.is_cpu != 0);
    join_command(argc, argv, t.command, sizeof t.command);
    utc_now(t.date, sizeof t.date);
    t.start_ms = timing_host_ms();
    if (!o.fresh)
        load_previous(&t);
    run_all(&t, t.dev.is_cpu != 0);
    const bool saved = save(&t);
    if (common.json) {
        char *text = json_read_file(o.output, 64u << 20);
        if (text)
            fputs(text, stdout);
        free(text);
    } else {
        print_summary(&t);
    }
    free(t.cands);
    flashcl_context_release(ctx);
    if (!saved)
        return report_failure("tune", common.json, FLASHCL_ERROR_INVALID_VALUE,
                              "cannot write the output file", EXIT_FAILED);
    return EXIT_OK;
}
