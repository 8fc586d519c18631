/*
 * The flashcl command-line tool, run as a program: argument and device-spec
 * parsing (exit status 2 with a one-line error and a usage hint for a bad
 * flag or value, 3 for a spec that matches no device), --help, --json, and
 * `flashcl info`, `run`, `selftest` and `bench` on the test device.
 *
 * Usage: test_cli PATH_TO_FLASHCL
 */
#define _POSIX_C_SOURCE 200809L
#include "test_common.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *flashcl_path;

/* What one run of the tool gave. */
typedef struct tool_result {
    int status; /* exit status, or -1 if it did not exit normally */
    char *out;  /* stdout */
    char *err;  /* stderr */
} tool_result;

static char *read_all(FILE *file)
{
    size_t cap = 4096, len = 0;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    size_t got;
    while ((got = fread(text + len, 1, cap - len - 1, file)) > 0) {
        len += got;
        if (cap - len < 2) {
            cap *= 2;
            text = realloc(text, cap);
            ck_assert_ptr_nonnull(text);
        }
    }
    text[len] = '\0';
    return text;
}

/* Runs `flashcl ARGS` (ARGS as a shell fragment, with an optional
 * environment prefix) and captures both streams. */
static tool_result tool(const char *env, const char *args)
{
    char err_path[] = "/tmp/flashcl_cli_test_XXXXXX";
    int fd = mkstemp(err_path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char command[2048];
    snprintf(command, sizeof command, "%s '%s' %s 2>'%s'", env ? env : "",
             flashcl_path, args, err_path);
    FILE *pipe = popen(command, "r");
    ck_assert_msg(pipe != NULL, "popen(%s) failed", command);
    tool_result r;
    r.out = read_all(pipe);
    int raw = pclose(pipe);
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    FILE *err = fopen(err_path, "r");
    ck_assert_ptr_nonnull(err);
    r.err = read_all(err);
    fclose(err);
    remove(err_path);
    return r;
}

static void tool_free(tool_result *r)
{
    free(r->out);
    free(r->err);
}

static int count_lines(const char *text)
{
    int lines = 0;
    for (; *text; ++text)
        lines += *text == '\n';
    return lines;
}

/* A bad invocation: exit 2, exactly one line on stderr that contains
 * `needle` and points at --help, nothing on stdout. */
static void expect_usage_error(const char *args, const char *needle)
{
    tool_result r = tool(NULL, args);
    ck_assert_msg(r.status == 2, "flashcl %s: exit %d, want 2 (stderr: %s)",
                  args, r.status, clip(r.err));
    ck_assert_msg(count_lines(r.err) == 1, "flashcl %s: %d stderr lines: %s",
                  args, count_lines(r.err), clip(r.err));
    ck_assert_msg(strstr(r.err, needle) != NULL,
                  "flashcl %s: \"%s\" not in: %s", args, needle, clip(r.err));
    ck_assert_msg(strstr(r.err, "--help") != NULL,
                  "flashcl %s: no usage hint in: %s", args, clip(r.err));
    ck_assert_msg(r.out[0] == '\0', "flashcl %s wrote to stdout: %s", args,
                  clip(r.out));
    tool_free(&r);
}

/* Objects and arrays balanced outside strings, one top-level value, and
 * `key` present: enough to catch a broken writer without a JSON library. */
static void expect_json(const char *text, const char *key)
{
    int depth = 0, tops = 0;
    int in_string = 0;
    for (const char *c = text; *c; ++c) {
        if (in_string) {
            if (*c == '\\' && c[1])
                ++c;
            else if (*c == '"')
                in_string = 0;
            continue;
        }
        if (*c == '"')
            in_string = 1;
        else if (*c == '{' || *c == '[')
            tops += depth++ == 0;
        else if (*c == '}' || *c == ']')
            ck_assert_msg(--depth >= 0, "unbalanced JSON: %s", clip(text));
    }
    ck_assert_msg(depth == 0 && !in_string && tops == 1,
                  "not one JSON value: %s", clip(text));
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    ck_assert_msg(strstr(text, quoted) != NULL, "JSON lacks %s: %s", quoted,
                  clip(text));
    const char *bad[] = {": nan", ": -nan", ": inf", ": -inf"};
    for (int i = 0; i < 4; ++i)
        ck_assert_msg(strstr(text, bad[i]) == NULL,
                      "JSON has a non-finite number: %s", clip(text));
}

/* ---------------------------------------------------------------- */

START_TEST(usage_and_bad_arguments)
{
    tool_result r = tool(NULL, "");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "usage: flashcl"));
    tool_free(&r);
    r = tool(NULL, "--help");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "selftest"));
    ck_assert_ptr_nonnull(strstr(r.out, "exit status"));
    tool_free(&r);
    const char *commands[] = {"info", "run", "selftest", "bench"};
    for (int i = 0; i < 4; ++i) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", commands[i]);
        r = tool(NULL, args);
        ck_assert_msg(r.status == 0 && strstr(r.out, "usage: flashcl"),
                      "flashcl %s: exit %d: %s", args, r.status, clip(r.out));
        tool_free(&r);
    }
    expect_usage_error("frobnicate", "unknown command");
    expect_usage_error("info --frobnicate", "unknown option");
    expect_usage_error("run --device", "--device needs");
    expect_usage_error("run --seqlen abc", "--seqlen");
    expect_usage_error("run --seqlen 0", "--seqlen");
    expect_usage_error("run --dtype fp8", "--dtype");
    expect_usage_error("run --backend cublas", "--backend");
    expect_usage_error("run --causal=1", "takes no value");
    expect_usage_error("bench --causal 2", "--causal");
    expect_usage_error("bench --head-dim 64,,x", "--head-dim");
    expect_usage_error("bench --head-dim 512", "--head-dim");
    expect_usage_error("bench --reps", "--reps");
    expect_usage_error("selftest --seqlen 5", "unknown option");
}
END_TEST

/* Specs that match nothing: exit 3 and one line naming the spec. */
START_TEST(unmatched_device_specs)
{
    const char *specs[] = {"99", "0:99", "7:0", "no-such-device-xyz"};
    for (int i = 0; i < 4; ++i) {
        char args[128];
        snprintf(args, sizeof args, "info --device '%s'", specs[i]);
        tool_result r = tool(NULL, args);
        ck_assert_msg(r.status == 3, "flashcl %s: exit %d (%s)", args,
                      r.status, clip(r.err));
        ck_assert_msg(count_lines(r.err) == 1 && strstr(r.err, specs[i]) &&
                          strstr(r.err, "flashcl info"),
                      "flashcl %s: stderr %s", args, clip(r.err));
        tool_free(&r);
    }
    tool_result r = tool("FLASHCL_DEVICE=no-such-device-xyz", "run");
    ck_assert_int_eq(r.status, 3);
    ck_assert_ptr_nonnull(strstr(r.err, "no-such-device-xyz"));
    tool_free(&r);
}
END_TEST

/* Specs of every form that name the test device select it. */
START_TEST(matching_device_specs)
{
    tool_result info = tool(NULL, "info");
    ck_assert_int_eq(info.status, 0);
    const char *specs[6] = {"0", "0:0", "--device=0", NULL, NULL, NULL};
    int count = 3;
    if (strstr(info.out, "type: CPU"))
        specs[count++] = "cpu";
    if (strstr(info.out, "Portable Computing Language")) {
        specs[count++] = "portable computing"; /* platform name, any case */
        specs[count++] = "pocl";               /* platform vendor */
    }
    for (int i = 0; i < count; ++i) {
        char args[128];
        if (specs[i][0] == '-')
            snprintf(args, sizeof args, "info %s", specs[i]);
        else
            snprintf(args, sizeof args, "info --device '%s'", specs[i]);
        tool_result r = tool(NULL, args);
        ck_assert_msg(r.status == 0, "flashcl %s: exit %d: %s", args,
                      r.status, clip(r.err));
        ck_assert_msg(strstr(r.out, "<== selected") &&
                          strstr(r.out, "selected because: --device"),
                      "flashcl %s marks no selection: %s", args, clip(r.out));
        tool_free(&r);
    }
    tool_free(&info);
}
END_TEST

START_TEST(info_lists_the_device)
{
    tool_result r = tool(NULL, "info");
    ck_assert_int_eq(r.status, 0);
    const char *fields[] = {"vendor:",        "driver:",
                            "OpenCL C",       "compute units:",
                            "clock:",         "global memory:",
                            "max allocation", "fp16 storage",
                            "bf16 storage",   "fp64",
                            "subgroups:",     "matrix instructions:",
                            "flashcl path:",  "D=64",
                            "D=128",          "reference backend",
                            "<== selected",   "selected because: "};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i)
        ck_assert_msg(strstr(r.out, fields[i]) != NULL,
                      "flashcl info lacks \"%s\"", fields[i]);
    tool_free(&r);
    r = tool("FLASHCL_DEVICE=0", "info");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "selected because: FLASHCL_DEVICE"));
    tool_free(&r);
    r = tool(NULL, "info --json");
    ck_assert_int_eq(r.status, 0);
    expect_json(r.out, "devices");
    ck_assert_ptr_nonnull(strstr(r.out, "\"selected\": true"));
    tool_free(&r);
}
END_TEST

START_TEST(run_both_backends)
{
    tool_result r = tool(NULL, "run --seqlen 100 --heads 2 --causal");
    ck_assert_msg(r.status == 0 && strstr(r.out, "PASS"), "exit %d: %s %s",
                  r.status, clip(r.out), clip(r.err));
    tool_free(&r);
    r = tool(NULL, "run --seqlen 100 --heads 2 --dtype bf16 --backend "
                   "reference --json");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, clip(r.err));
    expect_json(r.out, "scratch_bytes");
    ck_assert_ptr_nonnull(strstr(r.out, "\"pass\": true"));
    tool_free(&r);
}
END_TEST

START_TEST(bench_small_sweep)
{
    tool_result r = tool(NULL, "bench --seqlen 64,96 --tokens 192 --hidden 64 "
                               "--reps 1 --warmup 0");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, clip(r.err));
    ck_assert_ptr_nonnull(strstr(r.out, "speed-up"));
    ck_assert_ptr_nonnull(strstr(r.out, "| fp32 | 64 | no | 96 | 2 | 1 |"));
    tool_free(&r);
    r = tool(NULL, "bench --seqlen 64 --tokens 64 --hidden 64 --reps 1 "
                   "--causal 1 --dtype bf16 --json");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, clip(r.err));
    expect_json(r.out, "reference_scratch_bytes");
    ck_assert_ptr_nonnull(strstr(r.out, "\"speedup\": "));
    tool_free(&r);
}
END_TEST

START_TEST(selftest_passes)
{
    tool_result r = tool(NULL, "selftest");
    ck_assert_msg(r.status == 0, "flashcl selftest: exit %d:\n%s\n%s",
                  r.status, clip(r.out), clip(r.err));
    ck_assert_ptr_nonnull(strstr(r.out, "PASS: "));
    ck_assert_ptr_null(strstr(r.out, "FAIL"));
    ck_assert_ptr_nonnull(strstr(r.out, "all variants"));
    printf("%s", r.out);
    tool_free(&r);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_FLASHCL\n", argv[0]);
        return 2;
    }
    flashcl_path = argv[1];
    Suite *suite = suite_create("flashcl CLI");
    TCase *parsing = tcase_create("parsing");
    tcase_set_timeout(parsing, 300);
    tcase_add_test(parsing, usage_and_bad_arguments);
    tcase_add_test(parsing, unmatched_device_specs);
    tcase_add_test(parsing, matching_device_specs);
    suite_add_tcase(suite, parsing);
    TCase *commands = tcase_create("commands");
    tcase_set_timeout(commands, 600);
    tcase_add_test(commands, info_lists_the_device);
    tcase_add_test(commands, run_both_backends);
    tcase_add_test(commands, bench_small_sweep);
    tcase_add_test(commands, selftest_passes);
    suite_add_tcase(suite, commands);
    return run_suite(suite);
}
