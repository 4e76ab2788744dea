#!/usr/bin/env bash
# What a job meets at its ends: a run with checkpoint.dir writes its last step's checkpoint and says where;
# resuming a run with nothing left to train exits 0 on any layout (1 rank, 2 stages, an asynchronous schedule),
# in one line, with no memory report or throughput; a resumed run's summary counts its own steps; a timeout
# past the longest one (1e300 s, which overflowed the clock's nanoseconds) is refused in one line.
# Usage: run_ends.sh KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; shift
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passes=0
ok() { passes=$((passes + 1)); }
model=(--microbatches 4 --batch 8 --model.n_layers 2 --model.seq_len 16 --model.d_model 32 --model.n_heads 2
       --train.log_every 1000)

# A run of 6 steps checkpointing every 4: steps 4 and 6 (the last), the last one named on the log.
timeout 120 "$@" -n 2 "$train" "${model[@]}" --pipeline-size 2 --steps 6 --checkpoint-dir "$dir/ck" \
  --checkpoint-every 4 --metrics "$dir/a.jsonl" 2>"$dir/a.err" || fail "the run failed: $(tail -n 3 "$dir/a.err")"
[ "$(cd "$dir/ck" && ls step-*.h5 | xargs)" = "step-00000004.h5 step-00000006.h5" ] && ok ||
  fail "checkpoints: $(ls "$dir/ck" | xargs)"
grep -qF "kpipe-train: checkpoint written: $dir/ck/step-00000006.h5 (step 6)" "$dir/a.err" && ok ||
  fail "the last step's checkpoint is not named: $(grep checkpoint "$dir/a.err")"

# Nothing left to train: exit 0, one line, nothing measured, on every layout, for the finished run (step 6 of
# 6) and with fewer steps asked for than the checkpoint has.
nothing_left() {  # nothing_left NAME DIR STEPS COMMAND...: resumes DIR's step 6 (final param_checksum $sum)
  local name=$1 ck=$2 steps=$3; shift 3
  timeout 120 "$@" --steps "$steps" --checkpoint-dir "$ck" --resume >"$dir/out" 2>"$dir/err"
  local rc=$?
  [ "$rc" -eq 0 ] && ok || fail "$name: exit code $rc: $(grep -v '^ ' "$dir/err" | tail -n 3)"
  [ "$(grep -c 'nothing left to train' "$dir/err")" -eq 1 ] &&
    grep -qF "kpipe-train: nothing left to train: resumed at step 6, train.steps = $steps (param_checksum $sum)" "$dir/err" &&
    ok || fail "$name: not the one line: $(grep kpipe-train "$dir/err")"
  grep -qE "tok/s|memory per rank|a bug|error" "$dir/err" && fail "$name: $(grep -E 'tok/s|memory|bug|error' "$dir/err")" || ok
}
sum=$(final_checksum "$dir/a.jsonl")
nothing_left "one rank" "$dir/ck" 6 "$train" "${model[@]}"
nothing_left "two stages" "$dir/ck" 6 "$@" -n 2 "$train" "${model[@]}" --pipeline-size 2
nothing_left "two stages, fewer steps" "$dir/ck" 3 "$@" -n 2 "$train" "${model[@]}" --pipeline-size 2
# An asynchronous run's (its checkpoint holds the weight versions in flight).
timeout 120 "$@" -n 2 "$train" "${model[@]}" --pipeline-size 2 --schedule pipedream --steps 6 \
  --checkpoint-dir "$dir/async" --metrics "$dir/async.jsonl" 2>"$dir/async.err" ||
  fail "the pipedream run failed: $(tail -n 3 "$dir/async.err")"
sum=$(final_checksum "$dir/async.jsonl")
nothing_left "pipedream" "$dir/async" 6 "$@" -n 2 "$train" "${model[@]}" --pipeline-size 2 --schedule pipedream

# Resumed at step 6 for 3 steps more: the summary counts this run's 3, not 9.
timeout 120 "$@" -n 2 "$train" "${model[@]}" --pipeline-size 2 --steps 9 --checkpoint-dir "$dir/ck" --resume \
  2>"$dir/b.err" || fail "the resumed run failed: $(tail -n 3 "$dir/b.err")"
grep -q "^done: 3 steps (steps 7 to 9, resumed at step 6) in " "$dir/b.err" && ok ||
  fail "resumed summary: $(grep '^done' "$dir/b.err")"

# A timeout past the longest: one line, exit 2, on every rank alike.
timeout 60 "$@" -n 2 "$train" "${model[@]}" --pipeline-size 2 --steps 2 --pipeline.recv_timeout_s 1e300 \
  >/dev/null 2>"$dir/c.err"
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c kpipe-train "$dir/c.err")" -eq 1 ] &&
  grep -qF "pipeline.recv_timeout_s = 1e+300: expected seconds in (0, 1e+06]" "$dir/c.err" && ok ||
  fail "recv_timeout_s = 1e300: exit $rc: $(grep kpipe "$dir/c.err")"

echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
