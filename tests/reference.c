/* ref_* on top of the shared float64 oracle (see reference.h). */
#include "reference.h"

#include <string.h>

size_t ref_dtype_size(ref_dtype dtype)
{
    return oracle_dtype_size((flashcl_dtype)dtype);
}

double ref_load(const void *base, size_t index, ref_dtype dtype)
{
    return oracle_load(base, index, (flashcl_dtype)dtype);
}

void ref_store(void *base, size_t index, ref_dtype dtype, double value)
{
    oracle_store(base, index, (flashcl_dtype)dtype, value);
}

static oracle_view view_of(const ref_view *view, ref_dtype dtype)
{
    oracle_view out = {view->base, view->offset, {0, 0, 0, 0},
                       (flashcl_dtype)dtype};
    memcpy(out.stride, view->stride, sizeof out.stride);
    return out;
}

oracle_problem ref_oracle_problem(const ref_problem *p)
{
    const oracle_problem out = {
        .batch = p->batch, .heads_q = p->heads_q, .heads_kv = p->heads_kv,
        .seqlen_q = p->seqlen_q, .seqlen_k = p->seqlen_k,
        .head_dim = p->head_dim, .head_dim_v = p->head_dim,
        .scale = p->scale, .causal = p->causal,
        .causal_align = FLASHCL_CAUSAL_BOTTOM_RIGHT,
        .q = view_of(&p->q, p->dtype), .k = view_of(&p->k, p->dtype),
        .v = view_of(&p->v, p->dtype)};
    return out;
}

int ref_attention(const ref_problem *p, double *o, double *lse)
{
    oracle_problem problem = ref_oracle_problem(p);
    return oracle_attention(&problem, o, NULL, lse);
}
