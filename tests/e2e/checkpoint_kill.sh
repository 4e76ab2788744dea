#!/usr/bin/env bash
# SIGKILL to one rank while the checkpoint of step 6 is half written (the LD_PRELOAD shim
# tests/support/fail_io.c, KPIPE_FAIL_IO_SLOW_S, holds every rank's first write into that checkpoint's
# temporary file): the job dies, step 6 stays an incomplete step-00000006.h5.<run>.tmp, `latest` still names
# step 3, and the restart with --resume loads step 3 (the lock died with its holder), reproduces the
# uninterrupted run's losses and final param_checksum, and removes the stale temporary file.
# Usage: checkpoint_kill.sh KPIPE_TRAIN FAIL_IO_SHIM MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1 shim=$2; shift 2
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run=(--pipeline-size 2 --microbatches 4 --batch 8 --steps 10 --model.n_layers 2 --model.seq_len 16
     --model.d_model 32 --model.n_heads 2 --train.log_every 1000)

"$@" -n 2 "$train" "${run[@]}" --metrics "$dir/straight.jsonl" 2>/dev/null || fail "uninterrupted run failed"

LD_PRELOAD="$shim" KPIPE_FAIL_IO_PATH=step-00000006.h5. KPIPE_FAIL_IO_SLOW_S=60 \
  "$@" -x LD_PRELOAD -x KPIPE_FAIL_IO_PATH -x KPIPE_FAIL_IO_SLOW_S -n 2 "$train" "${run[@]}" \
  --checkpoint-dir "$dir/ck" --checkpoint-every 3 --metrics "$dir/a.jsonl" 2>"$dir/a.err" &
job=$!
for _ in $(seq 600); do grep -q "fail_io: .* waits" "$dir/a.err" && break; sleep 0.05; done
grep -q "fail_io: .* waits" "$dir/a.err" || fail "the writer never paused"
kill -KILL "$(a_rank $job)"
wait $job
rc=$?
[ "$rc" -ne 0 ] || fail "the killed job exited 0"
ls "$dir"/ck/step-00000006.h5.*.tmp >/dev/null 2>&1 || fail "no incomplete step-00000006.h5.*.tmp: $(ls "$dir/ck")"
[ ! -e "$dir/ck/step-00000006.h5" ] || fail "step-00000006.h5 was published although its writer was killed"
[ "$(head -1 "$dir/ck/latest")" = "step-00000003.h5" ] || fail "latest = $(head -1 "$dir/ck/latest")"

"$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$dir/ck" --checkpoint-every 3 --resume --metrics "$dir/b.jsonl" \
  2>"$dir/b.err" || fail "restart failed: $(cat "$dir/b.err")"
grep "resumed from" "$dir/b.err"
grep -q "resumed from checkpoint .*step-00000003.h5 (step 3)" "$dir/b.err" || fail "the restart did not load step 3"
diff <(losses "$dir/straight.jsonl" | sed -n '4,$p') <(losses "$dir/b.jsonl") >/dev/null ||
  fail "losses after the restart differ from the uninterrupted run"
diff <(losses "$dir/straight.jsonl" | sed -n '1,6p') <(losses "$dir/a.jsonl" | sed -n '1,6p') >/dev/null ||
  fail "losses before the kill differ from the uninterrupted run"
[ "$(final_checksum "$dir/b.jsonl")" = "$(final_checksum "$dir/straight.jsonl")" ] &&
  [ -n "$(final_checksum "$dir/b.jsonl")" ] || fail "final param_checksum differs"
! ls "$dir"/ck/*.tmp >/dev/null 2>&1 || fail "a stale temporary file survived the next checkpoint: $(ls "$dir/ck")"
echo "$((1 - (failures > 0))) passed, $failures failed"
[ $failures -eq 0 ]
