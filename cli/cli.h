/* The flashcl command-line tool: exit statuses and the commands. Each
 * command lives in its own cli_<name>.c; the shared pieces are split by
 * concern: cli_args (options, --help), cli_device (opening and listing
 * devices), cli_problem (one attention problem and its oracle check),
 * cli_report (JSON, error reports, progress). */
#ifndef FLASHCL_CLI_H
#define FLASHCL_CLI_H

#include "flashcl.h"

/* Exit statuses of every command (documented in --help and docs/cli.md). */
#define EXIT_OK 0
#define EXIT_FAILED 1 /* a check failed (selftest FAIL, run out of tolerance) */
#define EXIT_USAGE 2  /* bad command, flag or value */
#define EXIT_DEVICE 3 /* no OpenCL, device spec matched nothing, or a \
                       * flashcl/OpenCL call failed */

struct cli_command;

extern const struct cli_command info_command, run_command,
    selftest_command, bench_command, tune_command;

int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_selftest(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tune(int argc, char **argv);

#endif /* FLASHCL_CLI_H */
