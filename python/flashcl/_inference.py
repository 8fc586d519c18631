"""flashcl.attention_kvcache and flashcl.attention_varlen: the C library's
inference fields (README "Inference") for NumPy and PyOpenCL arrays.

NumPy inputs are copied to device buffers of the device's cached context
and the results read back (with an append, into the caller's cache arrays,
in place); PyOpenCL inputs are used where they are, with no copies."""
from __future__ import annotations

import ctypes

import numpy as np

from . import _lib
from ._attention import (_Options, _apply_views, _dtype_code,
                         _element_strides, _fa2_names, _is_cl,
                         _variant_views)
from ._devices import context_for, context_for_queue
from ._errors import (DtypeUnsupportedError, InvalidDimensionError,
                      InvalidLayoutError, InvalidValueError, NullArgumentError,
                      OpenCLError, OutOfMemoryError)


class _Shape:
    """What _variant_views reads: the descriptor's four extents."""

    def __init__(self, batch, heads_q, seqlen_q, seqlen_k):
        self.batch, self.heads_q = batch, heads_q
        self.seqlen_q, self.seqlen_k = seqlen_q, seqlen_k


def _dims(name, x, n, order):
    if x is None:
        raise NullArgumentError(f"{name} is None")
    shape = tuple(int(s) for s in np.shape(x))
    if len(shape) != n:
        raise InvalidDimensionError(
            f"{name} has shape {shape} ({len(shape)}-D): expected {n}-D "
            f"{order}")
    return shape


def _same(what, pairs):
    (n0, v0), *rest = pairs
    for n, v in rest:
        if v != v0:
            raise InvalidDimensionError(
                f"{n} has {what} {v} but {n0} has {v0}")


def _int_array(name, x, length=None):
    """An int32 array argument (NumPy: any integer dtype whose values fit;
    PyOpenCL: int32 already)."""
    if _is_cl(x):
        if np.dtype(x.dtype) != np.int32:
            raise DtypeUnsupportedError(
                f"{name} has dtype {x.dtype}: expected int32")
        arr = x
    else:
        arr = np.asarray(x)
        if arr.dtype.kind not in "iu":
            raise DtypeUnsupportedError(
                f"{name} has dtype {arr.dtype}: expected integers (int32)")
        if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
            raise InvalidValueError(f"{name} has values outside int32")
        arr = arr.astype(np.int32)
    if length is not None and tuple(arr.shape) != length:
        raise InvalidDimensionError(
            f"{name} has shape {tuple(arr.shape)}: expected {length}")
    return arr


class _Call:
    """One call's buffers. NumPy arrays become device buffers (read back
    at the end where asked); PyOpenCL arrays are used in place, after
    their events."""

    def __init__(self, cl_mode, device, queue_of):
        self.cl_mode = cl_mode
        if cl_mode:
            if device is not None:
                raise InvalidValueError(
                    "device= selects the device for NumPy inputs; PyOpenCL "
                    "arrays run on their queue's device (q.queue)")
            self.queue = queue_of.queue
            if self.queue is None:
                raise InvalidValueError(
                    "q has no queue (q.queue is None): give the array a "
                    "queue (q.with_queue(queue))")
            self.ctx = context_for_queue(self.queue)
        else:
            self.ctx = context_for(device)
        self.owned = []     # cl_mem we created (NumPy mode)
        self.readback = []  # (cl_mem, numpy array) read after the call
        self.events = []    # PyOpenCL events to wait for
        self.keep = []      # PyOpenCL arrays uploaded for this call

    def release(self):
        for mem in self.owned:
            _lib.clReleaseMemObject(mem)
        self.owned = []

    # -- buffers ---------------------------------------------------------
    def _numpy_buffer(self, name, arr, writable):
        arr = np.ascontiguousarray(arr)
        err = ctypes.c_int(0)
        flags = _lib.CL_MEM_READ_WRITE if writable else _lib.CL_MEM_READ_ONLY
        if arr.nbytes:
            mem = _lib.clCreateBuffer(self.ctx.cl_context,
                                      flags | _lib.CL_MEM_COPY_HOST_PTR,
                                      arr.nbytes, arr.ctypes.data,
                                      ctypes.byref(err))
        else:  # OpenCL buffers cannot be empty; nothing reads it
            mem = _lib.clCreateBuffer(self.ctx.cl_context, flags, 16, None,
                                      ctypes.byref(err))
        if err.value != 0 or not mem:
            raise OutOfMemoryError(f"clCreateBuffer for {name} "
                                   f"({arr.nbytes} bytes) failed: {err.value}")
        self.owned.append(mem)
        return mem, arr

    def tensor(self, name, x, strides_of, writable=False):
        """A flashcl_tensor for x: strides_of(element strides) gives the
        (batch, head, seq, dim) strides. NumPy: uploaded (writable: read
        back into x after the call, which must allow it)."""
        if self.cl_mode:
            import pyopencl.array as cla
            if not isinstance(x, cla.Array):
                x_cl = cla.to_device(self.queue, np.ascontiguousarray(x))
                if writable:
                    raise InvalidValueError(
                        f"{name} is a NumPy array but q is a PyOpenCL array: "
                        f"a cache appended to must be a PyOpenCL array too")
                self.keep.append(x_cl)
                x = x_cl
            self.events.extend(x.events)
            st = strides_of(_element_strides(name, x))
            return _lib.Tensor(x.base_data.int_ptr, x.offset, *st)
        if _is_cl(x):
            raise InvalidValueError(f"{name} is a PyOpenCL array but q is a "
                                    f"NumPy array")
        if writable:
            if not isinstance(x, np.ndarray) or not x.flags.writeable or \
                    not x.flags.c_contiguous:
                raise InvalidLayoutError(
                    f"{name} must be a writeable C-contiguous NumPy array: "
                    f"the new keys are appended to it in place")
        mem, arr = self._numpy_buffer(name, x, writable)
        if writable:
            self.readback.append((mem, x))
        st = strides_of([s // arr.itemsize for s in arr.strides])
        return _lib.Tensor(mem, 0, *st)

    def output(self, name, shape, dtype, out):
        """The output array (`out` or a new one) and its flashcl_tensor
        strides source."""
        if self.cl_mode:
            import pyopencl.array as cla
            if out is None:
                out = cla.empty(self.queue, shape, dtype)
            elif not isinstance(out, cla.Array):
                raise InvalidValueError(
                    f"{name} is {type(out).__name__}: PyOpenCL inputs take a "
                    f"PyOpenCL out array")
            self.events.extend(out.events)
            _check_shape(name, out, shape, dtype)
            return out, _lib.Tensor(out.base_data.int_ptr, out.offset)
        if out is None:
            out = np.empty(shape, dtype)
        elif not isinstance(out, np.ndarray) or not out.flags.c_contiguous \
                or not out.flags.writeable:
            raise InvalidLayoutError(f"{name} must be a writeable "
                                     f"C-contiguous NumPy array")
        _check_shape(name, out, shape, dtype)
        mem = self._new_buffer(name, max(out.nbytes, 16))
        self.readback.append((mem, out))
        return out, _lib.Tensor(mem, 0)

    def _new_buffer(self, name, nbytes):
        err = ctypes.c_int(0)
        mem = _lib.clCreateBuffer(self.ctx.cl_context, _lib.CL_MEM_READ_WRITE,
                                  nbytes, None, ctypes.byref(err))
        if err.value != 0 or not mem:
            raise OutOfMemoryError(f"clCreateBuffer for {name} ({nbytes} "
                                   f"bytes) failed: {err.value}")
        self.owned.append(mem)
        return mem

    def to_buffer(self, name, x, dtype):
        """_variant_views' uploader: (cl_mem, byte offset, strides)."""
        if self.cl_mode:
            import pyopencl.array as cla
            if isinstance(x, cla.Array):
                if dtype is not None and x.dtype != dtype:
                    raise DtypeUnsupportedError(
                        f"{name} has dtype {x.dtype}: expected "
                        f"{np.dtype(dtype)}")
                self.events.extend(x.events)
                return x.base_data.int_ptr, x.offset, _element_strides(name, x)
            arr = np.asarray(x)
            if dtype is not None:
                arr = arr.astype(dtype, copy=False)
            dev = cla.to_device(self.queue, np.ascontiguousarray(arr))
            self.keep.append(dev)
            return dev.base_data.int_ptr, 0, _element_strides(name, dev)
        arr = np.asarray(x)
        if dtype is not None and arr.dtype != dtype:
            arr = arr.astype(dtype)
        mem, arr = self._numpy_buffer(name, arr, False)
        return mem, 0, [s // arr.itemsize for s in arr.strides]

    def lengths(self, name, x, length):
        """An int32 [n] (or [n, m]) array as a flashcl_tensor: buffer,
        offset and its row stride in stride_batch."""
        arr = _int_array(name, x, length)
        mem, off, st = self.to_buffer(name, arr, None)
        # [n]: the stride between entries; [n, m]: between rows
        return _lib.Tensor(mem, off, (st[0] if st else 1) or 1, 0, 0, 0)

    # -- the call --------------------------------------------------------
    def run(self, desc, enqueue=None):
        """Enqueues `enqueue` (the library call, flashcl_attention_forward
        unless given) on desc; NumPy mode: reads the results back."""
        enqueue = enqueue or _lib.attention_forward
        if self.cl_mode:
            import pyopencl as cl
            seen, wait = set(), []
            for e in self.events:
                if e.int_ptr not in seen:
                    seen.add(e.int_ptr)
                    wait.append(e.int_ptr)
            wait_list = (ctypes.c_void_p * len(wait))(*wait) if wait else None
            raw = ctypes.c_void_p()
            self.ctx.check(enqueue(
                self.ctx.handle, self.queue.int_ptr, ctypes.byref(desc),
                len(wait), wait_list, ctypes.byref(raw)))
            return cl.Event.from_int_ptr(raw.value, retain=False)
        raw = ctypes.c_void_p()
        self.ctx.check(enqueue(
            self.ctx.handle, self.ctx.queue, ctypes.byref(desc), 0, None,
            ctypes.byref(raw)))
        try:
            for mem, arr in self.readback:  # in order, after the call
                if arr.nbytes == 0:
                    continue
                err = _lib.clEnqueueReadBuffer(
                    self.ctx.queue, mem, _lib.CL_TRUE, 0, arr.nbytes,
                    arr.ctypes.data, 1, ctypes.byref(raw), None)
                if err != 0:
                    raise OpenCLError(f"reading back the result: OpenCL "
                                      f"error {err}")
        finally:
            _lib.clReleaseEvent(raw)
        return None


def _check_shape(name, arr, shape, dtype):
    if tuple(arr.shape) != tuple(shape):
        raise InvalidDimensionError(
            f"{name} has shape {tuple(arr.shape)}, expected {tuple(shape)}")
    if np.dtype(arr.dtype) != np.dtype(dtype):
        raise DtypeUnsupportedError(
            f"{name} has dtype {arr.dtype}, expected {np.dtype(dtype)}")


def _dtype_of(arrays):
    dts = [(n, np.dtype(x.dtype)) for n, x in arrays if x is not None]
    for n, dt in dts[1:]:
        if dt != dts[0][1]:
            raise DtypeUnsupportedError(
                f"{n} has dtype {dt} but {dts[0][0]} has {dts[0][1]}: they "
                f"must share one dtype")
    code = _dtype_code(dts[0][1])
    if code is None:
        raise DtypeUnsupportedError(
            f"dtype {dts[0][1]}: flashcl takes float32, float16, bfloat16 "
            f"(ml_dtypes) and float64")
    return dts[0][1], code


def _base_desc(dtype_code, opts, batch, hq, hkv, nq, nk, d_qk, dv,
               num_splits):
    if not isinstance(num_splits, (int, np.integer)) or isinstance(
            num_splits, bool):
        raise InvalidValueError(f"num_splits = {num_splits!r}: expected an "
                                f"integer (0: automatic)")
    d = _lib.AttentionDesc()  # ctypes zero-fills
    d.struct_size = ctypes.sizeof(_lib.AttentionDesc)  # ours (_attention)
    d.batch, d.heads_q, d.heads_kv = batch, hq, hkv
    d.seqlen_q, d.seqlen_k = nq, nk
    d.head_dim, d.head_dim_v = d_qk, dv
    d.dtype = dtype_code
    d.layout = _lib.LAYOUT_BNHD
    opts.apply(d)
    d.num_splits = int(num_splits)
    return d, _Shape(batch, hq, nq, nk)


def _inputs(wait_for, q, *rest):
    """Whether q is a PyOpenCL array, and the arrays (NumPy mode: as
    ndarrays; an ndarray stays the same object, so appends land in the
    caller's)."""
    arrays = (q,) + rest
    if _is_cl(q):
        return True, arrays
    if wait_for:
        raise InvalidValueError("wait_for is for PyOpenCL inputs")
    return False, tuple(None if x is None or _is_cl(x) else np.asarray(x)
                        for x in arrays)


def _finish(o, lse, event, return_lse, return_event):
    if event is not None:
        o.add_event(event)
        if lse is not None:
            lse.add_event(event)
    result = (o,) + ((lse,) if return_lse else ())
    if return_event:
        result += (event,)
    return result[0] if len(result) == 1 else result


def _bnhd(st):
    """Element strides of a [batch, seq, heads, dim] array as (batch,
    head, seq, dim)."""
    return (st[0], st[2], st[1], st[3])


def _quantized(desc, side, kind, cache, scale, zero, call, append, hkv):
    """Sets one side's storage fields; returns its cache tensor."""
    from ._kv_quant import cache_side
    storage, per_head, tensor, s_t, z_t, _ = cache_side(
        f"{side}_cache", kind, cache, scale, zero, call, append, hkv)
    setattr(desc, f"{side}_storage", storage)
    setattr(desc, f"{side}_scale_per_head", int(per_head))
    setattr(desc, f"{side}_scale", s_t)
    if z_t is not None:
        setattr(desc, f"{side}_zero", z_t)
    return tensor


def attention_kvcache(q, k_cache, v_cache, cache_seqlens, *, k_new=None,
                      v_new=None, cache_batch_idx=None, block_table=None,
                      num_splits=0, causal=False, causal_align="bottom_right",
                      scale=None, window=None, softcap=0.0,
                      alibi_slopes=None, bias=None, mask=None, sinks=None,
                      return_lse=False, device=None, backend="auto", out=None,
                      wait_for=None, return_event=False, softmax_scale=None,
                      window_size=None, k_storage=None, v_storage=None,
                      k_scale=None, v_scale=None, k_zero=None, v_zero=None):
    """Attention of new queries against a KV cache (decoding), as
    FlashAttention's ``flash_attn_with_kvcache``.

    q: ``[batch, seqlen_q, heads_q, head_dim]``. k_cache, v_cache:
    ``[cache_rows, capacity, heads_kv, head_dim(_v)]``, or with
    ``block_table`` pages ``[pages, page_size, heads_kv, head_dim(_v)]``
    (page_size a multiple of 16; key j of sequence b is row j % page_size
    of page ``block_table[b, j // page_size]``). cache_seqlens: int32
    ``[batch]``, the valid keys of each sequence. k_new, v_new (optional):
    ``[batch, seqlen_new, heads_kv, head_dim(_v)]`` appended to the cache
    at ``cache_seqlens[b]`` before attending, in place (NumPy caches are
    updated in place too, so they must be writeable and C-contiguous);
    cache_seqlens itself is not advanced. cache_batch_idx (optional):
    int32 ``[batch]``, the cache row of each sequence. num_splits: 0
    chooses the split-KV count from the device, 1 never splits, n forces n.
    causal and window are bottom-right aligned on each sequence's own
    length (the queries end at its last key); causal_align="top_left" puts
    the diagonal at key 0. bias and mask broadcast to ``[batch, heads_q,
    seqlen_q, capacity]`` (key j of the cache). scale, softcap,
    alibi_slopes, sinks, device, backend, out, wait_for, return_event,
    return_lse, softmax_scale, window_size as for :func:`attention`; lse is
    float32 ``[batch, heads_q, seqlen_q]``.
    Lengths and page indices are read on the device: lengths are clamped
    to the cache, a page or cache row out of range is skipped (README,
    Inference).
    k_storage / v_storage ("e4m3", "e5m2", "int8", "int4"; None: the
    dtype): a quantized cache (docs/kv-quantization.md) of bytes, last
    axis head_dim (head_dim / 2 for int4), with k_scale / v_scale (and
    k_zero / v_zero for int4) as :func:`flashcl.quantize_kv` returns them
    per cache row; an append quantizes the new rows and writes their
    int8/int4 scales in place.
    """
    scale, window = _fa2_names(scale, softmax_scale, window, window_size)
    opts = _Options("bnhd", causal, causal_align, scale, window, softcap,
                    backend)
    cl_mode, (q, k_cache, v_cache, k_new, v_new) = _inputs(
        wait_for, q, k_cache, v_cache, k_new, v_new)
    b, nq, hq, d = _dims("q", q, 4, "[batch, seqlen_q, heads_q, head_dim]")
    rows, cap, hkv, dk = _dims(
        "k_cache", k_cache, 4, "[cache_rows or pages, capacity or page_size, "
        "heads_kv, head_dim]")
    rv, capv, hv, dv = _dims("v_cache", v_cache, 4, "[cache_rows or pages, "
                             "capacity or page_size, heads_kv, head_dim_v]")
    dk *= 2 if k_storage == "int4" else 1
    dv *= 2 if v_storage == "int4" else 1
    _same("head_dim", [("q", d), ("k_cache", dk)])
    _same("rows", [("k_cache", rows), ("v_cache", rv)])
    _same("capacity", [("k_cache", cap), ("v_cache", capv)])
    _same("heads", [("k_cache", hkv), ("v_cache", hv)])
    if (k_new is None) != (v_new is None):
        raise NullArgumentError("k_new and v_new go together: one is None")
    dtype, code = _dtype_of([("q", q),
                             ("k_cache", None if k_storage else k_cache),
                             ("v_cache", None if v_storage else v_cache),
                             ("k_new", k_new), ("v_new", v_new)])
    nn = 0
    if k_new is not None:
        bn, nn, hn, dn = _dims("k_new", k_new, 4,
                               "[batch, seqlen_new, heads_kv, head_dim]")
        bn2, nn2, hn2, dvn = _dims("v_new", v_new, 4,
                                   "[batch, seqlen_new, heads_kv, head_dim_v]")
        _same("batch", [("q", b), ("k_new", bn), ("v_new", bn2)])
        _same("seqlen_new", [("k_new", nn), ("v_new", nn2)])
        _same("heads", [("k_cache", hkv), ("k_new", hn), ("v_new", hn2)])
        _same("head_dim", [("k_cache", dk), ("k_new", dn)])
        _same("head_dim_v", [("v_cache", dv), ("v_new", dvn)])
    pages = 0
    if block_table is not None:
        table_shape = tuple(int(s) for s in np.shape(block_table))
        if len(table_shape) != 2 or table_shape[0] != b:
            raise InvalidDimensionError(
                f"block_table has shape {table_shape}: expected [batch, "
                f"max_pages] with batch {b}")
        pages = table_shape[1]
    capacity = pages * cap if block_table is not None else cap
    desc, shape = _base_desc(code, opts, b, hq, hkv, nq, capacity, d, dv,
                             num_splits)
    call = _Call(cl_mode, device, q)
    try:
        desc.q = call.tensor("q", q, _bnhd)
        append = k_new is not None
        desc.k = call.tensor("k_cache", k_cache, _bnhd, writable=append) \
            if k_storage is None else _quantized(
                desc, "k", k_storage, k_cache, k_scale, k_zero, call, append,
                hkv)
        desc.v = call.tensor("v_cache", v_cache, _bnhd, writable=append) \
            if v_storage is None else _quantized(
                desc, "v", v_storage, v_cache, v_scale, v_zero, call, append,
                hkv)
        desc.kv_batch = rows
        desc.cache_seqlens = call.lengths("cache_seqlens", cache_seqlens,
                                          (b,))
        if cache_batch_idx is not None:
            desc.cache_batch_idx = call.lengths("cache_batch_idx",
                                                cache_batch_idx, (b,))
        if append:
            desc.k_new = call.tensor("k_new", k_new, _bnhd)
            desc.v_new = call.tensor("v_new", v_new, _bnhd)
            desc.seqlen_new = nn
        if block_table is not None:
            desc.block_table = call.lengths("block_table", block_table,
                                            (b, pages))
            desc.page_size = cap
            desc.max_pages = pages
        _variant_views_into(desc, shape, alibi_slopes, sinks, call, bias,
                            mask)
        o, desc.o = call.output("out", (b, nq, hq, dv), dtype, out)
        desc.o.stride_batch, desc.o.stride_head, desc.o.stride_seq, \
            desc.o.stride_dim = _bnhd(_element_strides("out", o))
        lse = None
        if return_lse:
            lse, desc.lse = call.output("lse", (b, hq, nq), np.float32, None)
        call.events.extend(wait_for or [])
        event = call.run(desc)
    finally:
        call.release()
    return _finish(o, lse, event, return_lse, return_event)



def _varlen_batch(cu_seqlens_q, max_seqlen_q, max_seqlen_k):
    """The sequence count of a packed call, its maxima checked as integers
    (the forward's and the backward's varlen entry points)."""
    cq = tuple(int(s) for s in np.shape(cu_seqlens_q))
    if len(cq) != 1 or cq[0] < 1:
        raise InvalidDimensionError(
            f"cu_seqlens_q has shape {cq}: expected [batch + 1]")
    for name, x in (("max_seqlen_q", max_seqlen_q),
                    ("max_seqlen_k", max_seqlen_k)):
        if not isinstance(x, (int, np.integer)) or isinstance(x, bool):
            raise InvalidValueError(f"{name} = {x!r}: expected an integer")
    return cq[0] - 1

def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, *, num_splits=0, causal=False,
                     causal_align="bottom_right", scale=None, window=None,
                     softcap=0.0, alibi_slopes=None, sinks=None,
                     return_lse=False, device=None, backend="auto", out=None,
                     wait_for=None, return_event=False, softmax_scale=None,
                     window_size=None):
    """Attention over a batch of sequences packed end to end, as
    FlashAttention's ``flash_attn_varlen_func``.

    q: ``[total_q, heads_q, head_dim]``, k: ``[total_k, heads_kv,
    head_dim]``, v: ``[total_k, heads_kv, head_dim_v]``. cu_seqlens_q,
    cu_seqlens_k: int32 ``[batch + 1]`` prefix sums (sequence b owns rows
    ``cu[b] .. cu[b+1] - 1``); max_seqlen_q / max_seqlen_k bound the
    lengths (longer sequences are cut to them). No work goes to padding.
    causal and window apply within each sequence (bottom-right aligned on
    its own lengths unless causal_align="top_left"). Returns o ``[total_q,
    heads_q, head_dim_v]`` and, with return_lse, lse float32 ``[heads_q,
    total_q]``. Other arguments as for :func:`attention`; bias and mask
    are not taken here (the C descriptor's varlen shapes for them are not
    mapped yet).
    """
    scale, window = _fa2_names(scale, softmax_scale, window, window_size)
    opts = _Options("bnhd", causal, causal_align, scale, window, softcap,
                    backend)
    cl_mode, (q, k, v) = _inputs(wait_for, q, k, v)
    tq, hq, d = _dims("q", q, 3, "[total_q, heads_q, head_dim]")
    tk, hkv, dk = _dims("k", k, 3, "[total_k, heads_kv, head_dim]")
    tv, hv, dv = _dims("v", v, 3, "[total_k, heads_kv, head_dim_v]")
    _same("head_dim", [("q", d), ("k", dk)])
    _same("rows", [("k", tk), ("v", tv)])
    _same("heads", [("k", hkv), ("v", hv)])
    dtype, code = _dtype_of([("q", q), ("k", k), ("v", v)])
    b = _varlen_batch(cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    desc, shape = _base_desc(code, opts, b, hq, hkv, tq, tk, d, dv,
                             num_splits)

    def packed(st):  # [rows, heads, dim] -> (batch, head, seq, dim)
        return (0, st[1], st[0], st[2])

    call = _Call(cl_mode, device, q)
    try:
        desc.q = call.tensor("q", q, packed)
        desc.k = call.tensor("k", k, packed)
        desc.v = call.tensor("v", v, packed)
        desc.cu_seqlens_q = call.lengths("cu_seqlens_q", cu_seqlens_q,
                                         (b + 1,))
        desc.cu_seqlens_k = call.lengths("cu_seqlens_k", cu_seqlens_k,
                                         (b + 1,))
        desc.max_seqlen_q = int(max_seqlen_q)
        desc.max_seqlen_k = int(max_seqlen_k)
        _variant_views_into(desc, shape, alibi_slopes, sinks, call)
        o, desc.o = call.output("out", (tq, hq, dv), dtype, out)
        st = _element_strides("out", o)
        desc.o.stride_batch, desc.o.stride_head, desc.o.stride_seq, \
            desc.o.stride_dim = packed(st)
        lse = None
        if return_lse:
            lse, desc.lse = call.output("lse", (hq, tq), np.float32, None)
        call.events.extend(wait_for or [])
        event = call.run(desc)
    finally:
        call.release()
    return _finish(o, lse, event, return_lse, return_event)


def _variant_views_into(desc, shape, alibi_slopes, sinks, call, bias=None,
                        mask=None):
    _apply_views(desc, _variant_views(shape, alibi_slopes, bias, mask, sinks,
                                      call.to_buffer))


def attention_varlen_backward(q, k, v, o, lse, do, cu_seqlens_q,
                              cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                              causal=False, causal_align="bottom_right",
                              scale=None, window=None, softcap=0.0,
                              alibi_slopes=None, sinks=None, device=None,
                              backend="auto", out=None, wait_for=None,
                              return_event=False, softmax_scale=None,
                              window_size=None, nondeterministic=False,
                              return_dsinks=False):
    """Gradients of :func:`attention_varlen`: ``(dq, dk, dv[, dsinks])``
    with q's, k's and v's packed shapes (``[total, heads, dim]``). o and
    lse are the forward's outputs (lse float32 ``[heads_q, total_q]``), do
    o's gradient; the prefix sums, max lengths and every keyword must be
    the forward's. :func:`attention_backward` with ``cu_seqlens_q=`` calls
    this. Rows outside every sequence are not written."""
    from ._backward import _flag

    scale, window = _fa2_names(scale, softmax_scale, window, window_size)
    opts = _Options("bnhd", causal, causal_align, scale, window, softcap,
                    backend)
    want_dsinks = bool(_flag("return_dsinks", return_dsinks))
    nondet = _flag("nondeterministic", nondeterministic)
    cl_mode, (q, k, v, o, lse, do) = _inputs(wait_for, q, k, v, o, lse, do)
    tq, hq, d = _dims("q", q, 3, "[total_q, heads_q, head_dim]")
    tk, hkv, dk = _dims("k", k, 3, "[total_k, heads_kv, head_dim]")
    tv, hv, dv = _dims("v", v, 3, "[total_k, heads_kv, head_dim_v]")
    _same("head_dim", [("q", d), ("k", dk)])
    _same("rows", [("k", tk), ("v", tv)])
    _same("heads", [("k", hkv), ("v", hv)])
    dtype, code = _dtype_of([("q", q), ("k", k), ("v", v), ("o", o),
                             ("do", do)])
    for name, x, shape in (("o", o, (tq, hq, dv)), ("do", do, (tq, hq, dv)),
                           ("lse", lse, (hq, tq))):
        got = _dims(name, x, len(shape), str(list(shape)))
        if got != shape:
            raise InvalidDimensionError(
                f"{name} has shape {got}, expected {shape}")
    if not cl_mode:
        lse = np.asarray(lse, np.float32)
    b = _varlen_batch(cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    desc, shape = _base_desc(code, opts, b, hq, hkv, tq, tk, d, dv, 0)
    names = ["dq", "dk", "dv"] + (["dsinks"] if want_dsinks else [])
    if out is not None and (not isinstance(out, (tuple, list)) or
                            len(out) != len(names)):
        raise InvalidValueError(f"out: expected a tuple ({', '.join(names)})")
    outs = list(out) if out is not None else [None] * len(names)

    def packed(st):  # [rows, heads, dim] -> (batch, head, seq, dim)
        return (0, st[1], st[0], st[2])

    call = _Call(cl_mode, device, q)
    try:
        desc.q = call.tensor("q", q, packed)
        desc.k = call.tensor("k", k, packed)
        desc.v = call.tensor("v", v, packed)
        desc.o = call.tensor("o", o, packed)
        # stride_dim 1: a single-element LSE's zero strides are not "packed"
        desc.lse = call.tensor("lse", lse, lambda st: (0, st[0], st[1], 1))
        desc.cu_seqlens_q = call.lengths("cu_seqlens_q", cu_seqlens_q,
                                         (b + 1,))
        desc.cu_seqlens_k = call.lengths("cu_seqlens_k", cu_seqlens_k,
                                         (b + 1,))
        desc.max_seqlen_q = int(max_seqlen_q)
        desc.max_seqlen_k = int(max_seqlen_k)
        _variant_views_into(desc, shape, alibi_slopes, sinks, call)
        bwd = _lib.BackwardDesc()
        bwd.struct_size = ctypes.sizeof(_lib.BackwardDesc)
        bwd.d_o = call.tensor("do", do, packed)
        grads = []
        for i, (name, shp) in enumerate(zip(names, ((tq, hq, d),
                                                    (tk, hkv, d),
                                                    (tk, hkv, dv), (hq,)))):
            arr, t = call.output(name, shp, np.float32 if name == "dsinks"
                                 else dtype, outs[i])
            st = _element_strides(name, arr)
            if name == "dsinks":
                t.stride_head = st[0] or 1
            else:
                t.stride_batch, t.stride_head, t.stride_seq, \
                    t.stride_dim = packed(st)
            grads.append((arr, t))
        bwd.d_q, bwd.d_k, bwd.d_v = (t for _, t in grads[:3])
        if want_dsinks:
            bwd.d_sinks = grads[3][1]
        bwd.nondeterministic = nondet
        call.events.extend(wait_for or [])

        def enqueue(handle, queue, desc_p, n, wait, event):
            return _lib.attention_backward(handle, queue, desc_p,
                                           ctypes.byref(bwd), n, wait, event)

        event = call.run(desc, enqueue)
    finally:
        call.release()
    result = tuple(arr for arr, _ in grads)
    if event is not None:
        for arr in result:
            arr.add_event(event)
    return result + ((event,) if return_event else ())
