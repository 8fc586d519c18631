#!/usr/bin/env python3
"""Time torch SDPA (FLASH_ATTENTION and CUDNN_ATTENTION backends) on the
FlashAttention-2 protocol shapes, in the same run as flashcl-bench.
--dtype fp32 rows time torch's fp32 backends instead (EFFICIENT_ATTENTION,
MATH, and CUDNN_ATTENTION / FLASH_ATTENTION where they take fp32; a
backend that refuses gives NaN), with TF32 off (matmul and cuDNN), so
that they compute what flashcl's exact fp32 computes; MATH is skipped
above --math-max B*H*N*N scores.

batch * seqlen = tokens, heads = hidden / D, layout [B, H, N, D], random
normal inputs, median of triton.testing.do_bench (CUDA events) when triton
imports, else of torch.cuda.Event timings. Writes CSV:
dtype,head_dim,causal,seqlen,batch,heads,backend,median_ms,tflops

--backward: the backward of FLASH_ATTENTION, CUDNN_ATTENTION,
EFFICIENT_ATTENTION and MATH (MATH skipped when its B*H*N*N score matrix
would pass --math-max elements), each after its forward, with CUDA events
around out.backward(dO) alone (a 256 MB L2 flush before each rep, outside
the events, as do_bench does), median and min of --reps after --warmup.
The CSV then has flashcl-bench --backward's columns, the backend in the
variant column (torch_flash, ...), so the two runs sit side by side:
variant,dtype,head_dim,causal,seqlen,batch,heads,first_call_ms,median_ms,
min_ms,tflops,gbps,bwd_median_ms,bwd_tflops,bwd_fwd_ratio,fwdbwd_median_ms,
fwdbwd_tflops
(backward FLOPs: FlashAttention's 2.5 x the forward's 4 B H N^2 D, halved
for causal; fwd+bwd: a forward and its backward in one timed interval, as
FA2's benchmark_fwd_bwd, 3.5 x the forward's FLOPs). Importing this file needs no torch; running it does.
"""
import argparse
import csv
import sys
import time

try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
except Exception:  # pragma: no cover - no torch: main() says so
    torch = None

try:
    from triton.testing import do_bench
except Exception:  # pragma: no cover - triton missing
    do_bench = None


def median_ms(fn, reps=50):
    """do_bench's median when triton is there; else the same events with
    the L2 flushed between calls, as do_bench flushes it."""
    if do_bench is not None:
        return do_bench(fn, warmup=25, rep=100, return_mode="median")
    return event_times(fn, reps, warmup=5)[0]


def event_times(fn, reps, warmup, before=None):
    """Median and min ms of fn() between CUDA events; before() (untimed)
    runs ahead of each call."""
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        if before:
            before()
        fn()
    times = []
    for _ in range(reps):
        if before:
            before()
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2], times[0]


def backward_row(name, backend, dn, dtype, d, causal, n, b, h, args):
    """One flashcl-bench --backward CSV row for a torch backend."""
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    d_o = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
    fwd_flops = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
    with sdpa_kernel(backend):
        start = time.perf_counter()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        out.backward(d_o, retain_graph=True)
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - start) * 1e3
        with torch.no_grad():
            fwd_ms, fwd_min = event_times(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                args.reps, args.warmup)

        def clear_grads():
            q.grad = k.grad = v.grad = None

        bwd_ms, _ = event_times(lambda: out.backward(d_o, retain_graph=True),
                                args.reps, args.warmup, clear_grads)

        def forward_backward():
            F.scaled_dot_product_attention(
                q, k, v, is_causal=bool(causal)).backward(d_o)

        both_ms, _ = event_times(forward_backward, args.reps, args.warmup,
                                 clear_grads)
    tf = fwd_flops / (fwd_ms * 1e-3) / 1e12
    gbps = 4.0 * b * h * n * d * q.element_size() / (fwd_ms * 1e-3) / 1e9
    bwd_tf = 2.5 * fwd_flops / (bwd_ms * 1e-3) / 1e12
    return ["torch_" + name, dn, d, causal, n, b, h, f"{first_ms:.4f}", f"{fwd_ms:.4f}",
            f"{fwd_min:.4f}", f"{tf:.6f}", f"{gbps:.3f}", f"{bwd_ms:.4f}",
            f"{bwd_tf:.6f}", f"{bwd_ms / fwd_ms:.4f}", f"{both_ms:.4f}",
            f"{3.5 * fwd_flops / (both_ms * 1e-3) / 1e12:.6f}"]


BWD_HEADER = ["variant", "dtype", "head_dim", "causal", "seqlen", "batch", "heads",
              "first_call_ms", "median_ms", "min_ms", "tflops", "gbps",
              "bwd_median_ms", "bwd_tflops", "bwd_fwd_ratio",
              "fwdbwd_median_ms", "fwdbwd_tflops"]


def backward_sweep(args, dtypes):
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(BWD_HEADER)
        for dn in args.dtype.split(","):
            for d in map(int, args.head_dim.split(",")):
                for causal in map(int, args.causal.split(",")):
                    for n in map(int, args.seqlen.split(",")):
                        b, h = max(1, args.tokens // n), args.hidden // d
                        for name, be in backends.items():
                            if name == "math" and b * h * n * n > args.math_max:
                                print(f"torch math {dn} D={d} causal={causal} N={n}: "
                                      "skipped (--math-max)", file=sys.stderr)
                                continue
                            try:
                                row = backward_row(name, be, dn, dtypes[dn], d, causal, n, b, h, args)
                            except Exception as e:  # backend unavailable for this shape
                                print(f"torch {name} {dn} D={d} causal={causal} N={n}: {e}",
                                      file=sys.stderr)
                                continue
                            finally:
                                torch.cuda.empty_cache()
                            w.writerow(row)
                            f.flush()
                            print(f"torch {name:9s} {dn} D={d} causal={causal} N={n}: "
                                  f"bwd {row[12]} ms, {float(row[13]):.1f} TFLOP/s, "
                                  f"bwd/fwd {row[14]}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--seqlen", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--head-dim", default="64,128")
    ap.add_argument("--dtype", default="fp16,bf16")
    ap.add_argument("--backward", action="store_true",
                    help="time the backward (flashcl-bench --backward's CSV columns)")
    ap.add_argument("--causal", default="0,1", help="--backward: causal modes")
    ap.add_argument("--reps", type=int, default=30, help="--backward: timed reps")
    ap.add_argument("--warmup", type=int, default=5, help="--backward: warm-up calls")
    ap.add_argument("--math-max", type=float, default=2**30,
                    help="skip MATH above this many B*H*N*N scores")
    args = ap.parse_args()
    if torch is None:
        sys.exit("torch_sdpa_peers.py: needs torch (with CUDA)")
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16,
              "fp32": torch.float32}
    # fp32 peers in fp32: TF32 would change their numbers (issue 44)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    if args.backward:
        backward_sweep(args, dtypes)
        return
    backends16 = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    backends32 = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH,
                  "cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    torch.manual_seed(0)
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dtype", "head_dim", "causal", "seqlen", "batch", "heads", "backend", "median_ms", "tflops"])
        for dn in args.dtype.split(","):
            for d in map(int, args.head_dim.split(",")):
                for causal in (0, 1):
                    for n in map(int, args.seqlen.split(",")):
                        b = max(1, args.tokens // n)
                        h = args.hidden // d
                        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtypes[dn]) for _ in range(3))
                        flops = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
                        backends = backends32 if dn == "fp32" else backends16
                        for name, be in backends.items():
                            if name == "math" and b * h * n * n > args.math_max:
                                continue
                            try:
                                with sdpa_kernel(be):
                                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                                    fn()
                                    ms = median_ms(fn)
                                tf = flops / (ms * 1e-3) / 1e12
                            except Exception as e:  # backend unavailable for this shape
                                print(f"torch {name} {dn} D={d} causal={causal} N={n}: {e}", file=sys.stderr)
                                ms, tf = float("nan"), float("nan")
                            w.writerow([dn, d, causal, n, b, h, name, f"{ms:.4f}", f"{tf:.2f}"])
                            f.flush()
                            print(f"torch {name:5s} {dn} D={d} causal={causal} N={n}: {tf:.1f} TFLOP/s", flush=True)
                        del q, k, v


if __name__ == "__main__":
    main()
