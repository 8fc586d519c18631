/* The kernels' #error rules without a GPU: the C preprocessor
 * (FLASHCL_TEST_CC, -E) on a kernel under cl/nvidia/ with given -D options,
 * for the tests that hold host rules against the kernel's
 * (test_wgmma_tunables, test_nv_plans; both define FLASHCL_TEST_CC and
 * FLASHCL_SOURCE_CL_DIR). Header-only: test_nv_plans links no test
 * library. */
#ifndef FLASHCL_TESTS_KERNEL_PREPROCESS_H
#define FLASHCL_TESTS_KERNEL_PREPROCESS_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* 0 when cl/nvidia/`file` (else cl/common/`file`: the packing pass the
 * wgmma path runs) preprocesses with `defines` (-D options), else the
 * compiler's exit status (-1: it did not exit); `quiet` sends its
 * messages to /dev/null. */
static inline int preprocess_kernel(const char *file, const char *defines,
                                    int quiet)
{
    char path[2048], cmd[4096];
    snprintf(path, sizeof path, "%s/nvidia/%s", FLASHCL_SOURCE_CL_DIR, file);
    if (access(path, R_OK) != 0)
        snprintf(path, sizeof path, "%s/common/%s", FLASHCL_SOURCE_CL_DIR,
                 file);
    snprintf(cmd, sizeof cmd, "'%s' -E -P -x c -I'%s/nvidia' "
             "-I'%s/nvidia/mma' -I'%s/nvidia/wgmma' -I'%s/common' "
             "-I'%s/portable' %s '%s' -o /dev/null%s",
             FLASHCL_TEST_CC, FLASHCL_SOURCE_CL_DIR, FLASHCL_SOURCE_CL_DIR,
             FLASHCL_SOURCE_CL_DIR, FLASHCL_SOURCE_CL_DIR,
             FLASHCL_SOURCE_CL_DIR, defines, path,
             quiet ? " 2>/dev/null" : "");
    const int raw = system(cmd);
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

#endif
