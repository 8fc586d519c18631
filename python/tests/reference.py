"""float64 NumPy reference, written from the definition in
include/flashcl.h and the README's "Semantics":

    s[b,h,i,j] = scale * q[b,h,i] . k[b,h//g,j]
    s <- softcap * tanh(s / softcap)            (softcap > 0)
    s <- s - slope[b,h] * |i + diag - j|        (ALiBi)
    s <- s + bias[b,h,i,j]                      (additive bias)
    keys with mask == 0, outside the causal band (j <= i + diag) or the
    window (i + diag - left <= j <= i + diag + right) are removed
    o = softmax_j(s) @ v, lse = log(sum_j exp(s) [+ exp(sink[h])])

diag = seqlen_k - seqlen_q (bottom_right), 0 (top_left) or q_position -
k_position (absolute, positions=(q_position, k_position)). A row that sees
no key: o = 0, lse = -inf (= sink with sinks).
"""
import numpy as np


def to_bhnd(x, layout):
    x = np.asarray(x).astype(np.float64)
    return x if layout == "bhnd" else x.transpose(0, 2, 1, 3)


def from_bhnd(x, layout):
    return x if layout == "bhnd" else x.transpose(0, 2, 1, 3)


def attention_ref(q, k, v, *, layout="bnhd", causal=False,
                  causal_align="bottom_right", scale=None, window=(-1, -1),
                  softcap=0.0, alibi_slopes=None, bias=None, mask=None,
                  sinks=None, positions=(0, 0)):
    q, k, v = (to_bhnd(x, layout) for x in (q, k, v))
    b, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    g = hq // hkv
    k = np.repeat(k, g, axis=1)
    v = np.repeat(v, g, axis=1)
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    s = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    diag = {"bottom_right": nk - nq, "top_left": 0,
            "absolute": positions[0] - positions[1]}[causal_align]
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    if alibi_slopes is not None:
        slopes = np.asarray(alibi_slopes, np.float64)
        slopes = np.broadcast_to(slopes, (b, hq))[:, :, None, None]
        s = s - slopes * np.abs(i + diag - j)
    if bias is not None:
        s = s + np.broadcast_to(np.asarray(bias).astype(np.float64), s.shape)
    visible = np.ones((b, hq, nq, nk), bool)
    if mask is not None:
        visible &= np.broadcast_to(np.asarray(mask) != 0, visible.shape)
    if causal:
        visible &= j <= i + diag
    left, right = window
    if (left, right) != (-1, -1):
        if left >= 0:
            visible &= j >= i + diag - left
        if causal:
            right = 0 if right < 0 else min(right, 0)
        if right >= 0:
            visible &= j <= i + diag + right
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, initial=-np.inf, keepdims=True)
    if sinks is not None:
        sink = np.asarray(sinks, np.float64)[None, :, None, None]
        m = np.maximum(m, sink)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    denom = p.sum(axis=-1, keepdims=True)
    if sinks is not None:
        denom = denom + np.exp(sink - m_safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = np.where(denom > 0, (p @ v) / np.where(denom > 0, denom, 1), 0.0)
        lse = np.where(denom > 0, np.log(np.where(denom > 0, denom, 1)) + m_safe,
                       -np.inf)
    return from_bhnd(o, layout), lse[..., 0]


def rel_err(got, want):
    """max |got - want| / max |want| (finite entries must match exactly
    where want is +-inf)."""
    got = np.asarray(got).astype(np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert not np.isnan(got).any(), "NaN in the result"
    inf = ~np.isfinite(want)
    assert np.array_equal(got[inf], want[inf]), "infinite entries differ"
    fin = ~inf
    if not fin.any():
        return 0.0
    scale = max(np.abs(want[fin]).max(), 1e-30)
    return float(np.abs(got[fin] - want[fin]).max() / scale)
