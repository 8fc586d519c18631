#!/usr/bin/env bash
# Proof without a GPU that a rewrite of the wgmma kernel changes no code:
# each plan's kernel is compiled to PTX from an old revision's sources
# with that revision's options, and from this tree's sources with the
# same options less the switches this tree no longer has (their old
# values were the only ones the host set, so they cost nothing to drop),
# and the two PTX files must be identical after comments and blank lines
# are stripped. Every plan runs in fp16 and bf16.
#
#   scripts/wgmma_ptx_snapshot.sh OLD_REV PLANS
#
# PLANS: the lines `name  nv_wgmma: <options>` that the OLD revision's
# tests/test_nv_plans prints (one per case of its H200 plan table), e.g.
#   build-old/tests/test_nv_plans | grep ' nv_wgmma: ' > plans.txt
# Needs clang-15 and llvm-15 (scripts/setup.sh --test), as
# scripts/nv_kernel_check.sh; libclc's builtins stay calls on both sides.
# KEEP=dir keeps the PTX files. Exit status 1 if any pair differs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:?OLD_REV}; plans=${2:?PLANS}
tmp=${KEEP:-$(mktemp -d)}
mkdir -p "$tmp/old"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$rev" cl | tar -x -C "$tmp/old"
# switches removed with the schedules and measurements they chose
# (docs/experiments.md): dropped from the new build's options
dropped='^-DFLASHCL_NV_WGMMA_(OVERLAP|LAG|SAHEAD|WS|PINGPONG|EXP_GUARD)='

ptx() { # ptx SRC_ROOT "DEFINES" OUT
  local inc="-I$1/cl/nvidia -I$1/cl/nvidia/wgmma -I$1/cl/common" o=$3
  # shellcheck disable=SC2086 # the defines split into words
  clang-15 -x cl -cl-std=CL1.2 -cl-mad-enable -w -Xclang -finclude-default-header \
    $inc $2 -target nvptx64-nvidia-nvcl -O3 -emit-llvm \
    -c "$1/cl/nvidia/flash_fwd_wgmma.cl" -o "$o.bc"
  llc-15 -O3 -march=nvptx64 -mcpu=sm_80 "$o.bc" -o "$o.raw"
  grep -v -E '^\s*(//.*)?$' "$o.raw" > "$o"
  rm -f "$o.bc" "$o.raw"
}

n=0 same=0 differ=0
while IFS= read -r line; do
  opts=$(printf '%s\n' "${line#*nv_wgmma: }" | tr ' ' '\n' | grep '^-D' | sort -u | tr '\n' ' ')
  for dtype in 1 2; do
    # shellcheck disable=SC2086 # one define a line
    old_defs=$(printf '%s\n' $opts | sed "s/^-DFLASHCL_DTYPE=.*/-DFLASHCL_DTYPE=$dtype/" | tr '\n' ' ')
    # shellcheck disable=SC2086
    new_defs=$(printf '%s\n' $old_defs | grep -v -E "$dropped" | tr '\n' ' ')
    n=$((n + 1))
    ptx "$tmp/old" "$old_defs" "$tmp/$n.old.ptx"
    ptx "$root" "$new_defs" "$tmp/$n.new.ptx"
    if cmp -s "$tmp/$n.old.ptx" "$tmp/$n.new.ptx"; then
      same=$((same + 1))
    else
      differ=$((differ + 1))
      echo "DIFFERS ($n): ${line%%nv_wgmma: *} dtype $dtype: $new_defs"
    fi
  done
done < "$plans"
echo "wgmma PTX snapshot against $rev: $n builds, $same identical, $differ different"
[ "$differ" -eq 0 ]
