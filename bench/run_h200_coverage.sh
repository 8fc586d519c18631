#!/usr/bin/env bash
# The tensor-core coverage issue's measurements on the lent H200 (see
# ../shared/notes/opencl-on-h200.md). Build on the CPU machine and carry:
#
#   cmake -S . -B build-gpu -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpu -j
#   (there) bash bench/run_h200_coverage.sh [suites|sweep|bench|all]   # logs under $OUT
#
# suites: the forward, variant and semantics suites with
#   FLASHCL_EXPECT_PATH=nv_mma (every case must run on the tensor-core path
#   unless refused for fp32 without allow_tf32, fp64, misaligned rows, TF32
#   above head dim 128 or split-KV), then the fixes and accuracy suites.
# sweep:  FLASHCL_NV_TILE over candidate tiles per head dim (fp16, N=4096,
#   protocol shapes), one flashcl-bench per candidate.
# bench:  flashcl-bench on head dims and variants, then torch SDPA and
#   FlexAttention on the same shapes (bench/torch_variant_peers.py).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-out}
mkdir -p "$OUT"
source bench/h200_lib.sh
MODE=${1:-all}
BENCH=$BUILD/flashcl-bench


suites() {
  export FLASHCL_EXPECT_PATH=nv_mma
  export FLASHCL_EXPECT_PATH_EXCEPT="fp16/bf16 storage only;16-byte-aligned;TF32 runs head dims up to 128;split-KV"
  for suite in test_forward test_variants test_semantics; do
    step "$suite" 240 "$BUILD/tests/$suite"
  done
  unset FLASHCL_EXPECT_PATH FLASHCL_EXPECT_PATH_EXCEPT
  for suite in test_fixes test_accuracy; do # few forward calls of their own
    step "$suite" 240 "$BUILD/tests/$suite"
  done
  grep -h "ran on" "$OUT"/test_*.log | head -20
  grep -h "F:" "$OUT"/test_*.log | head -20
}

sweep_one() { # head_dim variant tile...
  local d=$1 variant=$2; shift 2
  for tile in "$@"; do
    for causal in ${CAUSAL:-0}; do
      local r
      r=$(FLASHCL_NV_TILE=$tile "$BENCH" --dtype fp16 --head-dim "$d" --seqlen 4096 \
            --causal "$causal" --variants "$variant" --reps 10 --warmup 2 --sgemm 0 2>&1 |
          grep -F "| $variant " | awk -F'|' '{print $11}')
      echo "sweep D=$d $variant causal=$causal tile=$tile TFLOP/s=$r"
    done
  done
}

sweep() {
  sweep_one 40 plain 128,64,4 128,32,4 64,64,4
  sweep_one 80 plain 128,32,4 128,64,4 64,64,4
  sweep_one 96 plain 128,32,4 128,64,4 64,64,4
  sweep_one 112 plain 128,32,4 128,16,4
  sweep_one 160 plain 64,32,4 64,16,4 128,16,4
  sweep_one 192 plain 64,32,4 64,16,4
  sweep_one 192 dv128 64,32,4 64,16,4
  sweep_one 256 plain 64,16,4 64,32,4
  CAUSAL=1 sweep_one 128 window1024+softcap+sinks 128,32,4 64,32,4 64,64,4
  CAUSAL=1 sweep_one 128 alibi+bias+mask 128,32,4 64,32,4 64,64,4
}

bench() {
  local common=(--reps 20 --warmup 3 --sgemm 0)
  "$BENCH" --dtype fp16,bf16 --head-dim 40,64,80,96,112,128,160,192,256 --seqlen 1024,4096,16384 \
      --causal both --variants plain "${common[@]}" --csv "$OUT/dims.csv" > "$OUT/dims.md" 2>&1
  "$BENCH" --dtype fp16 --head-dim 192 --seqlen 4096 --causal both --variants dv128 \
      "${common[@]}" --csv "$OUT/dv.csv" > "$OUT/dv.md" 2>&1
  "$BENCH" --dtype bf16 --head-dim 128 --seqlen 4096 --causal both \
      --variants plain,window1024,softcap,alibi,bias,mask,sinks,window1024+softcap+sinks \
      "${common[@]}" --csv "$OUT/variants.csv" > "$OUT/variants.md" 2>&1
  "$BENCH" --dtype bf16 --head-dim 128 --seqlen 8192 --causal 1 --variants window4096+gqa4 \
      "${common[@]}" --csv "$OUT/window_gqa.csv" > "$OUT/window_gqa.md" 2>&1
  "$BENCH" --dtype bf16 --head-dim 256 --seqlen 4096 --causal 1 --variants softcap \
      "${common[@]}" --csv "$OUT/gemma.csv" > "$OUT/gemma.md" 2>&1
  cat "$OUT"/dims.md "$OUT"/dv.md "$OUT"/variants.md "$OUT"/window_gqa.md "$OUT"/gemma.md | grep -E "^\|" | grep -v -- "---"
  if python3 -c 'import torch' 2>/dev/null; then
    local py=(timeout "${PEER_LIMIT:-150}" python3 bench/torch_variant_peers.py)
    "${py[@]}" --csv "$OUT/peers_dims.csv" --dtype fp16 \
      --head-dim 40,80,96,112,128,160,192,256 --seqlen 1024,4096 --causal 0,1 --variants plain \
      > "$OUT/peers_dims.log" 2>&1
    "${py[@]}" --csv "$OUT/peers_variants.csv" --dtype bf16 \
      --head-dim 128 --seqlen 4096 --causal 0,1 \
      --variants window1024,softcap,alibi,bias,mask,window1024+softcap > "$OUT/peers_variants.log" 2>&1
    "${py[@]}" --csv "$OUT/peers_misc.csv" --dtype bf16 \
      --head-dim 128 --seqlen 8192 --causal 1 --variants window4096+gqa4 > "$OUT/peers_misc.log" 2>&1
    "${py[@]}" --csv "$OUT/peers_gemma.csv" --dtype bf16 \
      --head-dim 256 --seqlen 4096 --causal 1 --variants softcap >> "$OUT/peers_misc.log" 2>&1
    "${py[@]}" --csv "$OUT/peers_dv.csv" --dtype fp16 \
      --head-dim 192 --seqlen 4096 --causal 0,1 --variants dv128 >> "$OUT/peers_misc.log" 2>&1
    grep -h "^peer" "$OUT"/peers_*.log
  fi
}

case "$MODE" in
suites) suites ;;
sweep) sweep ;;
bench) bench ;;
all) suites; sweep; bench ;;
*) echo "usage: $0 [suites|sweep|bench|all]" >&2; exit 2 ;;
esac
