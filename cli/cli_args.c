/* Command-line options (see cli_args.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli_args.h"

#include "cli.h"
#include "oracle.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPTIONS 40
#define HELP_COLUMN 22

/* getopt_long values: the common options, then 1000 + table index. */
enum { OPT_DEVICE = 1, OPT_JSON, OPT_HELP, OPT_TABLE = 1000 };

static const cli_option common_table[] = {
    {.name = "device", .metavar = "SPEC",
     .help = "the device: index (0), platform:device (1:0),\n"
             "gpu|cpu|accelerator, or a name substring (nvidia,\n"
             "pocl); default FLASHCL_DEVICE, else the first GPU,\n"
             "else the first device"},
    {.name = "json", .help = "machine-readable output on stdout"},
    {.name = "help", .help = "this text"},
};

void usage_error(const char *command, const char *fmt, ...)
{
    fprintf(stderr, "flashcl%s%s: ", command ? " " : "", command ? command : "");
    va_list args;
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, " (see flashcl %s%s--help)\n", command ? command : "",
            command ? " " : "");
}

/* ---- values -------------------------------------------------------- */

bool parse_int(const char *text, long min, long max, long *out)
{
    if (!text || !*text)
        return false;
    errno = 0;
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < min || value > max)
        return false;
    *out = value;
    return true;
}

bool parse_double(const char *text, double *out)
{
    if (!text || !*text)
        return false;
    errno = 0;
    char *end = NULL;
    double value = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(value))
        return false;
    *out = value;
    return true;
}

bool parse_int_list(const char *text, long min, long max, int *out, int cap,
                    int *count)
{
    *count = 0;
    if (!text || !*text)
        return false;
    char *copy = strdup(text);
    bool ok = copy != NULL;
    char *save = NULL;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; item && ok;
         item = strtok_r(NULL, ",", &save)) {
        long value;
        ok = *count < cap && parse_int(item, min, max, &value);
        if (ok)
            out[(*count)++] = (int)value;
    }
    free(copy);
    /* strtok_r skips empty items: "64,,x" must still fail on "x", and
     * "64,," on the empty ones. */
    return ok && *count > 0 && !strstr(text, ",,") &&
           text[strlen(text) - 1] != ',' && text[0] != ',';
}

const char *dtype_name(flashcl_dtype dtype)
{
    return oracle_dtype_name(dtype);
}

bool parse_dtype(const char *text, flashcl_dtype *out)
{
    static const flashcl_dtype all[4] = {FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16,
                                         FLASHCL_DTYPE_BF16, FLASHCL_DTYPE_FP64};
    for (int i = 0; text && i < 4; ++i)
        if (!strcmp(text, dtype_name(all[i]))) {
            *out = all[i];
            return true;
        }
    return false;
}

bool parse_dtype_list(const char *text, flashcl_dtype *out, int cap,
                      int *count)
{
    *count = 0;
    char *copy = strdup(text ? text : "");
    bool ok = copy != NULL && *copy;
    char *save = NULL;
    for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; item && ok;
         item = strtok_r(NULL, ",", &save))
        ok = *count < cap && parse_dtype(item, &out[(*count)++]);
    free(copy);
    return ok && *count > 0;
}

/* ---- the getopt_long table ----------------------------------------- */

static int table_size(const cli_option *table)
{
    int n = 0;
    while (table && table[n].name)
        ++n;
    return n;
}

static void build_long_options(const cli_command *command,
                               struct option *out)
{
    const int vals[3] = {OPT_DEVICE, OPT_JSON, OPT_HELP};
    int n = 0;
    for (int i = 0; i < 3; ++i, ++n)
        out[n] = (struct option){common_table[i].name,
                                 i == 0 ? required_argument : no_argument,
                                 NULL, vals[i]};
    const int count = table_size(command->options);
    for (int i = 0; i < count && n < MAX_OPTIONS; ++i, ++n) {
        const cli_option *o = &command->options[i];
        out[n] = (struct option){o->name,
                                 o->metavar ? required_argument : no_argument,
                                 NULL, OPT_TABLE + i};
    }
    out[n] = (struct option){NULL, 0, NULL, 0};
}

/* The argv entry that named the option getopt_long just returned. */
static const char *option_text(char **argv)
{
    if (optarg && optind >= 2 && optarg == argv[optind - 1])
        return argv[optind - 2];
    return argv[optind - 1];
}

/* getopt_long also accepts unambiguous prefixes ("--seq" for --seqlen);
 * refused, so that a script's abbreviation cannot start meaning another
 * option when one is added. */
static bool spelled_out(const char *text, const char *name)
{
    if (strncmp(text, "--", 2) != 0)
        return true; /* -h */
    size_t length = strcspn(text + 2, "=");
    return length == strlen(name) && !strncmp(text + 2, name, length);
}

static const char *name_of(const cli_command *command, int val)
{
    if (val >= OPT_TABLE)
        return command->options[val - OPT_TABLE].name;
    return val >= OPT_DEVICE && val <= OPT_HELP ? common_table[val - 1].name
                                                : "?";
}

static void value_error(const cli_command *command, const cli_option *o)
{
    if (o->needs)
        usage_error(command->name, "--%s needs %s", o->name, o->needs);
    else
        usage_error(command->name, "--%s needs an integer in %ld..%ld",
                    o->name, o->min, o->max);
}

static bool apply_table_option(const cli_command *command, int index,
                               const char *value, void *opts)
{
    const cli_option *o = &command->options[index];
    char *field = (char *)opts + o->offset;
    long number = 0;
    bool ok = true;
    switch (o->kind) {
    case CLI_FLAG:
        *(bool *)field = true;
        break;
    case CLI_INT:
        ok = parse_int(value, o->min, o->max, &number);
        if (ok)
            *(int *)field = (int)number;
        break;
    case CLI_LONG:
        ok = parse_int(value, o->min, o->max, &number);
        if (ok)
            *(long *)field = number;
        break;
    case CLI_CUSTOM:
        ok = o->parse(opts, value);
        break;
    }
    if (!ok)
        value_error(command, o);
    return ok;
}

static bool apply_option(const cli_command *command, int val,
                         const char *value, common_options *common,
                         void *opts)
{
    switch (val) {
    case OPT_DEVICE:
        if (!value || !*value) {
            usage_error(command->name, "--device needs a device spec");
            return false;
        }
        common->device = value;
        return true;
    case OPT_JSON:
        common->json = true;
        return true;
    case OPT_HELP:
    case 'h':
        common->help = true;
        return true;
    default:
        return apply_table_option(command, val - OPT_TABLE, value, opts);
    }
}

/* The getopt_long value of the table option `letter` stands for: -v is
 * --verbose (a flag), the one short alias a command may have. */
static int short_option_val(const cli_command *command, int letter)
{
    for (int i = 0; letter == 'v' && i < table_size(command->options); ++i)
        if (!strcmp(command->options[i].name, "verbose") &&
            !command->options[i].metavar)
            return OPT_TABLE + i;
    return letter;
}

/* getopt_long's '?' and ':' turned into our one-line messages. */
static void report_getopt_error(const cli_command *command, int result,
                                char **argv)
{
    const char *text = argv[optind - 1];
    if (result == ':') {
        if (optopt == OPT_DEVICE)
            usage_error(command->name, "--device needs a device spec");
        else if (optopt >= OPT_TABLE)
            value_error(command, &command->options[optopt - OPT_TABLE]);
        else
            usage_error(command->name, "%s needs a value", text);
    } else if (optopt != 0 && !strncmp(text, "--", 2)) {
        usage_error(command->name, "--%s takes no value",
                    name_of(command, optopt));
    } else {
        usage_error(command->name, "unknown option \"%s\"", text);
    }
}

int cli_parse(const cli_command *command, int argc, char **argv,
              common_options *common, void *opts)
{
    struct option longopts[MAX_OPTIONS + 4];
    build_long_options(command, longopts);
    /* '+': stop at the first non-option instead of permuting argv; ':':
     * tell a missing value from an unknown option. */
    const char *shorts = short_option_val(command, 'v') != 'v' ? "+:hv"
                                                               : "+:h";
    opterr = 0; /* our messages, not getopt's */
    optind = 0; /* full reinitialisation (glibc) */
    int index = -1, result;
    while ((result = getopt_long(argc, argv, shorts, longopts, &index)) !=
           -1) {
        if (result == '?' || result == ':') {
            report_getopt_error(command, result, argv);
            return -1;
        }
        const char *text = option_text(argv);
        if (index >= 0 && !spelled_out(text, longopts[index].name)) {
            usage_error(command->name, "unknown option \"%s\"", text);
            return -1;
        }
        if (index < 0 && result != 'h')
            result = short_option_val(command, result);
        if (!apply_option(command, result, optarg, common, opts))
            return -1;
        index = -1;
    }
    if (optind < argc) {
        usage_error(command->name, "unexpected argument \"%s\"", argv[optind]);
        return -1;
    }
    return 0;
}

/* ---- --help -------------------------------------------------------- */

static void print_option_help(const cli_option *o, FILE *out)
{
    char left[64];
    snprintf(left, sizeof left, "  %s--%s%s%s",
             strcmp(o->name, "verbose") || o->metavar ? "" : "-v, ", o->name,
             o->metavar ? " " : "", o->metavar ? o->metavar : "");
    fprintf(out, "%-*s", HELP_COLUMN, left);
    if ((int)strlen(left) >= HELP_COLUMN)
        fprintf(out, "\n%*s", HELP_COLUMN, "");
    for (const char *c = o->help; *c; ++c) {
        fputc(*c, out);
        if (*c == '\n')
            fprintf(out, "%*s", HELP_COLUMN, "");
    }
    fputc('\n', out);
}

void cli_print_help(const cli_command *command, FILE *out)
{
    fprintf(out, "usage: flashcl %s [options]\n%s\noptions:\n", command->name,
            command->summary);
    for (int i = 0; i < table_size(command->options); ++i)
        print_option_help(&command->options[i], out);
    for (size_t i = 0; i < sizeof common_table / sizeof common_table[0]; ++i)
        print_option_help(&common_table[i], out);
    if (command->description)
        fprintf(out, "%s", command->description);
}

int cli_start(const cli_command *command, int argc, char **argv,
              common_options *common, void *opts)
{
    if (cli_parse(command, argc, argv, common, opts) != 0)
        return EXIT_USAGE;
    if (common->help) {
        cli_print_help(command, stdout);
        return EXIT_OK;
    }
    return CLI_GO_ON;
}
