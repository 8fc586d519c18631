/* Kernel arguments set by kind (the kinds of cl/common/kernel_args.clh):
 * SET_ONE, expanded over an argument list's X-macro, sets each field of
 * the struct `a` points to at *index and advances it, with `kernel`,
 * `index`, `fp64` and `err` in scope; the first failure is kept. The
 * forward's base list (paths/launch.c) and the variant list
 * (problem/variants.c) are set through it. */
#ifndef FLASHCL_ARG_SETTERS_H
#define FLASHCL_ARG_SETTERS_H

#include "core/core.h"

#include <stdbool.h>

static inline cl_int arg_set_mem(cl_kernel k, cl_uint i, const cl_mem *v)
{
    return clSetKernelArg(k, i, sizeof *v, v);
}

/* REAL is float, or double in fp64 kernels. */
static inline cl_int arg_set_real(cl_kernel k, cl_uint i, const double *v,
                                  bool fp64)
{
    const float f = (float)*v;
    return fp64 ? clSetKernelArg(k, i, sizeof *v, v)
                : clSetKernelArg(k, i, sizeof f, &f);
}

#define SET_STORAGE_IN(k, i, v, fp64) arg_set_mem(k, i, v)
#define SET_STORAGE_OUT(k, i, v, fp64) arg_set_mem(k, i, v)
#define SET_FLOAT_OUT(k, i, v, fp64) arg_set_mem(k, i, v)
#define SET_LSE_OUT(k, i, v, fp64) arg_set_mem(k, i, v)
#define SET_FLOAT_IN(k, i, v, fp64) arg_set_mem(k, i, v)
#define SET_UCHAR_IN(k, i, v, fp64) arg_set_mem(k, i, v)
#define SET_BIAS_IN(k, i, v, fp64) arg_set_mem(k, i, v)
#define SET_INT(k, i, v, fp64) clSetKernelArg(k, i, sizeof(cl_int), v)
#define SET_LONG(k, i, v, fp64) clSetKernelArg(k, i, sizeof(cl_long), v)
#define SET_ULONG(k, i, v, fp64) clSetKernelArg(k, i, sizeof(cl_ulong), v)
#define SET_ULONG4(k, i, v, fp64) clSetKernelArg(k, i, sizeof(cl_ulong4), v)
#define SET_REAL(k, i, v, fp64) arg_set_real(k, i, v, fp64)

#define SET_ONE(kind, name)                                                    \
    if (err == CL_SUCCESS)                                                     \
        err = SET_##kind(kernel, *index, &a->name, fp64);                      \
    ++*index;

#endif /* FLASHCL_ARG_SETTERS_H */
