#!/usr/bin/env bash
# A checkpoint write that fails is never published. An LD_PRELOAD shim (tests/support/fail_io.c) makes
# write() or fsync() fail with ENOSPC or EIO on the checkpoint file of step 4, in one rank only: the job
# says which rank, file and errno, `latest` and the older checkpoints stay as they were (nothing pruned),
# and the job stops with exit code 5 or goes on (checkpoint.on_failure), never crashing at exit. Then the
# same on a real full file system (a 3 MiB tmpfs, where this machine lets root mount one; skipped elsewhere).
# Usage: checkpoint_failure.sh KPIPE_TRAIN KPIPE_INSPECT FAIL_IO_SHIM MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; inspect=$2; shim=$3; shift 3
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
mounted=""
trap '[ -n "$mounted" ] && umount "$mounted"; rm -rf "$dir"' EXIT
run=(--pipeline-size 2 --microbatches 2 --steps 6 --model.n_layers 2 --checkpoint-every 2 --keep 2
     --pipeline.recv_timeout_s 20)
passes=0
ok() { passes=$((passes + 1)); }

# failing RANK CALL ERRNO POLICY EXPECTED_RC: step 4's file fails on RANK.
failing() {
  local rank=$1 call=$2 errno=$3 policy=$4 want=$5
  shift 5
  local ck="$dir/ck-$rank-$call-$errno-$policy" what="rank $rank $call $errno on_failure=$policy"
  timeout 120 env LD_PRELOAD="$shim" KPIPE_FAIL_IO_PATH=step-00000004 KPIPE_FAIL_IO_RANK="$rank" \
    KPIPE_FAIL_IO_CALL="$call" KPIPE_FAIL_IO_ERRNO="$errno" \
    "$@" -x LD_PRELOAD -x KPIPE_FAIL_IO_PATH -x KPIPE_FAIL_IO_RANK -x KPIPE_FAIL_IO_CALL -x KPIPE_FAIL_IO_ERRNO \
    -n 2 "$train" "${run[@]}" --checkpoint-dir "$ck" --on-checkpoint-failure "$policy" >/dev/null 2>"$dir/err"
  local rc=$?
  grep "not written" "$dir/err"
  [ "$rc" -eq "$want" ] && ok || fail "$what: exit code $rc, expected $want: $(grep -v '^step' "$dir/err" | head -5)"
  local text
  [ "$errno" = EIO ] && text="Input/output error" || text="No space left on device"
  grep -q "checkpoint step-00000004.h5 not written: rank $rank: .*$text" "$dir/err" && ok ||
    fail "$what: the message does not name rank $rank and '$text'"
  [ ! -e "$ck/step-00000004.h5" ] && ok || fail "$what: the failed checkpoint was published"
  ! ls "$ck"/*.tmp >/dev/null 2>&1 && ok || fail "$what: the failed write left $(ls "$ck")"
  [ -e "$ck/step-00000002.h5" ] && ok || fail "$what: the good step 2 was pruned: $(ls "$ck")"
  "$inspect" "$ck/step-00000002.h5" >/dev/null && ok || fail "$what: step 2 does not verify"
  if [ "$policy" = stop ]; then
    [ "$(head -1 "$ck/latest")" = step-00000002.h5 ] && ok || fail "$what: latest = $(head -1 "$ck/latest")"
  else
    [ "$(head -1 "$ck/latest")" = step-00000006.h5 ] && ok || fail "$what: latest = $(head -1 "$ck/latest")"
    "$inspect" "$ck" >/dev/null && ok || fail "$what: step 6 does not verify"
  fi
}

failing 1 write ENOSPC stop 5 "$@"
failing 0 write EIO continue 0 "$@"     # rank 0 also creates the file's layout: that fails first
failing 1 fsync EIO continue 0 "$@"
failing 0 fsync ENOSPC stop 5 "$@"

# The resumed run continues from step 2 of the stopped one.
"$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$dir/ck-1-write-ENOSPC-stop" --resume >/dev/null 2>"$dir/err" &&
  grep -q "resumed from checkpoint .*step-00000002.h5 (step 2)" "$dir/err" && ok ||
  fail "resuming after the failed write: $(grep -v '^step' "$dir/err" | head -3)"

# A real full file system: the first checkpoint (2 MB) fits in 3 MiB, the second does not.
mkdir -p "$dir/small"
if mount -t tmpfs -o size=3m tmpfs "$dir/small" 2>/dev/null; then
  mounted="$dir/small"
  timeout 120 "$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$dir/small/ck" >/dev/null 2>"$dir/err"
  rc=$?
  grep "not written" "$dir/err"
  [ "$rc" -eq 5 ] && ok || fail "full tmpfs: exit code $rc, expected 5: $(grep -v '^step' "$dir/err" | head -5)"
  grep -q "not written: rank [01]: .*No space left on device" "$dir/err" && ok || fail "full tmpfs: no ENOSPC named"
  [ "$(head -1 "$dir/small/ck/latest")" = step-00000002.h5 ] && ok || fail "full tmpfs: latest is not step 2"
  "$inspect" "$dir/small/ck" >/dev/null && ok || fail "full tmpfs: step 2 does not verify"
else
  echo "skipping the tmpfs case: cannot mount a tmpfs here (not root, or not allowed)"
fi
echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
