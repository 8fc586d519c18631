/* The pure part of the tuning database (tuning.h): parameter sets, device
 * keys and the lookup. No library state: test_tuning_db compiles it into
 * itself to check the lookup against a table of its own. */
#include "paths/tuning.h"

#include "core/core.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameter sets ------------------------------------------------- */

static bool known_name(const char *name, size_t len, const tunable *known,
                       size_t count, bool allow_debug)
{
    if (allow_debug && len == 13 && !strncmp(name, "debug_corrupt", 13))
        return true;
    for (size_t i = 0; i < count; ++i)
        if (strlen(known[i].name) == len && !strncmp(known[i].name, name, len))
            return true;
    return false;
}

/* "a, b or c": the names the parser takes, for its refusals. */
static void list_names(const tunable *known, size_t count, char *out,
                       size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < count && used < cap; ++i) {
        const char *sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        const int n = snprintf(out + used, cap - used, "%s%s", sep,
                               known[i].name);
        used += n > 0 ? (size_t)n : 0;
    }
}

bool tile_params_parse(const char *text, const tunable *known, size_t count,
                       bool allow_debug, tile_params *out, char *why,
                       size_t cap)
{
    memset(out, 0, sizeof *out);
    for (const char *at = text; *at;) {
        const char *comma = strchr(at, ',');
        const size_t len = comma ? (size_t)(comma - at) : strlen(at);
        const char *eq = memchr(at, '=', len);
        const size_t key = eq ? (size_t)(eq - at) : len;
        char *stop = NULL;
        const long value = eq ? strtol(eq + 1, &stop, 10) : 0;
        if (!eq || key == 0 || key >= sizeof out->names[0] ||
            !known_name(at, key, known, count, allow_debug) ||
            stop != at + len || stop == eq + 1 || value < 0 || value > 4096 ||
            out->count == TILE_PARAMS_MAX) {
            char names[128];
            list_names(known, count, names, sizeof names);
            snprintf(why, cap, "\"%.*s\" is not a tunable of the path (%s) "
                     "= a non-negative integer", (int)len, at, names);
            return false;
        }
        memcpy(out->names[out->count], at, key);
        out->names[out->count][key] = '\0';
        out->values[out->count++] = (int)value;
        at += len + (comma ? 1 : 0);
        if (comma && !*at) {
            snprintf(why, cap, "an empty item after the last comma");
            return false;
        }
    }
    return true;
}

int tile_params_get(const tile_params *t, const char *name, int fallback)
{
    for (int i = 0; i < t->count; ++i)
        if (!strcmp(t->names[i], name))
            return t->values[i];
    return fallback;
}

/* ---- device keys ---------------------------------------------------- */

void tuning_normalise_name(const char *name, char *out, size_t cap)
{
    size_t n = 0;
    bool dash = false;
    for (const char *s = name; *s && n + 1 < cap; ++s) {
        if (!strncmp(s, "(R)", 3) || !strncmp(s, "(r)", 3)) {
            s += 2;
            continue;
        }
        if (!strncmp(s, "(TM)", 4) || !strncmp(s, "(tm)", 4)) {
            s += 3;
            continue;
        }
        if (isalnum((unsigned char)*s)) {
            if (dash && n)
                out[n++] = '-';
            if (n + 1 < cap)
                out[n++] = (char)tolower((unsigned char)*s);
            dash = false;
        } else {
            dash = true;
        }
    }
    out[n] = '\0';
}

/* The host's ISA level: an OpenCL CPU device is the host's CPU. */
static const char *host_isa(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f"))
        return "avx512";
    if (__builtin_cpu_supports("avx2"))
        return "avx2";
    if (__builtin_cpu_supports("avx"))
        return "avx";
    return "sse";
#elif defined(__aarch64__)
    return "neon";
#else
    return "generic";
#endif
}

/* The level the device compiles for: the host's, capped by the float
 * vector width the device reports (PoCL built for an older target, or
 * told to use one, reports 8 on an AVX-512 host, and its code is AVX2). */
static const char *cpu_isa(const device_caps *caps)
{
    const char *host = host_isa();
    const unsigned width = caps->preferred_vector_float > 1
                               ? caps->preferred_vector_float
                               : caps->native_vector_float;
    if (!width || width >= 16)
        return host;
    if (!strcmp(host, "avx512"))
        return width >= 8 ? "avx2" : "sse";
    if (!strcmp(host, "avx2") || !strcmp(host, "avx"))
        return width >= 8 ? host : "sse";
    return host;
}

static bool has_word(const char *normalised, const char *word)
{
    return strstr(normalised, word) != NULL;
}

/* Intel GPU families by marketing name: the name is all OpenCL gives. */
static const char *intel_gpu_family(const char *n)
{
    if (has_word(n, "data-center-gpu-max"))
        return "xe-hpc";
    if (has_word(n, "arc"))
        return "xe-hpg";
    if (has_word(n, "iris-xe") || has_word(n, "uhd-graphics-7"))
        return "xe-lp";
    return "intel-gpu";
}

void tuning_device_key(const device_caps *caps, char *vendor,
                       size_t vendor_cap, char *arch, size_t arch_cap,
                       char *device, size_t device_cap)
{
    char platform[128];
    tuning_normalise_name(caps->name, device, device_cap);
    tuning_normalise_name(caps->platform_name, platform, sizeof platform);
    if (caps->klass == DEVICE_CLASS_CPU) {
        /* On CPUs the OpenCL implementation decides the code, not the
         * chip's maker. */
        const char *impl = has_word(platform, "portable-computing")
                               ? "pocl"
                           : has_word(platform, "intel") ? "intel"
                           : has_word(platform, "amd")   ? "amd"
                                                         : "cpu";
        snprintf(vendor, vendor_cap, "%s", impl);
        snprintf(arch, arch_cap, "%s", cpu_isa(caps));
        return;
    }
    switch (caps->klass) {
    case DEVICE_CLASS_GPU_NVIDIA:
        snprintf(vendor, vendor_cap, "nvidia");
        snprintf(arch, arch_cap, "sm_%u%u", caps->nv_cc_major,
                 caps->nv_cc_minor);
        break;
    case DEVICE_CLASS_GPU_AMD:
        snprintf(vendor, vendor_cap, "amd");
        snprintf(arch, arch_cap, "%s", caps->amd_gfx[0] ? caps->amd_gfx
                                                        : "amd-gpu");
        break;
    case DEVICE_CLASS_GPU_INTEL:
        snprintf(vendor, vendor_cap, "intel");
        snprintf(arch, arch_cap, "%s", intel_gpu_family(device));
        break;
    default:
        tuning_normalise_name(caps->vendor, vendor, vendor_cap);
        snprintf(arch, arch_cap, "gpu");
        break;
    }
}

const char *tuning_seq_class(long long seqlen_q, long long seqlen_k)
{
    if (seqlen_q <= 16)
        return "decode";
    return seqlen_q <= 512 && seqlen_k <= 512 ? "short" : "long";
}

const char *tuning_level_name(int level)
{
    static const char *const names[] = {"none", "path", "dtype", "vendor",
                                        "architecture", "device"};
    return level >= 0 && level <= TUNING_LEVEL_DEVICE ? names[level] : "?";
}

/* ---- lookup --------------------------------------------------------- */

static bool any(const char *s) { return !s || !strcmp(s, "*"); }

/* The entry's level (the count of named fields of its chain), or
 * TUNING_NONE when a named field differs from the query. */
static int entry_level(const tuning_entry *e, const tuning_query *q)
{
    const char *const mine[] = {e->dtype, e->vendor, e->arch, e->device};
    const char *const want[] = {q->dtype, q->vendor, q->arch, q->device};
    if (strcmp(e->path, q->path) != 0)
        return TUNING_NONE;
    int level = TUNING_LEVEL_PATH;
    for (int i = 0; i < 4 && !any(mine[i]); ++i, ++level)
        if (strcmp(mine[i], want[i]) != 0)
            return TUNING_NONE;
    return level;
}

/* Lower is better; -1 when the entry cannot serve the shape. */
static long shape_cost(const tuning_entry *e, const tuning_query *q)
{
    if (e->head_dim < q->head_dim || (!any(e->seq) && strcmp(e->seq, q->seq)))
        return -1;
    return (long)(e->head_dim - q->head_dim) * 4 +
           (e->causal >= 0 && e->causal != q->causal ? 2 : 0) +
           (any(e->seq) ? 1 : 0);
}

const tuning_entry *tuning_lookup(const tuning_entry *table, size_t count,
                                  const tuning_query *q, int *level)
{
    const tuning_entry *best = NULL;
    int best_level = TUNING_NONE;
    long best_cost = 0;
    for (size_t i = 0; i < count; ++i) {
        const int l = entry_level(&table[i], q);
        const long cost = l ? shape_cost(&table[i], q) : -1;
        if (cost < 0 || l < best_level)
            continue;
        if (l > best_level || cost < best_cost) {
            best = &table[i];
            best_level = l;
            best_cost = cost;
        }
    }
    *level = best_level;
    return best;
}

