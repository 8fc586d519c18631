/* The wgmma path's packed mask: a call's boolean mask packed into bits by
 * a pass before the forward kernel (cl/common/mask_bits.cl, the kernel's
 * FLASHCL_NV_WGMMA_MASK_BITS), in the context's scratch
 * (core/scratch.h, ctx->mask_bits). */
#ifndef FLASHCL_MASK_BITS_H
#define FLASHCL_MASK_BITS_H

#include "paths/path.h"

/* Where the packed words go: rows of `pitch` 32-bit words (a multiple
 * of 4, so a 128-key tile of a row is one aligned 16-byte load), one row
 * per query row of each of batch x heads slices (1 where the call's mask
 * is shared along that axis). */
typedef struct mask_bits_layout {
    int pitch;
    int batch, heads;
    uint64_t bytes;
} mask_bits_layout;

mask_bits_layout mask_bits_layout_of(const problem *p);

/* Adds the packing pass to a plan as its extra program (source, options,
 * NDRange) and sets plan->mask_bits; the forward kernel's options must
 * carry -DFLASHCL_NV_WGMMA_MASK_BITS=1 (the caller's). */
void mask_bits_plan(const problem *p, kernel_plan *plan);

/* The forward kernel's view of the packed words: its mask argument, with
 * byte strides (batch, head, row; the key axis is the words'), base 0. */
void mask_bits_view(const mask_bits_layout *l, const problem *p,
                    cl_mem words, variant_args *v);

/* The pass alone (the plan's extra program, `pass`), into `words` (at
 * least l's bytes; l the problem's layout). */
flashcl_status mask_bits_enqueue_pack(flashcl_context *ctx,
                                     cl_command_queue queue, const problem *p,
                                     const kernel_plan *plan,
                                     const mask_bits_layout *l,
                                     compiled_program *pass, cl_mem words,
                                     cl_uint num_wait,
                                     const cl_event *wait_list,
                                     cl_event *event);

/* The pass (programs[1]), then the forward kernel (programs[0], over the
 * plan's NDRange, with `trailing` after its list) reading the packed
 * words as its mask; `event` is the forward kernel's. */
flashcl_status mask_bits_launch(flashcl_context *ctx, cl_command_queue queue,
                                const problem *p, const kernel_plan *plan,
                                compiled_program *const programs[2],
                                const trailing_args *trailing,
                                cl_uint num_wait, const cl_event *wait_list,
                                cl_event *event);

#endif /* FLASHCL_MASK_BITS_H */
