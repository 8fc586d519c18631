/* sm90a_patch IN.ptx OUT.ptx [SHARED_BYTES]: the wgmma path's PTX patch
 * (src/paths/sm90a_patch.c) on a file, for offline checks: compile a
 * kernel to PTX (clang, or the driver's PTX saved from a GPU run), patch
 * it here, then `ptxas -arch=sm_90a OUT.ptx` (scripts/wgmma_isa_check.sh).
 * SHARED_BYTES: also set the kernel's .shared array to that many bytes
 * (as the path does for a table entry's local_mem). */
#include "paths/sm90a_patch.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: sm90a_patch IN.ptx OUT.ptx [SHARED_BYTES]\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    if (!in) {
        perror(argv[1]);
        return 1;
    }
    size_t cap = 1 << 20, len = 0;
    char *text = malloc(cap);
    size_t got;
    while (text && (got = fread(text + len, 1, cap - len, in)) > 0) {
        len += got;
        if (len == cap) {
            char *grown = realloc(text, cap *= 2);
            if (!grown)
                free(text);
            text = grown;
        }
    }
    fclose(in);
    if (!text) {
        fprintf(stderr, "sm90a_patch: out of memory\n");
        return 1;
    }
    char why[256];
    size_t out_len = 0;
    int markers = 0;
    char *out = sm90a_patch_ptx(text, len, &out_len, &markers, why, sizeof why);
    free(text);
    if (out && argc == 4) {
        char *grown = sm90a_set_shared_bytes(out, out_len,
                                             (size_t)atol(argv[3]), &out_len,
                                             why, sizeof why);
        free(out);
        out = grown;
    }
    if (!out) {
        fprintf(stderr, "sm90a_patch: %s\n", why);
        return 1;
    }
    FILE *o = fopen(argv[2], "wb");
    const int ok = o && fwrite(out, 1, out_len, o) == out_len;
    if (o)
        fclose(o);
    free(out);
    if (!ok) {
        perror(argv[2]);
        return 1;
    }
    printf("sm90a_patch: %d instructions uncommented\n", markers);
    return 0;
}
