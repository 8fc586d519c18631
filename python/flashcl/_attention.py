"""flashcl.attention: NumPy arrays through the host call, PyOpenCL arrays
through the device call with no copies."""
from __future__ import annotations

import ctypes
import numbers
import os
import sys

import numpy as np

from . import _lib
from ._devices import context_for, context_for_queue
from ._errors import (DtypeUnsupportedError, Error, InvalidDimensionError,
                      InvalidLayoutError, InvalidValueError, NullArgumentError,
                      OutOfMemoryError, error_for)

_LAYOUTS = {"bnhd": _lib.LAYOUT_BNHD, "bhnd": _lib.LAYOUT_BHND}
# Position of (batch, head, seq, dim) among an array's four axes.
_AXES = {"bnhd": (0, 2, 1, 3), "bhnd": (0, 1, 2, 3)}
_ORDER = {"bnhd": "[batch, seq, heads, dim]", "bhnd": "[batch, heads, seq, dim]"}
_ALIGN = {"bottom_right": _lib.CAUSAL_BOTTOM_RIGHT,
          "top_left": _lib.CAUSAL_TOP_LEFT,
          "absolute": _lib.CAUSAL_ABSOLUTE}
_BACKENDS = {"auto": _lib.BACKEND_AUTO, "fused": _lib.BACKEND_FUSED,
             "reference": _lib.BACKEND_REFERENCE}


def _dtype_code(dt):
    dt = np.dtype(dt)
    if dt == np.float32:
        return _lib.DTYPE_FP32
    if dt == np.float16:
        return _lib.DTYPE_FP16
    if dt == np.float64:
        return _lib.DTYPE_FP64
    if dt.name == "bfloat16":  # ml_dtypes.bfloat16
        return _lib.DTYPE_BF16
    return None


def _cl_array_type():
    """pyopencl.array.Array if the caller has imported pyopencl, else None
    (this package never imports pyopencl for NumPy inputs)."""
    mod = sys.modules.get("pyopencl.array")
    return getattr(mod, "Array", None)


def _is_cl(x):
    cls = _cl_array_type()
    return cls is not None and isinstance(x, cls)


# ---- options shared by both paths ----------------------------------------

class _Options:
    __slots__ = ("layout", "causal", "causal_align", "scale", "window",
                 "softcap", "backend", "positions")

    def __init__(self, layout, causal, causal_align, scale, window, softcap,
                 backend, positions=None):
        if layout not in _LAYOUTS:
            raise InvalidLayoutError(
                f"layout = {layout!r}: expected 'bnhd' ([batch, seq, heads, "
                f"dim], flash_attn_func's) or 'bhnd' ([batch, heads, seq, "
                f"dim], SDPA's)")
        self.layout = layout
        self.causal = bool(causal)
        if causal_align not in _ALIGN:
            raise InvalidValueError(
                f"causal_align = {causal_align!r}: expected 'bottom_right' "
                f"(FlashAttention's, the default), 'top_left' (SDPA's "
                f"is_causal) or 'absolute' (with positions)")
        self.causal_align = _ALIGN[causal_align]
        self.positions = _int_pair(
            (0, 0) if positions is None else positions,
            f"positions = {positions!r}: expected (q_position, k_position) "
            f"integers, the first query row's and first key's positions in "
            f"the whole sequence (with causal_align='absolute')")
        if scale is not None:
            if not isinstance(scale, numbers.Real) or isinstance(scale, bool):
                raise InvalidValueError(f"scale = {scale!r}: expected a real "
                                        f"number or None (1/sqrt(head_dim))")
            scale = float(scale)
        self.scale = scale
        self.window = _int_pair(
            (-1, -1) if window is None else window,
            f"window = {window!r}: expected (left, right) integers, -1 for "
            f"unbounded; (-1, -1) means no window")
        if not isinstance(softcap, numbers.Real) or isinstance(softcap, bool):
            raise InvalidValueError(f"softcap = {softcap!r}: expected a real "
                                    f"number (0: off)")
        self.softcap = float(softcap)
        if backend is None:
            backend = "auto"
        if backend not in _BACKENDS:
            raise InvalidValueError(
                f"backend = {backend!r}: expected 'auto', 'fused' or "
                f"'reference'")
        self.backend = _BACKENDS[backend]

    def apply(self, d):
        """Writes these options into descriptor d."""
        if self.scale is not None:  # explicit: 0.0 means exactly zero
            d.scale = self.scale
            d.explicit_scale = 1
        d.causal = int(self.causal)
        d.causal_align = self.causal_align
        d.q_position, d.k_position = self.positions
        d.backend = self.backend
        if self.window != (-1, -1):
            d.window = 1
            d.window_left, d.window_right = self.window
        d.softcap = self.softcap


def _int_pair(value, complaint):
    """value as a pair of ints (bools refused), else InvalidValueError."""
    try:
        a, b = value
        ok = all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                 for x in (a, b))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InvalidValueError(complaint)
    return (int(a), int(b))


def _lse_fp64(dtype_code, backend):
    """Whether a call of this dtype on this backend writes a float64 LSE:
    a float64 call on the fused backend does (the descriptor's lse_dtype
    FLASHCL_DTYPE_FP64, stored by the portable kernel), so that partial
    results merged by their LSEs (:func:`combine_partials`, flashcl.cp's
    ring) keep float64 accuracy. The reference backend writes a float32
    LSE only (the library refuses an fp64 one there), and so do the other
    dtypes, which accumulate in float32. backend: the _BACKENDS code;
    "auto" resolves as the library resolves it (FLASHCL_BACKEND)."""
    if dtype_code != _lib.DTYPE_FP64:
        return False
    if backend == _lib.BACKEND_AUTO:
        return os.environ.get("FLASHCL_BACKEND", "") != "reference"
    return backend == _lib.BACKEND_FUSED


def _bhsd(name, shape, layout):
    if len(shape) != 4:
        raise InvalidDimensionError(
            f"{name} has shape {tuple(shape)} ({len(shape)}-D): expected a "
            f"4-D {_ORDER[layout]} array (layout={layout!r})")
    a = _AXES[layout]
    return tuple(int(shape[i]) for i in a)


def _in_layout(b, h, s, d, layout):
    return (b, s, h, d) if layout == "bnhd" else (b, h, s, d)


class _Problem:
    """Shapes read off q, k, v, checked against each other where a
    descriptor could not say so (the library checks the rest)."""

    def __init__(self, q, k, v, layout):
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x is None:
                raise NullArgumentError(f"{name} is None")
        bq, hq, nq, d = _bhsd("q", q.shape, layout)
        bk, hk, nk, dk = _bhsd("k", k.shape, layout)
        bv, hv, nv, dv = _bhsd("v", v.shape, layout)
        order = _ORDER[layout]
        for name, b in (("k", bk), ("v", bv)):
            if b != bq:
                raise InvalidDimensionError(
                    f"{name} has batch {b} but q has batch {bq} "
                    f"(layout {layout!r}: {order})")
        if dk != d:
            raise InvalidDimensionError(
                f"k has head_dim {dk} but q has head_dim {d}: q and k share "
                f"the last axis (layout {layout!r}: {order})")
        if nv != nk:
            raise InvalidDimensionError(
                f"v has seqlen {nv} but k has seqlen {nk} "
                f"(layout {layout!r}: {order})")
        if hv != hk:
            raise InvalidDimensionError(
                f"v has {hv} heads but k has {hk}: k and v share heads_kv "
                f"(layout {layout!r}: {order})")
        dtypes = [np.dtype(x.dtype) for x in (q, k, v)]
        if not dtypes[0] == dtypes[1] == dtypes[2]:
            raise DtypeUnsupportedError(
                f"q, k, v have dtypes {dtypes[0]}, {dtypes[1]}, {dtypes[2]}: "
                f"they must share one dtype")
        code = _dtype_code(dtypes[0])
        if code is None:
            raise DtypeUnsupportedError(
                f"dtype {dtypes[0]}: flashcl takes float32, float16, "
                f"bfloat16 (ml_dtypes) and float64")
        self.dtype = dtypes[0]
        self.dtype_code = code
        self.batch, self.heads_q, self.heads_kv = bq, hq, hk
        self.seqlen_q, self.seqlen_k = nq, nk
        self.head_dim, self.head_dim_v = d, dv
        self.layout = layout
        self.o_shape = _in_layout(bq, hq, nq, dv, layout)
        self.lse_shape = (bq, hq, nq)

    def desc(self, opts: _Options) -> _lib.AttentionDesc:
        d = _lib.AttentionDesc()  # ctypes zero-fills
        # struct_size is the size of the struct *we* pass (never the
        # library's flashcl_attention_desc_init, which would write a newer
        # library's larger struct past ours).
        d.struct_size = ctypes.sizeof(_lib.AttentionDesc)
        d.batch, d.heads_q, d.heads_kv = self.batch, self.heads_q, self.heads_kv
        d.seqlen_q, d.seqlen_k = self.seqlen_q, self.seqlen_k
        d.head_dim, d.head_dim_v = self.head_dim, self.head_dim_v
        d.dtype = self.dtype_code
        d.layout = _LAYOUTS[self.layout]
        opts.apply(d)
        return d


# ---- variant tensors -----------------------------------------------------

def _score_shape(name, x_shape, p):
    """bias/mask: 2..4-D broadcastable to [batch, heads_q, seqlen_q,
    seqlen_k]; returns the 4-D shape (leading 1s added)."""
    target = (p.batch, p.heads_q, p.seqlen_q, p.seqlen_k)
    shape = tuple(int(s) for s in x_shape)
    if not 1 <= len(shape) <= 4:
        raise InvalidDimensionError(
            f"{name} has shape {shape}: expected up to 4-D, broadcastable to "
            f"[batch, heads_q, seqlen_q, seqlen_k] = {list(target)}")
    shape = (1,) * (4 - len(shape)) + shape
    for have, want in zip(shape, target):
        if have not in (1, want):
            raise InvalidDimensionError(
                f"{name} has shape {tuple(int(s) for s in x_shape)}: not "
                f"broadcastable to [batch, heads_q, seqlen_q, seqlen_k] = "
                f"{list(target)}")
    return shape


def _vector_shape(name, x_shape, p, allow_batch):
    shape = tuple(int(s) for s in x_shape)
    if shape == (p.heads_q,):
        return shape
    if allow_batch and shape == (p.batch, p.heads_q):
        return shape
    want = f"[heads_q] = [{p.heads_q}]"
    if allow_batch:
        want += f" or [batch, heads_q] = [{p.batch}, {p.heads_q}]"
    raise InvalidDimensionError(f"{name} has shape {shape}: expected {want}")


def _element_strides(name, x):
    item = np.dtype(x.dtype).itemsize
    out = []
    for s in x.strides:
        if s < 0 or s % item:
            raise InvalidLayoutError(
                f"{name} has byte strides {tuple(x.strides)}: flashcl takes "
                f"non-negative strides that are whole elements "
                f"({item} bytes)")
        out.append(s // item)
    return out


def _variant_views(p, alibi_slopes, bias, mask, sinks, to_buffer):
    """Fill the variant tensors. `to_buffer(name, array, dtype)` returns
    (cl_mem, byte offset, element strides) for an array (uploading NumPy
    arrays, converting where allowed). Returns [(field, Tensor, extra)]."""
    views = {}
    if alibi_slopes is not None:
        shape = _vector_shape("alibi_slopes", np.shape(alibi_slopes), p, True)
        mem, off, st = to_buffer("alibi_slopes", alibi_slopes, np.float32)
        t = _lib.Tensor(mem, off)
        if len(shape) == 1:
            t.stride_batch, t.stride_head = 0, st[0] or 1
        else:
            t.stride_batch = st[0] if shape[0] > 1 else 0
            t.stride_head = st[1] if shape[1] > 1 else 1
            if t.stride_batch == 0 and t.stride_head == 0:
                t.stride_head = 1
        views["alibi_slopes"] = t
    if sinks is not None:
        _vector_shape("sinks", np.shape(sinks), p, False)
        mem, off, st = to_buffer("sinks", sinks, np.float32)
        views["sinks"] = _lib.Tensor(mem, off, 0, st[0] or 1, 0, 0)
    for name, x in (("bias", bias), ("mask", mask)):
        if x is None:
            continue
        shape = _score_shape(name, np.shape(x), p)
        if name == "mask":
            dt = np.dtype(x.dtype)
            if dt not in (np.dtype(np.bool_), np.dtype(np.uint8)):
                raise DtypeUnsupportedError(
                    f"mask has dtype {dt}: expected bool or uint8 (non-zero ="
                    f" attend); an additive float mask goes in bias=")
            want = None  # bool and uint8 share the byte encoding
        else:
            dt = np.dtype(x.dtype)
            code = _dtype_code(dt)
            if code not in (_lib.DTYPE_FP32, _lib.DTYPE_FP16,
                            _lib.DTYPE_BF16, _lib.DTYPE_FP64):
                raise DtypeUnsupportedError(
                    f"bias has dtype {dt}: expected float32, float16 or "
                    f"bfloat16 (a boolean mask goes in mask=)")
            want = np.float32 if code == _lib.DTYPE_FP64 else None
        mem, off, st = to_buffer(name, x, want)
        st = [0] * (4 - len(st)) + list(st)
        st = [0 if n == 1 else s for n, s in zip(shape, st)]
        views[name] = _lib.Tensor(mem, off, *st)
        if name == "bias":
            views["bias_dtype"] = _dtype_code(
                np.dtype(want) if want is not None else dt)
    return views


def _apply_views(desc, views):
    for field, value in views.items():
        setattr(desc, field, value)


# ---- the host path (NumPy) -------------------------------------------------

def _check_out(out, p, array_type, kind):
    """A caller's `out`: the inputs' array kind, O's shape and dtype."""
    if not isinstance(out, array_type):
        raise InvalidValueError(f"out is {type(out).__name__}: {kind} "
                                f"inputs take a {kind} out array")
    if tuple(out.shape) != p.o_shape:
        raise InvalidDimensionError(
            f"out has shape {tuple(out.shape)}, expected {p.o_shape}")
    if out.dtype != p.dtype:
        raise DtypeUnsupportedError(
            f"out has dtype {out.dtype}, expected {p.dtype}")


def _host(q, k, v, opts, extras, device, out, return_lse):
    q, k, v = (None if x is None else np.asarray(x) for x in (q, k, v))
    p = _Problem(q, k, v, opts.layout)
    desc = p.desc(opts)
    ctx = context_for(device)
    q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
    if out is None:
        o = np.empty(p.o_shape, p.dtype)
    else:
        _check_out(out, p, np.ndarray, "NumPy")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise InvalidLayoutError(
                "out must be a writeable C-contiguous array (the host call "
                "writes it packed)")
        o = out
    if return_lse and _lse_fp64(p.dtype_code, opts.backend):
        # the host call's lse is a float *: a float64 LSE comes through
        # the enqueueing call, on buffers of the context (_Call)
        return _host_fp64_lse(p, desc, device, q, k, v, o, extras)
    lse = np.empty(p.lse_shape, np.float32) if return_lse else None

    buffers = []

    def upload(name, x, dtype):
        if _is_cl(x):
            raise InvalidValueError(f"{name} is a PyOpenCL array but q, k, v "
                                    f"are NumPy arrays")
        arr = np.asarray(x)
        if dtype is not None and arr.dtype != dtype:
            arr = arr.astype(dtype)
        arr = np.ascontiguousarray(arr)
        err = ctypes.c_int(0)
        if arr.nbytes:
            mem = _lib.clCreateBuffer(
                ctx.cl_context, _lib.CL_MEM_READ_ONLY | _lib.CL_MEM_COPY_HOST_PTR,
                arr.nbytes, arr.ctypes.data, ctypes.byref(err))
        else:  # OpenCL buffers cannot be empty; nothing reads it
            mem = _lib.clCreateBuffer(ctx.cl_context, _lib.CL_MEM_READ_ONLY,
                                      16, None, ctypes.byref(err))
        if err.value != 0 or not mem:
            raise OutOfMemoryError(f"clCreateBuffer for {name} "
                                   f"({arr.nbytes} bytes) failed: {err.value}")
        buffers.append(mem)
        return mem, 0, [s // arr.itemsize for s in arr.strides]

    try:
        _apply_views(desc, _variant_views(p, *extras, upload))
        status = _lib.attention_forward_host(
            ctx.handle, ctypes.byref(desc), q.ctypes.data, k.ctypes.data,
            v.ctypes.data, o.ctypes.data,
            None if lse is None else lse.ctypes.data)
        ctx.check(status)
    finally:
        for mem in buffers:  # the host call has finished on the device
            _lib.clReleaseMemObject(mem)
    return o, lse, None


def _host_fp64_lse(p, desc, device, q, k, v, o, extras):
    """A float64 NumPy call with its float64 LSE: q, k, v (packed, as the
    host call reads them) and the variant tensors uploaded to buffers of
    `device`'s cached context, flashcl_attention_forward on its queue, o
    and lse read back."""
    from ._inference import _Call  # it imports this module
    call = _Call(False, device, None)
    lse = np.empty(p.lse_shape, np.float64)
    packed = lambda st: (0, 0, 0, 0)  # noqa: E731  (zero: packed in layout)
    try:
        desc.q = call.tensor("q", q, packed)
        desc.k = call.tensor("k", k, packed)
        desc.v = call.tensor("v", v, packed)
        _, desc.o = call.output("out", p.o_shape, p.dtype, o)
        _, desc.lse = call.output("lse", p.lse_shape, np.float64, lse)
        desc.lse_dtype = _lib.DTYPE_FP64
        _apply_views(desc, _variant_views(p, *extras, call.to_buffer))
        call.run(desc)
    finally:
        call.release()
    return o, lse, None


# ---- the device path (PyOpenCL), no copies ----------------------------------

def _tensor_of(name, arr, layout):
    """A flashcl_tensor view of a pyopencl array: its cl_mem, byte offset
    and strides (bytes -> elements), axes reordered to (b, h, s, d)."""
    st = _element_strides(name, arr)
    a = _AXES[layout]
    st = [st[i] for i in a]
    if not any(st):  # all-zero strides would read as "packed"
        if arr.size > 1:
            raise InvalidLayoutError(
                f"{name} has all-zero strides (a broadcast): flashcl reads "
                f"all-zero strides as packed")
        st[3] = 1
    return _lib.Tensor(arr.base_data.int_ptr, arr.offset, *st)


def _device_view(queue, events, keep, name, x, dtype):
    """(buffer pointer, element offset, element strides) of a variant
    tensor for a device call: a PyOpenCL array as it is (its events join
    `events`), anything else uploaded to `queue` (the copy joins `keep`,
    which must outlive the call)."""
    import pyopencl.array as cla
    if isinstance(x, cla.Array):
        if dtype is not None and x.dtype != dtype:
            raise DtypeUnsupportedError(
                f"{name} has dtype {x.dtype}: expected {np.dtype(dtype)}")
        events.extend(x.events)
        return x.base_data.int_ptr, x.offset, _element_strides(name, x)
    arr = np.asarray(x)
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    dev = cla.to_device(queue, np.ascontiguousarray(arr))
    keep.append(dev)
    return dev.base_data.int_ptr, 0, _element_strides(name, dev)


def _device(q, k, v, opts, extras, device, out, return_lse, wait_for):
    import pyopencl as cl
    import pyopencl.array as cla

    for name, x in (("q", q), ("k", k), ("v", v)):
        if x is None:
            raise NullArgumentError(f"{name} is None")
        if not isinstance(x, cla.Array):
            raise InvalidValueError(
                f"{name} is {type(x).__name__} but q is a PyOpenCL array: "
                f"q, k and v must all be NumPy arrays or all PyOpenCL arrays")
    if device is not None:
        raise InvalidValueError(
            "device= selects the device for NumPy inputs; PyOpenCL arrays "
            "run on their queue's device (q.queue)")
    queue = q.queue
    if queue is None:
        raise InvalidValueError("q has no queue (q.queue is None): give the "
                                "array a queue (q.with_queue(queue))")
    p = _Problem(q, k, v, opts.layout)
    desc = p.desc(opts)
    ctx = context_for_queue(queue)

    if out is None:
        o = cla.empty(queue, p.o_shape, p.dtype)
    else:
        _check_out(out, p, cla.Array, "PyOpenCL")
        o = out
    lse_fp64 = return_lse and _lse_fp64(p.dtype_code, opts.backend)
    lse = (cla.empty(queue, p.lse_shape,
                     np.float64 if lse_fp64 else np.float32)
           if return_lse else None)

    events = list(wait_for or [])
    if o.size == 0:  # an empty problem: nothing to compute or enqueue
        event = cl.enqueue_marker(queue, wait_for=events or None)
        return o, lse, event

    keep = []  # NumPy variant tensors uploaded for this call

    def view(name, x, dtype):
        return _device_view(queue, events, keep, name, x, dtype)

    for name, x in (("q", q), ("k", k), ("v", v)):
        events.extend(x.events)
    desc.q = _tensor_of("q", q, opts.layout)
    if p.seqlen_k == 0:  # empty views touch nothing; any cl_mem will do
        desc.k = desc.v = _lib.Tensor(desc.q.buffer, 0)
    else:
        desc.k = _tensor_of("k", k, opts.layout)
        desc.v = _tensor_of("v", v, opts.layout)
    desc.o = _tensor_of("o", o, opts.layout)
    events.extend(o.events)
    if lse is not None:
        desc.lse = _lib.Tensor(lse.base_data.int_ptr, lse.offset)
        if lse_fp64:
            desc.lse_dtype = _lib.DTYPE_FP64
    _apply_views(desc, _variant_views(p, *extras, view))

    seen, wait = set(), []
    for e in events:
        if e.int_ptr not in seen:
            seen.add(e.int_ptr)
            wait.append(e.int_ptr)
    wait_list = (ctypes.c_void_p * len(wait))(*wait) if wait else None
    raw = ctypes.c_void_p()
    status = _lib.attention_forward(ctx.handle, queue.int_ptr,
                                    ctypes.byref(desc), len(wait), wait_list,
                                    ctypes.byref(raw))
    ctx.check(status)
    # The library returned a new reference: pyopencl takes it over.
    event = cl.Event.from_int_ptr(raw.value, retain=False)
    o.add_event(event)
    if lse is not None:
        lse.add_event(event)
    del keep  # released buffers live until the kernel is done (OpenCL)
    return o, lse, event


# ---- the public call -------------------------------------------------------

def _fa2_names(scale, softmax_scale, window, window_size):
    """FlashAttention-2 calls scale and window softmax_scale and
    window_size: either name is taken, not both."""
    if softmax_scale is not None:
        if scale is not None:
            raise InvalidValueError(
                f"scale = {scale!r} and softmax_scale = {softmax_scale!r}: "
                f"the same argument (softmax_scale is FlashAttention-2's "
                f"name); give one")
        scale = softmax_scale
    if window_size is not None:
        if window is not None:
            raise InvalidValueError(
                f"window = {window!r} and window_size = {window_size!r}: "
                f"the same argument (window_size is FlashAttention-2's "
                f"name); give one")
        window = window_size
    return scale, window


def attention(q, k, v, *, causal=False, causal_align="bottom_right",
              scale=None, window=None, softcap=0.0, alibi_slopes=None,
              bias=None, mask=None, sinks=None, return_lse=False,
              layout="bnhd", device=None, backend="auto", out=None,
              wait_for=None, return_event=False, softmax_scale=None,
              window_size=None, positions=None):
    """Fused attention ``softmax(scale * q @ k^T + variants) @ v``.

    q: ``[batch, seqlen_q, heads_q, head_dim]``, k: ``[batch, seqlen_k,
    heads_kv, head_dim]``, v: ``[batch, seqlen_k, heads_kv, head_dim_v]``
    (``layout="bnhd"``, flash_attn_func's order) or ``[batch, heads, seq,
    dim]`` (``layout="bhnd"``, SDPA's). heads_q must be a multiple of
    heads_kv (GQA/MQA). All three share one dtype: float32, float16,
    ml_dtypes.bfloat16 or float64 (float64 needs cl_khr_fp64).

    NumPy arrays (or anything np.asarray takes) run through
    ``flashcl_attention_forward_host`` on ``device``'s cached context and
    return NumPy arrays (a float64 call with return_lse through
    ``flashcl_attention_forward`` on buffers of that context: the host
    call's lse is float32). ``pyopencl.array.Array`` inputs run through
    ``flashcl_attention_forward`` on ``q.queue`` with no copies (the cl_mem,
    offset and strides of each array, views included), after the arrays'
    events and ``wait_for``; the outputs are PyOpenCL arrays whose
    ``events`` hold the call's event.

    causal: mask keys after the diagonal; ``causal_align="bottom_right"``
    (FlashAttention >= 2.1: query i sees key j iff j <= i + seqlen_k -
    seqlen_q) or ``"top_left"`` (SDPA's is_causal: j <= i), or
    ``"absolute"`` with ``positions=(q_position, k_position)``, the first
    query row's and first key's positions in a longer sequence: j is
    visible iff k_position + j <= q_position + i, so that a chunk of
    queries against a chunk of keys (context parallelism) masks as the
    whole call would; its LSE then merges the chunks with
    :func:`combine_partials`.
    scale: None means 1/sqrt(head_dim); any other value is used as given
    (0.0 means exactly zero: uniform weights).
    window: (left, right) sliding window around the diagonal, -1 unbounded;
    None or (-1, -1) means none.
    softmax_scale, window_size: FlashAttention-2's names for scale and
    window (give one name or the other).
    softcap: s <- softcap * tanh(s / softcap) when > 0.
    alibi_slopes: float32 [heads_q] or [batch, heads_q].
    bias: additive float32/float16/bfloat16 scores bias, broadcastable to
    [batch, heads_q, seqlen_q, seqlen_k] (always that order); -inf masks.
    mask: bool/uint8, same shape rules, True (non-zero) = attend.
    sinks: float32 [heads_q] attention-sink logits.
    return_lse: also return the log-sum-exp, float32 [batch, heads_q,
    seqlen_q]; float64 for a float64 call (its LSE as the call computes
    it, so that partial results merged by :func:`combine_partials` keep
    float64 accuracy), except on the reference backend (float32 there).
    device: for NumPy inputs: None (FLASHCL_DEVICE, else the first GPU,
    else the first device), an index, a spec string ("pocl", "1:0",
    "gpu") or a :class:`flashcl.Device`.
    backend: "auto", "fused" or "reference" (the unfused CLBlast path).
    out: an output array to write (NumPy: C-contiguous; PyOpenCL: any view).
    wait_for / return_event: PyOpenCL events to wait for; return the call's
    pyopencl.Event last in the result.

    Returns o, or (o, lse) with return_lse, each followed by the event when
    return_event. Raises a :class:`flashcl.Error` subclass carrying the
    status and the library's message.
    """
    scale, window = _fa2_names(scale, softmax_scale, window, window_size)
    opts = _Options(layout, causal, causal_align, scale, window, softcap,
                    backend, positions)
    extras = (alibi_slopes, bias, mask, sinks)
    if _is_cl(q):
        o, lse, event = _device(q, k, v, opts, extras, device, out,
                                return_lse, wait_for)
    else:
        for name, x in (("k", k), ("v", v)):
            if _is_cl(x):
                raise InvalidValueError(
                    f"{name} is a PyOpenCL array but q is not: q, k and v "
                    f"must all be NumPy arrays or all PyOpenCL arrays")
        if wait_for:
            raise InvalidValueError("wait_for is for PyOpenCL inputs")
        o, lse, event = _host(q, k, v, opts, extras, device, out, return_lse)
    result = (o,) + ((lse,) if return_lse else ())
    if return_event:
        result += (event,)
    return result[0] if len(result) == 1 else result
