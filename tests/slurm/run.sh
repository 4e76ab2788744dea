#!/usr/bin/env bash
# scripts/slurm/train-cpu.sbatch, unmodified, under a real two-node Slurm on this machine (tests/slurm/cluster.sh:
# each node a network, host-name and mount namespace of its own), with a tiny model (sbatch and kpipe-train
# options on the command line override the script's defaults). On one node:
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
#   srun_fails srun cannot start the ranks (KPIPE_SRUN_MPI=bogus): FAILED, non-zero, the script's one line
#   memlimit   the ranks in a memory cgroup the test makes (1.5 GiB): a layout that cannot fit is refused
#              (exit 2, one line: the share and the need) where it would be OOM-killed; one that fits trains,
#              and its start-up line says the cgroup bound the limit, shared by the node's 2 ranks
# On both nodes, 2 ranks each (skipped, one line, where network namespaces cannot be made):
#   nodes_1f1b 1F1B across the nodes: the param_checksum of one rank (and of the same layout on one host,
#              mpiexec); kpipe sees 2 nodes of 2 ranks as Slurm placed them; the last step's checkpoint written
#   nodes_usr1 USR1 -> checkpoint -> requeue -> resume across both nodes, bit for bit
#   node_lost  SIGKILL to kpn2's ranks mid-run: the others end within pipeline.recv_timeout_s, exit 3, a line
#              names a rank on kpn2; FAILED; `latest` loads: the job resubmitted onto kpn1 alone (2 ranks for
#              4 stages' checkpoint) resumes from it and ends bit for bit as one rank
#   link_down  kpn2's network link taken down mid-run: the same, and the ranks on kpn2 end too; shows that
#              the ranks on different nodes talk over the network (TCP), not shared memory
#   gpu_script train-gpu.sbatch, unmodified but for a CPU build, on both nodes (a GPU count Slurm believes in):
#              its srun code is the CPU script's, the ranks' node-local numbers are Slurm's, same checksum
# Only when named (the figures of docs/cluster.md's failure table, not CI):
#   rank_killed  SIGKILL to one rank (rank 1, on kpn1) mid-run
#   oom          the 6.95 GiB layout in the 1.5 GiB cgroup with memory.limit_per_rank = none: the OOM killer
#   sdc_resubmit kpipe-train ending on silent data corruption on kpn2 (exit code 6, its metrics naming the node;
#              the wrapper stands in for it: no real run can be made to show it): the job is FAILED, and the
#              script submits it again without kpn2; the new job runs on kpn1 and completes
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
[ ${#cases[@]} -gt 0 ] ||
  cases=(runs cpus usr1 startup_batch startup_srun startup_ranks timelimit scancel srun_fails memlimit
         nodes_1f1b nodes_usr1 node_lost gpu_script sdc_resubmit link_down)
# The uninterrupted run is the reference for the one-node signal cases.
case " ${cases[*]} " in *" usr1 "* | *" startup_"*) [ "${cases[0]}" = runs ] || cases=(runs "${cases[@]}") ;; esac
[ -x "$train" ] || { echo "tests/slurm: no $train: build kpipe first"; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "tests/slurm: needs root (slurmd starts jobs as their user)"; exit 2; }
for cmd in munged slurmctld slurmd sbatch scancel scontrol squeue sinfo python3; do
  command -v "$cmd" >/dev/null || { echo "tests/slurm: $cmd not found (apt-get install slurmctld slurmd slurm-client munge)"; exit 2; }
done
source "$here/cluster.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/kpipe-slurm.XXXXXX")
failures=0 passed=0 memory_cgroup=
fail() { echo "  FAIL: $*"; failures=$((failures + 1)); }
finish() {
  trap - EXIT INT TERM
  cluster_stop || fail "processes were left behind"
  [ -z "$memory_cgroup" ] || rmdir "$memory_cgroup" || fail "could not remove $memory_cgroup"
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
echo "rank=\${SLURM_PROCID:-?} restart=\${SLURM_RESTART_COUNT:-0} cpus=\$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) omp=\${OMP_NUM_THREADS:-} blas=\${OPENBLAS_NUM_THREADS:-} node=\$(hostname) local=\${SLURM_LOCALID:-?}" >>"\$RUN_DIR/probe"
# The memlimit case: into the memory cgroup the test made (the rank and everything it starts).
if [ -n "\${KPIPE_TEST_CGROUP:-}" ]; then echo \$\$ >"\$KPIPE_TEST_CGROUP/cgroup.procs" || exit 99; fi
# The sdc_resubmit case: on node KPIPE_TEST_SDC_NODE, kpipe-train's end on silent data corruption (rank 0 writes
# the metrics' record, runtime/metrics.hpp; every rank exits with 6).
if [ "\$(hostname)" = "\${KPIPE_TEST_SDC_NODE:-}" ]; then
  while [ \$# -gt 1 ] && [ "\$1" != --metrics ]; do shift; done
  [ "\${SLURM_PROCID:-0}" != 0 ] || echo '{"exclude":"'"\$(hostname)"'","nodes":["'"\$(hostname)"'"],"ranks":[1],"silent_corruption":true,"what":"the replicas differ"}' >>"\$2"
  exit 6
fi
exec "$train" "\$@"
EOF
chmod +x "$work/bin/kpipe-train"
export PATH=$work/bin:$PATH

echo "tests/slurm: $(slurmd -V), $(munged --version 2>&1 | head -n 1); work in $work"
cluster_start "$work/cluster" || { fail "the cluster did not start"; exit 1; }
ncpus=$(sinfo -h -n kpn1 -o %c)
if [ -n "$cluster_net" ]; then
  echo "tests/slurm: nodes ${cluster_nodes[*]} up in $cluster_net with $ncpus CPUs each ($SECONDS s)"
  # Open MPI between the nodes: TCP over the nodes' one network (what a site names for its fabric).
  export OMPI_MCA_btl_tcp_if_include=$cluster_net OMPI_MCA_oob_tcp_if_include=$cluster_net
else
  echo "tests/slurm: one node kpn1 with $ncpus CPUs ($SECONDS s); the two-node cases are skipped: $cluster_split_why"
fi

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
  job=$(cd "$dir" && RUN_DIR=$dir sbatch --parsable --job-name="$name" "${opts[@]}" "${submit_script:-$script}" "$@") ||
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
# Step lines (validation and checkpoint records carry a step too); grep -c prints 0 and fails where nothing
# matches: count once, whatever grep's status.
steps_done() { local n=; [ -f "$1" ] && n=$(grep -c '"step_seconds"' "$1" || true); echo "${n:-0}"; }
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
# The checks after a run that was stopped by SIGUSR1 and then requeued and run to the end:
# expect_resumed_to_the_end STOPPED [STEPS REFERENCE] (default: the one-node runs' steps and reference).
expect_resumed_to_the_end() {
  local stopped=$1 last=${2:-$steps} ref=${3:-$reference} names
  expect_state COMPLETED 1
  names=$(cd "$dir/checkpoints" 2>/dev/null && ls step-*.h5 | xargs)
  [ "$names" = "$(printf 'step-%08d.h5 step-%08d.h5' "$stopped" "$last")" ] ||
    fail "checkpoints: $names; expected the one written on the signal (step $stopped) and the last step's ($last)"
  [ "$(head -n 1 "$dir/checkpoints/latest" 2>/dev/null)" = "$(printf 'step-%08d.h5' "$last")" ] ||
    fail "latest = $(cat "$dir/checkpoints/latest" 2>&1), the run ended at step $last"
  expect_output "requeueing job $job"
  expect_output "resumed from checkpoint $dir/checkpoints/$(printf 'step-%08d.h5' "$stopped")"
  [ -n "$ref" ] && [ "$(final_checksum "$dir/metrics-$job-1.jsonl")" = "$ref" ] || fail "final param_checksum $(final_checksum "$dir/metrics-$job-1.jsonl") differs from the uninterrupted run's ($ref)"
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
  submit runs --ntasks-per-node=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
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
  submit cpus --ntasks-per-node=1 --cpus-per-task=2 -- "${model[@]}" --steps 20 || return
  wait_for 120 "end of the job" ended "$job" || return
  expect_state COMPLETED 0
  grep -q 'cpus=2 omp=2 blas=2' "$dir/probe" || fail "a rank with --cpus-per-task=2 was given: $(cat "$dir/probe")"
  echo "  the rank was given: $(cut -d' ' -f3- "$dir/probe")"
}

case_usr1() {
  submit usr1 --ntasks-per-node=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
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
  submit startup-batch --ntasks-per-node=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
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
  PATH=$work/dropping-srun:$PATH submit startup-srun --ntasks-per-node=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
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
  submit startup-ranks --ntasks-per-node=2 --cpus-per-task=1 -- "${model[@]}" --steps $steps || return
  wait_for 60 "ranks with a SIGUSR1 handler" ranks_with_handler || return
  # To the job's steps (every rank), not the batch shell: what --signal=USR1@N without B: does.
  scancel --signal=USR1 "$job"
  echo "  signal sent when rank 0 had done $(steps_done "$dir/metrics-$job-0.jsonl") steps"
  wait_for 240 "end of the requeued job" ended_for_good || return
  startup_outcome
}

case_timelimit() {
  submit timelimit --ntasks-per-node=1 --cpus-per-task=1 --time=1 --signal=B:USR1@50 -- "${model[@]}" --steps 1000000 || return
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
  submit scancel --ntasks-per-node=2 --cpus-per-task=1 -- "${model[@]}" --steps 1000000 || return
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

# ---- srun, memory cgroups ------------------------------------------------------------------------------
case_srun_fails() {
  KPIPE_SRUN_MPI=bogus submit srun-fails --ntasks-per-node=2 --cpus-per-task=1 -- "${model[@]}" --steps 20 || return
  wait_for 60 "end of the job" ended "$job" || return
  expect_state FAILED 0
  [ "$(field "$job" ExitCode)" != 0:0 ] || fail "exit code 0:0"
  local line="failed (exit code 1) before kpipe-train started training: srun could not start the ranks (srun --mpi=bogus"
  [ "$(grep -cF "before kpipe-train started training" "$dir/kpipe-$job.out")" = 1 ] && expect_output "$line" ||
    fail "not the one line \"$line\""
  echo "  FAILED, $(field "$job" ExitCode): $(grep -F "before kpipe-train started" "$dir/kpipe-$job.out" | cut -c1-110)..."
}

# A memory cgroup of 1.5 GiB, made here (v2 where the root delegates the memory controller, else v1); the
# ranks of a job submitted with KPIPE_TEST_CGROUP set join it (the kpipe-train wrapper above).
make_memory_cgroup() {
  local name=kpipe-test-$$ limit=$((1536 << 20))
  [ -z "$memory_cgroup" ] || return 0
  if grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null && mkdir "/sys/fs/cgroup/$name" 2>/dev/null; then
    memory_cgroup=/sys/fs/cgroup/$name
    echo "$limit" >"$memory_cgroup/memory.max"
  elif mkdir "/sys/fs/cgroup/memory/$name" 2>/dev/null; then
    memory_cgroup=/sys/fs/cgroup/memory/$name
    echo "$limit" >"$memory_cgroup/memory.limit_in_bytes"
  fi
}
case_memlimit() {
  make_memory_cgroup
  [ -n "$memory_cgroup" ] || { echo "  skipped: cannot make a memory cgroup here"; return; }
  # 6.95 GiB in all (the small preset at d_model 4096), 2 ranks in 1.5 GiB: OOM-killed without the check.
  KPIPE_TEST_CGROUP=$memory_cgroup submit memlimit-refused --ntasks-per-node=2 --cpus-per-task=1 -- \
    --model.d_model 4096 --model.n_heads 32 --steps 2 || return
  wait_for 120 "end of the job" ended "$job" || return
  expect_state FAILED 0
  [ "$(field "$job" ExitCode)" = 2:0 ] || fail "exit code $(field "$job" ExitCode), expected 2:0"
  expect_output "kpipe-train: error: memory.limit_per_rank = auto ("
  expect_output "the memory cgroup's limit (1.50 GiB less"
  # The model's parameters alone exceed the share (refused before the model is described), or the memory
  # table's worst rank does: either way the line names the share and what is needed.
  expect_output "shared by 2 ranks): "
  expect_output " need"
  output_has "step     1/" && fail "training started"
  echo "  refused: $(grep -F 'error: memory.limit_per_rank' "$dir/kpipe-$job.out" | cut -c1-160)..."
  KPIPE_TEST_CGROUP=$memory_cgroup submit memlimit-fits --ntasks-per-node=2 --cpus-per-task=1 -- "${model[@]}" --steps 20 || return
  wait_for 120 "end of the job" ended "$job" || return
  expect_state COMPLETED 0
  expect_output "the memory cgroup's limit (1.50 GiB less"
  echo "  fits: $(grep -F 'kpipe-train: memory.limit_per_rank' "$dir/kpipe-$job.out")"
}

# ---- two nodes ------------------------------------------------------------------------------------------
two_nodes() { [ -n "$cluster_net" ] || { echo "  skipped: one node ($cluster_split_why)"; return 1; }; }
nodes_steps=400
nodes=(--nodes=2 --ntasks-per-node=2 --cpus-per-task=1)
# reference STEPS: the final param_checksum of one rank training the two-node cases' model for STEPS steps,
# without Slurm (once; its metrics in $work/reference-STEPS.jsonl).
reference() {
  local file=$work/reference-$1.jsonl
  [ -s "$file" ] || "$train" "${model[@]}" --schedule 1f1b --steps "$1" --metrics "$file" >/dev/null 2>&1
  final_checksum "$file"
}
# The real kpipe-train processes of the job on NODE (every node: "").
job_ranks() {
  local pid
  for pid in $(pgrep -f "^$train "); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$job" || continue
    [ -z "${1:-}" ] || tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURMD_NODENAME=$1" || continue
    echo "$pid"
  done
}
no_job_ranks() { [ -z "$(job_ranks "${1:-}")" ]; }
# A node slurmctld missed for SlurmdTimeout is DOWN: an administrator's resume brings it back once it answers.
node_back() {
  case $(sinfo -h -n "$1" -o %t) in
    idle) return 0 ;;
    down* | drain* | drng*) scontrol update NodeName="$1" State=RESUME 2>/dev/null ;;
  esac
  return 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

case_nodes_1f1b() {
  two_nodes || return
  local ref layout
  ref=$(reference $nodes_steps)
  submit nodes-1f1b "${nodes[@]}" -- "${model[@]}" --schedule 1f1b --steps $nodes_steps || return
  wait_for 180 "end of the job" ended "$job" || return
  expect_state COMPLETED 0
  [ -n "$ref" ] && [ "$(final_checksum "$dir/metrics-$job-0.jsonl")" = "$ref" ] ||
    fail "param_checksum $(final_checksum "$dir/metrics-$job-0.jsonl") on 2 nodes, $ref on one rank"
  # Where the ranks ran, as Slurm says (host name, node-local id) and as kpipe found it (MPI's node split).
  layout=$(sed -n 's/^rank=\([0-9]*\) .* node=\([^ ]*\) local=\([0-9]*\).*/\1:\2:\3/p' "$dir/probe" | sort | xargs)
  [ "$layout" = "0:kpn1:0 1:kpn1:1 2:kpn2:0 3:kpn2:1" ] || fail "ranks ran as $layout (rank:node:local id)"
  expect_output "kpipe-train: 4 ranks on 2 nodes: kpn1 (ranks 0-1), kpn2 (ranks 2-3)"
  expect_output "shared by 2 ranks): rank"  # MPI found 2 ranks on each node
  expect_output "checkpoint written: $dir/checkpoints/$(printf 'step-%08d.h5' $nodes_steps) (step $nodes_steps)"
  echo "  2 nodes x 2 ranks ($layout): param_checksum $ref, as one rank"
  # The same layout on one host (4 ranks, shared memory between them; a 2-CPU node of this cluster takes at most
  # 2 ranks): mpiexec, outside Slurm.
  timeout 180 mpiexec --allow-run-as-root --oversubscribe -n 4 "$train" "${model[@]}" --schedule 1f1b --pipeline-size 4 \
    --steps $nodes_steps --metrics "$work/one-host.jsonl" >/dev/null 2>&1
  [ "$(final_checksum "$work/one-host.jsonl")" = "$ref" ] ||
    fail "param_checksum $(final_checksum "$work/one-host.jsonl") on one host, $ref on one rank"
}

case_nodes_usr1() {
  two_nodes || return
  local ref stopped
  ref=$(reference $nodes_steps)
  submit nodes-usr1 "${nodes[@]}" -- "${model[@]}" --schedule 1f1b --steps $nodes_steps || return
  wait_for 120 "20 steps done" at_least_steps "$dir/metrics-$job-0.jsonl" 20 || return
  scancel --signal=USR1 --batch "$job"
  wait_for 240 "end of the requeued job" ended_for_good || return
  stopped=$(steps_done "$dir/metrics-$job-0.jsonl")
  [ "$stopped" -lt $nodes_steps ] || fail "the run ended before the signal arrived"
  expect_output "signal 10 after step $stopped: checkpointed; exiting with code 75"
  expect_resumed_to_the_end "$stopped" $nodes_steps "$ref"
  diff <(losses "$work/reference-$nodes_steps.jsonl") <(losses "$dir/metrics-$job-0.jsonl" "$dir/metrics-$job-1.jsonl") \
    >/dev/null || fail "the losses of the two runs differ from one rank's"
  echo "  stopped after step $stopped on 2 nodes, requeued, resumed: param_checksum $ref, as one rank"
}

# A node lost mid-run: the job's ranks on kpn2 killed (node_lost) or kpn2's link taken down (link_down).
lost_timeout=5
# --no-requeue: Slurm would requeue a job whose node it finds DOWN (NODE_FAIL) by itself; here its end is looked at.
lose_node() {  # lose_node kill|link: sets lost_dir, lost_at; the node goes mid-step, a checkpoint published
  two_nodes || return 1
  submit "node-lost-$1" "${nodes[@]}" --no-requeue -- "${model[@]}" --schedule 1f1b --steps $nodes_steps \
    --checkpoint-every 100 --pipeline.recv_timeout_s $lost_timeout || return 1
  wait_for 120 "a checkpoint" test -e "$dir/checkpoints/latest" || return 1
  wait_for 60 "10 steps after it" at_least_steps "$dir/metrics-$job-0.jsonl" 110 || return 1
  lost_dir=$dir lost_at=$(now)
  if [ "$1" = kill ]; then kill -KILL $(job_ranks kpn2); else cluster_link kpn2 down; fi
}
# The ranks on kpn1 end within pipeline.recv_timeout_s (plus the time the abort takes), exit 3, and one of
# them names a rank on kpn2 (waiting for it between stages, or missing it in a collective); every rank of the
# job ends (a cut-off node's by themselves: their own timeout, then a bounded abort). STATES: the job states
# Slurm may record (it sees a cut-off node's end only once it marks the node DOWN).
expect_lost() {  # expect_lost STATES
  wait_for $((lost_timeout + 20)) "end of the ranks on kpn1" no_job_ranks kpn1 || return
  local kpn1_s all_s line
  kpn1_s=$(since "$lost_at")
  wait_for $((lost_timeout + 30)) "end of every rank" no_job_ranks || return
  all_s=$(since "$lost_at")
  wait_for 60 "end of the job" ended "$job" || return
  case " $1 " in *" $(field "$job" JobState) "*) ;; *) fail "job $job is $(field "$job" JobState), expected $1" ;; esac
  [ "$(field "$job" ExitCode)" = 0:0 ] && fail "exit code 0:0"
  line=$(grep -m1 -E "^kpipe-train: rank [01] \((stage [01] on )?node kpn1\): .*(node kpn2\)|\(node kpn2\) )" "$dir/kpipe-$job.out")
  [ -n "$line" ] || fail "no line naming a rank on kpn2: $(grep '^kpipe-train: rank' "$dir/kpipe-$job.out")"
  echo "  ranks on kpn1 ended after ${kpn1_s} s (pipeline.recv_timeout_s = $lost_timeout), every rank after ${all_s} s;" \
    "job $(field "$job" JobState), exit code $(field "$job" ExitCode): ${line:0:200}"
}
case_node_lost() {
  local ref
  ref=$(reference $nodes_steps)
  lose_node kill || return
  expect_lost FAILED
  # `latest` loads: the job submitted again, onto the node left (2 ranks, 2 stages each: kpipe reshards), resumes
  # from it and ends as one rank does.
  local latest
  latest=$(head -n 1 "$lost_dir/checkpoints/latest")
  submit node-lost-resubmitted --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --nodelist=kpn1 -- "${model[@]}" \
    --schedule 1f1b --steps $nodes_steps --checkpoint-every 25 --checkpoint-dir "$lost_dir/checkpoints" || return
  wait_for 180 "end of the job" ended "$job" || return
  expect_state COMPLETED 0
  expect_output "resumed from checkpoint $lost_dir/checkpoints/$latest"
  if [ -n "$ref" ] && [ "$(final_checksum "$dir/metrics-$job-0.jsonl")" = "$ref" ]; then
    echo "  resubmitted onto kpn1 alone (2 ranks): resumed from $latest, param_checksum as one rank's"
  else
    fail "resubmitted: param_checksum $(final_checksum "$dir/metrics-$job-0.jsonl"), one rank's $ref"
  fi
}
case_link_down() {
  lose_node link || return
  expect_lost "FAILED NODE_FAIL"
  cluster_link kpn2 up
  # `latest` is a whole checkpoint: kpipe-inspect reads every byte of it.
  "$build/apps/kpipe-inspect" "$lost_dir/checkpoints" >"$lost_dir/inspect" 2>&1 ||
    fail "kpipe-inspect $lost_dir/checkpoints: $(tail -n 1 "$lost_dir/inspect")"
  wait_for 60 "kpn2 back in service" node_back kpn2 || sinfo -N -o '  %N %T %E' 
}

case_rank_killed() {
  two_nodes || return
  submit rank-killed "${nodes[@]}" --no-requeue -- "${model[@]}" --schedule 1f1b --steps $nodes_steps \
    --checkpoint-every 100 --pipeline.recv_timeout_s $lost_timeout || return
  wait_for 60 "10 steps after a checkpoint" at_least_steps "$dir/metrics-$job-0.jsonl" 110 || return
  local victim at
  for victim in $(job_ranks kpn1); do tr '\0' '\n' <"/proc/$victim/environ" | grep -qx SLURM_PROCID=1 && break; done
  at=$(now)
  kill -KILL "$victim"
  wait_for 60 "end of every rank" no_job_ranks || return
  echo "  every rank ended after $(since "$at") s"
  wait_for 60 "end of the job" ended "$job" || return
  "$build/apps/kpipe-inspect" "$dir/checkpoints" >/dev/null 2>&1 || fail "latest does not load"
  echo "  job $(field "$job" JobState), exit code $(field "$job" ExitCode); latest ($(head -n 1 "$dir/checkpoints/latest")) loads"
  grep -E "^(srun|kpipe).*(rank|task)" "$dir/kpipe-$job.out" | cut -c1-200 | sed 's/^/    /'
}

case_oom() {
  make_memory_cgroup
  [ -n "$memory_cgroup" ] || { echo "  skipped: cannot make a memory cgroup here"; return; }
  local at
  at=$(now)
  KPIPE_TEST_CGROUP=$memory_cgroup submit oom --ntasks-per-node=2 --cpus-per-task=1 --no-requeue -- \
    --model.d_model 4096 --model.n_heads 32 --steps 2 --memory.limit_per_rank none || return
  wait_for 180 "end of the job" ended "$job" || return
  echo "  job $(field "$job" JobState), exit code $(field "$job" ExitCode), $(since "$at") s after submission"
  grep -E "^(srun|slurmstepd|kpipe)" "$dir/kpipe-$job.out" | cut -c1-200 | sed 's/^/    /'
}

# Silent data corruption on kpn2 (exit code 6, the wrapper standing in for kpipe-train there): the script submits
# the job again, to start after it, without kpn2; the new job (same name and resources) runs on kpn1.
case_sdc_resubmit() {
  two_nodes || return
  local first next
  KPIPE_TEST_SDC_NODE=kpn2 submit sdc --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --nodelist=kpn2 -- \
    "${model[@]}" --steps 20 || return
  first=$job
  wait_for 60 "end of the job" ended "$job" || return
  expect_state FAILED 0
  [ "$(field "$job" ExitCode)" = 6:0 ] || fail "exit code $(field "$job" ExitCode), expected 6:0"
  expect_output "silent data corruption (exit code 6) on node(s) kpn2: resubmitting job $job without them"
  next=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' "$dir/kpipe-$job.out")
  [ -n "$next" ] || { fail "no job submitted again"; return; }
  job=$next
  wait_for 120 "end of the job submitted again" ended "$job" || return
  expect_state COMPLETED 0
  [ "$(field "$job" ExcNodeList)" = kpn2 ] && [ "$(field "$job" NodeList)" = kpn1 ] && [ "$(field "$job" JobName)" = sdc ] ||
    fail "job $job (name $(field "$job" JobName)) ran on $(field "$job" NodeList) excluding $(field "$job" ExcNodeList)"
  [ -n "$(final_checksum "$dir/metrics-$job-0.jsonl")" ] || fail "job $job did not train to the end"
  echo "  job $first ended with 6 on kpn2; job $job, submitted by it without kpn2, trained on kpn1"
}

# train-gpu.sbatch on both nodes with a CPU build: the code below its "The same in" line is the CPU script's,
# and its ranks run 2 per node, numbered within the node as Slurm numbers them (the GPU a rank drives).
case_gpu_script() {
  two_nodes || return
  local gpu=$repo/scripts/slurm/train-gpu.sbatch ref layout
  diff <(sed -n '/^# ---- The same in/,$p' "$script") <(sed -n '/^# ---- The same in/,$p' "$gpu") >/dev/null ||
    fail "train-gpu.sbatch's shared part differs from $script's"
  ref=$(reference $nodes_steps)
  submit_script=$gpu submit gpu-script "${nodes[@]}" -- "${model[@]}" --schedule 1f1b --steps $nodes_steps \
    --checkpoint-every 0 || return
  wait_for 180 "end of the job" ended "$job" || return
  expect_state COMPLETED 0
  layout=$(sed -n 's/^rank=\([0-9]*\) .* node=\([^ ]*\) local=\([0-9]*\).*/\1:\2:\3/p' "$dir/probe" | sort | xargs)
  [ "$layout" = "0:kpn1:0 1:kpn1:1 2:kpn2:0 3:kpn2:1" ] || fail "ranks ran as $layout (rank:node:local id)"
  expect_output "kpipe-train: 4 ranks on 2 nodes: kpn1 (ranks 0-1), kpn2 (ranks 2-3)"
  grep -q "blas=1" "$dir/probe" || fail "the GPU script's OPENBLAS_NUM_THREADS=1 did not reach the ranks"
  [ "$(final_checksum "$dir/metrics-$job-0.jsonl")" = "$ref" ] ||
    fail "param_checksum $(final_checksum "$dir/metrics-$job-0.jsonl"), one rank's $ref"
  echo "  train-gpu.sbatch on 2 nodes ($layout): param_checksum as one rank's"
}

for c in "${cases[@]}"; do
  declare -F "case_$c" >/dev/null || { fail "no case $c"; continue; }
  run_case "$c"
  job=
done
