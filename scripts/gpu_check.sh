#!/usr/bin/env bash
# Correctness and timing on a GPU machine with an OpenCL driver but no loader
# or packages (the lent H200). Build here first and carry the build:
#
#   cmake -S . -B build-gpu -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpu -j
#   ../shared/tools/gpu-runtime fetch .gpu-rt
#   (there) bash scripts/gpu_check.sh [fused|reference|compare|all]  # logs under $OUT
#
# fused (default): the Check suites with the vendor path on and with
#   FLASHCL_PORTABLE_ONLY=1, `flashcl selftest`.
# reference: the reference backend's suite and the forward/semantics/variant
#   suites with FLASHCL_BACKEND=reference.
# compare: flashcl-bench of this build against an older build carried in
#   build-old/ (OLD=dir), alternating, on the FlashAttention-2 protocol rows
#   (fp16/bf16, D 64/128, N 1024/4096/16384, causal and not): the speed of
#   a refactor is checked in one run on one GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OLD=${OLD:-build-old}
OUT=${OUT:-out}
mkdir -p "$OUT"
source bench/h200_lib.sh
STEP_SUMMARY='Checks:|PASS|FAIL'


MODE=${1:-fused}

fused_checks() {
  for suite in test_forward test_semantics test_errors test_variants \
               test_fixes test_threads test_accuracy; do
    [ -x "$BUILD/tests/$suite" ] && step "$suite" 120 "$BUILD/tests/$suite"
  done
  for suite in test_forward test_variants test_fixes; do
    FLASHCL_PORTABLE_ONLY=1 step "${suite}_portable" 120 "$BUILD/tests/$suite"
  done
  [ "${SKIP_SELFTEST:-0}" = 1 ] || step selftest 120 "$BUILD/flashcl" selftest
}

reference_checks() {
  step test_reference_backend 90 "$BUILD/tests/test_reference_backend"
  step test_strict_flush 60 "$BUILD/tests/test_strict_flush"
  for suite in test_forward test_semantics test_variants; do
    FLASHCL_BACKEND=reference step "${suite}_reference" 90 "$BUILD/tests/$suite"
  done
}

compare_speed() {
  local args=(--dtype fp16,bf16 --head-dim 64,128 --seqlen 1024,4096,16384
              --causal both --tokens 16384 --hidden 2048 --reps 20 --warmup 3
              --sgemm 0)
  for round in 1 2; do
    step "bench_old_$round" 200 "$OLD/flashcl-bench" "${args[@]}"
    step "bench_new_$round" 200 "$BUILD/flashcl-bench" "${args[@]}"
  done
  grep -h -E '^\|' "$OUT"/bench_old_1.log | head -3
  for f in "$OUT"/bench_*_?.log; do echo "== $f"; grep -E '^\| (fp16|bf16)' "$f"; done
}

"$BUILD/flashcl" info -v >"$OUT/info.log" 2>&1; head -40 "$OUT/info.log"
case "$MODE" in
  fused) fused_checks ;;
  reference) reference_checks ;;
  compare) compare_speed ;;
  all) fused_checks; reference_checks; compare_speed ;;
  *) echo "usage: gpu_check.sh [fused|reference|compare|all]" >&2; exit 2 ;;
esac
grep -h -E ':F:|:E:' "$OUT"/*.log | head -20
