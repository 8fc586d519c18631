#!/usr/bin/env bash
# one-off GPU experiment (not committed): padded head dims on nv_wgmma
set -uo pipefail
[ -f .gpu-rt/activate.sh ] && source .gpu-rt/activate.sh
export FLASHCL_KERNEL_DIR=$PWD/cl CUDA_CACHE_DISABLE=1
export FLASHCL_CACHE_DIR=$(mktemp -d)
B=build-gpu
OUT=${OUT:-out}; mkdir -p $OUT
date -u +%Y-%m-%dT%H:%MZ > $OUT/env.txt
echo "== smoke, forced nv_wgmma, padded head dims"
for d in 8 40 48 80 96 112 160 192 224; do for t in fp16 bf16; do for c in "" --causal; do
  [ $t = bf16 ] && [ $d != 96 ] && [ $d != 192 ] && continue
  FLASHCL_PATH=nv_wgmma FLASHCL_VERBOSE=1 timeout 60 $B/flashcl run --seqlen 1000 --seqlen-k 1100 --head-dim $d --heads 4 --heads-kv 2 --dtype $t $c --reps 2 >$OUT/s.log 2>&1
  rc=$?; cat $OUT/s.log >> $OUT/smoke.log
  echo "D$d $t ${c:-noncausal}: exit $rc, $(grep -E '^(PASS|FAIL)' $OUT/s.log | tail -1 | cut -c1-60) wgmma-builds $(grep -c flash_fwd_wgmma $OUT/s.log) fallback $(grep -c 'could not be built' $OUT/s.log)"
done; done; done
echo "== suites on nv_wgmma"
B=$B SUITE_TIMEOUT=150 timeout 320 bash bench/run_h200_wgmma.sh tests 2>&1 | grep -v "^date\|^NVIDIA\|^flashcl commit" | tail -16
echo "== bench"
for p in nv_wgmma nv_mma; do
  FLASHCL_PATH=$p timeout 200 $B/flashcl-bench --sgemm 0 --reps 5 --warmup 2 --check 2 --dtype fp16 --head-dim 40,80,96,112,160,192 --seqlen 2048,8192 --causal both --csv $OUT/pad_$p.csv > $OUT/pad_$p.log 2>&1
  echo "$p exit $? max rel_l2 $(grep -o 'rel_l2 [^ ]*' $OUT/pad_$p.log | awk '{print $2}' | sort -g | tail -1)"
done
timeout 120 python3 bench/torch_sdpa_peers.py --head-dim 40,80,96,112,160,192 --seqlen 2048,8192 --dtype fp16 --csv $OUT/torch_pad.csv 2>&1 | tail -1
python3 - $OUT <<'PY'
import csv, os, sys
o = sys.argv[1]
def rd(f, key=lambda x: (int(x["head_dim"]), int(x["causal"]), int(x["seqlen"]))):
    r = {}
    for x in csv.DictReader(l for l in open(os.path.join(o, f)) if not l.startswith("#")):
        r[key(x) + ((x["backend"],) if "backend" in x else ())] = float(x["tflops"])
    return r
w, m, t = rd("pad_nv_wgmma.csv"), rd("pad_nv_mma.csv"), rd("torch_pad.csv")
print("| D | causal | N | nv_wgmma | nv_mma | FA2 | cuDNN | wgmma/mma | wgmma/FA2 |")
print("|---|---|---|---|---|---|---|---|---|")
for k in sorted(w):
    fa, cu = t.get(k + ("flash",), float("nan")), t.get(k + ("cudnn",), float("nan"))
    print(f"| {k[0]} | {k[1]} | {k[2]} | {w[k]:.1f} | {m.get(k, float('nan')):.1f} | {fa:.1f} | {cu:.1f} | {w[k]/m.get(k, float('nan')):.2f} | {w[k]/fa:.2f} |")
PY
