#!/usr/bin/env bash
# A stage that stops answering: its peer gives up after pipeline.recv_timeout_s, says in the user's terms what
# it waited for and from which rank, stage and node, and the whole job ends with ExitCode::peer_lost (3) instead
# of hanging. The stall is injected in
# the transport of world rank 1 (tests/e2e/stalled_peer.cpp), which holds it for 60 s at its first message.
# Usage: recv_timeout.sh STALLED_PEER MPIEXEC [MPIEXEC_FLAGS...]
set -u
program=$1; shift
err=$(mktemp)
trap 'rm -f "$err"' EXIT
start=$(date +%s)
"$@" -n 2 "$program" >/dev/null 2>"$err"
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$err" | grep kpipe
failures=0
[ "$rc" -eq 3 ] || { echo "FAIL: exit code $rc, expected 3 (ExitCode::peer_lost)"; failures=1; }
[ "$elapsed" -lt 30 ] || { echo "FAIL: took ${elapsed}s, the stalled rank was not taken down"; failures=1; }
node=$(hostname)
for needle in "$(basename "$program"): rank 0 (stage 0 on node $node): no answer within pipeline.recv_timeout_s = 1 s" \
  "waiting for the gradient of micro-batch 0 from rank 1 (stage 1 on node $node) in step 1" "rg0<1"; do
  grep -qF "$needle" "$err" || { echo "FAIL: message lacks '$needle'"; failures=1; }
done
echo "$((1 - failures)) passed, $failures failed"
[ $failures -eq 0 ]
