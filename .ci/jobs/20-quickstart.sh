#!/usr/bin/env bash
# The README's main job (scripts/train.sh), in the build directory the README's test command left (what a user
# who ran both has; a fresh clone builds there too, and CI's 2 cores are spared a second build): it must train on 2 pipeline ranks
# until the model visibly learns (validation loss below 2 nats per token; it starts near ln 256 = 5.55),
# print the measured and simulated bubble, draw the timeline, and generate text from the checkpoint.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${KPIPE_QUICKSTART_BUILD_DIR:-build}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
KPIPE_BUILD_DIR=$build scripts/train.sh >"$out" 2>&1
rc=$?
failures=0
fail() { echo "quickstart: FAIL: $*"; failures=$((failures + 1)); }
[ $rc -eq 0 ] || fail "scripts/train.sh exited with $rc"
grep -q "^pipeline: bubble measured" "$out" || fail "no measured bubble beside the simulated one"
[ -s "$build/quickstart/timeline.svg" ] || fail "no timeline picture"
text=$(sed -n '/== text from the trained model/,/^kpipe-generate:/p' "$out" | sed '1d;$d')
[ "${#text}" -ge 100 ] || fail "no generated text: '$text'"
loss=$(sed -n 's/.*"val_loss":\([^,}]*\).*/\1/p' "$build/quickstart/metrics.jsonl")
awk -v l="$loss" 'BEGIN { exit !(l != "" && l < 2.0) }' || fail "validation loss '$loss' not below 2: the model did not learn"
[ $failures -eq 0 ] || { tail -40 "$out"; exit 1; }
grep -E "^done:|^pipeline:" "$out"
echo "quickstart: validation loss $loss, $(printf '%s' "$text" | head -c 80 | tr '\n' ' ')..."
