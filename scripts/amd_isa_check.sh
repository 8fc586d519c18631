#!/usr/bin/env bash
# The AMD matrix-core kernel (cl/amd/flash_fwd_amd.cl) compiled offline for
# AMD GPUs, with no GPU: clang for amdgcn-amd-amdhsa, linked with Debian's
# ROCm device libraries (rocm-device-libs) as AMD's OpenCL runtime links
# them, for
#   gfx90a  (CDNA2, MFMA wave64)   clang-15
#   gfx942  (CDNA3, MFMA wave64)   clang-19
#   gfx1100 (RDNA3, WMMA wave32)   clang-19
#   gfx1200 (RDNA4, WMMA wave32, gfx12 layouts)   clang-19
# with the build options the library itself gives the amd_mfma path
# (tests/amd_plan_options, run on Intel's OpenCL CPU runtime with the
# emulation of the same family: same tiles and -D's, -DFLASHCL_AMD_MATRIX
# 3/4/6 turned into 1/2/5), plus one build with every score variant on.
# Asserts for every build: matrix instructions (v_mfma / v_wmma) in the
# disassembly, no unresolved symbol, local memory
# (group_segment_fixed_size) within 64 KiB; and for the plain, causal and
# window builds no scratch (private_segment_fixed_size 0) and no VGPR
# spills. The build with every score variant at once reports its scratch
# ("note") without failing: on gfx1100 at D = 128 it spills 7 VGPRs (28
# bytes of scratch), slower there but correct. SGPR spills (into VGPR
# lanes, not memory) are reported only. Prints instruction counts and
# register use per build.
#
#   scripts/amd_isa_check.sh [build dir]   (default build-test)
#
# Device libraries 5.2.3 have no gfx942/gfx1100/gfx1200 ISA-version file;
# those builds link gfx940's and gfx1030's (the file only defines the
# __oclc_ISA_version constant that a few ockl functions test; flashcl's
# kernel calls none of them). AMD's runtime compiles with its own clang
# (ROCm's LLVM), so register counts there may differ: this is a check
# that the kernel builds into matrix instructions without scratch, not a
# performance model.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-test}
bitcode=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode
lds_limit=65536
for tool in clang-15 llvm-objdump-15 llvm-readelf-15 clang-19 llvm-link-19 \
            llvm-objdump-19 llvm-readelf-19; do
  command -v "$tool" >/dev/null || { echo "amd_isa_check: $tool missing (scripts/setup.sh --test installs it)" >&2; exit 1; }
done
[ -f "$bitcode/ocml.bc" ] || { echo "amd_isa_check: no ROCm device libraries in $bitcode (rocm-device-libs)" >&2; exit 1; }
[ -x "$build/tests/amd_plan_options" ] || { echo "amd_isa_check: build $build first" >&2; exit 1; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
eval "$(scripts/intel_cpu_runtime.sh)"
for family in mfma wmma wmma12; do
  FLASHCL_PATH=amd_mfma FLASHCL_AMD_EMULATE=$family \
    "$build/tests/amd_plan_options" > "$tmp/$family.options"
done

inc="-Icl/common -Icl/amd"
libs() { # the device libraries for an ISA-version file and a wave size
  echo "$bitcode/opencl.bc $bitcode/ocml.bc $bitcode/ockl.bc" \
       "$bitcode/oclc_isa_version_$1.bc $bitcode/oclc_wavefrontsize64_$2.bc" \
       "$bitcode/oclc_abi_version_500.bc $bitcode/oclc_finite_only_off.bc" \
       "$bitcode/oclc_unsafe_math_off.bc $bitcode/oclc_daz_opt_off.bc" \
       "$bitcode/oclc_correctly_rounded_sqrt_on.bc"
}
compile() { # arch options object
  local arch=$1 options=$2 out=$3
  case "$arch" in
  gfx90a)
    # shellcheck disable=SC2086
    clang-15 -x cl $options $inc -target amdgcn-amd-amdhsa -mcpu="$arch" -O3 \
      --rocm-device-lib-path="$bitcode" -c cl/amd/flash_fwd_amd.cl -o "$out" ;;
  *)
    local isa=940 wave64=on
    case "$arch" in gfx1*) isa=1030; wave64=off ;; esac
    # shellcheck disable=SC2086
    clang-19 -x cl $options -Xclang -finclude-default-header -nogpulib $inc \
      -target amdgcn-amd-amdhsa -mcpu="$arch" -O3 -emit-llvm \
      -c cl/amd/flash_fwd_amd.cl -o "$out.bc"
    # shellcheck disable=SC2046
    llvm-link-19 --only-needed "$out.bc" $(libs "$isa" "$wave64") -o "$out.linked.bc"
    clang-19 -nogpulib -target amdgcn-amd-amdhsa -mcpu="$arch" -O3 \
      -c "$out.linked.bc" -o "$out" ;;
  esac
}
note() { # object key: the value of a kernel-descriptor note
  { grep -E "^ *-? *\.$2: " "$1.notes" || true; } | head -1 | awk '{print $NF}'
}

failed=0 builds=0
check() { # arch label options [report-only]
  local arch=$1 label=$2 options=$3 strict=${4:-1} v=19
  [ "$arch" = gfx90a ] && v=15
  local obj="$tmp/$arch-$label.o"
  if ! compile "$arch" "$options" "$obj" 2> "$obj.log"; then
    echo "FAIL $arch $label: compile error"; sed -n 1,20p "$obj.log"; failed=1; return
  fi
  "llvm-objdump-$v" -d --mcpu="$arch" "$obj" > "$obj.s"
  "llvm-readelf-$v" --notes "$obj" > "$obj.notes"
  local mma scratch lds vgpr agpr sgpr vspill sspill undef
  mma=$(grep -c -E '\bv_(mfma|wmma)_' "$obj.s" || true)
  scratch=$(note "$obj" private_segment_fixed_size)
  lds=$(note "$obj" group_segment_fixed_size)
  vgpr=$(note "$obj" vgpr_count); agpr=$(note "$obj" agpr_count)
  sgpr=$(note "$obj" sgpr_count)
  vspill=$(note "$obj" vgpr_spill_count); sspill=$(note "$obj" sgpr_spill_count)
  undef=$("llvm-readelf-$v" -s "$obj" | awk '$7 == "UND" && $8 != ""' | wc -l)
  local verdict=ok
  if [ "$mma" -eq 0 ] || [ "${lds:-0}" -gt $lds_limit ] || [ "$undef" -ne 0 ]; then
    verdict=FAIL; failed=1
  elif [ "${scratch:-1}" -ne 0 ] || [ "${vspill:-0}" -ne 0 ]; then
    if [ "$strict" = 1 ]; then verdict=FAIL; failed=1; else verdict=note; fi
  fi
  builds=$((builds + 1))
  printf '%-4s %-7s %-22s %3s %s, VGPR %s, AGPR %s, SGPR %s, LDS %s B, scratch %s B, VGPR/SGPR spills %s/%s, unresolved %s\n' \
    "$verdict" "$arch" "$label" "$mma" "$(grep -o -m1 -E '\bv_(mfma|wmma)_[a-z0-9_]+' "$obj.s" || echo none)" \
    "$vgpr" "${agpr:-0}" "$sgpr" "$lds" "$scratch" "${vspill:-0}" "${sspill:-0}" "$undef"
}

for target in "gfx90a mfma 1" "gfx942 mfma 1" "gfx1100 wmma 2" "gfx1200 wmma12 5"; do
  read -r arch family matrix <<< "$target"
  while IFS=$'\t' read -r label options; do
    options=$(sed -E "s/-DFLASHCL_AMD_MATRIX=[346]/-DFLASHCL_AMD_MATRIX=$matrix/" <<< "$options")
    check "$arch" "$label" "$options"
    case "$label" in D128-fp16-causal)
      check "$arch" "$label-all-variants" \
        "$options -DFLASHCL_ALIBI=1 -DFLASHCL_BIAS=2 -DFLASHCL_MASK=1 -DFLASHCL_SOFTCAP=1 -DFLASHCL_SINKS=1" \
        report-only ;;
    esac
  done < "$tmp/$family.options"
done
if [ "$failed" -ne 0 ]; then
  echo "amd_isa_check: FAILED (needs matrix instructions, no scratch, no VGPR spills, no unresolved symbols, LDS <= $lds_limit B)" >&2
  exit 1
fi
echo "amd_isa_check: $builds builds ok"
