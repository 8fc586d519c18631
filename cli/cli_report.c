/* Output of the flashcl tool (see cli_report.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli_report.h"

#include <math.h>
#include <stdarg.h>
#include <time.h>
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
    p->beating = false;
    p->step = 0;
    p->what[0] = '\0';
}

static double monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Caller holds p->lock when the heartbeat runs. */
static void show_step(progress *p, const char *suffix)
{
    fprintf(stderr, "%s[%d/%d] %s%s", p->terminal ? "\r\033[K" : "",
            p->step, p->total, p->what, suffix);
    if (!p->terminal)
        fputc('\n', stderr);
    p->shown = p->terminal;
    p->shown_ms = monotonic_ms();
    fflush(stderr);
}

static void lock_if_beating(progress *p)
{
    if (p->beating)
        pthread_mutex_lock(&p->lock);
}

static void unlock_if_beating(progress *p)
{
    if (p->beating)
        pthread_mutex_unlock(&p->lock);
}

void progress_step(progress *p, int step, const char *fmt, ...)
{
    if (!p->enabled)
        return;
    lock_if_beating(p);
    p->step = step;
    va_list args;
    va_start(args, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, args);
    va_end(args);
    p->step_ms = monotonic_ms();
    show_step(p, "");
    unlock_if_beating(p);
}

void progress_clear(progress *p)
{
    lock_if_beating(p);
    if (p->enabled && p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->shown = false;
    }
    unlock_if_beating(p);
}

static void *heartbeat_main(void *arg)
{
    progress *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250 * 1000 * 1000; /* checks 4 times a second */
        if (until.tv_nsec >= 1000 * 1000 * 1000) {
            until.tv_sec += 1;
            until.tv_nsec -= 1000 * 1000 * 1000;
        }
        pthread_cond_timedwait(&p->wake, &p->lock, &until);
        const double now = monotonic_ms();
        if (!p->stop && p->step > 0 &&
            now - p->shown_ms >= PROGRESS_HEARTBEAT_S * 1e3) {
            char suffix[64];
            snprintf(suffix, sizeof suffix, " (still working, %.0f s)",
                     (now - p->step_ms) / 1e3);
            show_step(p, suffix);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void progress_heartbeat_start(progress *p)
{
    if (!p->enabled || p->beating)
        return;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->stop = false;
    p->shown_ms = monotonic_ms();
    p->beating = pthread_create(&p->thread, NULL, heartbeat_main, p) == 0;
    if (!p->beating) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
    }
}

void progress_heartbeat_stop(progress *p)
{
    if (!p->beating)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    p->beating = false;
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
}
