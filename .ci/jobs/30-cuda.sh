#!/usr/bin/env bash
# The CUDA build (../shared's kokkos-cuda toolchain: Kokkos 4.6, CUDA sm_90, nvcc_wrapper) with NCCL:
# library, apps, tests and benchmarks compile and link, with warnings in kpipe's own code as errors, and the
# NCCL transport is really in the binaries. Nothing CUDA runs here (no GPU): scripts/gpu-check.sh does that,
# on a node that gets the build as a pack (scripts/gpu-pack.sh), which this job makes, weighs and starts on a
# stand-in for a node without kpipe's libraries.
set -euo pipefail
job=30-cuda
source "$(dirname "$0")/../lib.sh"
cd "$repo"
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$cuda/bin/nvcc" ]; then
  skip "no nvcc in $cuda (set CUDA_HOME)"
fi
if ! prefix=$(toolchain kokkos-cuda); then
  skip "no $shared/toolchains/kokkos-cuda.tar.gz (set KPIPE_SHARED_DIR)"
fi
echo "$job: CUDA build (Kokkos 4.6, sm_90, NCCL): library, apps, tests, benchmarks compile and link, no warnings in kpipe's code"
export PATH="$cuda/bin:$PATH"
build=build-ci/cuda
# Host code unoptimized (-DNDEBUG alone): nvcc's host pass at -O3 takes a third longer on these 2 cores, and
# the g++ builds before this one compile the same host code at -O3 with the same warnings. Device code is
# optimized either way (ptxas' default).
timed cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-DNDEBUG \
  -DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper" \
  -DCMAKE_PREFIX_PATH="$prefix" -DKPIPE_ENABLE_NCCL=ON -DKPIPE_WARNINGS_AS_ERRORS=ON -DKPIPE_ENABLE_TESTS=ON \
  -DKPIPE_ENABLE_APPS=ON -DKPIPE_ENABLE_BENCHMARKS=ON "${unity_build[@]}" >/dev/null
timed cmake --build "$build" -j "$(nproc)"
# The NCCL transport is compiled in (not only libnccl on the link line): its symbols are in the binaries.
# The listings are read whole before grep: with pipefail, grep -q quitting at the first match would make nm
# die of SIGPIPE and the check fail on a binary that passes.
for program in apps/kpipe-train tests/kpipe_test_mpi; do
  dynamic=$(readelf -d "$build/$program") symbols=$(nm -C "$build/$program")
  grep -q 'NEEDED.*libnccl' <<<"$dynamic" || { echo "$job: $program does not load libnccl"; exit 1; }
  grep -q 'ncclCommInitRankConfig' <<<"$symbols" || { echo "$job: $program has no NCCL transport"; exit 1; }
done
echo "$job: kpipe-train and the MPI tests load libnccl and call ncclCommInitRankConfig"

# The pack a GPU node gets: small enough to travel (a node's upload may be limited to tens of MiB), and it starts
# where none of kpipe's libraries are installed.
pack=build-ci/gpu-pack.tar.xz
timed scripts/gpu-pack.sh "$build" "$pack"
size=$(stat -c %s "$pack")
[ "$size" -le $((48 * 1048576)) ] || { echo "$job: the GPU pack is $((size / 1048576)) MiB, over 48 MiB"; exit 1; }
# The pack's start on a bare node needs a mount namespace: where there is none the job is reported as skipped,
# not passed (the build and the pack above were checked; the start was not).
timed bash tests/e2e/gpu_pack_bare_node.sh "$pack" "$cuda"
