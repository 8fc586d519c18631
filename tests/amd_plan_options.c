/* Prints the build options the library gives the amd_mfma path, one line
 * "label<TAB>options" per problem, for scripts/amd_isa_check.sh: it
 * compiles the kernel for AMD targets with exactly what the host passes.
 * Run with FLASHCL_PATH=amd_mfma and FLASHCL_AMD_EMULATE=mfma|wmma on a
 * device with subgroups (the emulated plan has the hardware's tiles; only
 * -DFLASHCL_AMD_MATRIX differs, 3/4 instead of 1/2). Exit 1 when a problem
 * did not plan on amd_mfma. */
#include "flashcl.h"

#include <stdio.h>
#include <string.h>

typedef struct plan_case {
    const char *label;
    int head_dim, causal, window;
    flashcl_dtype dtype;
} plan_case;

static const plan_case cases[] = {
    {"D64-fp16", 64, 0, 0, FLASHCL_DTYPE_FP16},
    {"D64-bf16-causal", 64, 1, 0, FLASHCL_DTYPE_BF16},
    {"D128-fp16-causal", 128, 1, 0, FLASHCL_DTYPE_FP16},
    {"D128-bf16-window", 128, 0, 1, FLASHCL_DTYPE_BF16},
    {"D256-fp16", 256, 0, 0, FLASHCL_DTYPE_FP16},
    {"D256-bf16-causal", 256, 1, 0, FLASHCL_DTYPE_BF16},
};

int main(void)
{
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "amd_plan_options: no device: %s\n",
                flashcl_last_create_error());
        return 1;
    }
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const plan_case *c = &cases[i];
        flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
        d.batch = 1;
        d.heads_q = 8;
        d.heads_kv = 2;
        d.seqlen_q = d.seqlen_k = 1024;
        d.head_dim = c->head_dim;
        d.dtype = c->dtype;
        d.causal = c->causal;
        d.window = c->window;
        d.window_left = c->window ? 256 : 0;
        d.window_right = c->window ? 16 : 0;
        flashcl_variant_info info;
        if (flashcl_describe_variant(ctx, &d, &info) != FLASHCL_SUCCESS ||
            strcmp(info.path, "amd_mfma") != 0) {
            fprintf(stderr, "amd_plan_options: %s planned on %s (%s)\n",
                    c->label, info.path, info.skipped);
            bad = 1;
            continue;
        }
        printf("%s\t%s\n", c->label, info.build_options);
    }
    flashcl_context_release(ctx);
    return bad;
}
