/* Tuned tiles: the compiled-in tuning database (tuning_db.inc, generated
 * from the tuning folder's JSON files by scripts/tuning_db.py), the user's database file
 * (FLASHCL_TUNING_FILE, the JSON `flashcl tune` writes) and the tuner's
 * forced candidates. Lookup runs path -> dtype -> vendor -> architecture
 * -> device (CLBlast style): an entry names a prefix of that chain, "*"
 * for the rest, and the most specific entry that matches wins; where none
 * does, the path's own tile table runs. docs/tuning.md. */
#ifndef FLASHCL_TUNING_H
#define FLASHCL_TUNING_H

#include "paths/tunable.h"

#include <stdbool.h>
#include <stddef.h>

#include "flashcl.h"

struct device_caps;
struct problem;
struct kernel_path;

/* ---- parameter sets ------------------------------------------------- */

#define TILE_PARAMS_MAX 8

typedef struct tile_params {
    int count;
    char names[TILE_PARAMS_MAX][16];
    int values[TILE_PARAMS_MAX];
} tile_params;

/* "block_m=64,block_n=32" into `out`; false (why in `why`) when a name or
 * value is malformed, or a name is not one of `known` (count names; the
 * keys "debug_corrupt" pass only with allow_debug). */
bool tile_params_parse(const char *text, const tunable *known, size_t count,
                       bool allow_debug, tile_params *out, char *why,
                       size_t cap);
/* The value of `name`, or `fallback` when the set has none. */
int tile_params_get(const tile_params *t, const char *name, int fallback);

/* ---- database entries ----------------------------------------------- */

/* Levels of a match, most specific last. */
enum {
    TUNING_NONE = 0,
    TUNING_LEVEL_PATH,
    TUNING_LEVEL_DTYPE,
    TUNING_LEVEL_VENDOR,
    TUNING_LEVEL_ARCH,
    TUNING_LEVEL_DEVICE
};

typedef struct tuning_entry {
    const char *path, *dtype, *vendor, *arch, *device; /* "*": any */
    int head_dim; /* the path's padded head dim it was tuned at */
    int causal;   /* 0, 1, -1 any */
    const char *seq; /* "long", "short", "decode" or "*" */
    const char *params;
    const char *date, *measured_on;
    double median_ms;
} tuning_entry;

/* What a lookup asks: the device's key and the problem's shape class. */
typedef struct tuning_query {
    const char *path, *dtype;
    char vendor[32], arch[32], device[128];
    int head_dim, causal;
    const char *seq;
} tuning_query;

/* The device's vendor (the OpenCL implementation on CPUs: "pocl",
 * "intel"; the GPU maker otherwise), architecture ("sm_90", "gfx90a",
 * Intel GPU family, CPU ISA level "avx512"/"avx2"/...) and normalised
 * name. */
void tuning_device_key(const struct device_caps *caps, char *vendor,
                       size_t vendor_cap, char *arch, size_t arch_cap,
                       char *device, size_t device_cap);
/* Lower case, (R)/(TM) dropped, every run of other characters one '-'. */
void tuning_normalise_name(const char *name, char *out, size_t cap);
/* "long", "short" or "decode" for a problem's query and key lengths. */
const char *tuning_seq_class(long long seqlen_q, long long seqlen_k);
const char *tuning_level_name(int level);

/* The most specific entry of `table` matching `q` (NULL: none) and its
 * level. Within a level: the smallest head_dim at or above q->head_dim,
 * then the same causal, then the same sequence class ("*" matches any,
 * another class never). */
const tuning_entry *tuning_lookup(const tuning_entry *table, size_t count,
                                  const tuning_query *q, int *level);

/* ---- what a path's plan asks ---------------------------------------- */

typedef struct tuning_choice {
    tile_params params;
    int level;          /* TUNING_NONE: nothing found */
    bool forced;        /* the tuner's candidate (flashcl_context_force_tiles) */
    char origin[300];   /* "tuning DB, device level: ..." for the reason */
} tuning_choice;

/* Parameters for `path` on this device and problem (padded head dim
 * `head_dim`), from the sources in order: the forced set when one is
 * given, the user file's entry, the compiled database's. *next (0 at
 * first) is where to go on: a path that finds the set illegal calls
 * again for the next source. False when none is left (the path's table
 * then runs). A set whose names the path does not declare is skipped with
 * a note in the last-error text. */
bool tuning_choose(const struct device_caps *caps,
                   const struct kernel_path *path, const struct problem *p,
                   int head_dim, const char *forced, int *next,
                   tuning_choice *out);

/* FLASHCL_TUNING=0|off: the compiled-in database and FLASHCL_TUNING_FILE
 * are not consulted (the hand tables decide; forced candidates still
 * apply). Read at each call. */
bool tuning_databases_off(void);

/* The path's plan refused the set (illegal here): notes why, for the
 * last-error text. */
void tuning_refused(const tuning_choice *c, const char *path,
                    const char *why);

/* The compiled database (for `flashcl info`, tests). */
const tuning_entry *tuning_db_table(size_t *count);

#endif /* FLASHCL_TUNING_H */
