#!/usr/bin/env bash
# The NVIDIA kernels without an NVIDIA GPU: cl/nvidia/flash_fwd_mma.cl and
# the tensor-core split-KV kernel (cl/inference/flash_split.cl with
# FLASHCL_SPLIT_MMA) compiled to PTX by clang-15 and llc-15 (Debian's, which
# scripts/setup.sh --test installs for the AMD check) in the configurations the
# host plans: every bias/mask reading (vector runs a tile ahead or at their
# tile, pairs through the key permutation, the old layout), the heads-first
# grid, TF32 and exact fp32 (3xTF32: three times the TF32 build's mma), the fix-up pass, the split kernel with and without its own
# merge. A configuration fails when it does not compile (an #error, a
# macro that breaks in that combination) or when the PTX lacks what the
# configuration is for: mma.sync always, 16- or 8-byte global loads for
# the vector readings, the GPU-scope fence and the atomic count (a call
# to libclc's atomic_inc, which is not linked here) for the
# fused merge. NVIDIA's own compiler differs from clang in details and
# ptxas is not run: registers and speed are measured on the GPU
# (bench/run_gpu.sh).
#
#   scripts/nv_kernel_check.sh        # about 15 s
#   NV_PTX_DUMP=DIR scripts/nv_kernel_check.sh  # also saves each PTX as
#     DIR/NN.ptx (NN the configuration's number), to cmp two trees' PTX
#     after code motion
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in clang-15 llc-15; do
  command -v "$tool" >/dev/null || { echo "nv_kernel_check: $tool missing (scripts/setup.sh --test installs it)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 built=0

# ptx_of FILE OPTIONS: the kernel's PTX in $tmp/k.ptx
ptx_of() {
  clang-15 -x cl -cl-std=CL1.2 -Xclang -finclude-default-header \
    -cl-ext=+cl_khr_fp16 -Icl/common -Icl/nvidia -Icl/nvidia/mma -Icl/nvidia/wgmma -Icl/inference $2 \
    -target nvptx64-nvidia-nvcl -O2 -emit-llvm -c "$1" -o "$tmp/k.bc" 2>"$tmp/err" &&
    llc-15 -O2 -march=nvptx64 -mcpu=sm_80 "$tmp/k.bc" -o "$tmp/k.ptx" 2>>"$tmp/err"
}

# check LABEL FILE OPTIONS WANT...: WANT are extended regexps the PTX must
# match (prefix ! for must not)
check() {
  local label=$1 file=$2 opts=$3; shift 3
  built=$((built + 1))
  if ! ptx_of "$file" "$opts"; then
    echo "FAIL $label: does not compile"; head -5 "$tmp/err"; failed=1; return
  fi
  [ -z "${NV_PTX_DUMP-}" ] || cp "$tmp/k.ptx" "$NV_PTX_DUMP/$(printf %02d "$built").ptx"
  local want
  for want in "${CHECK_BASE-mma\.sync}" "$@"; do
    if [ "${want#!}" != "$want" ]; then
      if grep -qE "${want#!}" "$tmp/k.ptx"; then
        echo "FAIL $label: PTX has ${want#!}"; failed=1; return
      fi
    elif ! grep -qE "$want" "$tmp/k.ptx"; then
      echo "FAIL $label: PTX lacks $want"; failed=1; return
    fi
  done
  echo "ok   $label"
}

fwd=cl/nvidia/flash_fwd_mma.cl
nv="-DFLASHCL_NV_MMA=1 -DFLASHCL_NV_SM=90"
d128="-DFLASHCL_HEAD_DIM=128 -DFLASHCL_HEAD_DIM_V=128 -DFLASHCL_NV_DQ=128 -DFLASHCL_NV_DV=128"
d64="-DFLASHCL_HEAD_DIM=64 -DFLASHCL_HEAD_DIM_V=64 -DFLASHCL_NV_DQ=64 -DFLASHCL_NV_DV=64"
d256="-DFLASHCL_HEAD_DIM=256 -DFLASHCL_HEAD_DIM_V=256 -DFLASHCL_NV_DQ=250 -DFLASHCL_NV_DV=256"
t128x32="-DFLASHCL_BLOCK_M=128 -DFLASHCL_BLOCK_N=32 -DFLASHCL_WG_SIZE=128"
t64x32="-DFLASHCL_BLOCK_M=64 -DFLASHCL_BLOCK_N=32 -DFLASHCL_WG_SIZE=128"
t64x64="-DFLASHCL_BLOCK_M=64 -DFLASHCL_BLOCK_N=64 -DFLASHCL_WG_SIZE=128"
t64x16="-DFLASHCL_BLOCK_M=64 -DFLASHCL_BLOCK_N=16 -DFLASHCL_WG_SIZE=128"
vec="-DFLASHCL_NV_KEY_PERM=1 -DFLASHCL_NV_EXTRAS_VEC=1"
v16='ld\.global(\.nc)?\.v4\.(u32|f32|b32)'
v8='ld\.global(\.nc)?\.v2\.(u32|b32)'

check "plain bf16 D128" $fwd "$nv $d128 $t128x32 -DFLASHCL_DTYPE=2"
check "plain fp16 D256 (250 real) causal" $fwd "$nv $d256 $t64x32 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1"
check "window+softcap+sinks causal" $fwd \
  "$nv $d128 $t128x32 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_SOFTCAP=1 -DFLASHCL_SINKS=1" 'tanh\.approx'
check "bias fp32, vectors at the tile" $fwd \
  "$nv $d128 $t64x32 -DFLASHCL_DTYPE=2 -DFLASHCL_BIAS=1 $vec -DFLASHCL_NV_EXTRAS_AHEAD=0" "$v16"
check "bias fp32, vectors ahead, fix-up pass" $fwd \
  "$nv $d128 $t64x32 -DFLASHCL_DTYPE=2 -DFLASHCL_BIAS=1 $vec -DFLASHCL_NV_FIXUP=1" "$v16"
check "bias fp16 D64 64-key tiles" $fwd \
  "$nv $d64 $t64x64 -DFLASHCL_DTYPE=1 -DFLASHCL_BIAS=2 $vec" "$v16"
check "bias bf16 D256 16-key tiles (8-byte runs)" $fwd \
  "$nv $d256 $t64x16 -DFLASHCL_DTYPE=2 -DFLASHCL_BIAS=3 $vec" "$v8"
check "mask, 32 rows a warp, ahead (8-byte runs)" $fwd \
  "$nv $d128 $t128x32 -DFLASHCL_DTYPE=2 -DFLASHCL_MASK=1 $vec" "$v8"
check "mask 16-key tiles (4-byte runs)" $fwd \
  "$nv $d256 $t64x16 -DFLASHCL_DTYPE=1 -DFLASHCL_MASK=1 $vec" 'ld\.global(\.nc)?\.u32'
check "ALiBi+bias+mask causal window, heads first" $fwd \
  "$nv $d128 $t64x32 -DFLASHCL_DTYPE=2 -DFLASHCL_ALIBI=1 -DFLASHCL_BIAS=1 -DFLASHCL_MASK=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_WINDOW_LEFT=1 $vec -DFLASHCL_NV_HEADS_FIRST=1" "$v16"
check "bias+mask, permuted keys, pair loads" $fwd \
  "$nv $d128 $t64x32 -DFLASHCL_DTYPE=1 -DFLASHCL_BIAS=1 -DFLASHCL_MASK=1 -DFLASHCL_NV_KEY_PERM=1" "!$v16"
check "bias+mask, the layout of before" $fwd \
  "$nv $d128 $t64x32 -DFLASHCL_DTYPE=1 -DFLASHCL_BIAS=1 -DFLASHCL_MASK=1 -DFLASHCL_NV_KEY_PERM=0"
check "TF32 bias+mask D64" $fwd \
  "$nv $d64 $t128x32 -DFLASHCL_DTYPE=0 -DFLASHCL_BIAS=1 -DFLASHCL_MASK=1 $vec" 'tf32' "$v16"

# Exact fp32 (FLASHCL_NV_EXACT, 3xTF32): three m16n8k8 mma (lo*hi, hi*lo,
# hi*hi) for each one of the same configuration's one-product TF32 build,
# and the split's cvt.rna.tf32; with and without the compensated sums.
exact_ratio() {
  local label=$1 opts=$2 one three
  built=$((built + 1))
  if ! ptx_of $fwd "$opts -DFLASHCL_NV_EXACT=0"; then
    echo "FAIL $label (TF32 build): does not compile"; head -5 "$tmp/err"; failed=1; return
  fi
  one=$(grep -c 'mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32' "$tmp/k.ptx" || true)
  if ! ptx_of $fwd "$opts -DFLASHCL_NV_EXACT=1 ${3-}"; then
    echo "FAIL $label: does not compile"; head -5 "$tmp/err"; failed=1; return
  fi
  [ -z "${NV_PTX_DUMP-}" ] || cp "$tmp/k.ptx" "$NV_PTX_DUMP/$(printf %02d "$built").ptx"
  three=$(grep -c 'mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32' "$tmp/k.ptx" || true)
  if [ "$one" -eq 0 ] || [ "$three" -ne $((3 * one)) ]; then
    echo "FAIL $label: $three tf32 mma, not 3 x $one"; failed=1; return
  fi
  if ! grep -qE 'cvt\.rna\.tf32\.f32' "$tmp/k.ptx"; then
    echo "FAIL $label: PTX lacks cvt.rna.tf32.f32"; failed=1; return
  fi
  echo "ok   $label ($three mma = 3 x $one)"
}
exact_ratio "exact fp32 D128 causal (3xTF32)" "$nv $d128 $t64x32 -DFLASHCL_DTYPE=0 -DFLASHCL_CAUSAL=1"
exact_ratio "exact fp32 D64, compensated sums" "$nv $d64 $t64x32 -DFLASHCL_DTYPE=0" "-DFLASHCL_NV_COMPENSATE=1"
exact_ratio "exact fp32 D128 causal, bf16 compensation, 16-key tiles" "$nv $d128 $t64x16 -DFLASHCL_DTYPE=0 -DFLASHCL_CAUSAL=1" "-DFLASHCL_NV_COMPENSATE=2"

check "varlen bf16 D128 causal window softcap sinks alibi" $fwd \
  "$nv $d128 $t128x32 -DFLASHCL_DTYPE=2 -DFLASHCL_NV_VARLEN=1 -DFLASHCL_NV_SEQ_FIRST=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_SOFTCAP=1 -DFLASHCL_SINKS=1 -DFLASHCL_ALIBI=1"
check "varlen fp16 D64 top-left, fix-up pass" $fwd \
  "$nv $d64 $t128x32 -DFLASHCL_DTYPE=1 -DFLASHCL_NV_VARLEN=1 -DFLASHCL_NV_VARLEN_TOP_LEFT=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_FIXUP=1"

split=cl/inference/flash_split.cl
smma="-DFLASHCL_BLOCK_N=128 -DFLASHCL_WG_SIZE=256 -DFLASHCL_VEC=4 -DFLASHCL_SPLIT_VLOAD=1 -DFLASHCL_SPLIT_MMA=8"
check "split tensor-core kernel, own merge" $split \
  "$d128 $smma -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=2 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=2 -DFLASHCL_SPLIT_FUSED=1" \
  'fence\.acq_rel\.gpu' 'atom\.global|atomic_inc'
check "split tensor-core kernel, paged, causal, own merge" $split \
  "$d64 $smma -DFLASHCL_BLOCK_M=16 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=3 -DFLASHCL_SPLIT_FUSED=1" \
  'fence\.acq_rel\.gpu' 'atom\.global|atomic_inc'
check "split tensor-core kernel, streamed loads evicted first" $split \
  "$d128 $smma -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=2 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=2 -DFLASHCL_SPLIT_FUSED=1 -DFLASHCL_SPLIT_MMA_LOAD=3" \
  'ld\.global\.nc\.L1::no_allocate\.L2::cache_hint\.L2::256B\.v4' 'createpolicy'
check "split tensor-core kernel, quarters, 16 rows, ring" $split \
  "$d128 $smma -DFLASHCL_BLOCK_M=16 -DFLASHCL_DTYPE=1 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=2 -DFLASHCL_SPLIT_MMA_LOAD=0 -DFLASHCL_SPLIT_MMA_STAGES=1" \
  'cp\.async'
check "split tensor-core kernel, L2 prefetch 4 steps ahead" $split \
  "$d128 $smma -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=2 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=2 -DFLASHCL_SPLIT_FUSED=1 -DFLASHCL_SPLIT_MMA_LOAD=2 -DFLASHCL_SPLIT_MMA_PREFETCH=4" \
  'prefetch\.global\.L2'
check "split tensor-core kernel, paged, L2 prefetch" $split \
  "$d64 $smma -DFLASHCL_BLOCK_M=16 -DFLASHCL_DTYPE=1 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=3 -DFLASHCL_SPLIT_MMA_PREFETCH=2" \
  'prefetch\.global\.L2'
check "split tensor-core kernel, combine kernel" $split \
  "$d128 $smma -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=2 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=2" \
  '!fence\.acq_rel\.gpu'
# The wide split kernel reading a quantized cache (issue 45; NVIDIA's when
# forced, FLASHCL_SPLIT_KERNEL=wide, the other GPUs' pick): decoded
# as the tile is loaded (kv_quad), so no cp.async, whose raw copies would
# skip the decode; the int8 / fp8 bytes and int4 nibbles read as bytes.
wide="-DFLASHCL_BLOCK_N=32 -DFLASHCL_WG_SIZE=128 -DFLASHCL_VEC=4 -DFLASHCL_SPLIT_VLOAD=1 -DFLASHCL_SPLIT_WIDE=1 -DFLASHCL_SPLIT=1"
CHECK_BASE='ld\.global\.s8' check "split wide kernel, int8 K and V, dense, bf16" $split \
  "$d128 $wide -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=2 -DFLASHCL_KV_MODE=2 -DFLASHCL_K_QUANT=3 -DFLASHCL_V_QUANT=3" \
  '!cp\.async'
CHECK_BASE='ld\.global\.u8' check "split wide kernel, int4 K e4m3 V, paged, fp16" $split \
  "$d128 $wide -DFLASHCL_BLOCK_M=8 -DFLASHCL_DTYPE=1 -DFLASHCL_KV_MODE=3 -DFLASHCL_K_QUANT=4 -DFLASHCL_V_QUANT=1" \
  '!cp\.async'
CHECK_BASE='ld\.global\.s8' check "split wide kernel, e5m2 K, fp32 V, D64" $split \
  "$d64 $wide -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=0 -DFLASHCL_KV_MODE=2 -DFLASHCL_K_QUANT=2" \
  '!cp\.async' 'ld\.global(\.nc)?\.v4\.f32'
# The lane-group split kernel reading a quantized cache (NVIDIA's pick for
# one, issue 45): each item's slice decoded by kv_quad into fp32 words as
# it is loaded, the lane sums by shuffles; no stack frame (a quad indexed
# by a lane-dependent number went to the stack once). The first is the
# H200's plan for an int8 bf16 decode (tests/test_nv_plans.c prints it);
# the last has 32 lanes over D = 64, slices of 2 columns, narrower than a
# quad.
lanes="-DFLASHCL_WG_SIZE=128 -DFLASHCL_VEC=4 -DFLASHCL_SPLIT_VLOAD=1 -DFLASHCL_SPLIT_SHFL=1 -DFLASHCL_SPLIT=1 -DFLASHCL_SPLIT_PREFETCH=1"
CHECK_BASE='shfl\.sync\.bfly' check "split lane-group kernel, int8 K and V, dense, bf16" $split \
  "$d128 $lanes -DFLASHCL_SPLIT_LANES=32 -DFLASHCL_SPLIT_UNROLL=4 -DFLASHCL_BLOCK_N=16 -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=2 -DFLASHCL_KV_MODE=2 -DFLASHCL_K_QUANT=3 -DFLASHCL_V_QUANT=3" \
  'ld\.global(\.nc)?\.s8' '!__local_depot'
CHECK_BASE='shfl\.sync\.bfly' check "split lane-group kernel, int4 K e4m3 V, paged, fp16" $split \
  "$d128 $lanes -DFLASHCL_SPLIT_LANES=32 -DFLASHCL_SPLIT_UNROLL=4 -DFLASHCL_BLOCK_N=16 -DFLASHCL_BLOCK_M=8 -DFLASHCL_DTYPE=1 -DFLASHCL_KV_MODE=3 -DFLASHCL_K_QUANT=4 -DFLASHCL_V_QUANT=1" \
  'ld\.global(\.nc)?\.[su]8' '!__local_depot'
CHECK_BASE='shfl\.sync\.bfly' check "split lane-group kernel, e5m2 K, fp32 V, D64, 2-column slices" $split \
  "$d64 $lanes -DFLASHCL_SPLIT_LANES=32 -DFLASHCL_SPLIT_UNROLL=4 -DFLASHCL_BLOCK_N=16 -DFLASHCL_BLOCK_M=16 -DFLASHCL_DTYPE=0 -DFLASHCL_KV_MODE=2 -DFLASHCL_K_QUANT=2" \
  'ld\.global(\.nc)?\.[su]8' '!__local_depot'
# The tensor-core split kernel reading a quantized cache (NVIDIA's pick
# for one where it serves the call, as for a 16-bit cache): each lane's
# 8-element chunks, 8 bytes (int4: 4) a load, decoded by kv_oct into 16-bit
# pairs; no ring (cp.async would copy raw bytes), no stack frame. The
# first is the H200's plan for an int8 bf16 GQA decode
# (tests/test_nv_plans.c prints it). fp8 through cvt (sm_90): clang
# loads each half of a chunk apart (4-byte loads), never byte by byte.
CHECK_BASE='mma\.sync' check "split tensor-core kernel, int8 K and V, dense, bf16" $split \
  "$d128 $smma -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=2 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=2 -DFLASHCL_SPLIT_FUSED=1 -DFLASHCL_SPLIT_MMA_LOAD=2 -DFLASHCL_K_QUANT=3 -DFLASHCL_V_QUANT=3" \
  "$v8" '!cp\.async' '!__local_depot'
CHECK_BASE='mma\.sync' check "split tensor-core kernel, int4 K e4m3 V, paged, fp16, 16 rows" $split \
  "$d64 $smma -DFLASHCL_BLOCK_M=16 -DFLASHCL_DTYPE=1 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=3 -DFLASHCL_K_QUANT=4 -DFLASHCL_V_QUANT=1" \
  'ld\.global(\.nc)?\.u32' "$v8" '!cp\.async' '!__local_depot'
CHECK_BASE='mma\.sync' check "split tensor-core kernel, e4m3 K and V through cvt (sm_90)" $split \
  "$d128 $smma -DFLASHCL_BLOCK_M=4 -DFLASHCL_DTYPE=2 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=2 -DFLASHCL_SPLIT_FUSED=1 -DFLASHCL_SPLIT_MMA_LOAD=2 -DFLASHCL_K_QUANT=1 -DFLASHCL_V_QUANT=1 -DFLASHCL_NV_FP8_CVT=1" \
  'cvt\.rn\.f16x2\.e4m3x2' 'ld\.global(\.nc)?\.u32' '!ld\.global(\.nc)?\.[su]8' '!__local_depot'
CHECK_BASE='mma\.sync' check "split tensor-core kernel, e5m2 K, bf16 V, L2 prefetch" $split \
  "$d128 $smma -DFLASHCL_BLOCK_M=8 -DFLASHCL_DTYPE=2 -DFLASHCL_SPLIT=1 -DFLASHCL_KV_MODE=2 -DFLASHCL_SPLIT_MMA_PREFETCH=2 -DFLASHCL_K_QUANT=2" \
  "$v8" 'prefetch\.global\.L2' "$v16" '!__local_depot'


# The Hopper wgmma kernel (cl/nvidia/flash_fwd_wgmma.cl) in the schedules
# the table plans (the warp-specialized one with the 128-byte swizzle in
# 128 KiB) and its variants: wgmma itself, the mbarrier hand-over, the
# register split, the local-memory marker the PTX patch reads. Its
# instructions sit in SM90A comments until the host's patch
# (src/paths/sm90a_patch.c); ptxas for sm_90a is scripts/wgmma_isa_check.sh
# (needs CUDA's ptxas, not in CI) and the wgmma layouts are checked by
# scripts/wgmma_layout_model.py.
wg=cl/nvidia/flash_fwd_wgmma.cl
ws="-DFLASHCL_NV_WGMMA=1 -DFLASHCL_NV_SM=90 -DFLASHCL_WG_SIZE=384 -DFLASHCL_BLOCK_M=128 -DFLASHCL_BLOCK_N=64 -DFLASHCL_LOCAL_MEM_BYTES=131072 -DFLASHCL_NV_WGMMA_DECLARED_SMEM=49152 -DFLASHCL_NV_WGMMA_MAXNREG=168"
mb='mbarrier\.try_wait\.parity'
# check, with the wgmma itself as what every configuration must have
wcheck() { CHECK_BASE='wgmma\.mma_async' check "$@"; }
wcheck "wgmma D128 bf16 causal (the table)" $wg \
  "$ws -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=7" \
  "$mb" 'cp\.async\.mbarrier\.arrive\.noinc' 'setmaxnreg\.inc' 'SM90A_SHARED_BYTES 131072' \
  'SM90A_MAXNREG 168' '\.align 1024' 'm64n64k16' 'm64n128k16'
wcheck "wgmma D64 fp16 (64-key tiles)" $wg \
  "$ws -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=8" \
  "$mb" 'setmaxnreg\.dec' '!bar\.sync 1'
# the table since the 128-key tiles: D 64 and 128 (S as m64n128), D = 256
# (Q in local memory: S from two descriptors, P V as m64n256, 224 KiB), and
# padded head dims (FLASHCL_NV_DQ: P V as m64n96 / m64n192)
ws128=${ws/-DFLASHCL_BLOCK_N=64/-DFLASHCL_BLOCK_N=128}
wcheck "wgmma table D64 fp16 causal (128-key tiles)" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=4" \
  "$mb" 'm64n128k16' 'm64n64k16'
wcheck "wgmma table D128 bf16 (128-key tiles)" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=3" \
  "$mb" 'm64n128k16\.f32\.bf16' '!m64n64k16'
ws256=${ws/-DFLASHCL_LOCAL_MEM_BYTES=131072/-DFLASHCL_LOCAL_MEM_BYTES=229456}
wcheck "wgmma table D256 fp16 causal (Q in local memory)" $wg \
  "$ws256 -DFLASHCL_HEAD_DIM=256 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=5" \
  "$mb" 'm64n256k16' 'm64n64k16\.f32\.f16\.f16 \{[^}]*\}, %rd' 'SM90A_SHARED_BYTES 229456'
wcheck "wgmma padded D96 in the 128-column tiles" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_NV_DQ=96 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=3" \
  'm64n96k16' '!m64n128k16\.f32\.f16\.f16 \{[^}]*\}, \{[^}]*\}, %rd[0-9]*, p, 1, 1, 1'
wcheck "wgmma padded D192 in the 256-column tiles" $wg \
  "$ws256 -DFLASHCL_HEAD_DIM=256 -DFLASHCL_NV_DQ=192 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=5" \
  'm64n192k16' '!m64n256k16'
# the third 2026-12-02 session: D = 64's table with 3 consumer
# warpgroups (512 work-items, the 32 / 160 register split); P V's wgmma N
# at D_v's next shape (40, 80) and D_v != D (192 / 128: N 128, not 192 or
# 256)
ws3=${ws128/-DFLASHCL_WG_SIZE=384 -DFLASHCL_BLOCK_M=128/-DFLASHCL_WG_SIZE=512 -DFLASHCL_BLOCK_M=192}
ws3=${ws3/-DFLASHCL_NV_WGMMA_MAXNREG=168/-DFLASHCL_NV_WGMMA_MAXNREG=128}
wcheck "wgmma table D64 fp16 causal, 3 consumer warpgroups" $wg \
  "$ws3 -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=4" \
  "$mb" 'setmaxnreg\.dec\.sync\.aligned\.u32 32' 'setmaxnreg\.inc\.sync\.aligned\.u32 160' \
  'SM90A_MAXNREG 128' 'm64n128k16'
wcheck "wgmma padded D40 (P V as m64n40, 3 consumer warpgroups)" $wg \
  "$ws3 -DFLASHCL_HEAD_DIM=64 -DFLASHCL_NV_DQ=40 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=4" \
  'm64n40k16' '!m64n64k16'
wcheck "wgmma padded D80 (P V as m64n80)" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_NV_DQ=80 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=3" \
  'm64n80k16' '!m64n96k16'
wcheck "wgmma D_v != D (192 / 128 in the 256-column tiles)" $wg \
  "$ws256 -DFLASHCL_HEAD_DIM=256 -DFLASHCL_NV_DQ=192 -DFLASHCL_NV_DV=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=5" \
  'm64n128k16' '!m64n192k16' '!m64n256k16'
# 2026-12-03 (v8): the padded head dims up to 112 and softcap in the
# 128-column tiles on 3 consumer warpgroups (D <= 80 128-key tiles in a
# ring of 5, above 64-key tiles in a ring of 8, 224 KiB)
ws3l=${ws3/-DFLASHCL_LOCAL_MEM_BYTES=131072/-DFLASHCL_LOCAL_MEM_BYTES=229456}
wcheck "wgmma table D80 bf16 causal, 3 consumers, 128-key tiles" $wg \
  "$ws3l -DFLASHCL_HEAD_DIM=128 -DFLASHCL_NV_DQ=80 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=5" \
  "$mb" 'setmaxnreg\.inc\.sync\.aligned\.u32 160' 'm64n80k16' 'm64n128k16' 'SM90A_SHARED_BYTES 229456'
wcheck "wgmma table D96 fp16, 3 consumers, 64-key tiles" $wg \
  "${ws3l/-DFLASHCL_BLOCK_N=128/-DFLASHCL_BLOCK_N=64} -DFLASHCL_HEAD_DIM=128 -DFLASHCL_NV_DQ=96 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=8" \
  "$mb" 'setmaxnreg\.inc\.sync\.aligned\.u32 160' 'm64n96k16' 'm64n64k16' '!m64n128k16'
wcheck "wgmma table D128 bf16 softcap + window + sinks, 3 consumers" $wg \
  "${ws3l/-DFLASHCL_BLOCK_N=128/-DFLASHCL_BLOCK_N=64} -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=8 -DFLASHCL_SOFTCAP=1 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_SINKS=1" \
  "$mb" 'tanh\.approx\.f32' 'm64n128k16' 'm64n64k16'
# 2026-12-03 (v9): head dims 129..160 in the 256-column tiles on 3
# consumer warpgroups (Q's 96 KiB in local memory, its third warpgroup's
# named barrier 5, a ring of 4); the persistent grid with a causal band
ws3q=${ws3l/-DFLASHCL_BLOCK_N=128/-DFLASHCL_BLOCK_N=64}
wcheck "wgmma table D160 bf16 causal, 3 consumers, Q in local memory" $wg \
  "$ws3q -DFLASHCL_HEAD_DIM=256 -DFLASHCL_NV_DQ=160 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=4" \
  "$mb" 'setmaxnreg\.inc\.sync\.aligned\.u32 160' 'bar\.sync 5, 128' 'm64n160k16' '!m64n256k16' 'SM90A_SHARED_BYTES 229456'
wcheck "wgmma table D128 fp16 causal window, persistent grid" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_NV_WGMMA_PERSIST=1" \
  "$mb" 'm64n128k16'
# 2026-12-04 (s13): narrow bands in 64-key tiles, a ring of 8 in 224 KiB,
# on the persistent grid: 3 consumers at D = 64 (bands up to 512 keys),
# 2 in the 128-column tiles (up to 128 keys)
wcheck "wgmma table D64 bf16 causal window 128 + sinks, 64-key tiles, persistent" $wg \
  "$ws3q -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=8 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_SINKS=1 -DFLASHCL_NV_WGMMA_PERSIST=1" \
  "$mb" 'setmaxnreg\.inc\.sync\.aligned\.u32 160' 'm64n64k16' '!m64n128k16' 'SM90A_SHARED_BYTES 229456'
wcheck "wgmma table D128 bf16 causal window 128, 64-key tiles, persistent" $wg \
  "$ws256 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=8 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_NV_WGMMA_PERSIST=1" \
  "$mb" 'm64n64k16' 'm64n128k16' 'SM90A_SHARED_BYTES 229456'
# the variant table on the wgmma kernel (unforced since its H200 run but
# for bias and mask, src/paths/nv_wgmma.c): the band's left edge, softcap's MUFU.TANH,
# ALiBi and sinks in the 128-key table kernel; bias and mask (pairs of
# 16-bit loads) in the 64-key tiles the host plans for them; all of them
# at D = 256
wcheck "wgmma table D128 bf16 window + softcap + ALiBi + sinks" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1 -DFLASHCL_SINKS=1" \
  "$mb" 'tanh\.approx\.f32' 'm64n128k16'
wcheck "wgmma D128 fp16 bias fp16 + mask (64-key tiles)" $wg \
  "$ws -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=7 -DFLASHCL_BIAS=2 -DFLASHCL_MASK=1" \
  "$mb" 'cvt\.f32\.f16' 'ld\.global\.v2\.u8' '!tanh\.approx'
# bias or mask alone fetched a tile ahead (the kernel's WG_XPF): a mask
# pair as one 16-bit load (the score pass's own read is two bytes), a
# 16-bit bias converted where the scores use it
wcheck "wgmma D64 fp16 mask fetched ahead" $wg \
  "$ws -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=8 -DFLASHCL_MASK=1" \
  "$mb" 'ld\.global\.u16' '!ld\.global\.v2\.u8'
wcheck "wgmma D128 bf16 bias bf16 fetched ahead, heads first" $wg \
  "$ws -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=7 -DFLASHCL_BIAS=3 -DFLASHCL_NV_HEADS_FIRST=1" \
  "$mb" 'ld\.global\.u32' 'and\.b32[^;]*-65536'
# a mask packed into bits (FLASHCL_NV_WGMMA_MASK_BITS, 2026-12-04): a
# row's words of a tile as one 16-byte load (8 at 64-key tiles), no
# 16-bit mask loads; the packing pass itself (cl/common/mask_bits.cl)
wcheck "wgmma D128 bf16 causal mask as bits, 128-key tiles, heads first" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_MASK=1 -DFLASHCL_NV_WGMMA_MASK_BITS=1 -DFLASHCL_NV_HEADS_FIRST=1" \
  "$mb" 'ld\.global(\.nc)?\.v4\.u32' '!ld\.global(\.nc)?\.u16' 'm64n128k16'
wcheck "wgmma D64 fp16 mask as bits + window + softcap, 64-key tiles" $wg \
  "$ws -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=8 -DFLASHCL_MASK=1 -DFLASHCL_NV_WGMMA_MASK_BITS=1 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_SOFTCAP=1" \
  "$mb" 'ld\.global(\.nc)?\.v2\.u32' '!ld\.global(\.nc)?\.u16' 'tanh\.approx\.f32'
wcheck "wgmma D64 bf16 mask as bits, 3 consumer warpgroups" $wg \
  "$ws3 -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=4 -DFLASHCL_MASK=1 -DFLASHCL_NV_WGMMA_MASK_BITS=1 -DFLASHCL_NV_HEADS_FIRST=1" \
  "$mb" 'setmaxnreg\.inc\.sync\.aligned\.u32 160' 'ld\.global(\.nc)?\.v4\.u32' '!ld\.global(\.nc)?\.u16'
# the softcap entry's schedule (3 consumers, 64-key tiles) at D = 128 with
# the bits, which a tuned set reaches
wcheck "wgmma D128 bf16 mask as bits, 3 consumers in 64-key tiles" $wg \
  "${ws3/-DFLASHCL_BLOCK_N=128 -DFLASHCL_LOCAL_MEM_BYTES=131072/-DFLASHCL_BLOCK_N=64 -DFLASHCL_LOCAL_MEM_BYTES=229456} -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=8 -DFLASHCL_MASK=1 -DFLASHCL_NV_WGMMA_MASK_BITS=1 -DFLASHCL_NV_HEADS_FIRST=1" \
  "$mb" 'setmaxnreg\.inc\.sync\.aligned\.u32 160' 'ld\.global(\.nc)?\.v2\.u32' '!ld\.global(\.nc)?\.u16' 'm64n64k16'
CHECK_BASE='ld\.global' check "mask packing pass (mask_bits.cl)" cl/common/mask_bits.cl \
  "-DFLASHCL_DTYPE=2 -DFLASHCL_MASK=1" 'st\.global\.(u32|b32)'
wcheck "wgmma table D256 fp16 causal, every variant" $wg \
  "$ws256 -DFLASHCL_HEAD_DIM=256 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=5 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1 -DFLASHCL_SINKS=1 -DFLASHCL_BIAS=1 -DFLASHCL_MASK=1" \
  "$mb" 'tanh\.approx\.f32' 'm64n256k16'
# the persistent grid (FLASHCL_NV_WGMMA_PERSIST): the work
# items' loop in both roles, heads_q and batch after the forward list
wcheck "wgmma table D64 fp16 causal, persistent grid" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=4 -DFLASHCL_NV_WGMMA_PERSIST=1" \
  "$mb" 'setmaxnreg\.dec' 'flashcl_attention_fwd_param_37'
# packed (varlen) batches on the wgmma kernel: the varlen list after the
# forward list (param 36..41), sequences first in a causal grid; and the
# exponent guard in the plain kernel (its 2^12 bound, 0f45800000; none
# where the scores are prescaled, as with ALiBi)
wcheck "wgmma varlen bf16 D128 causal, sequences first" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_NV_VARLEN=1 -DFLASHCL_NV_SEQ_FIRST=1" \
  "$mb" 'flashcl_attention_fwd_param_41' '0f45800000'
wcheck "wgmma varlen fp16 D64 top-left window + softcap + sinks" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=4 -DFLASHCL_NV_VARLEN=1 -DFLASHCL_NV_VARLEN_TOP_LEFT=1 -DFLASHCL_NV_SEQ_FIRST=1 -DFLASHCL_WINDOW_LEFT=1 -DFLASHCL_SOFTCAP=1 -DFLASHCL_SINKS=1" \
  "$mb" 'flashcl_attention_fwd_param_41' 'tanh\.approx\.f32'
# the FMA exponent's guard: the 2^12 bound, no NaN marker, and the warp's
# exact redo of marked rows (its marker comment)
wcheck "wgmma D64 bf16 causal, marked rows redone by their warp" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=4 -DFLASHCL_SINKS=1" \
  "$mb" '0f45800000' '!32767' 'flashcl: wg_redo_row'
# the packed mask alone takes the same marks and redo, the redo reading
# its bits byte by byte
wcheck "wgmma D64 bf16 mask as bits, 3 consumers, marked rows redone" $wg \
  "$ws3 -DFLASHCL_HEAD_DIM=64 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=4 -DFLASHCL_MASK=1 -DFLASHCL_NV_WGMMA_MASK_BITS=1 -DFLASHCL_NV_HEADS_FIRST=1" \
  "$mb" '0f45800000' '!32767' 'flashcl: wg_redo_row' 'ld\.global(\.nc)?\.u8'
wcheck "wgmma D128 fp16 mask as bits + sinks, marked rows redone" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_MASK=1 -DFLASHCL_NV_WGMMA_MASK_BITS=1 -DFLASHCL_SINKS=1" \
  "$mb" '0f45800000' 'flashcl: wg_redo_row' 'ld\.global(\.nc)?\.v4\.u32'
wcheck "wgmma D128 bf16 ALiBi (prescaled: no guard vote)" $wg \
  "$ws128 -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=3 -DFLASHCL_ALIBI=1" \
  "$mb" 'm64n128k16' '!0f45800000'
# bias and mask staged by the producer (FLASHCL_NV_WGMMA_XSTAGE, as
# plan_xstage plans them: 64-key tiles, up to 16 ring slots): cp.async
# copies into the ring and no global bias load in the consumers
wcheck "wgmma D128 bf16 fp32 bias + mask staged, 8 slots" $wg \
  "$ws -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=2 -DFLASHCL_CAUSAL=1 -DFLASHCL_NV_WGMMA_RING=8 -DFLASHCL_BIAS=1 -DFLASHCL_MASK=1 -DFLASHCL_NV_WGMMA_XSTAGE=1 -DFLASHCL_LOCAL_MEM_BYTES=229456" \
  "$mb" 'ld\.shared\.v2\.f32' '!ld\.global\.v2\.f32' 'cp\.async'
wcheck "wgmma D128 fp16 fp16 bias staged, 13 slots" $wg \
  "$ws -DFLASHCL_HEAD_DIM=128 -DFLASHCL_DTYPE=1 -DFLASHCL_CAUSAL=0 -DFLASHCL_NV_WGMMA_RING=13 -DFLASHCL_BIAS=2 -DFLASHCL_NV_WGMMA_XSTAGE=1 -DFLASHCL_LOCAL_MEM_BYTES=229456" \
  "$mb" 'ld\.shared\.u32' 'cp\.async'
python3 scripts/wgmma_xstage_model.py >/dev/null && echo "ok   wgmma staged bias and mask model (copies against the score pass's reads)" ||
  { echo "FAIL wgmma staged bias and mask model"; failed=1; }
python3 scripts/wgmma_layout_model.py >/dev/null && echo "ok   wgmma layout model (interleave and 128-byte swizzle)" ||
  { echo "FAIL wgmma layout model"; failed=1; }
python3 scripts/wgmma_band_model.py >/dev/null && echo "ok   wgmma band model (key ranges and edge tiles of windows)" ||
  { echo "FAIL wgmma band model"; failed=1; }
echo "nv_kernel_check: $built configurations, $([ $failed -eq 0 ] && echo "all compiled as planned" || echo FAILED)"
exit $failed
