"""Absolute positions (causal_align="absolute", positions=(q_position,
k_position)): the chunks of one causal sequence, each computed with its
positions and merged by combine_partials, give the whole call; the
forward and the backward of one chunk against float64 references written
here (tests/reference.py, test_backward.reference_grads)."""
import numpy as np
import pytest

import flashcl
from conftest import randn
from reference import attention_ref
from test_backward import reference_grads


@pytest.mark.parametrize("chunks,causal,window,alibi", [
    (2, True, (-1, -1), False),
    (4, True, (-1, -1), True),
    (3, False, (10, 4), False),
])
def test_chunks_merge_to_the_whole_call(rng, device, chunks, causal, window,
                                        alibi):
    n, h, d = 48, 2, 16
    q, k, v = (randn(rng, (1, n, h, d)) for _ in range(3))
    slopes = np.array([0.25, 0.0625], np.float32) if alibi else None
    kw = dict(causal=causal, window=window, alibi_slopes=slopes,
              device=device)
    whole = flashcl.attention(q, k, v, **kw)
    size = n // chunks
    rows = []
    for c in range(chunks):
        qc = q[:, c * size:(c + 1) * size]
        parts, lses = [], []
        for p in range(chunks):
            kc = (c + p) % chunks  # a ring: every chunk starts elsewhere
            o, lse = flashcl.attention(
                qc, k[:, kc * size:(kc + 1) * size],
                v[:, kc * size:(kc + 1) * size], causal_align="absolute",
                positions=(c * size, kc * size), return_lse=True, **kw)
            parts.append(o)
            lses.append(lse)
        rows.append(flashcl.combine_partials(parts, lses, device=device))
    np.testing.assert_allclose(np.concatenate(rows, axis=1), whole,
                               rtol=2e-5, atol=2e-5)


def test_chunk_against_reference(rng, device):
    q = randn(rng, (1, 20, 2, 16))
    k, v = (randn(rng, (1, 33, 1, 16)) for _ in range(2))
    slopes = np.array([0.5, 0.25], np.float32)
    for positions in ((40, 30), (0, 25), (90, 0)):
        o, lse = flashcl.attention(q, k, v, causal=True,
                                   causal_align="absolute",
                                   positions=positions, alibi_slopes=slopes,
                                   return_lse=True, device=device)
        o_ref, lse_ref = attention_ref(q, k, v, causal=True,
                                       causal_align="absolute",
                                       positions=positions,
                                       alibi_slopes=slopes)
        np.testing.assert_allclose(o, o_ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lse, lse_ref, rtol=1e-5, atol=1e-5)


def test_backward_of_a_chunk(rng, device):
    q, do = (randn(rng, (1, 30, 2, 16)) for _ in range(2))
    k, v = (randn(rng, (1, 41, 2, 16)) for _ in range(2))
    kw = dict(causal=True, window=(12, -1), causal_align="absolute",
              positions=(70, 52), device=device)
    o, lse = flashcl.attention(q, k, v, return_lse=True, **kw)
    grads = flashcl.attention_backward(q, k, v, o, lse, do, **kw)
    want = reference_grads(q, k, v, do, causal=True, window=(12, -1),
                           diag=70 - 52)
    for got, ref in zip(grads, want[:3]):
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err <= 2e-4, err


def test_positions_are_never_ignored(rng, device):
    q, k, v = (randn(rng, (1, 8, 1, 16)) for _ in range(3))
    with pytest.raises(flashcl.InvalidValueError, match="q_position"):
        flashcl.attention(q, k, v, causal=True, positions=(3, 0),
                          device=device)
    with pytest.raises(flashcl.InvalidValueError, match="positions"):
        flashcl.attention(q, k, v, causal=True, causal_align="absolute",
                          positions=(1, "x"), device=device)
