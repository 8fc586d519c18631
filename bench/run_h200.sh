#!/usr/bin/env bash
# Issue 4's measuring script, for the lent H200 machine (see
# ../shared/notes/opencl-on-h200.md). From the repository root there:
#
#   bash bench/run_h200.sh            # everything; results under $OUT (or out/)
#
# 1. OpenCL runtime from .gpu-rt/ (carry it: ../shared/tools/gpu-runtime fetch),
# 2. flashcl built into build-h200/ (carried prebuilt from the Debian CPU
#    machine, whose binaries run there unchanged; else cmake there),
# 3. flashcl-bench over the FlashAttention-2 protocol (tokens 16384, hidden
#    2048, D 64/128, N 512..16384, causal and not, fp16 and bf16) with
#    --check (float64 reference on sampled rows) and first-call times,
# 4. torch SDPA FLASH_ATTENTION and CUDNN_ATTENTION on the same shapes,
# 5. odd shapes: the core test binaries on the GPU and the kernel probe,
# 6. one markdown table: TFLOP/s, ratios, fraction of the 650 TFLOP/s
#    mma.sync ceiling, error, compile time.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
[ -f .gpu-rt/activate.sh ] && source .gpu-rt/activate.sh
export FLASHCL_KERNEL_DIR=$PWD/cl   # kernels from this tree, not the embedded copy
export CUDA_CACHE_DISABLE=1         # first-call times include the real compile
REPS=${REPS:-20}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null
  clinfo -l 2>/dev/null
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>/dev/null
  echo "flashcl commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee "$OUT/env.txt"

if [ ! -x build-h200/flashcl-bench ]; then
  cmake -S . -B build-h200 -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF >"$OUT/build.log" 2>&1 &&
    cmake --build build-h200 -j >>"$OUT/build.log" 2>&1 || { echo "build failed, see $OUT/build.log"; tail -20 "$OUT/build.log"; exit 1; }
fi
./build-h200/flashcl info 2>&1 | tee -a "$OUT/env.txt" | head -40

echo "== flashcl-bench"
./build-h200/flashcl-bench --sgemm 0 --reps "$REPS" --warmup 3 --check 24 \
  --csv "$OUT/flashcl.csv" 2>&1 | tee "$OUT/flashcl_bench.log"

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "== torch SDPA peers"
  python3 bench/torch_sdpa_peers.py --csv "$OUT/torch.csv" 2>&1 | tail -4
fi

echo "== odd shapes"
if [ ! -x build-nv/nv_kernel_probe ]; then  # kernel-level probe (bench/nv_kernel_probe.c)
  mkdir -p build-nv
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I/usr/local/cuda/include bench/nv_kernel_probe.c \
    -o build-nv/nv_kernel_probe -l:libOpenCL.so.1 -lm 2>/dev/null || echo "(probe not built: no CL headers)"
fi
if [ -x build-nv/nv_kernel_probe ]; then
  P="build-nv/nv_kernel_probe -i 0"
  {
    $P -d 128 -t fp16 -c 0 -b 2 -H 6 -K 2 -q 77 -k 133 -r 77 128,32,4
    $P -d 128 -t bf16 -c 1 -b 2 -H 4 -K 1 -q 300 -k 77 -r 300 128,32,4
    $P -d 128 -t fp16 -c 1 -b 1 -H 2 -q 1 -k 1000 -r 1 128,32,4
    $P -d 64 -t fp16 -c 1 -b 3 -H 4 -K 4 -q 1000 -k 1000 -r 1000 128,64,4
    $P -d 64 -t bf16 -c 0 -b 1 -H 8 -K 2 -q 129 -k 4099 -r 129 128,64,4
    $P -d 32 -t fp16 -c 1 -b 1 -H 3 -q 333 -k 500 -r 333 128,64,4
    $P -d 96 -t bf16 -c 1 -b 1 -H 3 -q 257 -k 255 -r 257 64,64,4
    $P -d 256 -t fp16 -c 1 -b 1 -H 2 -q 190 -k 190 -r 190 64,16,4
  } 2>&1 | tee "$OUT/odd_shapes.log"
fi
# the core suites on the GPU (fixed file count: at most 8 files come back)
: >"$OUT/tests.log"
for t in test_forward test_semantics; do
  if [ -x build-h200/tests/$t ]; then
    echo "### $t" >>"$OUT/tests.log"
    timeout 300 ./build-h200/tests/$t >>"$OUT/tests.log" 2>&1
    echo "$t: exit $? ($(grep -E '^[0-9]+%: Checks' "$OUT/tests.log" | tail -1))"
  fi
done

echo "== table"
python3 bench/h200_table.py --flashcl "$OUT/flashcl.csv" --log "$OUT/flashcl_bench.log" \
  --torch "$OUT/torch.csv" | tee "$OUT/table.md"
