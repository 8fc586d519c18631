#!/usr/bin/env python3
"""First call of a new process, cold program-binary cache against warm.

Each variant of a typical model's set runs as its own new process
(`flashcl run --json`): its compile (flashcl_prepare: from source, or the
cached binary) plus its first forward call (host clock, after the compile:
on PoCL the work-group function is compiled there) is what a new process
pays before its first result. Cold: an empty FLASHCL_CACHE_DIR per
repetition. Warm: the same folder again, as filled by that cold pass.
Run PoCL with POCL_KERNEL_CACHE=0 so that PoCL's own cache does not hide
the compile; Intel's CPU runtime keeps no disk cache.

usage: bench/first_call.py BUILD_DIR [--reps N] [--device SPEC] [--wgmma]

--device: the device (flashcl's spec; default FLASHCL_DEVICE, else the
first GPU). --wgmma adds the Hopper wgmma path's variant (FLASHCL_PATH=
nv_wgmma; its cold build is the driver's compile, the sm_90a patch and the
patched PTX's build, its warm one the patched PTX from the cache). On a
GPU set CUDA_CACHE_DISABLE=1 so that the driver's own cache does not hide
the compile.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = [
    ("fp32 D64 causal", ["--dtype", "fp32", "--head-dim", "64", "--causal"]),
    ("fp16 D64 causal", ["--dtype", "fp16", "--head-dim", "64", "--causal"]),
    ("bf16 D64 causal", ["--dtype", "bf16", "--head-dim", "64", "--causal"]),
    ("fp32 D128 causal", ["--dtype", "fp32", "--head-dim", "128", "--causal"]),
    ("fp16 D128 causal", ["--dtype", "fp16", "--head-dim", "128", "--causal"]),
    ("bf16 D128 causal", ["--dtype", "bf16", "--head-dim", "128", "--causal"]),
    ("fp16 D128 window 256 causal",
     ["--dtype", "fp16", "--head-dim", "128", "--causal", "--window", "256,0"]),
]
WGMMA = ("fp16 D128 causal, nv_wgmma",
         ["--dtype", "fp16", "--head-dim", "128", "--causal"],
         {"FLASHCL_PATH": "nv_wgmma"})
SHAPE = ["--seqlen", "512", "--heads", "8", "--reps", "1"]


def one(tool, args, cache_dir, device=None, extra_env=None):
    env = dict(os.environ, FLASHCL_CACHE_DIR=cache_dir, **(extra_env or {}))
    env.pop("FLASHCL_CACHE", None)
    start = time.monotonic()
    cmd = [tool, "run", "--json"] + SHAPE + args
    if device:
        cmd += ["--device", device]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True,
                         text=True).stdout
    wall = (time.monotonic() - start) * 1e3
    r = json.loads(out)
    if not r["pass"]:
        sys.exit("a run failed its oracle check: " + out)
    want = (extra_env or {}).get("FLASHCL_PATH")
    r["stand_in"] = bool(want and r.get("path") != want)
    if r["stand_in"]:  # the row's label shows it too
        print(f"first_call.py: {' '.join(args)} with FLASHCL_PATH={want} "
              f"ran on {r.get('path')!r}", file=sys.stderr)
    return r["compile_ms"] + r["first_call_ms"], wall, r


def split(r):
    return r["compile_ms"], r["first_call_ms"], r["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--device")
    ap.add_argument("--wgmma", action="store_true")
    a = ap.parse_args()
    tool = os.path.join(a.build, "flashcl")
    variants = [(n, v, {}) for n, v in VARIANTS] + ([WGMMA] if a.wgmma
                                                    else [])
    cold = {name: [] for name, _, _ in variants}
    warm = {name: [] for name, _, _ in variants}
    parts = {(name, kind): [] for name, _, _ in variants
             for kind in ("cold", "warm")}
    paths = {}
    device = None
    for _ in range(a.reps):
        with tempfile.TemporaryDirectory(prefix="flashcl-first-call-") as d:
            for name, args, env in variants:
                ms, _, r = one(tool, args, d, a.device, env)
                cold[name].append(ms)
                parts[(name, "cold")].append(split(r))
                paths[name] = r.get("path", "?")
                device = r["device"]
                # a stand-in path may share another variant's kernel
                if r["from_binary_cache"] and not r["stand_in"]:
                    sys.exit("a cold run found its kernel in the cache")
            for name, args, env in variants:
                ms, _, r = one(tool, args, d, a.device, env)
                warm[name].append(ms)
                parts[(name, "warm")].append(split(r))
                if not r["from_binary_cache"]:
                    sys.exit("a warm run did not load its kernel from the "
                             "cache")
    rows = []
    total_cold = total_warm = 0.0
    for name, _, _ in variants:
        c, w = statistics.median(cold[name]), statistics.median(warm[name])
        total_cold += c
        total_warm += w
        med = {k: [statistics.median(x[i] for x in parts[(name, k)])
                   for i in (0, 1, 2)] for k in ("cold", "warm")}
        rows.append((f"{name} ({paths.get(name, '?')})", c, w, med))
    print(f"device: {device}; medians of {a.reps} repetitions; ms = "
          "flashcl_prepare (compile or cache load) + first forward call "
          "(host clock); a later call: the warm process's timed call after "
          "its warm-up, for scale")
    print("| variant | cold: compile + first call, ms | warm: load + first "
          "call, ms | a later call, ms | cold, ms | warm, ms | cold / warm |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, c, w, med in rows:
        print(f"| {name} | {med['cold'][0]:.0f} + {med['cold'][1]:.0f} | "
              f"{med['warm'][0]:.1f} + {med['warm'][1]:.1f} | "
              f"{med['warm'][2]:.1f} | {c:.0f} | {w:.1f} | {c / w:.0f}x |")
    print(f"| **all {len(rows)}** | | | | **{total_cold:.0f}** | "
          f"**{total_warm:.0f}** | **{total_cold / total_warm:.0f}x** |")


if __name__ == "__main__":
    main()
