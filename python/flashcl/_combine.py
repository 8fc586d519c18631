"""flashcl.combine_partials: flashcl_combine_partials (include/flashcl.h)
for NumPy and PyOpenCL arrays, merging attention results computed over
disjoint key ranges by their LSEs."""
from __future__ import annotations

import ctypes

import numpy as np

from . import _lib
from ._attention import _AXES, _ORDER, _LAYOUTS, _dtype_code, _element_strides
from ._errors import (DtypeUnsupportedError, InvalidDimensionError,
                      InvalidLayoutError)
from ._inference import _Call, _dims, _finish, _inputs


def _out_dtype(dtype):
    dt = np.dtype(np.float32 if dtype is None else dtype)
    code = _dtype_code(dt)
    if code is None:
        raise DtypeUnsupportedError(
            f"dtype = {dt}: the merged output is float32, float16, bfloat16 "
            f"(ml_dtypes) or float64")
    return dt, code


def _partials_fp32(name, x, cl_mode, sixteen_bit=False):
    """The library reads fp32 partials, and o_partial also in float16 or
    bfloat16 (sixteen_bit): NumPy ones of another float dtype are converted
    (the upload copies them anyway); PyOpenCL ones are used in place, so
    they must have a dtype the library reads."""
    dt = np.dtype(x.dtype)
    code = _dtype_code(dt)
    if dt == np.float32 or (sixteen_bit and code in (1, 2)):
        return x
    if cl_mode or code is None:
        kinds = "fp32, fp16 or bf16" if sixteen_bit else "fp32"
        converted = "" if cl_mode else (
            "; NumPy partials of another float dtype are converted")
        raise DtypeUnsupportedError(
            f"{name} has dtype {dt}: the library reads {kinds} "
            f"partials{converted}")
    return x.astype(np.float32)


def _partials_fp64(name, x, cl_mode):
    """A float64 merge's partials (o_partial and lse_partial) are float64:
    NumPy ones of another float dtype are converted; PyOpenCL ones are
    used in place, so they must be float64 already."""
    dt = np.dtype(x.dtype)
    if dt == np.float64:
        return x
    if cl_mode or _dtype_code(dt) is None:
        converted = "" if cl_mode else (
            "; NumPy partials of another float dtype are converted")
        raise DtypeUnsupportedError(
            f"{name} has dtype {dt}: a float64 merge (dtype float64 with "
            f"float64 partials) reads float64 o_partial and lse_partial"
            f"{converted}")
    return x.astype(np.float64)


def combine_partials(o_partial, lse_partial, *, dtype=None, layout="bnhd",
                     return_lse=False, device=None, out=None, wait_for=None,
                     return_event=False):
    """Merges P attention results of the same queries over disjoint key
    ranges (chunked prefill, ring or context-parallel attention, a shared
    prefix and a per-sequence suffix), each normalised over its own keys,
    into the result over all keys::

        m = max_p lse_p,  w_p = exp(lse_p - m),
        o = sum_p w_p o_p / sum_p w_p,  lse = m + log(sum_p w_p)

    o_partial: float32 ``[P, batch, seqlen_q, heads, head_dim_v]``
    (``layout="bnhd"``) or ``[P, batch, heads, seqlen_q, head_dim_v]``
    (``"bhnd"``); lse_partial: float32 ``[P, batch, heads, seqlen_q]``,
    natural logarithms as :func:`attention` returns them (return_lse=True).
    o_partial may also be float16 or bfloat16 (as a 16-bit
    :func:`attention` returns o; the merge still sums in float32).
    With ``dtype=float64`` and float64 partials (o_partial or lse_partial
    float64, as a float64 :func:`attention` returns them), the merge reads
    both as float64, sums in float64 and returns a float64 lse: float64
    accuracy end to end (a float32 LSE carries ~1e-7 relative rounding
    into every weight).
    NumPy partials may be a list of P arrays, and of another float dtype
    (converted to float32, or to float64 for a float64 merge); PyOpenCL
    ones are used in place (any strides).
    A partial whose row saw no key (lse = -inf) weighs nothing; a row with
    no key at all gets o = 0 and lse = -inf.
    dtype: the output's (float32 by default; float16, ml_dtypes.bfloat16
    or float64). device, out, wait_for, return_event as for
    :func:`attention`.

    Returns o ``[batch, seqlen_q, heads, head_dim_v]`` (in ``layout``), or
    (o, lse) with return_lse, lse float32 ``[batch, heads, seqlen_q]``
    (float64 for a float64 merge).
    """
    if layout not in _LAYOUTS:
        raise InvalidLayoutError(f"layout = {layout!r}: expected 'bnhd' or "
                                 f"'bhnd'")
    cl_mode, (o_part, lse_part) = _inputs(wait_for, o_partial, lse_partial)
    order = _ORDER[layout].replace("[batch", "[P, batch").replace(
        "dim]", "head_dim_v]")
    p, *rest = _dims("o_partial", o_part, 5, order)
    axes = _AXES[layout]
    b, h, n, dv = (rest[i] for i in axes)
    lse_shape = _dims("lse_partial", lse_part, 4,
                      "[P, batch, heads, seqlen_q]")
    if lse_shape != (p, b, h, n):
        raise InvalidDimensionError(
            f"lse_partial has shape {lse_shape}, expected [P, batch, heads, "
            f"seqlen_q] = {[p, b, h, n]} (from o_partial)")
    out_dt, code = _out_dtype(dtype)
    fp64 = code == _lib.DTYPE_FP64 and any(
        np.dtype(x.dtype) == np.float64 for x in (o_part, lse_part))
    if fp64:
        o_part, lse_part = (_partials_fp64(name, x, cl_mode) for name, x in
                            (("o_partial", o_part), ("lse_partial", lse_part)))
    else:
        o_part = _partials_fp32("o_partial", o_part, cl_mode,
                                sixteen_bit=True)
        lse_part = _partials_fp32("lse_partial", lse_part, cl_mode)

    desc = _lib.CombineDesc()  # ctypes zero-fills
    desc.struct_size = ctypes.sizeof(_lib.CombineDesc)
    desc.num_partials, desc.batch, desc.heads = p, b, h
    desc.seqlen_q, desc.head_dim_v = n, dv
    desc.dtype, desc.layout = code, _LAYOUTS[layout]
    desc.partial_dtype = _dtype_code(np.dtype(o_part.dtype))
    lse_dt = np.float64 if fp64 else np.float32
    if fp64:
        desc.lse_dtype = _lib.DTYPE_FP64

    steps = {}

    def partial_strides(name, view):
        """Element strides [P, ...] -> the partial step and the (batch,
        head, seq, dim) strides; a zero step would read as packed."""
        def strides_of(st):
            if st[0] == 0 and p > 1:
                raise InvalidLayoutError(
                    f"{name} has stride 0 across its {p} partials (a "
                    f"broadcast): flashcl reads 0 as packed")
            steps[name] = st[0]
            return view(st[1:])
        return strides_of

    def o_order(st):  # array axes -> (batch, head, seq, dim)
        return tuple(st[i] for i in axes)

    call = _Call(cl_mode, device, o_part)
    try:
        desc.o_partial = call.tensor(
            "o_partial", o_part, partial_strides("o_partial", o_order))
        desc.lse_partial = call.tensor(
            "lse_partial", lse_part,
            partial_strides("lse_partial", lambda st: (*st, 0)))
        desc.o_partial_stride = steps["o_partial"]
        desc.lse_partial_stride = steps["lse_partial"]
        o_shape = tuple((b, h, n, dv)[axes.index(i)] for i in range(4))
        o, desc.o = call.output("out", o_shape, out_dt, out)
        desc.o.stride_batch, desc.o.stride_head, desc.o.stride_seq, \
            desc.o.stride_dim = o_order(_element_strides("out", o))
        lse = None
        if return_lse:
            lse, desc.lse = call.output("lse", (b, h, n), lse_dt, None)
        call.events.extend(wait_for or [])
        event = call.run(desc, _lib.combine_partials)
    finally:
        call.release()
    return _finish(o, lse, event, return_lse, return_event)
