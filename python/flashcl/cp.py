"""Context parallelism with mpi4py: one sequence's attention across MPI
ranks, each holding a shard of its rows (docs/context-parallel.md).

The same algorithm as libflashcl_mpi, on this package's calls: each
(query chunk, key chunk) pair is one :func:`flashcl.attention` call with
the chunks' absolute positions (``causal_align="absolute"``), and a query
chunk's partials are merged by :func:`flashcl.combine_partials` in a fixed
order, so the result equals the single-device call on the whole sequence
to the dtype's rounding and repeats bitwise at a fixed rank count. K and V
travel as NumPy arrays (host memory). ``import flashcl.cp`` needs mpi4py;
``import flashcl`` does not.

    from mpi4py import MPI
    import flashcl.cp
    q, k, v = (flashcl.cp.shard(x, MPI.COMM_WORLD, layout="zigzag")
               for x in (q_whole, k_whole, v_whole))
    o = flashcl.cp.attention(MPI.COMM_WORLD, q, k, v, causal=True,
                             layout="zigzag")
    o_whole = flashcl.cp.unshard(o, MPI.COMM_WORLD, layout="zigzag")

:func:`attention` keeps float64 as float64 in both modes (the ring's
partials merged through float64 LSEs). :func:`attention_backward` gives
the shard's gradients from the forward's o and lse, in both modes, summed
in a fixed order (float32; float64 for float64). Both calls take
``[batch, rows, heads, dim]`` shards (``tensor_layout="bnhd"``, the
default) or ``[batch, heads, rows, dim]`` ones (``tensor_layout="bhnd"``,
PyTorch's; shard them with ``axis=2``).
"""
import numpy as np
from mpi4py import MPI  # noqa: F401  (the communicators' type)

from . import _lib
from ._attention import _BACKENDS, _is_cl, _lse_fp64
from ._attention import attention as _attention
from ._backward import attention_backward as _attention_backward
from ._combine import combine_partials
from ._errors import (InvalidDimensionError, InvalidLayoutError,
                      InvalidValueError, UnsupportedError)

__all__ = ["attention", "attention_backward", "shard", "shard_rows",
           "unshard"]

_LAYOUTS = ("contiguous", "zigzag")
_MODES = ("ring", "allgather")
_TENSOR_LAYOUTS = ("bnhd", "bhnd")


def shard_rows(seqlen_total, rank, ranks, layout="contiguous"):
    """The rows of the whole sequence that shard `rank` of `ranks` holds, in
    the shard's order: a list of (first, count) chunks; ``"zigzag"`` gives
    chunk `rank` and chunk ``2 ranks - 1 - rank`` of ``n / 2`` rows (every
    rank the same causal work)."""
    if layout not in _LAYOUTS:
        hint = (f" (the shards' rows; their axis order is "
                f"tensor_layout={layout!r})" if layout in _TENSOR_LAYOUTS
                else "")
        raise InvalidValueError(f"layout = {layout!r}: expected one of "
                                f"{_LAYOUTS}{hint}")
    n, rest = divmod(int(seqlen_total), ranks)
    if rest or n <= 0 or (layout == "zigzag" and n % 2):
        raise InvalidDimensionError(
            f"seqlen_total = {seqlen_total} does not split into {ranks} equal "
            f"shards (of an even number of rows for zigzag)")
    if layout == "contiguous":
        return [(rank * n, n)]
    half = n // 2
    return [(rank * half, half), ((2 * ranks - 1 - rank) * half, half)]


def shard(x, comm, *, layout="contiguous", axis=1):
    """This rank's rows (along `axis`, the sequence axis of a ``[batch,
    seq, heads, dim]`` array) of a whole array."""
    chunks = shard_rows(x.shape[axis], comm.rank, comm.size, layout)
    return np.concatenate([np.take(x, np.arange(f, f + c), axis=axis)
                           for f, c in chunks], axis=axis)


def unshard(x, comm, *, layout="contiguous", axis=1):
    """The whole array from every rank's shard (an all-gather)."""
    parts = comm.allgather(np.ascontiguousarray(x))
    total = x.shape[axis] * comm.size
    shape = list(x.shape)
    shape[axis] = total
    whole = np.empty(shape, x.dtype)
    for rank, part in enumerate(parts):
        at = 0
        for first, count in shard_rows(total, rank, comm.size, layout):
            index = [slice(None)] * x.ndim
            index[axis] = slice(first, first + count)
            src = [slice(None)] * x.ndim
            src[axis] = slice(at, at + count)
            whole[tuple(index)] = part[tuple(src)]
            at += count
    return whole


def _sees_keys(causal, window, q0, k0, rows, k_rows=None):
    """Whether some query of the chunk at q0 (of `rows` rows) sees a key of
    the chunk at k0 (of k_rows rows, default `rows`) through the causal
    band and the window."""
    k_rows = rows if k_rows is None else k_rows
    left, right = window if window is not None else (-1, -1)
    if causal and right != 0:
        right = 0
    if right >= 0 and k0 > q0 + rows - 1 + right:
        return False
    if left >= 0 and k0 + k_rows - 1 < q0 - left:
        return False
    return True


def attention(comm, q, k, v, *, mode="ring", layout="contiguous",
              tensor_layout="bnhd", causal=False, window=None, softcap=0.0,
              alibi_slopes=None, sinks=None, scale=None, bias=None, mask=None,
              return_lse=False, device=None, backend="auto"):
    """Attention over the whole sequence for this rank's query rows.

    q, k, v: this rank's shard, ``[batch, rows, heads, dim]`` NumPy or
    PyOpenCL arrays (:func:`shard` makes it), or ``[batch, heads, rows,
    dim]`` ones with ``tensor_layout="bhnd"`` (o comes back in the same
    order), the same shape on every rank
    (PyOpenCL ones are read to the host, as K and V travel through it
    anyway, and the results come back as PyOpenCL arrays on the first
    one's queue; the calls run on `device`); self-attention
    over one sequence of ``rows * comm.size`` rows. mode: ``"ring"`` (each
    step computes against the K/V block in hand while it moves on to the
    next rank) or ``"allgather"`` (every rank gathers the whole K and V:
    the choice when they are small, as with GQA). layout: how the rows were
    sharded (``"contiguous"`` or ``"zigzag"``). causal, window, softcap,
    alibi_slopes, sinks and scale mean what they mean for the whole
    sequence. bias and mask: the shard's rows against the whole
    sequence's keys, broadcastable to ``[batch, heads_q, rows,
    rows * comm.size]`` (:func:`shard` with ``axis=-2`` cuts a whole one;
    the columns are the keys' positions); each call takes its chunks'
    rows and columns. Returns o (``q``'s dtype), or (o, lse) with
    return_lse, lse ``[batch, heads_q, rows]``, float32, or float64 for
    float64. Every rank must call it (it is collective). float64 in ring
    mode stays float64 end to end, as in libflashcl_mpi: each step's call
    returns its partial o and its lse in float64, and
    :func:`flashcl.combine_partials` merges them in float64 through those
    float64 LSEs (float32 LSEs would carry ~1e-7 relative rounding into
    every merge weight). The reference backend writes float32 LSEs only,
    so float64 in ring mode on it is refused (``"allgather"`` takes it:
    one call per query chunk, nothing merged).
    """
    _check_mode(mode)
    (q, k, v), queue = _to_host((q, k, v))
    q, k, v = _rows_second(tensor_layout, (q, k, v))
    if (mode == "ring" and q.dtype == np.float64
            and not _lse_fp64(_lib.DTYPE_FP64, _backend_code(backend))):
        raise UnsupportedError(
            "float64 in ring mode on the reference backend: it writes "
            "float32 LSEs, and merging the steps' partials through them "
            "would cut float64 to float32 accuracy; backend='fused' merges "
            "through float64 LSEs, mode='allgather' merges nothing")
    _agree(comm, q, k, v, *(x for x in (bias, mask) if x is not None))
    rows = q.shape[1]
    total = rows * comm.size
    scores = _scores(q, total, bias, mask)
    mine = shard_rows(total, comm.rank, comm.size, layout)
    kw = dict(causal=causal, window=window, softcap=softcap,
              alibi_slopes=alibi_slopes, scale=scale, device=device,
              backend=backend, causal_align="absolute", return_lse=True)
    at = [sum(c for _, c in mine[:i]) for i in range(len(mine))]
    if mode == "allgather":
        kv = comm.allgather((k, v))
        k_all = np.concatenate(_placed(kv, 0, total, comm.size, layout),
                               axis=1)
        v_all = np.concatenate(_placed(kv, 1, total, comm.size, layout),
                               axis=1)
        outs = [_attention(q[:, a:a + c], k_all, v_all, positions=(f, 0),
                           sinks=sinks, **scores(a, c, 0, total), **kw)
                for (f, c), a in zip(mine, at)]
    else:
        outs = _ring(comm, q, k, v, mine, at, total, layout, sinks, scores,
                     kw)
    o = np.concatenate([x[0] for x in outs], axis=1)
    lse = np.concatenate([x[1] for x in outs], axis=2)
    (o,) = _rows_second(tensor_layout, (o,))  # back: a swap is its inverse
    o, lse = _to_queue(queue, (o, lse))
    return (o, lse) if return_lse else o


def _to_host(arrays):
    """NumPy copies of PyOpenCL arrays (K/V travel through host memory in
    any case), and the first PyOpenCL array's queue (None: none was)."""
    queue = next((x.queue for x in arrays if _is_cl(x)), None)
    return [x.get() if _is_cl(x) else np.ascontiguousarray(x)
            for x in arrays], queue


def _rows_second(tensor_layout, arrays):
    """``[batch, heads, rows, dim]`` arrays (tensor_layout "bhnd") as
    ``[batch, rows, heads, dim]`` ones, which the algorithm slices along
    axis 1, or back (the swap is its own inverse); "bnhd" ones as they
    are. One host copy each: the arrays are on the host here anyway."""
    if tensor_layout not in _TENSOR_LAYOUTS:
        raise InvalidLayoutError(
            f"tensor_layout = {tensor_layout!r}: expected 'bnhd' ([batch, "
            f"rows, heads, dim]) or 'bhnd' ([batch, heads, rows, dim])")
    if tensor_layout == "bnhd":
        return list(arrays)
    for x in arrays:
        if x.ndim != 4:
            raise InvalidDimensionError(
                f"an array of shape {x.shape}: expected a 4-D [batch, "
                f"heads, rows, dim] one (tensor_layout='bhnd')")
    return [np.ascontiguousarray(x.swapaxes(1, 2)) for x in arrays]


def _to_queue(queue, arrays):
    """The results as PyOpenCL arrays on `queue` (as they came), or as they
    are."""
    if queue is None:
        return arrays
    import pyopencl.array as cla
    return tuple(cla.to_device(queue, np.ascontiguousarray(a))
                 for a in arrays)


def _backend_code(backend):
    """backend's _BACKENDS code (an unknown name: 'auto' here; the calls
    refuse it by name)."""
    return _BACKENDS.get("auto" if backend is None else backend,
                         _lib.BACKEND_AUTO)


def _check_mode(mode):
    if mode not in _MODES:
        raise InvalidValueError(f"mode = {mode!r}: expected one of {_MODES}")


def _agree(comm, *arrays):
    """The shards' shapes and dtypes must be the same on every rank."""
    mine = tuple((x.shape, str(x.dtype)) for x in arrays)
    shapes = comm.allgather(mine)
    if any(s != shapes[0] for s in shapes):
        raise InvalidValueError(
            f"the shards disagree in shape or dtype across ranks: {shapes}")


def _placed(kv, which, total, ranks, layout):
    """K (which = 0) or V (1) of every rank, as the whole sequence's chunks
    in position order."""
    chunks = []
    for rank, block in enumerate(kv):
        at = 0
        for first, count in shard_rows(total, rank, ranks, layout):
            chunks.append((first, block[which][:, at:at + count]))
            at += count
    return [c for _, c in sorted(chunks, key=lambda fc: fc[0])]


def _scores(q, total, bias, mask):
    """The shard's bias and mask (rows against all `total` keys), 4-D and
    checked, as a function of a chunk pair (query rows [qa, qa + qc) of
    the shard, keys [kf, kf + kc) of the sequence) giving its call's
    bias= and mask= (a broadcast axis stays whole)."""
    arrays = {}
    want = (q.shape[0], q.shape[2], q.shape[1], total)
    for name, x in (("bias", bias), ("mask", mask)):
        if x is None:
            continue
        x = x.get() if _is_cl(x) else np.asarray(x)
        if x.ndim <= 4:
            x = x.reshape((1,) * (4 - x.ndim) + x.shape)
        if x.ndim != 4 or any(h not in (1, w) for h, w in zip(x.shape, want)):
            raise InvalidDimensionError(
                f"{name} has shape {x.shape}: expected the shard's rows "
                f"against the whole sequence's keys, broadcastable to "
                f"[batch, heads_q, rows, seqlen_total] = {list(want)}")
        arrays[name] = x

    def pair(qa, qc, kf, kc):
        out = {}
        for name, x in arrays.items():
            rows = slice(qa, qa + qc) if x.shape[2] > 1 else slice(None)
            cols = slice(kf, kf + kc) if x.shape[3] > 1 else slice(None)
            out[name] = np.ascontiguousarray(x[:, :, rows, cols])
        return out
    return pair


def _ring(comm, q, k, v, mine, at, total, layout, sinks, scores, kw):
    """Step t: this rank's query chunks against the block of rank (rank -
    t), while the block moves on to the next rank; the partials merged in
    step order. The sinks join one partial per row (the first)."""
    parts = [[] for _ in mine]
    block = (k, v)
    nxt, prev = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    for step in range(comm.size):
        source = (comm.rank - step) % comm.size
        if step + 1 < comm.size:
            request = comm.isend(block, dest=nxt, tag=step)
        theirs = shard_rows(total, source, comm.size, layout)
        k_at = [sum(c for _, c in theirs[:i]) for i in range(len(theirs))]
        for qi, ((qf, qc), qa) in enumerate(zip(mine, at)):
            for (kf, kc), ka in zip(theirs, k_at):
                first = step == 0 and ka == 0
                if not first and not _sees_keys(kw["causal"], kw["window"],
                                                qf, kf, qc):
                    continue
                parts[qi].append(_attention(
                    q[:, qa:qa + qc], block[0][:, ka:ka + kc],
                    block[1][:, ka:ka + kc], positions=(qf, kf),
                    sinks=sinks if first else None,
                    **scores(qa, qc, kf, kc), **kw))
        if step + 1 < comm.size:
            block = comm.recv(source=prev, tag=step)
            request.wait()
    # float64: the partials and their lse are float64 (attention's
    # float64 LSE), and combine_partials merges them in float64
    dtype = q.dtype
    return [combine_partials([o for o, _ in p],
                             [lse for _, lse in p], dtype=dtype,
                             return_lse=True, device=kw["device"])
            for p in parts]


def attention_backward(comm, q, k, v, o, lse, do, *, mode="ring",
                       layout="contiguous", tensor_layout="bnhd",
                       causal=False, window=None, softcap=0.0,
                       alibi_slopes=None, sinks=None, scale=None, bias=None,
                       mask=None, return_dsinks=False, device=None,
                       backend="auto"):
    """Gradients of :func:`attention` for this rank's shard: ``(dq, dk,
    dv)`` with q's, k's and v's shapes and dtype, or ``(dq, dk, dv,
    dsinks)`` with ``return_dsinks`` (float32 ``[heads_q]``, the whole
    sequence's, the same on every rank; needs ``sinks``).

    q, k, v and the keywords (tensor_layout: dq, dk and dv come back in
    it too) are those of the forward call; o and lse are
    its outputs (``attention(..., return_lse=True)``) and do is the loss's
    gradient with respect to o. Each pair of chunks is one
    :func:`flashcl.attention_backward` call with the whole rows' o and lse;
    the sums are float32 (float64 for float64), in a fixed order.
    ``"ring"``: each K/V block travels around the ring with the sum of its
    dK/dV, which takes every
    rank's contribution and returns to the block's owner. ``"allgather"``:
    every rank gathers K and V, and each rank's dK/dV rows are the sum of
    every rank's contributions in rank order. Bitwise repeatable at a fixed
    rank count (float64 sums for float64, float32 for the other dtypes).
    Collective. A query row's sink gradient depends on the
    row alone (its lse, and rowsum(do * o)), so each rank takes it from
    one call per query chunk and the ranks' float32 sums are added in
    rank order, as libflashcl_mpi does.
    """
    _check_mode(mode)
    if return_dsinks and sinks is None:
        raise InvalidValueError("return_dsinks=True needs sinks (the call "
                                "has no sinks to differentiate)")
    (q, k, v, o, lse, do), queue = _to_host((q, k, v, o, lse, do))
    q, k, v, o, do = _rows_second(tensor_layout, (q, k, v, o, do))
    lse = lse.astype(np.float32, copy=False)
    _agree(comm, q, k, v, o, lse, do,
           *(x for x in (bias, mask) if x is not None))
    total = q.shape[1] * comm.size
    scores = _scores(q, total, bias, mask)
    mine = shard_rows(total, comm.rank, comm.size, layout)
    at = [sum(c for _, c in mine[:i]) for i in range(len(mine))]
    kw = dict(causal=causal, window=window, softcap=softcap,
              alibi_slopes=alibi_slopes, sinks=sinks, scale=scale,
              device=device, backend=backend, causal_align="absolute")

    heads = q.shape[2]
    dsinks = np.zeros(heads, np.float32)  # this rank's rows, chunk by chunk

    def pair(qi, block, kf, ka, kc, gives_sinks=False):
        """One query chunk's gradients against key rows [ka, ka + kc) of a
        K/V block, whose first row is kf of the whole sequence; with
        gives_sinks (one call per query chunk) its rows' sink gradient is
        added to dsinks."""
        nonlocal dsinks
        (qf, qc), qa = mine[qi], at[qi]
        want = bool(return_dsinks and gives_sinks)
        grads = _attention_backward(
            q[:, qa:qa + qc], block[0][:, ka:ka + kc],
            block[1][:, ka:ka + kc], o[:, qa:qa + qc], lse[:, :, qa:qa + qc],
            do[:, qa:qa + qc], positions=(qf, kf), return_dsinks=want,
            **scores(qa, qc, kf, kc), **kw)
        if want:
            dsinks = dsinks + grads[3]
        return grads[:3]

    step = _ring_backward if mode == "ring" else _allgather_backward
    dq, dk, dv = step(comm, q, k, v, mine, at, total, layout, kw, pair)
    grads = tuple(_rows_second(tensor_layout, (dq.astype(q.dtype),
                                               dk.astype(k.dtype),
                                               dv.astype(v.dtype))))
    if return_dsinks:
        whole = np.zeros(heads, np.float32)
        for part in comm.allgather(dsinks):  # rank order: the same bits
            whole += part
        grads = grads + (whole,)
    return _to_queue(queue, grads)


def _sums(q):
    """The host sums' dtype: float64 for float64 (its gradients keep float64
    accuracy), else float32."""
    return np.float64 if q.dtype == np.float64 else np.float32


def _block_gradients(q, block, mine, at, theirs, kw, pair, gives_sinks):
    """This rank's query chunks against a block laid out as `theirs`
    (chunks of the whole sequence): dQ per query chunk and the block's dK
    and dV (_sums' dtype), every pair of chunks that sees keys in a fixed
    order. The sink gradient comes from the pairs (query chunk, key
    chunk) for which gives_sinks(qi, ki) holds, one per query chunk."""
    dq = np.zeros(q.shape, _sums(q))
    dk = np.zeros(block[0].shape, _sums(q))
    dv = np.zeros(block[1].shape, _sums(q))
    k_at = [sum(c for _, c in theirs[:i]) for i in range(len(theirs))]
    for qi, ((qf, qc), qa) in enumerate(zip(mine, at)):
        for ki, ((kf, kc), ka) in enumerate(zip(theirs, k_at)):
            if not _sees_keys(kw["causal"], kw["window"], qf, kf, qc, kc):
                continue
            gq, gk, gv = pair(qi, block, kf, ka, kc, gives_sinks(qi, ki))
            dq[:, qa:qa + qc] += gq
            dk[:, ka:ka + kc] += gk
            dv[:, ka:ka + kc] += gv
    return dq, dk, dv


def _ring_backward(comm, q, k, v, mine, at, total, layout, kw, pair):
    """Step t: the block of rank (rank - t) with the sum of its dK/dV so
    far; this rank's contribution is added and both move on. One step
    after the last, each sum reaches the block's owner."""
    nxt, prev = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    dq = np.zeros(q.shape, _sums(q))
    block, sums = (k, v), None
    for step in range(comm.size):
        source = (comm.rank - step) % comm.size
        theirs = shard_rows(total, source, comm.size, layout)
        # the sinks from each query chunk's diagonal pair, in the own block
        gq, gk, gv = _block_gradients(
            q, block, mine, at, theirs, kw, pair,
            lambda qi, ki, own=step == 0: own and qi == ki)
        dq += gq
        sums = (gk, gv) if sums is None else (sums[0] + gk, sums[1] + gv)
        if step + 1 < comm.size:
            block, sums = comm.sendrecv((block, sums), dest=nxt, sendtag=step,
                                        source=prev, recvtag=step)
    dk, dv = comm.sendrecv(sums, dest=nxt, sendtag=comm.size, source=prev,
                           recvtag=comm.size)
    return dq, dk, dv


def _allgather_backward(comm, q, k, v, mine, at, total, layout, kw, pair):
    """Every rank's contributions to the whole sequence's dK/dV, gathered;
    each rank sums its own rows in rank order."""
    kv = comm.allgather((k, v))
    whole = (np.concatenate(_placed(kv, 0, total, comm.size, layout), axis=1),
             np.concatenate(_placed(kv, 1, total, comm.size, layout), axis=1))
    dq, dk_all, dv_all = _block_gradients(q, whole, mine, at,
                                          [(0, total)], kw, pair,
                                          lambda qi, ki: True)
    sums = comm.allgather((dk_all, dv_all))
    own = [np.concatenate([s[which][:, f:f + c] for f, c in mine], axis=1)
           for s in sums for which in (0, 1)]
    dk = np.zeros(k.shape, _sums(q))
    dv = np.zeros(v.shape, _sums(q))
    for r in range(comm.size):
        dk += own[2 * r]
        dv += own[2 * r + 1]
    return dq, dk, dv
