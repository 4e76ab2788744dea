#!/usr/bin/env bash
# A stage that stops answering: its peer gives up after pipeline.recv_timeout_s, names rank, step and
# action, and the whole job ends with a non-zero code instead of hanging.
# Usage: recv_timeout.sh KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; shift
err=$(mktemp)
trap 'rm -f "$err"' EXIT
start=$(date +%s)
KPIPE_TEST_STALL=1:60 "$@" -n 2 "$train" --pipeline-size 2 --pipeline.recv_timeout_s 1 --steps 2 \
  >/dev/null 2>"$err"
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$err" | grep kpipe
failures=0
[ "$rc" -ne 0 ] || { echo "FAIL: exit code 0"; failures=1; }
[ "$elapsed" -lt 30 ] || { echo "FAIL: took ${elapsed}s, the stalled rank was not taken down"; failures=1; }
for needle in "rank 0" "step 0" "(rg0<1)" "pipeline.recv_timeout_s = 1"; do
  grep -qF "$needle" "$err" || { echo "FAIL: message lacks '$needle'"; failures=1; }
done
echo "$((1 - failures)) passed, $failures failed"
[ $failures -eq 0 ]
