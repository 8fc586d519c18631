#!/usr/bin/env bash
# The main job: set up, build, list the devices flashcl sees and run one
# attention on the default device (error vs float64 reference, speed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh # what building and running need; test.sh adds the test-only packages
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DFLASHCL_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j"$(nproc)" >/dev/null
./build-release/flashcl info
echo
./build-release/flashcl run "$@"
