"""FlashAttention-2's names (flash_attn_func, flash_attn_varlen_func,
flash_attn_with_kvcache, and softmax_scale / window_size in flashcl's own
calls): each against the flashcl call it wraps (bit for bit: the same
kernel runs) and against the float64 reference. Outputs are poisoned
(NaN) before each call."""
import numpy as np
import pytest

import flashcl
from conftest import TOL, dtype_of, randn
from reference import attention_ref, rel_err


def poisoned(shape, dtype="float32"):
    return np.full(shape, np.nan, dtype_of(dtype))


def check(got, want, dtype="float32"):
    assert rel_err(got, want) < TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_flash_attn_func_is_attention(rng, dtype):
    b, nq, nk, hq, hkv, d = 2, 7, 19, 4, 2, 32
    q = randn(rng, (b, nq, hq, d), dtype)
    k = randn(rng, (b, nk, hkv, d), dtype)
    v = randn(rng, (b, nk, hkv, d), dtype)
    slopes = np.linspace(0.05, 0.4, hq).astype(np.float32)
    fa2 = dict(softmax_scale=0.3, causal=True, window_size=(6, -1),
               softcap=4.0, alibi_slopes=slopes)
    out = poisoned((b, nq, hq, d), dtype)
    o = flashcl.flash_attn_func(q, k, v, 0.0, deterministic=True, out=out,
                                **fa2)
    assert o is out
    ours = flashcl.attention(q, k, v, scale=0.3, causal=True, window=(6, -1),
                             softcap=4.0, alibi_slopes=slopes,
                             out=poisoned((b, nq, hq, d), dtype))
    np.testing.assert_array_equal(o, ours)
    want, _ = attention_ref(q, k, v, scale=0.3, causal=True, window=(6, -1),
                            softcap=4.0, alibi_slopes=slopes)
    check(o, want, dtype)
    plain, _ = attention_ref(q, k, v)
    assert rel_err(o, plain) > 1e-2  # the options reached the kernel


def test_flash_attn_func_defaults(rng):
    q, k, v = (randn(rng, (1, 9, 2, 16)) for _ in range(3))
    want, _ = attention_ref(q, k, v)
    check(flashcl.flash_attn_func(q, k, v), want)


def test_training_arguments_are_refused(rng):
    q = randn(rng, (1, 4, 2, 16))
    for call, args in (
            (flashcl.flash_attn_func, (q, q, q)),
            (flashcl.flash_attn_varlen_func,
             (q[0], q[0], q[0], np.array([0, 4], np.int32),
              np.array([0, 4], np.int32), 4, 4))):
        with pytest.raises(NotImplementedError, match="dropout_p"):
            call(*args, dropout_p=0.1)
        with pytest.raises(flashcl.UnsupportedError,
                           match="return_attn_probs"):
            call(*args, return_attn_probs=True)
        with pytest.raises(ValueError, match="dropout_p"):
            call(*args, dropout_p="0.1")


def test_fa2_names_in_flashcl_calls(rng):
    q, k, v = (randn(rng, (1, 12, 2, 16)) for _ in range(3))
    by_ours = flashcl.attention(q, k, v, scale=0.7, window=(2, 1))
    by_fa2 = flashcl.attention(q, k, v, softmax_scale=0.7,
                               window_size=(2, 1))
    np.testing.assert_array_equal(by_ours, by_fa2)
    want, _ = attention_ref(q, k, v, scale=0.7, window=(2, 1))
    check(by_fa2, want)
    with pytest.raises(flashcl.InvalidValueError, match="softmax_scale"):
        flashcl.attention(q, k, v, scale=0.7, softmax_scale=0.7)
    with pytest.raises(flashcl.InvalidValueError, match="window_size"):
        flashcl.attention(q, k, v, window=(2, 1), window_size=(2, 1))
    lengths = np.array([12], np.int32)
    o = flashcl.attention_kvcache(q[:, :1], k, v, lengths, softmax_scale=0.7,
                                  window_size=(2, 1))
    want, _ = attention_ref(q[:, :1], k, v, scale=0.7, window=(2, 1))
    check(o, want)


def test_flash_attn_varlen_func(rng):
    hq, hkv, d = 4, 1, 32
    len_q, len_k = [3, 1, 11], [30, 1, 11]
    cu_q = np.concatenate([[0], np.cumsum(len_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(len_k)]).astype(np.int32)
    q = randn(rng, (cu_q[-1], hq, d))
    k = randn(rng, (cu_k[-1], hkv, d))
    v = randn(rng, (cu_k[-1], hkv, d))
    out = poisoned((cu_q[-1], hq, d))
    o = flashcl.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(len_q),
                                       max(len_k), softmax_scale=0.2,
                                       causal=True, window_size=(8, 0),
                                       out=out)
    assert o is out
    ours = flashcl.attention_varlen(q, k, v, cu_q, cu_k, max(len_q),
                                    max(len_k), scale=0.2, causal=True,
                                    window=(8, 0))
    np.testing.assert_array_equal(o, ours)
    for s in range(len(len_q)):
        want, _ = attention_ref(q[cu_q[s]:cu_q[s + 1]][None],
                                k[cu_k[s]:cu_k[s + 1]][None],
                                v[cu_k[s]:cu_k[s + 1]][None], scale=0.2,
                                causal=True, window=(8, 0))
        check(o[cu_q[s]:cu_q[s + 1]], want[0])
    with pytest.raises(flashcl.UnsupportedError, match="block_table"):
        flashcl.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(len_q),
                                       max(len_k), block_table=cu_q[None])


def per_sequence(q, k, v, lengths, **kw):
    return np.concatenate([
        attention_ref(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n], **kw)[0]
        for b, n in enumerate(lengths)])


def test_flash_attn_with_kvcache_int_seqlens_and_append(rng):
    b, nq, hq, hkv, d, cap, nn, used = 3, 2, 4, 2, 32, 40, 2, 21
    q = randn(rng, (b, nq, hq, d))
    kc, vc = randn(rng, (b, cap, hkv, d)), randn(rng, (b, cap, hkv, d))
    k_new, v_new = randn(rng, (b, nn, hkv, d)), randn(rng, (b, nn, hkv, d))
    kc2, vc2 = kc.copy(), vc.copy()
    out = poisoned((b, nq, hq, d))
    o, lse = flashcl.flash_attn_with_kvcache(
        q, kc, vc, k_new, v_new, cache_seqlens=used, causal=True,
        return_softmax_lse=True, out=out)
    assert o is out and lse.shape == (b, hq, nq)
    want_k, want_v = kc2.copy(), vc2.copy()
    want_k[:, used:used + nn], want_v[:, used:used + nn] = k_new, v_new
    np.testing.assert_array_equal(kc, want_k)  # written in place
    np.testing.assert_array_equal(vc, want_v)
    # the int means the same as an int32 [batch] array of it
    ours = flashcl.attention_kvcache(q, kc2, vc2, np.full(b, used, np.int32),
                                     k_new=k_new, v_new=v_new, causal=True)
    np.testing.assert_array_equal(o, ours)
    want = per_sequence(q, want_k, want_v, [used + nn] * b, causal=True)
    check(o, want)


def test_flash_attn_with_kvcache_whole_cache_and_pages(rng):
    b, hq, hkv, d, page, pages = 2, 2, 1, 16, 16, 3
    cap = page * pages
    q = randn(rng, (b, 1, hq, d))
    kc, vc = randn(rng, (b, cap, hkv, d)), randn(rng, (b, cap, hkv, d))
    # cache_seqlens=None: every key of the cache
    o = flashcl.flash_attn_with_kvcache(q, kc, vc, softmax_scale=0.5)
    want, _ = attention_ref(q, kc, vc, scale=0.5)
    check(o, want)
    # the same cache as pages, in reverse order in the pool
    table = np.arange(b * pages, dtype=np.int32)[::-1].reshape(b, pages)
    k_pool = np.empty((b * pages, page, hkv, d), np.float32)
    v_pool = np.empty_like(k_pool)
    for s in range(b):
        for p in range(pages):
            k_pool[table[s, p]] = kc[s, p * page:(p + 1) * page]
            v_pool[table[s, p]] = vc[s, p * page:(p + 1) * page]
    lengths = np.array([cap, 20], np.int32)
    paged = flashcl.flash_attn_with_kvcache(
        q, k_pool, v_pool, cache_seqlens=lengths,
        block_table=np.ascontiguousarray(table), softmax_scale=0.5)
    check(paged, per_sequence(q, kc, vc, lengths, scale=0.5))


def test_flash_attn_with_kvcache_refusals(rng):
    q = randn(rng, (1, 1, 2, 16))
    kc = randn(rng, (1, 16, 2, 16))
    for name in ("rotary_cos", "rotary_sin", "cache_leftpad"):
        with pytest.raises(NotImplementedError, match=name):
            flashcl.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=3,
                                            **{name: np.zeros(4)})
    with pytest.raises(flashcl.NullArgumentError, match="cache_seqlens"):
        flashcl.flash_attn_with_kvcache(q, kc, kc, kc[:, :1], kc[:, :1])
    with pytest.raises(flashcl.NullArgumentError, match="k and v"):
        flashcl.flash_attn_with_kvcache(q, kc, kc, kc[:, :1],
                                        cache_seqlens=3)


def test_pyopencl_views_of_a_packed_qkv(cl_queue, rng):
    """FlashAttention's qkv [batch, seqlen, 3, heads, dim]: q, k, v are
    views of it, handed to the library through their strides."""
    import pyopencl.array as cla
    b, n, h, d = 2, 10, 2, 16
    qkv = randn(rng, (b, n, 3, h, d))
    dqkv = cla.to_device(cl_queue, qkv)
    views = [dqkv[:, :, i] for i in range(3)]
    assert all(x.base_data is dqkv.base_data for x in views)  # no copies
    o = flashcl.flash_attn_func(*views, causal=True)
    assert isinstance(o, cla.Array)
    want, _ = attention_ref(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2],
                            causal=True)
    check(o.get(), want)
