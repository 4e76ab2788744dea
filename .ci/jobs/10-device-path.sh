#!/usr/bin/env bash
# The device path of every kernel, run on the host (KPIPE_DEVICE_PATH_ON_HOST): the layer gradient checks, the
# whole-model check, every layout bit-identical to one rank, the device-vs-host comparison of every kernel.
# With ../shared's kokkos-openmp toolchain the device path's teams get 2 threads each (lane splits, team
# reductions and barriers run for real); without it, Debian's Kokkos 3.4 (Serial, teams of one).
set -euo pipefail
job=10-device-path
source "$(dirname "$0")/../lib.sh"
cd "$repo"
args=() threads=1
if prefix=$(toolchain kokkos-openmp); then
  echo "$job: device path of every kernel on the host, Kokkos 4.6 OpenMP (2 threads a process, MPI ranks within the cores): gradients, whole model, layouts"
  args=(-DCMAKE_PREFIX_PATH="$prefix") threads=2
else
  echo "$job: device path of every kernel on the host, Debian's Kokkos 3.4 Serial ($shared/toolchains/kokkos-openmp.tar.gz absent)"
fi
build=build-ci/device-path
timed cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKPIPE_DEVICE_PATH_ON_HOST=ON -DKPIPE_ENABLE_TESTS=ON \
  -DKPIPE_ENABLE_APPS=OFF -DKPIPE_ENABLE_BENCHMARKS=OFF -DKPIPE_TEST_THREADS=$threads "${unity_build[@]}" "${args[@]}" >/dev/null
grep -q "define KPIPE_DEVICE_PATH_ON_HOST 1" "$build/src/parts/core/kpipe/build_config.hpp"
timed cmake --build "$build" -j "$(nproc)"
# Unit tests: every layer's gradient check, the whole model, both paths side by side. Not kpipe_test_runtime:
# its tests are learning runs (hundreds of steps of the small preset), which the device path's team kernels
# make too slow for 2 cores (about four minutes), and which test no kernel path the tests here do not.
OMP_PROC_BIND=false timed ctest --test-dir "$build" -L unit -E '^kpipe_test_runtime$' --output-on-failure -j "$(nproc)"
# MPI tests on 1, 2 and 4 ranks, all of them: every schedule and layout against one rank, bit for bit, the
# asynchronous schedules against their reference, recomputation, the stash count, transports and checkpoints,
# on the device path's kernels. The ranks get no more threads than the cores (cmake/kpipeTesting.cmake): on 2
# cores 2 threads for 1 rank, 1 for 2 or 4; about a minute in all (4 ranks of 2 threads took three minutes
# for a fifth of these tests).
OMP_PROC_BIND=false timed ctest --test-dir "$build" -L mpi --output-on-failure -j "$(nproc)"
