#!/usr/bin/env bash
# The final param_checksum of a short run on every schedule and several layouts, fp32 and bf16, tiny and bench
# presets: one line per run ("preset schedule ppP dpD chC precision checksum"). A change meant to keep the bits
# keeps every line; runs of one preset and precision on the synchronous schedules share one checksum.
# Usage: scripts/checksum-matrix.sh [BUILD_DIR] > checksums.txt      (then diff against another build's list)
set -u
build=${1:-build}
train=$build/apps/kpipe-train
[ -x "$train" ] || { echo "checksum-matrix: no $train (build with -DKPIPE_ENABLE_APPS=ON)" >&2; exit 2; }
mpiexec=(mpiexec --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpiexec+=(--allow-run-as-root)
metrics=$(mktemp)
trap 'rm -f "$metrics"' EXIT
run() {  # preset schedule stages replicas chunks precision [options...]
  local preset=$1 schedule=$2 stages=$3 replicas=$4 chunks=$5 precision=$6
  shift 6
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${mpiexec[@]}" -n $((stages * replicas)) "$train" --preset "$preset" \
    --steps 3 --schedule "$schedule" --pipeline-size "$stages" --data-parallel "$replicas" --chunks "$chunks" \
    --precision "$precision" --microbatches 8 --train.log_every 100 --metrics "$metrics" "$@" >/dev/null 2>&1
  local checksum
  checksum=$(sed -n 's/.*"param_checksum":"\([0-9a-f]*\)".*/\1/p' "$metrics" | tail -1)
  echo "$preset $schedule pp$stages dp$replicas ch$chunks $precision ${checksum:-FAILED}"
}
for precision in fp32 bf16; do
  run tiny 1f1b 1 1 1 $precision
  for schedule in naive gpipe 1f1b zb-h1 pipedream 2bw; do run tiny $schedule 2 1 1 $precision; done
  run tiny interleaved 2 1 2 $precision
  run tiny zb-v 2 1 2 $precision
  run tiny 1f1b 2 2 1 $precision
  run tiny gpipe 4 1 1 $precision --model.n_layers 4
  run bench 1f1b 1 1 1 $precision --batch 8
  run bench 1f1b 2 1 1 $precision --batch 8
  run bench interleaved 2 1 2 $precision --batch 8
  run bench 1f1b 1 1 1 $precision  # 2 sequences a micro-batch: sums over more than one sequence's rows
  run bench 1f1b 2 1 1 $precision
done
