"""Quantized KV caches (issue 45) from Python: flashcl.quantize_kv and
dequantize_kv against the rounding bound of each type, and
attention_kvcache on quantized caches against the float64 reference of
the dequantized cache (the kernel's own error, to fp32 accuracy), the
append included. Outputs are poisoned (NaN) before each call."""
import numpy as np
import pytest

import flashcl
from conftest import randn
from reference import attention_ref, rel_err

B, CAP, HKV, HQ, D = 2, 48, 2, 4, 64
LENGTHS = np.array([29, 40], np.int32)


def per_sequence(q, k, v, lengths, **kw):
    outs = [attention_ref(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n], **kw)[0]
            for b, n in enumerate(lengths)]
    return np.concatenate(outs)


@pytest.mark.parametrize("kind", ["e4m3", "e5m2", "int8", "int4"])
def test_quantize_round_trip(rng, kind):
    x = randn(rng, (3, 5, HKV, D))
    codes, scale, zero = flashcl.quantize_kv(x, kind)
    back = flashcl.dequantize_kv(codes, kind, scale, zero)
    err = np.abs(back - x)
    if kind == "int8":
        assert np.all(err <= 0.5001 * scale[..., None])
    elif kind == "int4":
        assert np.all(err <= 0.5001 * np.repeat(scale, 32, axis=-1) + 1e-6)
    else:
        man = 3 if kind == "e4m3" else 2
        bound = np.abs(x) * 2.0 ** -(man + 1) + scale[0] * 2.0 ** -14
        assert np.all(err <= bound * 1.0001)


@pytest.mark.parametrize("k_kind,v_kind", [("int8", "int4"),
                                           ("e4m3", "e5m2"),
                                           ("int4", None)])
def test_kvcache_quantized_matches_reference(rng, k_kind, v_kind):
    q = randn(rng, (B, 1, HQ, D))
    kc, vc = randn(rng, (B, CAP, HKV, D)), randn(rng, (B, CAP, HKV, D))
    args, k_ref, v_ref = {}, kc.astype(np.float64), vc.astype(np.float64)
    k_store, v_store = kc, vc
    if k_kind:
        k_store, s, z = flashcl.quantize_kv(kc, k_kind, per_head=True)
        args.update(k_storage=k_kind, k_scale=s, k_zero=z)
        k_ref = flashcl.dequantize_kv(k_store, k_kind, s, z)
    if v_kind:
        v_store, s, z = flashcl.quantize_kv(vc, v_kind)
        args.update(v_storage=v_kind, v_scale=s, v_zero=z)
        v_ref = flashcl.dequantize_kv(v_store, v_kind, s, z)
    out = np.full((B, 1, HQ, D), np.nan, np.float32)
    o = flashcl.attention_kvcache(q, k_store, v_store, LENGTHS, out=out,
                                  **args)
    want = per_sequence(q.astype(np.float64), k_ref, v_ref, LENGTHS)
    assert rel_err(o, want) < 1e-5


def check_appended(q, k8, ks, v4, vs, vz, k_new, v_new):
    """Asserts that the two rows appended after each sequence's LENGTHS
    hold k_new (int8) and v_new (int4) within half a quantization step;
    returns the float64 causal reference over the dequantized cache."""
    for b, n in enumerate(LENGTHS):
        rows = slice(n, n + 2)
        got_k = flashcl.dequantize_kv(k8[b, rows], "int8", ks[b, rows])
        assert np.all(np.abs(got_k - k_new[b]) <=
                      0.5001 * ks[b, rows][..., None])
        got_v = flashcl.dequantize_kv(v4[b, rows], "int4", vs[b, rows],
                                      vz[b, rows])
        assert np.all(np.abs(got_v - v_new[b]) <=
                      0.5001 * np.repeat(vs[b, rows], 32, axis=-1) + 1e-6)
    k_ref = flashcl.dequantize_kv(k8, "int8", ks)
    v_ref = flashcl.dequantize_kv(v4, "int4", vs, vz)
    return per_sequence(q.astype(np.float64), k_ref, v_ref, LENGTHS + 2,
                        causal=True)


def test_kvcache_quantized_append_in_place(rng):
    q = randn(rng, (B, 2, HQ, D))
    kc, vc = randn(rng, (B, CAP, HKV, D)), randn(rng, (B, CAP, HKV, D))
    k_new, v_new = randn(rng, (B, 2, HKV, D)), randn(rng, (B, 2, HKV, D))
    k8, ks, _ = flashcl.quantize_kv(kc, "int8")
    v4, vs, vz = flashcl.quantize_kv(vc, "int4")
    k8_before, ks_before = k8.copy(), ks.copy()
    o = flashcl.attention_kvcache(q, k8, v4, LENGTHS, k_new=k_new,
                                  v_new=v_new, causal=True, k_storage="int8",
                                  k_scale=ks, v_storage="int4", v_scale=vs,
                                  v_zero=vz)
    want = check_appended(q, k8, ks, v4, vs, vz, k_new, v_new)
    for b, n in enumerate(LENGTHS):
        assert np.array_equal(k8[b, :n], k8_before[b, :n])
        assert np.array_equal(ks[b, :n], ks_before[b, :n])
    assert rel_err(o, want) < 1e-5


def test_quantized_bad_arguments(rng):
    q = randn(rng, (B, 1, HQ, D))
    kc = randn(rng, (B, CAP, HKV, D))
    k8, ks, _ = flashcl.quantize_kv(kc, "int8")
    with pytest.raises(flashcl.NullArgumentError, match="k_scale"):
        flashcl.attention_kvcache(q, k8, kc, LENGTHS, k_storage="int8")
    with pytest.raises(flashcl.InvalidValueError, match="kind"):
        flashcl.quantize_kv(kc, "int3")
    with pytest.raises(flashcl.DtypeUnsupportedError, match="bytes"):
        flashcl.attention_kvcache(q, kc, kc, LENGTHS, k_storage="int8",
                                  k_scale=ks)


def test_kvcache_quantized_pyopencl_append(cl_queue, rng):
    """PyOpenCL arrays of codes, scales and zero points are used in place:
    the append quantizes the new rows on the device into them, and O
    matches the float64 reference of the dequantized cache read back."""
    import pyopencl.array as cla
    q = randn(rng, (B, 2, HQ, D))
    kc, vc = randn(rng, (B, CAP, HKV, D)), randn(rng, (B, CAP, HKV, D))
    k_new, v_new = randn(rng, (B, 2, HKV, D)), randn(rng, (B, 2, HKV, D))
    k8, ks, _ = flashcl.quantize_kv(kc, "int8")
    v4, vs, vz = flashcl.quantize_kv(vc, "int4")
    dev = [cla.to_device(cl_queue, x) for x in
           (q, k8, v4, ks, vs, vz, LENGTHS, k_new, v_new)]
    dq, dk, dv, dks, dvs, dvz, dlen, dkn, dvn = dev
    out = cla.to_device(cl_queue, np.full((B, 2, HQ, D), np.nan, np.float32))
    o, event = flashcl.attention_kvcache(
        dq, dk, dv, dlen, k_new=dkn, v_new=dvn, causal=True,
        k_storage="int8", k_scale=dks, v_storage="int4", v_scale=dvs,
        v_zero=dvz, out=out, return_event=True)
    event.wait()
    assert o is out
    k8, ks, v4, vs, vz = (x.get() for x in (dk, dks, dv, dvs, dvz))
    want = check_appended(q, k8, ks, v4, vs, vz, k_new, v_new)
    assert rel_err(o.get(), want) < 1e-5


def test_kvcache_quantized_pyopencl_views(cl_queue, rng):
    """fp8 caches as PyOpenCL views at a byte offset into a larger buffer,
    per-head K scales and a per-tensor V scale on the device."""
    import pyopencl.array as cla
    q = randn(rng, (B, 1, HQ, D))
    kc, vc = randn(rng, (B, CAP, HKV, D)), randn(rng, (B, CAP, HKV, D))
    k8, ks, _ = flashcl.quantize_kv(kc, "e4m3", per_head=True)
    v8, vs, _ = flashcl.quantize_kv(vc, "e5m2")
    assert ks.shape == (HKV,) and vs.shape == (1,)
    big_k = cla.to_device(cl_queue, np.concatenate([k8[:1] ^ 0x7F, k8]))
    big_v = cla.to_device(cl_queue, np.concatenate([v8[:1] ^ 0x7F, v8]))
    dk, dv = big_k[1:], big_v[1:]  # views: offset one cache row
    assert dk.offset > 0
    o = flashcl.attention_kvcache(
        cla.to_device(cl_queue, q), dk, dv, cla.to_device(cl_queue, LENGTHS),
        k_storage="e4m3", k_scale=cla.to_device(cl_queue, ks),
        v_storage="e5m2", v_scale=cla.to_device(cl_queue, vs))
    k_ref = flashcl.dequantize_kv(k8, "e4m3", ks)
    v_ref = flashcl.dequantize_kv(v8, "e5m2", vs)
    want = per_sequence(q.astype(np.float64), k_ref, v_ref, LENGTHS)
    assert rel_err(o.get(), want) < 1e-5
