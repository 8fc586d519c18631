/* A program outside the build tree that finds an installed flashcl (CMake
 * package or pkg-config) and runs one tiny attention through it. */
#include <flashcl.h>
#include <math.h>
#include <stdio.h>

int main(void)
{
    if (flashcl_version_number() != FLASHCL_VERSION_NUMBER) {
        fprintf(stderr, "header %s, library %s\n", FLASHCL_VERSION_STRING,
                flashcl_version_string());
        return 1;
    }
    flashcl_context *ctx;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s\n", flashcl_last_create_error());
        return 1;
    }
    /* One query, two keys with equal scores: O is the mean of the values. */
    const float q[2] = {1.0f, 0.0f}, k[4] = {0.0f, 1.0f, 0.0f, -1.0f},
                v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float o[2] = {NAN, NAN};
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = d.heads_q = 1;
    d.seqlen_q = 1;
    d.seqlen_k = 2;
    d.head_dim = 2;
    flashcl_status s = flashcl_attention_forward_host(ctx, &d, q, k, v, o, NULL);
    flashcl_context_release(ctx);
    if (s != FLASHCL_SUCCESS || fabsf(o[0] - 2.0f) > 1e-6f ||
        fabsf(o[1] - 3.0f) > 1e-6f) {
        fprintf(stderr, "%s: o = %g %g, expected 2 3\n",
                flashcl_status_string(s), o[0], o[1]);
        return 1;
    }
    printf("installed flashcl %s works\n", flashcl_version_string());
    return 0;
}
