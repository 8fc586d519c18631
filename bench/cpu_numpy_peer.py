#!/usr/bin/env python3
"""flashcl's CPU kernels beside NumPy's unfused attention, in one run.

Issue 15's comparison: fp32, B=1 H=8 N=2048 D=64 (--heads, --seqlen,
--head-dim change it), on the CPU's cores (--threads, default 2):

  * NumPy: S = Q K^T * scale; S -= max; exp; S /= sum; O = S V, float32,
    OpenBLAS limited to --threads threads by threadpoolctl (its version,
    threading layer and core type are printed). OPENBLAS_CORETYPE is
    removed from the environment (the script re-executes itself without
    it), so OpenBLAS picks its kernels from the CPU as it would for a user.
    Host clock (perf_counter) around the whole expression, median of --reps
    after one warm-up.
  * flashcl: build/flashcl-bench on each CPU runtime found (PoCL, the
    default platform; Intel's OpenCL CPU runtime through
    scripts/intel_cpu_runtime.sh) and each kernel path asked for there
    (portable everywhere; subgroup on Intel), device-side time from OpenCL
    profiling events, median of --reps after --warmup calls; the first call
    (kernel compile or cache load + first run, host clock) is reported
    apart. --check rows of the output are compared with the float64 oracle.

The peers run interleaved: each of --rounds rounds times NumPy, then each
flashcl configuration, so all see the same load on a shared machine; a
configuration's figure is the median of its round medians.

GFLOP/s count 4 B H N^2 D FLOPs (the two matmuls; the softmax is not
counted). The ceiling is measured: build/flashcl-fma-peak runs independent
FMA chains on --threads threads (bench/fma_peak.c), 256- and 512-bit, at
the start of every round (the best is kept: other jobs only lower it);
the nominal figure (cores x FLOP/cycle x the clock /proc/cpuinfo reports,
which under KVM is the nominal TSC clock, not the boost clock) is printed
beside it, with the clock the measured peak implies.

    .venv-ci/bin/python bench/cpu_numpy_peer.py --build build

--backward times the backward instead (issue 43): NumPy's unfused
backward from the forward's saved P and O, as autograd keeps them
(dV = P^T dO, dP = dO V^T, Delta = rowsum(dO * O), dS = P * (dP - Delta),
dQ = dS K * scale, dK = dS^T Q * scale), against flashcl-bench --backward
(which recomputes P from Q, K and the LSE); GFLOP/s on FlashAttention's
convention, 2.5 x the forward's 4 B H N^2 D; --check compares dQ, dK, dV.
Each flashcl row also gives the forward's time in the same process and the
backward/forward ratio. --causal 1 times flashcl's causal calls (FLOPs
halved); NumPy's unfused backward does the same work either way (its P is
saved, masked entries are zeros), so its time is the non-causal one.
--compare-build DIR adds DIR's flashcl-bench on PoCL (e.g. a build of the
base commit) to every round: old and new kernels under the same load.

(.venv-ci: python/ci_test.sh makes it from python/requirements-ci.txt.)
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def drop_coretype():
    """Re-executes without OPENBLAS_CORETYPE (OpenBLAS reads it at load)."""
    if "OPENBLAS_CORETYPE" in os.environ:
        env = dict(os.environ)
        print(f"OPENBLAS_CORETYPE={env.pop('OPENBLAS_CORETYPE')} removed; "
              "re-running", flush=True)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build",
                    help="build folder with flashcl-bench, flashcl-fma-peak")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--check", type=int, default=8,
                    help="output rows checked against the float64 oracle")
    ap.add_argument("--runtimes", default="pocl,intel",
                    help="pocl,intel: the CPU runtimes to try")
    ap.add_argument("--intel-paths", default="portable,subgroup")
    ap.add_argument("--flop-per-cycle", type=float, default=32.0,
                    help="fp32 FLOP per cycle per core for the nominal peak "
                         "(default 32: two 256-bit FMA pipes, as Zen 4 and "
                         "Skylake-SP client cores)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--backward", action="store_true",
                    help="time the backward (see the module's doc)")
    ap.add_argument("--causal", type=int, choices=(0, 1), default=0,
                    help="flashcl's calls causal (FLOPs halved)")
    ap.add_argument("--compare-build",
                    help="another build folder whose flashcl-bench also "
                         "runs on PoCL each round")
    return ap.parse_args()


def blas_info(threads):
    from threadpoolctl import threadpool_info, threadpool_limits
    limiter = threadpool_limits(limits=threads, user_api="blas")
    info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    for i in info:
        print(f"BLAS: {i.get('internal_api')} {i.get('version')}, threading "
              f"layer {i.get('threading_layer')}, core type "
              f"{i.get('architecture')}, {i.get('num_threads')} threads "
              f"({i.get('filepath')})")
    if not info:
        print("BLAS: threadpoolctl found no BLAS library", file=sys.stderr)
    return limiter, info


def numpy_attention(q, k, v, scale):
    import numpy as np
    s = np.matmul(q, k.transpose(0, 2, 1))
    s *= scale
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v)


def numpy_probabilities(q, k, scale):
    import numpy as np
    s = np.matmul(q, k.transpose(0, 2, 1))
    s *= scale
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


def numpy_backward(q, k, v, p, o, d_o, scale):
    """dQ, dK, dV from the saved P and O (fp32, unfused)."""
    import numpy as np
    d_v = np.matmul(p.transpose(0, 2, 1), d_o)
    d_s = np.matmul(d_o, v.transpose(0, 2, 1))
    d_s -= (d_o * o).sum(axis=-1, keepdims=True)
    d_s *= p
    d_s *= scale
    return np.matmul(d_s, k), np.matmul(d_s.transpose(0, 2, 1), q), d_v


def time_numpy(q, k, v, scale, reps, backward=False):
    fn = lambda: numpy_attention(q, k, v, scale)
    if backward:
        import numpy as np
        p = numpy_probabilities(q, k, scale)
        o = np.matmul(p, v)
        d_o = np.random.default_rng(43).uniform(-1, 1, o.shape).astype(np.float32)
        fn = lambda: numpy_backward(q, k, v, p, o, d_o, scale)
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def fma_peak(build, threads):
    exe = os.path.join(build, "flashcl-fma-peak")
    out = subprocess.run([exe, "--threads", str(threads)], check=True,
                         capture_output=True, text=True).stdout
    peaks = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split()[1:])
        peaks[fields["isa"]] = (float(fields["best_gflops"]),
                                float(fields["median_gflops"]))
    return peaks


def nominal_peak(threads, flop_per_cycle):
    mhz = None
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                mhz = float(line.split(":")[1])
                break
    if mhz is None:
        return None, None
    return threads * flop_per_cycle * mhz * 1e-3, mhz


def intel_env():
    """The environment scripts/intel_cpu_runtime.sh sets up, or None."""
    script = os.path.join(ROOT, "scripts", "intel_cpu_runtime.sh")
    r = subprocess.run(["bash", "-c", f'eval "$({script})" && env -0'],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"Intel runtime: not available ({r.stderr.strip()[-200:]})",
              file=sys.stderr)
        return None
    return dict(e.split("=", 1) for e in r.stdout.split("\0") if "=" in e)


def configurations(args):
    configs = []
    base = dict(os.environ)
    base.pop("FLASHCL_PATH", None)
    base.pop("FLASHCL_TILES", None)
    if "pocl" in args.runtimes.split(","):
        env = dict(base)
        env["FLASHCL_DEVICE"] = "pocl"
        configs.append(("PoCL portable", env))
        if args.compare_build:
            configs.append((f"PoCL portable ({args.compare_build})",
                            dict(env, FLASHCL_BENCH_BUILD=args.compare_build)))
    if "intel" in args.runtimes.split(","):
        env = intel_env()
        if env:
            for path in args.intel_paths.split(","):
                e = dict(env)
                e.pop("FLASHCL_TILES", None)
                e["FLASHCL_PATH"] = path
                configs.append((f"Intel {path}", e))
    return configs


def run_flashcl(args, env):
    """(median ms, first call ms, rel L2 error, header line, forward ms)."""
    env = dict(env)
    exe = os.path.join(env.pop("FLASHCL_BENCH_BUILD", args.build),
                       "flashcl-bench")
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = os.path.join(tmp, "rows.csv")
        cmd = [exe, "--dtype", "fp32", "--head-dim", str(args.head_dim),
               "--seqlen", str(args.seqlen), "--tokens", str(args.seqlen),
               "--hidden", str(args.heads * args.head_dim), "--causal",
               str(args.causal),
               "--sgemm", "0", "--reps", str(args.reps), "--warmup",
               str(args.warmup), "--check", str(args.check), "--csv",
               csv_path] + (["--backward"] if args.backward else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}\n"
                               f"{r.stderr}")
        with open(csv_path) as f:
            row = next(csv.DictReader(f))
    err = None
    for line in r.stdout.splitlines():
        if line.startswith("check|") and "rel_l2" in line and not args.backward:
            err = float(line.split("rel_l2")[1].split("|")[0])
        if line.startswith("check-bwd|") and args.backward:  # worst of dQ, dK, dV
            err = max(float(line.split(g + " ")[1].split("|")[0])
                      for g in ("dq", "dk", "dv"))
    header = next((l for l in r.stdout.splitlines()
                   if l.startswith("flashcl ")), "")
    ms = float(row["bwd_median_ms" if args.backward else "median_ms"])
    return ms, float(row["first_call_ms"]), err, header, float(row["median_ms"])


def main():
    drop_coretype()
    args = parse_args()
    import numpy as np
    limiter, info = blas_info(args.threads)

    b, h, n, d = 1, args.heads, args.seqlen, args.head_dim
    flops = 4.0 * b * h * n * n * d * (2.5 if args.backward else 1.0)
    if args.causal:
        flops /= 2
    rng = np.random.default_rng(15)
    q, k, v = (rng.uniform(-1, 1, (h, n, d)).astype(np.float32)
               for _ in range(3))
    scale = np.float32(1 / np.sqrt(d))

    peaks = fma_peak(args.build, args.threads)
    nominal, mhz = nominal_peak(args.threads, args.flop_per_cycle)
    if nominal:
        print(f"nominal: {args.threads} cores x {args.flop_per_cycle:g} "
              f"FLOP/cycle x {mhz:.0f} MHz (/proc/cpuinfo) = "
              f"{nominal:.1f} GFLOP/s")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    configs = configurations(args)
    results = {"NumPy": []}
    extra = {}
    for name, _ in configs:
        results[name] = []
    for rnd in range(args.rounds):
        if rnd:  # the peak once per round too: a shared machine lowers it
            for isa, (best, med) in fma_peak(args.build,
                                             args.threads).items():
                old = peaks.get(isa, (0, 0))
                peaks[isa] = (max(best, old[0]), max(med, old[1]))
        ms = time_numpy(q, k, v, scale, args.reps, args.backward)
        results["NumPy"].append(ms)
        line = [f"round {rnd + 1}: NumPy {ms:.1f} ms"]
        for name, env in configs:
            med, first, err, header, fwd = run_flashcl(args, env)
            results[name].append(med)
            extra.setdefault(name, {"first": [], "err": [], "header": header,
                                    "fwd": []})
            extra[name]["fwd"].append(fwd)
            extra[name]["first"].append(first)
            extra[name]["err"].append(err)
            line.append(f"{name} {med:.1f} ms")
        print(", ".join(line), flush=True)
    limiter.restore_original_limits()
    peak = max(best for best, _ in peaks.values())
    for isa, (best, med) in peaks.items():
        print(f"FMA peak ({isa}, {args.threads} threads, bench/fma_peak.c, "
              f"best of {args.rounds} runs): best round {best:.1f} GFLOP/s, "
              f"median round {med:.1f}")
    ghz = peak / args.threads / args.flop_per_cycle
    print(f"the measured peak implies {ghz:.2f} GHz at "
          f"{args.flop_per_cycle:g} FLOP/cycle per core")

    for name in extra:
        e = extra[name]
        print(f"{name}: {e['header']}")
        print(f"  first call (compile or cache load + run, host clock): "
              + ", ".join(f"{x:.0f}" for x in e["first"]) + " ms; rel L2 "
              f"error vs float64 oracle ({args.check} rows): "
              + ", ".join(f"{x:.2e}" for x in e["err"] if x is not None))
        if args.backward:
            fwd = statistics.median(e["fwd"])
            print(f"  forward in the same runs: {fwd:.1f} ms (median of "
                  f"rounds); backward/forward "
                  f"{statistics.median(results[name]) / fwd:.2f}")

    numpy_ms = statistics.median(results["NumPy"])
    print(f"\n{'backward' if args.backward else 'forward'}: "
          f"fp32 B={b} H={h} N={n} D={d}"
          f"{', causal' if args.causal else ''}, {args.threads} threads, "
          f"median of {args.rounds} rounds (each the median of {args.reps})")
    print("| peer | ms | GFLOP/s | vs NumPy | % of measured FMA peak "
          f"({peak:.0f}) | % of nominal ({nominal:.0f}) |")
    print("|---|---|---|---|---|---|")
    table = []
    for name, times in results.items():
        ms = statistics.median(times)
        gflops = flops / ms * 1e-6
        row = {"peer": name, "ms": ms, "gflops": gflops,
               "ratio": numpy_ms / ms, "peak_pct": 100 * gflops / peak,
               "nominal_pct": 100 * gflops / nominal if nominal else None,
               "rounds_ms": times}
        table.append(row)
        print(f"| {name} | {ms:.1f} | {gflops:.1f} | {row['ratio']:.2f}x | "
              f"{row['peak_pct']:.0f} % | "
              f"{row['nominal_pct']:.0f} % |")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": [b, h, n, d], "threads": args.threads,
                       "blas": info, "fma_peak": peaks, "nominal": nominal,
                       "rows": table}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
