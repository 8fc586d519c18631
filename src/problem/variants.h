/* The variant table: every attention variant (sliding window, top-left
 * causal, ALiBi, bias, mask, softcap, sinks, D_v != D) is one entry in
 * src/problem/variants.c. The entry says which descriptor fields it reads,
 * how they are checked, the tensor it brings, what it writes into the
 * problem and the kernel arguments, and its -D switch; each kernel path
 * declares the variants it computes (kernel_path.variants). Validation, the build options (hence the program cache key),
 * the reference backend, path eligibility and describe all read the table.
 *
 * Adding a variant: an entry here, its arguments and score code in
 * cl/common/variants.clh (plus kernel code, if it changes more than the
 * score), the descriptor field in include/flashcl.h, an oracle branch and
 * test rows. See docs/architecture.md. */
#ifndef FLASHCL_VARIANTS_H
#define FLASHCL_VARIANTS_H

#include "problem/problem.h"
#include "problem/variant_ids.h"
#include "core/options_buf.h"

/* Every variant (1u << VARIANT_*): what a kernel path that computes all
 * of them declares (kernel_path.variants in src/paths/path.h). */
#define VARIANTS_ALL ((1u << VARIANT_COUNT) - 1u)

/* What all-zero strides mean for a tensor (problem.c). */
typedef enum stride_rule {
    STRIDES_PACKED_LAYOUT, /* q, k, v, o: packed in desc->layout */
    STRIDES_PACKED_LSE,    /* [batch, heads, seq] */
    STRIDES_PACKED_HEADS,  /* slopes, sinks: [heads], shared over batch */
    STRIDES_LITERAL        /* bias, mask: zero broadcasts */
} stride_rule;

/* The shape a view must have: sizes of (batch, head, seq, dim). */
typedef struct view_shape {
    const char *name;
    uint64_t size[4];
    size_t elem_size;
    flashcl_layout layout;
    stride_rule rule;
} view_shape;

/* Resolve one view (problem.c): strides, bounds against the buffer, root
 * allocation. `required` false lets a NULL buffer through as "absent"
 * (optional inputs), or as a view without buffer in planning mode. */
flashcl_status resolve_view(flashcl_context *ctx, const flashcl_tensor *tensor,
                            const view_shape *shape, problem_mode mode,
                            bool required, tensor_view *out);

/* The packed-layout shape of a tensor over the call's query rows (q, o,
 * d_q, d_o) or its key rows (k, v, d_k, d_v), `dim` wide: (batch, heads,
 * rows, dim), with a packed (varlen) side [1, total rows]. */
view_shape rows_shape(const problem *p, const char *name, bool keys,
                      int64_t dim);

/* A descriptor tensor, the shape it must have, where its view goes, and
 * whether it must be given. */
typedef struct view_request {
    const flashcl_tensor *tensor;
    view_shape shape;
    tensor_view *out;
    bool required;
} view_request;

/* resolve_view of each request, the first failure's status. A host call
 * (PROBLEM_FOR_HOST_CALL) resolves them as absent, as for planning: its
 * buffers are made later from the host pointers. */
flashcl_status resolve_views(flashcl_context *ctx,
                             const view_request *requests, size_t count,
                             problem_mode mode);

typedef struct variant_entry {
    const char *name;   /* as describe prints it */
    const char *fields; /* the descriptor fields it reads */
    /* -D switch its kernels read (value from `apply`), or NULL. */
    const char *define;
    /* Checks its fields before anything is resolved; NULL: none. */
    flashcl_status (*check)(flashcl_context *ctx,
                            const flashcl_attention_desc *desc);
    /* Whether the call uses it (after the base problem is resolved). */
    bool (*active)(const flashcl_attention_desc *desc, const problem *p);
    /* Its tensor: the descriptor member and the shape it must have. */
    const flashcl_tensor *(*tensor)(const flashcl_attention_desc *desc);
    void (*tensor_shape)(const flashcl_attention_desc *desc, const problem *p,
                         view_shape *shape);
    /* Writes what the kernels need into the problem; returns the value of
     * `define`. */
    int (*apply)(const flashcl_attention_desc *desc, const tensor_view *view,
                 problem *p);
} variant_entry;

/* The table. */
size_t variant_count(void);
const variant_entry *variant_at(size_t index);

/* Checks, resolves and applies every variant of `desc` (problem.c calls
 * this after the base problem is filled). A variant's tensor is what turns
 * it on, so it is checked as for a launch in every mode. */
flashcl_status variants_resolve(flashcl_context *ctx,
                                const flashcl_attention_desc *desc,
                                problem *p);

/* Whether `p` has variants outside `computes` (a path's
 * kernel_path.variants); if so, why[0 .. cap) names them ("does not
 * compute window, softcap"). */
bool variants_refused(const problem *p, uint32_t computes, char *why,
                      size_t cap);

/* Whether variant `id` is active in `p` (a path whose tiles depend on a
 * variant asks this). */
bool variant_active(const problem *p, variant_id id);

/* The tensor of variant `id` (NULL when it is not active or has none). */
const tensor_view *variant_view(const problem *p, variant_id id);

/* The value of variant `id`'s -D switch (0 when it is not active): e.g.
 * the bias dtype code a kernel compiles for. */
int variant_value(const problem *p, variant_id id);

/* Appends " -DNAME=value" for every active variant with a switch. */
void variants_append_defines(const problem *p, char *buf, size_t cap);
/* The same, appended to a checked buffer. */
void variants_add_defines(const problem *p, options_buf *out);

/* "window, softcap" for the variants in `mask` ("" for none). */
void variants_describe(uint32_t mask, char *buf, size_t cap);

/* Sets the variant arguments (cl/common/variants.clh) starting at *index,
 * advancing it: for the fused paths and the reference backend alike. */
cl_int set_variant_args(cl_kernel kernel, cl_uint *index,
                        const variant_args *a, bool fp64);

#endif /* FLASHCL_VARIANTS_H */
