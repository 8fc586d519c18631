#!/usr/bin/env bash
# Registers, spills and shared memory of cl/nvidia/flash_fwd_mma.cl for one
# set of -D options, without a GPU: clang-14 + libclc to PTX, then CUDA's
# ptxas -v (NVIDIA's OpenCL compiler differs from clang in details: the
# GPU's own figures are the ones that count; this is for the registers a
# change costs, before a GPU run).
#   scripts/nv_fwd_ptxas.sh "-DFLASHCL_DTYPE=0 -DFLASHCL_NV_EXACT=1 ..."
#   ARCH=sm_80 KEEP=k.ptx scripts/nv_fwd_ptxas.sh "..."
set -euo pipefail
cd "$(dirname "$0")/.."
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
clang-14 -x cl -cl-std=CL1.2 -Xclang -finclude-default-header \
  -Icl/common -Icl/nvidia -Icl/nvidia/mma -Icl/portable -DFLASHCL_NV_MMA=1 $1 \
  -target nvptx64-nvidia-nvcl -march=sm_80 -O3 -emit-llvm \
  -c cl/nvidia/flash_fwd_mma.cl -o "$t/k.bc" 2>"$t/err" || { head -20 "$t/err"; exit 1; }
llvm-link-14 --only-needed "$t/k.bc" /usr/lib/clc/nvptx64--nvidiacl.bc -o "$t/l.bc" 2>/dev/null
llc-14 -O3 -march=nvptx64 -mcpu=sm_80 "$t/l.bc" -o "$t/k.ptx"
sed -i -e 's/^\.version .*/.version 7.8/' "$t/k.ptx"
/usr/local/cuda/bin/ptxas -arch="${ARCH:-sm_90}" -v "$t/k.ptx" -o "$t/k.cubin" >"$t/v" 2>&1
python3 - "$t/v" <<'P'
import re, sys
txt = open(sys.argv[1]).read()
for m in re.finditer(r"Compiling entry function '(\w+)'.*?(\d+) bytes spill stores.*?Used (\d+) registers.*?(\d+) bytes smem", txt, re.S):
    print(f"  {m.group(1)}: {m.group(3)} regs, spill {m.group(2)}, smem {m.group(4)}")
P
[ -z "${KEEP-}" ] || cp "$t/k.ptx" "$KEEP"
