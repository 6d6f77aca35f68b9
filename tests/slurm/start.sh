#!/usr/bin/env bash
# Starts a real two-node Slurm (22.05, Debian's slurm-wlm) on this machine for the tests in
# tests/it/slurm_real.rs and slurm_two_nodes.rs: munged, slurmctld and two slurmd (nodes n1 and
# n2), all root, with their configuration, state, logs and sockets under one directory (default
# /tmp/oomguard-slurm) and ports of their own, so a Slurm of the machine's (or another run's) is
# left alone.
#
#     tests/slurm/start.sh [--accounting] [DIR]      # then: export SLURM_CONF=DIR/slurm.conf
#     tests/slurm/stop.sh [DIR]       # stops exactly the daemons this started (their pid files)
#
# Installs slurm-wlm and munge with apt-get where srun is missing. Both nodes are the machine
# itself: two `NodeName=` lines with the same `NodeHostname` at 127.0.0.1, a slurmd port each,
# and `%n` in slurmd's spool, pid and log paths, so `slurmd -N n1` and `slurmd -N n2` run side by
# side with no namespaces (Slurm's "multiple slurmd" mode, which Debian's build has). Each has the
# machine's 2 CPUs and half its memory. Slurm tracks and limits tasks with cgroups (v1), as a
# cluster does, so `--mem` is enforced by the kernel and a step's tasks live in
# memory:/slurm_<node>/uid_U/job_J/step_S: one tree per node (slurm_n1, slurm_n2), as on two
# machines. Exits non-zero, with the daemons' log tails, if a node does not come up idle
# within 30 s.
#
# --accounting adds sacct: MariaDB (its own data directory and port) and slurmdbd, installing
# slurmdbd and mariadb-server where missing (about 50 s more; the tests do not need it).
set -euo pipefail
accounting=
[ "${1:-}" = --accounting ] && { accounting=1; shift; }
dir=${1:-/tmp/oomguard-slurm}
# slurmctld's port; n1's slurmd takes the next, slurmdbd the one after, n2's slurmd the one
# after that (another Slurm on this machine, or a second run of this script, needs other ports).
port=${OOMGUARD_SLURM_PORT:-16817}
here=$(cd "$(dirname "$0")" && pwd)

if ! command -v srun >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# A previous run's daemons (same directory) are stopped first: their pid files are ours.
"$here/stop.sh" "$dir" 2>/dev/null || true
mkdir -p "$dir"/{state,spool,log,munge}
chmod 700 "$dir/munge"
host=$(hostname -s)
nodes=(n1 n2)
[ -f "$dir/munge/munge.key" ] || mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
chmod 400 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/seed"

if [ -n "$accounting" ]; then
    command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmdbd mariadb-server >/dev/null
    if [ ! -d "$dir/mysql/mysql" ]; then
        mariadb-install-db --datadir="$dir/mysql" --user=root >"$dir/log/mysql-install.log" 2>&1
    fi
    mariadbd --datadir="$dir/mysql" --user=root --bind-address=127.0.0.1 --port=13306 \
        --socket="$dir/mysql.sock" --pid-file="$dir/mysqld.pid" --log-error="$dir/log/mysqld.log" \
        >/dev/null 2>&1 &
    for _ in $(seq 100); do
        mariadb --socket="$dir/mysql.sock" -u root -e "select 1" >/dev/null 2>&1 && break
        sleep 0.1
    done
    mariadb --socket="$dir/mysql.sock" -u root -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' \
        IDENTIFIED BY 'slurm'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
    cat > "$dir/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=$((port + 2))
SlurmUser=root
PidFile=$dir/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=13306
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
    chmod 600 "$dir/slurmdbd.conf"
fi

# Memory each node offers jobs: half the machine's, so `--mem` requests fit (both nodes share
# the machine's memory, as they share its CPUs).
mem_mib=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 2048 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=oomguard
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup
JobAcctGatherFrequency=1
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
KillWait=5
DefMemPerCPU=1024
InactiveLimit=0
MinJobAge=300
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1)) CPUs=2 RealMemory=$mem_mib State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 3)) CPUs=2 RealMemory=$mem_mib State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
cat > "$dir/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
CONF
if [ -n "$accounting" ]; then
    # slurmdbd's munge socket is AccountingStoragePass's (AuthInfo covers only slurmctld/slurmd).
    cat >> "$dir/slurm.conf" <<CONF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((port + 2))
AccountingStoragePass=$dir/munge/socket
CONF
fi

export SLURM_CONF=$dir/slurm.conf
if [ -n "$accounting" ]; then
    slurmdbd
    for _ in $(seq 100); do
        sacctmgr -i add cluster oomguard >/dev/null 2>&1 && break
        sacctmgr -n list cluster format=cluster 2>/dev/null | grep -q oomguard && break
        sleep 0.1
    done
    # Jobs are recorded under an association: root's, in an account of its own.
    sacctmgr -i add account oomguard Cluster=oomguard >/dev/null
    sacctmgr -i add user root Account=oomguard >/dev/null
fi
slurmctld -f "$SLURM_CONF"
for n in "${nodes[@]}"; do slurmd -f "$SLURM_CONF" -N "$n"; done
for _ in $(seq 300); do
    # One line per node: both must read idle.
    state=$(sinfo -h -N -o '%N=%t' 2>/dev/null | sort | tr '\n' ' ' || true)
    [ "$state" = "n1=idle n2=idle " ] && { echo "slurm: nodes ${nodes[*]} idle on $host (SLURM_CONF=$SLURM_CONF)"; exit 0; }
    sleep 0.1
done
echo "slurm: nodes not idle after 30 s (${state:-no answer}); logs:" >&2
tail -n 20 "$dir"/log/*.log >&2
exit 1
