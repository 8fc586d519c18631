#!/bin/sh
# `flashcl tune --backward` (issue 48) without an NVIDIA GPU: the
# tensor-core backward emulated on Intel's CPU runtime (FLASHCL_NV_EMULATE,
# as tests/backward_nv_emulated.sh), its defaults and one more candidate
# on a tiny shape (each emulated build takes about a minute). The JSON it
# writes must parse back, every measured candidate must be path
# nv_mma_bwd with the backward's declared names and legal values and a
# passing gradient check, the winner an nv_mma_bwd entry; a rerun resumes
# (measures nothing again).
#   tests/tune_backward_emulated.sh FLASHCL_CLI SOURCE_DIR
set -eu
cli=$1
root=$2
eval "$("$root/scripts/intel_cpu_runtime.sh")"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FLASHCL_NV_EMULATE=1
unset FLASHCL_PATH FLASHCL_NVB_TILE FLASHCL_TUNING_FILE
run() {
  "$cli" tune --backward --dtype fp16 --head-dim 64 --causal 0 --seq short \
    --max-candidates 2 --reps 1 --warmup 0 --budget 1200 --no-progress \
    --output "$dir/bwd.json" "$@"
}
run --fresh >"$dir/first.log" 2>&1 || { cat "$dir/first.log"; exit 1; }
cat "$dir/first.log"
python3 - "$dir/bwd.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
legal = {"warps": {1, 2, 4, 8},
         "rows": {16, 32, 48, 64}, "keys": {16, 32, 48, 64},
         "row_stages": {1, 2}, "key_stages": {1, 2}}
def params(text):
    out = {}
    for item in filter(None, text.split(",")):
        name, value = item.split("=")
        assert name in legal and int(value) in legal[name], text
        out[name] = int(value)
    return out
assert doc["format"] == "flashcl-tuning-1"
cands = doc["candidates"]
assert cands and all(c["path"] == "nv_mma_bwd" for c in cands), cands
table = [c for c in cands if c["table"]]
assert len(table) == 1 and table[0]["status"] == "ok", table
measured = [c for c in cands if not c["table"] and c["status"] == "ok"]
assert len(measured) == 2, cands
for c in table + measured:
    params(c["params"])
    assert c["median_ms"] > 0 and c["compile_ms"] > 0, c
    assert c["error_o"] <= 2e-2, c  # fp16's gradient tolerance
    assert c["reason"].startswith("ran warps "), c
# the nearest set is the defaults again (the table), the next one differs
assert measured[0]["reason"] == table[0]["reason"], measured
assert measured[1]["reason"] != table[0]["reason"], measured
assert len(params(measured[1]["params"])) == 5
wins = doc["winners"]
assert len(wins) == 1, wins
w = wins[0]
assert w["path"] == "nv_mma_bwd" and w["dtype"] == "fp16", w
assert w["head_dim"] == 64 and w["causal"] == 0 and w["seq"] == "short", w
params(w["params"])
print("tune_backward_emulated: %d candidates, winner %r %.3f ms"
      % (len(cands), w["params"] or "the defaults", w["median_ms"]))
PY
before=$(grep -c '"status"' "$dir/bwd.json")
run >"$dir/second.log" 2>&1 || { cat "$dir/second.log"; exit 1; }
after=$(grep -c '"status"' "$dir/bwd.json")
if [ "$before" != "$after" ]; then
  echo "tune_backward_emulated: the rerun measured again ($before -> $after)"
  exit 1
fi
