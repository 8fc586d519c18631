/* The boolean mask of a forward call, packed into bits: the pass the
 * wgmma path runs before its kernel (src/paths/mask_bits.c; the kernel's
 * FLASHCL_NV_WGMMA_MASK_BITS). Read a key pair at a time, the mask's bytes
 * cost that kernel a 16-bit load and its address arithmetic per pair,
 * half as many instructions again as the scores' softmax; packed, a row's
 * 128 keys of a tile are one 16-byte load.
 *
 * Layout: row i of slice s (batch s / bits_heads, head s % bits_heads,
 * both 0 where the call's mask is shared) is bits_pitch 32-bit words at
 * word (s * seqlen_q + i) * bits_pitch; bit k % 32 of word k / 32 is key
 * k (1: attend), 0 from key seqlen_k on, so the words past the keys that
 * a whole tile's load reads hide nothing the kernel has not masked.
 *
 * Work-item (w, i, s) writes word w of row i of slice s. It takes the
 * forward kernels' argument list (only the mask's view and the lengths
 * matter here) and FLASHCL_MASK_BITS_ARGS after it. */
#include "flashcl_common.clh"
#include "kernel_args.clh"

#if !FLASHCL_MASK
#error "mask_bits.cl packs a mask: build it with -DFLASHCL_MASK=1"
#endif

__kernel void flashcl_pack_mask(FLASHCL_FWD_PARAMS
                                    FLASHCL_MASK_BITS_ARGS(FLASHCL_KPARAM))
{
    const int w = (int)get_global_id(0);
    const int i = (int)get_global_id(1);
    const int s = (int)get_global_id(2);
    if (w >= bits_pitch || i >= seqlen_q)
        return;
    const ulong row = mask_base + (ulong)(s / bits_heads) * mask_stride.s0 +
                      (ulong)(s % bits_heads) * mask_stride.s1 +
                      (ulong)i * mask_stride.s2;
    const int k0 = 32 * w;
    uchar keys[32];
    if (mask_stride.s3 == 1 && k0 + 32 <= seqlen_k) {
        /* a contiguous run: two vector loads */
        vstore16(vload16(0, mask + row + k0), 0, keys);
        vstore16(vload16(1, mask + row + k0), 1, keys);
    } else {
        for (int k = 0; k < 32; ++k)
            keys[k] = k0 + k < seqlen_k
                          ? mask[row + (ulong)(k0 + k) * mask_stride.s3]
                          : 0;
    }
    uint bits = 0;
    for (int k = 0; k < 32; ++k)
        bits |= (keys[k] != 0 ? 1u : 0u) << k;
    mask_bits[((ulong)s * (ulong)seqlen_q + (ulong)i) * (ulong)bits_pitch +
              (ulong)w] = (int)bits;
}
