/* See json_scan.h. Tolerant by design: what it cannot read it skips, and a
 * caller that finds no usable entry says so. */
#include "core/json_scan.h"
#include "core/read_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_space(const char *s, const char *end)
{
    while (s < end && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t'))
        ++s;
    return s;
}

/* Past the closing quote of the string starting at `s` (a '"'). */
static const char *skip_string(const char *s, const char *end)
{
    for (++s; s < end && *s != '"'; ++s)
        if (*s == '\\' && s + 1 < end)
            ++s;
    return s < end ? s + 1 : NULL;
}

const char *json_array_start(const char *text, const char *key)
{
    const size_t len = strlen(key);
    const char *end = text + strlen(text);
    for (const char *s = text; s && s < end;) {
        if (*s != '"') {
            ++s;
            continue;
        }
        const char *after = skip_string(s, end);
        if (!after)
            return NULL;
        if ((size_t)(after - s) == len + 2 && !strncmp(s + 1, key, len)) {
            const char *v = skip_space(after, end);
            if (v < end && *v == ':') {
                v = skip_space(v + 1, end);
                if (v < end && *v == '[')
                    return v;
            }
        }
        s = after;
    }
    return NULL;
}

bool json_next_object(const char **at, const char **begin, const char **end)
{
    const char *s = *at, *stop = s + strlen(s);
    if (s < stop && *s == '[')
        ++s;
    s = skip_space(s, stop);
    if (s < stop && *s == ',')
        s = skip_space(s + 1, stop);
    if (s >= stop || *s != '{')
        return false;
    *begin = s;
    for (++s; s && s < stop && *s != '}';)
        s = *s == '"' ? skip_string(s, stop) : *s == '{' || *s == '[' ? NULL
                                                                      : s + 1;
    if (!s || s >= stop)
        return false;
    *end = s + 1;
    *at = s + 1;
    return true;
}

/* The value of member `key` of [begin, end): its first character. */
static const char *member(const char *begin, const char *end, const char *key)
{
    const size_t len = strlen(key);
    const char *s = skip_space(begin + 1, end);
    while (s && s < end && *s == '"') {
        const char *after = skip_string(s, end);
        if (!after)
            return NULL;
        const bool hit =
            (size_t)(after - s) == len + 2 && !strncmp(s + 1, key, len);
        const char *v = skip_space(after, end);
        if (v >= end || *v != ':')
            return NULL;
        v = skip_space(v + 1, end);
        if (hit)
            return v;
        if (v < end && *v == '"')
            v = skip_string(v, end);
        else
            while (v < end && *v != ',' && *v != '}')
                ++v;
        s = v ? skip_space(v, end) : NULL;
        if (s && s < end && *s == ',')
            s = skip_space(s + 1, end);
    }
    return NULL;
}

bool json_get_string(const char *begin, const char *end, const char *key,
                     char *buf, size_t cap)
{
    const char *v = member(begin, end, key);
    if (!v || *v != '"' || !cap)
        return false;
    size_t n = 0;
    for (++v; v < end && *v != '"'; ++v) {
        if (*v == '\\' && v + 1 < end &&
            (v[1] == '"' || v[1] == '\\' || v[1] == '/'))
            ++v;
        if (n + 1 < cap)
            buf[n++] = *v;
    }
    buf[n] = '\0';
    return v < end;
}

bool json_get_number(const char *begin, const char *end, const char *key,
                     double *out)
{
    const char *v = member(begin, end, key);
    if (!v)
        return false;
    char *stop = NULL;
    const double value = strtod(v, &stop);
    if (stop == v || stop > end)
        return false;
    *out = value;
    return true;
}

bool json_get_true(const char *begin, const char *end, const char *key)
{
    const char *v = member(begin, end, key);
    return v && end - v >= 4 && !strncmp(v, "true", 4);
}

char *json_read_file(const char *path, size_t max_bytes)
{
    return read_regular_file(path, max_bytes, "file", NULL, NULL, 0);
}
