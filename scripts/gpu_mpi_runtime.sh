#!/usr/bin/env bash
# Open MPI for the bare GPU machine, which has no MPI and reaches no
# package registry (issue 46: two ranks sharing one GPU). Like the shared
# tools/gpu-runtime for OpenCL: download Debian's Open MPI and the
# libraries it needs beyond a base system into DIR, with an activate.sh.
#   scripts/gpu_mpi_runtime.sh fetch .gpu-mpi   # here (git-ignored; carry it)
#   source .gpu-mpi/activate.sh                 # there, after .gpu-rt's
#   mpirun -np 2 ...                            # (activate.sh adds the flags
#                                               #  a root container needs)
set -euo pipefail
cmd=${1:?fetch DIR}; dir=${2:?DIR}
[ "$cmd" = fetch ] || { echo "usage: gpu_mpi_runtime.sh fetch DIR" >&2; exit 2; }
# Open MPI 4.1 and what it links that a base Ubuntu 24.04 lacks (hwloc's
# libxml2 wants Debian 12's libicu72; its NVIDIA plugin libxnvctrl0 and X)
pkgs="openmpi-bin openmpi-common libopenmpi3 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libhwloc15 libibverbs1 libnl-3-200
  libnl-route-3-200 libnuma1 libpmix2 libpsm-infinipath1 libpsm2-2
  librdmacm1 libucx0 libmunge2 libpciaccess0 libxml2 libicu72 libxnvctrl0
  libx11-6 libxext6 libxcb1 libxau6 libxdmcp6 libbsd0 libmd0"
mkdir -p "$dir"
# shellcheck disable=SC2086
( cd "$dir" && apt-get download $pkgs >/dev/null 2>&1 ) || {
  apt-get update >/dev/null 2>&1
  ( cd "$dir" && apt-get download $pkgs >/dev/null ); }
cat > "$dir/activate.sh" <<'ACT'
# Source on the GPU machine: unpacks the carried .debs under /tmp/flashcl-mpi
# and points Open MPI at its relocated tree (OPAL_PREFIX).
_mpi_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for _deb in "$_mpi_dir"/*.deb; do dpkg -x "$_deb" /tmp/flashcl-mpi; done
export OPAL_PREFIX=/tmp/flashcl-mpi/usr
export PMIX_INSTALL_PREFIX=/tmp/flashcl-mpi/usr/lib/x86_64-linux-gnu/pmix2
export LD_LIBRARY_PATH=/tmp/flashcl-mpi/usr/lib/x86_64-linux-gnu/openmpi/lib:/tmp/flashcl-mpi/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Debian names them through alternatives (/etc/alternatives), not unpacked
mkdir -p /tmp/flashcl-mpi/bin
for _tool in mpirun mpiexec; do
  ln -sf /tmp/flashcl-mpi/usr/bin/$_tool.openmpi /tmp/flashcl-mpi/bin/$_tool
done
export PATH=/tmp/flashcl-mpi/bin:/tmp/flashcl-mpi/usr/bin:$PATH
# a container runs as root, with one slot per core and no InfiniBand
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_pml=ob1
ACT
ls "$dir"
