/* Kernel sources: the embedded copies, or $FLASHCL_KERNEL_DIR while
 * developing kernels. `#include "x.clh"` lines are resolved here because
 * programs are built from strings, where the driver has no include path. */
#include "../internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct embedded_kernel {
    const char *name; /* base name, unique */
    const char *path; /* relative to cl/ */
    const char *text;
    size_t size;
};
extern const struct embedded_kernel flashcl_embedded_kernels[];

#define MAX_INCLUDE_DEPTH 8

static char *read_disk_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *file = fopen(path, "rb");
    if (!file)
        return NULL;
    char *text = NULL;
    if (fseek(file, 0, SEEK_END) == 0) {
        long size = ftell(file);
        if (size >= 0 && fseek(file, 0, SEEK_SET) == 0) {
            text = malloc((size_t)size + 1);
            if (text && fread(text, 1, (size_t)size, file) != (size_t)size) {
                free(text);
                text = NULL;
            } else if (text) {
                text[size] = '\0';
            }
        }
    }
    fclose(file);
    return text;
}

/* Unexpanded text of one file. Caller frees. */
static char *raw_source(const char *name)
{
    const char *dir = getenv("FLASHCL_KERNEL_DIR");
    if (dir && *dir)
        return read_disk_file(dir, name);
    for (const struct embedded_kernel *k = flashcl_embedded_kernels; k->name;
         ++k)
        if (strcmp(k->name, name) == 0) {
            char *copy = malloc(k->size + 1);
            if (copy) {
                memcpy(copy, k->text, k->size);
                copy[k->size] = '\0';
            }
            return copy;
        }
    return NULL;
}

typedef struct text_buffer {
    char *data;
    size_t len, cap;
    bool failed;
} text_buffer;

static void append(text_buffer *out, const char *text, size_t len)
{
    if (out->failed)
        return;
    if (out->len + len + 1 > out->cap) {
        size_t cap = (out->cap ? out->cap * 2 : 65536) + len;
        char *grown = realloc(out->data, cap);
        if (!grown) {
            out->failed = true;
            return;
        }
        out->data = grown;
        out->cap = cap;
    }
    memcpy(out->data + out->len, text, len);
    out->len += len;
    out->data[out->len] = '\0';
}

/* The quoted name of an `#include "name"` line, or false. */
static bool include_target(const char *line, size_t len, char *name,
                           size_t cap)
{
    const char *end = line + len;
    while (line < end && (*line == ' ' || *line == '\t'))
        ++line;
    if (end - line < 10 || strncmp(line, "#include", 8) != 0)
        return false;
    const char *open = memchr(line, '"', (size_t)(end - line));
    const char *close = open ? memchr(open + 1, '"', (size_t)(end - open - 1))
                             : NULL;
    if (!close || (size_t)(close - open - 1) >= cap)
        return false;
    memcpy(name, open + 1, (size_t)(close - open - 1));
    name[close - open - 1] = '\0';
    return true;
}

static bool expand(text_buffer *out, const char *name, int depth, char *msg,
                   size_t msg_cap)
{
    char *text = raw_source(name);
    if (!text) {
        const char *dir = getenv("FLASHCL_KERNEL_DIR");
        snprintf(msg, msg_cap, "kernel source \"%s\" not found (%s%s)", name,
                 dir && *dir ? "FLASHCL_KERNEL_DIR=" : "embedded table",
                 dir && *dir ? dir : "");
        return false;
    }
    bool ok = true;
    for (const char *line = text; *line && ok;) {
        const char *newline = strchr(line, '\n');
        size_t len = newline ? (size_t)(newline - line + 1) : strlen(line);
        char target[256];
        if (include_target(line, len, target, sizeof target)) {
            if (depth >= MAX_INCLUDE_DEPTH) {
                snprintf(msg, msg_cap, "include depth exceeded at \"%s\"",
                         target);
                ok = false;
            } else {
                ok = expand(out, target, depth + 1, msg, msg_cap);
                append(out, "\n", 1);
            }
        } else {
            append(out, line, len);
        }
        line += len;
    }
    free(text);
    return ok;
}

char *load_kernel_source(const char *file, char *msg, size_t msg_cap)
{
    text_buffer out = {0};
    if (!expand(&out, file, 0, msg, msg_cap) || out.failed) {
        if (out.failed)
            snprintf(msg, msg_cap, "out of memory expanding \"%s\"", file);
        free(out.data);
        return NULL;
    }
    return out.data;
}
