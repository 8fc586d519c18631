/* Kernel build options are never cut (issue 47): the checked builder
 * (src/core/options_buf.c) keeps whole switches and reports an overflow;
 * the shared base options and the portable path's emitter go through it,
 * and a plan whose options overflowed, or that set a switch outside its
 * list's legal values, is refused with FLASHCL_ERROR_UNSUPPORTED instead
 * of building a binary filed under a cut cache key. The portable kernel's
 * generated guards (flash_fwd_defaults.clh) are held against the same
 * list through the C preprocessor. No device. */
#include "core/core.h"
#include "paths/path.h"
#include "problem/problem.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* `cut` is whole switches of `full`: empty, or a prefix that ends where a
 * switch ends. */
static int whole_prefix(const char *cut, const char *full)
{
    const size_t n = strlen(cut);
    return n == 0 || (strncmp(cut, full, n) == 0 &&
                      (full[n] == ' ' || full[n] == '\0'));
}

static problem plain_problem(void)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.dtype = FLASHCL_DTYPE_FP16;
    p.right = 0; /* causal */
    p.left = -1;
    return p;
}

static portable_switches legal_switches(void)
{
    portable_switches v = {.DTYPE = 1, .CAUSAL = 1, .HEAD_DIM = 64,
                           .HEAD_DIM_V = 64, .BLOCK_M = 64, .BLOCK_N = 32,
                           .WG_SIZE = 32, .VEC = 8, .DIM_CONTIGUOUS = 1,
                           .COMPENSATED = 1, .DEBUG_CORRUPT = 0};
    return v;
}

START_TEST(builder_keeps_whole_switches)
{
    char text[32];
    memset(text, 'x', sizeof text);
    options_buf out = options_begin(text, sizeof text);
    options_add(&out, " -DFLASHCL_A=%d", 1);
    ck_assert(!out.overflow);
    options_add(&out, " -DFLASHCL_BLOCK_M=%d", 64); /* 35 bytes in all */
    ck_assert(out.overflow);
    ck_assert_str_eq(text, " -DFLASHCL_A=1");
    options_add(&out, " -DB=%d", 1); /* would fit, but the string is lost */
    ck_assert_str_eq(text, " -DFLASHCL_A=1");
    ck_assert_uint_eq(out.len, strlen(text));
}
END_TEST

/* The shared base options into buffers of every size: never a cut
 * switch (the unchecked snprintf left "-DFLASHCL_BLO"). */
START_TEST(base_options_never_cut)
{
    const problem p = plain_problem();
    kernel_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.head_dim_padded = plan.head_dim_v_padded = 128;
    plan.block_m = 64;
    plan.block_n = 32;
    plan.wg_size = 32;
    char full[1024], cut[1024];
    plan_base_options(&p, &plan, full, sizeof full);
    ck_assert(strstr(full, "-DFLASHCL_CAUSAL=1") != NULL);
    for (size_t cap = 1; cap <= strlen(full); ++cap) {
        memset(cut, 'x', sizeof cut);
        plan_base_options(&p, &plan, cut, cap);
        ck_assert_msg(memchr(cut, '\0', cap) != NULL, "cap %zu", cap);
        /* full to the end: how the wgmma path tells an overflow */
        ck_assert_uint_eq(strlen(cut), cap - 1);
        size_t n = strlen(cut); /* the padding, which a build ignores */
        while (n && cut[n - 1] == ' ')
            cut[--n] = '\0';
        ck_assert_msg(whole_prefix(cut, full), "cap %zu: \"%s\"", cap, cut);
    }
}
END_TEST

START_TEST(portable_overflow_refuses_the_plan)
{
    const problem p = plain_problem();
    const portable_switches values = legal_switches();
    char text[128];
    options_buf out = options_begin(text, sizeof text);
    switch_fault fault = {NULL, 0};
    portable_emit(&p, &values, &out, &fault);
    ck_assert(out.overflow);
    ck_assert_ptr_null(fault.name);
    char full[1024];
    options_buf whole = options_begin(full, sizeof full);
    portable_emit(&p, &values, &whole, &fault);
    ck_assert(!whole.overflow);
    ck_assert(whole_prefix(text, full));

    kernel_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.path = &portable_path;
    plan_options_done(&plan, &out, fault);
    ck_assert_int_eq(plan.refused_status, FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(plan.refused, "portable") &&
                      strstr(plan.refused, "build options"),
                  "%s", plan.refused);

    memset(&plan, 0, sizeof plan);
    plan.path = &portable_path;
    plan_options_done(&plan, &whole, fault);
    ck_assert_str_eq(plan.refused, "");
    ck_assert_int_eq(plan.refused_status, FLASHCL_SUCCESS);
}
END_TEST

START_TEST(portable_illegal_switch_refuses_the_plan)
{
    const problem p = plain_problem();
    portable_switches values = legal_switches();
    values.VEC = 3;
    char text[1024];
    options_buf out = options_begin(text, sizeof text);
    switch_fault fault = {NULL, 0};
    portable_emit(&p, &values, &out, &fault);
    ck_assert_str_eq(fault.name, "FLASHCL_VEC");
    kernel_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.path = &portable_path;
    plan_options_done(&plan, &out, fault);
    ck_assert_int_eq(plan.refused_status, FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(plan.refused, "FLASHCL_VEC=3"), "%s", plan.refused);
}
END_TEST

/* cc -E on the portable kernel with the emitter's -D switches (the
 * compiler flags left out): 0 when its guards accept them. */
static int preprocess_portable(const portable_switches *values)
{
    const problem p = plain_problem();
    char text[1024];
    options_buf out = options_begin(text, sizeof text);
    switch_fault fault = {NULL, 0};
    portable_emit(&p, values, &out, &fault);
    const char *defines = strstr(text, " -D");
    ck_assert_ptr_nonnull(defines);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' -E -P -x c -I'%s/portable' -I'%s/common' %s "
             "'%s/portable/flash_fwd.cl' -o /dev/null 2>/dev/null",
             FLASHCL_TEST_CC, FLASHCL_SOURCE_CL_DIR, FLASHCL_SOURCE_CL_DIR,
             defines, FLASHCL_SOURCE_CL_DIR);
    const int raw = system(cmd);
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

START_TEST(kernel_guards_follow_the_list)
{
    portable_switches values = legal_switches();
    ck_assert_int_eq(preprocess_portable(&values), 0);
    values.VEC = 3; /* outside ONE_OF4(2, 4, 8, 16) */
    ck_assert_int_ne(preprocess_portable(&values), 0);
    values = legal_switches();
    values.BLOCK_N = 512; /* outside RANGE(2, 256) */
    ck_assert_int_ne(preprocess_portable(&values), 0);
    values = legal_switches();
    values.COMPENSATED = 2; /* not BOOL */
    ck_assert_int_ne(preprocess_portable(&values), 0);
}
END_TEST

/* cc -E on the split-KV kernel with `defines`: 0 when its guards accept
 * them. */
static int preprocess_split(const char *defines)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' -E -P -x c -I'%s/inference' -I'%s/common' %s "
             "'%s/inference/flash_split.cl' -o /dev/null 2>/dev/null",
             FLASHCL_TEST_CC, FLASHCL_SOURCE_CL_DIR, FLASHCL_SOURCE_CL_DIR,
             defines, FLASHCL_SOURCE_CL_DIR);
    const int raw = system(cmd);
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

/* The split-KV list's guards hold whichever of its kernels is chosen: a
 * switch of one kernel set illegally is refused with another picked. */
START_TEST(split_guards_follow_the_list)
{
    ck_assert_int_eq(preprocess_split(""), 0);
    ck_assert_int_eq(preprocess_split("-DFLASHCL_SPLIT_MMA_HALVES=2"), 0);
    ck_assert_int_ne(preprocess_split("-DFLASHCL_SPLIT_MMA_HALVES=3"), 0);
    ck_assert_int_ne(preprocess_split("-DFLASHCL_SPLIT_UNROLL=9"), 0);
    ck_assert_int_ne(preprocess_split("-DFLASHCL_SPLIT_FUSED=2"), 0);
    ck_assert_int_ne(preprocess_split("-DFLASHCL_SPLIT_MMA_LOAD=4"), 0);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("options");
    TCase *tc = tcase_create("options");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, builder_keeps_whole_switches);
    tcase_add_test(tc, base_options_never_cut);
    tcase_add_test(tc, portable_overflow_refuses_the_plan);
    tcase_add_test(tc, portable_illegal_switch_refuses_the_plan);
    tcase_add_test(tc, kernel_guards_follow_the_list);
    tcase_add_test(tc, split_guards_follow_the_list);
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
