"""flashcl.attention_backward against a float64 NumPy gradient written
here (softmax's gradient by hand, not taken from the library)."""
import numpy as np
import pytest

import flashcl
from conftest import dtype_of, randn

# max |grad - ref| / max |ref| against the float64 gradient
TOL = {"float32": 2e-4, "float16": 2e-2, "bfloat16": 8e-2}
POISON = 12345.0


def _bhnd(x):  # [b, n, h, d] -> float64 [b, h, n, d]
    return np.asarray(x, np.float64).transpose(0, 2, 1, 3)


def _bnhd(x):
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))


def reference_grads(q, k, v, do, *, causal=False, window=(-1, -1),
                    softcap=0.0, sinks=None, scale=None, diag=None):
    """float64 (dq, dk, dv, dsinks) of attention (bnhd; the diagonal
    bottom-right unless given), from the definition: P = softmax(s'),
    O = P V."""
    q, k, v, do = (_bhnd(x) for x in (q, k, v, do))
    b, hq, nq, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    group = hq // hk
    k, v = (np.repeat(x, group, axis=1) for x in (k, v))
    scale = 1 / np.sqrt(d) if scale is None else scale
    s = scale * q @ k.transpose(0, 1, 3, 2)
    if softcap > 0:
        t = np.tanh(s / softcap)
        s = softcap * t
    i = np.arange(nq)[:, None] + (nk - nq if diag is None else diag)
    j = np.arange(nk)[None, :]
    keep = np.ones((nq, nk), bool)
    if causal:
        keep &= j <= i
    left, right = window
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    if sinks is not None:
        sink = np.asarray(sinks, np.float64)[None, :, None, None]
        m = np.maximum(m, sink)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    z = e.sum(axis=-1, keepdims=True)
    if sinks is not None:
        p_sink = np.exp(sink - m)
        z = z + p_sink
    z = np.where(z > 0, z, 1.0)
    p = e / z
    o = p @ v
    delta = (do * o).sum(axis=-1, keepdims=True)
    dp = do @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - delta)
    if softcap > 0:
        ds = ds * (1 - t * t)
    dq = scale * ds @ k
    dk = scale * ds.transpose(0, 1, 3, 2) @ q
    dv = p.transpose(0, 1, 3, 2) @ do
    dk = dk.reshape(b, hk, group, nk, d).sum(axis=2)
    dv = dv.reshape(b, hk, group, nk, -1).sum(axis=2)
    dsinks = None
    if sinks is not None:
        dsinks = -(p_sink / z * delta).sum(axis=(0, 2, 3))
    return _bnhd(dq), _bnhd(dk), _bnhd(dv), dsinks


def _case(rng, dtype, b=1, nq=37, nk=45, hq=4, hk=2, d=32, dv=32):
    q = randn(rng, (b, nq, hq, d), dtype)
    k = randn(rng, (b, nk, hk, d), dtype)
    v = randn(rng, (b, nk, hk, dv), dtype)
    do = randn(rng, (b, nq, hq, dv), dtype)
    return q, k, v, do


def _check(got, want, tol, name):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, name
    assert np.all(np.isfinite(got)), name
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
    assert err <= tol, f"{name}: relative max error {err:.3g} > {tol}"


def _run_and_check(q, k, v, do, dtype, **kw):
    o, lse = flashcl.attention(q, k, v, return_lse=True, **kw)
    want_dsinks = kw.get("sinks") is not None
    grads = flashcl.attention_backward(q, k, v, o, lse, do,
                                       return_dsinks=want_dsinks, **kw)
    ref = reference_grads(q, k, v, do,
                          **{n: x for n, x in kw.items() if n != "backend"})
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref):
        assert g.dtype == q.dtype, name
        _check(g, r, TOL[dtype], name)
    if want_dsinks:
        assert grads[3].dtype == np.float32 and grads[3].shape == (q.shape[2],)
        _check(grads[3], ref[3], TOL[dtype], "dsinks")
    return grads


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gradients_causal_gqa(device, rng, dtype):
    q, k, v, do = _case(rng, dtype)
    _run_and_check(q, k, v, do, dtype, causal=True)


@pytest.mark.parametrize("variant", [
    {"window": (9, 3)},
    {"softcap": 2.0},
    {"causal": True, "sinks": "yes"},
    {"scale": -0.3},
])
def test_gradients_variants(device, rng, variant):
    kw = dict(variant)
    q, k, v, do = _case(rng, "float32", hk=1)  # MQA
    if "sinks" in kw:
        kw["sinks"] = rng.standard_normal(q.shape[2]).astype(np.float32)
    _run_and_check(q, k, v, do, "float32", **kw)


def test_head_dim_v_and_mha(device, rng):
    q, k, v, do = _case(rng, "float32", b=2, nq=20, nk=16, hq=3, hk=3,
                        d=24, dv=40)
    _run_and_check(q, k, v, do, "float32", causal=True)


def test_deterministic_and_fa2_names(device, rng):
    q, k, v, do = _case(rng, "float32")
    o, lse = flashcl.attention(q, k, v, return_lse=True, scale=0.2,
                               window=(5, 5))
    first = flashcl.attention_backward(q, k, v, o, lse, do, scale=0.2,
                                       window=(5, 5))
    again = flashcl.attention_backward(q, k, v, o, lse, do,
                                       softmax_scale=0.2, window_size=(5, 5),
                                       nondeterministic=True)
    for a, b in zip(first, again):
        assert a.tobytes() == b.tobytes()
    with pytest.raises(flashcl.InvalidValueError):
        flashcl.attention_backward(q, k, v, o, lse, do, scale=0.2,
                                   softmax_scale=0.2)


def _poisoned_outs(q, k, v, with_dsinks):
    outs = [np.full(x.shape, POISON, x.dtype) for x in (q, k, v)]
    if with_dsinks:
        outs.append(np.full(q.shape[2], POISON, np.float32))
    return outs


def test_out_arrays_written(device, rng):
    q, k, v, do = _case(rng, "float16")
    sinks = rng.standard_normal(q.shape[2]).astype(np.float32)
    o, lse = flashcl.attention(q, k, v, sinks=sinks, return_lse=True)
    outs = _poisoned_outs(q, k, v, True)
    got = flashcl.attention_backward(q, k, v, o, lse, do, sinks=sinks,
                                     out=tuple(outs), return_dsinks=True)
    assert all(g is w for g, w in zip(got, outs))
    ref = reference_grads(q, k, v, do, sinks=sinks)
    for name, g, r in zip(("dq", "dk", "dv", "dsinks"), got, ref):
        _check(g, r, TOL["float16"], name)


def test_reference_backend(device, rng):
    """The CLBlast backward: the same gradients as the float64 NumPy one."""
    q, k, v, do = _case(rng, "float32")
    _run_and_check(q, k, v, do, "float32", causal=True, softcap=2.0,
                   backend="reference")


@pytest.mark.parametrize("bad", ["dsinks_without_sinks", "softcap",
                                 "lse_shape", "o_dtype"])
def test_bad_input_writes_nothing(device, rng, bad):
    q, k, v, do = _case(rng, "float32")
    o, lse = flashcl.attention(q, k, v, return_lse=True)
    kw, want = {}, flashcl.Error
    if bad == "dsinks_without_sinks":  # the library refuses it
        kw, want = {"return_dsinks": True}, flashcl.InvalidValueError
    elif bad == "softcap":
        kw, want = {"softcap": -1.0}, flashcl.InvalidValueError
    elif bad == "lse_shape":
        lse, want = lse[:, :1], flashcl.InvalidDimensionError
    else:
        o, want = o.astype(np.float16), flashcl.DtypeUnsupportedError
    outs = _poisoned_outs(q, k, v, kw.get("return_dsinks", False))
    with pytest.raises(want) as info:
        flashcl.attention_backward(q, k, v, o, lse, do, out=tuple(outs), **kw)
    assert str(info.value)
    for x in outs:
        assert np.all(x == POISON), "an output was written on an error"


def test_missing_lse(device, rng):
    q, k, v, do = _case(rng, "float32")
    o = flashcl.attention(q, k, v)
    with pytest.raises(flashcl.NullArgumentError, match="lse"):
        flashcl.attention_backward(q, k, v, o, None, do)


def test_pyopencl_matches_host(cl_queue, rng):
    import pyopencl.array as cla
    queue = cl_queue
    q, k, v, do = _case(rng, "float32")
    sinks = rng.standard_normal(q.shape[2]).astype(np.float32)
    o, lse = flashcl.attention(q, k, v, causal=True, sinks=sinks,
                               return_lse=True)
    host = flashcl.attention_backward(q, k, v, o, lse, do, causal=True,
                                      sinks=sinks, return_dsinks=True)
    dev_in = [cla.to_device(queue, np.ascontiguousarray(x))
              for x in (q, k, v, o, lse, do)]
    got = flashcl.attention_backward(*dev_in, causal=True, sinks=sinks,
                                     return_dsinks=True)
    for h, g in zip(host, got):
        assert isinstance(g, cla.Array)
        np.testing.assert_array_equal(g.get(), h)


def test_float64_lse_taken(device, cl_queue, rng):
    """A float64 forward returns a float64 lse; the backward takes it as it
    comes (converted to the float32 it reads, NumPy and PyOpenCL alike):
    the same gradients as from that lse cut to float32 by hand."""
    import pyopencl.array as cla
    if not device.fp64:
        pytest.skip("no cl_khr_fp64")
    q, k, v, do = _case(rng, "float64")
    o, lse = flashcl.attention(q, k, v, causal=True, return_lse=True)
    assert lse.dtype == np.float64
    want = flashcl.attention_backward(q, k, v, o, lse.astype(np.float32), do,
                                      causal=True)
    host = flashcl.attention_backward(q, k, v, o, lse, do, causal=True)
    dev_in = [cla.to_device(cl_queue, np.ascontiguousarray(x))
              for x in (q, k, v)]
    o_cl, lse_cl = flashcl.attention(*dev_in, causal=True, return_lse=True)
    assert lse_cl.dtype == np.float64
    got = flashcl.attention_backward(*dev_in, o_cl, lse_cl,
                                     cla.to_device(cl_queue, do), causal=True)
    for w, h, g in zip(want, host, got):
        np.testing.assert_array_equal(h, w)
        np.testing.assert_allclose(g.get(), w, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_varlen_matches_each_sequence(device, rng, backend):
    """A packed batch's gradients are each sequence's own: lengths of 0
    on either side included (zero gradients there), GQA, causal, sinks
    (d_sinks sums over the sequences)."""
    len_q, len_k = [5, 0, 17, 9], [11, 4, 13, 0]
    cu_q = np.concatenate([[0], np.cumsum(len_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(len_k)]).astype(np.int32)
    hq, hk, d = 4, 2, 32
    q = randn(rng, (cu_q[-1], hq, d), "float32")
    k = randn(rng, (cu_k[-1], hk, d), "float32")
    v = randn(rng, (cu_k[-1], hk, d), "float32")
    do = randn(rng, (cu_q[-1], hq, d), "float32")
    sinks = rng.standard_normal(hq).astype(np.float32)
    kw = dict(causal=True, sinks=sinks, backend=backend)
    lens = dict(max_seqlen_q=max(len_q), max_seqlen_k=max(len_k))
    o, lse = flashcl.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True,
                                      **lens, **kw)
    dq, dk, dv, dsinks = flashcl.attention_backward(
        q, k, v, o, lse, do, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        return_dsinks=True, **lens, **kw)
    want_dsinks = np.zeros(hq)
    for b in range(len(len_q)):
        rows = slice(cu_q[b], cu_q[b + 1])
        keys = slice(cu_k[b], cu_k[b + 1])
        if len_q[b] == 0 or len_k[b] == 0:  # no row, or rows see no key
            assert not np.any(dq[rows]) and not np.any(dk[keys])
            assert not np.any(dv[keys])
            continue
        ref = reference_grads(q[None, rows], k[None, keys], v[None, keys],
                              do[None, rows], causal=True, sinks=sinks)
        for name, g, r in zip(("dq", "dk", "dv"), (dq, dk, dv), ref):
            part = g[rows] if name == "dq" else g[keys]
            _check(part, r[0], TOL["float32"], f"sequence {b} {name}")
        want_dsinks += ref[3]
    _check(dsinks, want_dsinks, TOL["float32"], "dsinks")


def test_varlen_refuses_bias(device, rng):
    cu = np.array([0, 3], np.int32)
    x = randn(rng, (3, 2, 8), "float32")
    lse = np.zeros((2, 3), np.float32)
    with pytest.raises(flashcl.InvalidValueError):
        flashcl.attention_backward(x, x, x, x, lse, x, cu_seqlens_q=cu,
                                   cu_seqlens_k=cu, max_seqlen_q=3,
                                   max_seqlen_k=3, bias=np.zeros((1, 2, 3, 3),
                                                                 np.float32))
