/* The persistent cache: blobs (compiled program binaries; later the wgmma
 * path's patched PTX) stored on disk under a key string, shared by every
 * process of the user.
 *
 * Where: $FLASHCL_CACHE_DIR, else $XDG_CACHE_HOME/flashcl, else
 * $HOME/.cache/flashcl (created 0700). FLASHCL_CACHE=0 turns it off.
 * FLASHCL_CACHE_MAX_BYTES caps its size (default 256 MiB); the least
 * recently used entries go first (a hit bumps the entry's mtime).
 *
 * One entry is one file, <128-bit hash of kind and key, hex>.<kind>: a
 * header (magic, format version, the key's length and hash, the payload's
 * length and checksum), the key text itself (compared on load, so a hash
 * collision is a miss), then the payload. Entries are written to a
 * temporary file in the same folder and renamed into place, so a reader
 * sees a whole entry or none, whatever other processes do. Anything wrong
 * with an entry (truncated, flipped bytes, another key) is a miss, and the
 * caller's store replaces it. No error here ever fails a call: the caller
 * compiles instead, and FLASHCL_VERBOSE shows a note. */
#ifndef FLASHCL_BINARY_CACHE_H
#define FLASHCL_BINARY_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CACHE_DEFAULT_MAX_BYTES ((uint64_t)256 << 20)

/* 128-bit non-cryptographic hash of `len` bytes as 32 hex digits. */
void cache_hash_hex(const void *data, size_t len, char hex[33]);

/* Whether FLASHCL_CACHE leaves the cache on and a folder can be named. */
bool binary_cache_enabled(void);

/* The payload stored under (kind, key), or NULL on a miss, a bad entry or
 * when the cache is off. `kind` is a short lowercase name that becomes the
 * file's extension ("clbin"). Caller frees. */
void *binary_cache_load(const char *kind, const char *key, size_t *size);

/* Stores (replaces) the entry, then evicts down to the size cap. */
void binary_cache_store(const char *kind, const char *key, const void *payload,
                        size_t size);

/* Counters, process-wide (flashcl_cache_stats in flashcl.h). */
typedef enum cache_counter {
    CACHE_HITS = 0,
    CACHE_MISSES,
    CACHE_BAD_ENTRIES,   /* corrupt, truncated or another key's */
    CACHE_REFUSED,       /* loaded, but the driver would not build it */
    CACHE_STORES,
    CACHE_STORE_FAILURES,
    CACHE_EVICTIONS,
    CACHE_SOURCE_BUILDS, /* programs compiled from source */
    CACHE_COUNTERS
} cache_counter;

void cache_count(cache_counter which);
uint64_t cache_counter_value(cache_counter which);

#endif /* FLASHCL_BINARY_CACHE_H */
