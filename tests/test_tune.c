/*
 * `flashcl tune` and the tuning files it writes (issue 15), on the test
 * device (PoCL or Intel's CPU runtime in CI). main() runs the tuner once
 * with a tiny budget and a deliberately wrong candidate (--inject-wrong);
 * the tests then check its JSON, that the wrong candidate was rejected by
 * the oracle and never chosen, that a rerun resumes instead of measuring
 * again, that its winner (read back through FLASHCL_TUNING_FILE) runs and
 * matches the float64 oracle, that bad or stale entries of a user file are
 * refused with a note and never crash, that FLASHCL_TILES still wins over
 * the file, and the tuner's API (flashcl_context_force_tiles,
 * flashcl_path_tunable).
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkstemp */
#include "test_common.h"

#include "core/json_scan.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *flashcl_tool;
static char out_path[256], log_path[256];
static int first_status = -1;

static int run_tuner(void)
{
    char command[2048];
    snprintf(command, sizeof command,
             "'%s' tune --path portable,subgroup --budget 40 "
             "--max-candidates 2 --inject-wrong --seqlen 640 --reps 3 "
             "--warmup 1 --no-progress --output '%s' >'%s' 2>&1",
             flashcl_tool, out_path, log_path);
    const int raw = system(command);
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

static char *read_text(const char *path)
{
    char *text = json_read_file(path, 64u << 20);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    return text;
}

typedef struct found {
    int candidates, invalid_wrong, wrong, winners, portable_winners;
    char winner_params[96];
    double winner_ms;
} found;

static found scan(const char *text)
{
    found f;
    memset(&f, 0, sizeof f);
    const char *b, *e;
    for (const char *at = json_array_start(text, "candidates");
         at && json_next_object(&at, &b, &e);) {
        char params[96] = "", status[16] = "";
        json_get_string(b, e, "params", params, sizeof params);
        json_get_string(b, e, "status", status, sizeof status);
        ++f.candidates;
        if (strstr(params, "debug_corrupt")) {
            ++f.wrong;
            f.invalid_wrong += !strcmp(status, "invalid");
        }
    }
    for (const char *at = json_array_start(text, "winners");
         at && json_next_object(&at, &b, &e);) {
        char path[32] = "", params[96] = "";
        double ms = 0;
        json_get_string(b, e, "path", path, sizeof path);
        json_get_string(b, e, "params", params, sizeof params);
        ck_assert_msg(!strstr(params, "debug_corrupt"),
                      "the wrong candidate won: %s", params);
        ck_assert_msg(json_get_number(b, e, "median_ms", &ms) && ms > 0,
                      "winner %s without a time", params);
        ++f.winners;
        if (!strcmp(path, "portable")) {
            ++f.portable_winners;
            snprintf(f.winner_params, sizeof f.winner_params, "%s", params);
            f.winner_ms = ms;
        }
    }
    return f;
}

START_TEST(tuner_writes_json_and_rejects_wrong)
{
    char *log = read_text(log_path);
    ck_assert_msg(first_status == 0, "flashcl tune exit %d:\n%s",
                  first_status, log);
    free(log);
    char *text = read_text(out_path);
    ck_assert_ptr_nonnull(strstr(text, "\"format\": \"flashcl-tuning-1\""));
    flashcl_device_info d;
    ck_assert_int_eq(flashcl_context_device_info(shared_context(), &d),
                     FLASHCL_SUCCESS);
    char key[200];
    snprintf(key, sizeof key, "\"tuning_device\": \"%s\"", d.tuning_device);
    ck_assert_msg(strstr(text, key) != NULL, "no %s in the output", key);
    ck_assert_ptr_nonnull(strstr(text, "\"driver\": "));
    ck_assert_ptr_nonnull(strstr(text, "\"command\": \"flashcl tune"));
    ck_assert_ptr_nonnull(strstr(text, "\"date\": \""));
    const found f = scan(text);
    ck_assert_msg(f.wrong == 1 && f.invalid_wrong == 1,
                  "the wrong candidate: %d recorded, %d invalid", f.wrong,
                  f.invalid_wrong);
    ck_assert_msg(f.portable_winners == 1, "%d portable winners",
                  f.portable_winners);
    ck_assert_ptr_nonnull(strstr(text, "\"table\": true, \"status\": \"ok\""));
    free(text);
}
END_TEST

/* The same command again measures nothing new: every candidate is in the
 * file already (the budget would allow more, the candidate limit not). */
START_TEST(rerun_resumes)
{
    char *before = read_text(out_path);
    const found a = scan(before);
    free(before);
    ck_assert_int_eq(run_tuner(), 0);
    char *after = read_text(out_path);
    const found b = scan(after);
    free(after);
    ck_assert_int_eq(b.candidates, a.candidates);
    ck_assert_str_eq(b.winner_params, a.winner_params);
    ck_assert(b.winner_ms == a.winner_ms); /* not measured again */
}
END_TEST

static attention_case long_case(int causal)
{
    attention_case c = small_case(REF_FP32, 600, 700, causal, 8080 + causal);
    c.head_dim = 64;
    return c;
}

static flashcl_variant_info describe_case(const attention_case *c)
{
    flashcl_attention_desc desc = case_shape_desc(c);
    flashcl_variant_info info;
    ck_assert_int_eq(flashcl_describe_variant(shared_context(), &desc, &info),
                     FLASHCL_SUCCESS);
    return info;
}

/* "" (the path's table won): the table's tiles, as the path plans them
 * when forced with no parameters. */
static void expect_tiles(const flashcl_variant_info *v, const char *params)
{
    int m = 0, n = 0, vec = 0;
    if (!params[0]) {
        attention_case c = small_case(REF_FP32, 600, 700, 0, 1);
        c.head_dim = 64;
        flashcl_attention_desc desc = case_shape_desc(&c);
        flashcl_variant_info table;
        ck_assert_int_eq(flashcl_context_force_tiles(shared_context(),
                                                     "portable", ""),
                         FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_describe_variant(shared_context(), &desc,
                                                  &table), FLASHCL_SUCCESS);
        flashcl_context_force_tiles(shared_context(), NULL, NULL);
        ck_assert_int_eq(v->block_m, table.block_m);
        ck_assert_int_eq(v->block_n, table.block_n);
        ck_assert_int_eq(v->vector_width, table.vector_width);
        return;
    }
    ck_assert_msg(sscanf(params, "block_m=%d,block_n=%d,vec=%d", &m, &n,
                         &vec) == 3, "params %s", params);
    ck_assert_int_eq(v->block_m, m);
    ck_assert_int_eq(v->block_n, n);
    ck_assert_int_eq(v->vector_width, vec);
}

START_TEST(winner_runs_from_tuning_file)
{
    char *text = read_text(out_path);
    const found f = scan(text);
    free(text);
    ck_assert_int_eq(setenv("FLASHCL_TUNING_FILE", out_path, 1), 0);
    for (int causal = 0; causal < 2; ++causal) {
        const attention_case c = long_case(causal);
        const flashcl_variant_info v = describe_case(&c);
        ck_assert_str_eq(v.path, "portable");
        ck_assert_msg(strstr(v.tuning, "FLASHCL_TUNING_FILE, device level"),
                      "tuning: \"%s\"", v.tuning);
        expect_tiles(&v, f.winner_params);
        run_case(&c); /* against the float64 oracle */
    }
    unsetenv("FLASHCL_TUNING_FILE");
}
END_TEST

static void write_user_file(const char *path, const char *params,
                            bool truncated)
{
    flashcl_device_info d;
    ck_assert_int_eq(flashcl_context_device_info(shared_context(), &d),
                     FLASHCL_SUCCESS);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"format\": \"flashcl-tuning-1\", \"winners\": [\n"
               "{\"path\": \"portable\", \"dtype\": \"fp32\", \"vendor\": "
               "\"%s\", \"arch\": \"%s\", \"device\": \"%s\", \"head_dim\": "
               "64, \"causal\": 0, \"seq\": \"long\", \"params\": \"%s\", "
               "%s",
            d.tuning_vendor, d.tuning_arch, d.tuning_device, params,
            truncated ? "\"median_ms\": 1." /* cut inside the entry */
                      : "\"median_ms\": 1.0, \"date\": \"2026-12-01\", "
                        "\"measured_on\": \"test\"}]}\n");
    fclose(f);
}

static const struct {
    const char *params;
    bool truncated;
    const char *note; /* NULL: the entry is not seen at all */
} bad_entries[] = {
    {"block_m=4096", false, "work-group"},     /* illegal on any device */
    {"block_n=20,vec=8", false, "multiple of vec"},
    {"tile_k=3", false, "not a tunable"},     /* another version's key */
    {"block_m=abc", false, "not a tunable"},
    {"block_m=32", true, NULL},                /* damaged file */
};

START_TEST(bad_user_entries_refused)
{
    char path[] = "/tmp/flashcl_tuning_file_XXXXXX";
    const int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    const attention_case c = long_case(0);
    const flashcl_variant_info table = describe_case(&c);
    write_user_file(path, bad_entries[_i].params, bad_entries[_i].truncated);
    ck_assert_int_eq(setenv("FLASHCL_TUNING_FILE", path, 1), 0);
    const flashcl_variant_info got = describe_case(&c);
    const char *note = flashcl_context_last_error(shared_context());
    if (bad_entries[_i].note)
        ck_assert_msg(strstr(note, "FLASHCL_TUNING_FILE") &&
                          strstr(note, bad_entries[_i].note),
                      "%s: note \"%s\"", bad_entries[_i].params, note);
    ck_assert_int_eq(got.block_m, table.block_m);
    ck_assert_int_eq(got.block_n, table.block_n);
    ck_assert_int_eq(got.vector_width, table.vector_width);
    ck_assert_str_eq(got.tuning, table.tuning); /* the next source's */
    run_case(&c); /* still computes, on the next source's tiles */
    remove(path);
    /* a file that is not there: a note, the table */
    describe_case(&c);
    ck_assert_ptr_nonnull(strstr(flashcl_context_last_error(shared_context()),
                                 "cannot be read"));
    unsetenv("FLASHCL_TUNING_FILE");
}
END_TEST

START_TEST(env_tiles_win_over_file)
{
    ck_assert_int_eq(setenv("FLASHCL_TUNING_FILE", out_path, 1), 0);
    ck_assert_int_eq(setenv("FLASHCL_TILES", "block_m=16,block_n=16,vec=4", 1),
                     0);
    const attention_case c = long_case(0);
    const flashcl_variant_info v = describe_case(&c);
    unsetenv("FLASHCL_TILES");
    unsetenv("FLASHCL_TUNING_FILE");
    expect_tiles(&v, "block_m=16,block_n=16,vec=4");
    ck_assert_msg(strstr(v.reason, "FLASHCL_TILES") != NULL, "reason: %s",
                  v.reason);
}
END_TEST

/* FLASHCL_TUNING=off (or 0): neither the user file nor the built-in
 * database is consulted; the path's own table plans (the tiles the path
 * plans when forced with no parameters); the tuner's forced candidates
 * still apply. Any other value, or none, turns them back on. */
static void expect_table_tiles(const attention_case *c,
                               const flashcl_variant_info *v)
{
    flashcl_context *ctx = shared_context();
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, "portable", ""),
                     FLASHCL_SUCCESS);
    const flashcl_variant_info table = describe_case(c);
    flashcl_context_force_tiles(ctx, NULL, NULL);
    ck_assert_int_eq(v->block_m, table.block_m);
    ck_assert_int_eq(v->block_n, table.block_n);
    ck_assert_int_eq(v->vector_width, table.vector_width);
    ck_assert_msg(v->tuning[0] == '\0', "off, yet tuning: \"%s\"",
                  v->tuning);
}

START_TEST(tuning_off_switch)
{
    char path[] = "/tmp/flashcl_tuning_off_XXXXXX";
    const int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_user_file(path, "block_m=32,block_n=32,vec=4", false);
    ck_assert_int_eq(setenv("FLASHCL_TUNING_FILE", path, 1), 0);
    const attention_case c = long_case(0);
    static const char *const off[] = {"off", "0"};
    static const char *const on[] = {"1", "on", ""};
    for (size_t i = 0; i < LENGTH(on); ++i) {
        ck_assert_int_eq(setenv("FLASHCL_TUNING", on[i], 1), 0);
        const flashcl_variant_info v = describe_case(&c);
        ck_assert_msg(strstr(v.tuning, "FLASHCL_TUNING_FILE, device level"),
                      "FLASHCL_TUNING=%s: tuning \"%s\"", on[i], v.tuning);
        expect_tiles(&v, "block_m=32,block_n=32,vec=4");
    }
    for (size_t i = 0; i < LENGTH(off); ++i) {
        ck_assert_int_eq(setenv("FLASHCL_TUNING", off[i], 1), 0);
        const flashcl_variant_info v = describe_case(&c);
        expect_table_tiles(&c, &v);
    }
    unsetenv("FLASHCL_TUNING_FILE");
    remove(path);
    /* The built-in database: every shape class of both dtypes the CPU
     * tables were made for; where an entry matches with the switch on,
     * none does with it off. */
    for (int seqlen = 1; seqlen <= 700; seqlen += 699) {
        attention_case d = small_case(REF_FP32, seqlen, 2048, 0, 31);
        d.head_dim = 64;
        unsetenv("FLASHCL_TUNING");
        const flashcl_variant_info with = describe_case(&d);
        ck_assert_int_eq(setenv("FLASHCL_TUNING", "off", 1), 0);
        const flashcl_variant_info without = describe_case(&d);
        if (!strcmp(without.path, "portable") && without.num_splits <= 1)
            expect_table_tiles(&d, &without);
        ck_assert_msg(without.tuning[0] == '\0', "built-in entry used with "
                      "FLASHCL_TUNING=off: %s (on: %s)", without.tuning,
                      with.tuning);
    }
    /* forced candidates (the tuner) are not databases */
    ck_assert_int_eq(flashcl_context_force_tiles(shared_context(), "portable",
                                                 "block_m=32,block_n=32,"
                                                 "vec=4"),
                     FLASHCL_SUCCESS);
    const flashcl_variant_info forced = describe_case(&c);
    flashcl_context_force_tiles(shared_context(), NULL, NULL);
    unsetenv("FLASHCL_TUNING");
    ck_assert_ptr_nonnull(strstr(forced.tuning, "forced candidate"));
    expect_tiles(&forced, "block_m=32,block_n=32,vec=4");
}
END_TEST

START_TEST(force_tiles_api)
{
    flashcl_context *ctx = shared_context();
    flashcl_tunable t;
    ck_assert_int_eq(flashcl_path_tunable("portable", 0, &t), FLASHCL_SUCCESS);
    ck_assert_str_eq(t.name, "block_m");
    ck_assert_int_gt(t.count, 1);
    ck_assert_int_eq(flashcl_path_tunable("nv_mma", 2, &t), FLASHCL_SUCCESS);
    ck_assert_str_eq(t.name, "warps");
    ck_assert_int_eq(flashcl_path_tunable("portable", 99, &t),
                     FLASHCL_ERROR_INVALID_VALUE);
    ck_assert_int_eq(flashcl_path_tunable("cuda", 0, &t),
                     FLASHCL_ERROR_INVALID_VALUE);
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, "cuda", ""),
                     FLASHCL_ERROR_INVALID_VALUE);
    ck_assert_int_eq(flashcl_context_force_tiles(
                         ctx, "portable", "block_m=32,block_n=32,vec=4"),
                     FLASHCL_SUCCESS);
    const attention_case c = long_case(1);
    const flashcl_variant_info v = describe_case(&c);
    expect_tiles(&v, "block_m=32,block_n=32,vec=4");
    ck_assert_ptr_nonnull(strstr(v.tuning, "forced candidate"));
    run_case(&c);
    /* illegal: refused with a note, the table runs */
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, "portable", "vec=3"),
                     FLASHCL_SUCCESS);
    const flashcl_variant_info r = describe_case(&c);
    ck_assert_ptr_nonnull(strstr(flashcl_context_last_error(ctx), "refused"));
    ck_assert_ptr_null(strstr(r.tuning, "forced"));
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, NULL, NULL),
                     FLASHCL_SUCCESS);
}
END_TEST

/* The public path list: the names FLASHCL_PATH and the tuner take, in
 * the order the library tries them, portable last, NULL on either side;
 * each one known to flashcl_context_force_tiles. */
START_TEST(path_names_listed)
{
    flashcl_context *ctx = shared_context();
    ck_assert_ptr_null(flashcl_path_name(-1));
    int n = 0;
    while (flashcl_path_name(n)) {
        const char *name = flashcl_path_name(n);
        ck_assert_int_eq(flashcl_context_force_tiles(ctx, name, ""),
                         FLASHCL_SUCCESS);
        for (int i = 0; i < n; ++i)
            ck_assert_str_ne(flashcl_path_name(i), name);
        ck_assert_int_lt(++n, 64);
    }
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, NULL, NULL),
                     FLASHCL_SUCCESS);
    ck_assert_int_ge(n, 2);
    ck_assert_str_eq(flashcl_path_name(n - 1), "portable");
    ck_assert_str_eq(flashcl_path_name(0), "nv_wgmma");
}
END_TEST

/* The split_kv path (issues 11 and 15): its tunables; on each of its
 * kernels (FLASHCL_SPLIT_KERNEL: the row kernel is the CPUs' own) a legal
 * set plans as given and matches the float64 oracle, and sets the kernel
 * refuses (a tunable it does not use moved, an illegal value) are refused
 * before compiling, with the reason, and the table runs. */
static const struct {
    const char *kernel, *params, *refused; /* refused NULL: legal */
} split_sets[] = {
    {"row", "groups=64,block_n=32,wg=0,unroll=0,prefetch=0", NULL},
    {"row", "wg=128", "wg 128: not used by the row kernel"},
    {"row", "block_n=0", "needs 16 keys or more"},
    {"lanes", "groups=64,block_n=0,wg=64,unroll=4,prefetch=0", NULL},
    {"lanes", "block_n=32", "not used by the lane-group kernel"},
    {"lanes", "unroll=0", "unroll 0 is not 1..8"},
    {"wide", "groups=64,block_n=16,wg=64,unroll=0,prefetch=0", NULL},
    {"wide", "prefetch=1", "not used by the wide kernel"},
};

/* The tuner on the decode class tunes the split_kv path: its table and the
 * nearest legal candidate measured (checked against the oracle inside the
 * tuner: status ok) with their split counts, refused sets (if the search
 * met any before it) recorded illegal with the path's reason, and a
 * split_kv winner. */
START_TEST(tuner_decode_on_split_kv)
{
    char out[300], log[300], command[2048];
    snprintf(out, sizeof out, "%s.decode.json", out_path);
    snprintf(log, sizeof log, "%s.decode.log", out_path);
    snprintf(command, sizeof command,
             "'%s' tune --path split_kv --seq decode --seqlen 600 "
             "--max-candidates 1 --reps 1 --warmup 0 --budget 60 "
             "--no-progress --fresh --output '%s' >'%s' 2>&1",
             flashcl_tool, out, log);
    const int raw = system(command);
    char *text_log = read_text(log);
    ck_assert_msg(WIFEXITED(raw) && WEXITSTATUS(raw) == 0,
                  "flashcl tune --seq decode: %s", text_log);
    free(text_log);
    char *text = read_text(out);
    int ok = 0, illegal = 0, why = 0, other = 0, winners = 0, splits = 0;
    const char *b, *e;
    for (const char *at = json_array_start(text, "candidates");
         at && json_next_object(&at, &b, &e);) {
        char path[32] = "", status[16] = "", reason[256] = "";
        json_get_string(b, e, "path", path, sizeof path);
        json_get_string(b, e, "status", status, sizeof status);
        json_get_string(b, e, "reason", reason, sizeof reason);
        ck_assert_str_eq(path, "split_kv");
        ok += !strcmp(status, "ok");
        splits += !strcmp(status, "ok") && strstr(reason, " split") != NULL;
        illegal += !strcmp(status, "illegal");
        why += !strcmp(status, "illegal") &&
                  strstr(reason, "refused by the path: split_kv (") != NULL;
        other += strcmp(status, "ok") && strcmp(status, "illegal");
    }
    for (const char *at = json_array_start(text, "winners");
         at && json_next_object(&at, &b, &e);) {
        char path[32] = "";
        json_get_string(b, e, "path", path, sizeof path);
        winners += !strcmp(path, "split_kv");
    }
    free(text);
    remove(out);
    remove(log);
    ck_assert_msg(ok == 2 && splits == 2 && other == 0,
                  "%d ok (%d naming their split count), %d neither ok nor "
                  "illegal", ok, splits, other);
    ck_assert_msg(why == illegal, "%d illegal, %d of them with the "
                  "path's reason", illegal, why);
    ck_assert_int_eq(winners, 1);
}
END_TEST

START_TEST(split_kv_tunables)
{
    flashcl_context *ctx = shared_context();
    flashcl_tunable t;
    ck_assert_int_eq(flashcl_path_tunable("split_kv", 0, &t), FLASHCL_SUCCESS);
    ck_assert_str_eq(t.name, "groups");
    /* one work-group's worth of decode: the path's own choice here */
    attention_case c = small_case(REF_FP32, 1, 4096, 0, 41 + (uint64_t)_i);
    c.head_dim = 64;
    ck_assert_str_eq(describe_case(&c).path, "split_kv");
    ck_assert_int_eq(setenv("FLASHCL_SPLIT_KERNEL", split_sets[_i].kernel, 1),
                     0);
    ck_assert_int_eq(flashcl_context_force_tiles(ctx, "split_kv",
                                                 split_sets[_i].params),
                     FLASHCL_SUCCESS);
    const flashcl_variant_info v = describe_case(&c);
    ck_assert_str_eq(v.path, "split_kv");
    if (split_sets[_i].refused) {
        ck_assert_msg(strstr(flashcl_context_last_error(ctx),
                             split_sets[_i].refused),
                      "%s: %s", split_sets[_i].params,
                      flashcl_context_last_error(ctx));
        ck_assert_ptr_null(strstr(v.tuning, "forced"));
    } else {
        int bn = -1, wg = -1;
        sscanf(strstr(split_sets[_i].params, "block_n="), "block_n=%d", &bn);
        sscanf(strstr(split_sets[_i].params, "wg="), "wg=%d", &wg);
        ck_assert_ptr_nonnull(strstr(v.tuning, "forced candidate"));
        ck_assert_int_gt(v.num_splits, 1); /* groups=64 cuts the keys */
        if (bn > 0)
            ck_assert_int_eq(v.block_n, bn);
        if (wg > 0)
            ck_assert_int_eq(v.work_group_size, wg);
        run_case(&c); /* against the float64 oracle */
    }
    flashcl_context_force_tiles(ctx, NULL, NULL);
    unsetenv("FLASHCL_SPLIT_KERNEL");
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_tune <path to the flashcl tool>\n");
        return 2;
    }
    flashcl_tool = argv[1];
    snprintf(out_path, sizeof out_path, "/tmp/flashcl_test_tune_%ld.json",
             (long)getpid());
    snprintf(log_path, sizeof log_path, "/tmp/flashcl_test_tune_%ld.log",
             (long)getpid());
    first_status = run_tuner();
    const test_entry tests[] = {
        {tuner_writes_json_and_rejects_wrong, 0},
        {rerun_resumes, 0},
        {winner_runs_from_tuning_file, 0},
        {bad_user_entries_refused, (int)LENGTH(bad_entries)},
        {env_tiles_win_over_file, 0},
        {tuning_off_switch, 0},
        {force_tiles_api, 0},
        {path_names_listed, 0},
        {split_kv_tunables, (int)LENGTH(split_sets)},
        {tuner_decode_on_split_kv, 0}};
    const int status = run_tests("tune", 300, NULL, NULL, tests,
                                 LENGTH(tests));
    remove(out_path);
    remove(log_path);
    return status;
}
