#!/usr/bin/env bash
# One GPU experiment for the tensor-core backward (cl/nvidia/flash_bwd_mma.cl):
# the backward suite forced onto it, its determinism, and flashcl-bench
# --backward beside torch's SDPA backward in the same run, logs under $OUT.
#   bench/nv_bwd_gpu.sh BUILD_DIR [SEQLENS] [HEAD_DIMS]
set -u
build=${1:?build dir}; seqlens=${2:-2048,4096}; dims=${3:-64,128}
out=${OUT:-/tmp/nv_bwd_out}; mkdir -p "$out"
# shellcheck disable=SC1091
source .gpu-rt/activate.sh
nvidia-smi -L > "$out/device.txt" 2>&1
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name: rc $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"; }
# every 16-bit case on the tensor-core kernels, but those whose rows are
# not 16-byte aligned (D 59)
step test_nv 110 env FLASHCL_PATH=nv_mma FLASHCL_VERBOSE=1 CK_RUN_CASE=gradients \
  FLASHCL_EXPECT_PATH=nv_mma:fp16,bf16 FLASHCL_EXPECT_PATH_EXCEPT=16-byte-aligned \
  "$build/tests/test_backward"
step det_nv 25 env FLASHCL_PATH=nv_mma FLASHCL_VERBOSE=1 FLASHCL_TEST_BWD_DET_CASE=12 \
  CK_RUN_CASE=determinism "$build/tests/test_backward"
step bench 70 env FLASHCL_PATH=nv_mma "$build/flashcl-bench" --backward --dtype bf16 --head-dim "$dims" \
  --seqlen "$seqlens" --causal both --csv "$out/flashcl.csv"
step torch 70 python3 bench/torch_sdpa_peers.py --backward --csv "$out/torch.csv" \
  --dtype bf16 --head-dim "$dims" --seqlen "$seqlens" --math-max 0 --reps 10
grep -E "backward (dK|on)" "$out/test_nv.log" | sort | uniq -c > "$out/paths.txt"
tail -3 "$out/test_nv.log" "$out/det_nv.log" >> "$out/summary.txt"
