#!/usr/bin/env bash
# Stops the Slurm that tests/slurm/start.sh started in DIR (default /tmp/oomguard-slurm): first
# its jobs, then slurmd, slurmctld, slurmdbd and MariaDB (with --accounting) and munged, each by the pid in its pid file, waiting until it
# is gone (killed after 10 s), so nothing of it outlives the tests.
set -uo pipefail
dir=${1:-/tmp/oomguard-slurm}
if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
    export SLURM_CONF=$dir/slurm.conf
    scancel --user=root 2>/dev/null
    for _ in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
fi
for name in slurmd slurmctld slurmdbd mysqld munge/munged; do
    pidfile=$dir/$name.pid
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    fi
    rm -f "$pidfile"
done
# A step's slurmstepd may outlive slurmd; ours work in our log directory (slurmd's cwd).
for pid in $(pgrep -x slurmstepd); do
    [ "$(readlink "/proc/$pid/cwd")" = "$dir/log" ] && kill -9 "$pid" 2>/dev/null
done
exit 0
