#!/usr/bin/env bash
# Installs the dependencies, builds kpipe and runs the default training job on the embedded synthetic
# corpus (nothing to download). Arguments go to kpipe-train, e.g. scripts/train.sh --preset small.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps-debian.sh
scripts/build.sh -DKPIPE_ENABLE_TESTS=OFF -DKPIPE_ENABLE_BENCHMARKS=OFF
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
exec "${KPIPE_BUILD_DIR:-build}/apps/kpipe-train" --metrics "${KPIPE_BUILD_DIR:-build}/metrics.jsonl" "$@"
