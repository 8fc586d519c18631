"""bench/plot_bench.py on the committed H200 results and on a CPU-style
CSV with the SGEMM peer line and a GB/s column."""
import subprocess
import sys
from pathlib import Path

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
