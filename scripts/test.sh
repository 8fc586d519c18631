#!/usr/bin/env bash
# The whole test suite: set up, then build and run ctest three times: a
# plain warnings-as-errors build, an ASan/UBSan build, and a
# ThreadSanitizer build that runs only the thread tests (label "threads");
# then the Python package's tests, the plain build's tests again on
# Intel's OpenCL CPU runtime (a second OpenCL implementation), the forward
# and variant suites forced onto the subgroup kernel there at subgroup
# sizes 8, 16 and 32, and the AMD matrix-core kernel's ISA check and
# emulated suites.
# Fails if no OpenCL device is found (the tests need one).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test # the test-only packages too (clang, ROCm device libraries, g++, Python)
jobs=$(nproc)

cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DFLASHCL_WERROR=ON
cmake --build build-test -j"$jobs"
ctest --test-dir build-test --output-on-failure -j"$jobs"
# The documents' relative links and anchors (README.md, docs/, bench/), the
# per-device benchmark summaries against their CSVs, and README.md's sample
# blocks: no device, a few seconds together.
python3 scripts/check_links.py
python3 bench/summarize.py --check
B=build-test scripts/readme_samples.sh --check
# The backward's kernels under Oclgrind (out-of-bounds accesses, data
# races): about 30 s.
scripts/oclgrind_check.sh build-test

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHCL_WERROR=ON \
      -DFLASHCL_SANITIZE=ON -DFLASHCL_BUILD_BENCH=OFF
cmake --build build-asan -j"$jobs"
# Sanitizer options (LSan suppressions for PoCL/LLVM only) are set per test
# in tests/CMakeLists.txt.
ctest --test-dir build-asan --output-on-failure -j"$jobs"

# ThreadSanitizer: the library and the tests (no tool, no benchmark), and
# only the tests labelled "threads" run (TSAN_OPTIONS with tests/tsan.supp,
# which covers PoCL/LLVM/ICD/CLBlast only, are set per test in
# tests/CMakeLists.txt). 29 s on the 2-core PoCL machine, of 8 min 29 s
# for this whole script with a cold PoCL kernel cache (2026-12-01).
tsan_start=$SECONDS
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHCL_WERROR=ON \
      -DFLASHCL_SANITIZE_THREAD=ON -DFLASHCL_BUILD_BENCH=OFF -DFLASHCL_BUILD_CLI=OFF
cmake --build build-tsan -j"$jobs"
ctest --test-dir build-tsan --output-on-failure -L threads
echo "ThreadSanitizer step: $((SECONDS - tsan_start)) s"

# Python package (python/): a venv in .venv-ci/ with pinned numpy,
# ml_dtypes, pyopencl, pytest, matplotlib; `pip install ./python` with
# build-test's library bundled; its pytest suite (exit status 5, no tests,
# fails). See python/ci_test.sh.
bash python/ci_test.sh build-test

# A second OpenCL implementation: Intel's OpenCL CPU runtime (pinned wheels
# from PyPI, unpacked into .intel-ocl/ by scripts/intel_cpu_runtime.sh and
# reused when there). The plain build's ctest again, with only Intel's
# platform visible (OCL_ICD_VENDORS) and FLASHCL_DEVICE=intel; a missing
# Intel device fails this step (flashcl info exits non-zero, and so would
# every test that opens a device). Measured on the 2-core machine
# (2026-12-01): 131 s for this step with no .intel-ocl/ yet (download and
# unpack 8 s, ctest 122 s, of which test_cli 94 s: Intel's runtime keeps
# no kernel cache on disk, so each flashcl process compiles anew); the
# whole script then took 4 min 0 s with a warm PoCL kernel cache.
intel_start=$SECONDS
(
  intel_env=$(scripts/intel_cpu_runtime.sh) # its failure stops the step
  eval "$intel_env"
  if ! build-test/flashcl info >/dev/null; then
    echo "Intel OpenCL step: no Intel(R) OpenCL device (see above)" >&2
    exit 1
  fi
  # less the two tests that select Intel's runtime themselves (the
  # tensor-core backward emulated, and its tuner): they ran so above, and
  # the tuner's alone takes 8 minutes
  ctest --test-dir build-test --output-on-failure -j"$jobs" \
        -E '^test_(backward_nv|tune_backward)_emulated$'

  # The wide split-KV kernel at the tile table's GPU entry (128 items x 32
  # keys), which PoCL miscompiles (tests/CMakeLists.txt, test_inference_wide).
  wide_start=$SECONDS
  FLASHCL_CACHE=0 FLASHCL_SPLIT_KERNEL=wide build-test/tests/test_inference
  # and its quantized-cache cases (issue 45), 34 s on the 2-core machine
  FLASHCL_CACHE=0 FLASHCL_SPLIT_KERNEL=wide build-test/tests/test_kv_quant
  echo "wide split-KV kernel (GPU tiles) on Intel's runtime: $((SECONDS - wide_start)) s"

  # The subgroup kernel (cl/subgroup/flash_fwd_sg.cl), forced, at subgroup
  # sizes 8, 16 and 32: the forward and variant suites against the float64
  # oracle. FLASHCL_EXPECT_PATH fails a call that did not run on the
  # subgroup path, and a suite in which none did (tests/test_common.c).
  # The two suites of a size run side by side: Intel's compiles (most of
  # the time; no disk cache) take one core each. Measured 2026-12-01 on the
  # 2-core machine while four other builds shared it (load average 5-7):
  # 503 s for this loop (one after the other: 574 s; test_forward 65-142
  # s, test_variants 87-99 s per size), of 873 s for the Intel step and
  # 26 min for the whole script; a rejected size (FLASHCL_SUBGROUP_SIZE=12)
  # fails it ("0 of 49 noted forward calls ran on it").
  sg_start=$SECONDS
  for size in 8 16 32; do
    sg_pids=()
    for suite in test_forward test_variants; do
      FLASHCL_PATH=subgroup FLASHCL_EXPECT_PATH=subgroup \
        FLASHCL_SUBGROUP_SIZE=$size timeout 900 "build-test/tests/$suite" \
        >"build-test/subgroup-$suite-$size.log" 2>&1 &
      sg_pids+=($!)
    done
    sg_failed=0
    for pid in "${sg_pids[@]}"; do wait "$pid" || sg_failed=1; done
    for suite in test_forward test_variants; do
      echo "$suite, FLASHCL_PATH=subgroup FLASHCL_SUBGROUP_SIZE=$size:"
      grep -E '^(FLASHCL_EXPECT_PATH|[0-9]+%:)' \
        "build-test/subgroup-$suite-$size.log" || true
    done
    if [ "$sg_failed" -ne 0 ]; then
      cat build-test/subgroup-test_*-"$size".log
      echo "the subgroup path failed at subgroup size $size (logs above)" >&2
      exit 1
    fi
  done
  echo "subgroup kernel on Intel's runtime: $((SECONDS - sg_start)) s"

  # Context parallelism across two OpenCL implementations in one job: rank
  # 0 on PoCL, rank 1 on Intel's runtime (both platforms visible), each
  # against its own single-device result (tests/test_cp_mpi.c).
  if [ -x build-test/tests/test_cp_mpi ]; then
    eval "$(scripts/intel_cpu_runtime.sh --all)"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FLASHCL_CACHE=0 \
      timeout 600 mpirun --oversubscribe -np 1 -x FLASHCL_DEVICE=pocl \
      build-test/tests/test_cp_mpi : -np 1 -x FLASHCL_DEVICE=intel \
      build-test/tests/test_cp_mpi
  fi
)
echo "Intel OpenCL step: $((SECONDS - intel_start)) s"

# The AMD matrix-core kernel without AMD hardware (issue 13): compiled for
# gfx90a, gfx942 and gfx1100 and its ISA checked (matrix instructions, no
# scratch, LDS <= 64 KiB); then the forward and variant suites on Intel's
# runtime with the kernel forced and its fragments emulated in the MFMA
# (subgroups of 64), gfx11 WMMA and gfx12 WMMA (subgroups of 32) lane
# layouts.
# FLASHCL_EXPECT_PATH fails a suite whose fp16/bf16 cases did not run on
# amd_mfma (fp32/fp64 ones run on the portable kernel, as they would on
# AMD GPUs). Intel's compiler takes 5-6 s (MFMA, subgroups of 64) and 11-13
# s (WMMA, 32) per kernel variant where the portable kernel takes 0.3 s.
# MFMA runs both suites whole; the two WMMA layouts split them, each every
# other case (FLASHCL_TEST_DESIGN_STRIDE, FLASHCL_TEST_VARIANT_STRIDE: 2
# and 2+1), so every case runs in one of them. Whole, the gfx11 WMMA run
# took 427 s on a Skylake-AVX-512 machine (2026-12-01) and ran past
# test_forward's 900 s and test_variants' 600 s on the AMD EPYC (no
# AVX-512) one of 2026-12-02's CI.
amd_start=$SECONDS
scripts/amd_isa_check.sh build-test
(
  eval "$(scripts/intel_cpu_runtime.sh)"
  export FLASHCL_PATH=amd_mfma FLASHCL_EXPECT_PATH=amd_mfma:fp16,bf16
  FLASHCL_AMD_EMULATE=mfma \
    ctest --test-dir build-test --output-on-failure -j"$jobs" \
          -R '^test_(forward|variants)$'
  half=2
  for family in wmma wmma12; do
    FLASHCL_AMD_EMULATE=$family FLASHCL_TEST_DESIGN_STRIDE=$half \
      FLASHCL_TEST_VARIANT_STRIDE=$half \
      ctest --test-dir build-test --output-on-failure -j"$jobs" \
            -R '^test_(forward|variants)$'
    half=2+1
  done
)
echo "AMD matrix-core step: $((SECONDS - amd_start)) s"

# The NVIDIA kernels compiled to PTX by clang in the configurations the
# host plans (bias/mask readings, heads-first grid, TF32, the split
# kernel's own merge), with what each configuration is for found in the
# PTX (scripts/nv_kernel_check.sh; about 5 s).
scripts/nv_kernel_check.sh

# The NVIDIA split-KV tensor-core kernel (cl/inference/split_mma.clh)
# without an NVIDIA GPU: its PTX (mma.sync, movmatrix, shfl, cp.async)
# emulated with sub-group shuffles of 32 on Intel's runtime
# (FLASHCL_NV_EMULATE, cl/nvidia/nv_mma.clh), forced by
# FLASHCL_SPLIT_KERNEL=mma, over the inference suite (its 16-bit cases with
# head dims multiples of 32 take the kernel; the rest the lane kernel).
# Two forms of the kernel, each over every other case
# (FLASHCL_TEST_INFER_STRIDE 2 and 2+1), so that every case runs in one:
# the kernel merging its own partials at every split count
# (FLASHCL_SPLIT_FUSED=1), then the cp.async ring with the combine kernel.
# Whole, one form took 3-4 minutes on the 2-core Skylake-AVX-512 machine
# (2026-12-01) and 14 on the AMD EPYC one (2026-12-02: Intel's compiler on
# the emulated kernel; test_inference's timeout is sized for it). Only the
# 16-bit cases run (FLASHCL_TEST_INFER_DTYPES): the fp32 ones never take
# the tensor-core kernel and ran above.
nv_start=$SECONDS
(
  eval "$(scripts/intel_cpu_runtime.sh)"
  export FLASHCL_TEST_INFER_DTYPES=fp16,bf16
  FLASHCL_SPLIT_KERNEL=mma FLASHCL_NV_EMULATE=1 FLASHCL_SPLIT_FUSED=1 \
    FLASHCL_TEST_INFER_STRIDE=2 \
    ctest --test-dir build-test --output-on-failure -j"$jobs" \
          -R '^test_inference$'
  # its cp.async ring (4 warps, 2 stages), off by default, with the
  # combine kernel after it instead of its own merge (FLASHCL_SPLIT_FUSED)
  FLASHCL_SPLIT_KERNEL=mma FLASHCL_NV_EMULATE=1 FLASHCL_SPLIT_MMA=4,2,16,2 \
    FLASHCL_SPLIT_FUSED=0 FLASHCL_TEST_INFER_STRIDE=2+1 \
    ctest --test-dir build-test --output-on-failure -j"$jobs" \
          -R '^test_inference$'
  # the quantized-cache suite on it (issue 45: K/V decoded into 16-bit
  # parts as they load), its fp32 cases in bf16 and fp16 by turns
  # (FLASHCL_KVQ_DTYPE); a case the kernel does not serve must run on the
  # lane kernel, and each one that it serves on it (the test reads the
  # plan's switches). 3 min 20 s on the 2-core AMD EPYC machine
  # (2026-12-07).
  FLASHCL_SPLIT_KERNEL=mma FLASHCL_NV_EMULATE=1 FLASHCL_KVQ_DTYPE=bf16,fp16 \
    timeout 1200 build-test/tests/test_kv_quant
)
echo "NVIDIA split-KV emulation step: $((SECONDS - nv_start)) s"

# The forward mma.sync kernel's exact fp32 (FLASHCL_NV_EXACT, 3xTF32: issue
# 44) without an NVIDIA GPU: its PTX emulated on Intel's runtime as above,
# forced by FLASHCL_PATH inside test_accuracy's exact-fp32 case (D 64: the
# split and the compensated sums within 2x the portable kernel's error, at
# 256 and 4096 keys alike). 2-6 minutes on 2 cores (2026-12-07);
# its D 128 case (FLASHCL_TEST_ACCURACY=nv_exact) doubles that and runs on
# the GPU instead. FLASHCL_EXPECT_PATH fails it if nv_mma did not run.
nv_exact_start=$SECONDS
(
  eval "$(scripts/intel_cpu_runtime.sh)"
  FLASHCL_NV_EMULATE=forward FLASHCL_TEST_ACCURACY=nv_exact64 \
    FLASHCL_EXPECT_PATH=nv_mma:fp32 timeout 900 build-test/tests/test_accuracy
)
echo "NVIDIA exact fp32 emulation step: $((SECONDS - nv_exact_start)) s"
