#!/usr/bin/env bash
# Offline check of the wgmma kernel (no GPU): clang 14 compiles
# cl/nvidia/flash_fwd_wgmma.cl to PTX, its `.target sm_80` is renamed
# sm_90 (what NVIDIA's OpenCL driver emits), the library's own patch
# (src/paths/sm90a_patch.c, through tools/sm90a_patch.c) uncomments the
# SM90A instructions and sets sm_90a, and ptxas assembles the result for
# sm_90a: registers, spills, and any wgmma serialization warning.
#
#   scripts/wgmma_isa_check.sh                  # the table's schedule, D 64/128 x dtype x causal
#   scripts/wgmma_isa_check.sh tunables [BUILD] # the tuner's nv_wgmma space
#       (BUILD/tests/test_wgmma_tunables --list: every set the host accepts)
#   scripts/wgmma_isa_check.sh "-DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2"
#   KEEP=dir scripts/wgmma_isa_check.sh ...     # keep the PTX files in dir
#
# Needs clang-14, llvm-14, libclc-14 and ptxas (/usr/local/cuda/bin).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
tmp=${KEEP:-$(mktemp -d)}
mkdir -p "$tmp"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
cc -std=c11 -O1 -Wall -Wextra -Werror -I"$root/src" -o "$tmp/sm90a_patch" \
  "$root/tools/sm90a_patch.c" "$root/src/paths/sm90a_patch.c"
check() {
  local defs="-DFLASHCL_NV_WGMMA=1 $1" tag
  tag=$(echo "$1" | tr -c 'A-Za-z0-9=\n' '_')
  [ ${#tag} -le 150 ] || tag=$(printf '%s' "$1" | md5sum | cut -c1-16)  # file names
  clang-14 -x cl -cl-std=CL1.2 -Xclang -finclude-default-header \
    -I"$root/cl/nvidia" -I"$root/cl/nvidia/wgmma" -I"$root/cl/common" $defs \
    -target nvptx64-nvidia-nvcl -march=sm_80 -O3 -emit-llvm \
    -c "$root/cl/nvidia/flash_fwd_wgmma.cl" -o "$tmp/k.bc"
  llvm-link-14 --only-needed "$tmp/k.bc" /usr/lib/clc/nvptx64--nvidiacl.bc \
    -o "$tmp/l.bc" 2>/dev/null
  # libclc's builtins (fmax, log2, get_group_id, ...) inlined, as the
  # driver's compiler does: as calls, their ABI would cost registers
  opt-14 -O3 "$tmp/l.bc" -o "$tmp/l.bc"
  llc-14 -O3 -march=nvptx64 -mcpu=sm_80 "$tmp/l.bc" -o "$tmp/$tag.sm90.ptx"
  sed -i 's/^\.target sm_80/.target sm_90/' "$tmp/$tag.sm90.ptx"
  "$tmp/sm90a_patch" "$tmp/$tag.sm90.ptx" "$tmp/$tag.sm90a.ptx"
  echo "== $1: $(grep -c 'wgmma.mma_async' "$tmp/$tag.sm90a.ptx") wgmma.mma_async, $(grep -c 'cp.async.cg' "$tmp/$tag.sm90a.ptx") cp.async"
  "$ptxas" -arch=sm_90a -v "$tmp/$tag.sm90a.ptx" -o "$tmp/$tag.cubin" 2>&1 |
    grep -v -E '^ptxas info *: (Compiling entry|Function properties)' || true
}
if [ "${1:-}" = tunables ]; then
  # every set the host accepts (test_wgmma_tunables --list), fp16
  # non-causal
  list="${2:-$root/build}/tests/test_wgmma_tunables"
  [ -x "$list" ] || { echo "no $list (build the tests first)" >&2; exit 2; }
  "$list" --list | while IFS=$'\t' read -r d params opts; do
    echo "## D $d $params"
    check "$opts"
  done
elif [ $# -gt 0 ]; then
  check "$1"
else
  # the table's schedules (src/paths/nv_wgmma_tiles.h) at D 64 / 128
  for d in 64 128; do for t in 1 2; do for c in 0 1; do
    check "-DFLASHCL_HEAD_DIM=$d -DFLASHCL_DTYPE=$t -DFLASHCL_CAUSAL=$c -DFLASHCL_WG_SIZE=384 -DFLASHCL_BLOCK_M=128 -DFLASHCL_BLOCK_N=128 -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_LOCAL_MEM_BYTES=131072 -DFLASHCL_NV_WGMMA_DECLARED_SMEM=49152 -DFLASHCL_NV_WGMMA_MAXNREG=168"
  done; done; done
fi
