#!/usr/bin/env bash
# The checks a GPU node is for, on a CUDA build of kpipe:
#   1. the whole test suite (ctest) on the GPU: every layer's gradient check and the device-vs-host
#      comparison of every kernel, the whole model, every layout bit-identical to one rank, the transports;
#   2. the bench step (bench preset, kpipe-train) on one rank, and on 2 ranks sharing the GPU (pipeline.transport
#      "auto" falls back to MPI through pinned host buffers there: NCCL refuses two ranks on one GPU);
#   3. where torch with CUDA imports, the same model in PyTorch on the same GPU (benchmarks/pytorch/gpt.py);
# then prints the figures side by side: tokens/s, TFLOP/s (model FLOPs of benchmarks/run.py) and the share of
# the GPU's fp32 peak (kpipe trains in fp32, no tensor cores: GPU_PEAK_TFLOPS, known for H100/H200).
#
#   scripts/gpu-check.sh [BUILD_DIR] [--steps N] [--out DIR] [--skip-tests]
#
# BUILD_DIR (default build-cuda) is configured with Kokkos' nvcc_wrapper and a CUDA Kokkos, e.g.
#   cmake -S . -B build-cuda -DCMAKE_CXX_COMPILER=$KOKKOS/bin/nvcc_wrapper -DCMAKE_PREFIX_PATH=$KOKKOS \
#         -DKPIPE_ENABLE_NCCL=ON && cmake --build build-cuda -j
# Machines without Open MPI, HDF5 or OpenBLAS (a bare GPU image): run `scripts/gpu-check.sh BUILD_DIR --bundle`
# where the build was made, copy BUILD_DIR (with its gpu-libs/) over, and the libraries come along.
# Exit codes: 0 all checks passed; 1 a check failed; 2 nothing to check here (no CUDA build, no GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
build=build-cuda steps=30 out="" skip_tests=0 bundle=0
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-tests) skip_tests=1; shift ;;
    --bundle) bundle=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (see --help)"; exit 2 ;;
    *) build=$1; shift ;;
  esac
done

cache="$build/CMakeCache.txt"
if [ ! -f "$cache" ]; then
  echo "gpu-check: $build is not a kpipe build directory (no CMakeCache.txt); configure a CUDA build first (see --help)"
  exit 2
fi
devices=$(sed -n 's/^KPIPE_KOKKOS_DEVICES:[A-Z]*=//p' "$cache")
if ! grep -q 'nvcc_wrapper' "$cache" || [[ "$devices" != *CUDA* ]]; then
  echo "gpu-check: $build is not a CUDA build (Kokkos devices: ${devices:-unknown}, compiler: $(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")); nothing to check on a GPU"
  exit 2
fi
train="$build/apps/kpipe-train"
[ -x "$train" ] || { echo "gpu-check: $train is missing: build the apps (KPIPE_ENABLE_APPS=ON)"; exit 2; }

if [ $bundle -eq 1 ]; then
  # The shared libraries the programs load, except the GPU driver's and the C library's (the node has its own).
  mkdir -p "$build/gpu-libs"
  find "$build/apps" "$build/tests" "$build/benchmarks" -maxdepth 1 -type f -perm -u+x 2>/dev/null |
    xargs -r ldd 2>/dev/null | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libnvidia[^/]*)\.so' |
    xargs -r -I{} cp -L {} "$build/gpu-libs/"
  echo "gpu-check: $(ls "$build/gpu-libs" | wc -l) libraries in $build/gpu-libs (Open MPI's mpiexec and plugins are not among them)"
  exit 0
fi
[ -d "$build/gpu-libs" ] && export LD_LIBRARY_PATH="$(cd "$build/gpu-libs" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if ! command -v nvidia-smi >/dev/null || ! gpus=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null) ||
  [ -z "$gpus" ]; then
  echo "gpu-check: no GPU visible here (nvidia-smi lists none); run this on a GPU node"
  exit 2
fi
gpu_name=$(echo "$gpus" | head -1 | cut -d, -f1)
echo "gpu-check: $(echo "$gpus" | wc -l) GPU(s): $(echo "$gpus" | head -1); build $build ($devices)"
peak=${GPU_PEAK_TFLOPS:-}
if [ -z "$peak" ]; then
  case $gpu_name in
    *H200*|*H100*SXM*|*"H100 80GB HBM3"*) peak=67 ;;  # fp32, non-tensor, SXM
    *H100*PCIe*) peak=51 ;;
    *A100*) peak=19.5 ;;
    *) peak="" ;;
  esac
fi
out=${out:-$build/gpu-check}
mkdir -p "$out"
failed=0
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$cache")
command -v "$mpiexec" >/dev/null || mpiexec=$(command -v mpiexec || true)
mpiflags=$(sed -n 's/^KPIPE_MPIEXEC_FLAGS:[A-Z]*=//p' "$cache" | tr ';' ' ')

# 1. The test suite.
if [ $skip_tests -eq 0 ]; then
  if OPENBLAS_NUM_THREADS=1 ctest --test-dir "$build" --output-on-failure -j 4 >"$out/ctest.log" 2>&1; then
    echo "gpu-check: tests: $(grep -E 'tests passed' "$out/ctest.log")"
  else
    failed=1
    echo "gpu-check: tests FAILED: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1) (log: $out/ctest.log)"
    grep -E '^\s+[0-9]+ - ' "$out/ctest.log" | sed 's/^/gpu-check:   /'
  fi
fi

# 2. The bench step: tokens/s from kpipe-train's final metrics line.
tokens_per_s() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["tokens_per_s"])' "$1"; }
bench=(--preset bench --steps "$steps" --train.log_every 1000000 --train.eval_batches 1)
declare -A result
if "$train" "${bench[@]}" --metrics "$out/one-rank.jsonl" >"$out/one-rank.log" 2>&1; then
  result[one]=$(tokens_per_s "$out/one-rank.jsonl")
else
  failed=1; echo "gpu-check: one rank FAILED (log: $out/one-rank.log)"
fi
if [ -n "$mpiexec" ]; then
  if "$mpiexec" -n 2 $mpiflags "$train" "${bench[@]}" --pipeline-size 2 --microbatches 8 --transport auto \
    --metrics "$out/two-ranks.jsonl" >"$out/two-ranks.log" 2>&1; then
    result[two]=$(tokens_per_s "$out/two-ranks.jsonl")
    grep -h 'note:' "$out/two-ranks.log" | sed 's/^/gpu-check: /'
  else
    failed=1; echo "gpu-check: two ranks FAILED (log: $out/two-ranks.log)"
  fi
else
  echo "gpu-check: no mpiexec here: the 2-rank run is skipped"
fi

# 3. PyTorch on the same GPU.
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  if python3 benchmarks/pytorch/gpt.py --device cuda --steps "$steps" >"$out/pytorch.json" 2>"$out/pytorch.log"; then
    result[torch]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens_per_s"])' "$out/pytorch.json")
  else
    failed=1; echo "gpu-check: PyTorch FAILED (log: $out/pytorch.log)"
  fi
else
  echo "gpu-check: torch with CUDA does not import here: the PyTorch comparison is skipped"
fi

# The table: tokens/s, model TFLOP/s, share of the fp32 peak.
python3 - "$peak" "${result[one]:-}" "${result[two]:-}" "${result[torch]:-}" <<'EOF'
import sys
sys.path.insert(0, "benchmarks")
from run import PRESETS, flops_per_token
peak = float(sys.argv[1]) if sys.argv[1] else None
per_token = flops_per_token(PRESETS["bench"])
print(f"gpu-check: bench preset, fp32, {per_token / 1e6:.1f} MFLOP per token" + (f", GPU fp32 peak {peak} TFLOP/s" if peak else ""))
print(f"{'':28} {'tokens/s':>12} {'TFLOP/s':>9} {'% of peak':>10}")
for label, value in [("kpipe, 1 rank", sys.argv[2]), ("kpipe, 2 ranks on one GPU", sys.argv[3]), ("PyTorch (gpt.py)", sys.argv[4])]:
    if not value:
        print(f"{label:28} {'-':>12}")
        continue
    tflops = float(value) * per_token / 1e12
    share = f"{100 * tflops / peak:.1f}" if peak else "-"
    print(f"{label:28} {float(value):12.0f} {tflops:9.2f} {share:>10}")
EOF
echo "gpu-check: logs and metrics in $out"
exit $failed
