#!/usr/bin/env bash
# Offline check of the wgmma kernel (no GPU): clang 14 compiles
# cl/nvidia/flash_fwd_wgmma.cl to PTX, its `.target sm_80` is renamed
# sm_90 (what NVIDIA's OpenCL driver emits), the library's own patch
# (src/paths/sm90a_patch.c, through tools/sm90a_patch.c) uncomments the
# SM90A instructions and sets sm_90a, and ptxas assembles the result for
# sm_90a: registers, spills, and any wgmma serialization warning.
#
#   scripts/wgmma_isa_check.sh                  # the D x dtype x causal builds (kernel defaults)
#   scripts/wgmma_isa_check.sh all              # x 1/2 warpgroups x plain/overlapped
#   scripts/wgmma_isa_check.sh ring             # the ring schedules bench/run_h200_wgmma.sh quick runs
#   scripts/wgmma_isa_check.sh tunables [BUILD] # the extremes of the tuner's nv_wgmma space
#       (BUILD/tests/test_wgmma_tunables --list: every set the host accepts;
#       per D and block_n the deepest ring with S ahead, uncapped and at
#       .maxnreg 128, the overlapped schedule, and 1 warpgroup plain)
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
    -I"$root/cl/nvidia" -I"$root/cl/common" $defs \
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
if [ "${1:-}" = all ]; then
  # every schedule: 1/2 warpgroups x plain/overlapped (32 builds, ~1 min)
  for wg in 128 256; do for o in 0 1; do
    for d in 64 128; do for t in 1 2; do for c in 0 1; do
      check "-DFLASHCL_HEAD_DIM=$d -DFLASHCL_DTYPE=$t -DFLASHCL_CAUSAL=$c -DFLASHCL_WG_SIZE=$wg -DFLASHCL_BLOCK_M=$((wg / 2)) -DFLASHCL_NV_WGMMA_OVERLAP=$o"
    done; done; done
  done; done
elif [ "${1:-}" = ring ]; then
  # the ring schedules of the quick GPU run: slots x lag x warpgroups (at
  # D = 64 also 128-key tiles), fp16/bf16 x causal; RCAP=n adds .maxnreg n
  for wg in 128 256; do for t in 1 2; do for c in 0 1; do
    base="-DFLASHCL_DTYPE=$t -DFLASHCL_CAUSAL=$c -DFLASHCL_WG_SIZE=$wg -DFLASHCL_BLOCK_M=$((wg / 2))${RCAP:+ -DFLASHCL_NV_WGMMA_MAXNREG=$RCAP}"
    for rl in 3:0 3:1; do
      check "-DFLASHCL_HEAD_DIM=128 $base -DFLASHCL_NV_WGMMA_RING=${rl%:*} -DFLASHCL_NV_WGMMA_LAG=${rl#*:}"
    done
    for rl in 4:0 6:0 6:1; do
      check "-DFLASHCL_HEAD_DIM=64 $base -DFLASHCL_NV_WGMMA_RING=${rl%:*} -DFLASHCL_NV_WGMMA_LAG=${rl#*:}"
    done
    check "-DFLASHCL_HEAD_DIM=64 $base -DFLASHCL_BLOCK_N=128 -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_NV_WGMMA_LAG=1"
    for d in 64 128; do  # 32-key tiles, 6 slots; and S ahead
      check "-DFLASHCL_HEAD_DIM=$d $base -DFLASHCL_BLOCK_N=32 -DFLASHCL_NV_WGMMA_RING=6 -DFLASHCL_NV_WGMMA_LAG=0"
      check "-DFLASHCL_HEAD_DIM=$d $base -DFLASHCL_BLOCK_N=32 -DFLASHCL_NV_WGMMA_RING=6 -DFLASHCL_NV_WGMMA_LAG=1 -DFLASHCL_NV_WGMMA_SAHEAD=1"
    done
    check "-DFLASHCL_HEAD_DIM=64 $base -DFLASHCL_NV_WGMMA_RING=6 -DFLASHCL_NV_WGMMA_LAG=1 -DFLASHCL_NV_WGMMA_SAHEAD=1"
    check "-DFLASHCL_HEAD_DIM=128 $base -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_NV_WGMMA_LAG=1 -DFLASHCL_NV_WGMMA_SAHEAD=1"
  done; done; done
elif [ "${1:-}" = tunables ]; then
  list="${2:-$root/build}/tests/test_wgmma_tunables"
  [ -x "$list" ] || { echo "no $list (build the tests first)" >&2; exit 2; }
  "$list" --list | python3 -c '
import sys
sets = [l.rstrip("\n").split("\t") for l in sys.stdin]
def val(p, k):
    return int(dict(x.split("=") for x in p.split(","))[k])
picked = []
for d in ("64", "128"):
    for bn in (32, 64, 128):
        mine = [s for s in sets if s[0] == d and val(s[1], "block_n") == bn]
        if not mine:
            continue
        deepest = max(mine, key=lambda s: (val(s[1], "ring"), val(s[1], "sahead"),
                                           val(s[1], "warpgroups")))
        r = val(deepest[1], "ring")
        for cap in (0, 128):
            picked += [s for s in mine if val(s[1], "ring") == r and
                       val(s[1], "sahead") == val(deepest[1], "sahead") and
                       val(s[1], "warpgroups") == 2 and val(s[1], "maxnreg") == cap]
        picked += [s for s in mine if val(s[1], "overlap") == 1 and
                   val(s[1], "warpgroups") == 2 and val(s[1], "maxnreg") == 0]
        picked += [s for s in mine if val(s[1], "warpgroups") == 1 and
                   val(s[1], "ring") == 0 and val(s[1], "overlap") == 0 and
                   val(s[1], "maxnreg") == 0]
for s in picked:
    print(s[1] + "\t" + s[2])
' | while IFS=$'\t' read -r params opts; do
    echo "## $params"
    check "$opts"
    # the deepest rings again as bf16, causal
    case "$params" in *sahead=1*) check "$opts -UFLASHCL_DTYPE -DFLASHCL_DTYPE=2 -UFLASHCL_CAUSAL -DFLASHCL_CAUSAL=1" ;; esac
  done
elif [ $# -gt 0 ]; then
  check "$1"
else
  for d in 64 128; do for t in 1 2; do for c in 0 1; do
    check "-DFLASHCL_HEAD_DIM=$d -DFLASHCL_DTYPE=$t -DFLASHCL_CAUSAL=$c"
  done; done; done
fi
