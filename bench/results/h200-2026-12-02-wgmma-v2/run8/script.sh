#!/usr/bin/env bash
# one-off GPU experiment (not committed)
set -uo pipefail
[ -f .gpu-rt/activate.sh ] && source .gpu-rt/activate.sh
export FLASHCL_KERNEL_DIR=$PWD/cl CUDA_CACHE_DISABLE=1
export FLASHCL_CACHE_DIR=$(mktemp -d)
B=build-gpu
OUT=${OUT:-out}; mkdir -p $OUT
{ echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; echo "flashcl commit: $(git rev-parse --short HEAD) + working tree"; } > $OUT/env.txt
cat $OUT/env.txt
echo "== smoke, default path"
for d in 64 128 256; do for t in fp16 bf16; do for c in "" --causal; do for qk in "1000 1100" "1100 1000"; do set -- $qk
  FLASHCL_VERBOSE=1 timeout 60 $B/flashcl run --seqlen $1 --seqlen-k $2 --head-dim $d --heads 4 --heads-kv 2 --dtype $t $c --reps 2 >$OUT/s.log 2>&1
  rc=$?; cat $OUT/s.log >> $OUT/smoke.log
  echo "D$d $t ${c:-noncausal} $1x$2: exit $rc, $(grep -E '^(PASS|FAIL)' $OUT/s.log | tail -1 | cut -c1-50) path $(grep -o 'path [a-z_]*' $OUT/s.log | head -1)"
done; done; done; done
echo "== suites on nv_wgmma"
B=$B SUITE_TIMEOUT=120 timeout 260 bash bench/run_h200_wgmma.sh tests 2>&1 | grep -v "^date\|^NVIDIA\|^flashcl commit" | tail -8
echo "== ring variants"
bench() { local tag=$1 d=$2 n=$3 t=$4; shift 4
  env "$@" timeout 120 $B/flashcl-bench --sgemm 0 --reps 5 --warmup 2 --check 1 --dtype $t --head-dim $d --seqlen $n --causal both --csv $OUT/b_$tag.csv > $OUT/b_$tag.log 2>&1; }
bench d128_r4 128 2048,8192 fp16 FLASHCL_NV_WGMMA_RING=4 FLASHCL_NV_WGMMA_LOCAL_MEM=131136
bench d128_r6 128 2048,8192 fp16 FLASHCL_NV_WGMMA_RING=6 FLASHCL_NV_WGMMA_LOCAL_MEM=196704
bench d64_r6 64 2048,8192 fp16 FLASHCL_NV_WGMMA_RING=6
bench d64_r8 64 2048,8192 fp16 FLASHCL_NV_WGMMA_RING=8 FLASHCL_NV_WGMMA_LOCAL_MEM=131200
python3 - $OUT <<'PY'
import csv, glob, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "b_*.csv"))):
    rows = list(csv.DictReader(l for l in open(f) if not l.startswith("#")))
    print(os.path.basename(f)[2:-4].ljust(10), " ".join(f'{x["seqlen"]}/c{x["causal"]}:{float(x["tflops"]):.1f}' for x in rows))
PY
echo "== protocol"
timeout 200 $B/flashcl-bench --sgemm 0 --reps 10 --warmup 3 --check 4 --head-dim 64,128,256 --describe \
  --csv $OUT/flashcl.csv > $OUT/flashcl_bench.log 2>&1; echo "flashcl-bench exit $?"
timeout 150 python3 bench/torch_sdpa_peers.py --head-dim 64,128,256 --csv $OUT/torch.csv 2>&1 | tail -2
python3 bench/h200_table.py --ceiling 970 --flashcl $OUT/flashcl.csv --log $OUT/flashcl_bench.log --torch $OUT/torch.csv | tee $OUT/table.md
grep "^describe|" $OUT/flashcl_bench.log | awk -F'|' '{print $3,$4,$7}' | sort | uniq -c | head -20
