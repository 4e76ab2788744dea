#!/usr/bin/env bash
# scripts/gpu-check.sh --budget on a stand-in GPU node (a fake nvidia-smi naming an H200, a stand-in CUDA build
# whose programs are shell scripts, a torch module that says CUDA is there): the tests get a third of the budget
# and no more, the figures get the rest, a run the budget cuts off is "unfinished" rather than failed, what would
# start later is skipped and named, and the check exits 3 with every unfinished run in its last line.
# Usage: gpu_check_budget.sh GPU_CHECK
set -u
check=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build=$work/cuda
mkdir -p "$build/apps" "$build/tests" "$work/bin"
printf 'CMAKE_CXX_COMPILER:FILEPATH=/opt/kokkos/bin/nvcc_wrapper\nKPIPE_KOKKOS_DEVICES:INTERNAL=SERIAL;CUDA\n' \
  >"$build/CMakeCache.txt"
stub() {  # stub PATH BODY: an executable shell script
  printf '#!/bin/sh\n%s\n' "$2" >"$1" && chmod +x "$1"
}
stub "$work/bin/nvidia-smi" 'echo "NVIDIA H200, 143771 MiB"'
stub "$build/tests/kpipe_test_a" 'echo "[  PASSED  ] 3 tests."'
stub "$build/tests/kpipe_test_b" 'sleep 60'  # outlives the tests' share (3 s of 9)
stub "$build/tests/kpipe_test_c" 'echo "[  PASSED  ] 1 test."'
stub "$build/apps/kpipe-train" 'sleep 60'  # outlives the budget
# A torch that says CUDA is there: the PyTorch runs are due, and the budget must skip them too.
mkdir -p "$work/python/torch"
printf 'class cuda:\n    @staticmethod\n    def is_available():\n        return True\n' >"$work/python/torch/__init__.py"

started=$SECONDS
PATH="$work/bin:$PATH" PYTHONPATH="$work/python" "$check" "$build" --out "$work/out" --sizes wide --budget 9 \
  >"$work/log" 2>&1
rc=$? took=$((SECONDS - started))
failures=0
expect() {  # expect WHAT NEEDLE: the check's output has a line with NEEDLE
  if grep -qF -- "$2" "$work/log"; then
    echo "ok   $1"
  else
    echo "FAIL $1: no line with '$2'"; failures=$((failures + 1))
  fi
}
expect "a test within the share passes" "gpu-check: kpipe_test_a: 3 tests."
expect "the share cuts the slow test off" "kpipe_test_b unfinished: the tests' share of the budget (3 s) ended it"
expect "the next test is skipped" "the tests' share of the budget (3 s) is spent: kpipe_test_c skipped"
expect "the figures get the rest of the budget" "kpipe wide-bf16 unfinished: the budget of 9 s ended it"
expect "what would start later is skipped" "the budget of 9 s is spent: kpipe wide-fp32 skipped"
expect "PyTorch's runs are skipped too" "the budget of 9 s is spent: PyTorch wide-bf16-compiled skipped"
# (then the two-rank runs, where the machine has an mpiexec)
expect "the last line names every unfinished run" \
  "of its runs finished: kpipe_test_b, kpipe_test_c, kpipe wide-bf16, PyTorch wide-bf16, PyTorch wide-bf16-compiled, kpipe wide-fp32, kpipe wide-tf32, kernels-wide"
if grep -q FAILED "$work/log"; then
  echo "FAIL a run cut off by the budget is reported as FAILED"; failures=$((failures + 1))
fi
if [ $rc -ne 3 ]; then echo "FAIL exit status $rc, expected 3"; failures=$((failures + 1)); fi
# The budget holds: 9 s, and 3 for starting the stand-ins and printing the table (10 s here on a loaded
# machine; a budget that let one run go a few seconds over shows).
if [ $took -gt 12 ]; then echo "FAIL the check took $took s on a budget of 9 s"; failures=$((failures + 1)); fi
[ $failures -eq 0 ] || { echo "the check's output:"; sed 's/^/     /' "$work/log"; }
[ $failures -eq 0 ]
