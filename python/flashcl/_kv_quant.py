"""Quantized KV caches (issue 45) for NumPy: quantize_kv writes K or V the
way the kernels read it (docs/kv-quantization.md), dequantize_kv reads it
back in float64, and _cache_side turns a quantized cache and its scales
into descriptor fields for attention_kvcache."""
from __future__ import annotations

import numpy as np

from . import _lib
from ._errors import (DtypeUnsupportedError, InvalidDimensionError,
                      InvalidValueError, NullArgumentError)

KV_TYPES = {"e4m3": _lib.KV_FP8_E4M3, "e5m2": _lib.KV_FP8_E5M2,
            "int8": _lib.KV_INT8, "int4": _lib.KV_INT4}
GROUP = 32  # int4 values per scale and zero point
_FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def _kind(kind):
    if kind not in KV_TYPES:
        raise InvalidValueError(f"kind = {kind!r}: expected one of "
                                f"{', '.join(KV_TYPES)}")
    return kind


def fp8_values(kind):
    """The 256 values of an fp8 type's codes (NaN and infinities
    included), float64."""
    codes = np.arange(256)
    man_bits, bias = (3, 7) if _kind(kind) == "e4m3" else (2, 15)
    exponent = (codes >> man_bits) & ((1 << (7 - man_bits)) - 1)
    mantissa = (codes & ((1 << man_bits) - 1)).astype(np.float64)
    frac = mantissa / (1 << man_bits)
    value = np.where(exponent == 0, np.ldexp(frac, 1 - bias),
                     np.ldexp(1.0 + frac, exponent - bias))
    if kind == "e4m3":
        value[(codes & 0x7F) == 0x7F] = np.nan
    else:
        top = exponent == 31
        value[top] = np.where(mantissa[top] == 0, np.inf, np.nan)
    return np.where(codes & 0x80, -value, value)


def _fp8_encode(x, kind):
    """Nearest finite code, ties to the even code, saturating; NaN: 0x7f."""
    values = fp8_values(kind)
    keep = np.isfinite(values) & ~((values == 0) & (np.arange(256) >= 128))
    codes = np.arange(256)[keep]
    order = np.argsort(values[keep], kind="stable")
    v, c = values[keep][order], codes[order]
    xs = np.clip(np.nan_to_num(x, nan=0.0), v[0], v[-1])
    hi = np.clip(np.searchsorted(v, xs), 0, len(v) - 1)
    lo = np.clip(hi - 1, 0, len(v) - 1)
    d_hi, d_lo = np.abs(v[hi] - xs), np.abs(xs - v[lo])
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (c[hi] % 2 == 0))
    out = np.where(pick_hi, c[hi], c[lo]).astype(np.uint8)
    out[np.isnan(x)] = 0x7F
    return out


def quantize_kv(x, kind, scale=None, per_head=False):
    """K or V ``[..., heads_kv, head_dim]`` (float) quantized as the
    kernels read it: returns ``(codes, scale, zero)``.

    * "int8": codes int8 ``[..., head_dim]``, scale float32 ``[...]`` (one
      per row: max|x| / 127), zero None;
    * "int4": codes uint8 ``[..., head_dim / 2]`` (element 2i in the low
      nibble), scale and zero float32 ``[..., head_dim / 32]``;
    * "e4m3", "e5m2": codes uint8 ``[..., head_dim]``, scale float32
      ``[1]`` (per tensor) or ``[heads_kv]`` (per_head), from max|x| unless
      given, zero None.
    """
    _kind(kind)
    x = np.asarray(x, dtype=np.float32)
    d = x.shape[-1]
    if kind == "int8":
        amax = np.abs(x).max(axis=-1)
        s = (amax / np.float32(127)).astype(np.float32)
        safe = np.where(s > 0, s, 1)[..., None]
        q = np.where(s[..., None] > 0, np.rint(x / safe), 0)
        return np.clip(q, -127, 127).astype(np.int8), s, None
    if kind == "int4":
        if d % GROUP:
            raise InvalidDimensionError(f"head_dim = {d}: int4 needs a "
                                        f"multiple of {GROUP}")
        g = x.reshape(x.shape[:-1] + (d // GROUP, GROUP))
        lo, hi = g.min(axis=-1), g.max(axis=-1)
        s = np.where(hi > lo, (hi - lo) / np.float32(15), 1).astype(np.float32)
        z = (-lo / s).astype(np.float32)
        q = np.clip(np.rint(g / s[..., None] + z[..., None]), 0, 15)
        q = q.astype(np.uint8).reshape(x.shape[:-1] + (d // 2, 2))
        return (q[..., 0] | (q[..., 1] << 4)).astype(np.uint8), s, z
    if scale is None:
        axes = tuple(i for i in range(x.ndim) if not (per_head and
                                                      i == x.ndim - 2))
        amax = np.abs(x).max(axis=axes) if x.size else np.float32(1)
        scale = np.maximum(amax, 1e-30) / np.float32(_FP8_MAX[kind])
    scale = np.atleast_1d(np.asarray(scale, dtype=np.float32))
    bshape = (scale[:, None] if scale.size > 1 else scale[0])
    return _fp8_encode(x / bshape, kind), scale, None


def dequantize_kv(codes, kind, scale, zero=None):
    """The values the kernels read from a quantized K or V, float64."""
    _kind(kind)
    codes = np.asarray(codes)
    scale = np.asarray(scale, dtype=np.float64)
    if kind == "int8":
        return codes.astype(np.int8).astype(np.float64) * scale[..., None]
    if kind == "int4":
        q = np.stack([codes & 15, codes >> 4], axis=-1).reshape(
            codes.shape[:-1] + (codes.shape[-1] * 2,)).astype(np.float64)
        rep = lambda a: np.repeat(np.asarray(a, np.float64), GROUP, axis=-1)
        return rep(scale) * (q - rep(zero))
    values = fp8_values(kind)[codes.astype(np.uint8)]
    return values * (scale[:, None] if scale.size > 1 else scale[0])


def _scale_strides(kind, st, nd):
    """(batch, head, seq, dim) element strides of a scale array."""
    if kind == "int8":  # [rows, capacity, heads]
        return (st[0], st[2], st[1], 0)
    if kind == "int4":  # [rows, capacity, heads, groups]
        return (st[0], st[2], st[1], st[3])
    return (0, st[0] if nd else 0, 0, 0)  # fp8: [1] or [heads]


def cache_side(name, kind, cache, scale, zero, call, append, hkv):
    """Descriptor fields of one quantized side: (storage, per_head, cache
    tensor, scale tensor, zero tensor, head dim)."""
    _kind(kind)
    if np.dtype(cache.dtype) not in (np.dtype(np.uint8), np.dtype(np.int8)):
        raise DtypeUnsupportedError(f"{name} has dtype {cache.dtype}: a "
                                    f"{kind} cache holds bytes (uint8/int8)")
    if scale is None:
        raise NullArgumentError(f"{name[0]}_scale is None: a {kind} cache "
                                f"needs its scales")
    if (kind == "int4") != (zero is not None):
        raise InvalidValueError(f"{name[0]}_zero goes with int4 only")
    dim = int(np.shape(cache)[-1]) * (2 if kind == "int4" else 1)
    from ._inference import _bnhd
    tensor = call.tensor(name, cache, _bnhd, writable=append)
    scale_arr = scale if hasattr(scale, "dtype") else np.asarray(scale,
                                                                  np.float32)
    if np.dtype(scale_arr.dtype) != np.float32:
        raise DtypeUnsupportedError(f"{name[0]}_scale must be float32")
    nd = len(np.shape(scale_arr))
    per_head = kind in ("e4m3", "e5m2") and np.size(scale_arr) == hkv > 1
    strides = lambda st: _scale_strides(kind, st, nd)
    s_t = call.tensor(f"{name[0]}_scale", scale_arr, strides,
                      writable=append and kind in ("int8", "int4"))
    z_t = None
    if zero is not None:
        z_t = call.tensor(f"{name[0]}_zero", zero, strides, writable=append)
    return KV_TYPES[kind], per_head, tensor, s_t, z_t, dim
