/* Packed batches (FlashAttention's varlen) on the dense forward kernels:
 * which packed calls they compute, and the arguments that follow the
 * forward list (FLASHCL_VARLEN_ARGS of cl/common/kernel_args.clh). Used by
 * the NVIDIA paths and the portable path; the split-KV service keeps its
 * own list. */
#ifndef FLASHCL_PATHS_VARLEN_H
#define FLASHCL_PATHS_VARLEN_H

#include "paths/path.h"

/* A packed batch (varlen) a dense forward kernel computes: packed
 * queries and keys (FlashAttention's varlen call), no cache, split, bias
 * or mask. The split-KV kernels keep the rest. */
bool plan_varlen_dense(const problem *p);
/* A packed prefill the dense kernel of the device's path computes (the
 * portable one off NVIDIA) rather than the split-KV kernels: a dense
 * packed batch the split-KV plan would neither split nor give to its
 * tensor-core decode kernel. */
bool plan_varlen_prefill(const device_caps *caps, const problem *p);
/* The packed batch's arguments after the forward list
 * (FLASHCL_VARLEN_ARGS of cl/common/kernel_args.clh), for a launch. */
typedef struct varlen_args {
    cl_mem cu_q, cu_k;
    cl_ulong4 len_base, len_stride;
    cl_int total_q, total_k;
} varlen_args;
/* The packed batch's arguments from the resolved problem. */
void varlen_args_fill(const problem *p, varlen_args *a);
/* Sets them from kernel argument `index` on (a trailing_args setter). */
cl_int varlen_args_set(cl_kernel kernel, cl_uint index, const void *values);

#endif
