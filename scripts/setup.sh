#!/usr/bin/env bash
# Installs what flashcl needs on Debian/Ubuntu when it is missing. Does
# nothing when everything is already there.
#
#   scripts/setup.sh          building and running: compiler, CMake, OpenCL
#                             headers + ICD loader, PoCL (CPU OpenCL device),
#                             CLBlast, pkg-config (scripts/main.sh)
#   scripts/setup.sh --test   that and what only the test suite needs
#                             (scripts/test.sh)
#   --print                   print the package list of that mode on one
#                             line and exit, installing nothing
#
# On a fresh VM another apt/dpkg process (cloud-init, unattended-upgrades)
# often holds the package lock for a few minutes. Then this waits for it
# (up to FLASHCL_SETUP_LOCK_TIMEOUT seconds, default 600) and says so,
# instead of failing at once with apt's "Could not get lock" (rc 100):
#   apt-get install: -o DPkg::Lock::Timeout, apt's own wait on the dpkg lock;
#   apt-get update: apt 2.6 does not apply that timeout to the lists lock
#     (/var/lib/apt/lists/lock), so the update is retried while it fails
#     for a lock;
#   before both, a loop that names the holder and waits while any apt/dpkg
#     lock file is open in another process (fuser, else /proc/*/fd).
set -euo pipefail

# pkg-config: a consumer of an installed flashcl links through flashcl.pc.
packages=(gcc make cmake pkg-config ocl-icd-opencl-dev opencl-c-headers
          ocl-icd-libopencl1 pocl-opencl-icd libclblast-dev)
# Only the tests: check (the C suites); g++ (tests/cpp_consumer.cpp, whose
# absence fails that test); python3 and python3-venv (the Python tests, the
# Intel runtime download, the wgmma models: Debian ships venv/ensurepip
# apart from python3); clang-15, clang-19, their llvm tools and
# rocm-device-libs (scripts/amd_isa_check.sh compiles the AMD kernel for
# gfx90a with clang-15 and gfx942/gfx1100/gfx1200 with clang-19;
# scripts/nv_kernel_check.sh the NVIDIA kernels to PTX with clang-15);
# oclgrind (scripts/oclgrind_check.sh: the backward's kernels on a
# simulated device that reports out-of-bounds accesses and data races);
# libopenmpi-dev and openmpi-bin (libflashcl_mpi, built when CMake finds
# MPI, and its test under mpirun).
test_packages=(check g++ python3 python3-venv clang-15 llvm-15 clang-19
               llvm-19 rocm-device-libs oclgrind libopenmpi-dev openmpi-bin)
print=0
for arg in "$@"; do
  case "$arg" in
    --test) packages+=("${test_packages[@]}") ;;
    --print) print=1 ;;
    *) echo "usage: $0 [--test] [--print]" >&2; exit 2 ;;
  esac
done
if [ $print -eq 1 ]; then
  echo "${packages[*]}"
  exit 0
fi
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "flashcl setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "flashcl setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

lock_timeout=${FLASHCL_SETUP_LOCK_TIMEOUT:-600}
lock_files=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock
            /var/lib/apt/lists/lock /var/cache/apt/archives/lock)
deadline=$((SECONDS + lock_timeout))

# "1234 (apt-get) 5678 (dpkg)" for the processes that have a lock file
# open, "" when none: fuser (psmisc) when installed, else a look through
# /proc/*/fd (findutils is essential, psmisc is not on a minimal Debian).
lock_holders() {
  local pids pid names=""
  if command -v fuser >/dev/null 2>&1; then
    # fuser prints the pids on stdout, the file names on stderr.
    pids=$("${sudo_cmd[@]}" fuser "${lock_files[@]}" 2>/dev/null) || return 0
  else
    pids=$("${sudo_cmd[@]}" find /proc/[0-9]*/fd -maxdepth 1 \
             \( -lname /var/lib/dpkg/lock-frontend -o -lname /var/lib/dpkg/lock \
                -o -lname /var/lib/apt/lists/lock \
                -o -lname /var/cache/apt/archives/lock \) 2>/dev/null |
           cut -d/ -f3) || true
  fi
  for pid in $(tr -s ' ' '\n' <<<"$pids" | sort -un); do
    [ "$pid" = "$$" ] && continue
    names+="$pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?')) "
  done
  echo "${names% }"
}

wait_for_lock() { # what we are about to run
  local holders said=-1
  while holders=$(lock_holders) && [ -n "$holders" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "flashcl setup: the package lock is still held by $holders after ${lock_timeout} s; trying $1 anyway" >&2
      return 0
    fi
    if [ $said -lt 0 ] || [ $((SECONDS - said)) -ge 30 ]; then
      echo "flashcl setup: waiting for the package lock (held by $holders) before $1"
      said=$SECONDS
    fi
    sleep 2
  done
  if [ $said -ge 0 ]; then
    echo "flashcl setup: package lock free, running $1"
  fi
}

apt_opts=(-o "DPkg::Lock::Timeout=$lock_timeout")

wait_for_lock "apt-get update"
while true; do
  rc=0
  err=$("${sudo_cmd[@]}" apt-get "${apt_opts[@]}" update -qq 2>&1 >/dev/null) || rc=$?
  if [ $rc -eq 0 ]; then
    [ -z "$err" ] || echo "$err" >&2 # warnings
    break
  fi
  if ! grep -qE 'Could not get lock|Unable to lock' <<<"$err" ||
     [ "$SECONDS" -ge "$deadline" ]; then
    echo "$err" >&2
    exit $rc
  fi
  echo "flashcl setup: waiting for the package lock before apt-get update ($(grep -m1 'Could not get lock' <<<"$err" | sed 's/^E: //'))"
  sleep 5
done

wait_for_lock "apt-get install"
"${sudo_cmd[@]}" apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
