# A Slurm cluster for tests on one machine, sourced by tests/slurm/run.sh: munged, slurmctld and one slurmd per
# node run as plain foreground processes of this shell (no systemd, no cgroups: proctrack/linuxproc,
# task/affinity), with their configuration, keys, sockets, state and logs in one directory. Needs root (slurmd
# starts jobs as their user) and Debian's slurmctld, slurmd, slurm-client and munge packages.
#
# Two nodes, kpn1 and kpn2, are two hosts as far as Slurm and MPI can tell: each slurmd (and so every job
# process it starts) runs in a network namespace of its own, with one interface (a veth pair to a bridge in the
# root namespace) and an address in a private /24 that no interface of the machine uses; in a UTS namespace
# with the node's name as host name; and in a mount namespace with a /dev/shm and a TmpFS of its own. munged
# and slurmctld stay in the root namespace, reached over the bridge's address (munge through its socket file).
# Where network namespaces cannot be made, the cluster is one node, kpn1, in the root namespace.
#   cluster_start DIR     start the daemons, wait for the nodes to be idle; exports SLURM_CONF, sets
#                         cluster_nodes (kpn1 [kpn2]) and cluster_net (the /24, empty on one node)
#   cluster_link NODE up|down   the node's network link (its veth's end in the root namespace)
#   cluster_stop          stop every daemon started, by PID (SIGTERM, then SIGKILL after 10 s); remove the
#                         namespaces, interfaces and addresses it made
#   cluster_logs          the daemons' log tails, for a failure report

cluster_pids=() cluster_nodes=() cluster_net= cluster_netns=() cluster_bridge= cluster_split_why=

# A TCP port nothing listens on now in the root namespace (the kernel picks it).
cluster_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The network: a bridge with the controller's address and, per node, a namespace joined to it by a veth pair
# (the node's end named eth0). Names carry this shell's PID, so that nothing of the machine's is touched. Fails
# (with cluster_split_why set) where namespaces, bridges or veth pairs cannot be made; undone by cluster_stop.
cluster_make_network() {
  local i prefix= tag=$$
  for i in $(seq 200 249); do
    ip -4 -o addr show | grep -q " 10\.$i\.77\." || ip -4 route | grep -q "^10\.$i\.77\." || { prefix=10.$i.77; break; }
  done
  [ -n "$prefix" ] || { cluster_split_why="no free 10.x.77.0/24 for the nodes"; return 1; }
  cluster_bridge=kpbr$tag
  ip link add "$cluster_bridge" type bridge 2>/dev/null || { cluster_split_why="cannot make a bridge (ip link add type bridge)"; cluster_bridge=; return 1; }
  ip addr add "$prefix.1/24" dev "$cluster_bridge" && ip link set "$cluster_bridge" up || return 1
  for i in 1 2; do
    local ns=kpipe-$tag-n$i
    ip netns add "$ns" 2>/dev/null || { cluster_split_why="cannot make a network namespace (ip netns add)"; return 1; }
    cluster_netns+=("$ns")
    ip link add "kpv$i-$tag" type veth peer name eth0 netns "$ns" 2>/dev/null ||
      { cluster_split_why="cannot make a veth pair"; return 1; }
    ip link set "kpv$i-$tag" master "$cluster_bridge" up &&
      ip -n "$ns" addr add "$prefix.1$i/24" dev eth0 && ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up ||
      return 1
  done
  cluster_net=$prefix.0/24 cluster_prefix=$prefix
}

cluster_link() {  # cluster_link NODE up|down
  ip link set "kpv${1#kpn}-$$" "$2"
}

cluster_start() {
  local dir=$1
  cluster_dir=$dir
  mkdir -p "$dir"/{etc,munge,state,spool,log,run,tmp}
  chmod 700 "$dir/munge"
  # munge: a fresh key, the socket in DIR (Slurm's clients and daemons find it through AuthInfo).
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    >>"$dir/log/munged.out" 2>&1 &
  cluster_pids+=($!)

  local host ctl_addr nodes_conf node i
  host=$(hostname -s)
  # A node as slurmd sees the machine (CPUs, sockets, cores, threads), with a memory figure of our own: on
  # two nodes each claims every CPU of the machine (they share them, as the test's small jobs can).
  node=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]*//' -e 's/RealMemory=[0-9]*/RealMemory=1000/')
  if cluster_make_network; then
    cluster_nodes=(kpn1 kpn2) ctl_addr=$cluster_prefix.1 nodes_conf=
    # Two "GPUs" each for train-gpu.sbatch's --gpus-per-task=1: Slurm counts the device files (here two that
    # every machine has) and opens none of them (no devices cgroup).
    for i in 1 2; do nodes_conf+="NodeName=kpn$i NodeHostname=kpn$i NodeAddr=$cluster_prefix.1$i $node Gres=gpu:2 State=UNKNOWN"$'\n'; done
    printf 'AutoDetect=off\nNodeName=kpn[1-2] Name=gpu File=/dev/null\nNodeName=kpn[1-2] Name=gpu File=/dev/zero\n' >"$dir/etc/gres.conf"
  else
    cluster_nodes=(kpn1) ctl_addr=127.0.0.1
    nodes_conf="NodeName=kpn1 NodeHostname=$host NodeAddr=127.0.0.1 $node State=UNKNOWN"$'\n'
  fi
  # The controller on this host. MpiDefault=none as on the sites where srun needs --mpi=pmix spelt out.
  # cred_expire: a requeued job waits that long before it may start again (default 120 s). SlurmdTimeout: a
  # node that stops answering is DOWN after that long (default 300 s). Per-node paths carry %n.
  cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=kpipe-ci
SlurmctldHost=$host($ctl_addr)
SlurmctldPort=$(cluster_free_port)
SlurmdPort=$(cluster_free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$dir/tmp
PlugStackConfig=$dir/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SwitchType=switch/none
MpiDefault=none
GresTypes=gpu
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=10
JobRequeue=1
KillWait=10
MinJobAge=600
MailProg=/bin/true
${nodes_conf}PartitionName=ci Nodes=$(IFS=,; echo "${cluster_nodes[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$dir/etc/plugstack.conf"
  export SLURM_CONF=$dir/etc/slurm.conf

  slurmctld -D -i -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 &
  cluster_pids+=($!)
  for node in "${cluster_nodes[@]}"; do
    mkdir -p "$dir/spool/$node" "$dir/nodes/$node/tmp"
    if [ -n "$cluster_net" ]; then
      # nsenter and unshare exec: the daemon keeps this job's PID. Its own host name, /dev/shm and TmpFS (the
      # node's directory bound where slurm.conf says); every process it starts inherits them.
      nsenter --net="/run/netns/kpipe-$$-n${node#kpn}" -- unshare --uts --mount --propagation private -- \
        bash -c 'hostname "$1" && mount -t tmpfs -o mode=1777,size=1g kpipe-shm /dev/shm &&
                 mount --bind "$2" "$3" && exec slurmd -D -N "$1" -f "$SLURM_CONF"' \
        slurmd-"$node" "$node" "$dir/nodes/$node/tmp" "$dir/tmp" >>"$dir/log/slurmd-$node.out" 2>&1 &
    else
      slurmd -D -N "$node" -f "$SLURM_CONF" >>"$dir/log/slurmd-$node.out" 2>&1 &
    fi
    cluster_pids+=($!)
  done

  local _ states
  for _ in $(seq 120); do
    states=$(sinfo -h -o %t 2>/dev/null | sort -u)
    [ "$states" = idle ] && [ "$(sinfo -h -N -o %N 2>/dev/null | wc -l)" -eq ${#cluster_nodes[@]} ] && return 0
    sleep 0.5
  done
  echo "cluster: nodes not idle after 60 s: $(sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';')"
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
# (slurmstepd detaches from slurmd, so stopping slurmd alone would leave it behind); then the network.
# Returns 1 if anything had to be killed.
cluster_stop() {
  local pid _ i left rc=0 ns
  if [ ${#cluster_pids[@]} -gt 0 ]; then
    for ns in "${cluster_nodes[@]}"; do cluster_link "$ns" up 2>/dev/null; done
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
  # Deleting a namespace deletes the veth pair in it; then the bridge.
  for ns in "${cluster_netns[@]}"; do ip netns del "$ns" 2>/dev/null || { echo "cluster: could not remove namespace $ns"; rc=1; }; done
  cluster_netns=()
  [ -n "$cluster_bridge" ] && { ip link del "$cluster_bridge" 2>/dev/null || { echo "cluster: could not remove $cluster_bridge"; rc=1; }; }
  cluster_bridge=
  return $rc
}

cluster_logs() {
  local f
  for f in "$cluster_dir"/log/*.log "$cluster_dir"/log/*.out; do
    [ -s "$f" ] && { echo "--- $f (last 15 lines)"; tail -n 15 "$f"; }
  done
}
