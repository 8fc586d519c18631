/* flashcl: command-line tool. `info` lists every OpenCL device with what
 * flashcl would run there; `run` computes one attention and checks it;
 * `selftest` builds every kernel variant and checks fused against the
 * reference backend and the float64 oracle; `bench` times both backends
 * side by side. Each command lives in its own cli_*.c file. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "cli_args.h"

#include <string.h>

typedef struct command_entry {
    const cli_command *command;
    int (*run)(int argc, char **argv);
} command_entry;

static const command_entry commands[] = {
    {&info_command, cmd_info},
    {&run_command, cmd_run},
    {&selftest_command, cmd_selftest},
    {&bench_command, cmd_bench},
    {&tune_command, cmd_tune},
};
#define COMMANDS ((int)(sizeof commands / sizeof commands[0]))

/* The variables users set (README's table); the developers' comparison
 * knobs are in docs/environment.md, which --help points to, so that the
 * help stays one screen. */
static const char environment_help[] =
    "environment (what users set; every variable: docs/environment.md):\n"
    "  FLASHCL_DEVICE         default device spec (as --device)\n"
    "  FLASHCL_BACKEND        auto|fused|reference for calls that leave the\n"
    "                         backend to it; `run` follows it unless\n"
    "                         --backend is given\n"
    "  FLASHCL_CACHE          0 (or off): no persistent program-binary cache\n"
    "  FLASHCL_CACHE_DIR      its folder (default $XDG_CACHE_HOME/flashcl,\n"
    "                         else ~/.cache/flashcl)\n"
    "  FLASHCL_CACHE_MAX_BYTES  its size cap: bytes, or 64K, 256M, 1G\n"
    "                         (default 256M)\n"
    "  FLASHCL_TUNING         0 (or off): no tuning database is used\n"
    "  FLASHCL_TUNING_FILE    a JSON file from `flashcl tune`, consulted\n"
    "                         before the built-in database\n"
    "  FLASHCL_VERBOSE        1: kernel build logs and notes on stderr\n"
    "  FLASHCL_SPLIT_SCRATCH_LIMIT, FLASHCL_REFERENCE_SCRATCH_LIMIT\n"
    "                         scratch caps (bytes, or 256M, 1G) of split-KV\n"
    "                         and of the reference backend\n"
    "  FLASHCL_KERNEL_DIR     load the kernel sources from this folder\n"
    "  FLASHCL_PATH           force a kernel path (listed below)\n"
    "  FLASHCL_TILES          the portable kernel's tiles, any of\n"
    "                         block_m=64,block_n=32,vec=8,rows=2\n"
    "A FLASHCL_PATH, FLASHCL_TILES or FLASHCL_DEVICE that is not legal\n"
    "makes the call fail with a message saying what is.\n";

static void usage(FILE *out)
{
    fprintf(out, "usage: flashcl <command> [options]\ncommands:\n");
    for (int i = 0; i < COMMANDS; ++i)
        fprintf(out, "  %-9s %s\n", commands[i].command->name,
                commands[i].command->summary);
    fprintf(out,
            "options of every command (flashcl <command> --help for the "
            "rest):\n"
            "  --device SPEC  index (0), platform:device (1:0), gpu|cpu|"
            "accelerator,\n"
            "                 or a name substring (nvidia, pocl); default "
            "FLASHCL_DEVICE,\n"
            "                 else the first GPU, else the first device\n"
            "  --json         machine-readable output on stdout (and a JSON "
            "error\n"
            "                 object when a command fails after parsing)\n"
            "  --help         the command's own options (flashcl bench "
            "--help)\n"
            "exit status: 0 ok, 1 a check failed, 2 usage error, 3 no "
            "device, a device\n"
            "spec that matches nothing, or a flashcl/OpenCL error\n%s",
            environment_help);
    /* the library's own list, so that a new path needs no edit here */
    fprintf(out, "kernel paths, in the order they are tried:");
    for (int i = 0; flashcl_path_name(i); ++i)
        fprintf(out, "%s %s", i ? "," : "", flashcl_path_name(i));
    fprintf(out, "\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") ||
        !strcmp(name, "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(name, "--version")) {
        printf("flashcl %s\n", flashcl_version_string());
        return EXIT_OK;
    }
    for (int i = 0; i < COMMANDS; ++i)
        if (!strcmp(name, commands[i].command->name)) {
            const int status = commands[i].run(argc - 1, argv + 1);
            /* Before exit, while the OpenCL runtime is whole (oclgrind
             * faults when CLBlast frees its programs later, at teardown). */
            flashcl_clear_reference_cache();
            return status;
        }
    fprintf(stderr, "flashcl: unknown command \"%s\" (see flashcl --help)\n",
            name);
    return EXIT_USAGE;
}
