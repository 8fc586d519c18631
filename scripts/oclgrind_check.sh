#!/usr/bin/env bash
# The backward's kernels (and the forward that feeds them) on Oclgrind's
# simulated device with data-race detection: `flashcl run --backward` on a
# few small cases that touch every kernel of both passes, the variants and
# the CLBlast reference backward, and three quantized-KV-cache cases of
# tests/test_kv_quant.c. Any message Oclgrind logs (an invalid or
# out-of-bounds access, a data race, an API error) fails the check, and so
# does a gradient outside the tolerance. About 30 s.
#
#   scripts/oclgrind_check.sh [BUILD]     # BUILD: build-test by default
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-test}
unset FLASHCL_DEVICE FLASHCL_PATH FLASHCL_BACKEND
log=$(mktemp)
trap 'rm -f "$log"' EXIT
shape=(--seqlen-q 37 --seqlen-k 53 --heads 4 --heads-kv 2 --head-dim 16 --reps 1)
cases=("--dtype fp32 --causal"
       "--dtype fp16 --window 5,7"
       "--dtype bf16 --softcap 10 --causal"
       "--dtype fp32 --head-dim 40 --batch 2 --window 3,0"
       "--backend reference --causal --softcap 5")
# Oclgrind reports itself a CPU as well as a GPU, so the cases above take
# the CPUs' plan (4 keys or rows per work-item, dQ's sums in memory); these
# force the GPUs' 1 and an uneven 3 (FLASHCL_BWD_ROWS, a developer knob:
# BUILD must be a developer build, as build-test is), and dQ made in the
# dK/dV pass (the CPUs' plan; FLASHCL_BWD_FUSED_DQ) over 128-key blocks:
# two, and a window whose rows see only the second.
rows_cases=("FLASHCL_BWD_ROWS=1|--dtype fp32 --window 9,4"
            "FLASHCL_BWD_ROWS=1|--dtype bf16 --causal --heads-kv 1 --softcap 10"
            "FLASHCL_BWD_ROWS=3|--dtype fp32 --head-dim 40 --batch 2"
            "FLASHCL_BWD_FUSED_DQ=1 FLASHCL_BWD_ROWS=1|--dtype fp32 --causal --seqlen-k 150"
            "FLASHCL_BWD_FUSED_DQ=1 FLASHCL_BWD_ROWS=1|--dtype bf16 --window 20,9 --seqlen-k 200 --batch 2")
check() { # ENV CASE
  local c=$2
  : > "$log"
  # shellcheck disable=SC2086 # a case, and its environment, are several words
  if ! env $1 FLASHCL_CACHE=0 oclgrind --data-races --check-api \
       --log "$log" "$B/flashcl" run --backward "${shape[@]}" $c \
       > "$log.out" 2>&1; then
    echo "oclgrind_check: flashcl run failed under Oclgrind: $c" >&2
    cat "$log.out" "$log" >&2
    rm -f "$log.out"
    exit 1
  fi
  if [ -s "$log" ]; then
    echo "oclgrind_check: Oclgrind reported, for $c:" >&2
    head -30 "$log" >&2
    rm -f "$log.out"
    exit 1
  fi
  echo "ok   ${1:+$1 }$c"
}
for c in "${cases[@]}"; do check "" "$c"; done
for c in "${rows_cases[@]}"; do check "${c%%|*}" "${c#*|}"; done
rm -f "$log.out"
# Quantized KV caches (issue 45): cases 0, 5 and 10 of
# tests/test_kv_quant.c (fp8 dense decode; int4 keys and int8 values,
# paged, chunked prefill with a window and softcap; int8 with non-finite
# scales), a few seconds. Built without
# optimisation: Oclgrind cannot create the optimised split kernel
# ("Undefined external function: llvm.experimental.noalias.scope.decl").
: > "$log"
if ! OCLGRIND_BUILD_OPTIONS=-cl-opt-disable FLASHCL_CACHE=0 \
     FLASHCL_KVQ_CASES=5 oclgrind --data-races --check-api --log "$log" \
     "$B/tests/test_kv_quant" > "$log.out" 2>&1 || [ -s "$log" ]; then
  echo "oclgrind_check: test_kv_quant failed or Oclgrind reported:" >&2
  cat "$log.out" >&2
  head -30 "$log" >&2
  rm -f "$log.out"
  exit 1
fi
echo "ok   test_kv_quant (cases 0, 5, 10)"
# The same cases on the wide split kernel at its GPU tile (issue 45).
: > "$log"
if ! OCLGRIND_BUILD_OPTIONS=-cl-opt-disable FLASHCL_CACHE=0 \
     FLASHCL_KVQ_CASES=5 FLASHCL_SPLIT_KERNEL=wide oclgrind --data-races \
     --check-api --log "$log" "$B/tests/test_kv_quant" > "$log.out" 2>&1 ||
   [ -s "$log" ]; then
  echo "oclgrind_check: test_kv_quant (wide kernel) failed or Oclgrind reported:" >&2
  cat "$log.out" >&2
  head -30 "$log" >&2
  rm -f "$log.out"
  exit 1
fi
echo "ok   test_kv_quant on the wide kernel (cases 0, 5, 10)"
rm -f "$log.out"
