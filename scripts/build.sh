#!/usr/bin/env bash
# Configure and build kpipe (Release) into ${KPIPE_BUILD_DIR:-build}. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KPIPE_BUILD_DIR:-build}
# The MPI tests' mpiexec flags (Open MPI as root, more ranks than cores) are chosen by cmake/kpipeTesting.cmake.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$(nproc)"
