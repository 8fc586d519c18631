#!/usr/bin/env python3
"""Pivot bench_form CSVs (bench/run_h200_wgmma.sh: the form, then
flashcl-bench's CSV columns) into a markdown table: one row per call
(variant, dtype, D, causal, N), one TFLOP/s column per form, and each
form's ratio to the first.

    scripts/pivot_forms.py FILE.csv [FILE.csv ...]
"""
import csv
import sys


def main(paths):
    rate, forms = {}, []
    for path in paths:
        for row in csv.reader(l for l in open(path) if not l.startswith("#")):
            if len(row) < 12 or row[1] == "variant":
                continue
            form = row[0]
            key = (row[1], row[2], int(row[3]), int(row[4]), int(row[5]))
            rate.setdefault(key, {})[form] = float(row[11])
            if form not in forms:
                forms.append(form)
    head = ["variant", "dtype", "D", "causal", "N"] + forms
    head += [f"{f} / {forms[0]}" for f in forms[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key in sorted(rate):
        r = rate[key]
        cells = [str(k) for k in key]
        cells += [f"{r[f]:.1f}" if f in r else "" for f in forms]
        for f in forms[1:]:
            ok = f in r and forms[0] in r
            cells.append(f"{r[f] / r[forms[0]]:.3f}" if ok else "")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
