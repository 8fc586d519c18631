/* Packed batches on the dense forward kernels (varlen.h). */
#include "paths/varlen.h"
#include "paths/split_kv.h"

#include <string.h>

bool plan_varlen_dense(const problem *p)
{
    const inference *in = &p->infer;
    /* the status counters are written by a split-KV kernel */
    return in->varlen_q && in->kv == KV_VARLEN && !in->append &&
           !in->status.present && in->num_splits <= 1 &&
           !variant_active(p, VARIANT_BIAS) &&
           !variant_active(p, VARIANT_MASK);
}

/* On the split-KV kernels, built for few query rows, PoCL took 3.2 s for
 * lengths 1000,1000,4097 (fp32, D 64, 4 heads) against 1.55 s for the
 * padded call of 3 x 4097 rows on the portable kernel
 * (flashcl-bench --varlen 1000,1000,4097, 2026-12-07). */
bool plan_varlen_prefill(const device_caps *caps, const problem *p)
{
    return plan_varlen_dense(p) && split_kv_splits(caps, p) <= 1 &&
           !split_kv_tensor_decode(caps, p);
}

/* The list's fields, in its order, are those of varlen_args (varlen.h);
 * the kernel argument kinds' host types for the set below. */
#define FLASHCL_HTYPE_INT_IN cl_mem
#define FLASHCL_HTYPE_ULONG4 cl_ulong4
#define FLASHCL_HTYPE_INT cl_int
typedef struct varlen_list {
    FLASHCL_VARLEN_ARGS(FLASHCL_HOST_FIELD)
} varlen_list;
_Static_assert(sizeof(varlen_list) == sizeof(varlen_args),
               "varlen_args (varlen.h) must match FLASHCL_VARLEN_ARGS");

void varlen_args_fill(const problem *p, varlen_args *a)
{
    const inference *in = &p->infer;
    memset(a, 0, sizeof *a);
    a->cu_q = in->cu_q.given;
    a->cu_k = in->cu_k.given;
    a->len_base.s[0] = in->cu_q.base;
    a->len_base.s[1] = in->cu_k.base;
    a->len_stride.s[0] = in->cu_q.stride[0];
    a->len_stride.s[1] = in->cu_k.stride[0];
    a->total_q = (cl_int)in->total_q;
    a->total_k = (cl_int)in->total_k;
}

FLASHCL_TRAILING_ARGS_SETTER(varlen_args_set, varlen_args, FLASHCL_VARLEN_ARGS);
