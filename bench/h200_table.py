#!/usr/bin/env python3
"""Join flashcl-bench's CSV (+ its check| lines) with torch_sdpa_peers.py's
CSV into one markdown table: TFLOP/s, flashcl / torch ratios, fraction of
the mma.sync ceiling, relative L2 error, first-call time."""
import argparse
import csv
import math
import re

ap = argparse.ArgumentParser()
ap.add_argument("--flashcl", required=True)
ap.add_argument("--log", help="flashcl-bench stdout (check| lines)")
ap.add_argument("--torch")
ap.add_argument("--ceiling", type=float, default=650.0,
                help="TFLOP/s to report a fraction of (650: mma.sync; the "
                     "wgmma m64n256k16 loop measured 970 through OpenCL)")
args = ap.parse_args()

rows = []
with open(args.flashcl) as f:
    for r in csv.DictReader(l for l in f if not l.startswith("#")):
        if r["variant"] != "plain":
            continue
        rows.append(r)
checks = {}
if args.log:
    for line in open(args.log):
        m = re.match(r"check\| (?:[\w+]+ \| )?(\w+) \| (\d+) \| (\d) \| (\d+) \| rel_l2 (\S+)", line)
        if m:
            checks[(m[1], int(m[2]), int(m[3]), int(m[4]))] = float(m[5])
peers = {}
if args.torch:
    try:
        with open(args.torch) as f:
            for r in csv.DictReader(f):
                peers[(r["dtype"], int(r["head_dim"]), int(r["causal"]), int(r["seqlen"]), r["backend"])] = float(r["tflops"])
    except OSError:
        pass


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


print("| dtype | D | causal | N | B | H | flashcl TFLOP/s | torch flash | torch cudnn | x flash | x cudnn "
      f"| of {args.ceiling:g} | rel L2 err | first call ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
worst = None
for r in rows:
    key = (r["dtype"], int(r["head_dim"]), int(r["causal"]), int(r["seqlen"]))
    tf = float(r["tflops"])
    fl = peers.get(key + ("flash",))
    cu = peers.get(key + ("cudnn",))
    xf = tf / fl if fl and not math.isnan(fl) else None
    xc = tf / cu if cu and not math.isnan(cu) else None
    if xf is not None and key[3] >= 1024:
        worst = xf if worst is None else min(worst, xf)
    print(f"| {key[0]} | {key[1]} | {'yes' if key[2] else 'no'} | {key[3]} | {r['batch']} | {r['heads']} | "
          f"{tf:.1f} | {fmt(fl, '.1f')} | {fmt(cu, '.1f')} | {fmt(xf, '.2f')} | {fmt(xc, '.2f')} | "
          f"{tf / args.ceiling:.0%} | {fmt(checks.get(key), '.1e')} | {float(r['first_call_ms']):.0f} |")
if worst is not None:
    print(f"\nworst flashcl / torch-flash ratio over rows with N >= 1024: {worst:.3f}")
