"""flashcl.attention_backward: the gradients of flashcl.attention, NumPy
arrays through the host call, PyOpenCL arrays through the device call with
no copies. Shapes, options and variant tensors are read exactly as
attention reads them (the same helpers), so the backward describes the very
function the forward computed."""
from __future__ import annotations

import ctypes

import numpy as np

from . import _lib
from ._attention import (_Options, _Problem, _apply_views, _device_view,
                         _element_strides, _fa2_names, _in_layout, _is_cl,
                         _tensor_of, _variant_views)
from ._devices import context_for, context_for_queue
from ._errors import (DtypeUnsupportedError, InvalidDimensionError,
                      InvalidLayoutError, InvalidValueError, NullArgumentError,
                      OutOfMemoryError)


class _Shapes:
    """The shapes of the backward's extra inputs and of its outputs."""

    def __init__(self, p: _Problem):
        lay = p.layout
        self.o = p.o_shape
        self.lse = p.lse_shape
        self.dq = _in_layout(p.batch, p.heads_q, p.seqlen_q, p.head_dim, lay)
        self.dk = _in_layout(p.batch, p.heads_kv, p.seqlen_k, p.head_dim, lay)
        self.dv = _in_layout(p.batch, p.heads_kv, p.seqlen_k, p.head_dim_v,
                             lay)
        self.dsinks = (p.heads_q,)


def _check_like(name, x, shape, dtype):
    if x is None:
        raise NullArgumentError(f"{name} is None")
    if tuple(x.shape) != tuple(shape):
        raise InvalidDimensionError(
            f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")
    if np.dtype(x.dtype) != np.dtype(dtype):
        raise DtypeUnsupportedError(
            f"{name} has dtype {x.dtype}, expected {np.dtype(dtype)}")


def _flag(name, value):
    if value not in (0, 1) or not isinstance(value, (bool, int, np.bool_)):
        raise InvalidValueError(f"{name} = {value!r}: expected True or False")
    return int(value)


def _check_outs(out, shapes, dtype, want_dsinks, array_type, kind):
    """A caller's out=(dq, dk, dv[, dsinks]): the inputs' array kind, the
    gradients' shapes and dtypes."""
    names = ["dq", "dk", "dv"] + (["dsinks"] if want_dsinks else [])
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        raise InvalidValueError(
            f"out: expected a tuple ({', '.join(names)}) of {kind} arrays")
    for name, x in zip(names, out):
        if not isinstance(x, array_type):
            raise InvalidValueError(f"out {name} is {type(x).__name__}: "
                                    f"{kind} inputs take {kind} out arrays")
        want = np.float32 if name == "dsinks" else dtype
        _check_like(f"out {name}", x, getattr(shapes, name), want)
    return list(out)


# ---- the host path (NumPy) -------------------------------------------------

def _packed_out(name, x):
    if not x.flags.c_contiguous or not x.flags.writeable:
        raise InvalidLayoutError(
            f"out {name} must be a writeable C-contiguous array (the host "
            f"call writes it packed)")
    return x


def _host(ins, opts, extras, device, out, want_dsinks):
    q, k, v, o, lse, do = (None if x is None else np.asarray(x) for x in ins)
    p = _Problem(q, k, v, opts.layout)
    shapes = _Shapes(p)
    for name, x in (("o", o), ("do", do)):
        _check_like(name, x, shapes.o, p.dtype)
    if lse is None:
        raise NullArgumentError("lse is None (attention(..., "
                                "return_lse=True) returns it)")
    _check_like("lse", lse, shapes.lse, lse.dtype)
    desc = p.desc(opts)
    ctx = context_for(device)
    q, k, v, o, do = (np.ascontiguousarray(x) for x in (q, k, v, o, do))
    lse = np.ascontiguousarray(lse, np.float32)
    if out is None:
        grads = [np.empty(shapes.dq, p.dtype), np.empty(shapes.dk, p.dtype),
                 np.empty(shapes.dv, p.dtype)]
        if want_dsinks:
            grads.append(np.empty(shapes.dsinks, np.float32))
    else:
        grads = _check_outs(out, shapes, p.dtype, want_dsinks, np.ndarray,
                            "NumPy")
        names = ("dq", "dk", "dv", "dsinks")
        grads = [_packed_out(n, x) for n, x in zip(names, grads)]

    buffers = []

    def upload(name, x, dtype):
        if _is_cl(x):
            raise InvalidValueError(f"{name} is a PyOpenCL array but q, k, v "
                                    f"are NumPy arrays")
        arr = np.ascontiguousarray(np.asarray(x, dtype))
        err = ctypes.c_int(0)
        flags = _lib.CL_MEM_READ_ONLY
        if arr.nbytes:
            flags |= _lib.CL_MEM_COPY_HOST_PTR
        mem = _lib.clCreateBuffer(ctx.cl_context, flags, arr.nbytes or 16,
                                  arr.ctypes.data if arr.nbytes else None,
                                  ctypes.byref(err))
        if err.value != 0 or not mem:
            raise OutOfMemoryError(f"clCreateBuffer for {name} "
                                   f"({arr.nbytes} bytes) failed: {err.value}")
        buffers.append(mem)
        return mem, 0, [s // arr.itemsize for s in arr.strides]

    try:
        _apply_views(desc, _variant_views(p, *extras, upload))
        dsinks = grads[3].ctypes.data if want_dsinks else None
        status = _lib.attention_backward_host(
            ctx.handle, ctypes.byref(desc), q.ctypes.data, k.ctypes.data,
            v.ctypes.data, o.ctypes.data, lse.ctypes.data, do.ctypes.data,
            grads[0].ctypes.data, grads[1].ctypes.data, grads[2].ctypes.data,
            dsinks)
        ctx.check(status)
    finally:
        for mem in buffers:  # the host call has finished on the device
            _lib.clReleaseMemObject(mem)
    return grads, None


# ---- the device path (PyOpenCL), no copies ----------------------------------

def _lse_tensor(lse):
    st = _element_strides("lse", lse)
    # stride_dim 1: the unit last axis, so that a single-element LSE's
    # all-zero strides are not read as "packed".
    return _lib.Tensor(lse.base_data.int_ptr, lse.offset, *st, 1)


def _dsinks_tensor(x):
    st = _element_strides("dsinks", x)
    return _lib.Tensor(x.base_data.int_ptr, x.offset, 0, st[0] or 1, 0, 0)


def _device_arrays(ins):
    import pyopencl.array as cla

    for name, x in zip(("q", "k", "v", "o", "lse", "do"), ins):
        if x is None:
            raise NullArgumentError(
                f"{name} is None" + (" (attention(..., return_lse=True) "
                                     "returns it)" if name == "lse" else ""))
        if not isinstance(x, cla.Array):
            raise InvalidValueError(
                f"{name} is {type(x).__name__} but q is a PyOpenCL array: "
                f"q, k, v, o, lse and do must all be NumPy arrays or all "
                f"PyOpenCL arrays")


def _empty_grads(queue, shapes, dtype, want_dsinks, wait):
    """An empty problem: nothing to enqueue, the gradients are zero (a sum
    over no rows or no keys)."""
    import pyopencl as cl
    import pyopencl.array as cla

    grads = [cla.zeros(queue, s, dtype)
             for s in (shapes.dq, shapes.dk, shapes.dv)]
    if want_dsinks:
        grads.append(cla.zeros(queue, shapes.dsinks, np.float32))
    return grads, cl.enqueue_marker(queue, wait_for=wait or None)


def _device(ins, opts, extras, device, out, want_dsinks, nondeterministic,
            wait_for):
    import pyopencl as cl
    import pyopencl.array as cla

    _device_arrays(ins)
    q, k, v, o, lse, do = ins
    if device is not None:
        raise InvalidValueError(
            "device= selects the device for NumPy inputs; PyOpenCL arrays "
            "run on their queue's device (q.queue)")
    queue = q.queue
    if queue is None:
        raise InvalidValueError("q has no queue (q.queue is None): give the "
                                "array a queue (q.with_queue(queue))")
    p = _Problem(q, k, v, opts.layout)
    shapes = _Shapes(p)
    for name, x in (("o", o), ("do", do)):
        _check_like(name, x, shapes.o, p.dtype)
    if p.dtype == np.float64 and np.dtype(lse.dtype) == np.float64:
        # a float64 forward's float64 lse; the backward reads float32
        _check_like("lse", lse, shapes.lse, np.float64)
        lse = lse.astype(np.float32, queue=queue)
        ins = (q, k, v, o, lse, do)
    _check_like("lse", lse, shapes.lse, np.float32)
    desc = p.desc(opts)
    ctx = context_for_queue(queue)
    events = list(wait_for or [])
    for x in ins:
        events.extend(x.events)
    if out is not None:
        grads = _check_outs(out, shapes, p.dtype, want_dsinks, cla.Array,
                            "PyOpenCL")
        for x in grads:
            events.extend(x.events)
    if q.size == 0 or k.size == 0 or v.size == 0:
        if out is not None:  # the caller's arrays get the zeros
            zeros, event = _empty_grads(queue, shapes, p.dtype, want_dsinks,
                                        events)
            for dst, src in zip(grads, zeros):
                dst.set(src.get())
            return grads, event
        return _empty_grads(queue, shapes, p.dtype, want_dsinks, events)
    if out is None:
        grads = [cla.empty(queue, s, p.dtype)
                 for s in (shapes.dq, shapes.dk, shapes.dv)]
        if want_dsinks:
            grads.append(cla.empty(queue, shapes.dsinks, np.float32))

    keep = []  # NumPy variant tensors uploaded for this call

    def view(name, x, dtype):
        return _device_view(queue, events, keep, name, x, dtype)

    lay = opts.layout
    desc.q, desc.k, desc.v = (_tensor_of(n, x, lay)
                              for n, x in (("q", q), ("k", k), ("v", v)))
    desc.o = _tensor_of("o", o, lay)
    desc.lse = _lse_tensor(lse)
    _apply_views(desc, _variant_views(p, *extras, view))
    bwd = _lib.BackwardDesc()
    bwd.struct_size = ctypes.sizeof(_lib.BackwardDesc)
    bwd.d_o = _tensor_of("do", do, lay)
    bwd.d_q, bwd.d_k, bwd.d_v = (
        _tensor_of(n, x, lay) for n, x in zip(("dq", "dk", "dv"), grads))
    if want_dsinks:
        bwd.d_sinks = _dsinks_tensor(grads[3])
    bwd.nondeterministic = nondeterministic

    seen, wait = set(), []
    for e in events:
        if e.int_ptr not in seen:
            seen.add(e.int_ptr)
            wait.append(e.int_ptr)
    wait_list = (ctypes.c_void_p * len(wait))(*wait) if wait else None
    raw = ctypes.c_void_p()
    status = _lib.attention_backward(ctx.handle, queue.int_ptr,
                                     ctypes.byref(desc), ctypes.byref(bwd),
                                     len(wait), wait_list, ctypes.byref(raw))
    ctx.check(status)
    event = cl.Event.from_int_ptr(raw.value, retain=False)
    for x in grads:
        x.add_event(event)
    del keep  # released buffers live until the kernels are done (OpenCL)
    return grads, event


# ---- the public call -------------------------------------------------------

def attention_backward(q, k, v, o, lse, do, *, causal=False,
                       causal_align="bottom_right", scale=None, window=None,
                       softcap=0.0, alibi_slopes=None, bias=None, mask=None,
                       sinks=None, layout="bnhd", device=None,
                       backend="auto", out=None, wait_for=None,
                       return_event=False, softmax_scale=None,
                       window_size=None, nondeterministic=False,
                       return_dsinks=False, cu_seqlens_q=None,
                       cu_seqlens_k=None, max_seqlen_q=None,
                       max_seqlen_k=None, positions=None):
    """Gradients of :func:`attention`: ``(dq, dk, dv)``, or ``(dq, dk, dv,
    dsinks)`` with ``return_dsinks``.

    q, k, v and every keyword that shapes the function (causal,
    causal_align, scale/softmax_scale, window/window_size, softcap,
    alibi_slopes, bias, mask, sinks, layout) must be those of the forward
    call, and so must positions (with ``causal_align="absolute"``); o and
    lse are its outputs (``attention(..., return_lse=True)``,
    or any O and LSE of the same function, such as ones merged by
    :func:`combine_partials`) and do is the loss's gradient with respect to
    o (o's shape and dtype). lse is float32 ``[batch, heads_q, seqlen_q]``
    (NumPy: another float dtype is converted; a float64 call's float64
    lse, as its forward returns it, is converted to the float32 the
    library's backward reads, PyOpenCL ones on the queue).

    dq, dk, dv have q's, k's and v's shapes and dtype (GQA/MQA: dk and dv
    are summed over each KV head's query heads); dsinks is float32
    ``[heads_q]`` and needs ``sinks``. ALiBi, bias and mask are constants
    (no gradient). The result is bitwise reproducible:
    ``nondeterministic=True`` lets a path trade that for speed (none does
    yet; the NumPy host call ignores it). ``backend="reference"`` computes
    it with CLBlast GEMMs instead of the fused kernels.

    NumPy inputs run through ``flashcl_attention_backward_host`` on
    ``device``'s cached context; PyOpenCL arrays (all six) run through
    ``flashcl_attention_backward`` on ``q.queue`` with no copies, after
    their events and ``wait_for``. out: a tuple ``(dq, dk, dv[, dsinks])``
    of arrays to write (NumPy: C-contiguous). return_event: the call's
    pyopencl.Event last in the result. Raises a :class:`flashcl.Error`
    subclass carrying the status and the library's message; on an error
    nothing is written.

    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k: the gradients
    of :func:`attention_varlen` instead (packed ``[total, heads, dim]``
    arrays, lse ``[heads_q, total_q]``), through
    :func:`attention_varlen_backward`; bias, mask and layout are not taken
    there.
    """
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        if positions is not None:
            raise InvalidValueError(
                "positions with cu_seqlens: absolute positions serve dense "
                "calls only (not yet packed batches)")
        if bias is not None or mask is not None or layout != "bnhd":
            raise InvalidValueError(
                "cu_seqlens: bias, mask and layout are not taken with a "
                "packed (varlen) batch (attention_varlen's keywords)")
        from ._inference import attention_varlen_backward
        return attention_varlen_backward(
            q, k, v, o, lse, do, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
            max_seqlen_k, causal=causal, causal_align=causal_align,
            scale=scale, window=window, softcap=softcap,
            alibi_slopes=alibi_slopes, sinks=sinks, device=device,
            backend=backend, out=out, wait_for=wait_for,
            return_event=return_event, softmax_scale=softmax_scale,
            window_size=window_size, nondeterministic=nondeterministic,
            return_dsinks=return_dsinks)
    scale, window = _fa2_names(scale, softmax_scale, window, window_size)
    opts = _Options(layout, causal, causal_align, scale, window, softcap,
                    backend, positions)
    extras = (alibi_slopes, bias, mask, sinks)
    want_dsinks = bool(_flag("return_dsinks", return_dsinks))
    nondet = _flag("nondeterministic", nondeterministic)
    ins = (q, k, v, o, lse, do)
    if _is_cl(q):
        grads, event = _device(ins, opts, extras, device, out, want_dsinks,
                               nondet, wait_for)
    else:
        for name, x in zip(("k", "v", "o", "lse", "do"), ins[1:]):
            if _is_cl(x):
                raise InvalidValueError(
                    f"{name} is a PyOpenCL array but q is not: q, k, v, o, "
                    f"lse and do must all be NumPy arrays or all PyOpenCL "
                    f"arrays")
        if wait_for:
            raise InvalidValueError("wait_for is for PyOpenCL inputs")
        grads, event = _host(ins, opts, extras, device, out, want_dsinks)
    result = tuple(grads)
    if return_event:
        result += (event,)
    return result
