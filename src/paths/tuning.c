/* The tuning database and the user's file (tuning.h; docs/tuning.md). */
#include "paths/tuning.h"

#include "core/core.h"
#include "core/json_scan.h"
#include "paths/path.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "paths/tuning_db.inc"

const tuning_entry *tuning_db_table(size_t *count)
{
    *count = TUNING_DB_COUNT;
    return tuning_db;
}

/* ---- parameter sets ------------------------------------------------- */

static bool known_name(const char *name, size_t len, const tunable *known,
                       size_t count, bool allow_debug)
{
    if (allow_debug && len == 13 && !strncmp(name, "debug_corrupt", 13))
        return true;
    for (size_t i = 0; i < count; ++i)
        if (strlen(known[i].name) == len && !strncmp(known[i].name, name, len))
            return true;
    return false;
}

bool tile_params_parse(const char *text, const tunable *known, size_t count,
                       bool allow_debug, tile_params *out, char *why,
                       size_t cap)
{
    memset(out, 0, sizeof *out);
    for (const char *at = text; *at;) {
        const char *comma = strchr(at, ',');
        const size_t len = comma ? (size_t)(comma - at) : strlen(at);
        const char *eq = memchr(at, '=', len);
        const size_t key = eq ? (size_t)(eq - at) : len;
        char *stop = NULL;
        const long value = eq ? strtol(eq + 1, &stop, 10) : 0;
        if (!eq || key == 0 || key >= sizeof out->names[0] ||
            !known_name(at, key, known, count, allow_debug) ||
            stop != at + len || stop == eq + 1 || value < 0 || value > 4096 ||
            out->count == TILE_PARAMS_MAX) {
            snprintf(why, cap, "\"%.*s\" is not a tunable of the path = a "
                     "non-negative integer", (int)len, at);
            return false;
        }
        memcpy(out->names[out->count], at, key);
        out->names[out->count][key] = '\0';
        out->values[out->count++] = (int)value;
        at += len + (comma ? 1 : 0);
    }
    return true;
}

int tile_params_get(const tile_params *t, const char *name, int fallback)
{
    for (int i = 0; i < t->count; ++i)
        if (!strcmp(t->names[i], name))
            return t->values[i];
    return fallback;
}

/* ---- device keys ---------------------------------------------------- */

void tuning_normalise_name(const char *name, char *out, size_t cap)
{
    size_t n = 0;
    bool dash = false;
    for (const char *s = name; *s && n + 1 < cap; ++s) {
        if (!strncmp(s, "(R)", 3) || !strncmp(s, "(r)", 3)) {
            s += 2;
            continue;
        }
        if (!strncmp(s, "(TM)", 4) || !strncmp(s, "(tm)", 4)) {
            s += 3;
            continue;
        }
        if (isalnum((unsigned char)*s)) {
            if (dash && n)
                out[n++] = '-';
            if (n + 1 < cap)
                out[n++] = (char)tolower((unsigned char)*s);
            dash = false;
        } else {
            dash = true;
        }
    }
    out[n] = '\0';
}

/* The host's ISA level: an OpenCL CPU device is the host's CPU. */
static const char *cpu_isa(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f"))
        return "avx512";
    if (__builtin_cpu_supports("avx2"))
        return "avx2";
    if (__builtin_cpu_supports("avx"))
        return "avx";
    return "sse";
#elif defined(__aarch64__)
    return "neon";
#else
    return "generic";
#endif
}

static bool has_word(const char *normalised, const char *word)
{
    return strstr(normalised, word) != NULL;
}

/* Intel GPU families by marketing name: the name is all OpenCL gives. */
static const char *intel_gpu_family(const char *n)
{
    if (has_word(n, "data-center-gpu-max"))
        return "xe-hpc";
    if (has_word(n, "arc"))
        return "xe-hpg";
    if (has_word(n, "iris-xe") || has_word(n, "uhd-graphics-7"))
        return "xe-lp";
    return "intel-gpu";
}

void tuning_device_key(const device_caps *caps, char *vendor,
                       size_t vendor_cap, char *arch, size_t arch_cap,
                       char *device, size_t device_cap)
{
    char platform[128];
    tuning_normalise_name(caps->name, device, device_cap);
    tuning_normalise_name(caps->platform_name, platform, sizeof platform);
    if (caps->klass == DEVICE_CLASS_CPU) {
        /* On CPUs the OpenCL implementation decides the code, not the
         * chip's maker. */
        const char *impl = has_word(platform, "portable-computing")
                               ? "pocl"
                           : has_word(platform, "intel") ? "intel"
                           : has_word(platform, "amd")   ? "amd"
                                                         : "cpu";
        snprintf(vendor, vendor_cap, "%s", impl);
        snprintf(arch, arch_cap, "%s", cpu_isa());
        return;
    }
    switch (caps->klass) {
    case DEVICE_CLASS_GPU_NVIDIA:
        snprintf(vendor, vendor_cap, "nvidia");
        snprintf(arch, arch_cap, "sm_%u%u", caps->nv_cc_major,
                 caps->nv_cc_minor);
        break;
    case DEVICE_CLASS_GPU_AMD:
        snprintf(vendor, vendor_cap, "amd");
        snprintf(arch, arch_cap, "%s", caps->amd_gfx[0] ? caps->amd_gfx
                                                        : "amd-gpu");
        break;
    case DEVICE_CLASS_GPU_INTEL:
        snprintf(vendor, vendor_cap, "intel");
        snprintf(arch, arch_cap, "%s", intel_gpu_family(device));
        break;
    default:
        tuning_normalise_name(caps->vendor, vendor, vendor_cap);
        snprintf(arch, arch_cap, "gpu");
        break;
    }
}

const char *tuning_seq_class(long long seqlen_q, long long seqlen_k)
{
    if (seqlen_q <= 16)
        return "decode";
    return seqlen_q <= 512 && seqlen_k <= 512 ? "short" : "long";
}

const char *tuning_level_name(int level)
{
    static const char *const names[] = {"none", "path", "dtype", "vendor",
                                        "architecture", "device"};
    return level >= 0 && level <= TUNING_LEVEL_DEVICE ? names[level] : "?";
}

/* ---- lookup --------------------------------------------------------- */

static bool any(const char *s) { return !s || !strcmp(s, "*"); }

/* The entry's level (the count of named fields of its chain), or
 * TUNING_NONE when a named field differs from the query. */
static int entry_level(const tuning_entry *e, const tuning_query *q)
{
    const char *const mine[] = {e->dtype, e->vendor, e->arch, e->device};
    const char *const want[] = {q->dtype, q->vendor, q->arch, q->device};
    if (strcmp(e->path, q->path) != 0)
        return TUNING_NONE;
    int level = TUNING_LEVEL_PATH;
    for (int i = 0; i < 4 && !any(mine[i]); ++i, ++level)
        if (strcmp(mine[i], want[i]) != 0)
            return TUNING_NONE;
    return level;
}

/* Lower is better; -1 when the entry cannot serve the shape. */
static long shape_cost(const tuning_entry *e, const tuning_query *q)
{
    if (e->head_dim < q->head_dim || (!any(e->seq) && strcmp(e->seq, q->seq)))
        return -1;
    return (long)(e->head_dim - q->head_dim) * 4 +
           (e->causal >= 0 && e->causal != q->causal ? 2 : 0) +
           (any(e->seq) ? 1 : 0);
}

const tuning_entry *tuning_lookup(const tuning_entry *table, size_t count,
                                  const tuning_query *q, int *level)
{
    const tuning_entry *best = NULL;
    int best_level = TUNING_NONE;
    long best_cost = 0;
    for (size_t i = 0; i < count; ++i) {
        const int l = entry_level(&table[i], q);
        const long cost = l ? shape_cost(&table[i], q) : -1;
        if (cost < 0 || l < best_level)
            continue;
        if (l > best_level || cost < best_cost) {
            best = &table[i];
            best_level = l;
            best_cost = cost;
        }
    }
    *level = best_level;
    return best;
}

/* ---- FLASHCL_TUNING_FILE -------------------------------------------- */

typedef struct user_db {
    char file[1024];
    long long mtime, size;
    tuning_entry *entries;
    char **strings;
    size_t count, string_count;
    bool unreadable;
} user_db;

static pthread_mutex_t user_lock = PTHREAD_MUTEX_INITIALIZER;
static user_db user;

static void user_free(void)
{
    for (size_t i = 0; i < user.string_count; ++i)
        free(user.strings[i]);
    free(user.strings);
    free(user.entries);
    memset(&user, 0, sizeof user);
}

static const char *keep(const char *b, const char *e, const char *key,
                        const char *fallback)
{
    char buf[256];
    if (!json_get_string(b, e, key, buf, sizeof buf))
        return fallback;
    char *copy = strdup(buf);
    if (!copy)
        return fallback;
    user.strings[user.string_count++] = copy;
    return copy;
}

#define USER_FIELDS 9 /* strings kept per entry */

static void user_parse(const char *text)
{
    size_t cap = 0;
    const char *b, *e;
    const char *start = json_array_start(text, "winners");
    for (const char *at = start; at && json_next_object(&at, &b, &e);)
        ++cap;
    if (!cap)
        return;
    user.entries = calloc(cap, sizeof *user.entries);
    user.strings = calloc(cap * USER_FIELDS, sizeof *user.strings);
    if (!user.entries || !user.strings)
        return;
    for (const char *at = start; user.count < cap &&
                                 json_next_object(&at, &b, &e);) {
        tuning_entry *t = &user.entries[user.count];
        double hd = 0, causal = -1, ms = 0;
        t->path = keep(b, e, "path", NULL);
        t->params = keep(b, e, "params", NULL);
        if (!t->path || !t->params || !json_get_number(b, e, "head_dim", &hd))
            continue;
        json_get_number(b, e, "causal", &causal);
        json_get_number(b, e, "median_ms", &ms);
        t->dtype = keep(b, e, "dtype", "*");
        t->vendor = keep(b, e, "vendor", "*");
        t->arch = keep(b, e, "arch", "*");
        t->device = keep(b, e, "device", "*");
        t->seq = keep(b, e, "seq", "*");
        t->date = keep(b, e, "date", "");
        t->measured_on = keep(b, e, "measured_on", "");
        t->head_dim = (int)hd;
        t->causal = (int)causal;
        t->median_ms = ms;
        ++user.count;
    }
}

/* Reloads the file when its name, size or time changed (under user_lock). */
static void user_refresh(const char *file)
{
    struct stat st;
    const bool exists = stat(file, &st) == 0;
    const long long mtime = exists ? (long long)st.st_mtime : -1;
    const long long size = exists ? (long long)st.st_size : -1;
    if (!strcmp(user.file, file) && user.mtime == mtime && user.size == size)
        return;
    user_free();
    snprintf(user.file, sizeof user.file, "%s", file);
    user.mtime = mtime;
    user.size = size;
    char *text = exists ? json_read_file(file, 16u << 20) : NULL;
    user.unreadable = !text;
    if (text)
        user_parse(text);
    free(text);
}

/* ---- choosing ------------------------------------------------------- */

static const char *dtype_key(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_DTYPE_FP16:
        return "fp16";
    case FLASHCL_DTYPE_BF16:
        return "bf16";
    case FLASHCL_DTYPE_FP64:
        return "fp64";
    default:
        return "fp32";
    }
}

static void fill_query(const device_caps *caps, const kernel_path *path,
                       const problem *p, int head_dim, tuning_query *q)
{
    memset(q, 0, sizeof *q);
    q->path = path->name;
    q->dtype = dtype_key(p->dtype);
    tuning_device_key(caps, q->vendor, sizeof q->vendor, q->arch,
                      sizeof q->arch, q->device, sizeof q->device);
    q->head_dim = head_dim;
    q->causal = p->causal ? 1 : 0;
    q->seq = tuning_seq_class((long long)p->seqlen_q, (long long)p->seqlen_k);
}

static void describe_entry(const tuning_entry *e, int level,
                           const char *source, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s, %s level (%s/%s/%s/%s/%.48s D=%d %s %s: %s): "
             "%.3f ms median, %s on %.60s", source, tuning_level_name(level),
             e->path, e->dtype, e->vendor, e->arch, e->device, e->head_dim,
             e->causal < 0 ? "any" : e->causal ? "causal" : "non-causal",
             e->seq, e->params, e->median_ms, e->date, e->measured_on);
}

static bool take(const kernel_path *path, const tuning_entry *e, int level,
                 const char *source, tuning_choice *out)
{
    char why[160];
    if (!tile_params_parse(e->params, path->tunables, path->tunable_count,
                           false, &out->params, why, sizeof why)) {
        note_for_call("%s entry \"%s\" for %s ignored (%s): the path's "
                      "table runs", source, e->params, path->name, why);
        return false;
    }
    out->level = level;
    describe_entry(e, level, source, out->origin, sizeof out->origin);
    return true;
}

bool tuning_choose(const device_caps *caps, const kernel_path *path,
                   const problem *p, int head_dim, const char *forced,
                   tuning_choice *out)
{
    memset(out, 0, sizeof *out);
    char why[160];
    if (forced) {
        if (tile_params_parse(forced, path->tunables, path->tunable_count,
                              true, &out->params, why, sizeof why)) {
            out->forced = true;
            out->level = TUNING_LEVEL_DEVICE;
            snprintf(out->origin, sizeof out->origin,
                     "forced candidate %.150s (flashcl_context_force_tiles)",
                     forced);
            return true;
        }
        note_for_call("forced tiles \"%s\" for %s ignored (%s)", forced,
                      path->name, why);
    }
    tuning_query q;
    fill_query(caps, path, p, head_dim, &q);
    const char *file = getenv("FLASHCL_TUNING_FILE");
    if (file && *file) {
        bool found = false;
        pthread_mutex_lock(&user_lock);
        user_refresh(file);
        int level = TUNING_NONE;
        const tuning_entry *e =
            tuning_lookup(user.entries, user.count, &q, &level);
        if (user.unreadable)
            note_for_call("FLASHCL_TUNING_FILE=\"%s\" cannot be read: "
                          "ignored", file);
        else if (e)
            found = take(path, e, level, "FLASHCL_TUNING_FILE", out);
        pthread_mutex_unlock(&user_lock);
        if (found)
            return true;
    }
    int level = TUNING_NONE;
    const tuning_entry *e = tuning_lookup(tuning_db, TUNING_DB_COUNT, &q,
                                          &level);
    return e && take(path, e, level, "tuning DB", out);
}

void tuning_refused(const tuning_choice *c, const char *path,
                    const char *why)
{
    note_for_call("tiles of %s refused for %s (%s): the path's table runs",
                  c->origin, path, why);
}
