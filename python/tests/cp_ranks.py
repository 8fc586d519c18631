"""Run under mpirun by test_cp.py: every rank makes the whole inputs from
one seed, computes the single-device call, then its shard through
flashcl.cp.attention, and compares its rows (and a second call's bits);
float64 in both modes against the float64 NumPy oracle; then the same for
flashcl.cp.attention_backward.
Exits non-zero on any rank's failure; rank 0 prints the counts."""
import sys

import numpy as np
from mpi4py import MPI

import flashcl
import flashcl.cp as cp
from reference import attention_ref

comm = MPI.COMM_WORLD
failures = []
rng = np.random.default_rng(5)
N, H, HKV, D = 48, 2, 1, 16
TOL = {np.float32: 2e-5, np.float16: 3e-3}
slopes = np.array([0.25, 0.0625], np.float32)
sinks = np.array([0.5, -1.0], np.float32)
bias = rng.standard_normal((2, H, N, N)).astype(np.float32)
mask = rng.random((N, N)) > 0.2  # broadcast over batch and heads
cases = [dict(causal=True), dict(window=(10, 3)),
         dict(causal=True, alibi_slopes=slopes, sinks=sinks),
         dict(window=(12, 4), bias=bias, mask=mask),
         dict(softcap=5.0)]


def sharded(kw, layout):
    """kw with its bias and mask cut to this rank's rows (all columns)."""
    return {name: cp.shard(x, comm, layout=layout, axis=-2)
            if name in ("bias", "mask") else x for name, x in kw.items()}
checks = 0
for dtype in (np.float32, np.float16):
    q = rng.standard_normal((2, N, H, D)).astype(dtype)
    k = rng.standard_normal((2, N, HKV, D)).astype(dtype)
    v = rng.standard_normal((2, N, HKV, D)).astype(dtype)
    for kw in cases:
        whole = flashcl.attention(q, k, v, **kw)
        for layout in ("contiguous", "zigzag"):
            want = cp.shard(whole, comm, layout=layout)
            mine = [cp.shard(x, comm, layout=layout) for x in (q, k, v)]
            for mode in ("ring", "allgather"):
                got = cp.attention(comm, *mine, mode=mode, layout=layout,
                                   **sharded(kw, layout))
                again = cp.attention(comm, *mine, mode=mode, layout=layout,
                                     **sharded(kw, layout))
                err = np.abs(got.astype(np.float64) - want).max()
                name = f"{dtype.__name__} {list(kw)} {layout} {mode}"
                checks += 2
                if not err <= TOL[dtype] * max(1.0, np.abs(want).max()):
                    failures.append(f"{name}: max error {err:.3g}")
                if got.tobytes() != again.tobytes():
                    failures.append(f"{name}: two calls gave other bits")
                if not np.array_equal(cp.unshard(got, comm, layout=layout)
                                      .shape, whole.shape):
                    failures.append(f"{name}: unshard shape")
# float64: both modes against the float64 NumPy oracle at 1e-10 of the
# output's scale, o and lse (the ring's partials merged through float64
# LSEs: float32 ones give ~1e-7, test_cp.py shows it on one rank)
F64TOL = 1e-10
fp64 = [d for d in flashcl.devices() if d.selected][0].fp64
for kw in (cases[2], cases[3], cases[4]) if fp64 else ():
    q, k, v = (2 * rng.standard_normal((2, N, h, D)) for h in (H, HKV, HKV))
    want_o, want_lse = attention_ref(q, k, v, **kw)
    for layout in ("contiguous", "zigzag"):
        mine = [cp.shard(x, comm, layout=layout) for x in (q, k, v)]
        for mode in ("ring", "allgather"):
            call = dict(mode=mode, layout=layout, return_lse=True,
                        **sharded(kw, layout))
            o, lse = cp.attention(comm, *mine, **call)
            again = cp.attention(comm, *mine, **call)
            name = f"float64 {list(kw)} {layout} {mode}"
            checks += 3
            for g, w, what in ((o, want_o, "o"), (lse, want_lse, "lse")):
                w = cp.shard(w, comm, layout=layout,
                             axis=1 if what == "o" else 2)
                fin = np.isfinite(w)
                err = np.abs(g[fin] - w[fin]).max()
                if g.dtype != np.float64 or not np.array_equal(
                        g[~fin], w[~fin]) or not err <= F64TOL * max(
                            1.0, np.abs(w[fin]).max()):
                    failures.append(f"{name}: {what} ({g.dtype}) max error "
                                    f"{err:.3g}")
            if o.tobytes() + lse.tobytes() != again[0].tobytes() + \
                    again[1].tobytes():
                failures.append(f"{name}: two calls gave other bits")
# the backward: the shard's gradients against the single-device backward's
# rows, fp32 (the sums are float32 whatever the dtype), twice the same bits;
# with sinks also dsinks, the whole sequence's on every rank
GTOL = 2e-5
for kw in cases[:4]:
    ds = "sinks" in kw
    q, k, v, do = (rng.standard_normal((2, N, h, D)).astype(np.float32)
                   for h in (H, HKV, HKV, H))
    o, lse = flashcl.attention(q, k, v, return_lse=True, **kw)
    want = flashcl.attention_backward(q, k, v, o, lse, do, return_dsinks=ds,
                                      **kw)
    for layout in ("contiguous", "zigzag"):
        mine = [cp.shard(x, comm, layout=layout) for x in (q, k, v, o, do)]
        my_lse = cp.shard(lse, comm, layout=layout, axis=2)
        for mode in ("ring", "allgather"):
            args = (comm, *mine[:4], my_lse, mine[4])
            got = cp.attention_backward(*args, mode=mode, layout=layout,
                                        return_dsinks=ds,
                                        **sharded(kw, layout))
            again = cp.attention_backward(*args, mode=mode, layout=layout,
                                          return_dsinks=ds,
                                          **sharded(kw, layout))
            name = f"backward {list(kw)} {layout} {mode}"
            checks += 2
            if len(got) != len(want):
                failures.append(f"{name}: {len(got)} gradients, want "
                                f"{len(want)}")
            for g, w, what in zip(got, want, ("dq", "dk", "dv", "dsinks")):
                if what != "dsinks":
                    w = cp.shard(w, comm, layout=layout)
                err = np.abs(g.astype(np.float64) - w).max()
                if not err <= GTOL * max(1.0, np.abs(w).max()):
                    failures.append(f"{name}: {what} max error {err:.3g}")
            if any(a.tobytes() != b.tobytes() for a, b in zip(got, again)):
                failures.append(f"{name}: two calls gave other bits")
# bhnd shards (tensor_layout): [batch, heads, rows, dim], cut along axis 2,
# forward and backward against the whole bhnd call's rows
for kw in (cases[0], cases[2]):
    ds = "sinks" in kw
    q, k, v, do = (rng.standard_normal((2, h, N, D)).astype(np.float32)
                   for h in (H, HKV, HKV, H))
    o, lse = flashcl.attention(q, k, v, return_lse=True, layout="bhnd", **kw)
    want = flashcl.attention_backward(q, k, v, o, lse, do, layout="bhnd",
                                      **kw)
    for layout in ("contiguous", "zigzag"):
        mine = [cp.shard(x, comm, layout=layout, axis=2)
                for x in (q, k, v, o, lse, do)]
        for mode in ("ring", "allgather"):
            call = dict(mode=mode, layout=layout, tensor_layout="bhnd", **kw)
            name = f"bhnd {list(kw)} {layout} {mode}"
            got = cp.attention(comm, *mine[:3], **call)
            grads = cp.attention_backward(comm, *mine, **call)
            checks += 4
            for g, w, what in zip((got, *grads), (o, *want),
                                  ("o", "dq", "dk", "dv")):
                w = cp.shard(w, comm, layout=layout, axis=2)
                err = np.abs(g.astype(np.float64) - w).max()
                if not err <= GTOL * max(1.0, np.abs(w).max()):
                    failures.append(f"{name}: {what} max error {err:.3g}")
for f in failures:
    print(f"rank {comm.rank}: FAIL {f}", file=sys.stderr)
total_failed = comm.allreduce(len(failures))
if comm.rank == 0:
    print(f"cp on {comm.size} ranks: {checks * comm.size - total_failed} "
          f"passed, {total_failed} failed")
sys.exit(1 if total_failed else 0)
