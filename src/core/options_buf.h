/* Kernel build options (-D switches) appended with a length check.
 *
 * The options string is also the program cache's key, so a switch cut off
 * at the buffer's end would build one binary and file it under another's
 * name. An append that does not fit leaves the text as it was (no partial
 * switch), and marks the buffer overflowed; every later append is then
 * ignored, and the plan that owns the buffer must fail instead of
 * building. */
#ifndef FLASHCL_OPTIONS_BUF_H
#define FLASHCL_OPTIONS_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct options_buf {
    char *text;    /* always NUL-terminated (when cap > 0) */
    size_t cap;    /* bytes of text, the NUL included */
    size_t len;    /* strlen(text) */
    bool overflow; /* an append did not fit */
} options_buf;

/* An empty options string in text[0 .. cap). */
options_buf options_begin(char *text, size_t cap);

/* Appends to the string already in text[0 .. cap) (a path adding its own
 * switches after the shared ones). */
options_buf options_continue(char *text, size_t cap);

/* Appends one printf-formatted piece (" -DFLASHCL_VEC=%d"), or nothing and
 * marks the overflow when it does not fit whole. */
void options_add(options_buf *b, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* options_add for a caller's own variadic wrapper. */
void options_vadd(options_buf *b, const char *format, va_list args);

/* For the callers of the unchecked wrappers (plan_base_options, ...) that
 * take a full buffer as an overflow (the wgmma path): after an overflow,
 * pads the text with spaces to cap - 1 bytes (a build ignores them). */
void options_pad_overflow(options_buf *b);

#endif
