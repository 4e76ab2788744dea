#!/usr/bin/env bash
# Spack: the recipe in spack/ concretizes offline (the Spack kit in ../shared/spack) for kpipe, kpipe+tests,
# kpipe+cuda cuda_arch=90, kpipe+cuda+nccl cuda_arch=90 and both environments, and its cmake_args() runs;
# fails when one of them does not. Skips when the kit is absent (a user's clone has no ../shared).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
kit=${KPIPE_SHARED_DIR:-$repo/../shared}/spack/check.sh
if [ ! -x "$kit" ]; then
  echo "40-spack: skipped: no offline Spack kit at $kit (set KPIPE_SHARED_DIR)"
  exit 0
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
# Solves run one at a time; about 5 minutes on a quiet 2-core machine. Bounded: 20 minutes in all.
timeout -k 30 1260 "$kit" -w "$work" -t 600 -d 1200 \
  -c "kpipe" -c "kpipe+cuda cuda_arch=90" -c "kpipe+cuda+nccl cuda_arch=90" "$repo/spack"
