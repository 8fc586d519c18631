"""The device path: pyopencl.array.Array inputs run in place (their cl_mem,
offset and strides) on the array's queue, with events."""
import numpy as np
import pytest

import pyopencl as cl
import pyopencl.array as cla

import flashcl
from flashcl import Status
from conftest import TOL, dtype_of, randn
from reference import attention_ref, rel_err


def nan_array(queue, shape, dtype):
    return cla.to_device(queue, np.full(shape, np.nan, dtype_of(dtype)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_dtypes_layouts(cl_queue, rng, dtype, layout):
    if layout == "bnhd":
        shapes = [(2, 33, 4, 64), (2, 47, 2, 64), (2, 47, 2, 64)]
    else:
        shapes = [(2, 4, 33, 64), (2, 2, 47, 64), (2, 2, 47, 64)]
    q, k, v = (randn(rng, s, dtype) for s in shapes)
    dq, dk, dv = (cla.to_device(cl_queue, x) for x in (q, k, v))
    out = nan_array(cl_queue, shapes[0], dtype)
    o, lse, event = flashcl.attention(dq, dk, dv, causal=True, layout=layout,
                                      out=out, return_lse=True, return_event=True)
    assert o is out and isinstance(lse, cla.Array) and isinstance(event, cl.Event)
    assert event in o.events and event in lse.events
    o_ref, lse_ref = attention_ref(q, k, v, causal=True, layout=layout)
    assert rel_err(o.get(), o_ref) <= TOL[dtype]
    if dtype == "float64":  # a float64 call's LSE is float64
        assert lse.dtype == np.float64
        assert rel_err(lse.get(), lse_ref) <= TOL[dtype]
    else:
        assert lse.dtype == np.float32
        assert rel_err(lse.get(), lse_ref) <= max(TOL[dtype], 1e-6)


def test_allocates_output_on_the_queue(cl_queue, rng):
    q = randn(rng, (1, 16, 2, 32))
    dq = cla.to_device(cl_queue, q)
    o = flashcl.attention(dq, dq, dq)
    assert isinstance(o, cla.Array) and o.queue is cl_queue
    assert o.shape == q.shape and o.dtype == np.float32
    assert rel_err(o.get(), attention_ref(q, q, q)[0]) <= TOL["float32"]


def test_input_views_with_offsets_and_strides(cl_queue, rng):
    """q, k, v are slices and transposes of bigger device arrays: flashcl
    reads them in place (offset, strides), nothing is made contiguous."""
    base = randn(rng, (2, 5, 40, 96))  # [b, h, n, 3 * 32] on the device
    dbase = cla.to_device(cl_queue, base)
    # bnhd views of bhnd storage, each a slice of the last axis, heads 1..4
    dq = dbase[:, 1:, :, 0:32].transpose((0, 2, 1, 3))
    dk = dbase[:, 1:3, :, 32:64].transpose((0, 2, 1, 3))
    dv = dbase[:, 3:5, :, 64:96].transpose((0, 2, 1, 3))
    assert not dq.flags.c_contiguous and dq.offset > 0 and dq.base_data is dbase.base_data
    q = base[:, 1:, :, 0:32].transpose(0, 2, 1, 3)
    k = base[:, 1:3, :, 32:64].transpose(0, 2, 1, 3)
    v = base[:, 3:5, :, 64:96].transpose(0, 2, 1, 3)
    o = flashcl.attention(dq, dk, dv, window=(7, 3))
    assert rel_err(o.get(), attention_ref(q, k, v, window=(7, 3))[0]) <= TOL["float32"]


def test_output_view_writes_in_place(cl_queue, rng):
    """out is a strided view into a NaN-filled buffer: its elements are
    written, every other element of the buffer stays NaN."""
    q = randn(rng, (1, 24, 2, 32))
    dq = cla.to_device(cl_queue, q)
    big = nan_array(cl_queue, (1, 24, 3, 48), "float32")
    out = big[:, :, 1:, 8:40]
    o = flashcl.attention(dq, dq, dq, out=out)
    assert o is out
    host = big.get()
    ref = attention_ref(q, q, q)[0]
    assert rel_err(host[:, :, 1:, 8:40], ref) <= TOL["float32"]
    untouched = np.ones(host.shape, bool)
    untouched[:, :, 1:, 8:40] = False
    assert np.isnan(host[untouched]).all()


def test_variant_tensors_zero_copy_and_numpy(cl_queue, rng):
    q, k, v = randn(rng, (2, 20, 4, 32)), randn(rng, (2, 28, 2, 32)), randn(rng, (2, 28, 2, 32))
    dq, dk, dv = (cla.to_device(cl_queue, x) for x in (q, k, v))
    bias = randn(rng, (2, 1, 20, 28))          # broadcast over heads
    mask = rng.uniform(size=(20, 28)) > 0.2    # broadcast over batch, heads
    slopes = rng.uniform(0.05, 0.3, (2, 4)).astype(np.float32)
    sinks = rng.standard_normal(4).astype(np.float32)
    want = attention_ref(q, k, v, bias=bias, mask=mask, alibi_slopes=slopes,
                         sinks=sinks, causal=True)
    for conv in (lambda x: cla.to_device(cl_queue, x), lambda x: x):
        o, lse = flashcl.attention(dq, dk, dv, bias=conv(bias), mask=conv(mask),
                                   alibi_slopes=conv(slopes), sinks=conv(sinks),
                                   causal=True, return_lse=True)
        assert rel_err(o.get(), want[0]) <= TOL["float32"]
        assert rel_err(lse.get(), want[1]) <= 1e-5


def test_waits_for_events(cl_queue, rng):
    q = randn(rng, (1, 16, 2, 32))
    dq = cla.to_device(cl_queue, q)
    flashcl.attention(dq, dq, dq)  # compiled before the timed part
    gate = cl.UserEvent(cl_queue.context)
    out = nan_array(cl_queue, q.shape, "float32")
    o, event = flashcl.attention(dq, dq, dq, out=out, wait_for=[gate],
                                 return_event=True)
    assert event.command_execution_status != cl.command_execution_status.COMPLETE
    gate.set_status(cl.command_execution_status.COMPLETE)
    event.wait()
    assert event.command_execution_status == cl.command_execution_status.COMPLETE
    assert rel_err(o.get(), attention_ref(q, q, q)[0]) <= TOL["float32"]


def test_array_events_are_waited_for(cl_queue, rng):
    """An input whose pending write is in its .events: the call waits for it
    (on an out-of-order-capable path this is what orders the two)."""
    q = randn(rng, (1, 16, 2, 32))
    dq = cla.empty(cl_queue, q.shape, np.float32)
    gate = cl.UserEvent(cl_queue.context)
    write = cl.enqueue_copy(cl_queue, dq.base_data, q, wait_for=[gate], is_blocking=False)
    dq.add_event(write)
    o, event = flashcl.attention(dq, dq, dq, return_event=True)
    assert event.command_execution_status != cl.command_execution_status.COMPLETE
    gate.set_status(cl.command_execution_status.COMPLETE)
    assert rel_err(o.get(), attention_ref(q, q, q)[0]) <= TOL["float32"]


def _event_refcount(raw):
    import ctypes
    count = ctypes.c_uint(0)
    fn = flashcl._lib.ocl.clGetEventInfo
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t,
                   ctypes.c_void_p, ctypes.c_void_p]
    assert fn(raw, 0x11D2, ctypes.sizeof(count), ctypes.byref(count), None) == 0
    return count.value  # CL_EVENT_REFERENCE_COUNT


def _settled_refcount(read):
    """PoCL drops its own references to a finished command's event a little
    after clFinish returns: the smallest count seen over half a second."""
    import time
    counts = []
    for _ in range(10):
        counts.append(read())
        time.sleep(0.05)
    return min(counts)


def test_event_reference_is_handed_over(cl_queue, rng):
    """The library returns a new cl_event reference; pyopencl takes it over
    (Event.from_int_ptr(retain=False)): the Python Event ends with exactly
    the count the raw C call leaves its caller, not one more (a leak) or
    one less (a double release). Both calls wait for nothing."""
    import ctypes
    from flashcl import _attention, _devices, _lib
    q = cla.to_device(cl_queue, randn(rng, (1, 16, 2, 32)))
    o = cla.empty(cl_queue, q.shape, np.float32)
    cl_queue.finish()
    q.events.clear()
    o.events.clear()
    # the raw C call, our own reference released by hand
    ctx = _devices.context_for_queue(cl_queue)
    p = _attention._Problem(q, q, q, "bnhd")
    desc = p.desc(_attention._Options("bnhd", False, "bottom_right", None,
                                      (-1, -1), 0.0, "auto"))
    desc.q = desc.k = desc.v = _attention._tensor_of("q", q, "bnhd")
    desc.o = _attention._tensor_of("o", o, "bnhd")
    raw = ctypes.c_void_p()
    assert _lib.attention_forward(ctx.handle, cl_queue.int_ptr, ctypes.byref(desc),
                                  0, None, ctypes.byref(raw)) == 0
    cl_queue.finish()
    raw_count = _settled_refcount(lambda: _event_refcount(raw.value))
    assert _lib.clReleaseEvent(raw.value) == 0
    # the Python call, into the same output
    o2, event = flashcl.attention(q, q, q, out=o, return_event=True)
    cl_queue.finish()
    o.events.clear()
    count = _settled_refcount(lambda: event.get_info(cl.event_info.REFERENCE_COUNT))
    assert count == raw_count
    for _ in range(20):  # no double release when the Events are collected
        o, event = flashcl.attention(q, q, q, return_event=True)
    cl_queue.finish()


def test_second_queue_shares_the_context(cl_queue, rng):
    from flashcl import _devices
    q = randn(rng, (1, 16, 2, 32))
    other = cl.CommandQueue(cl_queue.context, cl_queue.device)
    dq = cla.to_device(other, q)
    before = dict(_devices._by_queue_ctx)
    flashcl.attention(cla.to_device(cl_queue, q), dq, dq)
    o = flashcl.attention(dq, dq, dq)
    assert o.queue is other
    assert len(_devices._by_queue_ctx) <= max(len(before), 1)
    assert rel_err(o.get(), attention_ref(q, q, q)[0]) <= TOL["float32"]


def test_empty_and_seqlen_k_zero(cl_queue, rng):
    q = cla.to_device(cl_queue, randn(rng, (1, 8, 2, 32)))
    kv = cla.empty(cl_queue, (1, 0, 2, 32), np.float32)
    out = nan_array(cl_queue, (1, 8, 2, 32), "float32")
    o, lse = flashcl.attention(q, kv, kv, out=out, return_lse=True)
    assert np.all(o.get() == 0) and np.all(np.isneginf(lse.get()))
    e = cla.empty(cl_queue, (0, 8, 2, 32), np.float32)
    o, event = flashcl.attention(e, e, e, return_event=True)
    event.wait()
    assert o.shape == (0, 8, 2, 32)


# ---- errors on the device path ------------------------------------------------

def test_mixed_inputs(cl_queue, rng):
    q = randn(rng, (1, 8, 2, 32))
    dq = cla.to_device(cl_queue, q)
    for args in ((dq, q, q), (q, dq, q)):
        with pytest.raises(flashcl.InvalidValueError) as info:
            flashcl.attention(*args)
        assert "must all be NumPy arrays or all PyOpenCL arrays" in info.value.message


def test_device_argument_refused(cl_queue, rng):
    dq = cla.to_device(cl_queue, randn(rng, (1, 8, 2, 32)))
    with pytest.raises(flashcl.InvalidValueError) as info:
        flashcl.attention(dq, dq, dq, device=0)
    assert "queue" in info.value.message


def test_context_mismatch_from_the_library(cl_queue, rng):
    q = randn(rng, (1, 8, 2, 32))
    other = cl.CommandQueue(cl.Context([cl_queue.device]))
    a, b = cla.to_device(cl_queue, q), cla.to_device(other, q)
    out = nan_array(cl_queue, q.shape, "float32")
    with pytest.raises(flashcl.ContextMismatchError) as info:
        flashcl.attention(a, b, a, out=out)
    assert info.value.status == Status.CONTEXT_MISMATCH
    assert "k" in info.value.message
    assert np.isnan(out.get()).all()


def test_aliasing_from_the_library(cl_queue, rng):
    q = cla.to_device(cl_queue, randn(rng, (1, 8, 2, 32)))
    with pytest.raises(flashcl.AliasingError) as info:
        flashcl.attention(q, q, q, out=q)
    assert info.value.status == Status.ALIASING and "o overlaps" in info.value.message


def test_head_grouping_and_dtype(cl_queue, rng):
    q = cla.to_device(cl_queue, randn(rng, (1, 8, 4, 32)))
    k = cla.to_device(cl_queue, randn(rng, (1, 8, 3, 32)))
    with pytest.raises(flashcl.HeadGroupingError) as info:
        flashcl.attention(q, k, k)
    assert "heads_kv = 3" in info.value.message
    h = cla.to_device(cl_queue, randn(rng, (1, 8, 4, 32), "float16"))
    with pytest.raises(flashcl.DtypeUnsupportedError):
        flashcl.attention(q, h, h)


def test_wrong_variant_dtype(cl_queue, rng):
    q = cla.to_device(cl_queue, randn(rng, (1, 8, 2, 32)))
    sinks = cla.to_device(cl_queue, np.zeros(2, np.float64))
    with pytest.raises(flashcl.DtypeUnsupportedError) as info:
        flashcl.attention(q, q, q, sinks=sinks)
    assert "sinks" in info.value.message and "float32" in info.value.message


def test_none_input(cl_queue, rng):
    q = cla.to_device(cl_queue, randn(rng, (1, 8, 2, 32)))
    with pytest.raises(flashcl.NullArgumentError) as info:
        flashcl.attention(q, None, q)
    assert "k is None" in info.value.message
