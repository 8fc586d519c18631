/* The ordered list of kernel paths: the first that can run a problem runs
 * it. Faster, narrower paths first; the portable path, which runs
 * everything, last. */
#include "core/dev_env.h"
#include "paths/path.h"
#include "paths/nv_mma_bwd.h"
#include "paths/portable_bwd_tiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kernel_path *const paths[] = {
    &nv_wgmma_path, /* unforced where measured faster (nv_wgmma.c: D >= 40) */
    &nv_mma_path,
    &amd_mfma_path,
    &subgroup_path,
    &split_kv_path, /* decoding and the inference features */
    &portable_path, /* always last */
};

/* FLASHCL_PORTABLE_ONLY=1 keeps every vendor path off (debugging, and
 * checking the portable kernel on a GPU). FLASHCL_PATH=<name> keeps every
 * path but that one off, and asks it to run whatever it can compute even
 * where its policy would prefer another path (tests force a path this
 * way); the portable path still takes what it cannot. Read per call. */
static bool portable_only(void)
{
    const char *force = dev_getenv("FLASHCL_PORTABLE_ONLY");
    return force && *force && strcmp(force, "0") != 0;
}

static const char *forced_path(void)
{
    const char *name = getenv("FLASHCL_PATH");
    return name && *name ? name : NULL;
}

/* A forced path that refuses a problem hands it to the path it stands in
 * for before the portable kernel: nv_wgmma covers part of what nv_mma
 * computes, and falls back to it when its sm_90a build fails. */
static const kernel_path *stand_in_for(const kernel_path *path)
{
    return path == &nv_wgmma_path ? &nv_mma_path : NULL;
}

static void note_skip(char *skipped, size_t cap, const char *path,
                      const char *why)
{
    if (!skipped || !cap)
        return;
    size_t len = strlen(skipped);
    if (len < cap)
        snprintf(skipped + len, cap - len, "%s%s: %s", len ? "; " : "", path,
                 why);
}

/* FLASHCL_PATH naming no path: refused with the names there are. */
static void describe_unknown_path(const char *name, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap,
                                  "FLASHCL_PATH=\"%.64s\" is not a kernel "
                                  "path; the paths are",
                                  name);
    for (size_t i = 0; i < sizeof paths / sizeof paths[0] && len < cap; ++i)
        len += (size_t)snprintf(buf + len, cap - len, "%s %s", i ? "," : "",
                                paths[i]->name);
}

/* Quantized K/V (issue 45) is dequantized by cl/common/kv_load.clh in
 * the split-KV row kernel alone, which the split_kv and portable paths
 * plan; every other path says no. */
static bool refuses_quantized(const kernel_path *path, const problem *p,
                              char *why, size_t cap)
{
    if (!p->quant.any || path == &split_kv_path || path == &portable_path)
        return false;
    snprintf(why, cap, "quantized K/V storage: read by the split-KV row "
                       "kernel only");
    return true;
}

/* Only the portable kernel stores an fp64 LSE (its FLASHCL_LSE_FP64). */
static bool refuses_lse_fp64(const kernel_path *path, const problem *p,
                             char *why, size_t cap)
{
    if (!p->lse_fp64 || path == &portable_path)
        return false;
    snprintf(why, cap, "lse_dtype fp64: stored by the portable kernel only");
    return true;
}

bool forced_path_unknown(char *why, size_t cap)
{
    const char *force = forced_path();
    if (!force || find_path(force))
        return false;
    describe_unknown_path(force, why, cap);
    return true;
}

size_t paths_count(void) { return sizeof paths / sizeof paths[0]; }

const kernel_path *path_at(size_t i)
{
    return i < paths_count() ? paths[i] : NULL;
}

const kernel_path *find_path(const char *name)
{
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; ++i)
        if (name && !strcmp(paths[i]->name, name))
            return paths[i];
    return NULL;
}

/* The portable backward's tuning key (portable_bwd_tiles.h; planned in
 * src/api/backward.c): not a
 * forward path, only what tuning_choose, flashcl_path_tunable and
 * flashcl_context_force_tiles read of one. */
const kernel_path portable_bwd_tuning = {
    .name = PORTABLE_BWD_TUNING_PATH,
    .summary = "the portable backward's tunables (flashcl tune --backward "
               "where the tensor-core backward does not run)",
    .tunables = portable_bwd_tunables,
    .tunable_count =
        sizeof portable_bwd_tunables / sizeof portable_bwd_tunables[0],
};

const kernel_path *find_tuned_path(const char *name)
{
    if (name && !strcmp(name, nv_mma_bwd_tuning.name))
        return &nv_mma_bwd_tuning;
    if (name && !strcmp(name, portable_bwd_tuning.name))
        return &portable_bwd_tuning;
    return find_path(name);
}

void choose_plan(const device_caps *caps, const problem *p, kernel_plan *plan,
                 char *skipped, size_t skipped_cap)
{
    choose_plan_forced(caps, p, plan, skipped, skipped_cap, NULL);
}

void choose_plan_forced(const device_caps *caps, const problem *p,
                        kernel_plan *plan, char *skipped, size_t skipped_cap,
                        const char *forced_spec)
{
    char forced_name[32] = "";
    const char *forced_tiles = NULL;
    const char *colon = forced_spec ? strchr(forced_spec, ':') : NULL;
    if (colon && (size_t)(colon - forced_spec) < sizeof forced_name) {
        memcpy(forced_name, forced_spec, (size_t)(colon - forced_spec));
        forced_name[colon - forced_spec] = '\0';
        forced_tiles = colon + 1;
    }
    if (forced_name[0] && !find_path(forced_name)) {
        /* the backward's tuning keys ("nv_mma_bwd", "portable_bwd"): not
         * the forward's */
        forced_name[0] = '\0';
        forced_tiles = NULL;
    }
    if (skipped && skipped_cap)
        skipped[0] = '\0';
    const size_t count = sizeof paths / sizeof paths[0];
    const kernel_path *chosen = paths[count - 1];
    const bool only_portable = portable_only();
    const char *force = forced_name[0] ? forced_name : forced_path();
    const kernel_path *fallback = NULL; /* of a forced path that refused */
    const char *quant_refused = NULL;   /* a forced path without kv_load */
    for (size_t i = 0; i + 1 < count; ++i) {
        char why[256] = "";
        const bool forced = force && strcmp(force, paths[i]->name) == 0;
        if (only_portable) {
            note_skip(skipped, skipped_cap, paths[i]->name,
                      "FLASHCL_PORTABLE_ONLY is set");
            continue;
        }
        if (force && !forced && paths[i] != fallback) {
            snprintf(why, sizeof why, "FLASHCL_PATH=%.64s", force);
            note_skip(skipped, skipped_cap, paths[i]->name, why);
            continue;
        }
        if (refuses_quantized(paths[i], p, why, sizeof why)) {
            if (forced)
                quant_refused = paths[i]->name;
            note_skip(skipped, skipped_cap, paths[i]->name, why);
            continue;
        }
        if (refuses_lse_fp64(paths[i], p, why, sizeof why)) {
            note_skip(skipped, skipped_cap, paths[i]->name, why);
            continue;
        }
        if (paths[i]->can_run(caps, p, forced, why, sizeof why)) {
            chosen = paths[i];
            break;
        }
        if (forced)
            fallback = stand_in_for(paths[i]);
        note_skip(skipped, skipped_cap, paths[i]->name, why);
    }
    memset(plan, 0, sizeof *plan);
    plan->path = chosen;
    if (forced_tiles && !strcmp(chosen->name, forced_name))
        plan->forced_tiles = forced_tiles;
    chosen->plan(caps, p, plan);
    if (quant_refused)
        plan_refuse(plan, FLASHCL_ERROR_UNSUPPORTED,
                    "FLASHCL_PATH=%s with a quantized K/V cache (k_storage "
                    "/ v_storage): that path does not dequantize; the "
                    "split-KV kernels do",
                    quant_refused);
    if (force && !forced_name[0] && !find_path(force)) {
        char why[sizeof plan->refused];
        describe_unknown_path(force, why, sizeof why);
        plan->refused[0] = '\0'; /* the user's setting outranks the path's */
        plan_refuse(plan, FLASHCL_ERROR_INVALID_VALUE, "%s", why);
    }
}

void paths_matrix_offer(const device_caps *caps, char *offer, size_t cap)
{
    for (size_t i = 0; i < paths_count(); ++i)
        if (paths[i]->offer && paths[i]->offer(caps, offer, cap))
            return;
    snprintf(offer, cap, "none");
}

void paths_summary(const device_caps *caps, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    const size_t count = sizeof paths / sizeof paths[0];
    for (size_t i = 0; i + 1 < count && len < cap; ++i)
        if (paths[i]->serves_device(caps)) {
            int n = snprintf(buf + len, cap - len, "%s; ", paths[i]->summary);
            if (n < 0)
                return;
            len += (size_t)n;
        }
    if (len < cap)
        snprintf(buf + len, cap - len, "%s%s", len ? "otherwise " : "",
                 paths[count - 1]->summary);
}
