#!/usr/bin/env bash
# Silent data corruption in kpipe-train, end to end: 2 replicas of one stage; an LD_PRELOAD shim
# (tests/support/gradient_fault_preload.cpp) flips one bit of the gradient sum as replica 1 receives it in step 5.
# The checkpoint of step 6 compares the replicas first: the job exits with 6 on every rank, one line naming the
# step, stage, both replicas and the node, the metrics' record naming the node to exclude; step 6 is not written,
# `latest` names step 3, which records its state hash; resumed without the fault, the run ends with the
# uninterrupted run's param_checksum.
# Usage: silent_corruption.sh KPIPE_TRAIN KPIPE_INSPECT SHIM MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; inspect=$2; shim=$3; shift 3
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run=(--data-parallel 2 --microbatches 2 --steps 8 --model.n_layers 2 --pipeline.recv_timeout_s 20)
passes=0
ok() { passes=$((passes + 1)); }

timeout 120 "$@" -n 2 "$train" "${run[@]}" --metrics "$dir/reference.jsonl" >/dev/null 2>"$dir/err" ||
  { fail "the run without a fault: $(tail -3 "$dir/err")"; exit 1; }
reference=$(final_checksum "$dir/reference.jsonl")
params=$(sed -n 's/.*"num_params":\([0-9]*\).*/\1/p' "$dir/reference.jsonl")

timeout 120 env LD_PRELOAD="$shim" KPIPE_GRADIENT_FAULT="$params:5:11:22" KPIPE_GRADIENT_FAULT_RANK=1 \
  "$@" -x LD_PRELOAD -x KPIPE_GRADIENT_FAULT -x KPIPE_GRADIENT_FAULT_RANK -n 2 "$train" "${run[@]}" \
  --checkpoint-dir "$dir/ck" --checkpoint-every 3 --metrics "$dir/faulty.jsonl" >/dev/null 2>"$dir/err"
rc=$?
grep "exit code 6" "$dir/err"
[ "$rc" -eq 6 ] && ok || fail "exit code $rc, expected 6: $(grep -v '^step' "$dir/err" | tail -5)"
[ "$(grep -c 'exit code 6' "$dir/err")" -eq 1 ] && ok || fail "not one line: $(grep 'exit code 6' "$dir/err")"
node=$(sed -n 's/.*"exclude":"\([^"]*\)".*/\1/p' "$dir/faulty.jsonl")
[ -n "$node" ] && ok || fail "no \"exclude\" in the metrics: $(tail -1 "$dir/faulty.jsonl")"
grep -q "kpipe-train: the replicas' weights and optimizer state differ after step 6: stage 0: replica 0 (rank 0 on node $node) and replica 1 (rank 1 on node $node) differ (no majority tells which is wrong); nothing of it is checkpointed; exit code 6: resubmit excluding node $node\$" "$dir/err" &&
  ok || fail "the line: $(grep 'exit code 6' "$dir/err")"
[ ! -e "$dir/ck/step-00000006.h5" ] && ! ls "$dir/ck"/*.tmp >/dev/null 2>&1 && ok || fail "written: $(ls "$dir/ck")"
[ "$(head -1 "$dir/ck/latest")" = step-00000003.h5 ] && ok || fail "latest = $(head -1 "$dir/ck/latest")"
"$inspect" "$dir/ck" | grep -Eq "state hash [0-9a-f]{16}" && ok || fail "kpipe-inspect shows no state hash"

timeout 120 "$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$dir/ck" --checkpoint-every 3 --resume \
  --metrics "$dir/resumed.jsonl" >/dev/null 2>"$dir/err" ||
  fail "the resumed run: $(grep -v '^step' "$dir/err" | tail -3)"
grep -q "resumed from checkpoint .*step-00000003.h5 (step 3)" "$dir/err" && ok || fail "not resumed from step 3"
[ -n "$reference" ] && [ "$(final_checksum "$dir/resumed.jsonl")" = "$reference" ] && ok ||
  fail "resumed: param_checksum $(final_checksum "$dir/resumed.jsonl"), uninterrupted $reference"

echo "silent_corruption: $passes checks passed, $failures failed"
[ "$failures" -eq 0 ]
