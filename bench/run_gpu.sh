#!/usr/bin/env bash
# flashcl's measurements on a GPU machine (the lent H100/H200; see
# ../shared/notes/opencl-on-h200.md), one named form per command. From the
# repository root there, with a build of this tree and the OpenCL runtime
# carried (no network there):
#
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF
#   cmake --build build-gpu -j2
#   ../shared/tools/gpu-runtime fetch .gpu-rt
#   (there) OUT=out bash bench/run_gpu.sh FORM        # B=build-gpu by default
#
# Forms (each fits the device's 10 minutes per command):
#   protocol   (~4 min) the FlashAttention-2 paper's protocol: tokens 16384,
#              hidden 2048, fp16/bf16, D 64/128, N 2048..16384, causal both,
#              sampled rows against float64 (--check), beside torch SDPA's
#              FLASH_ATTENTION and CUDNN_ATTENTION in the same run
#              (bench/torch_sdpa_peers.py) -> protocol.md (bench/h200_table.py)
#   variants   (~5 min) every variant of the variant table at bf16 and fp16,
#              D 64/128, N 4096, causal both, with --check 8 and --describe
#              (the path and tiles of each row), beside torch SDPA and
#              FlexAttention on the same calls (bench/torch_variant_peers.py)
#   headdims   (~4 min) the padded and large head dims D 40/80/96/112/160/
#              192/256, bf16, N 1024..8192, causal both, beside torch SDPA
#   decode     (~2 min) decoding against a KV cache (bf16/fp16, D 128, the
#              shapes of issue 11) behind a dirty L2 (--busy-kind fill) and a
#              clean one (read), beside torch's decode backends flushed the
#              same way (bench/torch_decode_peers.py) -> decode_*.md
#              (bench/decode_table.py)
#   inference  (~3 min) paged decode (16-row pages), speculative decode
#              (Nq = 4) with torch's peers, and packed (varlen) prefill
#              batches beside the padded dense call
#   ceiling    (<1 min) the dense wgmma rate through OpenCL
#              (bench/wgmma_ceiling.c: m64n256k16 from local memory)
#   first-call (~3 min) a new process's compile + first call, cold binary
#              cache against warm (bench/first_call.py --wgmma; driver cache off)
#   backward   (~5 min) the backward (portable kernel: no tensor-core
#              backward yet): sampled gradient rows against the float64
#              oracle on small shapes, then the FA2 protocol's shapes
#              (fp16/bf16, D 64/128, N 1024..8192, causal both) with the
#              backward/forward ratio, beside torch SDPA's backends'
#              backward (bench/torch_sdpa_peers.py --backward); the
#              backward suite (tests/test_backward) when built
#   tune       (~6 min) `flashcl tune` for portable and nv_wgmma on the
#              device into $OUT/tuning/, then bench/tuned_vs_table.py (the
#              database against the hand tables, interleaved rounds)
#
# The product runs as a user runs it: every FLASHCL_* variable is cleared
# (FLASHCL_DEVICE=gpu, a cold FLASHCL_CACHE_DIR) and the kernels are the
# ones the build embedded, so build from the tree you mean to measure.
# Correctness suites and old-against-new timing: scripts/gpu_check.sh.
# The current figures live in bench/results/<device>.csv; copy a form's
# rows there and run python3 bench/summarize.py (docs/experiments.md says how).
#
# DRY=1 prints each command instead of running it (no GPU needed):
#   DRY=1 OUT=/tmp/x bash bench/run_gpu.sh protocol
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-out}
B=${B:-build-gpu}
DRY=${DRY:-}
REPS=${REPS:-7}
mkdir -p "$OUT"
form=${1:-}

for v in $(compgen -e | grep '^FLASHCL_'); do unset "$v"; done
[ -f .gpu-rt/activate.sh ] && source .gpu-rt/activate.sh
export FLASHCL_DEVICE=gpu
FLASHCL_CACHE_DIR=$(mktemp -d)          # a cold binary cache for this run
export FLASHCL_CACHE_DIR
export CUDA_CACHE_DISABLE=1             # compile times are the driver's real ones
FA2=(--tokens 16384 --hidden 2048)
TIMED=(--sgemm 0 --reps "$REPS" --warmup 2)
DECODE_SHAPES=1:32:8:32768,8:32:8:8192,32:32:32:4096,1:32:8:131072
VARLEN_SETS="512,1024,1536,2048,3072,4096,1024,2048 2048,2048,2048,2048,2048,2048,2048,2048 1,147,512,1023"

# run LIMIT LOG COMMAND...: COMMAND under a time limit, stdout and stderr
# into $OUT/LOG, then one line with its exit status (DRY: the command)
run() {
  local limit=$1 log=$OUT/$2; shift 2
  if [ -n "$DRY" ]; then echo "+ $* > $log"; return 0; fi
  local start=$SECONDS
  timeout "$limit" "$@" >"$log" 2>&1
  echo "$(basename "$log"): exit $?, $((SECONDS - start)) s"
}

have_torch() {
  [ -n "$DRY" ] || python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null
}

environment() {
  [ -n "$DRY" ] && return
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>/dev/null
    echo "flashcl commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown), build $B"
  } | tee "$OUT/env.txt"
  if [ ! -x "$B/flashcl-bench" ]; then
    echo "no $B/flashcl-bench: building it"
    { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF &&
      cmake --build "$B" -j"$(nproc)"; } >"$OUT/build.log" 2>&1 ||
      { echo "build failed, see $OUT/build.log"; exit 1; }
  fi
}

protocol() {
  run 400 protocol.log "$B/flashcl-bench" "${FA2[@]}" "${TIMED[@]}" --check 2 \
    --dtype fp16,bf16 --head-dim 64,128 --seqlen 2048,4096,8192,16384 --causal both \
    --describe --csv "$OUT/protocol.csv"
  have_torch && run 200 protocol_torch.log python3 bench/torch_sdpa_peers.py \
    --csv "$OUT/protocol_torch.csv" --seqlen 2048,4096,8192,16384
  [ -n "$DRY" ] || python3 bench/h200_table.py --flashcl "$OUT/protocol.csv" \
    --log "$OUT/protocol.log" --torch "$OUT/protocol_torch.csv" --ceiling 972 |
    tee "$OUT/protocol.md"
}

VARIANTS=plain,window1024,softcap,alibi,bias,bias16,mask,maskpad,maskprefix,sinks,window1024+softcap+sinks,gqa4
variants() {
  local t
  for t in bf16 fp16; do
    run 200 "variants_$t.log" "$B/flashcl-bench" "${FA2[@]}" "${TIMED[@]}" --check 8 --describe \
      --dtype $t --head-dim 64,128 --seqlen 4096 --causal both --variants "$VARIANTS" \
      --csv "$OUT/variants_$t.csv"
  done
  have_torch && run 250 variants_torch.log python3 bench/torch_variant_peers.py \
    --csv "$OUT/variants_torch.csv" --dtype bf16 --head-dim 64,128 --seqlen 4096 --causal 0,1 \
    --variants alibi,window1024,softcap,bias,mask,window1024+softcap+sinks
}

headdims() {
  run 300 headdims.log "$B/flashcl-bench" "${FA2[@]}" "${TIMED[@]}" --check 2 --describe \
    --dtype bf16 --head-dim 40,80,96,112,160,192,256 --seqlen 1024,2048,4096,8192 \
    --causal both --csv "$OUT/headdims.csv"
  have_torch && run 200 headdims_torch.log python3 bench/torch_sdpa_peers.py \
    --csv "$OUT/headdims_torch.csv" --dtype bf16 --head-dim 96,192,256 --seqlen 1024,2048,4096,8192
}

# decode_rows NAME ARGS...: flashcl-bench --decode on the decode shapes, bf16
# and fp16 D = 128, median of 30, into $OUT/NAME.md with "## dtype" headers
decode_rows() {
  local name=$1 t; shift
  [ -n "$DRY" ] || : >"$OUT/$name.md"
  for t in bf16 fp16; do
    run 100 "${name}_$t.log" "$B/flashcl-bench" --decode "$DECODE_SHAPES" --dtype $t --head-dim 128 \
      --bandwidth 4280 --reps 30 --sgemm 0 "$@" --csv "$OUT/${name}_$t.csv"
    [ -n "$DRY" ] || { echo "## $t $name"; cat "$OUT/${name}_$t.log"; } >>"$OUT/$name.md"
  done
}

decode() {
  decode_rows decode_fill --busy-kind fill
  decode_rows decode_read --busy-kind read
  if have_torch; then
    run 200 decode_torch_fill.log python3 bench/torch_decode_peers.py --csv "$OUT/decode_torch_fill.csv" \
      --shapes "$DECODE_SHAPES" --flush write
    run 200 decode_torch_read.log python3 bench/torch_decode_peers.py --csv "$OUT/decode_torch_read.csv" \
      --shapes "$DECODE_SHAPES" --flush read
  fi
  [ -n "$DRY" ] && return
  python3 bench/decode_table.py "$OUT/decode_fill.md" "$OUT/decode_torch_fill.csv" | tee "$OUT/decode_fill_table.md"
  python3 bench/decode_table.py "$OUT/decode_read.md" "$OUT/decode_torch_read.csv" | tee "$OUT/decode_read_table.md"
}

inference() {
  run 100 paged.log "$B/flashcl-bench" --decode "$DECODE_SHAPES" --dtype bf16 --head-dim 128 \
    --bandwidth 4280 --reps 30 --sgemm 0 --page 16 --csv "$OUT/paged.csv"
  run 100 speculative.log "$B/flashcl-bench" --decode "$DECODE_SHAPES" --dtype bf16 --head-dim 128 \
    --bandwidth 4280 --reps 30 --sgemm 0 --nq 4 --csv "$OUT/speculative.csv"
  have_torch && run 150 speculative_torch.log python3 bench/torch_decode_peers.py \
    --csv "$OUT/speculative_torch.csv" --shapes "$DECODE_SHAPES" --dtype bf16 --nq 4
  local lens c
  for lens in $VARLEN_SETS; do
    for c in 0 1; do
      run 60 "varlen_${lens//,/_}_c$c.log" "$B/flashcl-bench" --varlen "$lens" --dtype bf16 \
        --head-dim 128 --hidden 2048 --causal $c --reps 20 --sgemm 0
    done
  done
}

backward() {
  [ -x "$B/tests/test_backward" ] && run 150 test_backward.log "$B/tests/test_backward"
  run 90 backward_check.log "$B/flashcl-bench" --backward --check 8 --dtype fp16,bf16 \
    --head-dim 64,128 --seqlen 256 --causal both --tokens 512 --hidden 512 --reps 2 \
    --warmup 1 --sgemm 0
  run 200 backward.log "$B/flashcl-bench" --backward --dtype fp16,bf16 --head-dim 64,128 \
    --seqlen 1024,2048,4096,8192 --causal both --tokens 16384 --hidden 2048 \
    --reps "$REPS" --warmup 2 --sgemm 0 --describe --csv "$OUT/backward.csv"
  have_torch && run 150 backward_torch.log python3 bench/torch_sdpa_peers.py --backward \
    --dtype fp16,bf16 --head-dim 64,128 --seqlen 1024,2048,4096,8192 --causal 0,1 \
    --tokens 16384 --hidden 2048 --reps 30 --warmup 5 --csv "$OUT/backward_torch.csv"
}

ceiling() {
  run 120 ceiling.log "$B/wgmma-ceiling" cl
  [ -n "$DRY" ] || grep -E 'TFLOP/s|failed' "$OUT/ceiling.log"
}

first_call() {
  run 300 first_call.log python3 bench/first_call.py "$B" --device gpu --reps 2 --wgmma --markdown
}

tune() {
  mkdir -p "$OUT/tuning"
  run 110 tune_portable.log "$B/flashcl" tune --device gpu --budget 40 --no-progress \
    --path portable --dtype fp32,fp16 --head-dim 64,128 --causal both --seq long \
    --output "$OUT/tuning/portable.json"
  run 200 tune_nv_wgmma.log "$B/flashcl" tune --device gpu --budget 130 --no-progress \
    --path nv_wgmma --dtype fp16,bf16 --head-dim 64,128 --causal both --seq long \
    --output "$OUT/tuning/nv_wgmma.json"
  run 330 tuned_vs_table.log python3 bench/tuned_vs_table.py "$B" --device gpu --protocol gpu \
    --rounds 4 --budget 90 --reps 5 --warmup 2 --output "$OUT/tuned_vs_table.md"
}

case "$form" in
  protocol|variants|headdims|decode|inference|ceiling|tune|backward) environment; "$form" ;;
  first-call) environment; first_call ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
rm -rf "$FLASHCL_CACHE_DIR"
echo "== $form done in $SECONDS s; results in $OUT"
