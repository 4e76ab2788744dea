#!/usr/bin/env bash
# The device path of every kernel, run on the host (KPIPE_DEVICE_PATH_ON_HOST), under AddressSanitizer and
# UndefinedBehaviorSanitizer: the layer gradient checks, the whole-model check, every layout bit-identical to
# one rank, the device-vs-host comparison of every kernel (both paths), the unit and MPI tests; a heap overflow,
# a use after free, a signed overflow or a misaligned access anywhere in kpipe's code fails the job.
# With ../shared's kokkos-openmp toolchain the device path's teams get 2 threads each (lane splits, team
# reductions and barriers run for real); without it, Debian's Kokkos 3.4 (Serial, teams of one).
# One build for both checks: the sanitizers need no build of their own, and the host path's kernels are
# sanitized here too (KernelPaths.* runs them beside the device path's).
set -euo pipefail
job=10-device-path
source "$(dirname "$0")/../lib.sh"
cd "$repo"
args=() threads=1
if prefix=$(toolchain kokkos-openmp); then
  echo "$job: device path of every kernel on the host, Kokkos 4.6 OpenMP (2 threads a process, MPI ranks within the cores), ASan + UBSan: gradients, whole model, layouts"
  args=(-DCMAKE_PREFIX_PATH="$prefix") threads=2
else
  echo "$job: device path of every kernel on the host, Debian's Kokkos 3.4 Serial ($shared/toolchains/kokkos-openmp.tar.gz absent), ASan + UBSan"
fi
build=build-ci/device-path
# -O1: what the sanitizers are fast at; -g1: line tables and function names, all a report prints (file:line in
# every frame; full -g made the compiles a third longer for variables and types no report shows).
flags="-O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
timed cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" -DKPIPE_DEVICE_PATH_ON_HOST=ON -DKPIPE_ENABLE_TESTS=ON \
  -DKPIPE_ENABLE_APPS=OFF -DKPIPE_ENABLE_BENCHMARKS=OFF -DKPIPE_ENABLE_NATIVE_ARCH=OFF -DKPIPE_TEST_THREADS=$threads \
  "${unity_build[@]}" "${args[@]}" >/dev/null
grep -q "define KPIPE_DEVICE_PATH_ON_HOST 1" "$build/src/parts/core/kpipe/build_config.hpp"
timed cmake --build "$build" -j "$(nproc)"
# Leak checking is off: Open MPI and HDF5 keep allocations until the process ends.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Unit tests: every layer's gradient check, the whole model, both paths side by side. Not kpipe_test_runtime:
# its tests are learning runs (hundreds of steps of the small preset), too slow on the device path's team
# kernels under the sanitizers, and they run no kernel path or runtime code the tests here do not (the trainer,
# executor and policies run in the MPI tests on 1, 2 and 4 ranks). Not the layering check (kpipe_layers_*):
# it compiles a header, the build's flags have nothing to do with it.
OMP_PROC_BIND=false timed ctest --test-dir "$build" -L unit -E '^(kpipe_test_runtime|kpipe_layers)' --output-on-failure -j "$(nproc)"
# MPI tests on 1, 2 and 4 ranks, all of them: every schedule and layout against one rank, bit for bit, the
# asynchronous schedules against their reference, recomputation, the stash count, transports and checkpoints,
# on the device path's kernels. The ranks get no more threads than the cores (cmake/kpipeTesting.cmake).
OMP_PROC_BIND=false timed ctest --test-dir "$build" -L mpi --output-on-failure -j "$(nproc)"
