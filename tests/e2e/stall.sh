#!/usr/bin/env bash
# A rank that stops (SIGSTOP) ends the whole job within pipeline.recv_timeout_s (plus rank 0's grace when
# rank 0 is the one stopped), with a message naming the rank and what the others were waiting in: in a
# pipeline (point-to-point), and with data parallelism where every rank waits in collectives (both reductions).
# Usage: stall.sh KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; shift
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passes=0

# stop NAME VICTIM PATTERN TRAIN_ARGS...: SIGSTOP world rank VICTIM once training runs; the job must end
# within 25 s of it with a non-zero code and a "kpipe-train:" line matching PATTERN (which names the victim).
stop() {
  local name=$1 victim=$2 needle=$3; shift 3
  "${mpi[@]}" -n 2 "$train" "$@" --steps 1000000 --pipeline.recv_timeout_s 3 --train.log_every 1 \
    >/dev/null 2>"$dir/err" &
  local job=$!
  for _ in $(seq 600); do grep -q "^step" "$dir/err" && break; sleep 0.05; done
  local ranks victim_pid
  ranks=$(pgrep -P "$job" | sort -n)
  victim_pid=$(echo "$ranks" | sed -n "$((victim + 1))p")
  kill -STOP "$victim_pid"
  local start=$SECONDS
  local waited=0
  while kill -0 "$job" 2>/dev/null && [ $waited -lt 60 ]; do sleep 0.2; waited=$((SECONDS - start)); done
  if kill -0 "$job" 2>/dev/null; then
    fail "$name: still running 60 s after SIGSTOP of rank $victim"
    kill -KILL $ranks "$job" 2>/dev/null
  fi
  wait "$job"
  local rc=$?
  local took=$((SECONDS - start))
  grep "^kpipe-train:" "$dir/err" | head -2
  [ "$rc" -ne 0 ] && ok || fail "$name: exit code 0"
  [ "$took" -le 25 ] && ok || fail "$name: took ${took}s after the SIGSTOP"
  grep "^kpipe-train:" "$dir/err" | grep -qE -- "$needle" && ok || fail "$name: no 'kpipe-train:' line matching '$needle'"
}
ok() { passes=$((passes + 1)); }
mpi=("$@")

# A collective names the ranks and their nodes: "rank 1 (node n1) never reached it".
stop "pipeline, rank 1 stopped" 1 "<1\)|rank 1( \(node [^)]*\))? (never reached|reached it, then)" --pipeline-size 2 \
  --microbatches 2
stop "data parallel allreduce, rank 1 stopped" 1 "rank 1( \(node [^)]*\))? (never reached|reached it, then)" --data-parallel 2 \
  --microbatches 2 --pipeline.dp_reduction allreduce
# The ordered reduction (the default): replica 0 sends its sum to replica 1 (a bounded send) and waits in
# replica 1's broadcast of the final sum (a bounded collective).
stop "data parallel ordered, rank 1 stopped" 1 "rank 1( \(node [^)]*\))? (never reached|reached it, then)|delivering .* ss[0-9.]*>1\)" --data-parallel 2 \
  --microbatches 2
stop "data parallel allreduce, rank 0 stopped" 0 "rank 0( \(node [^)]*\))? \(which names" --data-parallel 2 --microbatches 2 \
  --pipeline.dp_reduction allreduce
echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
