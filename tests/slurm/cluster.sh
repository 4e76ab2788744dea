# A single-node Slurm for tests, sourced by tests/slurm/run.sh: munged, slurmctld and slurmd run as plain
# foreground processes of this shell (no systemd, no cgroups: proctrack/linuxproc, task/affinity), with
# their configuration, keys, sockets, state and logs in one directory. Needs root (slurmd starts jobs as
# their user) and Debian's slurmctld, slurmd, slurm-client and munge packages.
#   cluster_start DIR    start the daemons, wait for the node to be idle; exports SLURM_CONF
#   cluster_stop         stop every daemon started, by PID (SIGTERM, then SIGKILL after 10 s)
#   cluster_logs         the daemons' log tails, for a failure report

cluster_pids=()

# A TCP port nothing listens on now (the kernel picks it).
cluster_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cluster_start() {
  local dir=$1
  cluster_dir=$dir
  mkdir -p "$dir"/{etc,munge,state,spool,log,run}
  chmod 700 "$dir/munge"
  # munge: a fresh key, the socket in DIR (Slurm's clients and daemons find it through AuthInfo).
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    >>"$dir/log/munged.out" 2>&1 &
  cluster_pids+=($!)

  # The node as slurmd sees it (CPUs, sockets, cores, threads, memory), named kpipe-ci; the controller
  # on this host. MpiDefault=none as on the sites where srun needs --mpi=pmix spelt out.
  # cred_expire: a requeued job waits that long before it may start again (default 120 s).
  local host node
  host=$(hostname -s)
  node=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]*//' -e 's/RealMemory=[0-9]*/RealMemory=1000/')
  cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=kpipe-ci
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(cluster_free_port)
SlurmdPort=$(cluster_free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=600
MailProg=/bin/true
NodeName=kpipe-ci NodeHostname=$host NodeAddr=127.0.0.1 $node State=UNKNOWN
PartitionName=ci Nodes=kpipe-ci Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$dir/etc/plugstack.conf"
  export SLURM_CONF=$dir/etc/slurm.conf

  slurmctld -D -i -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 &
  cluster_pids+=($!)
  slurmd -D -N kpipe-ci -f "$SLURM_CONF" >>"$dir/log/slurmd.out" 2>&1 &
  cluster_pids+=($!)

  local _
  for _ in $(seq 120); do
    [ "$(sinfo -h -n kpipe-ci -o %t 2>/dev/null)" = idle ] && return 0
    sleep 0.5
  done
  echo "cluster: node kpipe-ci not idle after 60 s: $(sinfo -h -n kpipe-ci -o '%t %E' 2>&1)"
  return 1
}

# PIDs of the processes that carry this cluster's SLURM_CONF in their environment and do not descend from
# this shell: slurmstepd (it detaches from slurmd), batch shells, srun, job tasks. The daemons, children
# of this shell, are stopped by their PIDs.
cluster_processes() {
  python3 - "SLURM_CONF=$cluster_dir/etc/slurm.conf" $$ <<'PY'
import os, sys
marker, shell = sys.argv[1].encode(), int(sys.argv[2])
def parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    try:
        with open(f"/proc/{name}/environ", "rb") as f:
            if marker not in f.read().split(b"\0"):
                continue
    except OSError:
        continue
    p = int(name)
    while p > 1 and p != shell:
        p = parent(p)
    if p != shell:
        print(name)
PY
}

# Cancel every job, wait up to 30 s for them to end, stop the daemons, then kill whatever is left by PID
# (slurmstepd detaches from slurmd, so stopping slurmd alone would leave it behind). Returns 1 if
# anything had to be killed.
cluster_stop() {
  local pid _ i left rc=0
  if [ ${#cluster_pids[@]} -gt 0 ]; then
    scancel --quiet --partition=ci 2>/dev/null
    for _ in $(seq 60); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
    for _ in $(seq 20); do
      [ -z "$(cluster_processes)" ] && break
      sleep 0.5
    done
  fi
  # slurmd first, then the controller, then munge.
  for ((i = ${#cluster_pids[@]} - 1; i >= 0; i--)); do
    pid=${cluster_pids[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  cluster_pids=()
  left=$(cluster_processes | xargs)
  if [ -n "$left" ]; then
    echo "cluster: processes left behind, killed: $(ps -o pid=,args= -p ${left// /,} 2>/dev/null | tr '\n' ';')"
    kill -KILL $left 2>/dev/null
    rc=1
  fi
  return $rc
}

cluster_logs() {
  local f
  for f in "$cluster_dir"/log/*.log "$cluster_dir"/log/*.out; do
    [ -s "$f" ] && { echo "--- $f (last 15 lines)"; tail -n 15 "$f"; }
  done
}
