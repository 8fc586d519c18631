#!/usr/bin/env python3
"""Time torch SDPA (FLASH_ATTENTION and CUDNN_ATTENTION backends) on the
FlashAttention-2 protocol shapes, in the same run as flashcl-bench.

batch * seqlen = tokens, heads = hidden / D, layout [B, H, N, D], random
normal inputs, median of triton.testing.do_bench (CUDA events) when triton
imports, else of torch.cuda.Event timings. Writes CSV:
dtype,head_dim,causal,seqlen,batch,heads,backend,median_ms,tflops
"""
import argparse
import csv
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

try:
    from triton.testing import do_bench
except Exception:  # pragma: no cover - triton missing
    do_bench = None


def median_ms(fn, reps=50):
    if do_bench is not None:
        return do_bench(fn, warmup=25, rep=100, return_mode="median")
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--seqlen", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--head-dim", default="64,128")
    ap.add_argument("--dtype", default="fp16,bf16")
    args = ap.parse_args()
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
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
                        for name, be in backends.items():
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
