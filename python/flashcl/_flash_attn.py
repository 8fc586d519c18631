"""FlashAttention-2's Python names (flash_attn.flash_attn_interface) as thin
wrappers over flashcl.attention, attention_varlen and attention_kvcache.

FlashAttention-2's layout, [batch, seqlen, heads, headdim], is flashcl's
"bnhd": PyOpenCL arrays, views included (q = qkv[:, :, 0]), go to the
library as they are, through their strides; NumPy arrays as for the calls
they wrap. Only the forward pass exists: dropout and the attention
probabilities are training features, refused by name."""
from __future__ import annotations

import numbers

import numpy as np

from ._attention import attention
from ._errors import InvalidValueError, NullArgumentError, UnsupportedError
from ._inference import _dims, attention_kvcache, attention_varlen


def _forward_only(dropout_p, return_attn_probs):
    if not isinstance(dropout_p, numbers.Real) or isinstance(dropout_p, bool):
        raise InvalidValueError(f"dropout_p = {dropout_p!r}: expected a "
                                f"number (flashcl takes only 0.0)")
    if dropout_p != 0.0:
        raise UnsupportedError(
            f"dropout_p = {dropout_p!r}: flashcl computes the forward pass "
            f"without dropout (inference); pass dropout_p=0.0")
    if return_attn_probs:
        raise UnsupportedError(
            "return_attn_probs = True: flashcl does not return the "
            "attention probabilities (nor FlashAttention-2's softmax_lse "
            "through this flag); flashcl.attention(..., return_lse=True) "
            "gives the LSE")


def _refused(**arguments):
    """FlashAttention-2 arguments flashcl has no counterpart for: each
    must be left at None."""
    for name, value in arguments.items():
        if value is not None:
            raise UnsupportedError(f"{name}: not supported by flashcl "
                                   f"(leave it None)")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False, *,
                    device=None, backend="auto", out=None):
    """FlashAttention-2's ``flash_attn_func``: :func:`flashcl.attention`
    with q ``[batch, seqlen_q, nheads, headdim]``, k, v ``[batch,
    seqlen_k, nheads_k, headdim]``; causal is bottom-right aligned
    (FlashAttention >= 2.1), window_size (left, right) with -1 unbounded,
    alibi_slopes float32 ``[nheads]`` or ``[batch, nheads]``.
    deterministic changes nothing (flashcl's forward pass is
    deterministic). A non-zero dropout_p or return_attn_probs=True raises
    :class:`flashcl.UnsupportedError` (a NotImplementedError).
    device, backend and out (keyword only) as for :func:`flashcl.attention`.
    Returns out ``[batch, seqlen_q, nheads, headdim_v]``."""
    _forward_only(dropout_p, return_attn_probs)
    return attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                     window_size=window_size, softcap=softcap,
                     alibi_slopes=alibi_slopes, layout="bnhd", device=device,
                     backend=backend, out=out)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                           max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                           causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *,
                           device=None, backend="auto", out=None):
    """FlashAttention-2's ``flash_attn_varlen_func``:
    :func:`flashcl.attention_varlen` with q ``[total_q, nheads, headdim]``,
    k, v ``[total_k, nheads_k, headdim]``, cu_seqlens_q/k int32 ``[batch +
    1]``. block_table (a paged KV cache here) is not taken: use
    :func:`flash_attn_with_kvcache`. Other arguments as for
    :func:`flash_attn_func`. Returns out ``[total_q, nheads, headdim_v]``."""
    _forward_only(dropout_p, return_attn_probs)
    _refused(block_table=block_table)
    return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                            max_seqlen_q, max_seqlen_k, causal=causal,
                            softmax_scale=softmax_scale,
                            window_size=window_size, softcap=softcap,
                            alibi_slopes=alibi_slopes, device=device,
                            backend=backend, out=out)


def _cache_capacity(k_cache, block_table):
    rows_capacity = _dims("k_cache", k_cache, 4, "[batch_cache or num_blocks, "
                          "seqlen_cache or page_block_size, nheads_k, "
                          "headdim]")[1]
    if block_table is None:
        return rows_capacity
    return rows_capacity * int(np.shape(block_table)[-1])


def _seqlens(cache_seqlens, batch, k_cache, block_table, appending):
    """FlashAttention-2's cache_seqlens: None (the whole cache), an int
    (every sequence) or int32 [batch]."""
    if cache_seqlens is None:
        if appending:
            raise NullArgumentError(
                "cache_seqlens is None but k and v are given: the new rows "
                "go after cache_seqlens[b] keys, so it is needed")
        return np.full(batch, _cache_capacity(k_cache, block_table), np.int32)
    if isinstance(cache_seqlens, bool):
        raise InvalidValueError("cache_seqlens = bool: expected an int or an "
                                "int32 [batch] array")
    if isinstance(cache_seqlens, numbers.Integral):
        if not 0 <= int(cache_seqlens) < 2**31:
            raise InvalidValueError(f"cache_seqlens = {cache_seqlens}: "
                                    f"outside 0..2^31-1")
        return np.full(batch, int(cache_seqlens), np.int32)
    return cache_seqlens


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None,
                            rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None,
                            num_splits=0, return_softmax_lse=False, *,
                            device=None, backend="auto", out=None):
    """FlashAttention-2's ``flash_attn_with_kvcache``:
    :func:`flashcl.attention_kvcache` with q ``[batch, seqlen_q, nheads,
    headdim]`` and k_cache, v_cache ``[batch_cache, seqlen_cache,
    nheads_k, headdim]``, or with block_table (int32 ``[batch,
    max_num_blocks]``) ``[num_blocks, page_block_size, nheads_k,
    headdim]`` (page_block_size a multiple of 16 here).
    k, v (optional, ``[batch, seqlen_new, nheads_k, headdim]``) are written
    into the cache at cache_seqlens[b], in place, and attended to.
    cache_seqlens: an int for every sequence, an int32 ``[batch]`` array,
    or None for the whole cache (not with k, v). rotary_cos, rotary_sin
    and cache_leftpad are not supported (they must be None);
    rotary_interleaved is then unused. num_splits: 0 automatic, 1 never
    split. Returns out, or (out, softmax_lse float32 ``[batch, nheads,
    seqlen_q]``) with return_softmax_lse. device, backend and out
    (keyword only) as for :func:`flashcl.attention`."""
    _refused(rotary_cos=rotary_cos, rotary_sin=rotary_sin,
             cache_leftpad=cache_leftpad)
    if (k is None) != (v is None):
        raise NullArgumentError("k and v go together: one is None")
    if q is None:
        raise NullArgumentError("q is None")
    batch = int(np.shape(q)[0]) if len(np.shape(q)) == 4 else 0
    lengths = _seqlens(cache_seqlens, batch, k_cache, block_table,
                       k is not None)
    return attention_kvcache(
        q, k_cache, v_cache, lengths, k_new=k, v_new=v,
        cache_batch_idx=cache_batch_idx, block_table=block_table,
        num_splits=num_splits, causal=causal, softmax_scale=softmax_scale,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        return_lse=return_softmax_lse, device=device, backend=backend,
        out=out)
