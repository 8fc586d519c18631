#!/usr/bin/env python3
"""Time torch SDPA on decode shapes, in the same run as flashcl-bench --decode.

Shapes are B:HQ:HKV:NK (Nq query rows per sequence, default 1), layout
[B, H, N, D], random normal inputs, GQA through enable_gqa=True (the KV
heads are not repeated in memory). Backends: FLASH_ATTENTION,
CUDNN_ATTENTION, EFFICIENT_ATTENTION, each alone; a backend that refuses a
shape is recorded with its error. Median of triton.testing.do_bench (CUDA
events) when triton imports, else of torch.cuda.Event timings.

--flush read times each call behind a read of 256 MiB instead (CUDA events
around the call, median of 50): the L2 then holds clean lines, where
do_bench's zeroing flush leaves it dirty; flashcl-bench --busy-kind read
does the same.

--flex adds FlexAttention (torch.compile of flex_attention, no block
mask, enable_gqa), the peer issue 44 names for few-query decode; its
compile time is outside the timing.

GB/s counts K, V, Q and O once, as flashcl-bench does. Writes CSV:
dtype,head_dim,batch,heads_q,heads_kv,seqlen_k,nq,backend,median_ms,gbs,error
"""
import argparse
import csv

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# One timing helper for every torch peer script (run from any folder: the
# script's own folder is on sys.path).
from torch_sdpa_peers import median_ms


def median_ms_read_flush(fn, reps=50):
    """Median of CUDA-event timings of fn, each behind a read-only pass
    over 256 MiB (clean L2 lines; long enough on the device that the host
    enqueues fn before it ends)."""
    flush = torch.zeros(64 << 20, dtype=torch.int32, device="cuda")
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(reps):
        flush.sum()  # read only: its scalar result is dropped
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        events.append((a, b))
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in events)
    return times[len(times) // 2]


BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--shapes", default="1:32:8:32768,8:32:8:8192,32:32:32:4096")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16,fp16")
    ap.add_argument("--nq", type=int, default=1)
    ap.add_argument("--flush", choices=("write", "read"), default="write")
    ap.add_argument("--flex", action="store_true",
                    help="also time FlexAttention (compiled)")
    args = ap.parse_args()
    flex = None
    if args.flex:
        from torch.nn.attention.flex_attention import flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    timed = median_ms if args.flush == "write" else median_ms_read_flush
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    torch.manual_seed(0)
    d, nq = args.head_dim, args.nq
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dtype", "head_dim", "batch", "heads_q", "heads_kv",
                    "seqlen_k", "nq", "backend", "median_ms", "gbs", "error"])
        for dn in args.dtype.split(","):
            dt = dtypes[dn]
            for shape in args.shapes.split(","):
                b, hq, hkv, nk = map(int, shape.split(":"))
                q = torch.randn(b, hq, nq, d, device="cuda", dtype=dt)
                k = torch.randn(b, hkv, nk, d, device="cuda", dtype=dt)
                v = torch.randn(b, hkv, nk, d, device="cuda", dtype=dt)
                elem = q.element_size()
                total = (2 * b * hkv * nk * d + 2 * b * hq * nq * d) * elem
                causal = nq > 1
                peers = dict(BACKENDS)
                if flex is not None:
                    peers["flex"] = None
                for name, backend in peers.items():
                    def call():
                        if backend is None:  # FlexAttention, no mask
                            return flex(q, k, v, enable_gqa=hq != hkv)
                        with sdpa_kernel(backend):
                            # bottom-right causal for Nq > 1 is not what
                            # is_causal means in SDPA (top-left); decode
                            # peers are timed at Nq = 1 where both agree.
                            return F.scaled_dot_product_attention(
                                q, k, v, is_causal=causal and nq == nk,
                                enable_gqa=hq != hkv)
                    try:
                        call()
                        torch.cuda.synchronize()
                        ms = timed(call)
                        w.writerow([dn, d, b, hq, hkv, nk, nq, name,
                                    f"{ms:.5f}", f"{total / (ms * 1e6):.1f}",
                                    ""])
                    except Exception as e:  # a backend that refuses
                        msg = str(e).replace("\n", " ")[:160]
                        w.writerow([dn, d, b, hq, hkv, nk, nq, name, "", "",
                                    msg])
                    f.flush()
                del q, k, v
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
