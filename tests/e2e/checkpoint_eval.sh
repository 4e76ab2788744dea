#!/usr/bin/env bash
# kpipe-eval: the same loss (9 significant digits) on 1, 2 and 4 pipeline ranks; a missing checkpoint is
# bad input (exit 2).
# Usage: checkpoint_eval.sh KPIPE_TRAIN KPIPE_EVAL MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; eval_app=$2; shift 2
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$@" -n 2 "$train" --pipeline-size 2 --steps 4 --model.n_layers 2 --checkpoint-dir "$dir/ck" --checkpoint-every 4 \
  2>/dev/null || fail "training failed"
for i in $(seq 200); do echo "line $i: the quick brown fox jumps over the lazy dog ($((i * i)))"; done >"$dir/text.txt"
one=$("$@" -n 1 "$eval_app" "$dir/ck" --data "$dir/text.txt" 2>/dev/null)
two=$("$@" -n 2 "$eval_app" "$dir/ck/step-00000004.h5" --data "$dir/text.txt" --pipeline-size 2 2>/dev/null)
four=$("$@" -n 4 "$eval_app" "$dir/ck" --data "$dir/text.txt" --pipeline-size 4 2>/dev/null)
echo "loss p=1 $one, p=2 $two, p=4 $four"
[[ "$one" =~ ^[0-9]\.[0-9]{8}$ ]] || fail "not 9 significant digits: '$one'"
[ "$one" = "$two" ] && [ "$one" = "$four" ] || fail "layouts disagree"
"$@" -n 2 "$eval_app" "$dir/none" --data "$dir/text.txt" --pipeline-size 2 >/dev/null 2>"$dir/err"
rc=$?
[ $rc -eq 2 ] || fail "missing checkpoint: exit $rc, expected 2"
grep -q "checkpoint .*/none.: no such file or directory" "$dir/err" || fail "missing checkpoint: message '$(cat "$dir/err")'"
echo "$((1 - (failures > 0))) passed, $failures failed"
[ $failures -eq 0 ]
