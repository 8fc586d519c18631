#!/usr/bin/env python3
"""Old-against-new timing table from scripts/gpu_check.sh compare's logs.

Each log is a flashcl-bench table (sweep, decode or varlen form). Rows
are matched on the columns left of the first time column (`median ms`,
`varlen ms`); a build's figure is the mean of its rounds' medians. The
output is one Markdown table with new/old and a flag on rows outside
+-TOL (2 % by default), so a refactor's speed claim is read from one run:

    python3 scripts/ab_table.py OUT_DIR [--tol 0.02]

where OUT_DIR holds GROUP_old_R.log and GROUP_new_R.log.
"""
import argparse
import glob
import os
import re
import statistics
import sys

TIME_COLUMNS = ("median ms", "varlen ms")
INFO_COLUMNS = ("path", "varlen path", "dense path", "splits")


def parse_tables(path):
    """{row key: median ms} for every table row in a bench log."""
    rows, header = {}, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith("|"):
                header = None if not line.strip() else header
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(set(c) <= set("-") for c in cells):
                continue
            if any(c in TIME_COLUMNS for c in cells):
                header = cells
                continue
            if header is None or len(cells) != len(header):
                continue
            t = next(i for i, c in enumerate(header) if c in TIME_COLUMNS)
            key = " ".join(c for c, h in zip(cells[:t], header[:t])
                           if h not in INFO_COLUMNS)
            try:
                rows[key] = float(cells[t])
            except ValueError:
                pass
    return rows


def collect(out_dir, build):
    """{group: {key: [medians over rounds]}}"""
    found = {}
    for path in sorted(glob.glob(os.path.join(out_dir, f"*_{build}_*.log"))):
        m = re.match(rf"(.+)_{build}_(\d+)\.log$", os.path.basename(path))
        if not m:
            continue
        group = found.setdefault(m.group(1), {})
        for key, ms in parse_tables(path).items():
            group.setdefault(key, []).append(ms)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--tol", type=float, default=0.02)
    a = ap.parse_args()
    old, new = collect(a.out_dir, "old"), collect(a.out_dir, "new")
    if not old or not new:
        sys.exit(f"no GROUP_old_R.log / GROUP_new_R.log pairs in {a.out_dir}")
    print("| group | row | old ms | new ms | new/old | |")
    print("|---|---|---|---|---|---|")
    outside = total = 0
    for group in sorted(set(old) & set(new)):
        for key in old[group]:
            if key not in new[group]:
                continue
            o = statistics.mean(old[group][key])
            n = statistics.mean(new[group][key])
            ratio = n / o if o > 0 else float("nan")
            flag = "outside" if abs(ratio - 1) > a.tol else ""
            outside += bool(flag)
            total += 1
            print(f"| {group} | {key} | {o:.4f} | {n:.4f} | {ratio:.3f} | {flag} |")
    print(f"\n{total} rows, {outside} outside +-{a.tol:.0%}")


if __name__ == "__main__":
    main()
