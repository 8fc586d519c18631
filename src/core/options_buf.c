/* Checked appends for kernel build options (options_buf.h). */
#include "core/options_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

options_buf options_begin(char *text, size_t cap)
{
    options_buf b = {text, cap, 0, cap == 0};
    if (cap)
        text[0] = '\0';
    return b;
}

options_buf options_continue(char *text, size_t cap)
{
    options_buf b = {text, cap, 0, cap == 0};
    if (cap) {
        const char *end = memchr(text, '\0', cap);
        if (end) {
            b.len = (size_t)(end - text);
        } else { /* no terminator: cut somewhere already */
            text[0] = '\0';
            b.overflow = true;
        }
    }
    return b;
}

void options_add(options_buf *b, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    options_vadd(b, format, args);
    va_end(args);
}

void options_vadd(options_buf *b, const char *format, va_list args)
{
    if (b->overflow)
        return;
    const int n = vsnprintf(b->text + b->len, b->cap - b->len, format, args);
    if (n < 0 || (size_t)n >= b->cap - b->len) {
        b->text[b->len] = '\0'; /* drop the partial switch */
        b->overflow = true;
        return;
    }
    b->len += (size_t)n;
}

void options_pad_overflow(options_buf *b)
{
    if (!b->overflow || b->cap == 0)
        return;
    memset(b->text + b->len, ' ', b->cap - 1 - b->len);
    b->len = b->cap - 1;
    b->text[b->len] = '\0';
}
