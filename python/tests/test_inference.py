"""flashcl.attention_kvcache and flashcl.attention_varlen against the
float64 reference, sequence by sequence, on NumPy and PyOpenCL arrays.
Outputs are poisoned (NaN) before each call."""
import numpy as np
import pytest

import flashcl
from conftest import TOL, dtype_of, randn
from reference import attention_ref, rel_err


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype_of(dtype))


def per_sequence_ref(q, k, v, lengths, bias=None, mask=None, **kw):
    """o and lse of each sequence b against keys [0, lengths[b]); bias
    and mask ([batch or 1, heads or 1, seqlen_q, capacity]) cut alike."""
    def cut(x, b, n):
        return None if x is None else x[b if x.shape[0] > 1 else 0][None,
                                                                   ..., :n]
    outs, lses = [], []
    for b, n in enumerate(lengths):
        o, lse = attention_ref(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n],
                               bias=cut(bias, b, n), mask=cut(mask, b, n),
                               **kw)
        outs.append(o)
        lses.append(lse)
    return np.concatenate(outs), np.concatenate(lses)


def check(got, want, dtype):
    assert rel_err(got, want) < TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("nq,causal", [(1, False), (2, True)])
def test_kvcache_decode(rng, dtype, nq, causal):
    b, hq, hkv, d, cap = 3, 4, 2, 32, 64
    lengths = np.array([1, 17, 64], np.int32)
    q = randn(rng, (b, nq, hq, d), dtype)
    kc = randn(rng, (b, cap, hkv, d), dtype)
    vc = randn(rng, (b, cap, hkv, d), dtype)
    out = poisoned((b, nq, hq, d), dtype)
    o, lse = flashcl.attention_kvcache(q, kc, vc, lengths, causal=causal,
                                       out=out, return_lse=True)
    assert o is out
    want_o, want_lse = per_sequence_ref(q, kc, vc, lengths, causal=causal)
    check(o, want_o, dtype)
    assert rel_err(lse, want_lse) < 1e-4


def test_kvcache_append_in_place(rng):
    b, nq, hq, hkv, d, cap, nn = 2, 2, 4, 2, 32, 48, 2
    lengths = np.array([5, 30], np.int32)
    q = randn(rng, (b, nq, hq, d))
    kc = randn(rng, (b, cap, hkv, d))
    vc = randn(rng, (b, cap, hkv, d))
    k_new = randn(rng, (b, nn, hkv, d))
    v_new = randn(rng, (b, nn, hkv, d))
    want_k, want_v = kc.copy(), vc.copy()
    for i, n in enumerate(lengths):
        want_k[i, n:n + nn] = k_new[i]
        want_v[i, n:n + nn] = v_new[i]
    o = flashcl.attention_kvcache(q, kc, vc, lengths, k_new=k_new,
                                  v_new=v_new, causal=True)
    # the caller's caches hold the new rows; nothing else moved
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)
    want_o, _ = per_sequence_ref(q, want_k, want_v, lengths + nn, causal=True)
    check(o, want_o, "float32")


def test_kvcache_paged_matches_dense(rng):
    b, hq, hkv, d, page, pages = 2, 4, 1, 32, 16, 4
    cap = page * pages
    lengths = np.array([20, 63], np.int32)
    q = randn(rng, (b, 1, hq, d))
    kc = randn(rng, (b, cap, hkv, d))
    vc = randn(rng, (b, cap, hkv, d))
    # the dense cache cut into pages, shuffled into one pool
    order = rng.permutation(b * pages)
    table = np.empty((b, pages), np.int32)
    k_pool = np.empty((b * pages, page, hkv, d), np.float32)
    v_pool = np.empty_like(k_pool)
    for s in range(b):
        for p in range(pages):
            slot = order[s * pages + p]
            table[s, p] = slot
            k_pool[slot] = kc[s, p * page:(p + 1) * page]
            v_pool[slot] = vc[s, p * page:(p + 1) * page]
    paged = flashcl.attention_kvcache(q, k_pool, v_pool, lengths,
                                      block_table=table, causal=True)
    dense = flashcl.attention_kvcache(q, kc, vc, lengths, causal=True)
    want, _ = per_sequence_ref(q, kc, vc, lengths, causal=True)
    check(paged, want, "float32")
    check(dense, want, "float32")


def test_kvcache_batch_idx_and_splits(rng):
    b, hq, hkv, d, cap = 3, 2, 2, 16, 40
    lengths = np.array([40, 3, 22], np.int32)
    rows = np.array([2, 0, 1], np.int32)  # sequence b reads cache row rows[b]
    q = randn(rng, (b, 1, hq, d))
    kc = randn(rng, (b, cap, hkv, d))
    vc = randn(rng, (b, cap, hkv, d))
    want, _ = per_sequence_ref(q, kc[rows], vc[rows], lengths)
    for splits in (1, 3):
        o = flashcl.attention_kvcache(q, kc, vc, lengths,
                                      cache_batch_idx=rows,
                                      num_splits=splits)
        check(o, want, "float32")


def test_kvcache_variants(rng):
    b, hq, hkv, d, cap = 2, 4, 2, 32, 32
    lengths = np.array([32, 9], np.int32)
    q = randn(rng, (b, 1, hq, d))
    kc = randn(rng, (b, cap, hkv, d))
    vc = randn(rng, (b, cap, hkv, d))
    slopes = np.linspace(0.1, 0.8, hq).astype(np.float32)
    sinks = np.linspace(-1, 1, hq).astype(np.float32)
    kw = dict(causal=True, window=(8, 0), softcap=5.0)
    o = flashcl.attention_kvcache(q, kc, vc, lengths, alibi_slopes=slopes,
                                  sinks=sinks, **kw)
    want, _ = per_sequence_ref(q, kc, vc, lengths, alibi_slopes=slopes,
                               sinks=sinks, **kw)
    check(o, want, "float32")


def test_kvcache_bias_and_mask(rng):
    b, hq, hkv, d, cap = 2, 2, 1, 16, 32
    lengths = np.array([32, 12], np.int32)
    q = randn(rng, (b, 2, hq, d))
    kc = randn(rng, (b, cap, hkv, d))
    vc = randn(rng, (b, cap, hkv, d))
    bias = randn(rng, (1, hq, 2, cap))          # broadcast over the batch
    mask = rng.random((b, 1, 2, cap)) > 0.3     # broadcast over the heads
    o = flashcl.attention_kvcache(q, kc, vc, lengths, bias=bias, mask=mask,
                                  causal=True)
    want, _ = per_sequence_ref(q, kc, vc, lengths, bias=bias, mask=mask,
                               causal=True)
    check(o, want, "float32")
    plain, _ = per_sequence_ref(q, kc, vc, lengths, causal=True)
    assert rel_err(o, plain) > 1e-3  # the terms changed the result


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_each_sequence(rng, causal):
    hq, hkv, d = 4, 2, 32
    len_q = [1, 5, 17]
    len_k = [1, 147, 40]
    cu_q = np.concatenate([[0], np.cumsum(len_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(len_k)]).astype(np.int32)
    q = randn(rng, (cu_q[-1], hq, d))
    k = randn(rng, (cu_k[-1], hkv, d))
    v = randn(rng, (cu_k[-1], hkv, d))
    out = poisoned((cu_q[-1], hq, d), "float32")
    o, lse = flashcl.attention_varlen(q, k, v, cu_q, cu_k, max(len_q),
                                      max(len_k), causal=causal, out=out,
                                      return_lse=True)
    assert lse.shape == (hq, cu_q[-1])
    for s in range(len(len_q)):
        qs = q[cu_q[s]:cu_q[s + 1]][None]
        ks = k[cu_k[s]:cu_k[s + 1]][None]
        vs = v[cu_k[s]:cu_k[s + 1]][None]
        want_o, want_lse = attention_ref(qs, ks, vs, causal=causal)
        check(o[cu_q[s]:cu_q[s + 1]], want_o[0], "float32")
        assert rel_err(lse[:, cu_q[s]:cu_q[s + 1]], want_lse[0]) < 1e-4


def test_kvcache_pyopencl_zero_copy_append(cl_queue, rng):
    import pyopencl.array as cla
    b, nq, hq, hkv, d, cap, nn = 2, 1, 4, 2, 32, 32, 1
    lengths = np.array([7, 31], np.int32)
    q, kc, vc = (randn(rng, s) for s in
                 ((b, nq, hq, d), (b, cap, hkv, d), (b, cap, hkv, d)))
    k_new, v_new = randn(rng, (b, nn, hkv, d)), randn(rng, (b, nn, hkv, d))
    dq, dk, dv = (cla.to_device(cl_queue, x) for x in (q, kc, vc))
    dlen = cla.to_device(cl_queue, lengths)
    o, event = flashcl.attention_kvcache(
        dq, dk, dv, dlen, k_new=cla.to_device(cl_queue, k_new),
        v_new=cla.to_device(cl_queue, v_new), causal=True, return_event=True)
    event.wait()
    want_k, want_v = kc.copy(), vc.copy()
    for i, n in enumerate(lengths):
        want_k[i, n:n + nn] = k_new[i]
        want_v[i, n:n + nn] = v_new[i]
    np.testing.assert_array_equal(dk.get(), want_k)  # appended on the device
    want_o, _ = per_sequence_ref(q, want_k, want_v, lengths + nn, causal=True)
    check(o.get(), want_o, "float32")


def test_bad_arguments_name_the_problem(rng):
    q = randn(rng, (2, 1, 2, 16))
    kc = randn(rng, (2, 16, 2, 16))
    good = np.array([4, 16], np.int32)
    with pytest.raises(flashcl.DtypeUnsupportedError, match="cache_seqlens"):
        flashcl.attention_kvcache(q, kc, kc, good.astype(np.float32))
    with pytest.raises(flashcl.InvalidDimensionError, match="cache_seqlens"):
        flashcl.attention_kvcache(q, kc, kc, good[:1])
    with pytest.raises(flashcl.NullArgumentError, match="k_new"):
        flashcl.attention_kvcache(q, kc, kc, good, k_new=kc[:, :1])
    with pytest.raises(flashcl.InvalidLayoutError, match="k_cache"):
        flashcl.attention_kvcache(q, kc[:, ::2], kc[:, ::2], good,
                                  k_new=kc[:, :1], v_new=kc[:, :1])
    with pytest.raises(flashcl.InvalidDimensionError, match="block_table"):
        flashcl.attention_kvcache(q, kc, kc, good,
                                  block_table=np.zeros((1, 2), np.int32))
    # a page size the library refuses: its own status and message
    with pytest.raises(flashcl.Error, match="page"):
        flashcl.attention_kvcache(q, kc[:, :8], kc[:, :8], good,
                                  block_table=np.zeros((2, 2), np.int32))
    cu = np.array([0, 1, 2], np.int32)
    with pytest.raises(flashcl.InvalidValueError, match="max_seqlen_q"):
        flashcl.attention_varlen(q[:, 0], kc[0], kc[0], cu, cu, 1.5, 1)
