/* Kernel sources: the embedded copies, or $FLASHCL_KERNEL_DIR while
 * developing kernels. `#include "x.clh"` lines are resolved here because
 * programs are built from strings, where the driver has no include path. */
#include "core/core.h"
#include "core/read_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct embedded_kernel {
    const char *name; /* base name, unique */
    const char *path; /* relative to cl/ */
    const char *text;
    size_t size;
};
extern const struct embedded_kernel flashcl_embedded_kernels[];

#define MAX_INCLUDE_DEPTH 8
#define MAX_SOURCE_BYTES (16u << 20)

static const struct embedded_kernel *embedded(const char *name)
{
    for (const struct embedded_kernel *k = flashcl_embedded_kernels; k->name;
         ++k)
        if (strcmp(k->name, name) == 0)
            return k;
    return NULL;
}

/* A kernel source file; an empty one is refused (a build of nothing
 * would fail later, with a less clear message). */
static char *read_source_file(const char *path, char *msg, size_t msg_cap)
{
    size_t size = 0;
    char *text = read_regular_file(path, MAX_SOURCE_BYTES, "kernel source",
                                   &size, msg, msg_cap);
    if (text && size == 0) {
        snprintf(msg, msg_cap, "kernel source %s is empty", path);
        free(text);
        return NULL;
    }
    return text;
}

/* $FLASHCL_KERNEL_DIR/<path in cl/> if it exists, else $dir/<name>. */
static char *read_from_dir(const char *dir, const char *name, char *msg,
                           size_t msg_cap)
{
    char path[4096];
    const struct embedded_kernel *k = embedded(name);
    struct stat st;
    if (k) {
        snprintf(path, sizeof path, "%s/%s", dir, k->path);
        if (stat(path, &st) == 0)
            return read_source_file(path, msg, msg_cap);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return read_source_file(path, msg, msg_cap);
}

/* Unexpanded text of one file, or NULL with msg written. Caller frees. */
static char *raw_source(const char *name, char *msg, size_t msg_cap)
{
    const char *dir = getenv("FLASHCL_KERNEL_DIR");
    if (dir && *dir)
        return read_from_dir(dir, name, msg, msg_cap);
    const struct embedded_kernel *k = embedded(name);
    if (!k) {
        snprintf(msg, msg_cap,
                 "kernel source \"%s\" is not in the embedded table", name);
        return NULL;
    }
    char *copy = malloc(k->size + 1);
    if (!copy) {
        snprintf(msg, msg_cap, "out of memory copying \"%s\"", name);
        return NULL;
    }
    memcpy(copy, k->text, k->size);
    copy[k->size] = '\0';
    return copy;
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
    char *text = raw_source(name, msg, msg_cap);
    if (!text)
        return false;
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
    if (msg_cap)
        msg[0] = '\0';
    text_buffer out = {0};
    if (!expand(&out, file, 0, msg, msg_cap) || out.failed) {
        if (out.failed)
            snprintf(msg, msg_cap, "out of memory expanding \"%s\"", file);
        free(out.data);
        return NULL;
    }
    return out.data;
}
