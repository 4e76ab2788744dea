#!/usr/bin/env bash
# Spack: the recipe in spack/ concretizes offline (the Spack kit in ../shared/spack) for kpipe, kpipe+tests,
# kpipe+cuda cuda_arch=90, kpipe+cuda+nccl cuda_arch=90 and both environments, and its cmake_args() runs;
# fails when one of them does not. Skips when the kit is absent (a user's clone has no ../shared).
set -uo pipefail
job=40-spack
source "$(dirname "$0")/../lib.sh"
kit=$shared/spack/check.sh
if [ ! -x "$kit" ]; then
  skip "no offline Spack kit at $kit (set KPIPE_SHARED_DIR)"
fi
# The kit needs python3 with venv (clingo comes from PyPI into a venv) and a C/C++ compiler.
need=()
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
command -v g++ >/dev/null || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/kpipe-spack.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Each solve is single-threaded (about 50 s here), so the six run as two halves side by side, one per core:
# the three plain specs from a copy of the recipe without its environments, then the NCCL spec and the two
# environments from the recipe as it is. Each half has its own venv and scratch (no shared writes).
# Bounded: 20 minutes in all.
mkdir -p "$work/specs-only" && cp -r "$repo/spack/repo.yaml" "$repo/spack/packages" "$work/specs-only/"
check() {  # check NAME PROJECT_SPACK_DIR CMAKE_ARGS_SPECS SPEC...: one half, its output in $work/NAME.out
  local name=$1 dir=$2 cmake_specs=$3
  shift 3
  mkdir -p "$work/$name"
  SPACKKIT_CMAKE_ARGS=$cmake_specs timeout -k 30 1260 "$kit" -v "$work/$name/venv" -w "$work/$name" -t 600 -d 1200 \
    "$dir" "$@" >"$work/$name.out" 2>&1
}
check specs "$work/specs-only" "kpipe;kpipe+cuda cuda_arch=90" "kpipe" "kpipe+tests" "kpipe+cuda cuda_arch=90" &
plain=$!
check environments "$repo/spack" "kpipe+cuda+nccl cuda_arch=90" "kpipe+cuda+nccl cuda_arch=90" &
environments=$!
wait $plain; plain_rc=$?
wait $environments; environments_rc=$?
cat "$work/specs.out" "$work/environments.out"
[ $plain_rc -eq 0 ] && [ $environments_rc -eq 0 ]
