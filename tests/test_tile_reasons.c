/* The tile tables' reasons are short IDs into docs/experiments.md, not
 * measurement prose compiled into the library (issue 47): every entry of
 * the portable, mma.sync, wgmma, split-KV, subgroup and AMD tables names
 * an ID that the experiments log lists in its "Tile table entries" table,
 * and no reason is longer than an ID needs. No device. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "paths/amd_mfma_tiles.h"
#include "paths/nv_mma_tiles.h"
#include "paths/nv_wgmma_tiles.h"
#include "paths/portable_tiles.h"
#include "paths/split_kv_tiles.h"
#include "paths/subgroup_tiles.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* "tile entry " + an ID of up to 24 characters + " (docs/experiments.md)" */
#define REASON_MAX 60

static char *experiments_log(void)
{
    FILE *f = fopen(FLASHCL_SOURCE_DIR "/docs/experiments.md", "rb");
    ck_assert_msg(f != NULL, "cannot open docs/experiments.md");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    ck_assert(text != NULL);
    ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* The ID of a reason made by TILE_REASON, or "" when it is not one. */
static void reason_id(const char *reason, char *id, size_t cap)
{
    const char *prefix = "tile entry ";
    const char *start = strncmp(reason, prefix, strlen(prefix))
                            ? NULL
                            : reason + strlen(prefix);
    const char *end = start ? strchr(start, ' ') : NULL;
    id[0] = '\0';
    if (end && (size_t)(end - start) < cap) {
        memcpy(id, start, (size_t)(end - start));
        id[end - start] = '\0';
    }
}

static void check_reason(const char *log, const char *table, size_t entry,
                         const char *reason)
{
    char id[64], row[80];
    ck_assert_msg(strlen(reason) <= REASON_MAX,
                  "%s[%zu]: a %zu-character reason is prose, not an ID: %s",
                  table, entry, strlen(reason), reason);
    reason_id(reason, id, sizeof id);
    ck_assert_msg(id[0] != '\0', "%s[%zu]: not TILE_REASON(id): %s", table,
                  entry, reason);
    snprintf(row, sizeof row, "| `%s` |", id);
    ck_assert_msg(strstr(log, row) != NULL,
                  "%s[%zu]: docs/experiments.md has no row \"%s\"", table,
                  entry, row);
}

START_TEST(every_reason_is_a_listed_id)
{
    char *log = experiments_log();
    for (size_t i = 0; i < COUNT(portable_tiles); i++)
        check_reason(log, "portable_tiles", i, portable_tiles[i].measured);
    for (size_t i = 0; i < COUNT(nv_tiles); i++)
        check_reason(log, "nv_tiles", i, nv_tiles[i].reason);
    for (size_t i = 0; i < COUNT(nv_wgmma_tiles); i++)
        check_reason(log, "nv_wgmma_tiles", i, nv_wgmma_tiles[i].reason);
    for (size_t i = 0; i < COUNT(split_tiles); i++)
        check_reason(log, "split_tiles", i, split_tiles[i].measured);
    for (size_t i = 0; i < COUNT(subgroup_tiles); i++)
        check_reason(log, "subgroup_tiles", i, subgroup_tiles[i].measured);
    for (size_t i = 0; i < COUNT(amd_tiles); i++)
        check_reason(log, "amd_tiles", i, amd_tiles[i].reason);
    free(log);
}
END_TEST

START_TEST(ids_are_distinct)
{
    const char *all[64];
    size_t n = 0;
#define ADD(table, field)                                                      \
    for (size_t i = 0; i < COUNT(table) && n < COUNT(all); i++)                \
        all[n++] = table[i].field;
    ADD(portable_tiles, measured)
    ADD(nv_tiles, reason)
    ADD(nv_wgmma_tiles, reason)
    ADD(split_tiles, measured)
    ADD(subgroup_tiles, measured)
    ADD(amd_tiles, reason)
#undef ADD
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            ck_assert_msg(strcmp(all[i], all[j]) != 0,
                          "two entries share the reason %s", all[i]);
}
END_TEST

int main(void)
{
    /* the headers' tunables are the tuner's business, not this test's */
    (void)portable_tunables;
    (void)nv_mma_tunables;
    (void)split_kv_tunables;
    (void)subgroup_tunables;
    (void)amd_mfma_tunables;
    Suite *s = suite_create("tile_reasons");
    TCase *tc = tcase_create("tables");
    tcase_add_test(tc, every_reason_is_a_listed_id);
    tcase_add_test(tc, ids_are_distinct);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
