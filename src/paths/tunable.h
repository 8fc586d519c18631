/* A path's tunable parameters, declared once beside its tile table (name
 * and legal values): `flashcl tune` searches them (through
 * flashcl_path_tunable), the tuning database and FLASHCL_TUNING_FILE
 * name them in an entry's "params" ("block_m=64,block_n=32,vec=8"), and
 * the path's plan checks a set of them against the device before it
 * uses it. */
#ifndef FLASHCL_TUNABLE_H
#define FLASHCL_TUNABLE_H

#include <stdbool.h>

#define TUNABLE_MAX_VALUES 8

typedef struct tunable {
    const char *name;
    int values[TUNABLE_MAX_VALUES]; /* ascending */
    int count; /* how many: 0 is a value too (a schedule off) */
} tunable;

static inline int tunable_count(const tunable *t)
{
    return t->count < TUNABLE_MAX_VALUES ? t->count : TUNABLE_MAX_VALUES;
}

/* Where a row of a portable-style tile table applies: CPUs or other
 * devices, padded head dims up to max_head_dim. Such a table starts each
 * row with it and ends with the row for what no row before it took. */
typedef struct tile_reach {
    bool cpu; /* CPU devices, else GPUs and accelerators */
    int max_head_dim;
} tile_reach;

/* A tile table entry's reason: a short ID, not prose compiled into the
 * library. What was measured for it (figures, alternatives, where) is in
 * docs/experiments.md under "Tile table entries", one row per ID. */
#define TILE_REASON(id) "tile entry " id " (docs/experiments.md)"

#endif /* FLASHCL_TUNABLE_H */
