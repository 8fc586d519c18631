"""flashcl.combine_partials against NumPy: the header's formula in float64
on random partials (rows with -inf LSEs included), and partial attention
over disjoint key ranges merged back into the attention over all keys.
Outputs are poisoned (NaN) before each call."""
import numpy as np
import pytest

import flashcl
from conftest import TOL, dtype_of, randn
from reference import attention_ref, rel_err


def combine_ref(o_part, lse_part):
    """include/flashcl.h's definition, float64, o_part [P, b, h, n, d]."""
    o_part = np.asarray(o_part, np.float64)
    lse_part = np.asarray(lse_part, np.float64)
    m = lse_part.max(axis=0)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    w = np.where(np.isfinite(lse_part), np.exp(lse_part - m_safe), 0.0)
    total = w.sum(axis=0)
    safe = np.where(total > 0, total, 1.0)
    with np.errstate(invalid="ignore"):
        weighted = np.where(w[..., None] > 0, o_part * w[..., None], 0.0)
    o = np.where(total[..., None] > 0, weighted.sum(axis=0) / safe[..., None],
                 0.0)
    lse = np.where(total > 0, m_safe + np.log(safe), -np.inf)
    return o, lse


def random_partials(rng, p, b, h, n, d):
    o_part = randn(rng, (p, b, h, n, d))
    lse_part = randn(rng, (p, b, h, n), scale=3.0)
    lse_part[0, 0, 0, 0] = -np.inf          # one partial saw no key
    lse_part[:, -1, -1, -1] = -np.inf       # a row that saw none at all
    o_part[0, 0, 0, 0] = np.nan             # not read: it weighs nothing
    o_part[:, -1, -1, -1] = np.nan
    return o_part, lse_part


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_formula(rng, dtype, layout, device):
    if dtype == "float64" and not device.fp64:
        pytest.skip("no cl_khr_fp64")
    p, b, h, n, d = 3, 2, 3, 5, 16
    o_part, lse_part = random_partials(rng, p, b, h, n, d)
    want_o, want_lse = combine_ref(o_part, lse_part)
    if layout == "bnhd":  # [P, b, n, h, d] and o [b, n, h, d]
        o_part = np.ascontiguousarray(o_part.transpose(0, 1, 3, 2, 4))
        want_o = want_o.transpose(0, 2, 1, 3)
    shape = want_o.shape
    out = np.full(shape, np.nan, dtype_of(dtype))
    o, lse = flashcl.combine_partials(o_part, lse_part, dtype=dtype_of(dtype),
                                      layout=layout, out=out, return_lse=True)
    assert o is out and lse.shape == (b, h, n)
    assert rel_err(o, want_o) < max(TOL[dtype], 2e-6)
    assert rel_err(lse, want_lse) < 1e-6


@pytest.mark.parametrize("partial", ["float16", "bfloat16"])
def test_sixteen_bit_partials(rng, partial, device):
    """16-bit partials (as a 16-bit attention returns o) read as they are:
    the result is the formula over the rounded partials, not over fp32
    ones read as 16-bit bits."""
    p, b, h, n, d = 4, 1, 2, 7, 24
    o_part, lse_part = random_partials(rng, p, b, h, n, d)
    o_part = o_part.transpose(0, 1, 3, 2, 4).astype(dtype_of(partial))
    want_o, want_lse = combine_ref(o_part.astype(np.float64).transpose(
        0, 1, 3, 2, 4), lse_part)
    out = np.full((b, n, h, d), np.nan, np.float32)
    o, lse = flashcl.combine_partials(o_part, lse_part, out=out,
                                      return_lse=True, device=device)
    assert rel_err(o, want_o.transpose(0, 2, 1, 3)) < 2e-6
    assert rel_err(lse, want_lse) < 1e-6


def test_merges_attention_over_key_chunks(rng):
    """Attention over keys [0, 40) and [40, 100), merged, is attention over
    all 100 keys (the partials as a list of NumPy arrays)."""
    b, nq, nk, h, d = 2, 6, 100, 2, 32
    q = randn(rng, (b, nq, h, d))
    k = randn(rng, (b, nk, h, d))
    v = randn(rng, (b, nk, h, d))
    parts = [flashcl.attention(q, k[:, a:z], v[:, a:z], return_lse=True)
             for a, z in ((0, 40), (40, nk))]
    out = np.full((b, nq, h, d), np.nan, np.float32)
    o, lse = flashcl.combine_partials([o for o, _ in parts],
                                      [lse for _, lse in parts], out=out,
                                      return_lse=True)
    want_o, want_lse = attention_ref(q, k, v)
    assert rel_err(o, want_o) < TOL["float32"]
    assert rel_err(lse, want_lse) < 1e-5


def test_pyopencl_views(cl_queue, rng):
    """Partials as a strided view of a larger device array (every other
    partial), used in place."""
    import pyopencl.array as cla
    p, b, h, n, d = 2, 1, 2, 3, 8
    o_all, lse_all = random_partials(rng, 2 * p, b, h, n, d)
    o_part = o_all.transpose(0, 1, 3, 2, 4).copy()  # bnhd
    do = cla.to_device(cl_queue, o_part)
    dl = cla.to_device(cl_queue, lse_all)
    o, event = flashcl.combine_partials(do[::2], dl[::2], return_event=True)
    event.wait()
    want_o, _ = combine_ref(o_all[::2], lse_all[::2])
    assert rel_err(o.get(), want_o.transpose(0, 2, 1, 3)) < 2e-6
    with pytest.raises(flashcl.DtypeUnsupportedError, match="o_partial"):
        flashcl.combine_partials(do.astype(np.float64), dl)


@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_float64_merge(rng, device, cl_queue, layout):
    """float64 partials with dtype=float64 merge in float64 through their
    float64 LSEs (NumPy and PyOpenCL, outputs poisoned): o and lse within
    1e-12 of the formula, lse float64; the same partials with their LSEs
    cut to float32 miss that by orders. float32 partials keep the float32
    merge and lse."""
    import pyopencl.array as cla
    if not device.fp64:
        pytest.skip("no cl_khr_fp64")
    p, b, h, n, d = 3, 2, 3, 5, 16
    o_part, lse_part = random_partials(rng, p, b, h, n, d)
    o_part, lse_part = o_part.astype(np.float64), lse_part.astype(np.float64)
    lse_part += rng.standard_normal(lse_part.shape) * 1e-3  # not float32
    want_o, want_lse = combine_ref(o_part, lse_part)
    if layout == "bnhd":
        o_part = np.ascontiguousarray(o_part.transpose(0, 1, 3, 2, 4))
        want_o = want_o.transpose(0, 2, 1, 3)
    out = np.full(want_o.shape, np.nan)
    o, lse = flashcl.combine_partials(list(o_part), lse_part,
                                      dtype=np.float64, layout=layout,
                                      out=out, return_lse=True, device=device)
    assert o is out and lse.dtype == np.float64
    assert rel_err(o, want_o) <= TOL["float64"]
    assert rel_err(lse, want_lse) <= TOL["float64"]
    cut = flashcl.combine_partials(o_part, lse_part.astype(np.float32),
                                   dtype=np.float64, layout=layout,
                                   device=device)  # float64 o: float64 merge
    assert rel_err(cut, want_o) > 1000 * TOL["float64"]

    do, dl = (cla.to_device(cl_queue, x) for x in (o_part, lse_part))
    out_cl = cla.to_device(cl_queue, np.full(want_o.shape, np.nan))
    o_cl, lse_cl = flashcl.combine_partials(do, dl, dtype=np.float64,
                                            layout=layout, out=out_cl,
                                            return_lse=True)
    assert o_cl is out_cl and lse_cl.dtype == np.float64
    assert rel_err(o_cl.get(), want_o) <= TOL["float64"]
    assert rel_err(lse_cl.get(), want_lse) <= TOL["float64"]
    with pytest.raises(flashcl.DtypeUnsupportedError, match="lse_partial"):
        flashcl.combine_partials(do, dl.astype(np.float32), dtype=np.float64,
                                 layout=layout)
    _, lse32 = flashcl.combine_partials(o_part.astype(np.float32),
                                        lse_part.astype(np.float32),
                                        dtype=np.float64, layout=layout,
                                        return_lse=True, device=device)
    assert lse32.dtype == np.float32


def test_bad_arguments(rng):
    o_part, lse_part = random_partials(rng, 2, 1, 2, 3, 8)
    o_part = o_part.transpose(0, 1, 3, 2, 4)  # bnhd, the default
    flashcl.combine_partials(o_part, lse_part)  # the good call runs
    with pytest.raises(flashcl.InvalidDimensionError, match="lse_partial"):
        flashcl.combine_partials(o_part, lse_part[:1])
    with pytest.raises(flashcl.InvalidDimensionError, match="o_partial"):
        flashcl.combine_partials(o_part[0], lse_part)
    with pytest.raises(flashcl.DtypeUnsupportedError, match="dtype"):
        flashcl.combine_partials(o_part, lse_part, dtype=np.int32)
    with pytest.raises(flashcl.InvalidLayoutError, match="layout"):
        flashcl.combine_partials(o_part, lse_part, layout="nhd")
    # the library's own check: at least one partial
    with pytest.raises(flashcl.InvalidDimensionError, match="num_partials"):
        flashcl.combine_partials(o_part[:0], lse_part[:0])
