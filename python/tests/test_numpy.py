"""The host path: NumPy arrays in, NumPy arrays out, against the float64
reference."""
import numpy as np
import pytest

import flashcl
from conftest import TOL, dtype_of, randn
from reference import attention_ref, rel_err


def shapes(layout, b, hq, hkv, nq, nk, d, dv=None):
    dv = d if dv is None else dv
    if layout == "bnhd":
        return (b, nq, hq, d), (b, nk, hkv, d), (b, nk, hkv, dv)
    return (b, hq, nq, d), (b, hkv, nk, d), (b, hkv, nk, dv)


def make(rng, dtype, layout, *dims, **kw):
    return tuple(randn(rng, s, dtype) for s in shapes(layout, *dims, **kw))


def check(dtype, q, k, v, backend="auto", **kw):
    """Run flashcl into a NaN-poisoned out array and compare o and lse."""
    o_ref, lse_ref = attention_ref(q, k, v, **kw)
    out = np.full(o_ref.shape, np.nan, dtype_of(dtype))
    o, lse = flashcl.attention(q, k, v, return_lse=True, out=out,
                               backend=backend, **kw)
    assert o is out and o.dtype == dtype_of(dtype)
    # a float64 call's LSE is float64 (the reference backend's float32)
    lse64 = dtype == "float64" and backend != "reference"
    assert lse.dtype == (np.float64 if lse64 else np.float32)
    assert lse.shape == lse_ref.shape
    assert rel_err(o, o_ref) <= TOL[dtype], rel_err(o, o_ref)
    assert rel_err(lse, lse_ref) <= (TOL[dtype] if lse64
                                     else max(TOL[dtype], 1e-6))
    return o, lse


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_dtypes_and_layouts(rng, dtype, layout):
    q, k, v = make(rng, dtype, layout, 2, 4, 4, 33, 47, 64)
    check(dtype, q, k, v, layout=layout)


@pytest.mark.parametrize("hq,hkv", [(8, 2), (6, 1), (4, 4)])
def test_gqa_mqa_from_shapes(rng, hq, hkv):
    q, k, v = make(rng, "float32", "bnhd", 2, hq, hkv, 17, 29, 32)
    check("float32", q, k, v, causal=True)


def test_default_call_returns_o_only(rng):
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 2, 16, 16, 32)
    o = flashcl.attention(q, k, v)
    assert isinstance(o, np.ndarray) and o.shape == q.shape
    assert rel_err(o, attention_ref(q, k, v)[0]) <= TOL["float32"]


@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
@pytest.mark.parametrize("nq,nk", [(40, 64), (64, 40)])
def test_causal_alignments(rng, align, nq, nk):
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 2, nq, nk, 32)
    check("float32", q, k, v, causal=True, causal_align=align)


@pytest.mark.parametrize("scale", [0.0, 0.3, -0.7])
def test_explicit_scale(rng, scale):
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 2, 24, 24, 32)
    o, _ = check("float32", q, k, v, scale=scale)
    if scale == 0.0:  # exactly zero: uniform weights, the mean of v
        mean = v.astype(np.float64).mean(axis=1, keepdims=True)
        assert rel_err(o, np.broadcast_to(mean, o.shape)) <= 1e-5


def test_scale_none_is_default(rng):
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 2, 24, 24, 32)
    a = flashcl.attention(q, k, v)
    b = flashcl.attention(q, k, v, scale=1 / np.sqrt(32))
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("window", [(8, 0), (5, 3), (-1, 4), (6, -1)])
@pytest.mark.parametrize("causal", [False, True])
def test_window(rng, window, causal):
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 1, 48, 56, 32)
    check("float32", q, k, v, window=window, causal=causal)


def test_softcap(rng):
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 2, 32, 32, 32)
    check("float32", q * 4, k * 4, v, softcap=5.0)


@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi(rng, per_batch):
    q, k, v = make(rng, "float32", "bnhd", 2, 4, 2, 20, 36, 32)
    shape = (2, 4) if per_batch else (4,)
    slopes = rng.uniform(0.05, 0.5, shape).astype(np.float32)
    check("float32", q, k, v, alibi_slopes=slopes, causal=per_batch)


@pytest.mark.parametrize("bias_shape", [(2, 4, 20, 36), (20, 36), (1, 4, 1, 36)])
@pytest.mark.parametrize("bias_dtype", ["float32", "float16"])
def test_bias(rng, bias_shape, bias_dtype):
    q, k, v = make(rng, "float32", "bhnd", 2, 4, 2, 20, 36, 32)
    bias = randn(rng, bias_shape, bias_dtype)
    check("float32", q, k, v, layout="bhnd", bias=bias)


def test_bias_minus_inf_masks(rng):
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 2, 16, 24, 32)
    bias = np.zeros((16, 24), np.float32)
    bias[:, ::3] = -np.inf
    check("float32", q, k, v, bias=bias)


@pytest.mark.parametrize("mask_dtype", [np.bool_, np.uint8])
def test_mask(rng, mask_dtype):
    q, k, v = make(rng, "float32", "bnhd", 2, 2, 2, 24, 30, 32)
    mask = (rng.uniform(size=(2, 1, 24, 30)) > 0.3).astype(mask_dtype)
    mask[0, 0, 5, :] = 0  # a row that sees nothing: o = 0, lse = -inf
    o, lse = check("float32", q, k, v, mask=mask)
    assert np.all(o[0, 5] == 0) and np.all(np.isneginf(lse[0, :, 5]))


def test_sinks(rng):
    q, k, v = make(rng, "float32", "bnhd", 1, 4, 2, 24, 24, 32)
    sinks = rng.standard_normal(4).astype(np.float32)
    check("float32", q, k, v, sinks=sinks, causal=True)


def test_head_dim_v(rng):
    q, k, v = make(rng, "float32", "bnhd", 2, 4, 2, 19, 27, 64, dv=32)
    o, _ = check("float32", q, k, v)
    assert o.shape == (2, 19, 4, 32)


def test_all_variants_together_bf16(rng):
    q, k, v = make(rng, "bfloat16", "bnhd", 1, 4, 2, 32, 48, 64)
    check("bfloat16", q, k, v, causal=True, window=(20, 0), softcap=30.0,
          alibi_slopes=np.full(4, 0.1, np.float32),
          bias=randn(rng, (32, 48), "float32"),
          mask=rng.uniform(size=(32, 48)) > 0.1,
          sinks=np.zeros(4, np.float32), scale=0.2)


def test_reference_backend(rng):
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 1, 24, 40, 32)
    check("float32", q, k, v, causal=True, backend="reference")


@pytest.mark.parametrize("backend", ["auto", "fused", "reference"])
def test_float64_lse(rng, device, backend):
    """float64: the LSE in float64 at the float64 tolerance (1e-12, far
    below float32's 1.2e-7 epsilon), variants and an empty key range
    included; the reference backend writes float32 (its LSE's only
    storage)."""
    if not device.fp64:
        pytest.skip("no cl_khr_fp64")
    q, k, v = make(rng, "float64", "bnhd", 2, 4, 2, 32, 48, 32)
    q *= 2.0  # logits of a few units: a float32 LSE misses 1e-12
    _, lse = check("float64", q, k, v, backend=backend, causal=True,
                   window=(20, 0), alibi_slopes=randn(rng, (4,), "float32"),
                   bias=randn(rng, (32, 48), "float32"),
                   mask=rng.uniform(size=(32, 48)) > 0.1,
                   sinks=np.array([0.5, -1.0, 0.0, 2.0], np.float32))
    if backend != "reference":
        ref = attention_ref(q, k, v)[1]
        lse = flashcl.attention(q, k, v, return_lse=True, backend=backend)[1]
        assert rel_err(lse, ref) <= TOL["float64"]
        assert rel_err(lse.astype(np.float32), ref) > 1000 * TOL["float64"]
    _, lse = check("float64", q, k[:, :0], v[:, :0], backend=backend)
    assert np.all(lse == -np.inf)


def test_non_contiguous_inputs(rng):
    """Views (transposes, slices) are made C-contiguous before the call."""
    base = randn(rng, (2, 4, 40, 64))  # [b, h, n, 2d]
    q = base[..., :32].transpose(0, 2, 1, 3)  # bnhd, not contiguous
    k = base[..., 32:].transpose(0, 2, 1, 3)
    v = base[:, :, ::-1, 16:48].transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous
    check("float32", q, k, v)


def test_array_likes_are_taken(rng):
    q, k, v = make(rng, "float64", "bnhd", 1, 1, 1, 4, 4, 8)
    o = flashcl.attention(q.tolist(), k.tolist(), v.tolist())
    assert rel_err(o, attention_ref(q, k, v)[0]) <= TOL["float64"]


def test_seqlen_k_zero(rng):
    q = randn(rng, (1, 8, 2, 32))
    k = v = np.zeros((1, 0, 2, 32), np.float32)
    o, lse = flashcl.attention(q, k, v, return_lse=True,
                               out=np.full(q.shape, np.nan, np.float32))
    assert np.all(o == 0) and np.all(np.isneginf(lse))


def test_empty_batch(rng):
    q = k = v = np.zeros((0, 8, 2, 32), np.float32)
    o, lse = flashcl.attention(q, k, v, return_lse=True)
    assert o.shape == (0, 8, 2, 32) and lse.shape == (0, 2, 8)


def test_device_choice_reuses_one_context(device, rng):
    from flashcl import _devices
    q, k, v = make(rng, "float32", "bnhd", 1, 2, 2, 16, 16, 32)
    want = flashcl.attention(q, k, v)
    for choice in (None, device, device.spec, device.index, device.name):
        np.testing.assert_array_equal(flashcl.attention(q, k, v, device=choice), want)
    handles = {_devices.context_for(c).handle
               for c in (None, device, device.spec, device.index, device.name)}
    assert len(handles) == 1


def test_devices_list(device):
    found = flashcl.devices()
    assert [d.index for d in found] == list(range(len(found)))
    assert device.name and device.platform and device.flashcl_path
    assert device.type in ("CPU", "GPU", "other")
    assert device.compute_units >= 1 and device.global_mem_bytes > 0
    assert f"device {device.index} ({device.spec})" in str(device)
