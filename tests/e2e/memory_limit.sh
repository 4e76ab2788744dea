#!/usr/bin/env bash
# The memory limit end to end (docs/user-guide.md, "Memory"): a model that does not fit 9 MiB per rank on one
# rank, nor on two without recomputation, is refused before any allocation with the predicted figures (exit
# code 2, one line, on every layout); kpipe-sim recommend finds a two-rank layout that fits, and the command
# line it prints trains, with every rank's memory as predicted.
# Usage: memory_limit.sh KPIPE_TRAIN KPIPE_SIM MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1 sim=$2; shift 2
mpiexec=("$@")
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--model.n_layers 4 --model.d_model 64 --model.n_heads 4 --model.seq_len 256 --train.batch 16)
limit=9MiB

refused() {
  local name=$1; shift
  "$@" >"$work/out" 2>"$work/err"
  local rc=$? ok=1
  [ "$rc" -eq 2 ] || { echo "FAIL $name: exit code $rc, expected 2"; ok=0; }
  [ "$(grep -c 'kpipe-train' "$work/err")" -eq 1 ] || { echo "FAIL $name: not one line"; ok=0; }
  grep -qF "memory.limit_per_rank = $limit: rank" "$work/err" || { echo "FAIL $name: no limit and rank named"; ok=0; }
  grep -qF "activations" "$work/err" || { echo "FAIL $name: no breakdown"; ok=0; }
  grep -qF "kpipe-sim recommend finds a layout that fits" "$work/err" || { echo "FAIL $name: no recommender named"; ok=0; }
  grep -q "^step" "$work/err" && { echo "FAIL $name: training started"; ok=0; }
  if [ $ok -eq 1 ]; then echo "ok   $name: $(grep kpipe-train "$work/err")"; else sed 's/^/     /' "$work/err"; failures=$((failures + 1)); fi
}

refused one-rank "$train" "${model[@]}" --steps 2 --microbatches 16 --recompute block --memory-limit-per-rank $limit
refused two-ranks-without-recomputation "${mpiexec[@]}" -n 2 "$train" "${model[@]}" --steps 2 --pipeline-size 2 \
  --microbatches 16 --schedule 1f1b --memory-limit-per-rank $limit

"$sim" recommend --ranks 2 --memory-per-rank $limit "${model[@]}" --top 3 >"$work/recommend" 2>&1
rc=$?
if [ $rc -ne 0 ]; then echo "FAIL recommend: exit code $rc"; cat "$work/recommend"; failures=$((failures + 1)); fi
command=$(grep -m1 '^    mpiexec -n 2 kpipe-train' "$work/recommend" | sed 's/^    mpiexec -n 2 kpipe-train //')
if [ -z "$command" ]; then
  echo "FAIL recommend: no command line"; cat "$work/recommend"; failures=$((failures + 1))
else
  case "$command" in *"--recompute none"*) echo "FAIL recommend: a layout without recomputation: $command"; failures=$((failures + 1));; esac
  # shellcheck disable=SC2086  # the recommended options, word by word
  "${mpiexec[@]}" -n 2 "$train" $command --steps 2 >"$work/out" 2>"$work/err"
  rc=$?
  if [ $rc -eq 0 ] && grep -qF "every category as predicted" "$work/err"; then
    echo "ok   recommended: $command"
  else
    echo "FAIL recommended layout (exit $rc): $command"; sed 's/^/     /' "$work/err"; failures=$((failures + 1))
  fi
fi
# Nothing fits anywhere: the recommender says what it takes.
"$sim" recommend --ranks 1 --memory-per-rank 1MiB "${model[@]}" >"$work/none" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -qF "nothing fits: the leanest layout on 1 ranks needs" "$work/none"; then
  echo "ok   nothing fits: $(grep 'not even\|it fits' "$work/none")"
else
  echo "FAIL nothing fits (exit $rc)"; cat "$work/none"; failures=$((failures + 1))
fi
exit $failures
