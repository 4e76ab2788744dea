#!/usr/bin/env bash
# kpipe-eval and kpipe-prepare on bad input: exit code 2 and one line naming the option and the value (no
# SIGFPE, no file written over a device node, a FIFO refused and never opened), each within a bound.
# Usage: tools_input.sh KPIPE_PREPARE KPIPE_EVAL KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
set -u
prepare=$1; eval_app=$2; train=$3; shift 3
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passes=0
expect() {  # expect NAME NEEDLE -- COMMAND...
  local name=$1 needle=$2; shift 3
  timeout 60 "$@" >/dev/null 2>"$dir/err" </dev/null
  local rc=$?
  if [ "$rc" -eq 2 ] && [ "$(grep -c 'error:' "$dir/err")" -eq 1 ] && grep -qF -- "$needle" "$dir/err"; then
    passes=$((passes + 1)); echo "ok   $name: $(grep 'error:' "$dir/err")"
  else
    fail "$name: exit $rc: $(head -3 "$dir/err")"
  fi
}
echo "some text to tokenize, long enough for a window or two of the tiny model: $(seq 300 | tr '\n' ' ')" >"$dir/text.txt"
"$@" -n 1 "$train" --steps 2 --checkpoint-dir "$dir/ck" --checkpoint-every 2 2>/dev/null || fail "training"

expect eval-pipeline-size-0 "--pipeline-size = 0" -- "$eval_app" "$dir/ck" --data "$dir/text.txt" --pipeline-size 0
expect eval-max-windows "--max-windows = -1" -- "$eval_app" "$dir/ck" --data "$dir/text.txt" --max-windows -1
mkdir -p "$dir/old/step-00000004" && touch "$dir/old/step-00000004/checkpoint.h5"  # format 1: a directory
expect eval-old-format "format_version 1" -- "$eval_app" "$dir/old/step-00000004" --data "$dir/text.txt"
expect prepare-dev-full "character device" -- "$prepare" "$dir/text.txt" -o /dev/full
[ -c /dev/full ] && passes=$((passes + 1)) || fail "/dev/full is no longer a character device"
mkfifo "$dir/fifo"
expect prepare-fifo-input "FIFO" -- "$prepare" "$dir/fifo" -o "$dir/out.h5"
expect eval-fifo-data "--data = $dir/fifo: cannot open (is a FIFO" -- "$eval_app" "$dir/ck" --data "$dir/fifo"
expect eval-fifo-checkpoint "checkpoint '$dir/fifo': cannot open (is a FIFO" -- "$eval_app" "$dir/fifo" --data "$dir/text.txt"
echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
