#!/usr/bin/env python3
"""Peers for the tensor-core coverage issue, in the same run as flashcl-bench:
torch SDPA backends (FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION)
and FlexAttention (torch.compile) on the shapes and variants flashcl-bench
names with --variants (same '+'-joined names: windowW, softcap, alibi, bias,
mask, sinks, gqaG, dvX).

batch * seqlen = tokens, heads = hidden / D, layout [B, H, N, D]. FLOPs as
flashcl-bench counts them: 2 * pairs * (D + D_v), pairs N^2 (halved for
causal) or the visible pairs of a window. Median of triton's do_bench (CUDA
events). A peer that cannot run a shape or variant prints why and writes
nan. Sinks have no torch peer (FlexAttention has no extra denominator
logit), so only the plain kernel is timed for them.

CSV: variant,dtype,head_dim,causal,seqlen,batch,heads,peer,median_ms,tflops
"""
import argparse
import csv
import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# Every (shape, variant) is a new score_mod/mask_mod closure, so a new
# compile; past dynamo's default cache limit (8) it silently runs eager,
# which timed FlexAttention at 3-8 TFLOP/s in the first run.
torch._dynamo.config.cache_size_limit = 256
torch._dynamo.config.accumulated_cache_size_limit = 4096

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex_compiled = torch.compile(flex_attention, dynamic=False)
except Exception as e:  # pragma: no cover
    print(f"no FlexAttention: {e}", file=sys.stderr)
    flex_compiled = None

from triton.testing import do_bench


def parse_variant(name):
    spec = dict(window=-1, softcap=False, alibi=False, bias=False, mask=False,
                sinks=False, gqa=1, dv=0)
    for part in name.split("+"):
        if part in ("plain", "tf32"):  # tf32: flashcl's opt-in, torch runs fp32
            continue
        for key in ("window", "gqa", "dv"):
            if part.startswith(key) and part[len(key):].isdigit():
                spec[key] = int(part[len(key):])
                break
        else:
            spec[part] = True
    return spec


def visible_pairs(n, causal, window):
    if window < 0:
        return n * n * (0.5 if causal else 1.0)
    total = 0
    for i in range(n):
        hi = i if causal else n - 1
        lo = max(0, i - window)
        total += hi - lo + 1
    return float(total)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--seqlen", default="4096")
    ap.add_argument("--head-dim", default="128")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--variants", default="plain")
    args = ap.parse_args()
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    sdpa = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "dtype", "head_dim", "causal", "seqlen", "batch", "heads",
                    "peer", "median_ms", "tflops"])
        for dn in args.dtype.split(","):
            for d in map(int, args.head_dim.split(",")):
                for causal in map(int, args.causal.split(",")):
                    for n in map(int, args.seqlen.split(",")):
                        for vname in args.variants.split(","):
                            run_point(w, f, dn, dtypes[dn], d, causal, n, vname, args, sdpa)


def run_point(w, f, dn, dtype, d, causal, n, vname, args, sdpa):
    v = parse_variant(vname)
    b = max(1, args.tokens // n)
    h = args.hidden // d
    hkv = max(1, h // v["gqa"])
    dv = v["dv"] or d
    q = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
    k = torch.randn(b, hkv, n, d, device="cuda", dtype=dtype)
    val = torch.randn(b, hkv, n, dv, device="cuda", dtype=dtype)
    flops = 2.0 * b * h * visible_pairs(n, causal, v["window"]) * (d + dv)
    peers = {}
    plain = v["window"] < 0 and not (v["softcap"] or v["alibi"] or v["bias"] or v["mask"] or v["sinks"])
    if plain or v["sinks"]:
        for name, be in sdpa.items():
            peers["sdpa_" + name] = (be, None)
        if dtype == torch.float32:
            peers["sdpa_math"] = (SDPBackend.MATH, None)
    if v["bias"] or v["mask"]:
        if v["bias"]:
            attn = torch.full((n, n), -0.5, device="cuda", dtype=dtype)
        else:
            attn = (torch.arange(n * n, device="cuda").view(n, n) % 8) != 3
        if causal:
            tri = torch.ones(n, n, device="cuda", dtype=torch.bool).tril()
            attn = attn.masked_fill(~tri, float("-inf")) if v["bias"] else attn & tri
        for name in ("cudnn", "efficient"):
            peers["sdpa_mask_" + name] = (sdpa[name], attn)
    if flex_compiled is not None and not v["sinks"] and not plain:
        peers["flex"] = ("flex", None)
    for peer, (be, attn) in peers.items():
        try:
            if be == "flex":
                fn = flex_fn(q, k, val, v, causal, n, b, h)
            else:
                def fn(be=be, attn=attn):
                    with sdpa_kernel(be):
                        return F.scaled_dot_product_attention(
                            q, k, val, attn_mask=attn, is_causal=bool(causal) and attn is None,
                            enable_gqa=hkv != h)
            fn()
            torch.cuda.synchronize()
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
            tf = flops / (ms * 1e-3) / 1e12
        except Exception as e:
            print(f"peer {peer} {vname} {dn} D={d} causal={causal} N={n}: {str(e).splitlines()[0][:200]}",
                  file=sys.stderr)
            ms, tf = float("nan"), float("nan")
        w.writerow([vname, dn, d, causal, n, b, h, peer, f"{ms:.4f}", f"{tf:.2f}"])
        f.flush()
        print(f"peer {peer:18s} {vname} {dn} D={d} causal={causal} N={n}: {tf:.1f} TFLOP/s", flush=True)


def flex_fn(q, k, val, v, causal, n, b, h):
    window = v["window"]
    cap = 30.0
    slopes = torch.full((h,), 0.0625, device="cuda")
    bias = torch.full((n, n), -0.5, device="cuda")
    keep = (torch.arange(n * n, device="cuda").view(n, n) % 8) != 3

    def score_mod(score, bi, hi, qi, ki):
        if v["softcap"]:
            score = cap * torch.tanh(score / cap)
        if v["alibi"]:
            score = score - slopes[hi] * (qi - ki).abs()
        if v["bias"]:
            score = score + bias[qi, ki]
        return score

    def mask_mod(bi, hi, qi, ki):
        ok = qi >= 0
        if causal:
            ok = ok & (ki <= qi)
        if window >= 0:
            ok = ok & (ki >= qi - window)
        if v["mask"]:
            ok = ok & keep[qi, ki]
        return ok

    need_mask = causal or window >= 0 or v["mask"]
    block = create_block_mask(mask_mod, 1, 1, n, n, device="cuda") if need_mask else None
    use_score = v["softcap"] or v["alibi"] or v["bias"]
    gqa = k.shape[1] != q.shape[1]
    return lambda: flex_compiled(q, k, val, score_mod=score_mod if use_score else None,
                                 block_mask=block, enable_gqa=gqa)


if __name__ == "__main__":
    main()
