/* The inference fields of the descriptor (issue 11): split count, KV
 * cache (lengths, batch index, in-place append), varlen prefix sums and
 * paged KV. Everything the host can know is checked here; what only the
 * device reads (lengths, page indices) is clamped or skipped by the
 * kernels (cl/inference/flash_split.cl says which). */
#include "problem/problem.h"
#include "problem/variants.h"

#include <stdio.h>
#include <string.h>

#define MAX_LEN (INT32_MAX - 4096)
#define MAX_PAGE_SIZE 65536

static bool has(const flashcl_tensor *t) { return t->buffer != NULL; }

/* Fields that are never ignored: set without the feature that reads them
 * is an error rather than a silent no-op. */
static flashcl_status check_orphans(flashcl_context *ctx,
                                    const flashcl_attention_desc *d)
{
    const bool cache = has(&d->cache_seqlens);
    if (has(&d->block_table) && !cache)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "block_table is set but cache_seqlens is not: a "
                         "paged cache needs cache_seqlens (the valid keys of "
                         "each sequence)");
    const struct {
        bool set, needed;
        const char *field, *needs;
    } rules[] = {
        {has(&d->cache_batch_idx), cache, "cache_batch_idx", "cache_seqlens"},
        {d->kv_batch != 0, cache, "kv_batch", "cache_seqlens"},
        {d->seqlen_new != 0, cache, "seqlen_new", "cache_seqlens"},
        {has(&d->k_new) || has(&d->v_new), d->seqlen_new > 0,
         "k_new / v_new", "seqlen_new > 0"},
        {d->max_seqlen_q != 0, has(&d->cu_seqlens_q), "max_seqlen_q",
         "cu_seqlens_q"},
        {d->max_seqlen_k != 0, has(&d->cu_seqlens_k), "max_seqlen_k",
         "cu_seqlens_k"},
        {d->page_size != 0 || d->max_pages != 0, has(&d->block_table),
         "page_size / max_pages", "block_table"},
        {has(&d->infer_status),
         cache || has(&d->cu_seqlens_q) || has(&d->cu_seqlens_k),
         "infer_status", "cache_seqlens or cu_seqlens_q / cu_seqlens_k"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; ++i)
        if (rules[i].set && !rules[i].needed)
            return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                             "%s is set but %s is not: the field would be "
                             "ignored",
                             rules[i].field, rules[i].needs);
    if (has(&d->cu_seqlens_k) && cache)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "cu_seqlens_k and cache_seqlens both set: a "
                         "sequence's keys come from one of them");
    if (has(&d->cache_batch_idx) && has(&d->block_table))
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "cache_batch_idx with block_table: the block table "
                         "already maps each sequence to its pages");
    if (d->seqlen_new > 0 && has(&d->cu_seqlens_q))
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "in-place append (seqlen_new) with cu_seqlens_q: "
                         "append takes dense [batch, seqlen_new] rows");
    /* Each sequence of these calls gets its own diagonal on the device;
     * the split-KV kernels have no absolute one yet. */
    if (d->causal_align == FLASHCL_CAUSAL_ABSOLUTE &&
        (cache || has(&d->cu_seqlens_q) || has(&d->cu_seqlens_k) ||
         d->num_splits > 1))
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "causal_align = FLASHCL_CAUSAL_ABSOLUTE with a KV "
                         "cache, cu_seqlens or num_splits > 1: absolute "
                         "positions serve dense calls only (not yet these)");
    return FLASHCL_SUCCESS;
}

static flashcl_status check_range(flashcl_context *ctx, const char *name,
                                  int64_t value, int64_t lo, int64_t hi)
{
    if (value < lo || value > hi)
        return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                         "%s = %lld: must be in %lld..%lld", name,
                         (long long)value, (long long)lo, (long long)hi);
    return FLASHCL_SUCCESS;
}

static flashcl_status check_numbers(flashcl_context *ctx,
                                    const flashcl_attention_desc *d)
{
    if (d->num_splits < 0 || d->num_splits > FLASHCL_MAX_SPLITS)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "num_splits = %d: must be 0 (automatic) or "
                         "1..%d",
                         d->num_splits, FLASHCL_MAX_SPLITS);
    flashcl_status st = check_range(ctx, "kv_batch", d->kv_batch, 0, INT32_MAX);
    if (st == FLASHCL_SUCCESS)
        st = check_range(ctx, "seqlen_new", d->seqlen_new, 0, d->seqlen_k);
    if (st == FLASHCL_SUCCESS)
        st = check_range(ctx, "max_seqlen_q", d->max_seqlen_q, 0, MAX_LEN);
    if (st == FLASHCL_SUCCESS)
        st = check_range(ctx, "max_seqlen_k", d->max_seqlen_k, 0, MAX_LEN);
    if (st != FLASHCL_SUCCESS || !has(&d->block_table))
        return st;
    if (d->page_size < 16 || d->page_size > MAX_PAGE_SIZE ||
        d->page_size % 16 != 0)
        return set_error(ctx, FLASHCL_ERROR_INVALID_VALUE,
                         "page_size = %lld: must be a multiple of 16 in "
                         "16..%d",
                         (long long)d->page_size, MAX_PAGE_SIZE);
    st = check_range(ctx, "max_pages", d->max_pages, 1, MAX_LEN);
    if (st == FLASHCL_SUCCESS && d->kv_batch < 1)
        return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                         "kv_batch = %lld: a paged cache needs the number of "
                         "pages (>= 1)",
                         (long long)d->kv_batch);
    if (st == FLASHCL_SUCCESS && d->max_pages * d->page_size != d->seqlen_k)
        return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                         "seqlen_k = %lld: a paged cache's capacity must be "
                         "max_pages * page_size = %lld",
                         (long long)d->seqlen_k,
                         (long long)(d->max_pages * d->page_size));
    return st;
}

/* An int32 array of `rows` x `cols` elements: stride_batch elements between
 * rows (0: packed), unit stride along a row. */
static flashcl_status resolve_ints(flashcl_context *ctx,
                                   const flashcl_tensor *t, const char *name,
                                   uint64_t rows, uint64_t cols,
                                   tensor_view *view)
{
    if (!has(t))
        return FLASHCL_SUCCESS;
    flashcl_tensor literal = *t;
    literal.stride_batch = t->stride_batch ? t->stride_batch : (size_t)cols;
    literal.stride_head = literal.stride_seq = 0;
    literal.stride_dim = 1;
    const view_shape shape = {name, {rows, 1, 1, cols}, sizeof(cl_int),
                              FLASHCL_LAYOUT_BNHD, STRIDES_LITERAL};
    return resolve_view(ctx, &literal, &shape, PROBLEM_FOR_LAUNCH, true, view);
}

static flashcl_status resolve_arrays(flashcl_context *ctx,
                                     const flashcl_attention_desc *d,
                                     problem *p)
{
    inference *in = &p->infer;
    const uint64_t b = (uint64_t)p->batch;
    flashcl_status st =
        resolve_ints(ctx, &d->cu_seqlens_q, "cu_seqlens_q", b + 1, 1, &in->cu_q);
    if (st == FLASHCL_SUCCESS)
        st = resolve_ints(ctx, &d->cu_seqlens_k, "cu_seqlens_k", b + 1, 1,
                          &in->cu_k);
    if (st == FLASHCL_SUCCESS)
        st = resolve_ints(ctx, &d->cache_seqlens, "cache_seqlens", b, 1,
                          &in->seqlens);
    if (st == FLASHCL_SUCCESS)
        st = resolve_ints(ctx, &d->cache_batch_idx, "cache_batch_idx", b, 1,
                          &in->batch_idx_view);
    if (st == FLASHCL_SUCCESS)
        st = resolve_ints(ctx, &d->block_table, "block_table", b,
                          (uint64_t)d->max_pages, &in->table);
    if (st == FLASHCL_SUCCESS)
        st = resolve_ints(ctx, &d->infer_status, "infer_status", 1,
                          FLASHCL_INFER_STATUS_COUNT, &in->status);
    if (st != FLASHCL_SUCCESS || !in->append)
        return st;
    const uint64_t hkv = (uint64_t)p->heads_kv, n = (uint64_t)in->seqlen_new;
    const view_shape kn = {"k_new", {b, hkv, n, (uint64_t)p->head_dim},
                           p->elem_size, d->layout, STRIDES_PACKED_LAYOUT};
    const view_shape vn = {"v_new", {b, hkv, n, (uint64_t)p->head_dim_v},
                           p->elem_size, d->layout, STRIDES_PACKED_LAYOUT};
    st = resolve_view(ctx, &d->k_new, &kn, PROBLEM_FOR_LAUNCH, true, &in->k_new);
    if (st == FLASHCL_SUCCESS)
        st = resolve_view(ctx, &d->v_new, &vn, PROBLEM_FOR_LAUNCH, true,
                          &in->v_new);
    return st;
}

/* The per-sequence sizes and the views' extents of each mode. */
static void resolve_shapes(const flashcl_attention_desc *d, problem *p)
{
    inference *in = &p->infer;
    in->total_q = d->seqlen_q;
    in->total_k = d->seqlen_k;
    if (in->varlen_q) {
        p->q_extent[0] = 1;
        p->seqlen_q = d->max_seqlen_q;
        p->empty = p->empty || d->max_seqlen_q == 0;
    }
    if (in->kv == KV_VARLEN) {
        p->kv_extent[0] = 1;
        p->seqlen_k = d->max_seqlen_k;
    } else if (in->kv == KV_CACHE) {
        p->kv_extent[0] = in->kv_batch;
    } else if (in->kv == KV_PAGED) {
        p->kv_extent[0] = in->kv_batch;
        p->kv_extent[1] = in->page_size;
    }
    /* dense kernels only (absolute positions come with no inference
     * field: problem.c's diagonal stands) */
    if (d->causal_align != FLASHCL_CAUSAL_ABSOLUTE)
        p->diag = aligned_diag(in->top_left, p->seqlen_q, p->seqlen_k);
}

/* The split-KV kernels pack the query heads of a KV head into rows (row
 * = query * group + head) indexed with int: past 2^31 they wrote out of
 * bounds (issue 42 item 13). Bounded here for every call that can reach
 * them, with room for a tile past the last row. */
static flashcl_status check_packed_rows(flashcl_context *ctx,
                                        const problem *p)
{
    const inference *in = &p->infer;
    int64_t group = problem_group_size(p);
    if (group < 1) /* heads_q < heads_kv: an empty call, or refused later */
        group = 1;
    if ((!in->needs_split_kernel && in->num_splits <= 1) ||
        p->seqlen_q <= MAX_LEN / group)
        return FLASHCL_SUCCESS;
    return set_error(ctx, FLASHCL_ERROR_INVALID_DIMENSION,
                     "%s = %lld with heads_q / heads_kv = %lld: the split-KV "
                     "kernels' packed query rows (%s x heads_q / heads_kv) "
                     "must be at most %lld",
                     in->varlen_q ? "max_seqlen_q" : "seqlen_q",
                     (long long)p->seqlen_q, (long long)group,
                     in->varlen_q ? "max_seqlen_q" : "seqlen_q",
                     (long long)MAX_LEN);
}

/* FLASHCL_SPLIT_SCRATCH_LIMIT, the context's setter, or the default. */
static flashcl_status read_cap(flashcl_context *ctx, problem *p)
{
    return split_scratch_cap(ctx, &p->infer.scratch_cap);
}

flashcl_status inference_resolve(flashcl_context *ctx,
                                 const flashcl_attention_desc *d,
                                 problem_mode mode, problem *p)
{
    inference *in = &p->infer;
    memset(in, 0, sizeof *in);
    flashcl_status st = check_orphans(ctx, d);
    if (st == FLASHCL_SUCCESS)
        st = check_numbers(ctx, d);
    if (st != FLASHCL_SUCCESS)
        return st;
    /* The partials are fp32 (issue 42 item 12): fp64 calls stay whole so
     * that they keep fp64 accuracy; a forced count is then not an error. */
    in->num_splits = d->dtype == FLASHCL_DTYPE_FP64 ? 1 : d->num_splits;
    in->varlen_q = has(&d->cu_seqlens_q);
    in->kv = has(&d->cu_seqlens_k)    ? KV_VARLEN
             : has(&d->block_table)   ? KV_PAGED
             : has(&d->cache_seqlens) ? KV_CACHE
                                      : KV_DENSE;
    in->batch_idx = has(&d->cache_batch_idx);
    in->seqlen_new = d->seqlen_new;
    in->append = d->seqlen_new > 0;
    in->kv_batch = d->kv_batch ? d->kv_batch : d->batch;
    in->page_size = d->page_size;
    in->max_pages = d->max_pages;
    in->top_left = d->causal_align == FLASHCL_CAUSAL_TOP_LEFT;
    in->needs_split_kernel = in->varlen_q || in->kv != KV_DENSE;
    if (in->needs_split_kernel && mode == PROBLEM_FOR_HOST_CALL)
        return set_error(ctx, FLASHCL_ERROR_UNSUPPORTED,
                         "flashcl_attention_forward_host takes dense "
                         "problems: KV cache and varlen fields need device "
                         "buffers (flashcl_attention_forward)");
    if (in->append && !has(&d->k_new))
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                         "k_new.buffer is NULL (seqlen_new = %lld)",
                         (long long)d->seqlen_new);
    if (in->append && !has(&d->v_new))
        return set_error(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                         "v_new.buffer is NULL (seqlen_new = %lld)",
                         (long long)d->seqlen_new);
    resolve_shapes(d, p);
    st = check_packed_rows(ctx, p);
    if (st == FLASHCL_SUCCESS)
        st = read_cap(ctx, p);
    return st == FLASHCL_SUCCESS ? resolve_arrays(ctx, d, p) : st;
}

uint64_t inference_scratch_bytes(const problem *p, int splits, int dv_padded)
{
    if (splits <= 1)
        return 0;
    return (uint64_t)splits * (uint64_t)p->batch * (uint64_t)p->heads_q *
           (uint64_t)p->seqlen_q * ((uint64_t)dv_padded + 1) * 4;
}

static flashcl_status overlap_error(flashcl_context *ctx, const char *out,
                                    const char *in)
{
    return set_error(ctx, FLASHCL_ERROR_ALIASING,
                     "%s overlaps %s in the same buffer", out, in);
}

/* Outputs (o, lse, and k, v when appending) against every inference
 * input; check_aliasing (problem.c) already did o and lse against the
 * rest. */
flashcl_status inference_check_views(flashcl_context *ctx, const problem *p)
{
    const inference *in = &p->infer;
    const struct {
        const tensor_view *v;
        const char *name;
    } inputs[] = {{&in->cu_q, "cu_seqlens_q"}, {&in->cu_k, "cu_seqlens_k"},
                  {&in->seqlens, "cache_seqlens"},
                  {&in->batch_idx_view, "cache_batch_idx"},
                  {&in->table, "block_table"}, {&in->k_new, "k_new"},
                  {&in->v_new, "v_new"}, {&p->q, "q"}},
      outputs[] = {{&p->o, "o"}, {&p->lse, "lse"}, {&p->k, "k (appended)"},
                   {&p->v, "v (appended)"}};
    const size_t n_out = in->append ? 4 : 2;
    for (size_t o = 0; o < n_out; ++o)
        for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; ++i)
            if ((o >= 2 || i < 7) && views_overlap(outputs[o].v, inputs[i].v))
                return overlap_error(ctx, outputs[o].name, inputs[i].name);
    /* the counters are written: they must not share a byte with any
     * other tensor of the call */
    const tensor_view *others[] = {&p->q, &p->k, &p->v, &p->o, &p->lse};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; ++i)
        if (views_overlap(&in->status, inputs[i].v))
            return overlap_error(ctx, "infer_status", inputs[i].name);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; ++i)
        if (views_overlap(&in->status, others[i]))
            return overlap_error(ctx, "infer_status", "a tensor of the call");
    for (size_t i = 0; i < variant_count(); ++i)
        if (views_overlap(&in->status, &p->variant_tensor[i]))
            return overlap_error(ctx, "infer_status", variant_at(i)->name);
    if (in->append && views_overlap(&p->k, &p->v))
        return overlap_error(ctx, "k (appended)", "v");
    if (in->append)
        for (size_t i = 0; i < variant_count(); ++i)
            if (views_overlap(&p->k, &p->variant_tensor[i]) ||
                views_overlap(&p->v, &p->variant_tensor[i]))
                return overlap_error(ctx, "k / v (appended)",
                                     variant_at(i)->name);
    const int dv_pad = p->head_dim_v <= 128
                           ? (int)((p->head_dim_v + 15) / 16 * 16)
                           : (int)((p->head_dim_v + 31) / 32 * 32);
    const uint64_t need = inference_scratch_bytes(p, in->num_splits, dv_pad);
    if (!p->empty && need > in->scratch_cap)
        return set_error(ctx, FLASHCL_ERROR_OUT_OF_MEMORY,
                         "num_splits = %d needs %llu bytes of split-KV "
                         "scratch, above the cap of %zu (flashcl_context_set_"
                         "split_scratch_limit, FLASHCL_SPLIT_SCRATCH_LIMIT)",
                         in->num_splits, (unsigned long long)need,
                         in->scratch_cap);
    return FLASHCL_SUCCESS;
}
