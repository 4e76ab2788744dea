#!/usr/bin/env bash
# Checkpoints written beside the training (checkpoint.async = on), 2 ranks:
#  1. each schedule family (1f1b, zb-v, pipedream): the run ends with the param_checksum of the same run
#     checkpointing while it waits (checkpoint.async = off), its files hold byte for byte the tensors of
#     that run's (kpipe-inspect diff), and --resume from one reproduces the losses and final param_checksum;
#  2. a write that fails on rank 1 (the fault-injecting shim, ENOSPC) is handled per checkpoint.on_failure
#     (stop: exit 5, `latest` still step 2; continue: trains on to step 6), nothing of it published;
#  3. SIGKILL to a rank while the write of step 4 is in flight (the shim slows it) and the training goes on:
#     nothing of step 4 published, `latest` still names step 2, and --resume continues bit for bit;
#  4. SIGUSR1 while the write of step 200 is in flight: that write finishes, the current step is written while
#     the training waits: two checkpoints, exit 75, and --resume continues bit for bit;
#  5. bad input: checkpoint.async = on where MPI lacks MPI_THREAD_MULTIPLE (a shim lowers what it reports)
#     is refused with one line naming the key and value, exit 2; auto says so and writes while training waits;
#  6. the same where the snapshot buffer alone takes a rank over memory.limit_per_rank.
# Usage: checkpoint_async_save.sh KPIPE_TRAIN KPIPE_INSPECT FAIL_IO_SHIM THREAD_LEVEL_SHIM MPIEXEC [FLAGS...]
set -u
train=$1; inspect=$2; fail_io=$3; thread_level=$4; shift 4
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passes=0
ok() { passes=$((passes + 1)); }
model=(--model.n_layers 2 --model.seq_len 16 --model.d_model 32 --model.n_heads 2 --train.log_every 100000
       --pipeline.recv_timeout_s 60)
same_checksum() { [ -n "$(final_checksum "$1")" ] && [ "$(final_checksum "$1")" = "$(final_checksum "$2")" ]; }
ck() { printf '%s/step-%08d.h5' "$1" "$2"; }

# 1. Bit for bit on every schedule family.
for schedule in 1f1b zb-v pipedream; do
  w="$dir/$schedule"
  run=(--pipeline-size 2 --microbatches 4 --batch 8 --steps 6 --schedule "$schedule" "${model[@]}" --checkpoint-every 2
       --keep 5)
  [ "$schedule" = zb-v ] && run+=(--chunks 2)
  "$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$w.sync" --checkpoint.async off --metrics "$w.sync.jsonl" \
    2>/dev/null || fail "$schedule: the run writing while it waits failed"
  "$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$w.async" --checkpoint.async on --metrics "$w.async.jsonl" \
    2>"$w.err" || fail "$schedule: the run writing beside the training failed: $(grep kpipe "$w.err" | tail -2)"
  grep -q "written beside the training" "$w.err" && ok || fail "$schedule: no checkpoint written beside the training"
  same_checksum "$w.async.jsonl" "$w.sync.jsonl" && ok || fail "$schedule: writing beside the training changed the run"
  for k in 2 4 6; do
    "$inspect" diff "$(ck "$w.sync" $k)" "$(ck "$w.async" $k)" >"$w.diff" && ok ||
      fail "$schedule: step $k differs from the synchronous save: $(tail -3 "$w.diff")"
  done
  "$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$w.resumed" --checkpoint.resume "$(ck "$w.async" 2)" \
    --metrics "$w.resumed.jsonl" 2>"$w.err" || fail "$schedule: resuming failed: $(grep kpipe "$w.err" | tail -2)"
  diff <(losses "$w.sync.jsonl" | awk '$1 > 2') <(losses "$w.resumed.jsonl") >/dev/null && ok ||
    fail "$schedule: resumed from step 2: losses differ"
  same_checksum "$w.resumed.jsonl" "$w.sync.jsonl" && ok || fail "$schedule: resumed from step 2: param_checksum differs"
done
reference="$dir/1f1b.sync.jsonl"  # 1f1b, 6 steps: the uninterrupted run of 2 and 3
run=(--pipeline-size 2 --microbatches 4 --batch 8 --steps 6 --schedule 1f1b "${model[@]}" --checkpoint-every 2
     --checkpoint.async on)

# 2. A failed write, handled per checkpoint.on_failure, nothing of it published.
for policy in stop continue; do
  w="$dir/fail-$policy"
  timeout 120 env LD_PRELOAD="$fail_io" KPIPE_FAIL_IO_PATH=step-00000004 KPIPE_FAIL_IO_RANK=1 \
    "$@" -x LD_PRELOAD -x KPIPE_FAIL_IO_PATH -x KPIPE_FAIL_IO_RANK -n 2 "$train" "${run[@]}" --checkpoint-dir "$w" \
    --on-checkpoint-failure "$policy" >/dev/null 2>"$w.err"
  rc=$?
  want=0 latest=step-00000006.h5
  [ "$policy" = stop ] && want=5 latest=step-00000002.h5
  [ "$rc" -eq "$want" ] && ok || fail "failed write, $policy: exit $rc, expected $want: $(grep kpipe "$w.err" | tail -3)"
  grep -q "checkpoint step-00000004.h5 not written: rank 1: .*No space left on device" "$w.err" && ok ||
    fail "failed write, $policy: the failure is not reported naming rank 1 and ENOSPC"
  [ ! -e "$w/step-00000004.h5" ] && ! ls "$w"/*.tmp >/dev/null 2>&1 && ok || fail "failed write, $policy: left $(ls "$w")"
  [ "$(head -1 "$w/latest")" = "$latest" ] && "$inspect" "$w" >/dev/null && ok ||
    fail "failed write, $policy: latest = $(head -1 "$w/latest"), expected a loadable $latest"
done

# 3. SIGKILL while a write is in flight (rank 1's part of step 4 waits 60 s): the training runs on to its end.
w="$dir/kill"
env LD_PRELOAD="$fail_io" KPIPE_FAIL_IO_PATH=step-00000004 KPIPE_FAIL_IO_RANK=1 KPIPE_FAIL_IO_SLOW_S=60 \
  "$@" -x LD_PRELOAD -x KPIPE_FAIL_IO_PATH -x KPIPE_FAIL_IO_RANK -x KPIPE_FAIL_IO_SLOW_S -n 2 "$train" "${run[@]}" \
  --checkpoint-dir "$w" --metrics "$w.a.jsonl" 2>"$w.err" &
job=$!
for _ in $(seq 600); do grep -q "fail_io: .* waits" "$w.err" && [ "$(steps_done "$w.a.jsonl")" -ge 6 ] && break; sleep 0.05; done
[ "$(steps_done "$w.a.jsonl")" -ge 6 ] && ok || fail "kill: the training did not go on while step 4 was written"
kill -KILL "$(a_rank $job)"
wait $job
[ $? -ne 0 ] && ok || fail "kill: the killed job exited 0"
[ ! -e "$w/step-00000004.h5" ] && [ "$(head -1 "$w/latest")" = step-00000002.h5 ] && ok ||
  fail "kill: $(ls "$w"), latest = $(head -1 "$w/latest")"
"$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$w" --resume --metrics "$w.b.jsonl" 2>"$w.err" &&
  grep -q "resumed from checkpoint .*step-00000002.h5 (step 2)" "$w.err" && ok || fail "kill: the restart did not load step 2"
diff <(losses "$reference" | awk '$1 > 2') <(losses "$w.b.jsonl") >/dev/null && same_checksum "$w.b.jsonl" "$reference" &&
  ok || fail "kill: the restart does not continue bit for bit"

# 4. SIGUSR1 while the write of step 200 is in flight (rank 1's part waits 2 s): two checkpoints, exit 75.
w="$dir/usr1"
long=(--pipeline-size 2 --microbatches 4 --batch 8 --steps 600 --schedule 1f1b "${model[@]}")
"$@" -n 2 "$train" "${long[@]}" --metrics "$w.straight.jsonl" 2>/dev/null || fail "usr1: the uninterrupted run failed"
env LD_PRELOAD="$fail_io" KPIPE_FAIL_IO_PATH=step-00000200 KPIPE_FAIL_IO_RANK=1 KPIPE_FAIL_IO_SLOW_S=2 \
  "$@" -x LD_PRELOAD -x KPIPE_FAIL_IO_PATH -x KPIPE_FAIL_IO_RANK -x KPIPE_FAIL_IO_SLOW_S -n 2 "$train" "${long[@]}" \
  --checkpoint-every 200 --checkpoint-dir "$w" --checkpoint.async on --metrics "$w.a.jsonl" 2>"$w.err" &
job=$!
for _ in $(seq 600); do grep -q "fail_io: .* waits" "$w.err" && break; sleep 0.05; done
kill -USR1 "$(a_rank $job)"
wait $job
rc=$?
stopped=$(steps_done "$w.a.jsonl")
[ "$rc" -eq 75 ] && ok || fail "usr1: exit $rc, expected 75: $(grep kpipe "$w.err" | tail -3)"
[ "$stopped" -gt 200 ] && [ "$stopped" -lt 400 ] && [ "$(ls "$w"/step-*.h5 | wc -l)" -eq 2 ] &&
  [ -f "$w/step-00000200.h5" ] && [ "$(head -1 "$w/latest")" = "$(printf 'step-%08d.h5' "$stopped")" ] && ok ||
  fail "usr1: after $stopped steps: $(ls "$w"), latest = $(head -1 "$w/latest")"
"$@" -n 2 "$train" "${long[@]}" --checkpoint-dir "$w" --resume --metrics "$w.b.jsonl" 2>/dev/null &&
  diff <(losses "$w.straight.jsonl") <(cat <(losses "$w.a.jsonl") <(losses "$w.b.jsonl")) >/dev/null &&
  same_checksum "$w.b.jsonl" "$w.straight.jsonl" && ok || fail "usr1: the resumed run does not continue bit for bit"

# 5. MPI without MPI_THREAD_MULTIPLE: "on" refused (one line, exit 2), "auto" falls back and says so.
lowered=(-x LD_PRELOAD="$thread_level" -x KPIPE_MPI_THREAD_LEVEL=serialized)
timeout 60 "$@" "${lowered[@]}" -n 2 "$train" "${run[@]}" --checkpoint-dir "$dir/on" >/dev/null 2>"$dir/on.err"
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c kpipe-train "$dir/on.err")" -eq 1 ] &&
  grep -q "checkpoint.async = on: the MPI library provides MPI_THREAD_SERIALIZED" "$dir/on.err" && ok ||
  fail "thread level, on: exit $rc: $(grep kpipe "$dir/on.err")"
timeout 60 "$@" "${lowered[@]}" -n 2 "$train" "${run[@]}" --checkpoint.async auto --checkpoint-dir "$dir/auto" \
  >/dev/null 2>"$dir/auto.err" && grep -q "checkpoint.async = auto: checkpoints are written while the training waits" \
  "$dir/auto.err" && [ -f "$dir/auto/step-00000006.h5" ] && ! grep -q "written beside the training" "$dir/auto.err" && ok ||
  fail "thread level, auto: $(grep kpipe "$dir/auto.err" | head -3)"
# 6. A snapshot buffer that does not fit memory.limit_per_rank (rank 0: 866 KiB with it, 615 KiB without): "on"
# refused before anything is allocated, naming the snapshot; "auto" says why and writes while training waits.
timeout 60 "$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$dir/big" --memory-limit-per-rank 700KiB >/dev/null \
  2>"$dir/big.err"
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c kpipe-train "$dir/big.err")" -eq 1 ] &&
  grep -q "memory.limit_per_rank = 700KiB: rank 0 needs .*snapshot 251 KiB" "$dir/big.err" && ok ||
  fail "memory, on: exit $rc: $(grep kpipe "$dir/big.err")"
timeout 60 "$@" -n 2 "$train" "${run[@]}" --checkpoint.async auto --checkpoint-dir "$dir/fits" \
  --memory-limit-per-rank 700KiB >/dev/null 2>"$dir/fits.err" &&
  grep -q "checkpoint.async = auto: writing checkpoints synchronously: the snapshot buffer (251 KiB)" "$dir/fits.err" &&
  [ -f "$dir/fits/step-00000006.h5" ] && grep -q "every category as predicted" "$dir/fits.err" && ok ||
  fail "memory, auto: $(grep kpipe "$dir/fits.err" | head -3)"
echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
