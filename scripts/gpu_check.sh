#!/usr/bin/env bash
# Correctness and timing on a GPU machine with an OpenCL driver but no loader
# or packages (the lent H200). Build here first and carry the build:
#
#   cmake -S . -B build-gpu -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpu -j
#   ../shared/tools/gpu-runtime fetch .gpu-rt
#   (there) bash scripts/gpu_check.sh [fused|reference|all]   # logs under $OUT
#
# fused (default): the Check suites with the vendor path on and with
#   FLASHCL_PORTABLE_ONLY=1, `flashcl selftest`, the variant benchmark.
# reference: the reference backend's suite, the forward/semantics/variant
#   suites with FLASHCL_BACKEND=reference, `flashcl bench` (fused vs
#   reference).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-out}
mkdir -p "$OUT"
[ -f .gpu-rt/activate.sh ] && source .gpu-rt/activate.sh
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-gpu}
export FLASHCL_KERNEL_DIR=$PWD/cl

step() { # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-34s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" \
    "$(grep -E 'Checks:|PASS|FAIL' "$OUT/$name.log" | tail -1 | cut -c1-80)"
}

MODE=${1:-fused}

fused_checks() {
  for suite in test_forward test_semantics test_errors test_variants; do
    step "$suite" 90 "$BUILD/tests/$suite"
  done
  for suite in test_forward test_variants; do
    FLASHCL_PORTABLE_ONLY=1 step "${suite}_portable" 90 "$BUILD/tests/$suite"
  done
  step selftest 90 "$BUILD/flashcl" selftest
  step bench_variants_portable 90 env FLASHCL_PORTABLE_ONLY=1 \
    "$BUILD/flashcl-bench" --dtype fp16 --head-dim 128 --seqlen 16384 \
    --tokens 16384 --hidden 2048 --causal 1 --reps 5 --warmup 1 --sgemm 0 \
    --variants plain,window1024,alibi,bias,softcap
  step bench_fp32_portable 60 "$BUILD/flashcl-bench" --dtype fp32 \
    --head-dim 64,128 --seqlen 4096 --causal 0 --reps 5 --warmup 1 --sgemm 8192
  grep -E '^\|' "$OUT/bench_variants_portable.log" "$OUT/bench_fp32_portable.log" | cut -d: -f2-
  grep -E 'SGEMM' "$OUT/bench_fp32_portable.log"
}

reference_checks() {
  step test_reference_backend 60 "$BUILD/tests/test_reference_backend"
  for suite in test_forward test_semantics test_variants; do
    FLASHCL_BACKEND=reference step "${suite}_reference" 60 "$BUILD/tests/$suite"
  done
  step bench_reference 50 "$BUILD/flashcl" bench --dtype fp16 --head-dim 128 \
    --seqlen 1024,4096,16384 --causal both
  grep -E '^\|' "$OUT/bench_reference.log"
}

"$BUILD/flashcl" info >"$OUT/info.log" 2>&1; head -30 "$OUT/info.log"
case "$MODE" in
  fused) fused_checks ;;
  reference) reference_checks ;;
  all) fused_checks; reference_checks ;;
  *) echo "usage: gpu_check.sh [fused|reference|all]" >&2; exit 2 ;;
esac
grep -E ':F:|:E:' "$OUT"/*.log | head -20
