"""flashcl.cp (mpi4py): one rank in this process (COMM_SELF), then 3 ranks
under mpirun (cp_ranks.py), each against the single-device call."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import flashcl
import flashcl.cp as cp
from conftest import randn
from reference import attention_ref


@pytest.mark.parametrize("mode", ["ring", "allgather"])
@pytest.mark.parametrize("kw", [dict(causal=True), dict(window=(8, 2))])
def test_one_rank_is_the_whole_call(rng, device, mode, kw):
    q, k, v = (randn(rng, (1, 32, 2, 16)) for _ in range(3))
    whole = flashcl.attention(q, k, v, device=device, **kw)
    got = cp.attention(MPI.COMM_SELF, q, k, v, mode=mode, device=device, **kw)
    np.testing.assert_allclose(got, whole, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("mode", ["ring", "allgather"])
@pytest.mark.parametrize("kw", [dict(causal=True), dict(window=(8, 2))])
def test_one_rank_backward_is_the_whole_call(rng, device, mode, kw):
    q, k, v, do = (randn(rng, (1, 32, 2, 16)) for _ in range(4))
    o, lse = flashcl.attention(q, k, v, device=device, return_lse=True, **kw)
    whole = flashcl.attention_backward(q, k, v, o, lse, do, device=device,
                                       **kw)
    got = cp.attention_backward(MPI.COMM_SELF, q, k, v, o, lse, do,
                                mode=mode, device=device, **kw)
    for g, w in zip(got, whole):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("mode", ["ring", "allgather"])
def test_one_rank_float64(rng, device, mode):
    """float64: the forward in float64 in both modes, its lse float64; the
    backward's sums in float64 (float32 sums miss 1e-12 by orders)."""
    if not device.fp64:
        pytest.skip("the device lacks cl_khr_fp64 (test_errors covers it)")
    q, k, v, do = (randn(rng, (1, 32, 2, 16), "float64") for _ in range(4))
    kw = dict(causal=True, sinks=np.array([0.5, -1.0], np.float32))
    o, lse = flashcl.attention(q, k, v, device=device, return_lse=True, **kw)
    assert lse.dtype == np.float64
    got, got_lse = cp.attention(MPI.COMM_SELF, q, k, v, mode=mode,
                                device=device, return_lse=True, **kw)
    assert got.dtype == np.float64 and got_lse.dtype == np.float64
    np.testing.assert_allclose(got, o, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_lse, lse, rtol=1e-12, atol=1e-12)
    whole = flashcl.attention_backward(q, k, v, o, lse, do, device=device,
                                       return_dsinks=True, **kw)
    got = cp.attention_backward(MPI.COMM_SELF, q, k, v, o, lse, do,
                                mode=mode, device=device, return_dsinks=True,
                                **kw)
    for g, w in zip(got[:3], whole[:3]):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[3], whole[3], rtol=1e-6, atol=1e-6)


FP64_TOL = 1e-10  # of max |o|: 1e-6 of float32's epsilon (1.2e-7)


@pytest.mark.parametrize("kw", [
    dict(causal=True, alibi_slopes=np.array([0.25, 0.0625], np.float32),
         sinks=np.array([0.5, -1.0], np.float32)),
    dict(window=(20, 9), softcap=4.0)])
def test_float64_ring_merges_through_float64_lse(rng, device, monkeypatch,
                                                  kw):
    """float64 in ring mode against the float64 NumPy oracle at 1e-10 of
    the output's scale: zigzag shards, so that a query chunk's partials
    (one per key chunk it sees) are merged by combine_partials. The same
    ring with its partial LSEs cut to float32 before the merge misses the
    tolerance by orders: the test sees the LSEs' precision."""
    if not device.fp64:
        pytest.skip("the device lacks cl_khr_fp64 (test_errors covers it)")
    assert FP64_TOL < np.finfo(np.float32).eps / 1000
    # logits of a few units: the LSEs' float32 rounding is visible
    q, k, v = (randn(rng, (2, 48, 2, 16), "float64", scale=2.0)
               for _ in range(3))
    want_o, want_lse = attention_ref(q, k, v, **kw)
    scale = np.abs(want_o).max()
    call = dict(mode="ring", layout="zigzag", device=device,
                return_lse=True, **kw)
    o, lse = cp.attention(MPI.COMM_SELF, q, k, v, **call)
    assert o.dtype == np.float64 and lse.dtype == np.float64
    err = np.abs(o - want_o).max() / scale
    assert err <= FP64_TOL, err
    assert np.abs(lse - want_lse).max() <= FP64_TOL * np.abs(want_lse).max()

    merges = []

    def float32_lse(o_part, lse_part, **kw2):
        merges.append(len(lse_part))
        cut = [x.astype(np.float32).astype(np.float64) for x in lse_part]
        return flashcl.combine_partials(o_part, cut, **kw2)
    monkeypatch.setattr(cp, "combine_partials", float32_lse)
    o32 = cp.attention(MPI.COMM_SELF, q, k, v, **call)[0]
    assert max(merges) >= 2  # some query chunk merged several partials
    err32 = np.abs(o32 - want_o).max() / scale
    assert err32 > 100 * FP64_TOL, err32


def test_float64_ring_refused_on_the_reference_backend(rng, device):
    """The reference backend writes float32 LSEs: a float64 ring merge
    through them would be float32-accurate, so it is refused."""
    if not device.fp64:
        pytest.skip("the device lacks cl_khr_fp64 (test_errors covers it)")
    q = randn(rng, (1, 32, 2, 16), "float64")
    with pytest.raises(flashcl.UnsupportedError, match="float32 LSEs"):
        cp.attention(MPI.COMM_SELF, q, q, q, causal=True, device=device,
                     backend="reference")
    got = cp.attention(MPI.COMM_SELF, q, q, q, causal=True, device=device,
                       backend="reference", mode="allgather")
    np.testing.assert_allclose(got, attention_ref(q, q, q, causal=True)[0],
                               rtol=1e-12, atol=1e-12)


def test_pyopencl_arrays(rng, device, cl_queue):
    """PyOpenCL shards give PyOpenCL results on their queue, equal to the
    NumPy call's."""
    import pyopencl.array as cla
    q, k, v, do = (randn(rng, (1, 32, 2, 16)) for _ in range(4))
    o, lse = cp.attention(MPI.COMM_SELF, q, k, v, causal=True,
                          return_lse=True, device=device)
    dev = [cla.to_device(cl_queue, x) for x in (q, k, v, o, lse, do)]
    o_cl, lse_cl = cp.attention(MPI.COMM_SELF, *dev[:3], causal=True,
                                return_lse=True, device=device)
    assert isinstance(o_cl, cla.Array) and o_cl.queue is cl_queue
    np.testing.assert_array_equal(o_cl.get(), o)
    np.testing.assert_array_equal(lse_cl.get(), lse)
    want = cp.attention_backward(MPI.COMM_SELF, q, k, v, o, lse, do,
                                 causal=True, device=device)
    got = cp.attention_backward(MPI.COMM_SELF, *dev, causal=True,
                                device=device)
    for g, w in zip(got, want):
        assert isinstance(g, cla.Array)
        np.testing.assert_array_equal(g.get(), w)


@pytest.mark.parametrize("mode", ["ring", "allgather"])
def test_one_rank_bhnd(rng, device, cl_queue, mode):
    """tensor_layout="bhnd": [batch, heads, rows, dim] shards, NumPy and
    PyOpenCL, forward and backward, against the whole bhnd call; o, dq, dk
    and dv come back in that order."""
    import pyopencl.array as cla
    q, k, v, do = (randn(rng, (1, 2, 32, 16)) for _ in range(4))
    kw = dict(causal=True, alibi_slopes=np.array([0.25, 0.0625], np.float32))
    o, lse = flashcl.attention(q, k, v, device=device, return_lse=True,
                               layout="bhnd", **kw)
    whole = flashcl.attention_backward(q, k, v, o, lse, do, device=device,
                                       layout="bhnd", **kw)
    call = dict(mode=mode, device=device, tensor_layout="bhnd", **kw)
    got_o, got_lse = cp.attention(MPI.COMM_SELF, q, k, v, return_lse=True,
                                  **call)
    np.testing.assert_allclose(got_o, o, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got_lse, lse, rtol=2e-5, atol=2e-5)
    got = cp.attention_backward(MPI.COMM_SELF, q, k, v, o, lse, do, **call)
    for g, w in zip(got, whole):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    dev = [cla.to_device(cl_queue, x) for x in (q, k, v, o, lse, do)]
    o_cl = cp.attention(MPI.COMM_SELF, *dev[:3], **call)
    assert isinstance(o_cl, cla.Array)
    np.testing.assert_array_equal(o_cl.get(), got_o)
    for g, w in zip(cp.attention_backward(MPI.COMM_SELF, *dev, **call), got):
        assert isinstance(g, cla.Array)
        np.testing.assert_array_equal(g.get(), w)


def test_layout_names(rng, device):
    """layout is the sharding; the axis order is tensor_layout, and a
    mix-up says so."""
    q = randn(rng, (1, 2, 32, 16))
    with pytest.raises(flashcl.InvalidValueError, match="tensor_layout"):
        cp.attention(MPI.COMM_SELF, q, q, q, layout="bhnd", device=device)
    with pytest.raises(flashcl.InvalidLayoutError, match="tensor_layout"):
        cp.attention(MPI.COMM_SELF, q, q, q, tensor_layout="bshd",
                     device=device)


def test_zigzag_rows():
    assert cp.shard_rows(16, 1, 4, "zigzag") == [(2, 2), (12, 2)]
    with pytest.raises(flashcl.InvalidDimensionError):
        cp.shard_rows(18, 0, 4, "zigzag")


def test_three_ranks():
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", POCL_MAX_PTHREAD_COUNT="1")
    script = Path(__file__).with_name("cp_ranks.py")
    run = subprocess.run(["mpirun", "-np", "3", "--oversubscribe",
                          sys.executable, str(script)],
                         capture_output=True, text=True, env=env, timeout=600,
                         cwd=Path(__file__).parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failed" in run.stdout, run.stdout
