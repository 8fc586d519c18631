#!/bin/sh
# `flashcl tune --backward` where the portable backward runs (the test
# device, a CPU here): the hand rules and two more candidates on a tiny
# shape. Every candidate must be path portable_bwd, name only switches the
# list cl/portable/flash_bwd_switches.clh declares TUNABLE, pass the
# gradient check, and (measured ones) have run the forced set: the tuner
# reads the planned values back from the build options, so a set the plan
# ignored shows there. The winner is a portable_bwd entry; a rerun
# resumes (measures nothing again).
#   tests/tune_backward_portable.sh FLASHCL_CLI SOURCE_DIR
set -eu
cli=$1
root=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unset FLASHCL_PATH FLASHCL_TUNING_FILE FLASHCL_NV_EMULATE
run() {
  "$cli" tune --backward --dtype fp32 --head-dim 64 --causal 0 --seq short \
    --max-candidates 2 --reps 1 --warmup 0 --budget 600 --no-progress \
    --output "$dir/bwd.json" "$@"
}
run --fresh >"$dir/first.log" 2>&1 || { cat "$dir/first.log"; exit 1; }
cat "$dir/first.log"
python3 - "$dir/bwd.json" "$root/cl/portable/flash_bwd_switches.clh" <<'PY'
import json, re, sys
doc = json.load(open(sys.argv[1]))
switches = open(sys.argv[2]).read()
tunable = {m.lower() for m in
           re.findall(r"SWITCH\(BWD_(\w+),[^\n]*TUNABLE", switches)}
assert tunable, "no TUNABLE switch found in the list"
def params(text):
    out = {}
    for item in filter(None, text.split(",")):
        name, value = item.split("=")
        assert name in tunable, (name, tunable)
        out[name] = int(value)
    return out
assert doc["format"] == "flashcl-tuning-1"
cands = doc["candidates"]
assert cands and all(c["path"] == "portable_bwd" for c in cands), cands
table = [c for c in cands if c["table"]]
assert len(table) == 1 and table[0]["status"] == "ok", table
measured = [c for c in cands if not c["table"] and c["status"] == "ok"]
assert len(measured) == 2, cands
for c in table + measured:
    assert c["median_ms"] > 0 and c["compile_ms"] > 0, c
    assert c["reason"].startswith("ran wg "), c
for c in measured:
    p = params(c["params"])
    assert len(p) == len(tunable), c
    ran = "ran " + ", ".join("%s %d" % kv for kv in p.items())
    assert c["reason"] == ran, (c["reason"], ran)
# the nearest set is the hand rules again (the table), the next differs
assert measured[0]["reason"] == table[0]["reason"], measured
assert measured[1]["reason"] != table[0]["reason"], measured
wins = doc["winners"]
assert len(wins) == 1, wins
w = wins[0]
assert w["path"] == "portable_bwd" and w["dtype"] == "fp32", w
assert w["head_dim"] == 64 and w["causal"] == 0 and w["seq"] == "short", w
params(w["params"])
print("tune_backward_portable: %d candidates, winner %r %.3f ms"
      % (len(cands), w["params"] or "the hand rules", w["median_ms"]))
PY
before=$(grep -c '"status"' "$dir/bwd.json")
run >"$dir/second.log" 2>&1 || { cat "$dir/second.log"; exit 1; }
after=$(grep -c '"status"' "$dir/bwd.json")
if [ "$before" != "$after" ]; then
  echo "tune_backward_portable: the rerun measured again ($before -> $after)"
  exit 1
fi
