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

/* Every variable the library (or the tool) reads, so that --help is the
 * one place a user needs to look. */
static const char environment_help[] =
    "environment:\n"
    "  FLASHCL_DEVICE         default device spec (as --device)\n"
    "  FLASHCL_BACKEND        auto|fused|reference for calls that leave the\n"
    "                         backend to it; `run` follows it unless\n"
    "                         --backend is given\n"
    "  FLASHCL_KERNEL_DIR     load .cl/.clh kernel sources from this folder\n"
    "                         instead of the embedded copies\n"
    "  FLASHCL_PORTABLE_ONLY  1 (any value but 0): never use a vendor kernel\n"
    "  FLASHCL_PATH           a path name: try only that path (the portable\n"
    "                         kernel takes what it cannot run)\n"
    "  FLASHCL_NV_TILE        block_m,block_n,warps: tiles of the NVIDIA\n"
    "                         tensor-core kernel (experiments, sweeps)\n"
    "  FLASHCL_NV_EXTRAS      vec|vec0|vec1|perm|pairs: how that kernel reads\n"
    "                         bias and mask (comparisons; default vec)\n"
    "  FLASHCL_NV_GRID        blocks|heads: its grid order with bias or mask\n"
    "                         (default heads when they are shared by heads)\n"    "  FLASHCL_NV_VARLEN_GRID  seqs|blocks: the NVIDIA kernels' grid order\n"
    "                         for packed (varlen) batches (default seqs\n"
    "                         when causal)\n"
    "  FLASHCL_SUBGROUP_SIZE  subgroup size of the subgroup path (8, 16, 32\n"
    "                         or 64, and one the device reports; else that\n"
    "                         path refuses and says why)\n"
    "  FLASHCL_AMD_MATRIX     0: never use the AMD MFMA/WMMA kernel\n"
    "  FLASHCL_AMD_EMULATE    mfma|wmma|wmma12 with FLASHCL_PATH=amd_mfma: emulate\n"
    "                         the AMD kernel with subgroup shuffles (testing)\n"
    "  FLASHCL_REFERENCE_SCRATCH_LIMIT  bytes (or 256M, 1G) of O(N^2) scratch\n"
    "                         the reference backend may use\n"
    ;
/* Split in two: C99 compilers need support only 4095-byte literals. */
static const char environment_help_inference[] =
    "  FLASHCL_SPLIT_SCRATCH_LIMIT  bytes (or 256M, 1G) of split-KV scratch\n"
    "                         (partial O and LSE) a context may keep\n"
    "  FLASHCL_SPLIT_KERNEL   row|wide|lanes|mma: the split-KV attention\n"
    "                         kernel (row: an item per packed row, the CPU\n"
    "                         default; wide: a work-group per tile, the GPU\n"
    "                         default but NVIDIA's; lanes: a lane group per\n"
    "                         key, K/V in registers; mma: tensor cores,\n"
    "                         NVIDIA's default where it fits, else lanes)\n"
    "  FLASHCL_SPLIT_TILE     wg,block_n,groups_per_cu[,max_rows]: the wide\n"
    "                         split-KV kernel's tiles, for sweeps\n"
    "  FLASHCL_SPLIT_LANES    wg,unroll,groups_per_cu[,max_rows[,prefetch]]:\n"
    "                         the lane split-KV kernel's tiles, for sweeps\n"
    "  FLASHCL_SPLIT_MMA      warps,groups_per_cu[,max_rows[,stages]]: the\n"
    "                         tensor-core split-KV kernel's tiles, for sweeps\n"
    "  FLASHCL_SPLIT_FUSED    0: the combine kernel merges that kernel's\n"
    "                         partials (default: its last work-group does)\n"
    "  FLASHCL_SPLIT_MMA_HALVES 2: that kernel keeps the rows g + 8 of its\n"
    "                         m16 tile when at most 8 rows are packed\n"
    "                         (default: dropped, their registers freed)\n"
    "  FLASHCL_SPLIT_MMA_LOAD 0..3: how that kernel reads K/V rows: 0\n"
    "                         quarters, 1 interleaved chunks, 2 and\n"
    "                         streamed (default up to 2048 keys a work-\n"
    "                         group, else 1), 3 and evicted from L2 first\n"
    "  FLASHCL_SPLIT_MMA_PREFETCH 0..16: that kernel also asks the L2 for\n"
    "                         K/V rows this many steps ahead (default 0:\n"
    "                         measured slower at every distance on the H200)\n"
    "  FLASHCL_NV_EMULATE     1 with FLASHCL_SPLIT_KERNEL=mma: that kernel on\n"
    "                         Intel's CPU runtime, its PTX emulated (testing)\n"
    "  FLASHCL_SPLIT_CP_ASYNC 0: the wide split-KV kernel's plain loads on\n"
    "                         NVIDIA too (default there: cp.async)\n"
    "  FLASHCL_VERBOSE        1 (any value but 0): kernel build logs and\n"
    "                         warnings on stderr\n"
    "  FLASHCL_CACHE          0 (or off): no persistent program-binary cache\n"
    "  FLASHCL_CACHE_DIR      its folder (default $XDG_CACHE_HOME/flashcl,\n"
    "                         else ~/.cache/flashcl)\n"
    "  FLASHCL_CACHE_MAX_BYTES  its size cap, bytes (or 64K, 256M, 1G;\n"
    "                         default 256M); least recently used go first\n"
    "  FLASHCL_TILES          block_m=64,block_n=32,vec=8,rows=2 (any of\n"
    "                         them; wg must be block_m / rows, rows 1, 2\n"
    "                         or 4 query rows per item): the portable kernel's\n"
    "                         tiles, for experiments; refused (with a note\n"
    "                         in the last-error text) when illegal here\n"
    "  FLASHCL_TUNING_FILE    a tuning database file (the JSON `flashcl tune`\n"
    "                         writes), consulted before the built-in one;\n"
    "                         entries illegal here are ignored with a note in\n"
    "                         the last-error text\n"
    "  FLASHCL_TUNING         0 (or off): neither the built-in tuning\n"
    "                         database nor FLASHCL_TUNING_FILE is used;\n"
    "                         the paths' hand tables decide\n";

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
            "spec that matches nothing, or a flashcl/OpenCL error\n%s%s",
            environment_help, environment_help_inference);
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
