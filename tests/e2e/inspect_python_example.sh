#!/usr/bin/env bash
# examples/python/plot_checkpoint_and_trace.py on a fresh checkpoint and activation trace: it must write a
# PNG. Where h5py or matplotlib cannot be imported the test says why and passes (the only escape hatch).
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
"$@" -n 2 "$train" --pipeline-size 2 --microbatches 2 --steps 4 --trace trace.h5 --trace-every 2 \
  --checkpoint-dir ck --checkpoint-every 4 >/dev/null 2>train.txt || { echo "FAIL: training"; cat train.txt; exit 1; }
"$py" "$example" ck trace.h5 plot.png || failures=1
[ -s plot.png ] && [ "$(head -c 4 plot.png | tail -c 3)" = "PNG" ] || { echo "FAIL: no PNG written"; failures=1; }
echo "$((1 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
