#!/usr/bin/env bash
# The reference backend and the flashcl CLI on a GPU machine with an OpenCL
# driver but no loader or packages (the lent H200): the reference backend's
# own suite, the forward/semantics/variant suites with
# FLASHCL_BACKEND=reference, `flashcl selftest`, and `flashcl bench` (fused
# vs reference). Build here first and carry the build and the runtime:
#
#   cmake -S . -B build-ref-gpu -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-ref-gpu -j
#   ../shared/tools/gpu-runtime fetch .gpu-rt
#   (there) bash scripts/gpu_reference_check.sh    # logs under $OUT (default out/)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-ref-gpu}
OUT=${OUT:-out}
mkdir -p "$OUT"
[ -f .gpu-rt/activate.sh ] && source .gpu-rt/activate.sh
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-gpu}

step() { # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" \
    "$(grep -E 'Checks:|PASS|FAIL' "$OUT/$name.log" | tail -1 | cut -c1-80)"
}

"$BUILD/flashcl" info >"$OUT/info.log" 2>&1; head -32 "$OUT/info.log"
step test_reference_backend 60 "$BUILD/tests/test_reference_backend"
step test_forward_reference 60 env FLASHCL_BACKEND=reference \
  "$BUILD/tests/test_forward"
step test_semantics_reference 30 env FLASHCL_BACKEND=reference \
  "$BUILD/tests/test_semantics"
step test_variants_reference 40 env FLASHCL_BACKEND=reference \
  "$BUILD/tests/test_variants"
step selftest 90 "$BUILD/flashcl" selftest
step bench 50 "$BUILD/flashcl" bench --dtype fp16 --head-dim 128 \
  --seqlen 1024,4096,16384 --causal both
grep -E 'FAIL|:F:|:E:' "$OUT"/*.log | head -20
tail -2 "$OUT/selftest.log"
grep -E '^\|' "$OUT/bench.log"
