#!/usr/bin/env bash
# kpipe-train on bad input: exit code 2 and exactly one line on stderr naming the key and the value,
# before any work (no "step" line), within a bound (every command runs under `timeout 60`): also when only
# rank 0 finds it (an output under a missing directory), and for inputs that are FIFOs or devices (refused,
# never opened). Usage: bad_input.sh KPIPE_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
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
  timeout 60 "$@" >"$work/out" 2>"$work/err" </dev/null
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

# Found on rank 0 only: every rank stops at once, one line.
expect metrics-dir "output.metrics" "$work/missing/m.jsonl" -- "${mpiexec[@]}" -n 2 "$train" --pipeline-size 2 --metrics "$work/missing/m.jsonl"
expect trace-dir "output.trace" "$work/missing/t.h5" -- "${mpiexec[@]}" -n 2 "$train" --pipeline-size 2 --trace "$work/missing/t.h5"
expect timeline-dir "output.timeline" "$work/missing/tl.h5" -- "${mpiexec[@]}" -n 2 "$train" --pipeline-size 2 --timeline "$work/missing/tl.h5"
expect metrics-device "output.metrics" "character device" -- "$train" --metrics /dev/full
# FIFOs and devices as inputs: refused without being opened (no writer ever comes).
mkfifo "$work/fifo"
expect fifo-config "$work/fifo" "FIFO" -- "$train" --config "$work/fifo"
expect fifo-data "data.path" "FIFO" -- "${mpiexec[@]}" -n 2 "$train" --pipeline-size 2 --data "$work/fifo"
expect fifo-schedule "pipeline.schedule_file" "FIFO" -- "${mpiexec[@]}" -n 2 "$train" --pipeline-size 2 --schedule-file "$work/fifo"
expect device-data "data.path" "character device" -- "$train" --data /dev/zero
# A token file whose HDF5 signature is damaged is not trained on as text.
printf '\x88HDF\r\n\x1a\nsome bytes of a damaged token file' > "$work/tokens.h5"
expect damaged-token-file "data.path" "signature" -- "$train" --data "$work/tokens.h5"
expect world-size-overflow "pipeline.data_parallel = 6700417" -- "$train" --pipeline-size 641 --data-parallel 6700417 \
  --microbatches 6700417 --batch 6700417 --model.n_layers 700

# Asynchronous schedules: bad combinations, on every rank alike.
expect 2bw-microbatches "train.microbatches = 1" "pipeline.pipeline_size = 2" "2bw" -- "${mpiexec[@]}" -n 2 "$train" --pipeline-size 2 --microbatches 1 --schedule 2bw
expect vertical-sync-sync "pipeline.vertical_sync = 1" "1f1b" -- "$train" --vertical-sync 1
expect async-dp-group "pipeline.dp_reduction_group = 2" "pipedream" -- "${mpiexec[@]}" -n 2 "$train" --data-parallel 2 --microbatches 4 --schedule pipedream --pipeline.dp_reduction_group 2

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
