#!/usr/bin/env python3
"""The tuning database against the hand tables, on the same rows.

Runs flashcl-bench (OpenCL profiling events: median of --reps after
--warmup per row, compile excluded) over a protocol's rows with the
database as built ("tuned") and with FLASHCL_TUNING=off ("table": the
paths' hand tables), interleaved for --rounds rounds, so both see the
same load: by default tuned, table, table, tuned, tuned, table, ...
(--order abba: a load that drifts during a round favours neither; on the
2-core machine, tuned-first every round (--order ab) read one PoCL row
1.16x slower in 9 rounds where abba read it 0.94x in 10). Each row's time per mode is
the median of its round medians; tuned/table is paired per round (the
median of the round ratios; min-max in brackets). The entry that matched
comes from flashcl-bench --describe (flashcl_describe_variant's tuning
text); where the tuned run used the same path and tiles as the table run,
the row measures noise only, and those rows give the noise band.

Protocols (--protocol):
  gpu  the FlashAttention-2 paper's rows (bench/run_gpu.sh protocol): tokens
       (batch * seqlen) 16384, hidden 2048 (D=64 H=32, D=128 H=16),
       N = 512..16384, fp16 and bf16, causal and not
  cpu  the CPU rows of bench/results/pocl-2026-11-29.md, widened to the
       shapes the CPU entries were tuned at: tokens 2048, hidden 256,
       N = 256..2048, fp32, D = 64 and 128, causal and not
--dtype/--head-dim/--seqlen/--causal/--tokens/--hidden override a
protocol's lists.

FLASHCL_TUNING_FILE, FLASHCL_TILES and FLASHCL_NV_TILE are removed from
the environment (they would decide both modes) unless --tuning-file
gives the tuned mode a user database. Other variables pass through
(FLASHCL_PATH=nv_wgmma compares that path's entries with its table).

usage: bench/tuned_vs_table.py BUILD_DIR [--device SPEC] [--protocol cpu|gpu]
           [--rounds N] [--reps N] [--warmup N] [--output FILE.md]
           [--keep DIR] [--tuning-file FILE] [--budget SECONDS]
           [--order ab|abba]
"""
import argparse
import csv
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

PROTOCOLS = {
    "gpu": dict(dtype="fp16,bf16", head_dim="64,128",
                seqlen="512,1024,2048,4096,8192,16384", causal="both",
                tokens=16384, hidden=2048),
    "cpu": dict(dtype="fp32", head_dim="64,128", seqlen="256,512,1024,2048",
                causal="both", tokens=2048, hidden=256),
}
MODES = ("tuned", "table")
ROW_KEY = ("variant", "dtype", "head_dim", "causal", "seqlen")


def bench_command(args, proto, csv_path):
    cmd = [os.path.join(args.build, "flashcl-bench"), "--sgemm", "0",
           "--describe", "--reps", str(args.reps), "--warmup",
           str(args.warmup), "--csv", csv_path]
    for key in ("dtype", "head_dim", "seqlen", "causal", "tokens", "hidden"):
        cmd += ["--" + key.replace("_", "-"), str(proto[key])]
    if args.device:
        cmd += ["--device", args.device]
    return cmd


def mode_env(mode, args):
    env = dict(os.environ)
    for name in ("FLASHCL_TUNING_FILE", "FLASHCL_TILES", "FLASHCL_NV_TILE",
                 "FLASHCL_TUNING"):
        env.pop(name, None)
    if mode == "table":
        env["FLASHCL_TUNING"] = "off"
    elif args.tuning_file:
        env["FLASHCL_TUNING_FILE"] = os.path.abspath(args.tuning_file)
    return env


def parse_describe(text):
    """describe| variant | dtype | D | causal | N | path tiles | tuning"""
    out = {}
    for line in text.splitlines():
        if not line.startswith("describe|"):
            continue
        f = [x.strip() for x in line.split("|", 7)[1:]]
        if len(f) == 7:
            out[tuple(f[:5])] = (f[5], f[6])
    return out


def device_type(args):
    """"cpu" or "gpu" for the device flashcl selects (flashcl info)."""
    cmd = [os.path.join(args.build, "flashcl"), "info", "--json"]
    if args.device:
        cmd += ["--device", args.device]
    r = subprocess.run(cmd, capture_output=True, text=True)
    try:
        devices = json.loads(r.stdout)["devices"]
    except (ValueError, KeyError):
        sys.exit(f"flashcl info: exit {r.returncode}: {r.stderr[-500:]}")
    chosen = [d for d in devices if d.get("selected")]
    if not chosen:
        sys.exit(f"no device selected by {args.device!r}")
    return "cpu" if "cpu" in str(chosen[0].get("type", "")).lower() else "gpu"


def run_once(args, proto, mode, round_no, folder):
    csv_path = os.path.join(folder, f"{mode}_{round_no}.csv")
    cmd = bench_command(args, proto, csv_path)
    start = time.monotonic()
    r = subprocess.run(cmd, env=mode_env(mode, args), capture_output=True,
                       text=True, timeout=args.timeout)
    wall = time.monotonic() - start
    with open(os.path.join(folder, f"{mode}_{round_no}.log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0 or not os.path.exists(csv_path):
        sys.exit(f"flashcl-bench ({mode}, round {round_no}) exit "
                 f"{r.returncode}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    rows = {}
    with open(csv_path) as f:
        for x in csv.DictReader(l for l in f if not l.startswith("#")):
            rows[tuple(x[k] for k in ROW_KEY)] = float(x["median_ms"])
    header = next((l for l in r.stdout.splitlines()
                   if l.startswith("flashcl ")), "")
    return rows, parse_describe(r.stdout), header, wall


def fmt_ms(ms):
    return f"{ms:.3f}" if ms < 100 else f"{ms:.1f}"


def short_entry(text):
    """The describe text without the repeated device name."""
    text = re.sub(r" on [^,]*, (\d{4}-\d\d-\d\d)", r", \1", text)
    return text.replace("tuning DB, ", "").replace("|", "/")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--device")
    ap.add_argument("--protocol", choices=sorted(PROTOCOLS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    for key in ("dtype", "head_dim", "seqlen", "causal", "tokens", "hidden"):
        ap.add_argument("--" + key.replace("_", "-"), dest=key)
    ap.add_argument("--output", help="write the markdown here too")
    ap.add_argument("--keep", help="keep the bench logs and CSVs here")
    ap.add_argument("--tuning-file",
                    help="the tuned mode reads this FLASHCL_TUNING_FILE")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds: start no round after this (0: none)")
    ap.add_argument("--order", choices=("ab", "abba"), default="abba",
                    help="ab: tuned then table every round; abba: the "
                         "order swaps every round (cancels a drift)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds per flashcl-bench process")
    args = ap.parse_args()
    if not args.protocol:
        args.protocol = "cpu" if device_type(args) == "cpu" else "gpu"
    proto = dict(PROTOCOLS[args.protocol])
    for key in proto:
        if getattr(args, key) is not None:
            proto[key] = getattr(args, key)
    folder = args.keep or tempfile.mkdtemp(prefix="flashcl-tvt-")
    os.makedirs(folder, exist_ok=True)
    load_start = os.getloadavg()
    began = time.monotonic()
    times = {m: {} for m in MODES}   # mode -> row -> [round medians]
    described = {m: {} for m in MODES}
    header, walls, rounds_done = "", [], 0
    for rnd in range(args.rounds):
        if args.budget and rnd and time.monotonic() - began > args.budget:
            print(f"budget spent after {rnd} rounds", file=sys.stderr)
            break
        order = MODES if args.order == "ab" or rnd % 2 == 0 else MODES[::-1]
        for mode in order:
            rows, desc, header, wall = run_once(args, proto, mode, rnd,
                                                folder)
            walls.append(wall)
            for k, ms in rows.items():
                times[mode].setdefault(k, []).append(ms)
            described[mode].update(desc)
            print(f"round {rnd + 1}/{args.rounds} {mode}: {len(rows)} rows, "
                  f"{wall:.0f} s", file=sys.stderr)
        rounds_done += 1
    load_end = os.getloadavg()
    print_table(args, proto, times, described, header, rounds_done,
                load_start, load_end, walls, folder)


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))
                              ).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def print_table(args, proto, times, described, header, rounds, load_start,
                load_end, walls, folder):
    out = []
    say = out.append
    now = datetime.datetime.now(datetime.timezone.utc)
    say(f"date: {now:%Y-%m-%d %H:%M} UTC; machine: {platform.node()}, "
        f"{cpu_model()}, {os.cpu_count()} cores; flashcl commit {commit()}")
    say(f"device: {header}")
    say(f"command: {' '.join(sys.argv)}")
    say(f"protocol {args.protocol}: " + ", ".join(
        f"{k} {v}" for k, v in proto.items()))
    say(f"load average (1/5/15 min) at start {load_start[0]:.2f}/"
        f"{load_start[1]:.2f}/{load_start[2]:.2f}, at end {load_end[0]:.2f}/"
        f"{load_end[1]:.2f}/{load_end[2]:.2f}; {rounds} rounds of tuned, "
        f"table interleaved ({args.order}); bench processes "
        f"{sum(walls):.0f} s; logs in "
        f"{folder}")
    say("ms: median over rounds of flashcl-bench's per-row median "
        f"({args.reps} calls after {args.warmup} warm-up, profiling events); "
        "tuned/table: median of the per-round ratios [min-max]; 'same "
        "tiles': the database kept the table's tiles (noise only)")
    say("")
    say("| row (dtype D causal N) | table ms | tuned ms | tuned/table "
        "[min-max] | tiles (table -> tuned) | database entry (tuned run) |")
    say("|---|---:|---:|---|---|---|")
    noise, differing = [], []
    keys = sorted(set(times["tuned"]) & set(times["table"]),
                  key=lambda k: (k[0], k[1], int(k[2]), k[3], int(k[4])))
    for k in keys:
        a, b = times["tuned"][k], times["table"][k]
        n = min(len(a), len(b))
        ratios = [a[i] / b[i] for i in range(n)]
        r = statistics.median(ratios)
        t_tiles, t_entry = described["tuned"].get(k, ("?", "?"))
        b_tiles, _ = described["table"].get(k, ("?", "?"))
        same = t_tiles == b_tiles
        (noise if same else differing).append((k, r, min(ratios),
                                                max(ratios)))
        tiles = "same tiles: " + t_tiles if same else \
            f"{b_tiles} -> {t_tiles}"
        label = (f"{k[1]} D={k[2]} {'causal' if k[3] == '1' else 'non-causal'}"
                 f" N={k[4]}" + ("" if k[0] == "plain" else f" {k[0]}"))
        say(f"| {label} | {fmt_ms(statistics.median(b))} | "
            f"{fmt_ms(statistics.median(a))} | {r:.3f} [{min(ratios):.3f}-"
            f"{max(ratios):.3f}] | {tiles} | {short_entry(t_entry)} |")
    say("")
    lo_band = hi_band = 1.0
    if noise:
        lo_band = min(x[2] for x in noise)
        hi_band = max(x[3] for x in noise)
        say(f"noise: {len(noise)} rows ran the same tiles both ways; their "
            f"per-round ratios lie within {lo_band:.2f}-{hi_band:.2f}")
    else:
        say("noise: every row ran other tiles with the database (no "
            "same-tiles rows to estimate the noise from)")
    slower = [x for x in differing if x[2] > hi_band]
    faster = [x for x in differing if x[3] < lo_band]
    say(f"rows with other tiles: {len(differing)}; slower in every round "
        f"beyond the noise band: {len(slower)}; faster in every round beyond "
        f"it: {len(faster)}")
    for k, r, lo, hi in slower:
        say(f"  slower: {' '.join(k)}: {r:.3f} [{lo:.2f}-{hi:.2f}]")
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
