"""PNG figures from flashcl-bench's CSV (--csv FILE) and peers measured in
the same run, in the style of the FlashAttention papers' figures.

    flashcl-plot --flashcl bench/results/h200-2026-11-29-flashcl.csv \\
        --peer bench/results/h200-2026-11-29-torch-sdpa.csv \\
        --device "NVIDIA H200" --date 2026-11-29 -o bench/results/h200-2026-11-29

(or `python -m flashcl.plot ...`, or `python3 bench/plot_bench.py ...` in a
checkout) writes, per dtype, PREFIX-<dtype>.png (grouped bars, speed against
sequence length, one panel per head dim and causal/non-causal, flashcl and
each peer) and PREFIX-ratio.png (flashcl / each peer against sequence
length, every dtype and head dim). Needs matplotlib: the package's "plot"
extra, pip install 'flashcl[plot]' (from a checkout: pip install
'./python[plot]').

This module uses only the standard library and matplotlib, never the rest
of the package: bench/plot_bench.py loads it by its path, with no
libflashcl.

Inputs
  --flashcl  flashcl-bench's CSV: variant,dtype,head_dim,causal,seqlen,batch,
             heads,...,tflops,gbps; '#' lines are read for the CLBlast SGEMM
             peer ('# clblast_sgemm_N_gflops,G'), drawn as a dashed line.
             Only --variant rows (default 'plain') are plotted. `flashcl
             bench --csv` (no variant column) is read too, with --metric
             fused_gflops or reference_gflops.
  --peer     zero or more CSVs with dtype,head_dim,causal,seqlen,backend and
             the metric column (bench/torch_sdpa_peers.py writes one); each
             distinct backend is one series, named by --peer-label
             BACKEND=LABEL (defaults for torch's 'flash' and 'cudnn').
  --metric   tflops (TFLOP/s, default) or gbps (GB/s). A memory-bound
             benchmark (decode; none exists yet) writes a gbps column and
             --metric gbps plots it the same way; --x names the column
             on the x axis (default seqlen; seqlen_k for such a CSV).
"""
import argparse
import csv
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

DEFAULT_LABELS = {
    "flash": "torch SDPA FLASH_ATTENTION (FlashAttention-2)",
    "cudnn": "torch SDPA CUDNN_ATTENTION (cuDNN)",
}
METRICS = {"tflops": ("TFLOP/s", 1.0), "gbps": ("GB/s", 1.0),
           # the columns of `flashcl bench --csv`
           "fused_gflops": ("GFLOP/s", 1.0),
           "reference_gflops": ("GFLOP/s", 1.0)}
# flashcl first, then peers: colours in the FlashAttention figures' spirit
COLOURS = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def read_csv(path):
    """(rows, comment lines) of a CSV whose '#' lines are comments."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    comments = [l for l in lines if l.startswith("#")]
    rows = list(csv.DictReader(l for l in lines if l and not l.startswith("#")))
    return rows, comments


def number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def key_of(row, x):
    return (row["dtype"], int(row["head_dim"]), int(row.get("causal") or 0),
            int(row[x]))


def load(args):
    """series[name][(dtype, D, causal, x)] = metric value; order of names."""
    series = defaultdict(dict)
    rows, comments = read_csv(args.flashcl)
    x = args.x
    for r in rows:
        if r.get("variant", "plain") != args.variant:
            continue
        value = number(r.get(args.metric))
        if value is not None:
            series["flashcl"][key_of(r, x)] = value
    if not series["flashcl"]:
        sys.exit(f"plot_bench: no '{args.variant}' rows with a {args.metric} "
                 f"column in {args.flashcl}")
    labels = dict(DEFAULT_LABELS)
    for item in args.peer_label:
        name, _, label = item.partition("=")
        labels[name] = label
    names = ["flashcl"]
    for path in args.peer:
        prows, _ = read_csv(path)
        for r in prows:
            value = number(r.get(args.metric))
            if value is None:
                continue
            name = labels.get(r.get("backend", Path(path).stem),
                              r.get("backend", Path(path).stem))
            if name not in names:
                names.append(name)
            series[name][key_of(r, x)] = value
    sgemm = []
    for line in comments:
        m = re.match(r"#\s*clblast_sgemm_(\d+)_gflops,([\d.eE+-]+)", line)
        if m:
            sgemm.append((int(m[1]), float(m[2])))
    return series, names, sgemm


def title_of(args, what):
    parts = [what]
    if args.device:
        parts.append(args.device)
    if args.date:
        parts.append(args.date)
    return ", ".join(parts)


def fmt_x(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def label_of(v):
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2g}"


def speed_figure(plt, series, names, sgemm, dtype, args, path):
    """One figure for `dtype`: a panel per (causal, head dim), grouped bars
    per sequence length, the value on each bar."""
    unit = METRICS[args.metric][0]
    ours = series["flashcl"]
    peak = max(v for n in names for k, v in series[n].items() if k[0] == dtype)
    factor = 1.0
    if args.metric == "tflops" and peak < 1.0:  # a CPU: GFLOP/s reads better
        unit, factor = "GFLOP/s", 1e3
    dims = sorted({k[1] for k in ours if k[0] == dtype})
    causals = sorted({k[2] for k in ours if k[0] == dtype})
    fig, axes = plt.subplots(len(causals), len(dims), squeeze=False,
                             figsize=(5.6 * len(dims), 3.9 * len(causals) + 0.9))
    present = [n for n in names if any(k[0] == dtype for k in series[n])]
    for ci, causal in enumerate(causals):
        for di, d in enumerate(dims):
            ax = axes[ci][di]
            xs = sorted({k[3] for k in ours if k[:3] == (dtype, d, causal)})
            width = 0.8 / len(present)
            top = 0.0
            for si, name in enumerate(present):
                vals = [series[name].get((dtype, d, causal, n)) for n in xs]
                vals = [None if v is None else v * factor for v in vals]
                pos = [i - 0.4 + width * (si + 0.5) for i in range(len(xs))]
                hs = [v if v is not None else 0.0 for v in vals]
                bars = ax.bar(pos, hs, width, label=name,
                              color=COLOURS[names.index(name) % len(COLOURS)])
                for bar, v in zip(bars, vals):
                    if v is None:
                        continue
                    top = max(top, v)
                    ax.annotate(label_of(v), (bar.get_x() + bar.get_width() / 2, v),
                                ha="center", va="bottom", fontsize=7,
                                xytext=(0, 1), textcoords="offset points")
            if args.metric == "tflops" and dtype == "fp32":
                for n, gflops in sgemm:
                    level = gflops / 1e3 * factor
                    top = max(top, level)
                    ax.axhline(level, ls="--", color="grey", lw=1.2,
                               label=f"CLBlast SGEMM {n}³, same run "
                                     f"({label_of(level)} {unit})")
            ax.set_xticks(range(len(xs)), [fmt_x(n) for n in xs])
            ax.set_ylim(0, top * 1.15 if top else 1)
            ax.set_xlabel("sequence length" if args.x == "seqlen" else args.x)
            ax.set_ylabel(f"speed ({unit})")
            ax.set_title(f"{'causal' if causal else 'non-causal'}, head dim {d}",
                         fontsize=10)
            ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels),
               fontsize=9, frameon=False)
    fig.suptitle(title_of(args, f"Attention forward speed, {dtype}"),
                 fontsize=12)
    if args.note:
        fig.text(0.5, 0.945, args.note, ha="center", fontsize=8, color="dimgrey")
    fig.tight_layout(rect=(0, 0.06, 1, 0.93 if args.note else 0.95))
    fig.savefig(path, dpi=args.dpi)
    plt.close(fig)


def ratio_figure(plt, series, names, args, path):
    """flashcl / peer against sequence length: a panel per peer, a line
    per (dtype, head dim, causal)."""
    peers = [n for n in names if n != "flashcl"]
    ours = series["flashcl"]
    fig, axes = plt.subplots(1, len(peers), squeeze=False,
                             figsize=(6.2 * len(peers), 4.6))
    styles = {0: "-", 1: "--"}
    markers = ["o", "s", "^", "D", "v", "P"]
    combos = sorted({k[:3] for k in ours})
    dims = sorted({c[1] for c in combos})
    dtypes = sorted({c[0] for c in combos})
    for pi, peer in enumerate(peers):
        ax = axes[0][pi]
        for dtype, d, causal in combos:
            pts = [(k[3], v / series[peer][k]) for k, v in sorted(ours.items())
                   if k[:3] == (dtype, d, causal) and series[peer].get(k)]
            if not pts:
                continue
            colour = COLOURS[(dtypes.index(dtype) * len(dims) + dims.index(d))
                             % len(COLOURS)]
            ax.plot([p[0] for p in pts], [p[1] for p in pts],
                    ls=styles[causal], marker=markers[dims.index(d) % len(markers)],
                    color=colour, ms=4,
                    label=f"{dtype}, D={d}, {'causal' if causal else 'non-causal'}")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log", base=2)
        xs = sorted({k[3] for k in ours})
        ax.set_xticks(xs, [fmt_x(n) for n in xs])
        ax.minorticks_off()
        ax.set_xlabel("sequence length" if args.x == "seqlen" else args.x)
        ax.set_ylabel(f"flashcl / peer ({METRICS[args.metric][0]} ratio)")
        ax.set_title(f"flashcl / {peer}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(title_of(args, "flashcl relative to peers measured in the "
                                "same run (> 1: flashcl faster)"), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=args.dpi)
    plt.close(fig)


INSTALL_HINT = ("pip install 'flashcl[plot]' (from a checkout: pip install "
                "'./python[plot]'), or pip install matplotlib")


def _pyplot(prog):
    """matplotlib.pyplot on the file-only Agg backend; a missing
    matplotlib ends the program with what to install, not a traceback."""
    try:
        import matplotlib
    except ImportError as e:
        sys.exit(f"{prog}: the figures need matplotlib, which is not "
                 f"installed ({e}). Install the plot extra: {INSTALL_HINT}")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog or "flashcl-plot",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--flashcl", required=True, help="flashcl-bench --csv output")
    ap.add_argument("--peer", action="append", default=[],
                    help="peer CSV (dtype,head_dim,causal,seqlen,backend,<metric>)")
    ap.add_argument("--peer-label", action="append", default=[],
                    metavar="BACKEND=LABEL")
    ap.add_argument("-o", "--output", required=True,
                    help="output prefix: PREFIX-<dtype>.png, PREFIX-ratio.png")
    ap.add_argument("--device", default="", help="device named in the titles")
    ap.add_argument("--date", default="", help="date of the run, in the titles")
    ap.add_argument("--note", default="", help="a line under the title")
    ap.add_argument("--metric", choices=sorted(METRICS), default="tflops")
    ap.add_argument("--x", default="seqlen", help="x-axis column")
    ap.add_argument("--variant", default="plain")
    ap.add_argument("--dpi", type=int, default=130)
    args = ap.parse_args(argv)
    if not args.date:  # results/<device>-YYYY-MM-DD-...
        m = re.search(r"(\d{4}-\d{2}-\d{2})", Path(args.flashcl).name)
        args.date = m[1] if m else ""

    plt = _pyplot(ap.prog)
    series, names, sgemm = load(args)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    written = []
    for dtype in sorted({k[0] for k in series["flashcl"]}):
        path = f"{args.output}-{dtype}.png"
        speed_figure(plt, series, names, sgemm, dtype, args, path)
        written.append(path)
    if len(names) > 1:
        path = f"{args.output}-ratio.png"
        ratio_figure(plt, series, names, args, path)
        written.append(path)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
