/* The persistent blob cache (see binary_cache.h for the layout and the
 * rules). Everything here is best effort: a failure is a miss or a store
 * that did not happen, with a note under FLASHCL_VERBOSE. */
#ifndef _POSIX_C_SOURCE /* the library's build sets it; the test's not */
#define _POSIX_C_SOURCE 200809L
#endif
#include "core/binary_cache.h"
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FORMAT_VERSION 1u
#define HEADER_BYTES 48u
#define MAX_KEY_BYTES (64u << 10)
#define MAX_ENTRY_BYTES ((uint64_t)1 << 30)
/* A temporary file this old was left by a writer that died. */
#define STALE_TEMP_SECONDS 600
static const unsigned char magic[8] = {'F', 'L', 'C', 'L', 'B', 'I', 'N',
                                       '\n'};

static _Atomic uint64_t counters[CACHE_COUNTERS];
static _Atomic unsigned temp_serial;

void cache_count(cache_counter which)
{
    atomic_fetch_add(&counters[which], 1);
}

uint64_t cache_counter_value(cache_counter which)
{
    return atomic_load(&counters[which]);
}

static void note(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static void note(const char *fmt, ...)
{
    if (!verbose_enabled())
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("flashcl: binary cache: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- hashing --------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t load_le64(const unsigned char *p, size_t n)
{
    uint64_t w = 0;
    for (size_t i = 0; i < n; ++i)
        w |= (uint64_t)p[i] << (8 * i);
    return w;
}

/* One 64-bit lane: every 8-byte word goes through a bijective mixer keyed
 * by the seed before it is folded into the state by another bijection,
 * so two lanes with different seeds are independent enough for a
 * 128-bit key (collisions are caught by the key echo anyway). */
static uint64_t lane_hash(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = seed ^ ((uint64_t)len * 0x9e3779b97f4a7c15ULL);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        h ^= mix64(load_le64(p + i, 8) ^ seed);
        h = ((h << 29) | (h >> 35)) * 0xbf58476d1ce4e5b9ULL +
            0x94d049bb133111ebULL;
    }
    h ^= mix64(load_le64(p + i, len - i) ^ ~seed);
    return mix64(h);
}

#define SEED_KEY_A 0x243f6a8885a308d3ULL
#define SEED_KEY_B 0x13198a2e03707344ULL
#define SEED_PAYLOAD 0xa4093822299f31d0ULL

void cache_hash_hex(const void *data, size_t len, char hex[33])
{
    snprintf(hex, 33, "%016llx%016llx",
             (unsigned long long)lane_hash(data, len, SEED_KEY_A),
             (unsigned long long)lane_hash(data, len, SEED_KEY_B));
}

/* ---- settings -------------------------------------------------------- */

static bool env_off(const char *value)
{
    return value && (!strcmp(value, "0") || !strcmp(value, "off"));
}

static bool cache_dir(char *buf, size_t cap)
{
    const char *dir = getenv("FLASHCL_CACHE_DIR");
    int n;
    if (dir && *dir) {
        n = snprintf(buf, cap, "%s", dir);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME");
        const char *home = getenv("HOME");
        /* XDG: a relative path there is invalid and ignored */
        if (xdg && xdg[0] == '/')
            n = snprintf(buf, cap, "%s/flashcl", xdg);
        else if (home && *home)
            n = snprintf(buf, cap, "%s/.cache/flashcl", home);
        else
            return false;
    }
    return n > 0 && (size_t)n < cap - 64; /* room for an entry's name */
}

bool binary_cache_enabled(void)
{
    char dir[4096];
    return !env_off(getenv("FLASHCL_CACHE")) && cache_dir(dir, sizeof dir);
}

/* FLASHCL_CACHE_MAX_BYTES: bytes, or with a K, M or G suffix (binary). */
static uint64_t max_bytes(void)
{
    const char *env = getenv("FLASHCL_CACHE_MAX_BYTES");
    if (!env || !*env)
        return CACHE_DEFAULT_MAX_BYTES;
    char *end;
    errno = 0;
    unsigned long long value = strtoull(env, &end, 10);
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        ++end;
    if (errno || end == env || *end || env[0] == '-' || value == 0 ||
        value > (UINT64_MAX >> shift)) {
        note("FLASHCL_CACHE_MAX_BYTES=\"%s\" is not a positive size; using "
             "%llu", env, (unsigned long long)CACHE_DEFAULT_MAX_BYTES);
        return CACHE_DEFAULT_MAX_BYTES;
    }
    return (uint64_t)value << shift;
}

/* mkdir -p with mode 0700 for what it creates. */
static bool make_dirs(char *path)
{
    for (char *at = path + 1;; ++at) {
        if (*at != '/' && *at != '\0')
            continue;
        const char saved = *at;
        *at = '\0';
        const bool ok = mkdir(path, 0700) == 0 || errno == EEXIST;
        *at = saved;
        if (!ok || saved == '\0')
            break;
    }
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool entry_path(const char *dir, const char *kind, const char *key,
                       char *path, size_t cap)
{
    char hex[33];
    size_t kind_len = strlen(kind);
    char *named = malloc(kind_len + strlen(key) + 2);
    if (!named)
        return false;
    memcpy(named, kind, kind_len);
    named[kind_len] = '\n';
    strcpy(named + kind_len + 1, key);
    cache_hash_hex(named, strlen(named), hex);
    free(named);
    int n = snprintf(path, cap, "%s/%s.%s", dir, hex, kind);
    return n > 0 && (size_t)n < cap;
}

/* ---- entries --------------------------------------------------------- */

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void write_header(unsigned char *h, const char *key, size_t key_len,
                         const void *payload, size_t size)
{
    memcpy(h, magic, 8);
    put_le(h + 8, FORMAT_VERSION, 4);
    put_le(h + 12, key_len, 4);
    put_le(h + 16, size, 8);
    put_le(h + 24, lane_hash(payload, size, SEED_PAYLOAD), 8);
    put_le(h + 32, lane_hash(key, key_len, SEED_KEY_A), 8);
    put_le(h + 40, lane_hash(key, key_len, SEED_KEY_B), 8);
}

/* Whole file, or NULL; *size its length. */
static unsigned char *read_file(int fd, size_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size > MAX_ENTRY_BYTES)
        return NULL;
    const size_t want = (size_t)st.st_size;
    unsigned char *data = malloc(want ? want : 1);
    size_t got = 0;
    while (data && got < want) {
        ssize_t n = read(fd, data + got, want - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (data && got != want) {
        free(data);
        data = NULL;
    }
    *size = got;
    return data;
}

/* The payload's offset when `data` is a sound entry for `key`, else 0. */
static size_t check_entry(const unsigned char *data, size_t size,
                          const char *key)
{
    const size_t key_len = strlen(key);
    if (size < HEADER_BYTES || memcmp(data, magic, 8) != 0 ||
        load_le64(data + 8, 4) != FORMAT_VERSION ||
        load_le64(data + 12, 4) != key_len)
        return 0;
    const uint64_t payload = load_le64(data + 16, 8);
    if (size <= HEADER_BYTES + key_len ||
        payload != size - HEADER_BYTES - key_len ||
        memcmp(data + HEADER_BYTES, key, key_len) != 0)
        return 0;
    unsigned char expect[HEADER_BYTES];
    write_header(expect, key, key_len, data + HEADER_BYTES + key_len,
                 (size_t)payload);
    return memcmp(expect, data, HEADER_BYTES) == 0 ? HEADER_BYTES + key_len
                                                   : 0;
}

void *binary_cache_load(const char *kind, const char *key, size_t *size)
{
    char dir[4096], path[4200];
    *size = 0;
    if (env_off(getenv("FLASHCL_CACHE")) || !cache_dir(dir, sizeof dir) ||
        !entry_path(dir, kind, key, path, sizeof path))
        return NULL;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        cache_count(CACHE_MISSES);
        if (errno != ENOENT)
            note("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t file_size = 0;
    unsigned char *data = read_file(fd, &file_size);
    const size_t offset = data ? check_entry(data, file_size, key) : 0;
    if (!offset) {
        free(data);
        close(fd);
        cache_count(CACHE_BAD_ENTRIES);
        note("%s is damaged or another key's entry; rebuilding it", path);
        return NULL;
    }
    /* LRU: eviction removes the oldest mtime first */
    if (futimens(fd, NULL) != 0)
        note("cannot touch %s: %s", path, strerror(errno));
    close(fd);
    *size = file_size - offset;
    memmove(data, data + offset, *size);
    cache_count(CACHE_HITS);
    return data;
}

static bool write_all(int fd, const void *data, size_t len)
{
    const unsigned char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* ---- eviction -------------------------------------------------------- */

typedef struct entry_file {
    char name[64];
    uint64_t bytes;
    struct timespec mtime;
} entry_file;

/* "<32 hex>.<lowercase kind>" */
static bool is_entry_name(const char *name)
{
    size_t i = 0;
    for (; i < 32; ++i)
        if (!((name[i] >= '0' && name[i] <= '9') ||
              (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    if (name[i++] != '.' || !name[i])
        return false;
    for (; name[i]; ++i)
        if (!((name[i] >= 'a' && name[i] <= 'z') ||
              (name[i] >= '0' && name[i] <= '9')) ||
            i > 48)
            return false;
    return true;
}

static int older_first(const void *a, const void *b)
{
    const entry_file *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Entries of `dir` (stale temporary files are removed on the way); NULL
 * when the folder cannot be listed. */
static entry_file *list_entries(const char *dir, size_t *count,
                                uint64_t *total)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    size_t cap = 64, n = 0;
    entry_file *files = malloc(cap * sizeof *files);
    const time_t now = time(NULL);
    *total = 0;
    for (struct dirent *e; files && (e = readdir(d));) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (!strncmp(e->d_name, ".tmp-", 5)) {
            if (now - st.st_mtime > STALE_TEMP_SECONDS)
                unlinkat(dirfd(d), e->d_name, 0);
            continue;
        }
        if (!is_entry_name(e->d_name))
            continue;
        if (n == cap) {
            entry_file *grown = realloc(files, 2 * cap * sizeof *files);
            if (!grown)
                break;
            files = grown;
            cap *= 2;
        }
        memcpy(files[n].name, e->d_name, strlen(e->d_name) + 1); /* <= 49 */
        files[n].bytes = (uint64_t)st.st_size;
        files[n].mtime = st.st_mtim;
        *total += files[n].bytes;
        ++n;
    }
    closedir(d);
    *count = n;
    return files;
}

/* Oldest first until the folder fits `cap`. Another process may evict at
 * the same time: a file already gone is simply skipped. */
static void evict(const char *dir, uint64_t cap)
{
    size_t count = 0;
    uint64_t total = 0;
    entry_file *files = list_entries(dir, &count, &total);
    if (!files)
        return;
    if (total > cap)
        qsort(files, count, sizeof *files, older_first);
    char path[4200];
    for (size_t i = 0; i < count && total > cap; ++i) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        if (unlink(path) == 0)
            cache_count(CACHE_EVICTIONS);
        total -= files[i].bytes;
    }
    free(files);
}

/* ---- store ----------------------------------------------------------- */

static bool write_temp(const char *tmp, const unsigned char *header,
                       const char *key, size_t key_len, const void *payload,
                       size_t size)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    bool ok = write_all(fd, header, HEADER_BYTES) &&
              write_all(fd, key, key_len) && write_all(fd, payload, size);
    if (close(fd) != 0)
        ok = false;
    return ok;
}

void binary_cache_store(const char *kind, const char *key, const void *payload,
                        size_t size)
{
    char dir[4096], path[4200], tmp[4300];
    if (env_off(getenv("FLASHCL_CACHE")) || !cache_dir(dir, sizeof dir) ||
        !entry_path(dir, kind, key, path, sizeof path) || size == 0)
        return;
    const size_t key_len = strlen(key);
    const uint64_t cap = max_bytes();
    if (key_len > MAX_KEY_BYTES ||
        HEADER_BYTES + key_len + (uint64_t)size > cap) {
        note("an entry of %zu bytes does not fit the cap of %llu", size,
             (unsigned long long)cap);
        return;
    }
    if (!make_dirs(dir)) {
        cache_count(CACHE_STORE_FAILURES);
        note("cannot create %s: %s", dir, strerror(errno));
        return;
    }
    unsigned char header[HEADER_BYTES];
    write_header(header, key, key_len, payload, size);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%ld-%u", dir, (long)getpid(),
             atomic_fetch_add(&temp_serial, 1));
    if (!write_temp(tmp, header, key, key_len, payload, size) ||
        rename(tmp, path) != 0) {
        cache_count(CACHE_STORE_FAILURES);
        note("cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return;
    }
    cache_count(CACHE_STORES);
    evict(dir, cap);
}

void flashcl_get_cache_stats(flashcl_cache_stats *stats)
{
    if (!stats)
        return;
    memset(stats, 0, sizeof *stats);
    char dir[4096];
    const bool named = cache_dir(dir, sizeof dir);
    if (named && strlen(dir) < sizeof stats->dir)
        memcpy(stats->dir, dir, strlen(dir) + 1);
    stats->enabled = named && !env_off(getenv("FLASHCL_CACHE"));
    stats->hits = cache_counter_value(CACHE_HITS);
    stats->misses = cache_counter_value(CACHE_MISSES);
    stats->bad_entries = cache_counter_value(CACHE_BAD_ENTRIES);
    stats->refused = cache_counter_value(CACHE_REFUSED);
    stats->stores = cache_counter_value(CACHE_STORES);
    stats->store_failures = cache_counter_value(CACHE_STORE_FAILURES);
    stats->evictions = cache_counter_value(CACHE_EVICTIONS);
    stats->source_builds = cache_counter_value(CACHE_SOURCE_BUILDS);
}
