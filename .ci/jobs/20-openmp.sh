#!/usr/bin/env bash
# The whole test suite against Kokkos 4.6 with the OpenMP backend (../shared's kokkos-openmp toolchain), 2
# threads per test process (an MPI test's ranks: no more than the cores, cmake/kpipeTesting.cmake), the install
# consumer included (kpipe's package config must find that Kokkos).
set -euo pipefail
job=20-openmp
source "$(dirname "$0")/../lib.sh"
cd "$repo"
if ! prefix=$(toolchain kokkos-openmp); then
  skip "no $shared/toolchains/kokkos-openmp.tar.gz (set KPIPE_SHARED_DIR)"
fi
echo "$job: whole test suite against Kokkos 4.6 OpenMP with 2 threads a process (MPI ranks within the cores), install consumer included"
build=build-ci/openmp
# Only what the tests run: the benchmark programs compile in the README's build and the CUDA one, and the
# benchmark script's test (bench_script) runs here without kpipe_bench_step.
timed cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DKPIPE_ENABLE_TESTS=ON \
  -DKPIPE_ENABLE_APPS=ON -DKPIPE_ENABLE_BENCHMARKS=OFF -DKPIPE_TEST_THREADS=2 "${unity_build[@]}" >/dev/null

timed cmake --build "$build" -j "$(nproc)"
OMP_NUM_THREADS=2 OMP_PROC_BIND=false timed ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
