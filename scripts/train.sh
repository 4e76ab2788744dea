#!/usr/bin/env bash
# The quick start's main job. Installs the dependencies, builds kpipe, then shows what it does: trains a
# 4-block GPT on the embedded synthetic corpus (nothing to download) on 2 MPI ranks with a 1F1B pipeline
# schedule, in about a minute on a 2-core machine, with a progress line; then prints the measured bubble
# beside the simulator's, draws the last step's timeline, and lets the trained model write some text.
#   scripts/train.sh                                    the default job
#   scripts/train.sh --steps 2000 --schedule gpipe      arguments go to kpipe-train (and override the job's)
#   KPIPE_RANKS=4 scripts/train.sh                      another pipeline size
# Everything it writes goes to ${KPIPE_BUILD_DIR:-build}/quickstart/ (replaced on every run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps-debian.sh
scripts/build.sh -DKPIPE_ENABLE_TESTS=OFF -DKPIPE_ENABLE_BENCHMARKS=OFF
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

build=${KPIPE_BUILD_DIR:-build}
apps=$build/apps
run=$build/quickstart
ranks=${KPIPE_RANKS:-2}
rm -rf "$run"
mkdir -p "$run"

# Open MPI refuses to run as root, and to start more ranks than cores, unless told.
mpiexec=(mpiexec -n "$ranks")
if mpiexec --version 2>/dev/null | grep -qi "open mpi\|openrte"; then
  [ "$(id -u)" -eq 0 ] && mpiexec+=(--allow-run-as-root)
  [ "$(nproc)" -lt "$ranks" ] && mpiexec+=(--oversubscribe)
fi

# The step count decides when the one checkpoint is written (after the last step): take the user's if given.
steps=1200
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --steps | --train.steps) steps=${args[i + 1]:-$steps} ;;
    --steps=* | --train.steps=*) steps=${args[i]#*=} ;;
  esac
done

echo "== kpipe quick start: a GPT on the embedded corpus, $ranks pipeline stages (1F1B), $steps steps =="
"${mpiexec[@]}" "$apps/kpipe-train" \
  --model.n_layers 4 --model.n_heads 4 --batch 16 --microbatches 4 --lr 3e-3 --train.log_every 50 \
  --pipeline-size "$ranks" --schedule 1f1b --steps "$steps" \
  --metrics "$run/metrics.jsonl" --timeline "$run/timeline.h5" --trace "$run/trace.h5" --trace-every 50 \
  --checkpoint-dir "$run/checkpoints" --checkpoint-every "$steps" "$@"

echo
echo "== the last step's timeline, measured =="
"$apps/kpipe-inspect" timeline "$run/timeline.h5" --svg "$run/timeline.svg" --chrome "$run/timeline.json"

echo
echo "== text from the trained model (kpipe-generate on $ranks ranks) =="
"${mpiexec[@]}" "$apps/kpipe-generate" "$run/checkpoints" --prompt "The " --tokens 240 --temperature 0.7 --seed 1

# The run's files through plain h5py and matplotlib (examples/python/plot_run.py), where Python has both.
plot="(no python3 with h5py and matplotlib here)"
for py in python3 /usr/bin/python3; do
  if "$py" -c "import h5py, matplotlib" >/dev/null 2>&1; then
    "$py" examples/python/plot_run.py "$run/checkpoints" "$run/trace.h5" "$run/timeline.h5" "$run/run.png" >/dev/null &&
      plot="$run/run.png (examples/python/plot_run.py: loss curve, activations, timeline)"
    break
  fi
done

final=$(grep '"final"' "$run/metrics.jsonl" || true)
field() {
  local value
  value=$(printf '%s' "$final" | sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p")
  if [ -n "$value" ]; then printf '%.3f' "$value"; else printf '?'; fi
}
echo
echo "== done =="
echo "  validation loss      $(field val_loss) nats per token (it starts near ln 256 = 5.55)"
echo "  bubble               measured $(field measured_bubble), simulated $(field simulated_bubble) (idle share of each rank's step)"
echo "  timeline picture     $run/timeline.svg (open in a browser; $run/timeline.json in https://ui.perfetto.dev)"
echo "  checkpoint           $run/checkpoints (kpipe-inspect, kpipe-eval, kpipe-generate read it)"
echo "  plots                $plot"
echo "  metrics              $run/metrics.jsonl"
