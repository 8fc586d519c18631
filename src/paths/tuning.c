/* The tuning database and the user's file (tuning.h; docs/tuning.md). */
#include "paths/tuning.h"

#include "core/core.h"
#include "core/json_scan.h"
#include "paths/path.h"

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
    snprintf(buf, cap, "%s, %s level (%s/%s/%s/%s/%.40s, D=%d %s %s): %s; "
             "%.3f ms median on %.48s, %.10s", source,
             tuning_level_name(level), e->path, e->dtype, e->vendor, e->arch,
             e->device, e->head_dim,
             e->causal < 0 ? "any" : e->causal ? "causal" : "non-causal",
             e->seq, e->params[0] ? e->params : "the path's own table",
             e->median_ms, e->measured_on, e->date);
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

/* The forced set, if given (source 0). */
static bool choose_forced(const kernel_path *path, const char *forced,
                          tuning_choice *out)
{
    char why[160];
    if (!forced)
        return false;
    if (!tile_params_parse(forced, path->tunables, path->tunable_count, true,
                           &out->params, why, sizeof why)) {
        note_for_call("forced tiles \"%s\" for %s ignored (%s)", forced,
                      path->name, why);
        return false;
    }
    out->forced = true;
    out->level = TUNING_LEVEL_DEVICE;
    snprintf(out->origin, sizeof out->origin,
             "forced candidate %.150s (flashcl_context_force_tiles)", forced);
    return true;
}

/* FLASHCL_TUNING_FILE's entry (source 1). */
static bool choose_user(const kernel_path *path, const tuning_query *q,
                        tuning_choice *out)
{
    const char *file = getenv("FLASHCL_TUNING_FILE");
    if (!file || !*file)
        return false;
    bool found = false;
    pthread_mutex_lock(&user_lock);
    user_refresh(file);
    int level = TUNING_NONE;
    const tuning_entry *e = tuning_lookup(user.entries, user.count, q, &level);
    if (user.unreadable)
        note_for_call("FLASHCL_TUNING_FILE=\"%s\" cannot be read: ignored",
                      file);
    else if (e)
        found = take(path, e, level, "FLASHCL_TUNING_FILE", out);
    pthread_mutex_unlock(&user_lock);
    return found;
}

bool tuning_databases_off(void)
{
    const char *text = getenv("FLASHCL_TUNING");
    return text && (!strcmp(text, "0") || !strcmp(text, "off"));
}

bool tuning_choose(const device_caps *caps, const kernel_path *path,
                   const problem *p, int head_dim, const char *forced,
                   int *next, tuning_choice *out)
{
    tuning_query q;
    fill_query(caps, path, p, head_dim, &q);
    /* Read here, once per plan, like FLASHCL_TUNING_FILE: the tuner's
     * forced candidates (source 0) still apply when the databases are
     * off, so `flashcl tune` measures the same either way. */
    const int last = tuning_databases_off() ? 1 : 3;
    while (*next < last) {
        const int source = (*next)++;
        memset(out, 0, sizeof *out);
        int level = TUNING_NONE;
        const tuning_entry *e = NULL;
        if (source == 0 && choose_forced(path, forced, out))
            return true;
        if (source == 1 && choose_user(path, &q, out))
            return true;
        if (source == 2 &&
            (e = tuning_lookup(tuning_db, TUNING_DB_COUNT, &q, &level)) &&
            take(path, e, level, "tuning DB", out))
            return true;
    }
    return false;
}

void tuning_refused(const tuning_choice *c, const char *path,
                    const char *why)
{
    note_for_call("tiles of %s refused for %s (%s)", c->origin, path, why);
}
