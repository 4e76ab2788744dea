#!/usr/bin/env bash
# SIGUSR1 to one rank of 4: all ranks agree at the next step boundary, write exactly one checkpoint and
# exit with code 75; `--resume` then continues bit for bit: the losses of both parts and the final
# param_checksum equal an uninterrupted run's.
# Usage: checkpoint_signal.sh KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; shift
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run=(--pipeline-size 4 --microbatches 4 --batch 8 --steps 600 --model.n_layers 2 --model.seq_len 16
     --model.d_model 32 --model.n_heads 2 --train.log_every 1000)

"$@" -n 4 "$train" "${run[@]}" --metrics "$dir/straight.jsonl" 2>/dev/null || fail "uninterrupted run failed"

"$@" -n 4 "$train" "${run[@]}" --checkpoint-dir "$dir/ck" --metrics "$dir/a.jsonl" 2>"$dir/a.err" &
job=$!
for _ in $(seq 600); do [ "$(steps_done "$dir/a.jsonl")" -ge 3 ] && break; sleep 0.05; done
rank=$(a_rank $job)
kill -USR1 "$rank"
wait $job
rc=$?
cat "$dir/a.err" | grep kpipe-train
[ "$rc" -eq 75 ] || fail "exit code $rc, expected 75"
stopped=$(steps_done "$dir/a.jsonl")
[ "$stopped" -lt 600 ] || fail "the run finished before the signal arrived"
count=$(ls "$dir"/ck/step-*.h5 2>/dev/null | wc -l)
[ "$count" -eq 1 ] || fail "$count checkpoint files, expected 1: $(ls "$dir/ck")"
[ "$(head -1 "$dir/ck/latest")" = "$(printf 'step-%08d.h5' "$stopped")" ] || fail "latest = $(head -1 "$dir/ck/latest"), stopped after $stopped steps"

"$@" -n 4 "$train" "${run[@]}" --checkpoint-dir "$dir/ck" --resume --metrics "$dir/b.jsonl" 2>"$dir/b.err" ||
  fail "resumed run failed: $(cat "$dir/b.err")"
grep -q "resumed from checkpoint" "$dir/b.err" || fail "the resumed run does not say it resumed"
diff <(losses "$dir/straight.jsonl") <(cat <(losses "$dir/a.jsonl") <(losses "$dir/b.jsonl")) >/dev/null ||
  fail "losses differ from the uninterrupted run"
[ "$(final_checksum "$dir/b.jsonl")" = "$(final_checksum "$dir/straight.jsonl")" ] &&
  [ -n "$(final_checksum "$dir/b.jsonl")" ] || fail "final param_checksum differs"
echo "signal after $stopped steps; $((1 - (failures > 0))) passed, $failures failed"
[ $failures -eq 0 ]
