#!/usr/bin/env bash
# scripts/slurm/train-cpu.sbatch, unmodified, under a real single-node Slurm (tests/slurm/cluster.sh), with
# a tiny model (sbatch and kpipe-train options on the command line override the script's defaults):
#   runs       the job trains to the end: COMPLETED, exit 0; its param_checksum is the reference
#   cpus       --cpus-per-task reaches srun: a rank may run on that many CPUs, with as many OpenMP and
#              BLAS threads
#   usr1       scancel --signal=USR1 --batch mid-run: one checkpoint, exit 75, requeued, resumed from
#              `latest`; losses and final param_checksum equal the uninterrupted run's
#   startup    the same signal while the job starts, three times: to the batch shell as soon as the job
#              runs, to it while srun starts the ranks (an srun that drops it), and to the ranks as soon as
#              they have their handlers: requeued, resumed, same checksum
#   timelimit  --time=1 --signal=B:USR1@50: Slurm's warning reaches a checkpoint before the kill; the
#              job is requeued and resumes from it
#   scancel    plain scancel mid-run: the job ends (CANCELLED) and is not requeued
# Usage: tests/slurm/run.sh [BUILD_DIR [CASE...]]   (default: build, every case; needs BUILD_DIR/apps/kpipe-train)
# KPIPE_SLURM_SCRIPT tests another copy of the script (a site's adapted one, or a deliberately broken one).
# As root, with Debian's slurmctld, slurmd, slurm-client and munge installed (.ci/jobs/50-slurm.sh does
# both). Every wait is bounded; the daemons are stopped by PID at the end, also on failure or interrupt.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$repo/build}" 2>/dev/null && pwd) || { echo "tests/slurm: no build directory ${1:-$repo/build}"; exit 2; }
train=$build/apps/kpipe-train
script=${KPIPE_SLURM_SCRIPT:-$repo/scripts/slurm/train-cpu.sbatch}
shift $(($# > 0))
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(runs cpus usr1 startup_batch startup_srun startup_ranks timelimit scancel)
# The uninterrupted run is the reference for the others.
[ "${cases[0]}" = runs ] || cases=(runs "${cases[@]}")
[ -x "$train" ] || { echo "tests/slurm: no $train: build kpipe first"; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "tests/slurm: needs root (slurmd starts jobs as their user)"; exit 2; }
for cmd in munged slurmctld slurmd sbatch scancel scontrol squeue sinfo python3; do
  command -v "$cmd" >/dev/null || { echo "tests/slurm: $cmd not found (apt-get install slurmctld slurmd slurm-client munge)"; exit 2; }
done
source "$here/cluster.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/kpipe-slurm.XXXXXX")
failures=0 passed=0
fail() { echo "  FAIL: $*"; failures=$((failures + 1)); }
finish() {
  trap - EXIT INT TERM
  cluster_stop || fail "processes were left behind"
  if [ "$failures" -gt 0 ]; then
    cluster_logs
    echo "tests/slurm: files kept in $work"
  else
    rm -rf "$work"
  fi
  echo "tests/slurm: $passed cases passed, $failures failures in $SECONDS s"
  exit $((failures > 0))
}
trap finish EXIT
trap 'echo "tests/slurm: interrupted"; exit 130' INT TERM

# kpipe-train on the jobs' PATH: a wrapper that notes what each rank was given (CPUs it may run on, thread
# counts), then becomes the real program (exec: same PID, so signals reach it).
mkdir -p "$work/bin"
cat >"$work/bin/kpipe-train" <<EOF
#!/bin/bash
echo "rank=\${SLURM_PROCID:-?} restart=\${SLURM_RESTART_COUNT:-0} cpus=\$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) omp=\${OMP_NUM_THREADS:-} blas=\${OPENBLAS_NUM_THREADS:-}" >>"\$RUN_DIR/probe"
exec "$train" "\$@"
EOF
chmod +x "$work/bin/kpipe-train"
export PATH=$work/bin:$PATH

echo "tests/slurm: $(slurmd -V), $(munged --version 2>&1 | head -n 1); work in $work"
cluster_start "$work/cluster" || exit 1
ncpus=$(sinfo -h -n kpipe-ci -o %c)
echo "tests/slurm: node kpipe-ci up with $ncpus CPUs ($SECONDS s)"

# ---- helpers --------------------------------------------------------------------------------------------
model=(--preset tiny --batch 8 --microbatches 4 --model.n_layers 2 --model.seq_len 16 --model.d_model 32
       --model.n_heads 2 --train.log_every 1000 --checkpoint-every 0)
steps=5000  # about 3 s on 2 CPUs: a signal lands mid-run, and so does the script's repeat (1 s)

# submit NAME [sbatch options] -- [kpipe-train options]: sbatch the script from a new directory
# $work/N-NAME (its RUN_DIR and output file go there); sets job and dir.
submitted=0
submit() {
  local name=$1 opts=()
  shift
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  submitted=$((submitted + 1))
  dir=$work/$submitted-$name
  mkdir -p "$dir"
  job=$(cd "$dir" && RUN_DIR=$dir sbatch --parsable --job-name="$name" "${opts[@]}" "$script" "$@") ||
    { fail "sbatch failed"; job=; return 1; }
}
field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
ended() { case $(field "$1" JobState) in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;; esac; return 1; }
# Ended for good: after its requeued run, or without a requeue (the script did not ask for one).
ended_for_good() { ended "$job" && { [ "$(field "$job" Restarts)" -ge 1 ] || ! output_has "requeueing job"; }; }
# wait_for SECONDS WHAT COMMAND...: poll COMMAND every 0.2 s; a failure after SECONDS.
wait_for() {
  local limit=$1 what=$2 t0=$SECONDS
  shift 2
  until "$@"; do
    if [ $((SECONDS - t0)) -ge "$limit" ]; then
      fail "no $what after $limit s (job $job: $(field "$job" JobState), $(field "$job" Reason))"
      return 1
    fi
    sleep 0.2
  done
}
ended_or_requeued() { ended "$job" || [ "$(field "$job" Restarts)" -ge 1 ]; }
is_running() { [ "$(field "$job" JobState)" = RUNNING ]; }
no_job_processes() { [ -z "$(cluster_processes)" ]; }
# grep -c prints 0 and fails where nothing matches: count once, whatever grep's status.
steps_done() { local n=; [ -f "$1" ] && n=$(grep -c '"step"' "$1" || true); echo "${n:-0}"; }
at_least_steps() { [ "$(steps_done "$1")" -ge "$2" ]; }
losses() { sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p' "$@"; }
final_checksum() { sed -n 's/.*"param_checksum":"\([0-9a-f]*\)".*/\1/p' "$1"; }
output() { cat "$dir/kpipe-$job.out" 2>/dev/null; }
# grep reads the file itself: under pipefail, `output | grep -q` fails when cat dies of SIGPIPE on a long log.
output_has() { grep -qF -- "$1" "$dir/kpipe-$job.out" 2>/dev/null; }
expect_state() {  # expect_state STATE RESTARTS
  local state restarts
  state=$(field "$job" JobState) restarts=$(field "$job" Restarts)
  [ "$state" = "$1" ] || fail "job $job is $state, expected $1"
  [ "$restarts" = "$2" ] || fail "job $job restarted $restarts times, expected $2"
}
expect_output() { output_has "$1" || fail "the job's output lacks \"$1\""; }
# The checks after a run that was stopped by SIGUSR1 and then requeued and run to the end.
expect_resumed_to_the_end() {
  local stopped=$1
  expect_state COMPLETED 1
  local count
  count=$(ls "$dir"/checkpoints/step-*.h5 2>/dev/null | wc -l)
  [ "$count" -eq 1 ] || fail "$count checkpoints, expected the one written on the signal: $(ls "$dir/checkpoints" 2>&1 | tr '\n' ' ')"
  [ "$(head -n 1 "$dir/checkpoints/latest" 2>/dev/null)" = "$(printf 'step-%08d.h5' "$stopped")" ] ||
    fail "latest = $(cat "$dir/checkpoints/latest" 2>&1), the run stopped after $stopped steps"
  expect_output "requeueing job $job"
  expect_output "resumed from checkpoint $dir/checkpoints/$(printf 'step-%08d.h5' "$stopped")"
  [ -n "$reference" ] && [ "$(final_checksum "$dir/metrics-$job-1.jsonl")" = "$reference" ] || fail "final param_checksum $(final_checksum "$dir/metrics-$job-1.jsonl") differs from the uninterrupted run's ($reference)"
}
run_case() {  # run_case NAME: runs case_NAME, says PASS or FAIL with its time
  local before=$failures t0=$SECONDS
  echo "tests/slurm: --- $1"
  "case_$1"
  if [ "$failures" -eq "$before" ]; then
    passed=$((passed + 1))
    echo "tests/slurm: PASS $1 ($((SECONDS - t0)) s)"
  else
    echo "tests/slurm: FAIL $1 ($((SECONDS - t0)) s); job output:"
    output | sed 's/^/    /' | tail -n 30
  fi
  [ -n "${job:-}" ] && ! ended "$job" && scancel "$job" 2>/dev/null
  wait_for 60 "end of every job process" no_job_processes
}

# ---- cases ----------------------------------------------------------------------------------------------
reference=
case_runs() {
  submit runs --ntasks=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
  wait_for 180 "end of the job" ended "$job" || return
  expect_state COMPLETED 0
  [ "$(field "$job" ExitCode)" = 0:0 ] || fail "exit code $(field "$job" ExitCode)"
  reference=$(final_checksum "$dir/metrics-$job-0.jsonl")
  [ -n "$reference" ] || fail "no final param_checksum in $dir/metrics-$job-0.jsonl"
  cp "$dir/metrics-$job-0.jsonl" "$work/reference.jsonl"
  [ "$(grep -c 'cpus=1 omp=1 blas=1' "$dir/probe")" -eq 2 ] || fail "ranks were given: $(cat "$dir/probe")"
  echo "  $steps steps on 2 ranks, param_checksum $reference"
}

case_cpus() {
  if [ "$ncpus" -lt 2 ]; then echo "  skipped: the node has $ncpus CPU"; return; fi
  submit cpus --ntasks=1 --cpus-per-task=2 -- "${model[@]}" --steps 20 || return
  wait_for 120 "end of the job" ended "$job" || return
  expect_state COMPLETED 0
  grep -q 'cpus=2 omp=2 blas=2' "$dir/probe" || fail "a rank with --cpus-per-task=2 was given: $(cat "$dir/probe")"
  echo "  the rank was given: $(cut -d' ' -f3- "$dir/probe")"
}

case_usr1() {
  submit usr1 --ntasks=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
  wait_for 120 "20 steps done" at_least_steps "$dir/metrics-$job-0.jsonl" 20 || return
  scancel --signal=USR1 --batch "$job"
  wait_for 240 "end of the requeued job" ended_for_good || return
  local stopped
  stopped=$(steps_done "$dir/metrics-$job-0.jsonl")
  [ "$stopped" -lt "$steps" ] || fail "the run ended before the signal arrived"
  expect_output "signal 10 after step $stopped: checkpointed; exiting with code 75"
  expect_resumed_to_the_end "$stopped"
  diff <(losses "$work/reference.jsonl") <(losses "$dir/metrics-$job-0.jsonl" "$dir/metrics-$job-1.jsonl") >/dev/null ||
    fail "the losses of the two runs differ from the uninterrupted run's"
  echo "  stopped after step $stopped, requeued, resumed, finished: param_checksum equal to the reference"
}

# USR1 while the job starts. Where it lands (the batch shell before srun, srun, or kpipe-train before its
# first step) depends on timing; the outcome must not: requeued, resumed, the same final weights.
startup_outcome() {
  if output_has "signal 10 after step"; then
    local stopped
    stopped=$(output | sed -n 's/.*signal 10 after step \([0-9]*\): checkpointed.*/\1/p' | head -n 1)
    echo "  kpipe-train checkpointed after step $stopped"
    expect_resumed_to_the_end "$stopped"
  elif output_has "requeueing job $job"; then
    echo "  the signal ended the start before kpipe-train ran: $(output | grep -m1 'stopped on SIGUSR1')"
    expect_state COMPLETED 1
    [ "$(final_checksum "$dir/metrics-$job-1.jsonl")" = "$reference" ] || fail "final param_checksum differs from the reference"
  else
    fail "the signal was lost: the job ran to the end with neither a checkpoint on it nor a requeue"
  fi
}
case_startup_batch() {
  submit startup-batch --ntasks=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
  # RUNNING is reported a moment before the batch script's process exists, and Slurm drops a signal sent to a
  # batch step that has none yet (seen under load): wait for the script's first line, written after its traps
  # are set and before srun starts kpipe-train.
  wait_for 60 "running batch script" output_has "job $job run 0:" || return
  scancel --signal=USR1 --batch "$job"
  wait_for 240 "end of the requeued job" ended_for_good || return
  startup_outcome
}
# USR1 while srun starts the ranks, where srun can lose it (it passes a signal on only to running ranks).
# A stand-in srun drops the first USR1 and only then becomes the real one, so that the signal lands in that
# window every time: the script must pass it on again.
case_startup_srun() {
  mkdir -p "$work/dropping-srun"
  cat >"$work/dropping-srun/srun" <<EOF
#!/bin/bash
if [ "\${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then
  dropped=
  trap 'dropped=1' USR1
  : >"\$RUN_DIR/srun-starting"
  for _ in \$(seq 300); do [ -n "\$dropped" ] && break; sleep 0.2; done
  trap - USR1
fi
exec $(command -v srun) "\$@"
EOF
  chmod +x "$work/dropping-srun/srun"
  PATH=$work/dropping-srun:$PATH submit startup-srun --ntasks=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
  wait_for 60 "srun starting" test -e "$dir/srun-starting" || return
  scancel --signal=USR1 --batch "$job"
  wait_for 240 "end of the requeued job" ended_for_good || return
  startup_outcome
}
# The ranks of JOB (the real kpipe-train processes) that have a handler for SIGUSR1 (SigCgt bit 10).
ranks_with_handler() {
  local pid mask n=0
  for pid in $(pgrep -f "^$train "); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$job" || continue
    mask=$(sed -n 's/^SigCgt:\t//p' "/proc/$pid/status" 2>/dev/null)
    [ -n "$mask" ] && (((0x$mask >> 9) & 1)) && n=$((n + 1))
  done
  [ "$n" -ge 2 ]
}
case_startup_ranks() {
  submit startup-ranks --ntasks=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
  wait_for 60 "ranks with a SIGUSR1 handler" ranks_with_handler || return
  # To the job's steps (every rank), not the batch shell: what --signal=USR1@N without B: does.
  scancel --signal=USR1 "$job"
  echo "  signal sent when rank 0 had done $(steps_done "$dir/metrics-$job-0.jsonl") steps"
  wait_for 240 "end of the requeued job" ended_for_good || return
  startup_outcome
}

case_timelimit() {
  submit timelimit --ntasks=1 --cpus-per-task=1 --time=1 --signal=B:USR1@50 -- "${model[@]}" --steps 1000000 || return
  wait_for 150 "requeued run that resumed" output_has "resumed from checkpoint" || return
  local stopped
  stopped=$(output | sed -n 's/.*signal 10 after step \([0-9]*\): checkpointed.*/\1/p' | head -n 1)
  [ -n "$stopped" ] || fail "no checkpoint on the warning signal"
  output_has "DUE TO TIME LIMIT" && fail "the time limit killed the job before it checkpointed"
  expect_output "requeueing job $job"
  expect_output "resumed from checkpoint $dir/checkpoints/$(printf 'step-%08d.h5' "${stopped:-0}")"
  [ "$(field "$job" Restarts)" = 1 ] || fail "restarts: $(field "$job" Restarts)"
  echo "  the warning arrived at step $stopped (the limit is 60 s); checkpointed, requeued, resumed"
  scancel "$job"
  wait_for 60 "end of the job" ended "$job"
}

case_scancel() {
  submit scancel --ntasks=2 --cpus-per-task=1 -- "${model[@]}" --steps 1000000 || return
  wait_for 120 "20 steps done" at_least_steps "$dir/metrics-$job-0.jsonl" 20 || return
  scancel "$job"
  wait_for 60 "end of the job" ended_or_requeued || return
  # Longer than a requeue would take to show (cred_expire 5 s + a scheduling pass).
  sleep 10
  expect_state CANCELLED 0
  output_has "requeueing" && fail "a plain scancel requeued the job"
  [ "$(field "$job" JobState)" = CANCELLED ] && [ "$(field "$job" Restarts)" = 0 ] &&
    echo "  ended as CANCELLED after $(steps_done "$dir/metrics-$job-0.jsonl") steps, not requeued"
}

for c in "${cases[@]}"; do
  declare -F "case_$c" >/dev/null || { fail "no case $c"; continue; }
  run_case "$c"
  job=
done
