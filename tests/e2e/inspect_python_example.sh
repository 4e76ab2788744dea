#!/usr/bin/env bash
# examples/python/plot_run.py on a fresh checkpoint, activation trace and timeline of a 2-rank run: it must
# write a PNG and read what the run wrote (the loss curve of the timeline's /steps table equals the metrics'
# losses to the bit; every tensor of the checkpoint; the tokenizer). Where h5py or matplotlib cannot be
# imported the test says why and passes (the only escape hatch).
# Usage: inspect_python_example.sh KPIPE_TRAIN EXAMPLE_SCRIPT MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; example=$2; shift 2
# The first interpreter that has both (Debian's python3-h5py and python3-matplotlib, which
# scripts/install-deps-debian.sh installs, live in /usr/bin/python3 even where another python3 comes first).
py=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c "import h5py, matplotlib" >/dev/null 2>&1; then py=$candidate; break; fi
done
if [ -z "$py" ]; then
  echo "skipping: no python3 here can import h5py and matplotlib: $(python3 -c 'import h5py, matplotlib' 2>&1 | tail -n 1)"
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
"$@" -n 2 "$train" --pipeline-size 2 --microbatches 2 --steps 4 --trace trace.h5 --trace-every 2 \
  --timeline timeline.h5 --metrics metrics.jsonl --checkpoint-dir ck --checkpoint-every 4 >/dev/null 2>train.txt \
  || { echo "FAIL: training"; cat train.txt; exit 1; }
"$py" "$example" ck trace.h5 timeline.h5 plot.png >out.txt 2>&1 || fail "the example failed: $(cat out.txt)"
cat out.txt
[ -s plot.png ] && [ "$(head -c 4 plot.png | tail -c 3)" = "PNG" ] || fail "no PNG written"
# tiny preset: embedding (2 tensors), 2 blocks (12 each), head (3): 29 tensors; 2 ranks x 4 steps of actions.
grep -q "loss over 4 steps" out.txt || fail "the loss curve does not have 4 steps"
grep -q "29 tensors" out.txt || fail "not every tensor of the checkpoint was read"
grep -q "tokenizer bytes (vocabulary 256)" out.txt || fail "the checkpoint's tokenizer was not read"
"$py" - <<'PY' || fail "the files' step numbers or losses disagree"
import json, h5py
metrics = [json.loads(line) for line in open("metrics.jsonl")]
lines = [m for m in metrics if "step_seconds" in m]  # the steps' lines (not the checkpoint's, the final one)
losses = [m["loss"] for m in lines]
with h5py.File("timeline.h5") as f:
    stored = list(f["steps/loss"][()])
    steps = list(f["steps/step"][()])
    timeline_steps = sorted(set(f["timeline/step"][()]))
with h5py.File("trace.h5") as f:
    traced = sorted(set(f["layers/00/output/step"][()]))
with h5py.File("ck/step-00000004.h5") as f:
    checkpoint_step = int(f.attrs["step"])
# One numbering: steps 1..4 in the metrics, /steps, /timeline; --trace-every 2 traces steps 2 and 4; the
# checkpoint of the last step says 4, as its name and the metrics' checkpoint record do.
assert [m["step"] for m in lines] == [1, 2, 3, 4], lines
assert steps == [1, 2, 3, 4] and timeline_steps == [1, 2, 3, 4], (steps, timeline_steps)
assert traced == [2, 4], traced
assert checkpoint_step == 4 and [m["step"] for m in metrics if "checkpoint" in m] == [4], metrics
assert stored == losses, (stored, losses)
PY
echo "$((1 - (failures > 0))) passed, $failures failed"
[ "$failures" -eq 0 ]
