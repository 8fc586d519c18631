/* Output of the flashcl tool: a small streaming JSON writer, the report of
 * a failed command (stderr line, and a JSON error object under --json),
 * and the progress line of the long commands. */
#ifndef FLASHCL_CLI_REPORT_H
#define FLASHCL_CLI_REPORT_H

#include "flashcl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

/* ---- JSON ---------------------------------------------------------- */

#define JSON_MAX_DEPTH 16

/* Members of containers nested at most `break_depth` deep go on their own
 * indented lines, deeper ones stay on one line: 0 gives one line in all,
 * 2 one line per row of a top-level array. */
typedef struct json_writer {
    FILE *out;
    int depth, break_depth;
    bool has_members[JSON_MAX_DEPTH];
    char closer[JSON_MAX_DEPTH];
} json_writer;

void json_begin(json_writer *j, FILE *out, int break_depth);
/* Ends the document with a newline and flushes. */
void json_end(json_writer *j);
/* `key` is NULL inside arrays and for the top-level value. */
void json_object(json_writer *j, const char *key);
void json_array(json_writer *j, const char *key);
void json_close(json_writer *j);
void json_string(json_writer *j, const char *key, const char *value);
/* A number, or null when it is not finite (JSON has no NaN). */
void json_number(json_writer *j, const char *key, double value);
void json_integer(json_writer *j, const char *key, long long value);
void json_bool(json_writer *j, const char *key, bool value);
void json_null(json_writer *j, const char *key);

/* ---- failures ------------------------------------------------------ */

/* A command that failed after its arguments were read: one line
 * "flashcl CMD: STATUS: MESSAGE" on stderr (MESSAGE may continue on further
 * lines, e.g. the library's list of devices) and, with --json, one JSON
 * object {"command", "error", "status", "message", "exit_status"} on
 * stdout. Returns exit_status. */
int report_failure(const char *command, bool json, flashcl_status status,
                   const char *message, int exit_status);

/* ---- progress ------------------------------------------------------ */

/* Progress of `total` steps on stderr: on a terminal one line rewritten
 * in place, otherwise one "[k/n] what" line per step (a log shows where a
 * long run is). Nothing when disabled. With a heartbeat on, a step that
 * runs longer than PROGRESS_HEARTBEAT_S is shown again every
 * PROGRESS_HEARTBEAT_S, with its time so far: a cold kernel compile can
 * take a minute, and a silent tool looks hung (issue 42, item 7). */
#define PROGRESS_HEARTBEAT_S 2

typedef struct progress {
    int total;
    bool enabled, terminal, shown;
    /* the heartbeat's: the step shown last and when; `lock` orders the
     * two threads' writes to stderr */
    bool beating, stop;
    int step;
    char what[200];
    double step_ms, shown_ms;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
} progress;

void progress_begin(progress *p, int total, bool enabled);
void progress_step(progress *p, int step, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Removes the in-place line before stdout output (a no-op for lines). */
void progress_clear(progress *p);
/* Starts and stops the heartbeat thread (nothing when disabled, or when
 * the thread cannot start: the steps are still shown). */
void progress_heartbeat_start(progress *p);
void progress_heartbeat_stop(progress *p);

#endif /* FLASHCL_CLI_REPORT_H */
