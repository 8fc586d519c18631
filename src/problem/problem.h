/* The problem module: the only code that reads flashcl_attention_desc. It
 * checks a descriptor and turns it into a resolved `problem` (shapes,
 * scalars with defaults applied, every tensor view with both the caller's
 * buffer and its root allocation), which is all that backends, paths and
 * introspection see. Variant fields are handled through the variant table
 * (variants.h). */
#ifndef FLASHCL_PROBLEM_H
#define FLASHCL_PROBLEM_H

#include "core/core.h"
#include "common/kernel_args.clh"

/* One strided view, resolved. */
typedef struct tensor_view {
    bool present;
    cl_mem given;       /* the caller's (sub-)buffer: what kernels receive */
    cl_mem root;        /* its root allocation: what aliasing compares */
    uint64_t base;      /* element offset inside `given` */
    uint64_t stride[4]; /* batch, head, seq, dim; elements */
    uint64_t size[4];   /* extent along each axis */
    uint64_t first_byte, end_byte; /* byte range in `root` (end exclusive) */
} tensor_view;

/* A view's four sizes or strides as the kernels' ulong4 argument. */
cl_ulong4 ulong4_from(const uint64_t v[4]);

/* The fields that the forward's base list (kernel_args.clh) and the
 * backward's list (flash_bwd_args.clh) share, filled from problem *p
 * into *a: two generated structs, hence macros. */
#define FILL_QKVO_ARGS(a, p)                                                   \
    (a)->q = (p)->q.given;                                                     \
    (a)->k = (p)->k.given;                                                     \
    (a)->v = (p)->v.given;                                                     \
    (a)->o = (p)->o.given;                                                     \
    (a)->q_stride = ulong4_from((p)->q.stride);                                \
    (a)->k_stride = ulong4_from((p)->k.stride);                                \
    (a)->v_stride = ulong4_from((p)->v.stride);                                \
    (a)->o_stride = ulong4_from((p)->o.stride)
#define FILL_SHAPE_ARGS(a, p)                                                  \
    (a)->seqlen_q = (cl_int)(p)->seqlen_q;                                     \
    (a)->seqlen_k = (cl_int)(p)->seqlen_k;                                     \
    (a)->head_dim = (cl_int)(p)->head_dim;                                     \
    (a)->head_dim_v = (cl_int)(p)->head_dim_v;                                 \
    (a)->group_size = (cl_int)problem_group_size(p);                           \
    (a)->diag = (p)->diag;                                                     \
    (a)->window_left = (p)->left;                                              \
    (a)->window_right = (p)->right

/* The variants' kernel arguments (cl/common/variants.clh), on the host. */
typedef struct variant_args {
#define FLASHCL_HOST_FIELD(kind, name) FLASHCL_HTYPE_##kind name;
#define FLASHCL_HTYPE_REAL double
#define FLASHCL_HTYPE_BIAS_IN cl_mem
#define FLASHCL_HTYPE_UCHAR_IN cl_mem
#define FLASHCL_HTYPE_FLOAT_IN cl_mem
#define FLASHCL_HTYPE_ULONG cl_ulong
#define FLASHCL_HTYPE_ULONG4 cl_ulong4
    FLASHCL_VARIANT_ARGS(FLASHCL_HOST_FIELD)
} variant_args;

#define PROBLEM_MAX_VARIANTS 16

/* Where a sequence's keys are (src/problem/inference.c). */
typedef enum kv_mode {
    KV_DENSE = 0,  /* [batch, seqlen_k, ...]: every sequence seqlen_k keys */
    KV_VARLEN = 1, /* packed [1, total_k, ...], cu_seqlens_k */
    KV_CACHE = 2,  /* [kv_batch, capacity, ...], cache_seqlens */
    KV_PAGED = 3   /* pages [kv_batch, page_size, ...], block table */
} kv_mode;

/* The inference fields of a descriptor, resolved. */
typedef struct inference {
    /* A feature only the split-KV kernels compute (varlen, cache). */
    bool needs_split_kernel;
    int num_splits;  /* desc: 0 automatic, 1 never, n forced */
    bool varlen_q;
    kv_mode kv;
    bool batch_idx, append;
    bool top_left;   /* causal/window diagonal at key 0 of each sequence */
    int64_t total_q, total_k;   /* packed rows (varlen), else seqlen_* */
    int64_t kv_batch;           /* rows of the K/V tensors' batch axis */
    int64_t seqlen_new, page_size, max_pages;
    /* int32 arrays (absent: not present) and the appended rows. */
    tensor_view cu_q, cu_k, seqlens, batch_idx_view, table;
    tensor_view k_new, v_new;
    tensor_view status; /* int32 [4] counters out (FLASHCL_INFER_STATUS_*) */
    size_t scratch_cap; /* split-KV scratch cap, bytes */
} inference;

/* Quantized K/V storage (kv_quant.c): a type per tensor (the public
 * flashcl_kv_storage values), its scale and zero-point views (present
 * only where the type has them) with strides for every axis (0 where the
 * scale does not vary along it), and the K/V views' storage units. */
typedef struct kv_quant_side {
    int type;        /* flashcl_kv_storage: 0 the dtype */
    size_t elem;     /* bytes of a view element: dtype size, or 1 */
    int64_t cols;    /* view elements per row: head dim, or / 2 (int4) */
    tensor_view scale, zero;
} kv_quant_side;

typedef struct kv_quant {
    bool any;        /* K or V quantized */
    kv_quant_side k, v;
} kv_quant;

typedef struct problem {
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
    int64_t head_dim, head_dim_v; /* head_dim_v: desc 0 -> head_dim */
    flashcl_dtype dtype;
    size_t elem_size;
    flashcl_layout layout;   /* of zero-stride views and the host call */
    flashcl_backend backend; /* AUTO resolved (FLASHCL_BACKEND) */
    double scale;            /* defaults applied; in double for fp64 */
    bool causal;
    bool allow_tf32;         /* fp32 storage may run on TF32 tensor cores */
    /* Visibility: query i sees key j iff
     *   (left < 0  || j >= i + diag - left) &&
     *   (right < 0 || j <= i + diag + right) && j < seqlen_k,
     * causal folded into right (right = min(right, 0)); both clamped to
     * the sequences, so i + diag +- bound never overflows. */
    int64_t diag; /* seqlen_k - seqlen_q (bottom-right) or 0 (top-left) */
    int64_t left, right;
    tensor_view q, k, v, o, lse;
    bool lse_fp64; /* desc lse_dtype FP64: the LSE is stored in fp64 */
    /* Variants: bit i of `variants` is entry i of the variant table,
     * variant_tensor[i] its tensor (if it has one) and variant_value[i]
     * the value of its -D switch. */
    uint32_t variants;
    tensor_view variant_tensor[PROBLEM_MAX_VARIANTS];
    int variant_value[PROBLEM_MAX_VARIANTS];
    variant_args vargs;
    bool empty; /* nothing to compute (zero batch/heads/seqlen_q) */
    /* Issue 11. seqlen_q / seqlen_k above are then per sequence: the
     * maxima (varlen) or the cache's capacity; views are shaped by
     * q_extent / kv_extent (batch axis, rows). */
    inference infer;
    int64_t q_extent[2], kv_extent[2];
    kv_quant quant; /* issue 45; k and v views count its storage units */
} problem;

/* How strictly the tensors of a descriptor are read. */
typedef enum problem_mode {
    /* flashcl_attention_forward: q, k, v, o required, all checked. */
    PROBLEM_FOR_LAUNCH,
    /* describe/prepare: a NULL q/k/v/o/lse buffer is allowed and its view
     * taken as given (strides, offset); present buffers are checked as for
     * a launch. */
    PROBLEM_FOR_PLANNING,
    /* flashcl_attention_forward_host: q/k/v/o/lse fields are ignored (the
     * call brings host arrays); problem_bind_packed binds them later. */
    PROBLEM_FOR_HOST_CALL
} problem_mode;

/* Check every field of `desc` and fill `p`. On failure nothing is written
 * to any buffer and the context's error names the field. */
flashcl_status problem_from_desc(flashcl_context *ctx,
                                 const flashcl_attention_desc *desc,
                                 problem_mode mode, problem *p);

/* The header of a fixed-size descriptor `desc` (its first field is its
 * struct_size): FLASHCL_ERROR_NULL_ARGUMENT when it is NULL,
 * FLASHCL_ERROR_INVALID_VALUE when the caller compiled another size than
 * `expected` (`name` the argument, `init` the initialiser that sets it). */
flashcl_status problem_check_desc_header(flashcl_context *ctx,
                                         const void *desc, size_t expected,
                                         const char *name, const char *init);

/* The start of a public call that takes a descriptor: NULL ctx, this
 * thread's diagnostics cleared, the required output pointer `out` (named
 * `out_name`; NULL name: none required), then problem_from_desc. */
flashcl_status problem_begin_call(flashcl_context *ctx,
                                  const flashcl_attention_desc *desc,
                                  problem_mode mode, const void *out,
                                  const char *out_name, problem *p);

/* Bind packed device buffers (the host call's) to q, k, v, o and lse (NULL:
 * no LSE) in the problem's layout, checking bounds and aliasing again. */
flashcl_status problem_bind_packed(flashcl_context *ctx, problem *p, cl_mem q,
                                   cl_mem k, cl_mem v, cl_mem o, cl_mem lse);

/* Bytes of the packed q, k/v, o and lse tensors of a problem. */
void problem_packed_bytes(const problem *p, size_t *q, size_t *k, size_t *v,
                          size_t *o, size_t *lse);

size_t dtype_size(flashcl_dtype dtype);

/* The diagonal of a sequence of seqlen_q queries and seqlen_k keys, as
 * the kernels compute it (FLASHCL_ALIGNED_DIAG in cl/common/variants.clh):
 * every path and the reference backend take it from here. */
static inline int64_t aligned_diag(bool top_left, int64_t seqlen_q,
                                   int64_t seqlen_k)
{
    return FLASHCL_ALIGNED_DIAG(top_left, seqlen_q, seqlen_k);
}

/* Query heads per KV head. An empty problem may have zero heads (heads_q
 * 0, heads_kv 0 meaning heads_q): then 1, so that no path divides by
 * zero planning it (the descriptor fuzzer found one that did). */
static inline int64_t problem_group_size(const problem *p)
{
    return p->heads_kv > 0 ? p->heads_q / p->heads_kv : 1;
}

/* The larger of the two head dims (D of Q and K, D_v of V and O): the
 * width tiles that hold both must have. */
static inline int64_t problem_widest_head_dim(const problem *p)
{
    return p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v;
}

/* True when every row start of a view is 16-byte aligned and its dim
 * stride is 1 (vector and async-copy paths need both). */
bool view_rows_aligned(const tensor_view *t, size_t elem_size, size_t align);

/* Distinct elements of the view never share bytes (problem.c). */
bool view_is_injective(const tensor_view *t);
/* Two present, non-empty views share bytes of one root allocation. */
bool views_overlap(const tensor_view *a, const tensor_view *b);
/* A view and its name in messages. */
typedef struct named_view {
    const tensor_view *view;
    const char *name;
} named_view;
/* FLASHCL_ERROR_ALIASING, with a message naming the views, unless each of
 * the outputs all[0 .. outputs) is injective (when present) and overlaps
 * none of the views after it in all[0 .. count). */
flashcl_status check_output_aliasing(flashcl_context *ctx,
                                     const named_view *all, size_t outputs,
                                     size_t count);

/* ---- inference fields (inference.c) -------------------------------- */

/* Checks the inference fields and sets p->infer, the per-sequence
 * seqlen_q / seqlen_k and the view extents (before variants and views). */
flashcl_status inference_resolve(flashcl_context *ctx,
                                 const flashcl_attention_desc *desc,
                                 problem_mode mode, problem *p);
/* After the base views: append aliasing and the forced split's scratch. */
flashcl_status inference_check_views(flashcl_context *ctx, const problem *p);
/* Split-KV scratch bytes for `splits` parts (padded head_dim_v). */
uint64_t inference_scratch_bytes(const problem *p, int splits, int dv_padded);

/* ---- quantized K/V (kv_quant.c) ------------------------------------ */

/* Checks the KV storage fields (types, pairing with the cache fields,
 * head dims) and sets p->quant's types and storage units: after
 * inference_resolve, before the base views. */
flashcl_status kv_quant_resolve(flashcl_context *ctx,
                                const flashcl_attention_desc *desc,
                                problem_mode mode, problem *p);
/* After the base views: the scale and zero-point views (present where
 * needed, absent where not, inside their buffers, clear of the outputs
 * and, with an append, of every other tensor). */
flashcl_status kv_quant_views(flashcl_context *ctx,
                              const flashcl_attention_desc *desc,
                              problem_mode mode, problem *p);

/* ---- flashcl_combine_partials (combine.c) --------------------------- */

typedef struct combine_problem {
    int64_t parts, batch, heads, seqlen_q, head_dim_v;
    flashcl_dtype dtype, partial_dtype; /* fp64 partials: fp64 LSEs too */
    bool lse_fp64;                      /* the merged LSE in fp64 */
    /* Views of partial 0; partial p starts p * *_step elements later. */
    tensor_view o_part, lse_part, o, lse;
    uint64_t o_part_step, lse_part_step;
    bool empty;
} combine_problem;

/* Checks every field of a combine descriptor; nothing is written on
 * failure, and the context's error names the field. */
flashcl_status combine_problem_from_desc(flashcl_context *ctx,
                                         const flashcl_combine_desc *desc,
                                         combine_problem *p);

#endif /* FLASHCL_PROBLEM_H */
