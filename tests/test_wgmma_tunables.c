/*
 * The wgmma path's tunables (issue 15) without a GPU: their declaration
 * through flashcl_path_tunable, the host's legality rules
 * (src/paths/nv_wgmma_config.c, compiled in) on hand-derived cases, and
 * the rules against the kernel's own: every set of the search space, at
 * D = 64 and 128 with the 128 KiB and at D = 256 with the 224 KiB of
 * their table entries, is given to the
 * C preprocessor with the options the path passes
 * (cl/nvidia/flash_fwd_wgmma.cl's #error rules run there): a set the host
 * accepts must preprocess cleanly, one the host refuses for a kernel rule
 * must hit an #error. The compile
 * of the extremes for sm_90a is scripts/wgmma_isa_check.sh tunables
 * (clang + ptxas, not in CI), which reads `test_wgmma_tunables --list`.
 */
#define _POSIX_C_SOURCE 200809L /* popen */
#include "kernel_preprocess.h"
#include "test_common.h"

#include "paths/nv_wgmma_tiles.h"

#include <stdlib.h>
#include <string.h>

/* D = 64 and 128 size their tiles for the table's 128 KiB (the PTX patch
 * grows .shared beyond the 48 KiB NVIDIA's OpenCL reports) */
#define LOCAL_MEM 131072u
/* D = 256 sizes its tiles for what the PTX patch gives (the table's 224
 * KiB: Q's 64 KiB and 5 slots of 32 KiB with their mbarriers) */
#define LOCAL_MEM_256 229456u
static unsigned mem_for(int d)
{
    return nv_wgmma_tile_dim(d) == 256 ? LOCAL_MEM_256 : LOCAL_MEM;
}
#define NUM_TUNABLES (sizeof nv_wgmma_tunables / sizeof nv_wgmma_tunables[0])

/* A set of the declared tunables (values in declaration order) by name. */
static nv_wgmma_cfg cfg_of(const int v[NUM_TUNABLES])
{
    nv_wgmma_cfg c = {0, 0, 0, 0};
    int *const field[] = {&c.warpgroups, &c.block_n, &c.ring};
    static const char *const names[] = {"warpgroups", "block_n", "ring"};
    for (size_t i = 0; i < NUM_TUNABLES; ++i)
        for (size_t k = 0; k < LENGTH(names); ++k)
            if (!strcmp(nv_wgmma_tunables[i].name, names[k]))
                *field[k] = v[i];
    return c;
}

static bool legal(const nv_wgmma_cfg *c, int d, char *why, size_t cap)
{
    return nv_wgmma_legal(c, d, mem_for(d), 1024, why, cap);
}

START_TEST(declared_through_the_api)
{
    static const char *const names[] = {"ring", "block_n", "warpgroups"};
    ck_assert_uint_eq(NUM_TUNABLES, LENGTH(names));
    for (size_t i = 0; i < LENGTH(names); ++i) {
        flashcl_tunable t;
        ck_assert_int_eq(flashcl_path_tunable("nv_wgmma", (int)i, &t),
                         FLASHCL_SUCCESS);
        ck_assert_str_eq(t.name, names[i]);
        ck_assert_int_eq(t.count, nv_wgmma_tunables[i].count);
        for (int k = 0; k < t.count; ++k)
            ck_assert_int_eq(t.values[k], nv_wgmma_tunables[i].values[k]);
        for (int k = 1; k < t.count; ++k)
            ck_assert_int_lt(t.values[k - 1], t.values[k]);
    }
    flashcl_tunable t;
    ck_assert_int_eq(flashcl_path_tunable("nv_wgmma", 0, &t),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(t.values[0], 3);
    ck_assert_int_eq(t.count, 5);
    ck_assert_int_eq(flashcl_path_tunable("nv_wgmma", (int)NUM_TUNABLES, &t),
                     FLASHCL_ERROR_INVALID_VALUE);
    /* the paths declared before keep their full value lists */
    ck_assert_int_eq(flashcl_path_tunable("portable", 2, &t),
                     FLASHCL_SUCCESS);
    ck_assert_str_eq(t.name, "vec");
    ck_assert_int_eq(t.count, 3);
}
END_TEST

/* The widest head dim an entry serves: its dims_up_to, else its width. */
static int entry_dims(const nv_wgmma_tile *e)
{
    return e->dims_up_to ? e->dims_up_to : e->head_dim;
}

START_TEST(table_entries_legal)
{
    for (size_t i = 0; i < LENGTH(nv_wgmma_tiles); ++i) {
        const nv_wgmma_tile *e = &nv_wgmma_tiles[i];
        const nv_wgmma_cfg c = {e->warpgroups, e->block_n, e->ring, 0};
        char why[160] = "";
        ck_assert_msg(nv_wgmma_legal(&c, entry_dims(e),
                                     e->local_mem ? e->local_mem : LOCAL_MEM,
                                     1024, why, sizeof why),
                      "table entry D=%d: %s", entry_dims(e), why);
    }
}
END_TEST

/* Hand-derived from the kernel's rules: a K or V tile is block_n * D * 2
 * bytes, each ring slot has 16 bytes of mbarriers; D = 64 and 128 are
 * judged against LOCAL_MEM, D = 256 against LOCAL_MEM_256 (mem_for). */
static const struct {
    int d;
    nv_wgmma_cfg c;
    const char *refusal; /* NULL: legal */
} cases[] = {
    {128, {2, 128, 3, 0}, NULL},           /* the table's: 3 x (32 K + 16) */
    {128, {2, 128, 4, 0}, "local memory"}, /* 4 x (32 K + 16): 64 over */
    {128, {2, 64, 7, 0}, NULL},
    {128, {2, 64, 8, 0}, "local memory"},
    {64, {3, 128, 4, 0}, NULL},
    {64, {2, 64, 8, 1}, NULL},
    {64, {2, 64, 1, 0}, "ring 1"},
    {64, {2, 64, 9, 0}, "ring 9"},
    {64, {1, 64, 4, 0}, "warpgroups 1"},
    {64, {4, 64, 4, 0}, "warpgroups 4"},
    {64, {2, 32, 4, 0}, "block_n 32"},
    {64, {2, 64, 4, 2}, "persist 2"},
    /* D = 256 (LOCAL_MEM_256): Q takes 32 KiB a consumer warpgroup */
    {256, {2, 64, 5, 0}, NULL}, /* 64 K + 5 x (32 K + 16) */
    {256, {2, 64, 6, 0}, "local memory"},
    {256, {2, 128, 2, 0}, "64-key"},
    /* 3 consumers in the 256-column tiles up to head dim 160 (O's
     * registers): 96 K of Q + 4 x (32 K + 16) */
    {160, {3, 64, 4, 0}, NULL},
    {144, {3, 64, 4, 0}, NULL},
    {160, {3, 64, 5, 0}, "local memory"},
    {176, {3, 64, 4, 0}, "2 consumer"},
    {256, {3, 64, 4, 0}, "2 consumer"},
};

START_TEST(hand_derived_cases)
{
    char why[160] = "";
    const bool ok = legal(&cases[_i].c, cases[_i].d, why, sizeof why);
    if (!cases[_i].refusal)
        ck_assert_msg(ok, "case %d refused: %s", _i, why);
    else
        ck_assert_msg(!ok && strstr(why, cases[_i].refusal),
                      "case %d: %s, \"%s\" (want \"%s\")", _i,
                      ok ? "accepted" : "refused", why, cases[_i].refusal);
    /* Q's local memory: in the 256-column tiles only, 32 KiB a consumer
     * warpgroup */
    const int width = nv_wgmma_tile_dim(cases[_i].d);
    ck_assert_uint_eq(nv_wgmma_q_bytes(&cases[_i].c, width),
                      width == 256 ? (unsigned)cases[_i].c.warpgroups * 32768u
                                   : 0u);
    /* the producer counts: 2 + 1 warpgroups need 384 work-items, and share
     * an SM's 64 K registers */
    const nv_wgmma_cfg two = {2, 64, 4, 0};
    ck_assert(!nv_wgmma_legal(&two, 64, LOCAL_MEM, 256, why, sizeof why));
    ck_assert(nv_wgmma_legal(&two, 64, LOCAL_MEM, 384, why, sizeof why));
    ck_assert_int_eq(nv_wgmma_threads(&two), 384);
    ck_assert_int_eq(nv_wgmma_regs(&two), 168); /* 65536 / 384, by 8 */
    const nv_wgmma_cfg three = {3, 64, 4, 0};
    ck_assert_int_eq(nv_wgmma_threads(&three), 512);
    ck_assert_int_eq(nv_wgmma_regs(&three), 128);
}
END_TEST

/* Calls fn for every set of the search space; returns how many. */
static int each_set(void (*fn)(const nv_wgmma_cfg *, int d, void *),
                    void *arg)
{
    int n = 0, index[NUM_TUNABLES] = {0};
    for (;;) {
        int v[NUM_TUNABLES];
        for (size_t i = 0; i < NUM_TUNABLES; ++i)
            v[i] = nv_wgmma_tunables[i].values[index[i]];
        const nv_wgmma_cfg c = cfg_of(v);
        fn(&c, 64, arg);
        fn(&c, 128, arg);
        fn(&c, 256, arg);
        n += 3;
        size_t i = 0;
        while (i < NUM_TUNABLES && ++index[i] == nv_wgmma_tunables[i].count)
            index[i++] = 0;
        if (i == NUM_TUNABLES)
            return n;
    }
}

/* The options the path passes for a set (its switches' tiles, schedule
 * and local memory, and the register split from nv_wgmma_regs, as
 * nv_wgmma.c's schedule_options emits them), as -D flags. */
static void options(const nv_wgmma_cfg *c, int d, int dtype, int causal,
                    char *buf, size_t cap)
{
    snprintf(buf, cap, "-DFLASHCL_NV_WGMMA=1 -DFLASHCL_HEAD_DIM=%d "
             "-DFLASHCL_HEAD_DIM_V=%d -DFLASHCL_DTYPE=%d -DFLASHCL_CAUSAL=%d "
             "-DFLASHCL_WG_SIZE=%d -DFLASHCL_BLOCK_M=%d -DFLASHCL_BLOCK_N=%d "
             "-DFLASHCL_LOCAL_MEM_BYTES=%u -DFLASHCL_NV_WGMMA_RING=%d "
             "-DFLASHCL_NV_WGMMA_PERSIST=%d -DFLASHCL_NV_WGMMA_MAXNREG=%d",
             d, d, dtype, causal, nv_wgmma_threads(c), 64 * c->warpgroups,
             c->block_n, mem_for(d), c->ring, c->persist, nv_wgmma_regs(c));
}

static int preprocess(const char *opts)
{
    return preprocess_kernel("flash_fwd_wgmma.cl", opts, 1);
}

typedef struct agree_state {
    int legal, kernel_refused, checked;
} agree_state;

static void agree(const nv_wgmma_cfg *c, int d, void *arg)
{
    agree_state *s = arg;
    char why[160] = "", opts[1024];
    const bool ok = legal(c, d, why, sizeof why);
    options(c, d, 1, 1, opts, sizeof opts);
    const int rc = preprocess(opts);
    ++s->checked;
    if (ok) {
        ++s->legal;
        ck_assert_msg(rc == 0, "host-legal set refused by the kernel (exit "
                      "%d): %s", rc, opts);
    } else {
        ++s->kernel_refused;
        ck_assert_msg(rc != 0, "host refused (%s), the kernel accepts: %s",
                      why, opts);
    }
}

START_TEST(host_rules_match_the_kernel)
{
    ck_assert_msg(preprocess("-DFLASHCL_NV_WGMMA=1 -DFLASHCL_HEAD_DIM=64 "
                             "-DFLASHCL_HEAD_DIM_V=64 -DFLASHCL_DTYPE=1 "
                             "-DFLASHCL_CAUSAL=0 -DFLASHCL_WG_SIZE=384 "
                             "-DFLASHCL_BLOCK_M=128 -DFLASHCL_BLOCK_N=64") ==
                      0, "%s cannot preprocess the kernel", FLASHCL_TEST_CC);
    /* the preprocessor is a check that can fail */
    ck_assert_int_ne(preprocess("-DFLASHCL_NV_WGMMA=1 -DFLASHCL_HEAD_DIM=96"),
                     0);
    agree_state s = {0};
    const int total = each_set(agree, &s);
    ck_assert_int_gt(s.legal, 20);
    ck_assert_int_gt(s.kernel_refused, 10);
    printf("nv_wgmma tunables: %d sets (D 64/128/256), %d preprocessed (%d "
           "legal, %d refused by both)\n", total, s.checked, s.legal,
           s.kernel_refused);
}
END_TEST

/* Every head dim the path accepts (multiples of 8 up to 256) builds in
 * the tiles nv_wgmma_tile_dim gives it, with FLASHCL_NV_DQ = D, as the
 * plan passes them; the kernel refuses a D that is not a multiple of 8, or
 * that belongs to a narrower class (the host would waste half the tile). */
START_TEST(padded_head_dims)
{
    const nv_wgmma_cfg table = {2, 64, 2, 0};
    int built = 0;
    for (int d = 1; d <= 256; ++d) {
        const int w = nv_wgmma_tile_dim(d);
        ck_assert(w == 64 || w == 128 || w == 256);
        ck_assert_int_ge(w, d);
        if (d % 8 && d != 100 && d != 36)
            continue; /* two non-multiples stand for the rest */
        char opts[1024];
        options(&table, w, 1, 0, opts, sizeof opts);
        char with_dq[1100];
        snprintf(with_dq, sizeof with_dq, "%s -DFLASHCL_NV_DQ=%d", opts, d);
        const int rc = preprocess(with_dq);
        if (d % 8 == 0) {
            ck_assert_msg(rc == 0, "D = %d in %d columns refused: %s", d, w,
                          with_dq);
            ++built;
        } else {
            ck_assert_msg(rc != 0, "D = %d accepted: %s", d, with_dq);
        }
    }
    ck_assert_int_eq(built, 32);
    /* a narrower class's D in a wider tile: refused */
    char opts[1024], with_dq[1100];
    options(&table, 256, 1, 0, opts, sizeof opts);
    snprintf(with_dq, sizeof with_dq, "%s -DFLASHCL_NV_DQ=128", opts);
    ck_assert_int_ne(preprocess(with_dq), 0);
    options(&table, 128, 1, 0, opts, sizeof opts);
    snprintf(with_dq, sizeof with_dq, "%s -DFLASHCL_NV_DQ=136", opts);
    ck_assert_int_ne(preprocess(with_dq), 0);
}
END_TEST

/* Bias or mask on this path: every table entry narrowed to 64-key tiles
 * (nv_wgmma_narrow_for_extras) stays legal in the entry's local memory,
 * keeps at least its ring's bytes busy (or 8 slots, the kernel's most
 * without staged extras), and builds with the variant
 * switches; the kernel refuses an illegal switch value. */
START_TEST(variant_tiles)
{
    for (size_t i = 0; i < LENGTH(nv_wgmma_tiles); ++i) {
        const nv_wgmma_tile *e = &nv_wgmma_tiles[i];
        const uint64_t mem = e->local_mem ? e->local_mem : LOCAL_MEM;
        const nv_wgmma_cfg table = {e->warpgroups, e->block_n, e->ring, 0};
        nv_wgmma_cfg c = table;
        nv_wgmma_narrow_for_extras(&c, e->head_dim, mem);
        char why[160] = "";
        ck_assert_msg(nv_wgmma_legal(&c, e->head_dim, mem, 1024, why,
                                     sizeof why),
                      "D=%d narrowed: %s", e->head_dim, why);
        ck_assert_int_le(c.block_n, 64);
        /* (up to the kernel's 8 slots: 512 keys of 64-key tiles, less
         * than the D <= 80 entry's 5 slots of 128 keys) */
        const int64_t keys = (int64_t)table.ring * table.block_n;
        ck_assert_int_ge((int64_t)c.ring * c.block_n,
                         keys < 8 * 64 ? keys : 8 * 64);
        /* what the hand count says: D = 128 in 128 KiB holds 7 slots of
         * 16 KiB + 16 bytes, D = 64 more than 8 */
        if (e->head_dim == 128 && mem == 131072 && table.block_n == 128)
            ck_assert_int_eq(c.ring, 7);
        if (e->head_dim == 64 && mem == 131072 && table.block_n == 128)
            ck_assert_int_eq(c.ring, 8);
        char opts[1024], with[1400];
        options(&c, e->head_dim, 2, e->causal > 0, opts, sizeof opts);
        /* the entry's local memory (options() assumes the device's) */
        snprintf(with, sizeof with, "%s -UFLASHCL_LOCAL_MEM_BYTES "
                 "-DFLASHCL_LOCAL_MEM_BYTES=%llu -DFLASHCL_WINDOW_LEFT=1 "
                 "-DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1 "
                 "-DFLASHCL_BIAS=3 -DFLASHCL_MASK=1 -DFLASHCL_SINKS=1", opts,
                 (unsigned long long)mem);
        ck_assert_msg(preprocess(with) == 0, "kernel refused: %s", with);
        snprintf(with, sizeof with, "%s -UFLASHCL_LOCAL_MEM_BYTES "
                 "-DFLASHCL_LOCAL_MEM_BYTES=%llu", opts,
                 (unsigned long long)mem);
        ck_assert_msg(preprocess(with) == 0, "kernel refused: %s", with);
        strcat(with, " -DFLASHCL_WINDOW_LEFT=2");
        ck_assert_msg(preprocess(with) != 0, "kernel accepted: %s", with);
    }
}
END_TEST

/* The persistent grid (FLASHCL_NV_WGMMA_PERSIST, not a tunable): legal
 * on the host for every schedule, as in the kernel, which refuses it only
 * beside packed batches (the plan drops it there: test_nv_plans). */
START_TEST(persistent_grid_rules)
{
    for (int persist = 0; persist <= 1; ++persist) {
        const nv_wgmma_cfg c = {2, 64, 2, persist};
        char why[160] = "", opts[1024], packed[1100];
        ck_assert_msg(legal(&c, 128, why, sizeof why), "persist %d: %s",
                      persist, why);
        options(&c, 128, 1, 1, opts, sizeof opts);
        ck_assert_msg(preprocess(opts) == 0, "kernel refused: %s", opts);
        snprintf(packed, sizeof packed, "%s -DFLASHCL_NV_VARLEN=1", opts);
        ck_assert_msg((preprocess(packed) == 0) == !persist, "%s", packed);
    }
}
END_TEST

/* --list: every legal set, "D<TAB>params<TAB>options", for
 * scripts/wgmma_isa_check.sh tunables. */
static void list_one(const nv_wgmma_cfg *c, int d, void *arg)
{
    (void)arg;
    char why[160], opts[1024];
    if (!legal(c, d, why, sizeof why))
        return;
    options(c, d, 1, 0, opts, sizeof opts);
    printf("%d\twarpgroups=%d,block_n=%d,ring=%d\t%s\n", d, c->warpgroups,
           c->block_n, c->ring, opts);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        each_set(list_one, NULL);
        return 0;
    }
    const test_entry tests[] = {{declared_through_the_api, 0},
                                {table_entries_legal, 0},
                                {hand_derived_cases, (int)LENGTH(cases)},
                                {host_rules_match_the_kernel, 0},
                                {padded_head_dims, 0},
                                {variant_tiles, 0},
                                {persistent_grid_rules, 0}};
    return run_tests("wgmma_tunables", 120, NULL, NULL, tests,
                     LENGTH(tests));
}
