#!/usr/bin/env bash
# A single-node Slurm on this machine, for trying and testing scale-out without a cluster:
# munged with a freshly generated key, slurmctld and slurmd on localhost, all of their state, logs
# and sockets under one directory, nothing in /etc touched. The node offers 4 "GPUs" as a generic
# resource without devices, so scripts asking for --gres=gpu:1 are scheduled as on a GPU cluster;
# the work itself runs on the CPU (gsrq ... --backend cpu).
#   tools/slurm/local-cluster.sh start   # prints the line to source: export SLURM_CONF=...
#   tools/slurm/local-cluster.sh stop
#   tools/slurm/local-cluster.sh status
#   GSRQ_SLURM_DIR=DIR   where the cluster lives (default /tmp/gsrq-slurm)
# Needs root (slurmd starts jobs as their user) and Debian's slurm-wlm and munge
# (tools/setup.sh --slurm). Exit code 3: Slurm cannot start here (not root, or not installed).
set -euo pipefail
dir=${GSRQ_SLURM_DIR:-/tmp/gsrq-slurm}
cmd=${1:-start}

stop() {
  # Jobs first, while slurmd can still end their steps: a step whose slurmd is gone waits forever.
  if [[ -f $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2> /dev/null; then
    SLURM_CONF=$dir/slurm.conf scancel --quiet --partition=local 2> /dev/null || true
    for _ in $(seq 100); do
      [[ -z $(SLURM_CONF=$dir/slurm.conf squeue -h 2> /dev/null) ]] && break
      sleep 0.1
    done
  fi
  for d in slurmd slurmctld munged; do
    if [[ -f $dir/$d.pid ]]; then
      kill "$(cat "$dir/$d.pid")" 2>/dev/null || true
    fi
  done
  for d in slurmd slurmctld munged; do
    if [[ -f $dir/$d.pid ]]; then
      local pid
      pid=$(cat "$dir/$d.pid")
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/$d.pid"
    fi
  done
}

case "$cmd" in
  stop) stop; exit 0 ;;
  status)
    if [[ -f $dir/slurm.conf ]] && SLURM_CONF=$dir/slurm.conf sinfo -h > /dev/null 2>&1; then
      SLURM_CONF=$dir/slurm.conf sinfo
      exit 0
    fi
    echo "local-cluster: not running (state in $dir)" >&2
    exit 1 ;;
  start) ;;
  *) echo "local-cluster: unknown command '$cmd' (start, stop, status)" >&2; exit 2 ;;
esac

if [[ $(id -u) -ne 0 ]]; then
  echo "local-cluster: Slurm's slurmd must run as root; this is uid $(id -u)" >&2
  exit 3
fi
for b in munged slurmctld slurmd sbatch; do
  if ! command -v "$b" > /dev/null && [[ ! -x /usr/sbin/$b ]]; then
    echo "local-cluster: $b is missing; tools/setup.sh --slurm installs slurm-wlm and munge" >&2
    exit 3
  fi
done
export PATH=$PATH:/usr/sbin

stop
mkdir -p "$dir"/{state,spool,logs}
chmod 755 "$dir"
host=$(uname -n | cut -d. -f1)
cpus=$(nproc)
((cpus < 4)) && cpus=4 # four array tasks at once even on two cores: the work is small
port=${GSRQ_SLURM_PORT:-16817}

# munge: a key of our own, a socket of our own.
if [[ ! -f $dir/munge.key ]]; then
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
fi
chmod 600 "$dir/munge.key"
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" --pid-file="$dir/munged.pid" \
  --log-file="$dir/logs/munged.log" --seed-file="$dir/state/munge.seed"

cat > "$dir/slurm.conf" <<CONF
# Single-node Slurm written by tools/slurm/local-cluster.sh.
ClusterName=gsrqlocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/logs/slurmctld.log
SlurmdLogFile=$dir/logs/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
SchedulerParameters=defer_batch
MinJobAge=600
InactiveLimit=0
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1024 Gres=gpu:4 State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# Four stand-in device files: Slurm counts and hands out GPUs by file; nothing opens them.
touch "$dir"/gpu{0,1,2,3}
cat > "$dir/gres.conf" <<CONF
NodeName=$host Name=gpu File=$dir/gpu[0-3]
CONF
# Jobs are tracked through /proc (proctrack/linuxproc), not cgroups, but slurmd initialises its
# cgroup plugin all the same and wants a hierarchy it can stat: an empty one of our own, so that
# it starts in containers and chroots whose /sys/fs/cgroup is empty or read-only.
mkdir -p "$dir/cgroup/systemd"
cat > "$dir/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
CgroupMountpoint=$dir/cgroup
CgroupAutomount=no
CONF

export SLURM_CONF=$dir/slurm.conf
if ! slurmctld -c -i || ! slurmd -c; then
  echo "local-cluster: slurmctld or slurmd did not start; logs in $dir/logs" >&2
  tail -n 5 "$dir/logs/slurmctld.log" "$dir/logs/slurmd.log" >&2 || true
  exit 3
fi
for _ in $(seq 100); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "export SLURM_CONF=$dir/slurm.conf"
    exit 0
  fi
  sleep 0.2
done
echo "local-cluster: the node did not come up; logs in $dir/logs" >&2
tail -n 5 "$dir/logs/slurmctld.log" "$dir/logs/slurmd.log" >&2 || true
exit 1
