/* The sm_90a PTX patch (see sm90a_patch.h). */
#include "paths/sm90a_patch.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK_OPEN "/*SM90A"
#define MARK_CLOSE "*/"

static char *fail(char *why, size_t cap, const char *text, const char *arg)
{
    if (why && cap)
        snprintf(why, cap, text, arg);
    return NULL;
}

/* Copies `in` with every marked comment replaced by its contents; NULL
 * (why set) on a malformed marker. */
static char *uncomment(const char *in, size_t len, int *count, char *why,
                       size_t cap)
{
    char *out = malloc(len + 1);
    if (!out)
        return fail(why, cap, "out of memory%s", "");
    const size_t open = strlen(MARK_OPEN);
    size_t o = 0;
    *count = 0;
    for (size_t i = 0; i < len;) {
        if (len - i >= open && !memcmp(in + i, MARK_OPEN, open)) {
            const char *body = in + i + open;
            const char *end = strstr(body, MARK_CLOSE);
            const char *next = strstr(body, MARK_OPEN);
            if (!end || (size_t)(end - in) > len) {
                free(out);
                return fail(why, cap, "an SM90A comment has no end%s", "");
            }
            if (next && next < end) {
                free(out);
                return fail(why, cap, "an SM90A comment inside another%s", "");
            }
            memcpy(out + o, body, (size_t)(end - body));
            o += (size_t)(end - body);
            i = (size_t)(end - in) + strlen(MARK_CLOSE);
            ++*count;
        } else {
            out[o++] = in[i++];
        }
    }
    out[o] = '\0';
    return out;
}

/* Whether `line` (up to its newline) is the directive `name`. */
static bool is_directive(const char *line, const char *name)
{
    while (*line == ' ' || *line == '\t')
        ++line;
    const size_t n = strlen(name);
    return !strncmp(line, name, n) && (line[n] == ' ' || line[n] == '\t');
}

/* Appends the rewritten .target line (sm_90 -> sm_90a) to out at *o;
 * false (why set) when the line names no sm_90 target. */
static bool patch_target(const char *line, size_t n, char *out, size_t *o,
                         char *why, size_t cap)
{
    const char *sm = NULL;
    for (size_t i = 0; i + 3 <= n; ++i)
        if (!strncmp(line + i, "sm_", 3)) {
            sm = line + i;
            break;
        }
    size_t tok = 0;
    while (sm && sm + tok < line + n && (isalnum((unsigned char)sm[tok]) ||
                                         sm[tok] == '_'))
        ++tok;
    char name[32] = "";
    if (sm)
        snprintf(name, sizeof name, "%.*s", (int)(tok < 31 ? tok : 31), sm);
    if (strcmp(name, "sm_90") && strcmp(name, "sm_90a")) {
        fail(why, cap, "the PTX targets \"%s\", not sm_90", sm ? name : "?");
        return false;
    }
    const size_t head = (size_t)(sm - line) + tok;
    memcpy(out + *o, line, head);
    *o += head;
    if (!strcmp(name, "sm_90"))
        out[(*o)++] = 'a';
    memcpy(out + *o, line + head, n - head);
    *o += n - head;
    return true;
}

/* .version X.Y below 8.0 becomes 8.0 (the driver's 9.0 stays). */
static void patch_version(const char *line, size_t n, char *out, size_t *o)
{
    const char *v = strstr(line, ".version") + strlen(".version");
    while (*v == ' ' || *v == '\t')
        ++v;
    if (atoi(v) < 8) {
        *o += (size_t)sprintf(out + *o, ".version 8.0");
        return;
    }
    memcpy(out + *o, line, n);
    *o += n;
}

/* The kernel asks for `.maxnreg n` with a comment `SM90A_MAXNREG n` in
 * its body (cl/nvidia/flash_fwd_wgmma.cl): the directive goes on the line
 * before the body's `{` of the .entry. Frees `ptx` on failure. */
static char *apply_maxnreg(char *ptx, size_t *len, char *why, size_t why_cap)
{
    const char *mark = strstr(ptx, "SM90A_MAXNREG ");
    if (!mark)
        return ptx;
    const int n = atoi(mark + strlen("SM90A_MAXNREG "));
    const char *entry = strstr(ptx, ".entry ");
    const char *body = entry ? strstr(entry, "\n{") : NULL;
    if (n < 24 || n > 255 || !body || body > mark) {
        free(ptx);
        return fail(why, why_cap, "%s", "an SM90A_MAXNREG marker without a "
                                        "count in 24..255 in an .entry body");
    }
    char *out = malloc(*len + 32);
    if (!out) {
        free(ptx);
        return fail(why, why_cap, "out of memory%s", "");
    }
    const size_t head = (size_t)(body - ptx) + 1;
    memcpy(out, ptx, head);
    size_t o = head + (size_t)sprintf(out + head, ".maxnreg %d\n", n);
    memcpy(out + o, ptx + head, *len - head + 1);
    *len = o + *len - head;
    free(ptx);
    return out;
}

char *sm90a_patch_ptx(const char *ptx, size_t size, size_t *out_size,
                      int *markers, char *why, size_t why_cap)
{
    if (!ptx)
        return fail(why, why_cap, "no PTX%s", "");
    const char *nul = memchr(ptx, '\0', size);
    const size_t len = nul ? (size_t)(nul - ptx) : size;
    int count = 0;
    char *text = uncomment(ptx, len, &count, why, why_cap);
    if (!text)
        return NULL;
    if (count == 0) {
        free(text);
        return fail(why, why_cap, "no SM90A marker in the PTX (is it the "
                                  "wgmma kernel's?)%s", "");
    }
    const size_t tlen = strlen(text);
    char *out = malloc(tlen + 32);
    if (!out) {
        free(text);
        return fail(why, why_cap, "out of memory%s", "");
    }
    size_t o = 0;
    int targets = 0;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        const size_t n = eol ? (size_t)(eol - line) : strlen(line);
        if (is_directive(line, ".target") && targets++ == 0) {
            if (!patch_target(line, n, out, &o, why, why_cap)) {
                free(text);
                free(out);
                return NULL;
            }
        } else if (is_directive(line, ".version")) {
            patch_version(line, n, out, &o);
        } else {
            memcpy(out + o, line, n);
            o += n;
        }
        if (eol)
            out[o++] = '\n';
        line += n + (eol ? 1 : 0);
    }
    out[o] = '\0';
    free(text);
    if (targets != 1) {
        free(out);
        return fail(why, why_cap, "%s", targets ? "the PTX has more than one "
                                                  ".target directive"
                                                : "the PTX has no .target "
                                                  "directive");
    }
    out = apply_maxnreg(out, &o, why, why_cap);
    if (!out)
        return NULL;
    if (out_size)
        *out_size = o;
    if (markers)
        *markers = count;
    return out;
}

char *sm90a_set_shared_bytes(const char *ptx, size_t size, size_t bytes,
                             size_t *out_size, char *why, size_t why_cap)
{
    const char *nul = memchr(ptx, '\0', size);
    const size_t len = nul ? (size_t)(nul - ptx) : size;
    const char *found = NULL;
    int count = 0;
    for (size_t at = 0; at < len;) {
        const char *line = ptx + at;
        const char *eol = memchr(line, '\n', len - at);
        const size_t n = eol ? (size_t)(eol - line) : len - at;
        char text[256]; /* declarations are short; longer lines are not */
        snprintf(text, sizeof text, "%.*s", (int)(n < 255 ? n : 255), line);
        const char *shared = strstr(text, ".shared ");
        const char *b8 = strstr(text, " .b8 ");
        const char *bracket = strchr(text, '[');
        if (n < 255 && shared && b8 && bracket && shared < b8 &&
            b8 < bracket && isdigit((unsigned char)bracket[1])) {
            found = line + (bracket - text);
            ++count;
        }
        at += n + 1;
    }
    if (count != 1) {
        char text[64];
        snprintf(text, sizeof text, "%d", count);
        return fail(why, why_cap, "%s .shared arrays in the PTX, not 1", text);
    }
    const char *close = strchr(found, ']');
    char *out = malloc(len + 32);
    if (!out)
        return fail(why, why_cap, "out of memory%s", "");
    const size_t head = (size_t)(found - ptx) + 1;
    memcpy(out, ptx, head);
    size_t o = head + (size_t)sprintf(out + head, "%zu", bytes);
    const size_t tail = len - (size_t)(close - ptx);
    memcpy(out + o, close, tail);
    o += tail;
    out[o] = '\0';
    if (out_size)
        *out_size = o;
    return out;
}

size_t sm90a_shared_marker(const char *ptx, size_t size)
{
    static const char mark[] = "SM90A_SHARED_BYTES ";
    const char *nul = memchr(ptx, '\0', size);
    const size_t len = nul ? (size_t)(nul - ptx) : size;
    for (size_t at = 0; at + sizeof mark - 1 <= len; ++at) {
        if (memcmp(ptx + at, mark, sizeof mark - 1))
            continue;
        size_t n = 0, i = at + sizeof mark - 1;
        for (; i < len && ptx[i] >= '0' && ptx[i] <= '9' && n <= 232448; ++i)
            n = n * 10 + (size_t)(ptx[i] - '0');
        return n > 49152 && n <= 232448 ? n : 0;
    }
    return 0;
}
