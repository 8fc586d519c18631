/* The wgmma path's packed mask (mask_bits.h). */
#include "paths/mask_bits.h"
#include "core/scratch.h"
#include "problem/variants.h"

#include <stdio.h>
#include <string.h>

#define MASK_BITS_WHAT "packed-mask"
/* the pass's work-groups: words of a row */
#define MASK_BITS_WG 64

mask_bits_layout mask_bits_layout_of(const problem *p)
{
    const tensor_view *mask = variant_view(p, VARIANT_MASK);
    mask_bits_layout l;
    /* whole 128-key groups: one 16-byte load per row and tile */
    l.pitch = (int)((p->seqlen_k + 127) / 128 * 4);
    l.batch = mask && mask->stride[0] != 0 && p->batch > 1 ? (int)p->batch : 1;
    l.heads =
        mask && mask->stride[1] != 0 && p->heads_q > 1 ? (int)p->heads_q : 1;
    l.bytes = (uint64_t)l.batch * (uint64_t)l.heads * (uint64_t)p->seqlen_q *
              (uint64_t)l.pitch * 4;
    return l;
}

void mask_bits_plan(const problem *p, kernel_plan *plan)
{
    const mask_bits_layout l = mask_bits_layout_of(p);
    plan->mask_bits = true;
    plan->extra_source = "mask_bits.cl";
    plan->extra_kernel = "flashcl_pack_mask";
    options_buf out =
        options_begin(plan->extra_options, sizeof plan->extra_options);
    plan_base_options_add(p, plan, &out);
    variants_add_defines(p, &out);
    plan_options_done(plan, &out, (switch_fault){NULL, 0});
    plan->extra_global[0] =
        (size_t)(l.pitch + MASK_BITS_WG - 1) / MASK_BITS_WG * MASK_BITS_WG;
    plan->extra_global[1] = (size_t)p->seqlen_q;
    plan->extra_global[2] = (size_t)l.batch * (size_t)l.heads;
    plan->extra_local[0] = MASK_BITS_WG;
    plan->extra_local[1] = plan->extra_local[2] = 1;
}

/* ---- launch: the packed words after the forward list
 * (cl/common/kernel_args.clh, FLASHCL_MASK_BITS_ARGS) ------------------ */

#define FLASHCL_HTYPE_INT_OUT cl_mem
#ifndef FLASHCL_HTYPE_INT
#define FLASHCL_HTYPE_INT cl_int
#endif

typedef struct pack_args {
    FLASHCL_MASK_BITS_ARGS(FLASHCL_HOST_FIELD)
} pack_args;

static FLASHCL_TRAILING_ARGS_SETTER(set_pack_args, pack_args,
                                    FLASHCL_MASK_BITS_ARGS);

void mask_bits_view(const mask_bits_layout *l, const problem *p,
                    cl_mem words, variant_args *v)
{
    const uint64_t row = (uint64_t)l->pitch * 4;
    const uint64_t head = l->heads > 1 ? row * (uint64_t)p->seqlen_q : 0;
    const uint64_t batch =
        l->batch > 1 ? row * (uint64_t)p->seqlen_q * (uint64_t)l->heads : 0;
    v->mask = words;
    v->mask_stride.s[0] = batch;
    v->mask_stride.s[1] = head;
    v->mask_stride.s[2] = row;
    v->mask_stride.s[3] = 1;
    v->mask_base = 0;
}

flashcl_status mask_bits_enqueue_pack(flashcl_context *ctx,
                                     cl_command_queue queue, const problem *p,
                                     const kernel_plan *plan,
                                     const mask_bits_layout *l,
                                     compiled_program *pass, cl_mem words,
                                     cl_uint num_wait,
                                     const cl_event *wait_list,
                                     cl_event *event)
{
    const pack_args a = {words, (cl_int)l->pitch, (cl_int)l->heads};
    const trailing_args pack = {set_pack_args, &a};
    const cl_int err = enqueue_with_args(ctx, queue, p, pass, 0, &pack,
                                         plan->extra_global, plan->extra_local,
                                         num_wait, wait_list, event);
    if (err != CL_SUCCESS)
        return set_error(ctx, FLASHCL_ERROR_OPENCL,
                         "launching the mask-packing pass before %s: %s",
                         plan->source, cl_error_name(err));
    return FLASHCL_SUCCESS;
}

/* The pass into the set's buffer, then the forward kernel on it. */
static flashcl_status pack_then_forward(
    flashcl_context *ctx, cl_command_queue queue, const problem *p,
    const kernel_plan *plan, compiled_program *const programs[2],
    const trailing_args *trailing, const mask_bits_layout *l, cl_mem words,
    const scratch_waits *waits, cl_event *packed, cl_event *done)
{
    flashcl_status st =
        mask_bits_enqueue_pack(ctx, queue, p, plan, l, programs[1], words,
                               waits->count, waits->list, packed);
    if (st != FLASHCL_SUCCESS)
        return st;
    problem on_bits = *p;
    mask_bits_view(l, p, words, &on_bits.vargs);
    return enqueue_forward(ctx, queue, &on_bits, plan, programs[0], trailing,
                           1, packed, done);
}

flashcl_status mask_bits_launch(flashcl_context *ctx, cl_command_queue queue,
                                const problem *p, const kernel_plan *plan,
                                compiled_program *const programs[2],
                                const trailing_args *trailing,
                                cl_uint num_wait, const cl_event *wait_list,
                                cl_event *event)
{
    const mask_bits_layout l = mask_bits_layout_of(p);
    scratch_set *s = NULL;
    flashcl_status st = scratch_get(ctx, &ctx->mask_bits, MASK_BITS_WHAT, &s);
    if (st != FLASHCL_SUCCESS)
        return st;
    pthread_mutex_lock(&s->lock);
    const size_t bytes[SCRATCH_BUFFERS] = {(size_t)l.bytes, 0, 0};
    unsigned fresh = 0; /* every word is written before it is read */
    scratch_waits waits = {wait_list, num_wait, {NULL}, NULL};
    st = scratch_grow(ctx, s, bytes, &fresh, MASK_BITS_WHAT);
    if (st == FLASHCL_SUCCESS) /* after the set's previous user */
        st = scratch_wait_list(ctx, s, num_wait, wait_list, &waits);
    cl_event packed = NULL, done = NULL;
    if (st == FLASHCL_SUCCESS)
        st = pack_then_forward(ctx, queue, p, plan, programs, trailing, &l,
                               s->buffer[0], &waits, &packed, &done);
    scratch_done(s, queue, done ? done : packed, st != FLASHCL_SUCCESS);
    pthread_mutex_unlock(&s->lock);
    scratch_waits_free(&waits);
    if (packed)
        clReleaseEvent(packed);
    if (st == FLASHCL_SUCCESS && event)
        *event = done;
    else if (done)
        clReleaseEvent(done);
    return st;
}
