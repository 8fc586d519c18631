#!/usr/bin/env bash
# The whole test suite: set up, then build and run ctest twice, a plain
# warnings-as-errors build and an ASan/UBSan build. Fails if no OpenCL
# device is found (the tests need one).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DFLASHCL_WERROR=ON
cmake --build build-test -j"$jobs"
ctest --test-dir build-test --output-on-failure -j"$jobs"

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHCL_WERROR=ON \
      -DFLASHCL_SANITIZE=ON -DFLASHCL_BUILD_BENCH=OFF
cmake --build build-asan -j"$jobs"
# Sanitizer options (LSan suppressions for PoCL/LLVM only) are set per test
# in tests/CMakeLists.txt.
ctest --test-dir build-asan --output-on-failure -j"$jobs"
