#!/usr/bin/env bash
# Stop signals as a batch system sends them, to one rank of 2:
#  1. SIGUSR1 during start-up: the handlers are installed first thing in main, before MPI, Kokkos, data and
#     model (seen as: SIGUSR1 is caught while the job has printed nothing yet); the run does its first
#     step, checkpoints it and exits with 75 (requeue me).
#  2. SIGTERM mid-run: one checkpoint, exit code 143 (terminated: not to be requeued).
#  3. SIGTERM, then SIGUSR1 before the step ends: SIGTERM stays (143).
# Usage: stop_signals.sh KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; shift
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run=(--pipeline-size 2 --microbatches 4 --batch 8 --model.n_layers 2 --model.seq_len 16 --model.d_model 32
     --model.n_heads 2 --train.log_every 1000)
catches_usr1() {  # the process has a handler for SIGUSR1 (bit 10 of SigCgt)
  local mask
  mask=$(sed -n 's/^SigCgt:\t//p' "/proc/$1/status" 2>/dev/null)
  [ -n "$mask" ] && (((0x$mask >> 9) & 1))
}
checkpoints() { ls "$1"/step-*.h5 2>/dev/null | wc -l; }

# 1. SIGUSR1 while starting.
"$@" -n 2 "$train" "${run[@]}" --steps 100000 --checkpoint-dir "$dir/ck1" --metrics "$dir/1.jsonl" 2>"$dir/1.err" &
job=$!
rank=
for _ in $(seq 2000); do
  rank=$(a_rank $job)
  [ -n "$rank" ] && catches_usr1 "$rank" && break
  sleep 0.005
done
printed=$(grep -c "kpipe" "$dir/1.err")
kill -USR1 "$rank"
wait $job
rc=$?
[ "$printed" -eq 0 ] || fail "SIGUSR1 was not caught before start-up ended (kpipe-train had printed: $(head -n 2 "$dir/1.err"))"
[ "$rc" -eq 75 ] || fail "USR1 during start-up: exit code $rc, expected 75: $(grep kpipe "$dir/1.err")"
grep -q "signal 10 after step 1: checkpointed" "$dir/1.err" || fail "USR1 during start-up: no checkpoint after the first step: $(grep kpipe "$dir/1.err")"
[ "$(head -n 1 "$dir/ck1/latest" 2>/dev/null)" = step-00000001.h5 ] || fail "USR1 during start-up: latest = $(cat "$dir/ck1/latest" 2>&1)"

# 2. SIGTERM mid-run.
"$@" -n 2 "$train" "${run[@]}" --steps 100000 --checkpoint-dir "$dir/ck2" --metrics "$dir/2.jsonl" 2>"$dir/2.err" &
job=$!
for _ in $(seq 600); do [ "$(steps_done "$dir/2.jsonl")" -ge 3 ] && break; sleep 0.05; done
kill -TERM "$(a_rank $job)"
wait $job
rc=$?
stopped=$(steps_done "$dir/2.jsonl")
[ "$rc" -eq 143 ] || fail "SIGTERM: exit code $rc, expected 143: $(grep kpipe "$dir/2.err")"
grep -q "signal 15 after step $stopped: checkpointed; exiting with code 143 (terminated)" "$dir/2.err" ||
  fail "SIGTERM: $(grep kpipe "$dir/2.err")"
[ "$(checkpoints "$dir/ck2")" -eq 1 ] && [ "$(head -n 1 "$dir/ck2/latest")" = "$(printf 'step-%08d.h5' "$stopped")" ] ||
  fail "SIGTERM: checkpoints $(ls "$dir/ck2" | tr '\n' ' '), stopped after $stopped steps"

# 3. Both: SIGTERM and SIGUSR1 to the same rank, back to back.
"$@" -n 2 "$train" "${run[@]}" --steps 100000 --checkpoint-dir "$dir/ck3" --metrics "$dir/3.jsonl" 2>"$dir/3.err" &
job=$!
for _ in $(seq 600); do [ "$(steps_done "$dir/3.jsonl")" -ge 3 ] && break; sleep 0.05; done
rank=$(a_rank $job)
kill -TERM "$rank"
kill -USR1 "$rank"
wait $job
rc=$?
[ "$rc" -eq 143 ] || fail "SIGTERM then SIGUSR1: exit code $rc, expected 143: $(grep kpipe "$dir/3.err")"

echo "USR1 during start-up, TERM mid-run, TERM + USR1; $failures failed"
[ $failures -eq 0 ]
