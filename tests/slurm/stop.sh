#!/usr/bin/env bash
# Stops the Slurm that tests/slurm/start.sh started in DIR (default /tmp/oomguard-slurm): first
# its jobs, then both slurmd (slurmd-n1, slurmd-n2), slurmctld, slurmdbd and MariaDB (with
# --accounting) and munged, each by the pid in its pid file, waiting until it is gone (killed
# after 10 s), so nothing of it outlives the tests. (slurmd.pid is a one-node start's, from
# before the cluster had two nodes.)
set -uo pipefail
dir=${1:-/tmp/oomguard-slurm}
if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
    export SLURM_CONF=$dir/slurm.conf
    scancel --user=root 2>/dev/null
    for _ in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
fi
# Each daemon takes about 2 s to exit after SIGTERM, so a group of them is signalled at once
# and then waited for: first the two slurmd, slurmctld, slurmdbd and MariaDB, then munged,
# which they authenticate with until they are gone.
stop_group() {
    local name pidfile pid pids=()
    for name in "$@"; do
        pidfile=$dir/$name.pid
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null && pids+=("$pid")
        rm -f "$pidfile"
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    done
}
stop_group slurmd-n1 slurmd-n2 slurmd slurmctld slurmdbd mysqld
stop_group munge/munged
# A step's slurmstepd may outlive slurmd; ours work in our log directory (slurmd's cwd).
for pid in $(pgrep -x slurmstepd); do
    [ "$(readlink "/proc/$pid/cwd")" = "$dir/log" ] && kill -9 "$pid" 2>/dev/null
done
exit 0
