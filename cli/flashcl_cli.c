/* flashcl: command-line tool. `info` lists every OpenCL device with what
 * flashcl would run there; `run` computes one attention and checks it;
 * `selftest` builds every kernel variant and checks fused against the
 * reference backend and a float64 host reference; `bench` times both
 * backends side by side. Each command lives in its own cli_*.c file. */
#define _POSIX_C_SOURCE 200809L
#include "cli_common.h"

#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flashcl <command> [options]\n"
            "commands:\n"
            "  info      every OpenCL device and what flashcl runs there\n"
            "  run       one attention: error vs float64 and time\n"
            "  selftest  build every kernel variant; fused vs reference vs "
            "float64\n"
            "  bench     fused and reference backends side by side\n"
            "options of every command:\n"
            "  --device SPEC  index (0), platform:device (1:0), gpu|cpu|"
            "accelerator,\n"
            "                 or a name substring (nvidia, pocl); default "
            "FLASHCL_DEVICE,\n"
            "                 else the first GPU, else the first device\n"
            "  --json         machine-readable output on stdout\n"
            "  --help         the command's own options (flashcl bench "
            "--help)\n"
            "exit status: 0 ok, 1 a check failed, 2 usage error, 3 no "
            "device or a\n"
            "flashcl/OpenCL error\n"
            "environment: FLASHCL_DEVICE, FLASHCL_BACKEND (auto|fused|"
            "reference),\n"
            "FLASHCL_REFERENCE_SCRATCH_LIMIT (bytes, or 256M), "
            "FLASHCL_KERNEL_DIR\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *command = argv[1];
    if (!strcmp(command, "--help") || !strcmp(command, "-h") ||
        !strcmp(command, "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(command, "--version")) {
        printf("flashcl %s\n", flashcl_version_string());
        return EXIT_OK;
    }
    if (!strcmp(command, "info"))
        return cmd_info(argc, argv);
    if (!strcmp(command, "run"))
        return cmd_run(argc, argv);
    if (!strcmp(command, "selftest"))
        return cmd_selftest(argc, argv);
    if (!strcmp(command, "bench"))
        return cmd_bench(argc, argv);
    fprintf(stderr, "flashcl: unknown command \"%s\" (see flashcl --help)\n",
            command);
    return EXIT_USAGE;
}
