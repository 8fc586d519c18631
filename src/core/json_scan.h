/* A small reader for the JSON that `flashcl tune` writes: arrays of flat
 * objects (string, number, true/false/null members). Shared by the
 * library (FLASHCL_TUNING_FILE) and the tool (resuming a tuning run). */
#ifndef FLASHCL_JSON_SCAN_H
#define FLASHCL_JSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>

/* The first '[' of the array member `key` anywhere in `text` (NULL: none). */
const char *json_array_start(const char *text, const char *key);
/* The next flat object of the array at `*at` (after '[' or a previous
 * object): true with [*begin, *end) its text and *at moved past it; false
 * at the array's end or on malformed input. */
bool json_next_object(const char **at, const char **begin, const char **end);
/* Member `key` of the object [begin, end) as a string (unescaped \" \\ \/
 * only; others copied as is) or a number. */
bool json_get_string(const char *begin, const char *end, const char *key,
                     char *buf, size_t cap);
bool json_get_number(const char *begin, const char *end, const char *key,
                     double *out);
/* Member `key` is the literal true. */
bool json_get_true(const char *begin, const char *end, const char *key);
/* The whole file, NUL-terminated (free()); NULL when it cannot be read, is
 * not a regular file or is over `max_bytes` (read_file.h). */
char *json_read_file(const char *path, size_t max_bytes);

#endif /* FLASHCL_JSON_SCAN_H */
