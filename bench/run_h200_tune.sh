#!/usr/bin/env bash
# Issue 15's last GPU run, in one command of ~6.5 minutes (estimated: no
# part has run on the GPU yet; each prints its seconds), from the
# repository root on the H200 (no network; carry .gpu-rt and a prebuilt
# build folder, default build-gpu: cmake -S . -B build-gpu
# -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF && cmake --build
# build-gpu -j2):
#
#   bash bench/run_h200_tune.sh [all|tune|tvt|first]     # default all
#
# tune   (a) flashcl tune on the device for what tuning/nvidia-h200.json
#        lacks, each its own JSON under $OUT/tuning/ (copy them into
#        tuning/, then python3 scripts/tuning_db.py: it reads every
#        tuning/*.json, several per device):
#          <device>-portable.json  portable, fp32 and fp16
#                                  (PORTABLE_DTYPES), D 64/128, causal
#                                  both, long          (TUNE_PORTABLE_S=40)
#          <device>-nv_wgmma.json  nv_wgmma, fp16/bf16, D 64/128, causal
#                                  both, long, the ring first
#                                  (TUNE_WGMMA_S=130: ~3.5 s a candidate)
#          <device>-split_kv.json  the decode class on split_kv, only when
#                                  the build's tuner knows a path of that
#                                  name (else skipped)  (TUNE_DECODE_S=25)
#        Rerunning `tune` with the same OUT resumes each search.
# tvt    (b) bench/tuned_vs_table.py: the FA2 protocol rows (tokens 16384,
#        hidden 2048, D 64/128, N 512..16384, fp16/bf16, causal both),
#        database as built against FLASHCL_TUNING=off, interleaved rounds
#        (no round starts after TVT_S=90 s; TVT_ROUNDS=4, order abba) ->
#        $OUT/tuned_vs_table.md; then, if (a) found nv_wgmma winners, the
#        same for FLASHCL_PATH=nv_wgmma at N 4096/16384 with (a)'s file as
#        FLASHCL_TUNING_FILE -> $OUT/tuned_vs_table_wgmma.md (skipped when
#        the run is past TOTAL_S=380 s)
# first  (c) bench/first_call.py with CUDA_CACHE_DISABLE=1: a new process's
#        compile + first call, cold binary cache against warm, the seven
#        variants and one on FLASHCL_PATH=nv_wgmma (its warm run loads the
#        patched PTX from the cache) -> $OUT/first_call.md (FIRST_REPS=2)
#
# If one nv_wgmma candidate's patched build fails, the path falls back for
# the rest of the process (nv_wgmma.c) and the tuner ends its search for
# that shape without recording the rest: rerun `tune` to resume.
# DEVICE (default nvidia) is the --device of every part: DEVICE=pocl runs
# the whole script on the CPU machine as a dry run (the tuner takes its
# CPU shapes there; TVT_ARGS="--seqlen 256 --head-dim 64" shortens (b)).
# B: the build folder; one without the nv_wgmma tunables is rebuilt into
# $B-tune (~1 min). Results: $OUT (default out/); a summary on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT/tuning"
what=${1:-all}
[ -f .gpu-rt/activate.sh ] && source .gpu-rt/activate.sh
B=${B:-build-gpu}
DEVICE=${DEVICE:-nvidia}
TUNE_PORTABLE_S=${TUNE_PORTABLE_S:-40}
TUNE_WGMMA_S=${TUNE_WGMMA_S:-130}
PORTABLE_DTYPES=${PORTABLE_DTYPES:-fp32,fp16}  # fp16: what nv_mma leaves it
TUNE_DECODE_S=${TUNE_DECODE_S:-25}
TVT_S=${TVT_S:-90}
TVT_ROUNDS=${TVT_ROUNDS:-4}
TVT_ARGS=${TVT_ARGS:-}
FIRST_REPS=${FIRST_REPS:-2}
TOTAL_S=${TOTAL_S:-380}
# the kernels as in this tree (a carried build embeds its own copies)
export FLASHCL_KERNEL_DIR=$PWD/cl
export FLASHCL_CACHE_DIR=$(mktemp -d)   # a cold binary cache for this run
unset FLASHCL_TUNING FLASHCL_TUNING_FILE FLASHCL_TILES FLASHCL_NV_TILE FLASHCL_PATH

build() {
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF >>"$OUT/build.log" 2>&1 &&
    cmake --build "$1" -j"$(nproc)" >>"$OUT/build.log" 2>&1 ||
    { echo "!! build of $1 failed, see $OUT/build.log"; tail -20 "$OUT/build.log"; exit 1; }
}
# help texts go through grep without -q: -q would stop reading early, and
# pipefail would count the SIGPIPE as a failure
if [ ! -x "$B/flashcl" ] || [ ! -x "$B/flashcl-bench" ]; then
  echo "!! no $B: building it (~1 min)"; build "$B"
elif ! "$B/flashcl" tune --help 2>&1 | grep nv_wgmma >/dev/null ||
     ! "$B/flashcl-bench" --help 2>&1 | grep -e --describe >/dev/null; then
  echo "!! $B predates the nv_wgmma tunables / flashcl-bench --describe: building $B-tune (~1 min)"
  B=$B-tune; build "$B"
fi

key=$("$B/flashcl" info --json --device "$DEVICE" 2>/dev/null | python3 -c '
import json, sys
d = [x for x in json.load(sys.stdin)["devices"] if x.get("selected")]
print(d[0]["tuning_device"] if d else "")' 2>/dev/null)
[ -n "$key" ] || { echo "!! flashcl info finds no device for --device $DEVICE"; exit 3; }
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null
  echo "flashcl commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown), build $B"
  echo "device: $DEVICE, tuning key $key; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt"

# flashcl tune, time-boxed: --budget for the search, `timeout` for a hung
# driver (the confirmation rounds and the last save come after the budget)
tune_one() {  # name budget args...
  local name=$1 budget=$2 t0=$SECONDS; shift 2
  local file="$OUT/tuning/$key-$name.json"
  timeout $((${budget%.*} + 60)) "$B/flashcl" tune --device "$DEVICE" --budget "$budget" \
    --no-progress --output "$file" "$@" >"$OUT/tune_$name.log" 2>&1
  local rc=$?
  echo "-- tune $name: exit $rc, $((SECONDS - t0)) s -> $file"
  grep -E '^  ' "$OUT/tune_$name.log" | head -20
  [ -f "$file" ] && python3 - "$file" <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
n = collections.Counter(c["status"] for c in d["candidates"])
print("   candidates:", dict(n), "| winners:", len(d["winners"]),
      "| complete:", d["complete"])
PY
}

tune() {
  echo "== (a) flashcl tune"
  tune_one portable "$TUNE_PORTABLE_S" --path portable --dtype "$PORTABLE_DTYPES" \
    --head-dim 64,128 --causal both --seq long
  tune_one nv_wgmma "$TUNE_WGMMA_S" --path nv_wgmma --dtype fp16,bf16 \
    --head-dim 64,128 --causal both --seq long
  # split-KV tunables: only if this build's tuner has a path of that name
  # (an unknown --path is a usage error, exit 2)
  local probe
  probe=$(mktemp)
  if "$B/flashcl" tune --device "$DEVICE" --path split_kv --seq decode --dtype fp16 \
       --head-dim 64 --causal 0 --budget 0.001 --no-progress --output "$probe" >/dev/null 2>&1; then
    tune_one split_kv "$TUNE_DECODE_S" --path split_kv --dtype fp16,bf16 \
      --head-dim 64,128 --causal 0 --seq decode
  else
    echo "-- tune split_kv: skipped (this build's tuner has no split_kv path)"
  fi
  rm -f "$probe"
}

tvt() {
  echo "== (b) tuned vs table"
  local t0=$SECONDS
  timeout $((TVT_S + 240)) python3 bench/tuned_vs_table.py "$B" --device "$DEVICE" \
    --rounds "$TVT_ROUNDS" --budget "$TVT_S" --reps 5 --warmup 2 --keep "$OUT/tvt" \
    --output "$OUT/tuned_vs_table.md" $TVT_ARGS >"$OUT/tvt.log" 2>&1
  echo "-- tuned_vs_table: exit $?, $((SECONDS - t0)) s -> $OUT/tuned_vs_table.md"
  tail -4 "$OUT/tvt.log"
  local wg="$OUT/tuning/$key-nv_wgmma.json"
  if [ "$SECONDS" -gt "$TOTAL_S" ]; then
    echo "-- nv_wgmma tuned vs table: skipped (past TOTAL_S=$TOTAL_S s)"
  elif [ -f "$wg" ] && grep '"params": "[a-z]' "$wg" >/dev/null; then
    t0=$SECONDS
    FLASHCL_PATH=nv_wgmma timeout 240 python3 bench/tuned_vs_table.py "$B" \
      --device "$DEVICE" --tuning-file "$wg" --rounds 2 --reps 5 --warmup 2 \
      --dtype fp16,bf16 --seqlen 4096,16384 --keep "$OUT/tvt_wgmma" \
      --output "$OUT/tuned_vs_table_wgmma.md" $TVT_ARGS >"$OUT/tvt_wgmma.log" 2>&1
    echo "-- nv_wgmma tuned vs table: exit $?, $((SECONDS - t0)) s -> $OUT/tuned_vs_table_wgmma.md"
    tail -3 "$OUT/tvt_wgmma.log"
  else
    echo "-- nv_wgmma tuned vs table: skipped (no nv_wgmma winner other than the table in $wg)"
  fi
}

first() {
  echo "== (c) first call, cold vs warm binary cache (CUDA_CACHE_DISABLE=1)"
  local t0=$SECONDS
  CUDA_CACHE_DISABLE=1 POCL_KERNEL_CACHE=0 timeout 200 python3 bench/first_call.py "$B" \
    --device "$DEVICE" --reps "$FIRST_REPS" --wgmma >"$OUT/first_call.md" 2>"$OUT/first_call.log"
  echo "-- first_call: exit $?, $((SECONDS - t0)) s -> $OUT/first_call.md"
  tail -3 "$OUT/first_call.log"
  tail -3 "$OUT/first_call.md"
}

case "$what" in
  tune) tune ;;
  tvt) tvt ;;
  first) first ;;
  all) tune; tvt; first ;;
  *) echo "usage: $0 [all|tune|tvt|first]"; exit 2 ;;
esac
rm -rf "$FLASHCL_CACHE_DIR"
echo "== done in $SECONDS s; results in $OUT"
