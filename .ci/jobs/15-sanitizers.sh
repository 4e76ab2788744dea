#!/usr/bin/env bash
# AddressSanitizer and UndefinedBehaviorSanitizer on the unit and MPI tests (Debian's Kokkos, the kernels' host
# path): a heap overflow, a use after free, a signed overflow or a misaligned access anywhere in kpipe's code
# fails the job. Leak checking is off: Open MPI and HDF5 keep allocations until the process ends. Not
# kpipe_test_runtime: its learning runs (hundreds of steps) take five minutes under the sanitizers and run no
# code the MPI tests do not (the trainer, executor and policies on 1, 2 and 4 ranks).
set -euo pipefail
job=15-sanitizers
source "$(dirname "$0")/../lib.sh"
cd "$repo"
echo "$job: AddressSanitizer + UndefinedBehaviorSanitizer on the unit and MPI tests"
build=build-ci/sanitizers
# -g1: line tables and function names, all a sanitizer's report needs (file:line for every frame); full debug
# information (-g) made the compiles about a third longer here, for variables and types no report prints.
flags="-O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
timed cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" -DKPIPE_ENABLE_TESTS=ON -DKPIPE_ENABLE_APPS=OFF \
  -DKPIPE_ENABLE_BENCHMARKS=OFF -DKPIPE_ENABLE_NATIVE_ARCH=OFF "${unity_build[@]}" >/dev/null
timed cmake --build "$build" -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
timed ctest --test-dir "$build" -L "unit|mpi" -E '^(kpipe_layers|kpipe_test_runtime)' --output-on-failure -j "$(nproc)"
