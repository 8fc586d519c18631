#!/bin/sh
# test_backward on the tensor-core backward (cl/nvidia/flash_bwd_mma.cl)
# without an NVIDIA GPU: its PTX emulated with sub-group shuffles of 32 on
# Intel's CPU runtime (FLASHCL_NV_EMULATE, cl/nvidia/nv_mma.clh), forced by
# FLASHCL_PATH=nv_mma. Each 16-bit case compiles an emulated kernel, slowly,
# so only some run (FLASHCL_TEST_BWD_CASES, default 12: bf16, a window,
# GQA, BHND, D 64; 9,10,12,13 adds fp16 D 128 GQA, fp16 causal softcap
# MQA and bf16 ALiBi with sinks); the suite's other gradient tests run too. Fails when the kernels never ran (FLASHCL_VERBOSE's line), and when a kernel that does not build
# (FLASHCL_KERNEL_DIR) does not leave the call to the portable backward.
#   tests/backward_nv_emulated.sh TEST_BACKWARD_BINARY SOURCE_DIR
set -eu
bin=$1
root=$2
eval "$("$root/scripts/intel_cpu_runtime.sh")"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export FLASHCL_NV_EMULATE=1 FLASHCL_PATH=nv_mma FLASHCL_VERBOSE=1
export CK_RUN_CASE=gradients
# each 16-bit case must run on it (test_common.c's expect_path_info)
export FLASHCL_EXPECT_PATH=nv_mma:fp16,bf16
export FLASHCL_TEST_BWD_CASES="${FLASHCL_TEST_BWD_CASES:-12}"
status=0
"$bin" >"$log" 2>&1 || status=$?
grep -E "^[0-9]+%|:F:|:E:" "$log" || true
if ! grep -q "backward dK/dV and dQ on nv_mma" "$log"; then
  echo "backward_nv_emulated: the tensor-core backward never ran"
  cat "$log"
  exit 1
fi
if [ "$status" != 0 ]; then
  tail -30 "$log" # a sanitizer's report, or the checks' failures
  exit "$status"
fi

# A driver that cannot build the kernels (their inline PTX new to it):
# the call falls back to the portable backward, correct, and says so.
broken=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$broken"' EXIT
cp -R "$root/cl/." "$broken/"
printf '#error "a driver that rejects this kernel"\n' >"$broken/nvidia/flash_bwd_mma.cl"
unset FLASHCL_EXPECT_PATH
FLASHCL_KERNEL_DIR=$broken "$bin" >"$log" 2>&1 || status=$?
grep -E "^[0-9]+%|:F:|:E:" "$log" || true
if ! grep -q "tensor-core backward could not be built, the portable backward runs instead" "$log"; then
  echo "backward_nv_emulated: no fallback to the portable backward after a failed build"
  tail -40 "$log"
  exit 1
fi
[ "$status" = 0 ] || tail -30 "$log"
exit "$status"
