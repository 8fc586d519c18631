/* Command-line options of the flashcl tool: a table per command, parsed
 * with getopt_long, and the --help text generated from the same table so
 * that the two cannot drift apart. */
#ifndef FLASHCL_CLI_ARGS_H
#define FLASHCL_CLI_ARGS_H

#include "flashcl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* What kind of value an option takes and where it goes. */
typedef enum cli_kind {
    CLI_FLAG,   /* bool, no value */
    CLI_INT,    /* int in [min, max] */
    CLI_LONG,   /* long in [min, max] */
    CLI_CUSTOM  /* parse() stores it */
} cli_kind;

typedef struct cli_option {
    const char *name;    /* long name without "--"; NULL ends a table */
    const char *metavar; /* value in --help ("N", "LIST"); NULL for flags */
    const char *help;    /* --help text; '\n' continues on an indented line */
    cli_kind kind;
    size_t offset; /* of the field in the command's option struct */
    long min, max; /* CLI_INT, CLI_LONG */
    /* CLI_CUSTOM: stores `value` into `opts`, or returns false. */
    bool (*parse)(void *opts, const char *value);
    /* What a valid value is, for the error message ("fused or
     * reference"); numbers say their range themselves. */
    const char *needs;
} cli_option;

/* The entry that ends an option table (its name is NULL). */
#define CLI_OPTIONS_END {NULL, NULL, NULL, CLI_FLAG, 0, 0, 0, NULL, NULL}

typedef struct cli_command {
    const char *name;        /* "run" */
    const char *summary;     /* one line in `flashcl --help` */
    const char *description; /* after the options in `flashcl CMD --help` */
    const cli_option *options; /* NULL-terminated, or NULL for none */
} cli_command;

/* Options every command takes. */
typedef struct common_options {
    const char *device; /* NULL: FLASHCL_DEVICE, else the default */
    bool json;
    bool help;
} common_options;

/* Parses the arguments after the command name (argv[0] is the command).
 * --device, --json and --help/-h are handled here, the command's table
 * fills `opts`; a table's flag named "verbose" also answers to -v. Exact
 * long names only. On a bad argument prints one line, "flashcl CMD: ...
 * (see flashcl CMD --help)", and returns -1. */
int cli_parse(const cli_command *command, int argc, char **argv,
              common_options *common, void *opts);

/* What every command does first: cli_parse(), then --help. Returns
 * CLI_GO_ON when the command should run, else the exit status (EXIT_USAGE
 * after a bad argument, EXIT_OK after printing the help). */
#define CLI_GO_ON (-1)
int cli_start(const cli_command *command, int argc, char **argv,
              common_options *common, void *opts);

/* `flashcl CMD --help`: usage line, the options of the table and the
 * common ones, then the description. */
void cli_print_help(const cli_command *command, FILE *out);

/* Print "flashcl CMD: MESSAGE (see flashcl CMD --help)" on stderr. */
void usage_error(const char *command, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Strict integer parsing: the whole text, within [min, max]. */
bool parse_int(const char *text, long min, long max, long *out);
/* A finite number, the whole text. */
bool parse_double(const char *text, double *out);
/* "64,128" -> {64, 128}; false on any bad item or more than `cap`. */
bool parse_int_list(const char *text, long min, long max, int *out, int cap,
                    int *count);
bool parse_dtype(const char *text, flashcl_dtype *out);
/* "fp32,fp16" -> dtypes; false on an unknown name. */
bool parse_dtype_list(const char *text, flashcl_dtype *out, int cap,
                      int *count);
const char *dtype_name(flashcl_dtype dtype);

#endif /* FLASHCL_CLI_ARGS_H */
