#!/usr/bin/env bash
# scripts/gpu-check.sh refuses cleanly where it cannot check anything: one line and exit code 2 for a build
# that is not a CUDA build (this one), and for a CUDA build on a machine without a GPU (a stand-in build
# directory, with nvidia-smi out of PATH). Usage: gpu_check_refuses.sh GPU_CHECK BUILD_DIR
set -u
check=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
expect() {  # expect NAME NEEDLE -- COMMAND...
  local name=$1 needle=$2; shift 3
  "$@" >"$work/out" 2>&1
  local rc=$? lines
  lines=$(wc -l <"$work/out")
  if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$needle" "$work/out"; then
    echo "ok   $name: $(cat "$work/out")"
  else
    echo "FAIL $name: exit $rc, $lines lines:"; sed 's/^/     /' "$work/out"; failures=$((failures + 1))
  fi
}
expect host-build "is not a CUDA build" -- "$check" "$build"
expect no-build-dir "not a kpipe build directory" -- "$check" "$work/none"
mkdir -p "$work/cuda/apps"
printf 'CMAKE_CXX_COMPILER:FILEPATH=/opt/kokkos/bin/nvcc_wrapper\nKPIPE_KOKKOS_DEVICES:INTERNAL=SERIAL;CUDA\n' \
  >"$work/cuda/CMakeCache.txt"
printf '#!/bin/sh\nexit 0\n' >"$work/cuda/apps/kpipe-train" && chmod +x "$work/cuda/apps/kpipe-train"
expect no-gpu "no GPU visible" -- env PATH=/usr/bin:/bin "$check" "$work/cuda"
[ $failures -eq 0 ]
