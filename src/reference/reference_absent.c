/* The reference backend when the library is built without CLBlast
 * (-DFLASHCL_WITH_CLBLAST=OFF): every entry point says so. */
#include "core/scratch.h"
#include "reference/reference.h"

static flashcl_status absent(flashcl_context *ctx)
{
    return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                     "the reference backend is not in this build of flashcl "
                     "(configured with FLASHCL_WITH_CLBLAST=OFF)");
}

flashcl_status launch_reference(flashcl_context *ctx, cl_command_queue queue,
                                const problem *p, cl_uint num_wait,
                                const cl_event *wait_list, cl_event *event)
{
    (void)queue, (void)p, (void)num_wait, (void)wait_list, (void)event;
    return absent(ctx);
}

flashcl_status launch_reference_backward(flashcl_context *ctx,
                                         const reference_bwd_call *call)
{
    (void)call;
    return absent(ctx);
}

flashcl_status flashcl_context_set_scratch_limit(flashcl_context *ctx,
                                                 size_t bytes)
{
    (void)bytes;
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    return absent(ctx);
}

flashcl_status flashcl_context_get_scratch_limit(flashcl_context *ctx,
                                                 size_t *bytes)
{
    (void)bytes;
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    return absent(ctx);
}

flashcl_status flashcl_context_release_scratch(flashcl_context *ctx)
{
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    context_scratch_release(ctx, false); /* the fused paths' scratch */
    return FLASHCL_SUCCESS; /* the reference backend allocated nothing */
}

flashcl_status flashcl_reference_scratch_bytes(flashcl_context *ctx,
                                               const flashcl_attention_desc *desc,
                                               size_t *bytes)
{
    (void)desc, (void)bytes;
    if (!ctx)
        return FLASHCL_ERROR_NULL_ARGUMENT;
    begin_call(ctx);
    return absent(ctx);
}

void flashcl_clear_reference_cache(void) {}
