#!/usr/bin/env bash
# The Python package's test step (scripts/test.sh runs it after the C
# builds): a venv in .venv-ci/ (git-ignored, reused when there) with the
# pinned python/requirements-ci.txt, the package installed from ./python
# with the library of build folder $1 (default build-test) bundled, and its
# pytest suite, which must run tests (pytest's exit status 5, no tests
# collected, is a failure) and needs an OpenCL device (it fails without
# one, it does not skip). Also checks that the installed package runs that
# very library.
set -euo pipefail
cd "$(dirname "$0")/.."
libdir=${1:-build-test}
venv=.venv-ci
start=$SECONDS

scripts/setup.sh --test # python3-venv among the rest; a no-op when all is there
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r python/requirements-ci.txt
FLASHCL_LIBRARY_DIR="$libdir" "$venv/bin/pip" install -q --disable-pip-version-check \
  --no-build-isolation --no-deps --force-reinstall ./python
echo "flashcl python step: environment ready in $((SECONDS - start)) s"

# From the repository root, so `import flashcl` is the installed package
# (python/flashcl is not on sys.path from here).
rc=0
# FLASHCL_CACHE=0: no program binaries written under ~/.cache (the C
# suite test_binary_cache tests that cache in folders of its own).
FLASHCL_CACHE=0 FLASHCL_TEST_EXPECT_LIBRARY="$libdir/libflashcl.so" \
  "$venv/bin/python" -m pytest python/tests -q -p no:cacheprovider || rc=$?
if [ $rc -eq 5 ]; then
  echo "flashcl python step: pytest collected no tests" >&2
  exit 1
fi
[ $rc -eq 0 ] || exit $rc
echo "Python step: $((SECONDS - start)) s"
