/*
 * The tuning database's lookup (issue 15), against a small table of its
 * own (src/paths/tuning_lookup.c is compiled into this test): the most
 * specific level that matches wins (device, then architecture, vendor,
 * dtype, path), each level falls back to the next, the shape picks among
 * one level's entries (smallest head dim at or above, causal, sequence
 * class), device names are normalised, parameter sets are parsed
 * strictly, and the JSON reader takes what the tuner writes. No device.
 */
#ifndef _POSIX_C_SOURCE /* mkfifo, mkdtemp */
#define _POSIX_C_SOURCE 200809L
#endif
#include "test_common.h"

#include "core/core.h"
#include "core/json_scan.h"
#include "paths/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* path, dtype, vendor, arch, device, head_dim, causal, seq, params */
#define E(p, d, v, a, n, hd, c, s, params) \
    {p, d, v, a, n, hd, c, s, params, "2026-12-01", "test", 1.0}

static const tuning_entry table[] = {
    E("portable", "*", "*", "*", "*", 256, -1, "*", "path"),
    E("portable", "fp32", "*", "*", "*", 256, -1, "*", "dtype"),
    E("portable", "fp32", "pocl", "*", "*", 128, -1, "*", "vendor128"),
    E("portable", "fp32", "pocl", "*", "*", 64, -1, "*", "vendor64"),
    E("portable", "fp32", "pocl", "avx512", "*", 64, -1, "long", "arch"),
    E("portable", "fp32", "pocl", "avx512", "cpu-a", 64, 0, "long", "dev"),
    E("portable", "fp32", "pocl", "avx512", "cpu-a", 64, 1, "long",
      "dev-causal"),
    E("nv_mma", "fp16", "nvidia", "sm_90", "nvidia-h200", 128, -1, "*",
      "h200"),
};

static tuning_query query(const char *path, const char *dtype,
                          const char *vendor, const char *arch,
                          const char *device, int head_dim, int causal,
                          const char *seq)
{
    tuning_query q;
    memset(&q, 0, sizeof q);
    q.path = path;
    q.dtype = dtype;
    snprintf(q.vendor, sizeof q.vendor, "%s", vendor);
    snprintf(q.arch, sizeof q.arch, "%s", arch);
    snprintf(q.device, sizeof q.device, "%s", device);
    q.head_dim = head_dim;
    q.causal = causal;
    q.seq = seq;
    return q;
}

static const struct {
    tuning_query q;
    const char *params; /* NULL: no entry */
    int level;
} cases[] = {
    /* each level, most specific first */
    {{"portable", "fp32", "pocl", "avx512", "cpu-a", 64, 0, "long"}, "dev",
     TUNING_LEVEL_DEVICE},
    {{"portable", "fp32", "pocl", "avx512", "cpu-a", 64, 1, "long"},
     "dev-causal", TUNING_LEVEL_DEVICE},
    {{"portable", "fp32", "pocl", "avx512", "cpu-b", 64, 0, "long"}, "arch",
     TUNING_LEVEL_ARCH},
    {{"portable", "fp32", "pocl", "avx2", "cpu-a", 64, 0, "long"},
     "vendor64", TUNING_LEVEL_VENDOR},
    {{"portable", "fp32", "intel", "avx512", "cpu-a", 64, 0, "long"}, "dtype",
     TUNING_LEVEL_DTYPE},
    {{"portable", "fp16", "pocl", "avx512", "cpu-a", 64, 0, "long"}, "path",
     TUNING_LEVEL_PATH},
    /* another sequence class skips the entries of that class only */
    {{"portable", "fp32", "pocl", "avx512", "cpu-a", 64, 0, "decode"},
     "vendor64", TUNING_LEVEL_VENDOR},
    /* a head dim above a level's entries falls through to the next level;
     * within a level the smallest one at or above wins */
    {{"portable", "fp32", "pocl", "avx512", "cpu-a", 128, 0, "long"},
     "vendor128", TUNING_LEVEL_VENDOR},
    {{"portable", "fp32", "pocl", "avx2", "x", 48, 0, "short"}, "vendor64",
     TUNING_LEVEL_VENDOR},
    {{"portable", "fp32", "pocl", "avx2", "x", 256, 0, "short"}, "dtype",
     TUNING_LEVEL_DTYPE},
    /* another path, or nothing at any level */
    {{"nv_mma", "fp16", "nvidia", "sm_90", "nvidia-h200", 64, 0, "long"},
     "h200", TUNING_LEVEL_DEVICE},
    {{"nv_mma", "fp16", "nvidia", "sm_80", "nvidia-a100", 64, 0, "long"},
     NULL, TUNING_NONE},
    {{"subgroup", "fp32", "pocl", "avx512", "cpu-a", 64, 0, "long"}, NULL,
     TUNING_NONE},
};

START_TEST(lookup_falls_back_per_level)
{
    const tuning_query *c = &cases[_i].q;
    const tuning_query q = query(c->path, c->dtype, c->vendor, c->arch,
                                 c->device, c->head_dim, c->causal, c->seq);
    int level = -1;
    const tuning_entry *e = tuning_lookup(table, LENGTH(table), &q, &level);
    if (!cases[_i].params) {
        ck_assert_msg(e == NULL, "case %d: matched %s", _i,
                      e ? e->params : "");
    } else {
        ck_assert_msg(e != NULL, "case %d: no entry", _i);
        ck_assert_str_eq(e->params, cases[_i].params);
    }
    ck_assert_int_eq(level, cases[_i].level);
}
END_TEST

START_TEST(names_are_normalised)
{
    char out[128];
    tuning_normalise_name("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz", out,
                          sizeof out);
    ck_assert_str_eq(out, "intel-core-i7-8700-cpu-3-20ghz");
    tuning_normalise_name("  NVIDIA H200 ", out, sizeof out);
    ck_assert_str_eq(out, "nvidia-h200");
    tuning_normalise_name("pthread-skylake-avx512-AMD EPYC", out, sizeof out);
    ck_assert_str_eq(out, "pthread-skylake-avx512-amd-epyc");
    ck_assert_str_eq(tuning_seq_class(1, 4096), "decode");
    ck_assert_str_eq(tuning_seq_class(256, 512), "short");
    ck_assert_str_eq(tuning_seq_class(300, 1024), "long");
}
END_TEST

/* Device keys from probed capabilities (no device needed). */
START_TEST(device_keys)
{
    device_caps caps;
    char vendor[32], arch[32], device[128];
    memset(&caps, 0, sizeof caps);
    caps.klass = DEVICE_CLASS_GPU_NVIDIA;
    caps.nv_cc_major = 9;
    snprintf(caps.name, sizeof caps.name, "NVIDIA H200");
    tuning_device_key(&caps, vendor, sizeof vendor, arch, sizeof arch, device,
                      sizeof device);
    ck_assert_str_eq(vendor, "nvidia");
    ck_assert_str_eq(arch, "sm_90");
    ck_assert_str_eq(device, "nvidia-h200");
    memset(&caps, 0, sizeof caps);
    caps.klass = DEVICE_CLASS_GPU_AMD;
    snprintf(caps.amd_gfx, sizeof caps.amd_gfx, "gfx90a");
    tuning_device_key(&caps, vendor, sizeof vendor, arch, sizeof arch, device,
                      sizeof device);
    ck_assert_str_eq(vendor, "amd");
    ck_assert_str_eq(arch, "gfx90a");
    /* a CPU: the OpenCL implementation, and an ISA level no higher than
     * the device's vector width allows (8 floats: not AVX-512, whatever
     * the host has) */
    memset(&caps, 0, sizeof caps);
    caps.klass = DEVICE_CLASS_CPU;
    snprintf(caps.platform_name, sizeof caps.platform_name,
             "Portable Computing Language");
    snprintf(caps.name, sizeof caps.name, "pthread-haswell-Intel(R) Xeon(R)");
    caps.preferred_vector_float = 8;
    tuning_device_key(&caps, vendor, sizeof vendor, arch, sizeof arch, device,
                      sizeof device);
    ck_assert_str_eq(vendor, "pocl");
    ck_assert_str_ne(arch, "avx512");
    ck_assert_str_eq(device, "pthread-haswell-intel-xeon");
    snprintf(caps.platform_name, sizeof caps.platform_name,
             "Intel(R) OpenCL");
    caps.preferred_vector_float = 4;
    tuning_device_key(&caps, vendor, sizeof vendor, arch, sizeof arch, device,
                      sizeof device);
    ck_assert_str_eq(vendor, "intel");
    ck_assert(strcmp(arch, "avx512") && strcmp(arch, "avx2"));
}
END_TEST

static const tunable known[] = {{"block_m", {16, 32}, 2}, {"vec", {4, 8}, 2}};

START_TEST(params_parse_strictly)
{
    tile_params t;
    char why[160];
    ck_assert(tile_params_parse("block_m=64,vec=8", known, 2, false, &t, why,
                                sizeof why));
    ck_assert_int_eq(t.count, 2);
    ck_assert_int_eq(tile_params_get(&t, "block_m", 0), 64);
    ck_assert_int_eq(tile_params_get(&t, "vec", 0), 8);
    ck_assert_int_eq(tile_params_get(&t, "block_n", 7), 7);
    ck_assert(tile_params_parse("", known, 2, false, &t, why, sizeof why));
    ck_assert_int_eq(t.count, 0);
    const char *bad[] = {"block_n=64", "block_m", "block_m=x", "block_m=-1",
                         "block_m=64,", "debug_corrupt=1"};
    for (size_t i = 0; i < LENGTH(bad); ++i)
        ck_assert_msg(!tile_params_parse(bad[i], known, 2, false, &t, why,
                                         sizeof why),
                      "\"%s\" was taken", bad[i]);
    /* a refusal names the item and the names the path takes */
    ck_assert(!tile_params_parse("tile_k=3", known, 2, false, &t, why,
                                 sizeof why));
    ck_assert_msg(strstr(why, "\"tile_k=3\"") &&
                      strstr(why, "not a tunable of the path (block_m or vec)"),
                  "why: %s", why);
    /* the tuner's debug switch passes only where allowed */
    ck_assert(tile_params_parse("debug_corrupt=1", known, 2, true, &t, why,
                                sizeof why));
}
END_TEST

START_TEST(json_reader_takes_tuner_output)
{
    const char *text =
        "{\"format\": \"flashcl-tuning-1\", \"device\": {\"name\": \"x\"},\n"
        " \"winners\": [\n"
        "  {\"path\": \"portable\", \"params\": \"block_m=64,vec=8\", "
        "\"head_dim\": 64, \"median_ms\": 1.5e1, \"table\": true,"
        " \"reason\": \"a \\\"quoted\\\" {brace}\"},\n"
        "  {\"path\": \"nv_mma\", \"head_dim\": 128, \"x\": null}\n"
        " ]}\n";
    const char *at = json_array_start(text, "winners"), *b, *e;
    ck_assert_ptr_nonnull(at);
    ck_assert(json_next_object(&at, &b, &e));
    char buf[64];
    double v = 0;
    ck_assert(json_get_string(b, e, "params", buf, sizeof buf));
    ck_assert_str_eq(buf, "block_m=64,vec=8");
    ck_assert(json_get_string(b, e, "reason", buf, sizeof buf));
    ck_assert_str_eq(buf, "a \"quoted\" {brace}");
    ck_assert(json_get_number(b, e, "median_ms", &v));
    ck_assert(v == 15.0);
    ck_assert(json_get_true(b, e, "table"));
    ck_assert(!json_get_string(b, e, "missing", buf, sizeof buf));
    ck_assert(json_next_object(&at, &b, &e));
    ck_assert(json_get_number(b, e, "head_dim", &v) && v == 128);
    ck_assert(!json_next_object(&at, &b, &e));
    ck_assert_ptr_null(json_array_start(text, "candidates"));
    /* damaged input ends the array, never reads past it */
    at = json_array_start("{\"winners\": [{\"path\": \"p", "winners");
    ck_assert(at && !json_next_object(&at, &b, &e));
}
END_TEST

/* A tuning file that is a FIFO is refused at once (read, it would block
 * until a writer came); a regular one reads whole. */
START_TEST(json_reader_refuses_fifo)
{
    char dir[] = "/tmp/flashcl_tuning_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/tuning.json", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    char *text = json_read_file(path, 1u << 20);
    ck_assert_ptr_null(text);
    ck_assert_int_eq(unlink(path), 0);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"winners\": []}", f);
    fclose(f);
    text = json_read_file(path, 1u << 20);
    ck_assert_ptr_nonnull(text);
    ck_assert_str_eq(text, "{\"winners\": []}");
    free(text);
    ck_assert_ptr_null(json_read_file(path, 4)); /* over max_bytes */
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {
        {lookup_falls_back_per_level, (int)LENGTH(cases)},
        {names_are_normalised, 0},
        {device_keys, 0},
        {params_parse_strictly, 0},
        {json_reader_takes_tuner_output, 0},
        {json_reader_refuses_fifo, 0}};
    return run_tests("tuning_db", 60, NULL, NULL, tests, LENGTH(tests));
}
