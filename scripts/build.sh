#!/usr/bin/env bash
# Configure and build kpipe (Release) into ${KPIPE_BUILD_DIR:-build}. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KPIPE_BUILD_DIR:-build}
# The MPI tests' mpiexec flags (Open MPI as root, more ranks than cores) are chosen by cmake/kpipeTesting.cmake.
# A unity build (16 sources a translation unit) halves a full build on few cores, since most of each
# compile is parsing Kokkos' headers; while editing, pass -DCMAKE_UNITY_BUILD=OFF for one-file rebuilds.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 "$@"
cmake --build "$build" -j "$(nproc)"
