#!/usr/bin/env bash
# Configure and build kpipe (Release) into ${KPIPE_BUILD_DIR:-build}. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KPIPE_BUILD_DIR:-build}
mpi_flags=""
# OpenMPI refuses root without this, and tests start more ranks than a 2-core machine has.
if mpiexec --version 2>/dev/null | grep -q "Open MPI"; then
  mpi_flags="--oversubscribe"
  [ "$(id -u)" -eq 0 ] && mpi_flags="--allow-run-as-root;--oversubscribe"
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "-DKPIPE_MPIEXEC_FLAGS=${mpi_flags}" "$@"
cmake --build "$build" -j "$(nproc)"
