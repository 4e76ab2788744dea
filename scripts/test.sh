#!/usr/bin/env bash
# Installs the dependencies, builds kpipe and runs the whole test suite (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps-debian.sh
scripts/build.sh -DKPIPE_ENABLE_TESTS=ON -DKPIPE_ENABLE_BENCHMARKS=ON -DKPIPE_ENABLE_APPS=ON
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ctest --test-dir "${KPIPE_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
