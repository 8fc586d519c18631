/* Output of the flashcl tool (see cli_report.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli_report.h"

#include <math.h>
#include <stdarg.h>
#include <unistd.h>

/* ---- JSON ---------------------------------------------------------- */

void json_begin(json_writer *j, FILE *out, int break_depth)
{
    j->out = out;
    j->depth = 0;
    j->break_depth = break_depth;
}

void json_end(json_writer *j)
{
    fputc('\n', j->out);
    fflush(j->out);
}

static void escaped(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; c && *c; ++c) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c == '\n')
            fputs("\\n", out);
        else if (*c < 0x20)
            fprintf(out, "\\u%04x", *c);
        else
            fputc(*c, out);
    }
    fputc('"', out);
}

/* Separator, line break and key before a member. */
static void member(json_writer *j, const char *key)
{
    if (j->depth > 0) {
        bool *has = &j->has_members[j->depth - 1];
        if (*has)
            fputc(',', j->out);
        if (j->depth <= j->break_depth)
            fprintf(j->out, "\n%*s", 2 * j->depth, "");
        else if (*has)
            fputc(' ', j->out);
        *has = true;
    }
    if (key) {
        escaped(j->out, key);
        fputs(": ", j->out);
    }
}

static void open_container(json_writer *j, const char *key, char opener,
                           char closer)
{
    member(j, key);
    fputc(opener, j->out);
    if (j->depth < JSON_MAX_DEPTH) {
        j->has_members[j->depth] = false;
        j->closer[j->depth] = closer;
    }
    ++j->depth;
}

void json_object(json_writer *j, const char *key)
{
    open_container(j, key, '{', '}');
}

void json_array(json_writer *j, const char *key)
{
    open_container(j, key, '[', ']');
}

void json_close(json_writer *j)
{
    if (j->depth == 0)
        return;
    --j->depth;
    if (j->has_members[j->depth] && j->depth < j->break_depth)
        fprintf(j->out, "\n%*s", 2 * j->depth, "");
    fputc(j->closer[j->depth], j->out);
    fflush(j->out); /* rows of a long command appear as they are done */
}

void json_string(json_writer *j, const char *key, const char *value)
{
    member(j, key);
    escaped(j->out, value ? value : "");
}

void json_number(json_writer *j, const char *key, double value)
{
    member(j, key);
    if (isfinite(value))
        fprintf(j->out, "%.6g", value);
    else
        fputs("null", j->out);
}

void json_integer(json_writer *j, const char *key, long long value)
{
    member(j, key);
    fprintf(j->out, "%lld", value);
}

void json_bool(json_writer *j, const char *key, bool value)
{
    member(j, key);
    fputs(value ? "true" : "false", j->out);
}

void json_null(json_writer *j, const char *key)
{
    member(j, key);
    fputs("null", j->out);
}

/* ---- failures ------------------------------------------------------ */

int report_failure(const char *command, bool json, flashcl_status status,
                   const char *message, int exit_status)
{
    fprintf(stderr, "flashcl %s: %s: %s\n", command,
            flashcl_status_string(status), message);
    if (json) {
        json_writer j;
        json_begin(&j, stdout, 0);
        json_object(&j, NULL);
        json_string(&j, "command", command);
        json_string(&j, "error", flashcl_status_string(status));
        json_integer(&j, "status", (long long)status);
        json_string(&j, "message", message);
        json_integer(&j, "exit_status", exit_status);
        json_close(&j);
        json_end(&j);
    }
    return exit_status;
}

/* ---- progress ------------------------------------------------------ */

void progress_begin(progress *p, int total, bool enabled)
{
    p->total = total;
    p->enabled = enabled;
    p->terminal = isatty(STDERR_FILENO) == 1;
    p->shown = false;
}

void progress_step(progress *p, int step, const char *fmt, ...)
{
    if (!p->enabled)
        return;
    fprintf(stderr, "%s[%d/%d] ", p->terminal ? "\r\033[K" : "", step,
            p->total);
    va_list args;
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    if (!p->terminal)
        fputc('\n', stderr);
    p->shown = p->terminal;
    fflush(stderr);
}

void progress_clear(progress *p)
{
    if (p->enabled && p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->shown = false;
    }
}
