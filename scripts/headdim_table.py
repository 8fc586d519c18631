#!/usr/bin/env python3
"""A flashcl-bench head-dim sweep as a markdown table: each head dim's
TFLOP/s over the rate of its tile class (the next of 64, 128, 256: the
width the wgmma kernel pads it to) on the same row, and over torch SDPA's
FLASH_ATTENTION (and with --cudnn, cuDNN) from bench/torch_sdpa_peers.py.
Rows at a class's own head dim 128 are left out.

    scripts/headdim_table.py FLASHCL.csv [TORCH.csv] [--cudnn]
"""
import csv
import os
import sys


def tile_class(d):
    return 64 if d <= 64 else 128 if d <= 128 else 256


def main(args):
    cudnn = "--cudnn" in args
    paths = [a for a in args if a != "--cudnn"]
    rate = {}
    for x in csv.DictReader(l for l in open(paths[0]) if not l.startswith("#")):
        rate[(x["dtype"], int(x["head_dim"]), x["causal"], int(x["seqlen"]))] = float(x["tflops"])
    peer = {}
    if len(paths) > 1 and os.path.exists(paths[1]):
        for x in csv.DictReader(open(paths[1])):
            key = (x["dtype"], int(x["head_dim"]), x["causal"], int(x["seqlen"]), x["backend"])
            peer[key] = float(x["tflops"])
    head = ["dtype", "D", "causal", "N", "flashcl", "/ class D", "torch FLASH", "/ FLASH"]
    head += ["cuDNN", "/ cuDNN"] if cudnn else []
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in sorted(rate):
        if k[1] == 128:
            continue
        cls = rate.get((k[0], tile_class(k[1])) + k[2:], float("nan"))
        cells = [k[0], str(k[1]), k[2], str(k[3]), f"{rate[k]:.1f}", f"{rate[k] / cls:.3f}"]
        backends = ["flash", "cudnn"] if cudnn else ["flash"]
        for b in backends:
            p = peer.get(k + (b,), float("nan"))
            cells += [f"{p:.1f}", f"{rate[k] / p:.2f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
