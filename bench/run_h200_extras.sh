#!/usr/bin/env bash
# Bias and mask on the tensor-core kernel (issue 10) and decode timing
# (issue 11) on the lent H200 (see ../shared/notes/opencl-on-h200.md).
# Build on the CPU machine and carry build-gpu and .gpu-rt:
#
#   cmake -S . -B build-gpu -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpu -j
#   (there) bash bench/run_h200_extras.sh [check|extras|sweep|tiles|dsweep|fused|peers|decode|diag|loads|final|varlen|all]
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
# diag:   where a short decode call's time goes: test_inference (own merge
#   at every split count, and the default), B = 1 GQA 4 over cache lengths
#   8k-128k (slope: streaming rate; intercept: fixed cost per call) with the
#   split kernel's own merge and with the combine kernel, the last
#   kernel's own time beside each; split counts; the g + 8 rows kept
#   (FLASHCL_SPLIT_MMA_HALVES=2); SPLIT_SETS; torch on the same shapes.
# loads:  the tensor-core split kernel's ways of reading K/V rows
#   (FLASHCL_SPLIT_MMA_LOAD=LOADS) on the decode table and B = 1 over 8k-128k
#   keys, test_inference on each; paged 16 and Nq = 4; the 8-warp entry on
#   B = 32 MHA; 32 splits merged both ways; torch on the same shapes.
# final:  the suites on the GPU (nv_mma expected for fp16/bf16, the packed
#   batches included), the decode table with the default reads, paged 16,
#   Nq = 4, packed batches against the padded dense call, MHA warp sets,
#   torch on the decode shapes.
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
  export FLASHCL_PATH=nv_mma FLASHCL_EXPECT_PATH=nv_mma  # D = 128 plain calls default to nv_wgmma
  export FLASHCL_EXPECT_PATH_EXCEPT="fp16/bf16 storage only;16-byte-aligned;TF32 runs head dims up to 128;split-KV"
  for kind in ${KINDS:-vec vec0 perm pairs}; do
    FLASHCL_NV_EXTRAS=$kind step "test_variants_$kind" 300 "$BUILD/tests/test_variants"
  done
  step test_forward 300 "$BUILD/tests/test_forward"
  step test_semantics 300 "$BUILD/tests/test_semantics"
  unset FLASHCL_PATH FLASHCL_EXPECT_PATH FLASHCL_EXPECT_PATH_EXCEPT
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

# bench_decode NAME SHAPES [ARGS...]: one flashcl-bench --decode table (bf16,
# D = 128), printed as one line per shape
bench_decode() {
  local name=$1 shapes=$2; shift 2
  "$BENCH" --decode "$shapes" --dtype bf16 --head-dim 128 --bandwidth 4280 \
    --reps 30 --sgemm 0 "$@" > "$LOG/$name.md" 2>&1
  grep -E '^\| [0-9]' "$LOG/$name.md" |
    awk -F'|' -v n="$name" '{printf "%-22s B=%s NK=%s splits %s: %s ms (last kernel %s) %s GB/s, unsplit %s ms\n", n, $2+0, $5+0, $9+0, $10+0, $11+0, $13+0, $15+0}'
  grep -h "flashcl-bench:" "$LOG/$name.md" | head -3
}

# Packed batches of flashcl-bench --varlen: lengths 512-4096 (MIXED), eight
# of 2048 (EQUAL), 1683 rows (SMALL), and fp16 D = 64's mixed set (D64)
VARLEN_MIXED=${VARLEN_MIXED:-512,1024,1536,2048,3072,4096,1024,2048}
VARLEN_EQUAL=${VARLEN_EQUAL:-2048,2048,2048,2048,2048,2048,2048,2048}
VARLEN_SMALL=${VARLEN_SMALL:-1,147,512,1023}
VARLEN_D64=${VARLEN_D64:-300,4096,700,2500,100,3300,1800,1600}

# bench_varlen NAME LENS DTYPE D [ARGS...]: one packed-batch table per causal
# mode, in $LOG/NAME_c0.md and NAME_c1.md
bench_varlen() {
  local name=$1 lens=$2 dtype=$3 d=$4; shift 4
  for c in 0 1; do
    "$BENCH" --varlen "$lens" --dtype "$dtype" --head-dim "$d" --causal $c \
      --reps 20 --sgemm 0 "$@" > "$LOG/${name}_c$c.md" 2>&1
  done
}

# torch_peers NAME SHAPES [nq4]: torch's decode backends (bf16) on SHAPES,
# and with nq4 on the decode table at Nq = 4; a line per backend and shape
torch_peers() {
  python3 -c 'import torch' 2>/dev/null || { echo "no torch"; return; }
  local name=$1 shapes=$2 csvs=("$LOG/$1_torch.csv")
  timeout 200 python3 bench/torch_decode_peers.py --csv "${csvs[0]}" \
    --dtype bf16 --shapes "$shapes" > "$LOG/${name}_torch.log" 2>&1
  if [ "${3:-}" = nq4 ]; then
    csvs+=("$LOG/${name}_torch_nq4.csv")
    timeout 100 python3 bench/torch_decode_peers.py --csv "${csvs[1]}" \
      --dtype bf16 --nq 4 > "$LOG/${name}_torch_nq4.log" 2>&1
  fi
  awk -F, 'NR > 1 && $9 != "" {printf "torch %s B=%s NK=%s nq=%s %s %s ms\n", $1, $3, $6, $7, $8, $9}' \
    "${csvs[@]}"
}

diag() { # where a short decode call's time goes (issue 11)
  FLASHCL_SPLIT_FUSED=1 step test_inference_fused 240 "$BUILD/tests/test_inference"
  step test_inference 240 "$BUILD/tests/test_inference"
  local nks=1:32:8:8192,1:32:8:16384,1:32:8:32768,1:32:8:65536,1:32:8:131072
  local main=1:32:8:32768,8:32:8:8192,32:32:32:4096
  for f in 1 0; do
    FLASHCL_SPLIT_FUSED=$f bench_decode "diag_nk_fused$f" "$nks"
  done
  FLASHCL_SPLIT_FUSED=1 bench_decode diag_main "$main"
  FLASHCL_SPLIT_FUSED=1 FLASHCL_SPLIT_MMA_HALVES=2 bench_decode diag_halves2 "$main"
  for sp in ${SPLITS:-8 12 24 32}; do
    FLASHCL_SPLIT_FUSED=1 bench_decode "diag_splits$sp" 1:32:8:32768 --splits "$sp"
  done
  for set in ${SPLIT_SETS:-4,2 4,3}; do
    FLASHCL_SPLIT_FUSED=1 FLASHCL_SPLIT_MMA=$set bench_decode "diag_set$set" "$main"
  done
  FLASHCL_VERBOSE=1 FLASHCL_SPLIT_FUSED=1 "$BENCH" --decode 1:32:8:32768 --dtype bf16 \
    --head-dim 128 --reps 3 --sgemm 0 > "$LOG/diag_verbose.log" 2>&1
  grep -ihE "registers|spill" "$LOG/diag_verbose.log" | sort | uniq -c | head -8
  torch_peers diag "$nks,8:32:8:8192,32:32:32:4096"
}

loads() { # how the tensor-core split kernel reads K and V (issue 11)
  local nks=1:32:8:8192,1:32:8:16384,1:32:8:32768,1:32:8:65536,1:32:8:131072
  local main=1:32:8:32768,8:32:8:8192,32:32:32:4096
  for l in ${LOADS:-0 1 2 3}; do
    FLASHCL_SPLIT_MMA_LOAD=$l step "test_inference_load$l" 240 "$BUILD/tests/test_inference"
  done
  FLASHCL_SPLIT_FUSED=0 step test_inference_combine 240 "$BUILD/tests/test_inference"
  FLASHCL_EXPECT_PATH=nv_mma FLASHCL_VERBOSE=1 step test_inference_nv_varlen 240 \
    "$BUILD/tests/test_inference"
  grep -hE "EXPECT_PATH|ran on path" "$LOG/test_inference_nv_varlen.log" | sort | uniq -c | head -8
  grep -hiE "registers" "$LOG/test_inference_nv_varlen.log" | sort | uniq -c | sort -rn | head -6
  for l in ${LOADS:-0 1 2 3}; do
    FLASHCL_SPLIT_MMA_LOAD=$l bench_decode "load${l}_main" "$main"
    FLASHCL_SPLIT_MMA_LOAD=$l bench_decode "load${l}_nk" "$nks"
  done
  for l in ${PAGED_LOADS:-1 3}; do
    FLASHCL_SPLIT_MMA_LOAD=$l bench_decode "load${l}_page16" "$main" --page 16
    FLASHCL_SPLIT_MMA_LOAD=$l bench_decode "load${l}_nq4" "$main" --nq 4
  done
  FLASHCL_SPLIT_MMA=8,1 bench_decode entry8_mha 32:32:32:4096
  for f in 1 0; do
    FLASHCL_SPLIT_FUSED=$f bench_decode "splits32_fused$f" 1:32:8:32768 --splits 32
  done
  bench_varlen varlen_small "$VARLEN_SMALL" bf16 128
  bench_varlen varlen_mixed "$VARLEN_MIXED" bf16 128
  bench_varlen varlen_equal "$VARLEN_EQUAL" bf16 128
  # the split-KV kernels, as before packed batches ran on nv_mma
  FLASHCL_PATH=split_kv bench_varlen varlen_splitkv "$VARLEN_MIXED" bf16 128 --reps 10
  grep -hE '^\| [0-9]|flashcl-bench:' "$LOG"/varlen_*.md
  torch_peers loads "$nks,8:32:8:8192,32:32:32:4096" nq4
}

final() { # the defaults, checked and timed once more (issue 11)
  KINDS=vec check
  FLASHCL_EXPECT_PATH=nv_mma step test_inference_nv 240 "$BUILD/tests/test_inference"
  local nks=1:32:8:8192,1:32:8:16384,1:32:8:32768,1:32:8:65536,1:32:8:131072
  local main=1:32:8:32768,8:32:8:8192,32:32:32:4096
  bench_decode final_main "$main"
  bench_decode final_nk 1:32:8:8192,1:32:8:131072
  bench_decode final_page16 "$main" --page 16
  bench_decode final_nq4 "$main" --nq 4
  for set in ${MHA_SETS:-2,4 4,4}; do
    FLASHCL_SPLIT_MMA=$set bench_decode "final_mha_$set" 32:32:32:4096
  done
  bench_varlen final_varlen_mixed "$VARLEN_MIXED" bf16 128
  bench_varlen final_varlen_equal "$VARLEN_EQUAL" bf16 128
  grep -hE '^\| [0-9]|flashcl-bench:' "$LOG"/final_varlen_*.md
  torch_peers final "$nks,8:32:8:8192,32:32:32:4096" nq4
}

varlen() { # packed batches against the padded dense call, and the suite on nv_mma
  FLASHCL_EXPECT_PATH=nv_mma step test_inference_nv 240 "$BUILD/tests/test_inference"
  bench_varlen varlen_mixed "$VARLEN_MIXED" bf16 128
  bench_varlen varlen_d64 "$VARLEN_D64" fp16 64
  bench_varlen varlen_small "$VARLEN_SMALL" bf16 128
  grep -hE '^(varlen|\| [0-9])|flashcl-bench:' "$LOG"/varlen_*.md
}

case "$MODE" in
varlen) varlen ;;
final) final ;;
loads) loads ;;
diag) diag ;;
check) check ;;
extras) extras ;;
sweep) sweep ;;
tiles) tiles ;;
dsweep) dsweep ;;
fused) fused ;;
peers) peers ;;
decode) decode ;;
all) check; extras; sweep; decode; peers ;;
*) echo "usage: $0 [check|extras|sweep|tiles|dsweep|fused|peers|decode|diag|loads|final|varlen|all]" >&2; exit 2 ;;
esac
tar -czf "$OUT/extras-$MODE.tar.gz" -C "$LOG" .
