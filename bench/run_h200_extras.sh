#!/usr/bin/env bash
# Bias and mask on the tensor-core kernel (issue 10) and decode timing
# (issue 11) on the lent H200 (see ../shared/notes/opencl-on-h200.md).
# Build on the CPU machine and carry build-gpu and .gpu-rt:
#
#   cmake -S . -B build-gpu -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpu -j
#   (there) bash bench/run_h200_extras.sh [check|extras|sweep|tiles|dsweep|fused|peers|decode|all]
#
# check:  test_variants, test_forward and test_semantics with every
#   fp16/bf16 case on nv_mma (FLASHCL_EXPECT_PATH), for each way of
#   reading bias and mask (FLASHCL_NV_EXTRAS=vec|perm|pairs).
# extras: flashcl-bench on bias, mask, their one-row forms and the
#   variant combinations, bf16 D=128 N=4096 (B=4, H=16), for each
#   FLASHCL_NV_EXTRAS and FLASHCL_NV_GRID (blocks|heads), plain beside.
# peers:  torch SDPA with attn_mask and FlexAttention on those shapes.
# decode: flashcl-bench --decode (device-side timing behind a busy fill,
#   --busy-us) and torch's decode backends, in the same run.
# sweep:  FLASHCL_NV_TILE candidates for bias and mask.
# fused:  test_inference, then decode with the split kernel's own merge
#   (FLASHCL_SPLIT_FUSED=1: at every split count) and with the combine kernel (0).
# dsweep: FLASHCL_SPLIT_MMA (warps, work-groups per SM) on GQA decode.
# tiles:  TILES="D:variant:bm,bn,warps ..." (or :table), fp16 N=4096.
# Logs under $LOG, packed into $OUT/extras-MODE.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-out}
LOG=${LOG:-/tmp/flashcl-extras-logs} # packed into $OUT at the end ($OUT returns few files)
mkdir -p "$OUT" "$LOG"
source bench/h200_lib.sh
STEP_LOG=$LOG STEP_SUMMARY='Checks:|ran on' STEP_LINES=2
MODE=${1:-all}
BENCH=$BUILD/flashcl-bench


check() {
  export FLASHCL_EXPECT_PATH=nv_mma
  export FLASHCL_EXPECT_PATH_EXCEPT="fp16/bf16 storage only;16-byte-aligned;TF32 runs head dims up to 128;split-KV"
  for kind in ${KINDS:-vec vec0 perm pairs}; do
    FLASHCL_NV_EXTRAS=$kind step "test_variants_$kind" 300 "$BUILD/tests/test_variants"
  done
  step test_forward 300 "$BUILD/tests/test_forward"
  step test_semantics 300 "$BUILD/tests/test_semantics"
  unset FLASHCL_EXPECT_PATH FLASHCL_EXPECT_PATH_EXCEPT
  grep -h "F:" "$LOG"/test_*.log | head -20
}

extras() {
  local common=(--dtype bf16 --head-dim 128 --seqlen 4096 --reps 10 --warmup 2 --sgemm 0)
  local variants=plain,bias,biasrow,mask,maskrow,alibi+bias+mask
  for kind_grid in ${EXTRAS:-vec:heads vec:blocks vec0:heads pairs:blocks}; do
    local kind=${kind_grid%%:*} grid=${kind_grid##*:}
    FLASHCL_NV_EXTRAS=$kind FLASHCL_NV_GRID=$grid "$BENCH" "${common[@]}" --causal both \
      --variants "$variants" --csv "$LOG/extras_${kind}_$grid.csv" \
      > "$LOG/extras_${kind}_$grid.md" 2>&1
    echo "== FLASHCL_NV_EXTRAS=$kind FLASHCL_NV_GRID=$grid (TFLOP/s)"
    table "$LOG/extras_${kind}_$grid.md"
  done
  "$BENCH" "${common[@]}" --causal both --check 64 \
    --variants plain,bias,mask,alibi,window1024,softcap,sinks,window1024+softcap+sinks \
    --csv "$LOG/variants.csv" > "$LOG/variants.md" 2>&1
  echo "== default reading, variants with --check 64 (TFLOP/s, error)"
  grep -E "^\| [a-z]" "$LOG/variants.md" | grep -v "^| variant" | cut -c1-200
}

# variant, causal and TFLOP/s columns of a flashcl-bench table, one line a causal
table() {
  grep -E "^\| [a-z]" "$1" | grep -v "^| variant" |
    awk -F'|' '{gsub(/ /,"",$2); gsub(/ /,"",$5); printf "%s/%s %.1f  ", $2, $5, $11} END {print ""}'
}

sweep() { # FLASHCL_NV_TILE candidates for bias and mask, bf16 D=128 N=4096
  local common=(--dtype bf16 --head-dim 128 --seqlen 4096 --reps 10 --warmup 2 --sgemm 0)
  for tile in ${BIAS_TILES:-64,32,4 128,32,8 64,64,4 128,64,8 64,16,4}; do
    FLASHCL_NV_TILE=$tile "$BENCH" "${common[@]}" --causal both --variants bias \
      > "$LOG/sweep_bias_$tile.md" 2>&1
    echo "sweep bias tile=$tile: $(table "$LOG/sweep_bias_$tile.md")"
  done
  for tile in ${MASK_TILES:-128,32,4 64,32,4 128,32,8 128,64,4}; do
    FLASHCL_NV_TILE=$tile "$BENCH" "${common[@]}" --causal both --variants mask \
      > "$LOG/sweep_mask_$tile.md" 2>&1
    echo "sweep mask tile=$tile: $(table "$LOG/sweep_mask_$tile.md")"
  done
}

peers() {
  python3 -c 'import torch' 2>/dev/null || { echo "no torch"; return; }
  timeout 240 python3 bench/torch_variant_peers.py --csv "$LOG/peers_extras.csv" --dtype bf16 \
    --head-dim 128 --seqlen 4096 --causal 0,1 --variants bias,mask,window1024+softcap \
    > "$LOG/peers_extras.log" 2>&1
  grep -h "^peer" "$LOG/peers_extras.log"
}

decode() {
  local shapes=1:32:8:32768,8:32:8:8192,32:32:32:4096
  for dtype in bf16 fp16; do
    for busy in 200 0; do
      "$BENCH" --decode "$shapes" --dtype "$dtype" --head-dim 128 --bandwidth 4280 \
        --reps 30 --sgemm 0 --busy-us "$busy" --csv "$LOG/decode_${dtype}_busy$busy.csv" \
        > "$LOG/decode_${dtype}_busy$busy.md" 2>&1
      echo "== decode $dtype --busy-us $busy"
      grep -E "^\|" "$LOG/decode_${dtype}_busy$busy.md" | grep -v -- "---" | cut -c1-170
    done
  done
  "$BENCH" --decode "$shapes" --dtype bf16 --head-dim 128 --bandwidth 4280 --reps 30 \
    --sgemm 0 --nq 4 --csv "$LOG/decode_nq4.csv" > "$LOG/decode_nq4.md" 2>&1
  "$BENCH" --decode "$shapes" --dtype bf16 --head-dim 128 --bandwidth 4280 --reps 30 \
    --sgemm 0 --page 16 --csv "$LOG/decode_page16.csv" > "$LOG/decode_page16.md" 2>&1
  echo "== decode bf16 nq 4, page 16"
  grep -hE "^\| (bf16|fp16)" "$LOG/decode_nq4.md" "$LOG/decode_page16.md" | cut -c1-170
  if python3 -c 'import torch' 2>/dev/null; then
    timeout 200 python3 bench/torch_decode_peers.py --csv "$LOG/decode_torch.csv" \
      > "$LOG/decode_torch.log" 2>&1
    timeout 100 python3 bench/torch_decode_peers.py --csv "$LOG/decode_torch_nq4.csv" \
      --dtype bf16 --nq 4 >> "$LOG/decode_torch.log" 2>&1
    cat "$LOG/decode_torch.csv" "$LOG/decode_torch_nq4.csv"
  fi
}

tiles() { # TILES="D:variant:bm,bn,warps ...": one fp16 N=4096 row pair each
  local common=(--dtype fp16 --seqlen 4096 --reps 10 --warmup 2 --sgemm 0)
  for spec in ${TILES:?TILES=D:variant:tile ...}; do
    local d=${spec%%:*} rest=${spec#*:}
    local variant=${rest%%:*} tile=${rest#*:}
    local name="tiles_${d}_${variant}_$tile"
    if [ "$tile" = table ]; then
      "$BENCH" "${common[@]}" --head-dim "$d" --causal both --variants "$variant" \
        > "$LOG/$name.md" 2>&1
    else
      FLASHCL_NV_TILE=$tile "$BENCH" "${common[@]}" --head-dim "$d" --causal both \
        --variants "$variant" > "$LOG/$name.md" 2>&1
    fi
    echo "tiles D=$d $variant tile=$tile: $(table "$LOG/$name.md")"
  done
}

dsweep() { # FLASHCL_SPLIT_MMA sets on the GQA decode shapes (device-side timing)
  local shapes=1:32:8:32768,8:32:8:8192
  for set in ${SPLIT_SETS:-8,1 8,2 8,3 4,1 4,2 4,4 2,4 2,8}; do
    FLASHCL_SPLIT_MMA=$set "$BENCH" --decode "$shapes" --dtype bf16 --head-dim 128 \
      --bandwidth 4280 --reps 30 --sgemm 0 > "$LOG/dsweep_$set.md" 2>&1
    echo "FLASHCL_SPLIT_MMA=$set: $(grep -E '^\| [0-9]' "$LOG/dsweep_$set.md" |
      awk -F'|' '{printf "B=%s splits %s %s ms %s GB/s; ", $2+0, $9+0, $10+0, $11+0}')"
  done
}

fused() { # the tensor-core split kernel's own merge against the combine kernel
  step test_inference 240 "$BUILD/tests/test_inference"
  local shapes=1:32:8:32768,8:32:8:8192,32:32:32:4096
  for f in 1 0; do
    FLASHCL_SPLIT_FUSED=$f "$BENCH" --decode "$shapes" --dtype bf16 --head-dim 128 \
      --bandwidth 4280 --reps 30 --sgemm 0 > "$LOG/fused_$f.md" 2>&1
    echo "FLASHCL_SPLIT_FUSED=$f: $(grep -E '^\| [0-9]' "$LOG/fused_$f.md" |
      awk -F'|' '{printf "B=%s splits %s %s ms %s GB/s; ", $2+0, $9+0, $10+0, $11+0}')"
  done
}

case "$MODE" in
check) check ;;
extras) extras ;;
sweep) sweep ;;
tiles) tiles ;;
dsweep) dsweep ;;
fused) fused ;;
peers) peers ;;
decode) decode ;;
all) check; extras; sweep; decode; peers ;;
*) echo "usage: $0 [check|extras|sweep|tiles|dsweep|fused|peers|decode|all]" >&2; exit 2 ;;
esac
tar -czf "$OUT/extras-$MODE.tar.gz" -C "$LOG" .
