#!/usr/bin/env bash
# Regenerate README.md's sample outputs from real runs, so they cannot
# drift from what the tools print:
#
#   scripts/readme_samples.sh            # B=build-test by default; ~1 min on PoCL
#   scripts/readme_samples.sh --check    # exit 1 if a marked block is missing
#
# Each sample sits between `<!-- sample:NAME -->` and `<!-- /sample -->` in
# README.md and is replaced whole, so rerunning is safe:
#   info      `flashcl info` on the default device (at most 30 lines)
#   run       `flashcl run`, a new process on an empty binary cache
#   bench     `flashcl bench` (fused against the CLBlast reference)
#   headline  the GPU figures, from bench/results/h200.csv
#             (python3 bench/summarize.py --headline)
# The tools run as a user runs them: every FLASHCL_* variable unset.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build-test}
README=${README:-README.md}
[ -x "$B/flashcl" ] || { echo "no $B/flashcl: build first (B=folder)" >&2; exit 2; }
for v in $(compgen -e | grep '^FLASHCL_'); do unset "$v"; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export FLASHCL_CACHE_DIR=$work/cache

# sample NAME COMMAND...: the command's output as a fenced block, with the
# command line as a user types it and the device and date above it
sample() {
  local name=$1; shift
  local shown=${*#"$B/"}
  {
    echo "Output on $device, $(date -u +%Y-%m-%d) (\`scripts/readme_samples.sh\`):"
    echo
    echo '```'
    echo "\$ $shown"
    "$@" 2>&1 | sed -e 's/[[:space:]]*$//' >"$work/out" || true
    if [ "$(wc -l <"$work/out")" -gt 30 ]; then
      head -n 29 "$work/out"
      echo "... ($(wc -l <"$work/out") lines in all)"
    else
      cat "$work/out"
    fi
    echo '```'
  } >"$work/$name.md"
}

if [ "${1:-}" != "--check" ]; then
  device=$("$B/flashcl" info --json 2>/dev/null | python3 -c '
import json, sys
d = [x for x in json.load(sys.stdin)["devices"] if x.get("selected")]
print(d[0]["name"].strip() + " (" + d[0]["platform"].strip() + ")" if d else "the default device")' 2>/dev/null ||
    echo "the default device")
  sample info "$B/flashcl" info
  sample run "$B/flashcl" run
  sample bench "$B/flashcl" bench --no-progress --reps 3
  python3 bench/summarize.py --headline >"$work/headline.md"
fi

python3 - "$README" "$work" "${1:-}" <<'PY'
import os, re, sys
readme, work, mode = sys.argv[1:4]
text = open(readme, encoding="utf-8").read()
names = ("info", "run", "bench", "headline")
missing = [n for n in names if f"<!-- sample:{n} -->" not in text]
if missing:
    sys.exit(f"{readme}: no <!-- sample:NAME --> block for {', '.join(missing)}")
if mode == "--check":
    sys.exit(0)
for name in names:
    body = open(os.path.join(work, name + ".md"), encoding="utf-8").read().strip()
    pattern = re.compile(r"(<!-- sample:%s -->\n)(?:.*?\n)??(<!-- /sample -->)" % name, re.S)
    text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text, count=1)
open(readme, "w", encoding="utf-8").write(text)
print(f"{readme}: samples {', '.join(names)} rewritten")
PY
