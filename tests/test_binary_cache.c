/*
 * The persistent program-binary cache (issue 15), for real, in folders of
 * its own under /tmp (never the user's ~/.cache):
 *
 *   hit_after_miss    a new context loads what an earlier one stored: no
 *                     source build, the entry's mtime bumped, results
 *                     still right against the float64 oracle
 *   key_covers_text   a kernel folder with the same text hits; one edited
 *                     header (included, not compiled directly) misses
 *   corrupt_entries   truncated, flipped and refused entries: detected,
 *                     rebuilt, replaced by a sound entry, results right
 *   processes         several processes on one empty folder at once: all
 *                     succeed, every entry sound, no temporary file left
 *   threads           two threads, two contexts, the same variants at once
 *   eviction          a cap: the least recently used entries go first; an
 *                     entry larger than the cap is not stored
 *   off_and_unwritable  FLASHCL_CACHE=0 neither reads nor writes; a folder
 *                     that cannot be made costs nothing but a failed store
 *   default_folders   $XDG_CACHE_HOME/flashcl, else ~/.cache/flashcl, 0700
 *   stored_at_build   a program's binary is on disk once flashcl_prepare
 *                     returns (built, no kernel run yet); its calls and the
 *                     context's release store nothing more
 *   release_is_quick  a context release after 12 tiny calls (head dims
 *                     8..96) on cold flashcl and PoCL caches takes < 1 s
 *                     (issue 42, item 7: PoCL generates code for every
 *                     kernel of a program whose binary is asked for, and
 *                     release used to ask)
 *   threads_split_kv  two threads, one context, the same split-KV decode
 *                     variants on two queues (shared split scratch), cold
 *                     cache: results right, one entry per program (PoCL
 *                     aborted when a binary was asked for while the
 *                     program's kernels ran: issue 42, item 13)
 *
 * Hits and builds are read from flashcl_get_cache_stats (process-wide
 * counters). Each context starts with an empty in-memory cache, so a new
 * context is what a new process sees. The entry format is checked with
 * the library's own reader compiled into this test (binary_cache.c, which
 * also writes the "refused" entry: a sound header over a binary no driver
 * takes).
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp, utimensat */
#include "test_common.h"

#include "core/binary_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* binary_cache.c's one dependency on the rest of the core. */
bool verbose_enabled(void)
{
    const char *env = getenv("FLASHCL_VERBOSE");
    return env && *env && strcmp(env, "0") != 0;
}

#define MAX_ENTRIES 32
#define NAME_CAP 64

/* Variants by shape and dtype: each is its own program. */
static attention_case variant(int which)
{
    static const struct {
        ref_dtype dtype;
        size_t head_dim;
        int causal;
    } table[] = {{REF_FP32, 32, 0}, {REF_FP16, 32, 1}, {REF_BF16, 16, 0},
                 {REF_FP32, 16, 1}, {REF_FP16, 16, 0}};
    attention_case c = small_case(table[which].dtype, 37, 45,
                                  table[which].causal, 1500u + (unsigned)which);
    c.head_dim = table[which].head_dim;
    return c;
}

static char folder[4096];

/* A new empty folder, made FLASHCL_CACHE_DIR, cache on, default cap. */
static const char *fresh_folder(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(folder, sizeof folder, "%s/flashcl-binary-cache-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(folder));
    ck_assert_int_eq(setenv("FLASHCL_CACHE_DIR", folder, 1), 0);
    unsetenv("FLASHCL_CACHE");
    unsetenv("FLASHCL_CACHE_MAX_BYTES");
    unsetenv("FLASHCL_KERNEL_DIR"); /* a failed test may leave it */
    return folder;
}

static flashcl_cache_stats stats(void)
{
    flashcl_cache_stats s;
    flashcl_get_cache_stats(&s);
    return s;
}

/* Entry files (*.clbin) of `dir`; *temps counts leftover .tmp-* files. */
static int list_entries(const char *dir, char names[][NAME_CAP], int *temps)
{
    int n = 0;
    if (temps)
        *temps = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, ".tmp-", 5) && temps)
            ++*temps;
        if (len > 6 && !strcmp(e->d_name + len - 6, ".clbin") &&
            n < MAX_ENTRIES && len < NAME_CAP)
            memcpy(names[n++], e->d_name, len + 1);
    }
    closedir(d);
    return n;
}

static bool listed(char names[][NAME_CAP], int n, const char *name)
{
    for (int i = 0; i < n; ++i)
        if (!strcmp(names[i], name))
            return true;
    return false;
}

/* The one entry in `names` that `before` lacks. */
static void new_entry(char names[][NAME_CAP], int n,
                      char before[][NAME_CAP], int n_before, char *out)
{
    int found = 0;
    for (int i = 0; i < n; ++i)
        if (!listed(before, n_before, names[i])) {
            memcpy(out, names[i], NAME_CAP);
            ++found;
        }
    ck_assert_msg(found == 1, "%d new entries (want 1)", found);
}

static void entry_path(const char *name, char *path, size_t cap)
{
    const int n = snprintf(path, cap, "%s/%s", folder, name);
    ck_assert(n > 0 && (size_t)n < cap);
}

static unsigned char *read_whole(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(data);
    *size = fread(data, 1, (size_t)len, f);
    fclose(f);
    return data;
}

static void write_whole(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, size, f), size);
    fclose(f);
}

static uint64_t le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The key an entry echoes (the format of binary_cache.h: 48-byte header,
 * key length at byte 12, payload length at 16). Caller frees. */
static char *entry_key(const char *name)
{
    char path[4200];
    entry_path(name, path, sizeof path);
    size_t size;
    unsigned char *data = read_whole(path, &size);
    ck_assert_msg(size > 48 && !memcmp(data, "FLCLBIN\n", 8),
                  "%s: no entry header", path);
    const size_t key_len = (size_t)le(data + 12, 4);
    ck_assert_uint_eq(48 + key_len + le(data + 16, 8), size);
    char *key = malloc(key_len + 1);
    ck_assert_ptr_nonnull(key);
    memcpy(key, data + 48, key_len);
    key[key_len] = '\0';
    free(data);
    return key;
}

/* Sound: the reader takes it, and its payload is not `unlike`. */
static void assert_sound(const char *name, size_t unlike_size)
{
    char *key = entry_key(name);
    size_t size = 0;
    void *payload = binary_cache_load("clbin", key, &size);
    ck_assert_msg(payload != NULL && size > 0 && size != unlike_size,
                  "%s: not a sound entry (payload %zu bytes)", name, size);
    free(payload);
    free(key);
}

/* One variant on a new context: prepare, then a checked forward call
 * (oracle), then release. */
static double run_variant(int which)
{
    const attention_case c = variant(which);
    flashcl_context *ctx = NULL;
    ck_assert_msg(flashcl_context_create(&ctx, NULL) == FLASHCL_SUCCESS,
                  "no OpenCL device: %s", flashcl_last_create_error());
    flashcl_attention_desc shape = case_shape_desc(&c);
    shape.layout = c.layout;
    shape.causal = c.causal; /* the program the call below runs */
    double compile_ms = -1;
    ck_assert_msg(flashcl_prepare(ctx, &shape, &compile_ms) == FLASHCL_SUCCESS,
                  "prepare: %s", clip(flashcl_context_last_error(ctx)));
    case_data data;
    run_case_keep(ctx, NULL, &c, &data);
    case_release(&data);
    flashcl_context_release(ctx);
    return compile_ms;
}

#define DELTA(after, before, field) ((after).field - (before).field)

static void set_mtime(const char *name, time_t when)
{
    char path[4200];
    entry_path(name, path, sizeof path);
    struct timespec times[2] = {{when, 0}, {when, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, times, 0), 0);
}

static time_t mtime_of(const char *name)
{
    char path[4200];
    entry_path(name, path, sizeof path);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_mtime;
}

/* ---------------------------------------------------------------- */

START_TEST(hit_after_miss)
{
    fresh_folder();
    flashcl_cache_stats s0 = stats();
    ck_assert(s0.enabled && !strcmp(s0.dir, folder));
    const double cold_ms = run_variant(0);
    flashcl_cache_stats s1 = stats();
    ck_assert_msg(DELTA(s1, s0, misses) == 1 &&
                      DELTA(s1, s0, source_builds) == 1 &&
                      DELTA(s1, s0, stores) == 1 && DELTA(s1, s0, hits) == 0,
                  "cold: misses %llu, builds %llu, stores %llu, hits %llu",
                  (unsigned long long)DELTA(s1, s0, misses),
                  (unsigned long long)DELTA(s1, s0, source_builds),
                  (unsigned long long)DELTA(s1, s0, stores),
                  (unsigned long long)DELTA(s1, s0, hits));
    char names[MAX_ENTRIES][NAME_CAP];
    int temps;
    ck_assert_int_eq(list_entries(folder, names, &temps), 1);
    ck_assert_int_eq(temps, 0);
    assert_sound(names[0], 0);
    char path[4200];
    entry_path(names[0], path, sizeof path);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(stat(folder, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);

    const time_t old = time(NULL) - 1000;
    set_mtime(names[0], old);
    const double warm_ms = run_variant(0);
    flashcl_cache_stats s2 = stats();
    ck_assert_msg(DELTA(s2, s1, hits) == 1 &&
                      DELTA(s2, s1, source_builds) == 0 &&
                      DELTA(s2, s1, stores) == 0,
                  "warm: hits %llu, builds %llu, stores %llu",
                  (unsigned long long)DELTA(s2, s1, hits),
                  (unsigned long long)DELTA(s2, s1, source_builds),
                  (unsigned long long)DELTA(s2, s1, stores));
    ck_assert_msg(mtime_of(names[0]) > old + 500, "a hit leaves the mtime");
    fprintf(stderr, "prepare from source %.1f ms, from the cache %.1f ms\n",
            cold_ms, warm_ms);

    run_variant(1); /* another program: another entry */
    flashcl_cache_stats s3 = stats();
    ck_assert_uint_eq(DELTA(s3, s2, misses), 1);
    ck_assert_int_eq(list_entries(folder, names, NULL), 2);
}
END_TEST

/* sources.c resolves #include lines, so the key's hash covers headers. */
START_TEST(key_covers_text)
{
    fresh_folder();
    run_variant(0);
    char copy[4200], command[9000], header[4300];
    snprintf(copy, sizeof copy, "%s/cl", folder);
    snprintf(command, sizeof command, "cp -r '%s' '%s'",
             FLASHCL_SOURCE_CL_DIR, copy);
    ck_assert_int_eq(system(command), 0);
    ck_assert_int_eq(setenv("FLASHCL_KERNEL_DIR", copy, 1), 0);
    flashcl_cache_stats s0 = stats();
    run_variant(0);
    flashcl_cache_stats s1 = stats();
    ck_assert_msg(DELTA(s1, s0, hits) == 1 &&
                      DELTA(s1, s0, source_builds) == 0,
                  "same text from a folder: hits %llu, builds %llu",
                  (unsigned long long)DELTA(s1, s0, hits),
                  (unsigned long long)DELTA(s1, s0, source_builds));

    snprintf(header, sizeof header, "%s/common/flashcl_common.clh", copy);
    FILE *f = fopen(header, "a");
    ck_assert_ptr_nonnull(f);
    fputs("\n/* an edit the key must see */\n", f);
    fclose(f);
    run_variant(0);
    flashcl_cache_stats s2 = stats();
    unsetenv("FLASHCL_KERNEL_DIR");
    ck_assert_msg(DELTA(s2, s1, hits) == 0 &&
                      DELTA(s2, s1, source_builds) == 1,
                  "edited header: hits %llu, builds %llu",
                  (unsigned long long)DELTA(s2, s1, hits),
                  (unsigned long long)DELTA(s2, s1, source_builds));
    char names[MAX_ENTRIES][NAME_CAP];
    ck_assert_int_eq(list_entries(folder, names, NULL), 2);
}
END_TEST

typedef enum damage {
    TRUNCATE_HALF = 0,
    TRUNCATE_IN_HEADER,
    FLIP_PAYLOAD,
    FLIP_KEY,
    REFUSED_BINARY,
    DAMAGES
} damage;

static const char *const damage_names[DAMAGES] = {
    "truncated to half", "truncated inside the header",
    "a payload byte flipped", "a key byte flipped",
    "a sound header over a binary the driver refuses"};

#define JUNK_BYTES 4096

static void apply_damage(const char *name, damage how)
{
    char path[4200];
    entry_path(name, path, sizeof path);
    size_t size;
    unsigned char *data = read_whole(path, &size);
    const size_t payload_at = 48 + (size_t)le(data + 12, 4);
    if (how == TRUNCATE_HALF)
        write_whole(path, data, size / 2);
    else if (how == TRUNCATE_IN_HEADER)
        write_whole(path, data, 40);
    else if (how == FLIP_PAYLOAD || how == FLIP_KEY) {
        data[how == FLIP_PAYLOAD ? payload_at + (size - payload_at) / 2
                                 : 48 + 10] ^= 0x20;
        write_whole(path, data, size);
    } else {
        char *key = entry_key(name);
        unsigned char junk[JUNK_BYTES];
        rng r = rng_seeded(77);
        for (size_t i = 0; i < sizeof junk; ++i)
            junk[i] = (unsigned char)rng_next(&r);
        binary_cache_store("clbin", key, junk, sizeof junk);
        free(key);
    }
    free(data);
}

START_TEST(corrupt_entries)
{
    fresh_folder();
    run_variant(0);
    char names[MAX_ENTRIES][NAME_CAP];
    ck_assert_int_eq(list_entries(folder, names, NULL), 1);
    for (damage how = 0; how < DAMAGES; ++how) {
        apply_damage(names[0], how);
        flashcl_cache_stats s0 = stats();
        run_variant(0); /* checked against the oracle */
        flashcl_cache_stats s1 = stats();
        const uint64_t seen = how == REFUSED_BINARY
                                  ? DELTA(s1, s0, refused)
                                  : DELTA(s1, s0, bad_entries);
        ck_assert_msg(seen == 1 && DELTA(s1, s0, hits) == (how ==
                                                           REFUSED_BINARY) &&
                          DELTA(s1, s0, source_builds) == 1 &&
                          DELTA(s1, s0, stores) == 1,
                      "%s: detected %llu, hits %llu, builds %llu, stores "
                      "%llu",
                      damage_names[how], (unsigned long long)seen,
                      (unsigned long long)DELTA(s1, s0, hits),
                      (unsigned long long)DELTA(s1, s0, source_builds),
                      (unsigned long long)DELTA(s1, s0, stores));
        char now[MAX_ENTRIES][NAME_CAP];
        ck_assert_int_eq(list_entries(folder, now, NULL), 1);
        ck_assert_str_eq(now[0], names[0]);
        assert_sound(names[0], JUNK_BYTES);
        /* and the replacement is used */
        flashcl_cache_stats s2 = stats();
        run_variant(0);
        flashcl_cache_stats s3 = stats();
        ck_assert_msg(DELTA(s3, s2, hits) == 1 &&
                          DELTA(s3, s2, source_builds) == 0,
                      "%s: the rebuilt entry is not used", damage_names[how]);
    }
}
END_TEST

#define PROCESSES 4
#define CHILD_VARIANTS 2

static const char *self_path;

static void remove_folder(void)
{
    char command[4200];
    if (!folder[0] || getenv("FLASHCL_TEST_KEEP_CACHE")) /* to look at */
        return;
    snprintf(command, sizeof command, "rm -rf '%s'", folder);
    if (system(command) != 0)
        fprintf(stderr, "could not remove %s\n", folder);
    folder[0] = '\0';
}

START_TEST(processes)
{
    fresh_folder();
    pid_t pids[PROCESSES];
    for (int i = 0; i < PROCESSES; ++i) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            execl(self_path, self_path, "--child", (char *)NULL);
            _exit(127);
        }
    }
    for (int i = 0; i < PROCESSES; ++i) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "process %d of %d failed (status 0x%x)", i + 1,
                      PROCESSES, status);
    }
    char names[MAX_ENTRIES][NAME_CAP];
    int temps;
    ck_assert_int_eq(list_entries(folder, names, &temps), CHILD_VARIANTS);
    ck_assert_int_eq(temps, 0);
    for (int i = 0; i < CHILD_VARIANTS; ++i)
        assert_sound(names[i], 0);
    flashcl_cache_stats s0 = stats();
    for (int v = 0; v < CHILD_VARIANTS; ++v)
        run_variant(v);
    flashcl_cache_stats s1 = stats();
    ck_assert_uint_eq(DELTA(s1, s0, hits), CHILD_VARIANTS);
    ck_assert_uint_eq(DELTA(s1, s0, source_builds), 0);
    ck_assert_uint_eq(DELTA(s1, s0, bad_entries), 0);
}
END_TEST

/* What each process of `processes` does (its own Check run). */
START_TEST(child_variants)
{
    for (int v = 0; v < CHILD_VARIANTS; ++v)
        run_variant(v);
}
END_TEST

typedef struct thread_job {
    int first;
    flashcl_status status[CHILD_VARIANTS];
    char error[512];
} thread_job;

/* Prepare only: a failed Check assertion cannot unwind this thread. */
static void *thread_main(void *arg)
{
    thread_job *job = arg;
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        snprintf(job->error, sizeof job->error, "%s",
                 flashcl_last_create_error());
        return NULL;
    }
    for (int i = 0; i < CHILD_VARIANTS; ++i) {
        const int v = (job->first + i) % CHILD_VARIANTS;
        const attention_case c = variant(v);
        flashcl_attention_desc shape = case_shape_desc(&c);
        shape.layout = c.layout;
        shape.causal = c.causal;
        job->status[v] = flashcl_prepare(ctx, &shape, NULL);
        if (job->status[v] != FLASHCL_SUCCESS && !job->error[0])
            snprintf(job->error, sizeof job->error, "%s",
                     flashcl_context_last_error(ctx));
    }
    flashcl_context_release(ctx); /* stores nothing: stored at build */
    return NULL;
}

START_TEST(threads)
{
    fresh_folder();
    thread_job jobs[2];
    pthread_t t[2];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 2; ++i) {
        jobs[i].first = i;
        for (int v = 0; v < CHILD_VARIANTS; ++v)
            jobs[i].status[v] = FLASHCL_ERROR_INVALID_VALUE;
        ck_assert_int_eq(pthread_create(&t[i], NULL, thread_main, &jobs[i]),
                         0);
    }
    for (int i = 0; i < 2; ++i)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 2; ++i)
        for (int v = 0; v < CHILD_VARIANTS; ++v)
            ck_assert_msg(jobs[i].status[v] == FLASHCL_SUCCESS,
                          "thread %d, variant %d: %s", i, v,
                          clip(jobs[i].error));
    char names[MAX_ENTRIES][NAME_CAP];
    int temps;
    ck_assert_int_eq(list_entries(folder, names, &temps), CHILD_VARIANTS);
    ck_assert_int_eq(temps, 0);
    flashcl_cache_stats s0 = stats();
    for (int v = 0; v < CHILD_VARIANTS; ++v)
        run_variant(v);
    flashcl_cache_stats s1 = stats();
    ck_assert_uint_eq(DELTA(s1, s0, hits), CHILD_VARIANTS);
    ck_assert_uint_eq(DELTA(s1, s0, source_builds), 0);
}
END_TEST

START_TEST(eviction)
{
    fresh_folder();
    char names[MAX_ENTRIES][NAME_CAP], before[MAX_ENTRIES][NAME_CAP];
    char made[3][NAME_CAP];
    int n = 0;
    for (int v = 0; v < 3; ++v) {
        run_variant(v);
        const int n_now = list_entries(folder, names, NULL);
        ck_assert_int_eq(n_now, n + 1);
        new_entry(names, n_now, before, n, made[v]);
        memcpy(before, names, sizeof names);
        n = n_now;
    }
    /* A, B, C from old to new; then a hit makes A the newest */
    const time_t now = time(NULL);
    for (int v = 0; v < 3; ++v)
        set_mtime(made[v], now - 300 + 100 * v);
    run_variant(0);
    ck_assert_msg(mtime_of(made[0]) >= now - 5, "the hit did not bump A");
    uint64_t total = 0;
    for (int v = 0; v < 3; ++v) {
        char path[4200];
        struct stat st;
        entry_path(made[v], path, sizeof path);
        ck_assert_int_eq(stat(path, &st), 0);
        total += (uint64_t)st.st_size;
    }
    /* the cap is what is there: a fourth entry must push out B first */
    char cap[32];
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)total);
    ck_assert_int_eq(setenv("FLASHCL_CACHE_MAX_BYTES", cap, 1), 0);
    flashcl_cache_stats s0 = stats();
    run_variant(3);
    flashcl_cache_stats s1 = stats();
    n = list_entries(folder, names, NULL);
    ck_assert_msg(!listed(names, n, made[1]), "B (least recently used) kept");
    ck_assert_msg(listed(names, n, made[0]), "A (just used) evicted");
    ck_assert_int_ge(DELTA(s1, s0, evictions), 1);
    ck_assert_uint_eq(DELTA(s1, s0, stores), 1);
    uint64_t left = 0;
    for (int i = 0; i < n; ++i) {
        char path[4200];
        struct stat st;
        entry_path(names[i], path, sizeof path);
        ck_assert_int_eq(stat(path, &st), 0);
        left += (uint64_t)st.st_size;
    }
    ck_assert_uint_le(left, total);

    /* an entry larger than the cap is not stored, and evicts nothing */
    ck_assert_int_eq(setenv("FLASHCL_CACHE_MAX_BYTES", "1K", 1), 0);
    const int n_before = n;
    run_variant(4);
    flashcl_cache_stats s2 = stats();
    unsetenv("FLASHCL_CACHE_MAX_BYTES");
    ck_assert_int_eq(list_entries(folder, names, NULL), n_before);
    ck_assert_uint_eq(DELTA(s2, s1, stores), 0);
}
END_TEST

START_TEST(off_and_unwritable)
{
    fresh_folder();
    run_variant(0);
    ck_assert_int_eq(setenv("FLASHCL_CACHE", "0", 1), 0);
    flashcl_cache_stats s0 = stats();
    ck_assert_int_eq(s0.enabled, 0);
    run_variant(0); /* the entry is there, and not read */
    run_variant(1); /* nor written */
    flashcl_cache_stats s1 = stats();
    unsetenv("FLASHCL_CACHE");
    ck_assert_uint_eq(DELTA(s1, s0, hits), 0);
    ck_assert_uint_eq(DELTA(s1, s0, misses), 0);
    ck_assert_uint_eq(DELTA(s1, s0, stores), 0);
    ck_assert_uint_eq(DELTA(s1, s0, source_builds), 2);
    char names[MAX_ENTRIES][NAME_CAP];
    ck_assert_int_eq(list_entries(folder, names, NULL), 1);

    /* a folder under a regular file can never be made */
    char file[4200], below[4300];
    snprintf(file, sizeof file, "%s/a-file", folder);
    write_whole(file, "x", 1);
    snprintf(below, sizeof below, "%s/cache", file);
    ck_assert_int_eq(setenv("FLASHCL_CACHE_DIR", below, 1), 0);
    run_variant(2); /* succeeds, checked against the oracle */
    flashcl_cache_stats s2 = stats();
    ck_assert_uint_eq(DELTA(s2, s1, store_failures), 1);
    ck_assert_uint_eq(DELTA(s2, s1, source_builds), 1);
}
END_TEST

START_TEST(default_folders)
{
    fresh_folder();
    const char *home = getenv("HOME");
    char *saved_home = home ? strdup(home) : NULL;
    char xdg[4200], expect[4300];
    snprintf(xdg, sizeof xdg, "%s/xdg", folder);
    unsetenv("FLASHCL_CACHE_DIR");
    ck_assert_int_eq(setenv("XDG_CACHE_HOME", xdg, 1), 0);
    snprintf(expect, sizeof expect, "%s/flashcl", xdg);
    ck_assert_str_eq(stats().dir, expect);
    run_variant(0);
    struct stat st;
    ck_assert_int_eq(stat(expect, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    ck_assert_int_eq(stat(xdg, &st), 0); /* made by flashcl too */
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    char names[MAX_ENTRIES][NAME_CAP];
    ck_assert_int_eq(list_entries(expect, names, NULL), 1);

    /* a relative XDG_CACHE_HOME is invalid (XDG spec): HOME's .cache */
    ck_assert_int_eq(setenv("XDG_CACHE_HOME", "relative", 1), 0);
    ck_assert_int_eq(setenv("HOME", folder, 1), 0);
    snprintf(expect, sizeof expect, "%s/.cache/flashcl", folder);
    ck_assert_str_eq(stats().dir, expect);
    unsetenv("XDG_CACHE_HOME");
    ck_assert_str_eq(stats().dir, expect);
    if (saved_home)
        setenv("HOME", saved_home, 1);
    free(saved_home);
}
END_TEST


START_TEST(stored_at_build)
{
    fresh_folder();
    const attention_case c = variant(0);
    flashcl_context *ctx = NULL;
    ck_assert_msg(flashcl_context_create(&ctx, NULL) == FLASHCL_SUCCESS,
                  "no OpenCL device: %s", flashcl_last_create_error());
    flashcl_attention_desc shape = case_shape_desc(&c);
    shape.layout = c.layout;
    shape.causal = c.causal;
    flashcl_cache_stats s0 = stats();
    ck_assert_int_eq(flashcl_prepare(ctx, &shape, NULL), FLASHCL_SUCCESS);
    flashcl_cache_stats s1 = stats();
    char names[MAX_ENTRIES][NAME_CAP];
    ck_assert_msg(DELTA(s1, s0, stores) == 1 &&
                      list_entries(folder, names, NULL) == 1,
                  "after the build (no kernel run yet): %llu stores, %d "
                  "entries (want 1 and 1)",
                  (unsigned long long)DELTA(s1, s0, stores),
                  list_entries(folder, names, NULL));
    assert_sound(names[0], 0);
    for (int call = 0; call < 3; ++call) {
        case_data data;
        run_case_keep(ctx, NULL, &c, &data); /* checked against the oracle */
        case_release(&data);
    }
    flashcl_context_release(ctx);
    flashcl_cache_stats s2 = stats();
    ck_assert_msg(DELTA(s2, s1, stores) == 0,
                  "calls and release stored %llu more binaries",
                  (unsigned long long)DELTA(s2, s1, stores));
    ck_assert_int_eq(list_entries(folder, names, NULL), 1);
    /* and what was stored before any launch serves a new context */
    run_variant(0);
    flashcl_cache_stats s3 = stats();
    ck_assert_uint_eq(DELTA(s3, s2, hits), 1);
    ck_assert_uint_eq(DELTA(s3, s2, source_builds), 0);
}
END_TEST

#define RELEASE_VARIANTS 12
#define RELEASE_LIMIT_S 1.0

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* In a process of its own (PoCL reads POCL_CACHE_DIR once): 12 tiny
 * calls, head dims 8, 16, ..., 96, each its own program, then the
 * release, timed. */
START_TEST(release_child)
{
    flashcl_context *ctx = NULL;
    ck_assert_msg(flashcl_context_create(&ctx, NULL) == FLASHCL_SUCCESS,
                  "no OpenCL device: %s", flashcl_last_create_error());
    for (int i = 0; i < RELEASE_VARIANTS; ++i) {
        attention_case c = small_case(REF_FP32, 3, 5, 0, 4200u + (unsigned)i);
        c.head_dim = 8 * (size_t)(i + 1);
        case_data data;
        run_case_keep(ctx, NULL, &c, &data);
        case_release(&data);
    }
    const double start = seconds_now();
    flashcl_context_release(ctx);
    const double took = seconds_now() - start;
    fprintf(stderr, "context release after %d variants: %.3f s\n",
            RELEASE_VARIANTS, took);
    ck_assert_msg(took < RELEASE_LIMIT_S,
                  "context release after %d variants took %.2f s (limit "
                  "%.1f s)", RELEASE_VARIANTS, took, RELEASE_LIMIT_S);
}
END_TEST

START_TEST(release_is_quick)
{
    fresh_folder();
    char pocl_cache[4200];
    snprintf(pocl_cache, sizeof pocl_cache, "%s/pocl", folder);
    ck_assert_int_eq(mkdir(pocl_cache, 0700), 0);
    ck_assert_int_eq(setenv("POCL_CACHE_DIR", pocl_cache, 1), 0);
    unsetenv("POCL_KERNEL_CACHE");
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl(self_path, self_path, "--release-child", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the timed release failed (status 0x%x; its output above)",
                  status);
    /* head dims that pad alike share a program: fewer entries than calls */
    char names[MAX_ENTRIES][NAME_CAP];
    ck_assert_int_gt(list_entries(folder, names, NULL), 1);
}
END_TEST

#define SPLIT_DIMS 3
#define SPLIT_ROUNDS 3

typedef struct split_job {
    flashcl_context *ctx;
    cl_command_queue queue;
    attention_case cases[SPLIT_DIMS];
    case_data data[SPLIT_DIMS];
    int first;
    flashcl_status status;
    char error[512];
} split_job;

/* No Check assertion here: a failed one cannot unwind this thread. */
static void *split_thread(void *arg)
{
    split_job *job = arg;
    for (int round = 0; round < SPLIT_ROUNDS; ++round)
        for (int i = 0; i < SPLIT_DIMS; ++i) {
            const int which = (job->first + i) % SPLIT_DIMS;
            flashcl_attention_desc desc =
                case_desc(&job->cases[which], &job->data[which]);
            desc.num_splits = 4;
            flashcl_status st = flashcl_attention_forward(
                job->ctx, job->queue, &desc, 0, NULL, NULL);
            if (st != FLASHCL_SUCCESS && job->status == FLASHCL_SUCCESS) {
                job->status = st;
                snprintf(job->error, sizeof job->error, "%s",
                         flashcl_context_last_error(job->ctx));
            }
        }
    clFinish(job->queue);
    return NULL;
}

START_TEST(threads_split_kv)
{
    fresh_folder();
    flashcl_context *ctx = NULL;
    ck_assert_msg(flashcl_context_create(&ctx, NULL) == FLASHCL_SUCCESS,
                  "no OpenCL device: %s", flashcl_last_create_error());
    static split_job jobs[2];
    pthread_t t[2];
    memset(jobs, 0, sizeof jobs);
    flashcl_cache_stats s0 = stats();
    for (int j = 0; j < 2; ++j) {
        jobs[j].ctx = ctx;
        jobs[j].queue = create_queue(ctx);
        jobs[j].first = j;
        for (int i = 0; i < SPLIT_DIMS; ++i) {
            attention_case c = small_case(REF_FP32, 1, 1500, 0,
                                          4300u + (unsigned)(10 * j + i));
            c.heads_q = 4;
            c.heads_kv = 1;
            c.head_dim = (size_t)(16 << i);
            jobs[j].cases[i] = c;
            case_prepare(&c, flashcl_context_cl_context(ctx),
                         jobs[j].queue, &jobs[j].data[i]);
        }
        CL_CHECK(clFinish(jobs[j].queue));
    }
    for (int j = 0; j < 2; ++j)
        ck_assert_int_eq(pthread_create(&t[j], NULL, split_thread, &jobs[j]),
                         0);
    for (int j = 0; j < 2; ++j)
        ck_assert_int_eq(pthread_join(t[j], NULL), 0);
    for (int j = 0; j < 2; ++j) {
        ck_assert_msg(jobs[j].status == FLASHCL_SUCCESS, "thread %d: %s: %s",
                      j, flashcl_status_string(jobs[j].status),
                      clip(jobs[j].error));
        for (int i = 0; i < SPLIT_DIMS; ++i) {
            compare_result res = case_check(&jobs[j].cases[i],
                                            &jobs[j].data[i], jobs[j].queue);
            ck_assert_msg(res.ok, "thread %d, D %zu: %s (max |err| %.3g)", j,
                          jobs[j].cases[i].head_dim, res.detail, res.max_err);
            case_release(&jobs[j].data[i]);
        }
        clReleaseCommandQueue(jobs[j].queue);
    }
    flashcl_context_release(ctx);
    flashcl_cache_stats s1 = stats();
    char names[MAX_ENTRIES][NAME_CAP];
    const int n = list_entries(folder, names, NULL);
    ck_assert_msg(n >= SPLIT_DIMS && (uint64_t)n == DELTA(s1, s0, stores),
                  "%d entries, %llu stores", n,
                  (unsigned long long)DELTA(s1, s0, stores));
    for (int i = 0; i < n; ++i)
        assert_sound(names[i], 0);
}
END_TEST

int main(int argc, char **argv)
{
    /* the children run this very executable */
    self_path = access("/proc/self/exe", X_OK) == 0 ? "/proc/self/exe" : argv[0];
    if (argc > 1 && !strcmp(argv[1], "--child")) {
        const test_entry child[] = {{child_variants, 0}};
        return run_tests("binary_cache_child", 0, NULL, NULL, child,
                         LENGTH(child));
    }
    if (argc > 1 && !strcmp(argv[1], "--release-child")) {
        const test_entry child[] = {{release_child, 0}};
        return run_tests("binary_cache_release", 0, NULL, NULL, child,
                         LENGTH(child));
    }
    const test_entry tests[] = {
        {hit_after_miss, 0}, {key_covers_text, 0},   {corrupt_entries, 0},
        {processes, 0},      {threads, 0},           {eviction, 0},
        {off_and_unwritable, 0}, {default_folders, 0}, {stored_at_build, 0},
        {release_is_quick, 0}, {threads_split_kv, 0}};
    return run_tests("binary_cache", 600, NULL, remove_folder, tests,
                     LENGTH(tests));
}
