#!/usr/bin/env bash
# kpipe-train on bad input: exit code 2 and exactly one line on stderr naming the key and the value,
# before any work (no "step" line). Usage: bad_input.sh KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
# Environment (set by ctest): KPIPE_NCCL=1 on builds with NCCL, KPIPE_THREADED_HOST=1 where Kokkos has OpenMP.
set -u
train=$1; shift
mpiexec=("$@")
failures=0
checks=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '[model]\ndmodel = 3\n' > "$work/unknown.toml"
printf '[model]\nd_model = "abc"\n' > "$work/type.toml"

# expect NAME EXPECTED_SUBSTRING... -- COMMAND...
expect() {
  local name=$1; shift
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  checks=$((checks + 1))
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  local lines
  # mpiexec adds its own banner about the failed job: count the program's lines only.
  lines=$(grep -c 'kpipe-train' "$work/err")
  local ok=1
  [ "$rc" -eq 2 ] || { echo "FAIL $name: exit code $rc, expected 2"; ok=0; }
  [ "$lines" -eq 1 ] || { echo "FAIL $name: $lines lines on stderr, expected 1"; ok=0; }
  for n in "${needles[@]}"; do
    grep -qF -- "$n" "$work/err" || { echo "FAIL $name: stderr lacks '$n'"; ok=0; }
  done
  grep -q "^step" "$work/err" && { echo "FAIL $name: training started"; ok=0; }
  if [ $ok -eq 1 ]; then echo "ok   $name: $(cat "$work/err" | grep kpipe-train)"; else sed 's/^/     /' "$work/err"; failures=$((failures + 1)); fi
}

expect unknown-key "model.dmodel" -- "$train" --config "$work/unknown.toml"
expect wrong-type "model.d_model" "abc" -- "$train" --config "$work/type.toml"
expect unknown-option "--model.dmodel" -- "$train" --model.dmodel 4
expect heads "model.d_model" "model.n_heads" -- "$train" --model.d_model 250 --model.n_heads 8
expect microbatches "train.batch" "train.microbatches" -- "$train" --batch 10 --microbatches 4
expect missing-data "data.path" "/nonexistent/corpus.txt" -- "$train" --data /nonexistent/corpus.txt
expect unreadable-data "data.path" "$work" -- "$train" --data "$work"
expect bad-preset "huge" -- "$train" --preset huge
expect world-size "pipeline.pipeline_size" "3" -- "${mpiexec[@]}" -n 3 "$train" --pipeline-size 2
expect too-many-stages "pipeline" -- "${mpiexec[@]}" -n 4 "$train" --pipeline-size 4 --model.n_layers 1 --chunks 2 --schedule interleaved
printf 'B0 F0 S\nF0 B0 S\n' > "$work/bad.sched"  # rank 0 runs a backward before its forward
expect bad-schedule-file "schedule" -- "${mpiexec[@]}" -n 2 "$train" --pipeline-size 2 --microbatches 1 --schedule-file "$work/bad.sched"

expect bad-transport "pipeline.transport" "carrier" -- "$train" --transport carrier
expect kokkos-option "--kokkos-num-threads" "pipeline.threads_per_rank" -- "$train" --kokkos-num-threads=2
expect negative-threads "pipeline.threads_per_rank" "-1" -- "$train" --threads-per-rank -1
if [ "${KPIPE_NCCL:-0}" != 1 ]; then
  expect nccl-on-host-build "pipeline.transport" "nccl" -- "${mpiexec[@]}" -n 2 "$train" --pipeline-size 2 --transport nccl
else  # a GPU node with fewer GPUs than 3 ranks (scripts/gpu-check.sh runs on one GPU)
  expect nccl-ranks-share-a-gpu "pipeline.transport" "refuses two ranks on one GPU" -- \
    "${mpiexec[@]}" -n 3 "$train" --pipeline-size 3 --transport nccl
fi
if [ "${KPIPE_THREADED_HOST:-0}" != 1 ]; then
  expect threads-on-serial "pipeline.threads_per_rank" "no threaded host backend" -- "$train" --threads-per-rank 2
fi

echo "$((checks - failures)) passed, $failures failed"
[ $failures -eq 0 ]
