#!/bin/sh
# ctest clean_script: scripts/clean.sh, run in a scratch copy of the
# checkout's layout with a scratch cache folder, removes exactly what
# test.sh leaves (docs/install.md) and nothing else: --dry-run removes
# nothing, plain leaves the caches, --caches removes flashcl's and PoCL's
# kernel caches but not pip's or another program's, a link is removed
# without following it, FLASHCL_CACHE_DIR's folder is kept.
# Argument: the source directory.
# The path lists are split on purpose (fixed names without spaces):
# shellcheck disable=SC2046,SC2086
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
repo=$tmp/repo
mkdir -p "$repo/scripts" "$tmp/outside" "$tmp/custom"
cp "$1/scripts/clean.sh" "$repo/scripts/"
touch "$tmp/outside/keep" "$tmp/custom/keep"

removed="build-test build-asan build-tsan .intel-ocl python/build
         python/flashcl.egg-info python/flashcl/_lib"
kept="build-release src python/flashcl/_lib.py python/flashcl/__init__.py
      scripts/clean.sh"
for path in $removed build-release src; do mkdir -p "$repo/$path"; touch "$repo/$path/file"; done
touch "$repo/python/flashcl/_lib.py" "$repo/python/flashcl/__init__.py"
ln -s "$tmp/outside" "$repo/.venv-ci"
for cache in flashcl pocl pip other; do mkdir -p "$tmp/cache/$cache"; touch "$tmp/cache/$cache/file"; done

failed=0
run() { XDG_CACHE_HOME=$tmp/cache FLASHCL_CACHE_DIR=$tmp/custom "$repo/scripts/clean.sh" "$@"; }
expect() { # present|absent path...
  state=$1; shift
  for path in "$@"; do
    if [ -e "$path" ] || [ -L "$path" ]; then now=present; else now=absent; fi
    [ "$now" = "$state" ] || { echo "$step: $path is $now, expected $state" >&2; failed=1; }
  done
}
in_repo() { for p in "$@"; do echo "$repo/$p"; done; }

step="--dry-run --caches"
run --dry-run --caches
expect present $(in_repo $removed .venv-ci $kept) "$tmp/cache/flashcl" "$tmp/cache/pocl"

step="plain"
run
expect absent $(in_repo $removed .venv-ci)
expect present $(in_repo $kept) "$tmp/outside/keep" "$tmp/cache/flashcl" "$tmp/cache/pocl"

step="--caches"
run --caches
expect absent "$tmp/cache/flashcl" "$tmp/cache/pocl"
expect present "$tmp/cache/pip/file" "$tmp/cache/other/file" "$tmp/custom/keep" $(in_repo $kept)

step="unknown option"
if run --no-such-option 2>/dev/null; then echo "$step: accepted" >&2; failed=1; fi
[ $failed -eq 0 ] && echo "scripts/clean.sh removes what it says and nothing else"
exit $failed
