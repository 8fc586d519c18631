#!/bin/sh
# ctest setup_lists: scripts/setup.sh installs for running only what the
# main job needs, and its --test mode adds what only the tests use (issue
# 42 item 2). Prints the lists; installs nothing (--print).
# Argument: the source directory.
set -eu
setup="$1/scripts/setup.sh"
main=$(bash "$setup" --print)
test=$(bash "$setup" --print --test)
echo "main: $main"
echo "test: $test"
failed=0
has() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }
for pkg in gcc cmake ocl-icd-opencl-dev pocl-opencl-icd libclblast-dev; do
  has "$main" "$pkg" || { echo "main list lacks $pkg" >&2; failed=1; }
done
# the test-only tools: the AMD/NVIDIA ISA checks, the C and C++ suites,
# the Python step's venv
for pkg in clang-15 llvm-15 clang-19 llvm-19 rocm-device-libs python3-venv \
           check g++ oclgrind libopenmpi-dev openmpi-bin; do
  has "$main" "$pkg" && { echo "main list has the test-only $pkg" >&2; failed=1; }
  has "$test" "$pkg" || { echo "--test list lacks $pkg" >&2; failed=1; }
done
for pkg in $main; do
  has "$test" "$pkg" || { echo "--test list lacks $pkg of the main list" >&2; failed=1; }
done
if bash "$setup" --no-such-option >/dev/null 2>&1; then
  echo "an unknown option was accepted" >&2
  failed=1
fi
exit $failed
