#!/usr/bin/env bash
# Slurm: scripts/slurm/train-*.sbatch, unmodified, under a real two-node Slurm started for the test, each node
# in network, host-name and mount namespaces of its own (tests/slurm/run.sh: on one node runs, CPUs per task,
# USR1 -> checkpoint -> requeue -> resume bit for bit, USR1 during start-up, time limit, plain scancel, srun
# failing, a memory cgroup's limit; across both nodes 1F1B as one rank, USR1/requeue/resume and a resume on one
# node, a node's ranks killed, a node's link down, the GPU script). Installs Debian's Slurm and munge, reuses
# the README test command's build (or builds kpipe-train), stops every daemon and removes every namespace,
# interface and cgroup it made.
set -uo pipefail
job=50-slurm
source "$(dirname "$0")/../lib.sh"
cd "$repo" || exit 1
if [ "$(id -u)" -ne 0 ]; then
  skip "needs root (it installs Slurm and starts slurmctld, slurmd and munged)"
fi

packages=(slurmctld slurmd slurm-client munge python3 iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # Debian starts a package's services when it is installed; the test runs its own daemons, so keep the
  # system's from starting (policy-rc.d: "not now"), and remove that again afterwards.
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  rc=$?
  [ -n "$policy" ] && rm -f /usr/sbin/policy-rc.d
  [ $rc -eq 0 ] || { echo "50-slurm: apt-get install ${missing[*]} failed"; exit 1; }
fi

build=${KPIPE_BUILD_DIR:-build}
if [ ! -x "$build/apps/kpipe-train" ]; then
  scripts/install-deps-debian.sh &&
    scripts/build.sh -DKPIPE_ENABLE_TESTS=OFF -DKPIPE_ENABLE_BENCHMARKS=OFF -DKPIPE_ENABLE_APPS=ON || exit 1
fi
# Bounded: every wait in the test has its own limit; this is the last resort (the test stops its
# daemons on SIGTERM too).
timeout -k 30 900 bash tests/slurm/run.sh "$build"
