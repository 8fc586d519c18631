#!/usr/bin/env bash
# Removes what scripts/test.sh leaves behind (docs/install.md lists it):
#
#   in the checkout   build-test/ build-asan/ build-tsan/ (the three
#                     builds), .intel-ocl/ (Intel's CPU runtime), .venv-ci/
#                     (the Python step's venv), and python/'s build outputs
#                     (python/build/, python/flashcl.egg-info/, the bundled
#                     library python/flashcl/_lib/)
#   --caches          also the per-user kernel caches the runs fill:
#                     flashcl's and PoCL's, in $XDG_CACHE_HOME (default
#                     ~/.cache)/flashcl and /pocl; both refill themselves
#                     (the next run compiles again)
#   --dry-run         print what would go, with sizes; remove nothing
#
# Not touched: build-release/ (scripts/main.sh's build, which an install
# may have come from), caches moved elsewhere with FLASHCL_CACHE_DIR or
# POCL_CACHE_DIR (named, not removed: such a folder may hold more), and
# pip's download cache, which other projects share (its size is shown;
# `python3 -m pip cache purge` empties it).
set -euo pipefail
cd "$(dirname "$0")/.."

caches=0
dry_run=0
for arg in "$@"; do
  case "$arg" in
    --caches) caches=1 ;;
    --dry-run) dry_run=1 ;;
    *) echo "usage: $0 [--caches] [--dry-run]" >&2; exit 2 ;;
  esac
done

targets=(build-test build-asan build-tsan .intel-ocl .venv-ci python/build
         python/flashcl.egg-info python/flashcl/_lib)
cache_root=${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}
if [ $caches -eq 1 ]; then
  targets+=("$cache_root/flashcl" "$cache_root/pocl")
fi

size_of() { du -sh "$1" 2>/dev/null | cut -f1; }

verb=removed
[ $dry_run -eq 1 ] && verb="would remove"
for target in "${targets[@]}"; do
  # a link is removed as a link, never followed
  [ -e "$target" ] || [ -L "$target" ] || continue
  echo "$verb $target ($(size_of "$target"))"
  [ $dry_run -eq 1 ] || rm -rf -- "$target"
done

for var in FLASHCL_CACHE_DIR POCL_CACHE_DIR; do
  dir=${!var:-}
  if [ -n "$dir" ] && [ -e "$dir" ]; then
    echo "kept $dir ($var; $(size_of "$dir")): remove it by hand if it holds only that cache"
  fi
done
if [ -d "$cache_root/pip" ]; then
  echo "kept $cache_root/pip ($(size_of "$cache_root/pip"), shared with other projects): python3 -m pip cache purge"
fi
