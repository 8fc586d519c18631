"""Errors: the exception class, its status, and a message that names the
problem; a refused call writes nothing (poisoned out arrays stay NaN)."""
import numpy as np
import pytest

import flashcl
from flashcl import Status
from conftest import randn


@pytest.fixture
def qkv(rng):
    q = randn(rng, (1, 16, 4, 32))
    k = randn(rng, (1, 24, 2, 32))
    v = randn(rng, (1, 24, 2, 32))
    return q, k, v


def raises(cls, status, *words, call):
    out = np.full((1, 16, 4, 32), np.nan, np.float32)
    with pytest.raises(cls) as info:
        call(out)
    err = info.value
    assert isinstance(err, flashcl.Error)
    assert err.status == status and type(err).status == status
    for word in words:
        assert word in err.message, (word, err.message)
    assert str(err).startswith(err.status_name + ": ")
    assert np.isnan(out).all(), "a refused call wrote its output"
    return err


def test_wrong_ndim(qkv):
    q, k, v = qkv
    raises(flashcl.InvalidDimensionError, Status.INVALID_DIMENSION, "q",
           "3-D", "4-D", call=lambda out: flashcl.attention(q[0], k, v, out=out))


def test_batch_mismatch(qkv):
    q, k, v = qkv
    k2 = np.concatenate([k, k])
    raises(flashcl.InvalidDimensionError, Status.INVALID_DIMENSION, "k",
           "batch 2", "batch 1", call=lambda out: flashcl.attention(q, k2, v, out=out))


def test_head_dim_mismatch(qkv):
    q, k, v = qkv
    raises(flashcl.InvalidDimensionError, Status.INVALID_DIMENSION,
           "head_dim 16", "head_dim 32",
           call=lambda out: flashcl.attention(q, k[..., :16], v, out=out))


def test_kv_seqlen_mismatch(qkv):
    q, k, v = qkv
    raises(flashcl.InvalidDimensionError, Status.INVALID_DIMENSION, "v",
           "seqlen 20", "seqlen 24",
           call=lambda out: flashcl.attention(q, k, v[:, :20], out=out))


def test_layout_changes_the_reading(qkv):
    q, k, v = qkv  # bnhd arrays read as bhnd: seqlen and heads swap
    raises(flashcl.InvalidDimensionError, Status.INVALID_DIMENSION, "bhnd",
           call=lambda out: flashcl.attention(q, k, v[:, :, :1], layout="bhnd", out=out))


def test_dtype_mismatch(qkv):
    q, k, v = qkv
    raises(flashcl.DtypeUnsupportedError, Status.DTYPE_UNSUPPORTED,
           "float32", "float16", "one dtype",
           call=lambda out: flashcl.attention(q, k.astype(np.float16), v, out=out))


def test_dtype_unsupported(qkv):
    q, k, v = qkv
    i = [x.astype(np.int32) for x in qkv]
    err = raises(flashcl.DtypeUnsupportedError, Status.DTYPE_UNSUPPORTED,
                 "int32", call=lambda out: flashcl.attention(*i, out=out))
    assert isinstance(err, TypeError)


def test_head_grouping_from_the_library(rng):
    q = randn(rng, (1, 16, 4, 32))
    k = v = randn(rng, (1, 16, 3, 32))
    raises(flashcl.HeadGroupingError, Status.HEAD_GROUPING, "heads_q = 4",
           "heads_kv = 3", call=lambda out: flashcl.attention(q, k, v, out=out))


def test_head_dim_unsupported_from_the_library(rng):
    q = randn(rng, (1, 4, 1, 300))
    with pytest.raises(flashcl.HeadDimUnsupportedError) as info:
        flashcl.attention(q, q, q)
    assert info.value.status == Status.HEAD_DIM_UNSUPPORTED
    assert "300" in info.value.message and "head_dim" in info.value.message


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_none_input(qkv, which):
    args = dict(zip("qkv", qkv))
    args[which] = None
    raises(flashcl.NullArgumentError, Status.NULL_ARGUMENT, f"{which} is None",
           call=lambda out: flashcl.attention(args["q"], args["k"], args["v"], out=out))


def test_bad_layout(qkv):
    raises(flashcl.InvalidLayoutError, Status.INVALID_LAYOUT, "'nhbd'", "bnhd",
           call=lambda out: flashcl.attention(*qkv, layout="nhbd", out=out))


def test_bad_causal_align(qkv):
    raises(flashcl.InvalidValueError, Status.INVALID_VALUE, "causal_align",
           call=lambda out: flashcl.attention(*qkv, causal=True,
                                              causal_align="left", out=out))


@pytest.mark.parametrize("window", [(3,), "ab", (1.5, 2)])
def test_bad_window_type(qkv, window):
    raises(flashcl.InvalidValueError, Status.INVALID_VALUE, "window",
           call=lambda out: flashcl.attention(*qkv, window=window, out=out))


def test_window_bound_from_the_library(qkv):
    raises(flashcl.InvalidValueError, Status.INVALID_VALUE, "window_left",
           call=lambda out: flashcl.attention(*qkv, window=(-5, 0), out=out))


def test_nan_scale_from_the_library(qkv):
    raises(flashcl.InvalidValueError, Status.INVALID_VALUE, "scale",
           call=lambda out: flashcl.attention(*qkv, scale=float("nan"), out=out))


def test_softcap_range_from_the_library(qkv):
    raises(flashcl.InvalidValueError, Status.INVALID_VALUE, "softcap",
           call=lambda out: flashcl.attention(*qkv, softcap=-1.0, out=out))


def test_bad_backend(qkv):
    raises(flashcl.InvalidValueError, Status.INVALID_VALUE, "backend",
           call=lambda out: flashcl.attention(*qkv, backend="cuda", out=out))


def test_unknown_device(qkv):
    with pytest.raises(flashcl.DeviceNotFoundError) as info:
        flashcl.attention(*qkv, device="no-such-device-xyz")
    err = info.value
    assert err.status == Status.DEVICE_NOT_FOUND
    assert "no-such-device-xyz" in err.message
    assert flashcl.devices()[0].name in err.message  # lists the devices


def test_bad_device_type(qkv):
    raises(flashcl.InvalidValueError, Status.INVALID_VALUE, "device",
           call=lambda out: flashcl.attention(*qkv, device=1.5, out=out))


def test_out_wrong_shape(qkv):
    q, k, v = qkv
    with pytest.raises(flashcl.InvalidDimensionError) as info:
        flashcl.attention(q, k, v, out=np.empty((1, 16, 4, 16), np.float32))
    assert "out has shape" in info.value.message


def test_out_wrong_dtype(qkv):
    with pytest.raises(flashcl.DtypeUnsupportedError) as info:
        flashcl.attention(*qkv, out=np.empty((1, 16, 4, 32), np.float64))
    assert "out has dtype float64" in info.value.message


def test_out_not_contiguous(qkv):
    big = np.full((1, 16, 4, 64), np.nan, np.float32)
    with pytest.raises(flashcl.InvalidLayoutError) as info:
        flashcl.attention(*qkv, out=big[..., :32])
    assert "C-contiguous" in info.value.message
    assert np.isnan(big).all()


def test_mask_dtype(qkv):
    raises(flashcl.DtypeUnsupportedError, Status.DTYPE_UNSUPPORTED, "mask",
           "float32", "bias=",
           call=lambda out: flashcl.attention(*qkv, mask=np.ones((16, 24), np.float32),
                                              out=out))


def test_bias_shape(qkv):
    raises(flashcl.InvalidDimensionError, Status.INVALID_DIMENSION, "bias",
           "[1, 4, 16, 24]",
           call=lambda out: flashcl.attention(*qkv, bias=np.zeros((16, 23), np.float32),
                                              out=out))


def test_alibi_shape(qkv):
    raises(flashcl.InvalidDimensionError, Status.INVALID_DIMENSION,
           "alibi_slopes", "[heads_q] = [4]",
           call=lambda out: flashcl.attention(*qkv, alibi_slopes=np.zeros(2, np.float32),
                                              out=out))


def test_sinks_shape(qkv):
    raises(flashcl.InvalidDimensionError, Status.INVALID_DIMENSION, "sinks",
           call=lambda out: flashcl.attention(*qkv, sinks=np.zeros((1, 4), np.float32),
                                              out=out))


def test_wait_for_needs_pyopencl_inputs(qkv):
    raises(flashcl.InvalidValueError, Status.INVALID_VALUE, "wait_for",
           call=lambda out: flashcl.attention(*qkv, wait_for=[object()], out=out))


def test_context_still_works_after_errors(qkv):
    with pytest.raises(flashcl.HeadGroupingError):
        flashcl.attention(qkv[0], qkv[1][:, :, :1].repeat(3, 2), qkv[2][:, :, :1].repeat(3, 2))
    o = flashcl.attention(*qkv)
    assert np.isfinite(o).all()
