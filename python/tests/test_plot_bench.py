"""bench/plot_bench.py on the committed H200 results and on a CPU-style
CSV with the SGEMM peer line and a GB/s column."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "plot_bench.py"
RESULTS = REPO / "bench" / "results"
PNG = b"\x89PNG\r\n\x1a\n"


def run(*args):
    out = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                         check=True, capture_output=True, text=True).stdout
    return [Path(line) for line in out.split()]


def test_h200_figures(tmp_path):
    written = run("--flashcl", RESULTS / "h200-2026-11-29-flashcl.csv",
                  "--peer", RESULTS / "h200-2026-11-29-torch-sdpa.csv",
                  "--device", "NVIDIA H200", "-o", tmp_path / "h200")
    assert sorted(p.name for p in written) == [
        "h200-bf16.png", "h200-fp16.png", "h200-ratio.png"]
    for path in written:
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 20000


def test_cpu_csv_with_sgemm_and_gbps(tmp_path):
    csv = tmp_path / "pocl-2026-12-01.csv"
    csv.write_text(
        "variant,dtype,head_dim,causal,seqlen,batch,heads,first_call_ms,"
        "median_ms,min_ms,tflops,gbps\n"
        "plain,fp32,64,0,256,8,4,57.6,14.75,14.61,0.036394,0.569\n"
        "plain,fp32,64,0,512,4,4,27.5,27.71,27.62,0.038748,0.303\n"
        "window1024,fp32,64,0,512,4,4,27.5,27.71,27.62,0.01,0.1\n"
        "# clblast_sgemm_2048_gflops,15.521\n")
    for metric in ("tflops", "gbps"):
        written = run("--flashcl", csv, "--metric", metric, "-o",
                      tmp_path / metric)
        assert [p.name for p in written] == [f"{metric}-fp32.png"]
        assert written[0].read_bytes()[:8] == PNG


CPU_CSV = ("variant,dtype,head_dim,causal,seqlen,batch,heads,median_ms,"
           "tflops\nplain,fp32,64,0,256,8,4,14.75,0.036394\n")


def run_without_matplotlib(tmp_path, start):
    """`start` (Python) with matplotlib unimportable, as if not installed."""
    csv = tmp_path / "in.csv"
    csv.write_text(CPU_CSV)
    argv = ["plot", "--flashcl", str(csv), "-o", str(tmp_path / "out")]
    code = ("import runpy, sys\n"
            "sys.modules['matplotlib'] = None  # import matplotlib fails\n"
            f"sys.argv = {argv!r}\n" + start)
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True)


def test_missing_matplotlib_says_what_to_install(tmp_path):
    for start in (f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')",
                  "runpy.run_module('flashcl.plot', run_name='__main__')"):
        run = run_without_matplotlib(tmp_path, start)
        assert run.returncode == 1, (start, run.stderr)
        assert "Traceback" not in run.stderr, run.stderr
        assert "matplotlib" in run.stderr
        assert "pip install 'flashcl[plot]'" in run.stderr, run.stderr
        assert run.stdout == "" and not list(tmp_path.glob("out*"))


def test_installed_plot_extra_and_command(tmp_path):
    """The pip-installed package (python/ci_test.sh installs it): the
    "plot" extra asks for matplotlib and `flashcl-plot` draws."""
    import importlib.metadata as md
    import sysconfig
    try:
        dist = md.distribution("flashcl")
    except md.PackageNotFoundError:
        pytest.skip("flashcl is not pip-installed (run from the checkout)")
    assert "plot" in (dist.metadata.get_all("Provides-Extra") or [])
    assert any(r.startswith("matplotlib") and 'extra == "plot"' in r
               for r in dist.requires or []), dist.requires
    tool = Path(sysconfig.get_path("scripts")) / "flashcl-plot"
    assert tool.is_file(), f"{tool} not installed"
    csv = tmp_path / "pocl-2026-12-06.csv"
    csv.write_text(CPU_CSV)
    out = subprocess.run([str(tool), "--flashcl", str(csv), "-o",
                          str(tmp_path / "fig")], check=True,
                         capture_output=True, text=True).stdout
    assert [Path(p).name for p in out.split()] == ["fig-fp32.png"]
    assert (tmp_path / "fig-fp32.png").read_bytes()[:8] == PNG


def test_cli_bench_csv(tmp_path):
    """`flashcl bench --csv`'s columns (no variant), GFLOP/s metrics."""
    csv = tmp_path / "cli.csv"
    csv.write_text(
        "dtype,head_dim,causal,seqlen,batch,heads,fused_ms,reference_ms,"
        "speedup,fused_gflops,reference_gflops,fused_scratch_bytes,"
        "reference_scratch_bytes,error\n"
        "fp32,64,0,64,3,1,0.5,2.1,4.2,6.3,1.5,0,246528,\n"
        "fp32,64,0,96,2,1,0.7,2.9,4.1,7.1,1.7,0,271104,\n")
    for metric in ("fused_gflops", "reference_gflops"):
        written = run("--flashcl", csv, "--metric", metric, "-o",
                      tmp_path / metric)
        assert [p.name for p in written] == [f"{metric}-fp32.png"]
        assert written[0].read_bytes()[:8] == PNG
