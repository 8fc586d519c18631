#!/usr/bin/env bash
# Installs what flashcl needs on Debian/Ubuntu when it is missing: compiler,
# CMake, OpenCL headers + ICD loader, PoCL (CPU OpenCL device), CLBlast,
# Check. Does nothing when everything is already there.
set -euo pipefail

packages=(gcc make cmake pkg-config ocl-icd-opencl-dev opencl-c-headers
          ocl-icd-libopencl1 pocl-opencl-icd libclblast-dev check)
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
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
