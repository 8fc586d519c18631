#!/usr/bin/env python3
"""Join flashcl-bench --decode tables with bench/torch_decode_peers.py's CSV
from the same run into one markdown table: flashcl GB/s, its fraction of
the copy bandwidth, and its ratio to torch's best backend on that shape.

  decode_table.py DECODE_MD TORCH_CSV [--bandwidth 4280]

DECODE_MD holds "## <dtype> <mode>" headers, each followed by the rows
flashcl-bench printed (| B | HQ | HKV | NK | Nq | KV | path | splits |
median ms | last kernel ms | KV GB/s | GB/s | ...). Torch peers exist for Nq = 1 only.
"""
import argparse
import csv


def flashcl_rows(path):
    dtype = None
    for line in open(path):
        if line.startswith("## "):
            dtype = line.split()[1]
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 12 or not cells[0].isdigit():
            continue
        yield dtype, cells


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("decode_md")
    ap.add_argument("torch_csv")
    ap.add_argument("--bandwidth", type=float, default=4280)
    a = ap.parse_args()
    best = {}
    for r in csv.DictReader(open(a.torch_csv)):
        if not r["gbs"]:
            continue
        key = (r["dtype"], r["batch"], r["heads_q"], r["heads_kv"], r["seqlen_k"])
        gbs = float(r["gbs"])
        if key not in best or gbs > best[key][0]:
            best[key] = (gbs, r["backend"])
    print("| dtype | B | HQ | HKV | NK | Nq | KV | path | splits | median ms "
          "| GB/s | of %.2f TB/s | torch best (GB/s) | flashcl / torch |"
          % (a.bandwidth / 1000))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dtype, c in flashcl_rows(a.decode_md):
        b, hq, hkv, nk, nq, kv, path, splits, ms, _, _, gbs = c[:12]
        peer = best.get((dtype, b, hq, hkv, nk)) if nq == "1" else None
        ratio = "%.2f" % (float(gbs) / peer[0]) if peer else "-"
        peer_txt = "%.0f (%s)" % peer if peer else "-"
        print(f"| {dtype} | {b} | {hq} | {hkv} | {nk} | {nq} | {kv} | {path} "
              f"| {splits} | {ms} | {float(gbs):.0f} | "
              f"{float(gbs) / a.bandwidth:.1%} | {peer_txt} | {ratio} |")


if __name__ == "__main__":
    main()
