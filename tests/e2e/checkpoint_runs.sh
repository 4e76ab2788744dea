#!/usr/bin/env bash
# A checkpoint directory belongs to one run: a new run in a directory holding another run's checkpoints is
# refused before it trains (or, with checkpoint.other_runs = keep, writes beside them, skipping a step that is
# theirs with a warning, and prunes only its own, oldest first), --resume continues the run `latest` names, a
# second training in a directory in use is refused while the first runs, and a directory whose parent is
# missing, or a read-only one, is refused at start; a checkpoint of the previous format_version resumes exactly.
# Usage: checkpoint_runs.sh KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; shift
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
mounted=""
trap '[ -n "$mounted" ] && umount "$mounted"; rm -rf "$dir"' EXIT
passes=0
ok() { passes=$((passes + 1)); }
run=(--pipeline-size 2 --microbatches 2 --model.n_layers 2 --train.log_every 1000)
run_of() { sed -n 's/^run //p' "$1/latest"; }
files() { (cd "$1" && ls step-*.h5 2>/dev/null | tr '\n' ' '); }
# refused NAME NEEDLE COMMAND...: exit 2, one kpipe-train line containing NEEDLE, no training.
refused() {
  local name=$1 needle=$2; shift 2
  timeout 120 "$@" >/dev/null 2>"$dir/err"
  local rc=$?
  [ "$rc" -eq 2 ] && ok || fail "$name: exit $rc, expected 2"
  [ "$(grep -c "kpipe-train" "$dir/err")" -eq 1 ] && grep -qF -- "$needle" "$dir/err" && ok ||
    fail "$name: not one line with '$needle': $(grep kpipe "$dir/err")"
  ! grep -q "^step" "$dir/err" && ok || fail "$name: training started"
}

# Run A writes step 5.
timeout 120 "$@" -n 2 "$train" "${run[@]}" --steps 5 --checkpoint-dir "$dir/ck" --checkpoint-every 5 2>/dev/null ||
  fail "run A failed"
a=$(run_of "$dir/ck")
# A new run there is refused, naming run A; nothing changes.
refused "a new run in run A's directory" "another run (run $a: step-00000005.h5)" \
  "$@" -n 2 "$train" "${run[@]}" --steps 4 --checkpoint-dir "$dir/ck" --checkpoint-every 2
[ "$(files "$dir/ck")" = "step-00000005.h5 " ] && ok || fail "the refused run changed $(files "$dir/ck")"
# With other_runs = keep, run B writes 2, 4, 6, 8 beside it and keeps its own newest 2; A's step 5 stays.
timeout 120 "$@" -n 2 "$train" "${run[@]}" --steps 8 --checkpoint-dir "$dir/ck" --checkpoint-every 2 --keep 2 \
  --checkpoint.other_runs keep 2>"$dir/err" || fail "run B (keep): $(grep kpipe "$dir/err" | tail -2)"
b=$(run_of "$dir/ck")
[ -n "$b" ] && [ "$b" != "$a" ] && ok || fail "run B did not get a run of its own ($b)"
[ "$(files "$dir/ck")" = "step-00000005.h5 step-00000006.h5 step-00000008.h5 " ] && ok ||
  fail "after run B: $(files "$dir/ck")"
# --resume continues run B (the run `latest` names), and pruning goes on among B's checkpoints only.
timeout 120 "$@" -n 2 "$train" "${run[@]}" --steps 10 --checkpoint-dir "$dir/ck" --checkpoint-every 2 --keep 2 \
  --checkpoint.other_runs keep --resume 2>"$dir/err" || fail "resuming run B: $(grep kpipe "$dir/err" | tail -2)"
grep -q "resumed from checkpoint .*step-00000008.h5 (step 8)" "$dir/err" && ok || fail "the resume did not load step 8"
[ "$(run_of "$dir/ck")" = "$b" ] && ok || fail "the resumed run is not run B"
[ "$(files "$dir/ck")" = "step-00000005.h5 step-00000008.h5 step-00000010.h5 " ] && ok ||
  fail "after resuming: $(files "$dir/ck")"
# Run C (keep) reaches step 5, where run A's checkpoint is: not written, a warning, and training goes on to
# write its step 6; A's file stays A's.
sum5=$(md5sum <"$dir/ck/step-00000005.h5")
timeout 120 "$@" -n 2 "$train" "${run[@]}" --steps 6 --checkpoint-dir "$dir/ck" --checkpoint-every 5 --keep 2 \
  --checkpoint.other_runs keep --metrics "$dir/c.jsonl" 2>"$dir/err" && ok || fail "run C (keep): exit $?: $(grep kpipe "$dir/err" | tail -2)"
grep -q "warning: checkpoint step-00000005.h5 not written: .*belongs to another run ($a), kept as checkpoint.other_runs = \"keep\" asks; training goes on" "$dir/err" &&
  ok || fail "run C: no warning for step 5: $(grep kpipe "$dir/err")"
[ "$(md5sum <"$dir/ck/step-00000005.h5")" = "$sum5" ] && ok || fail "run C changed run A's step 5"
[ "$(steps_done "$dir/c.jsonl")" -eq 6 ] && ok || fail "run C stopped after $(steps_done "$dir/c.jsonl") steps"

# One training per directory: a second one is refused while the first runs (and the first, sent SIGUSR1,
# still checkpoints and exits 75).
"$@" -n 2 "$train" "${run[@]}" --steps 100000000 --checkpoint-dir "$dir/busy" >/dev/null 2>"$dir/first.err" &
first=$!
for _ in $(seq 600); do grep -q "parameters" "$dir/first.err" && break; sleep 0.05; done
refused "a second training in a directory in use" "is in use by another training (pid" \
  "$@" -n 2 "$train" "${run[@]}" --steps 2 --checkpoint-dir "$dir/busy"
kill -USR1 "$(a_rank $first)"
wait $first
rc=$?
[ "$rc" -eq 75 ] && ok || fail "the first training: exit $rc after SIGUSR1, expected 75"

# Directories refused at start.
refused "a checkpoint directory whose parent is missing" "its parent directory '$dir/nope' does not exist" \
  "$@" -n 2 "$train" "${run[@]}" --steps 2 --checkpoint-dir "$dir/nope/ck"
mkdir -p "$dir/ro"
if mount -t tmpfs -o ro,size=1m tmpfs "$dir/ro" 2>/dev/null; then
  mounted="$dir/ro"
  refused "a read-only checkpoint directory" "Read-only file system" \
    "$@" -n 2 "$train" "${run[@]}" --steps 2 --checkpoint-dir "$dir/ro"
else
  echo "skipping the read-only case: cannot mount a read-only tmpfs here"
fi
# A checkpoint of format_version 2 (FNV-1a hashes; written by the kpipe before 3, kept in tests/io/data) resumes:
# two more steps give an uninterrupted 4-step run's param_checksum, and the new checkpoint is format_version 3.
old=(--pipeline-size 2 --model.d_model 8 --model.n_heads 2 --model.seq_len 8)
cp -r "$(dirname "$0")/../io/data/format_version_2" "$dir/v2"
timeout 120 "$@" -n 2 "$train" "${old[@]}" --steps 4 --metrics "$dir/straight.jsonl" >/dev/null 2>&1 ||
  fail "the uninterrupted 4 steps failed"
timeout 120 "$@" -n 2 "$train" "${old[@]}" --steps 4 --checkpoint-dir "$dir/v2" --resume \
  --metrics "$dir/resumed.jsonl" >/dev/null 2>"$dir/err" || fail "resume from format_version 2: $(grep kpipe "$dir/err")"
[ -n "$(final_checksum "$dir/straight.jsonl")" ] &&
  [ "$(final_checksum "$dir/resumed.jsonl")" = "$(final_checksum "$dir/straight.jsonl")" ] && ok ||
  fail "resumed from format_version 2: param_checksum $(final_checksum "$dir/resumed.jsonl"), uninterrupted $(final_checksum "$dir/straight.jsonl")"
grep -q '^manifest_xxh64 ' "$dir/v2/latest" && [ "$(sed -n 1p "$dir/v2/latest")" = step-00000004.h5 ] && ok ||
  fail "the resumed run's checkpoint is not the one latest names with its xxh64: $(cat "$dir/v2/latest")"
echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
