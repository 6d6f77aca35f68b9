#!/usr/bin/env bash
# What oomguard itself costs while it watches a job (issues 10 and 21): CPU of the oomguard
# process alone (utime + stime from /proc/PID/stat, all its threads, not the job's) as a share of
# one core, and its peak RSS (VmHWM), around a 16-process python tree, over a whole run.
#
#   bench/watchcost.sh [RUN_SECONDS]      # default 240 s per case
#   CASES="8192:1s:cg 8192:1s:nocg" bench/watchcost.sh
#   OOMGUARD_BIN=/path/to/oomguard bench/watchcost.sh   # measure that build, do not build
#
# Each case runs the tree for RUN_SECONDS after it is ready and reports two windows:
#   - whole run: from oomguard's exec to the end (start-up, the tree's start, every one-off);
#   - steady: the last STEADY_S seconds (default 120), starting no earlier than 70 s in, so
#     it holds two periods of every task oomguard runs on a 60 s clock (the hang watch's read
#     of a silent job after --hang-timeout 60s; PSS for the record where --pss-interval is set).
# Peak RSS is VmHWM at the end: the peak over the whole run. RUN_SECONDS must be at least
# 70 + STEADY_S. CPU is oomguard's own ticks, so other work on the machine (a shared build
# machine) does not count; it shows only as wall time.
#
# A case is TREE_MIB:INTERVAL:cg|nocg (cg: --memory-max 12G, a cgroup; nocg: --no-cgroup). The
# default runs 100 MiB and 8 GiB trees at 1s, with and without a cgroup (4 cases; the 8 GiB tree
# needs that much free memory). Standalone: needs cargo, python3, and root for the cgroup cases.
set -euo pipefail
cd "$(dirname "$0")/.."
run_s=${1:-240}
steady_s=${STEADY_S:-120}
if ((run_s < 70 + steady_s)); then
    echo "RUN_SECONDS ($run_s) must be at least 70 + STEADY_S ($steady_s)" >&2
    exit 2
fi
cases=${CASES:-"100:1s:cg 8192:1s:cg 100:1s:nocg 8192:1s:nocg"}
# OOMGUARD_BIN measures a given binary (another build, for a before/after in one run).
if [ -n "${OOMGUARD_BIN:-}" ]; then
    bin=$OOMGUARD_BIN
else
    cargo build --release --quiet
    bin=$PWD/target/release/oomguard
fi
work=$(mktemp -d)
pid=
# Stops the case being measured (and its tree, which holds up to 8 GiB) however the script ends.
trap 'if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi; rm -rf "$work"' EXIT
hz=$(getconf CLK_TCK)

# 16 processes (a parent and 15 forked workers), each writing TREE_MIB/16 of its own memory,
# then waiting for SIGTERM; the parent touches READY once all hold their share.
cat > "$work/tree.py" <<'PY'
import os, signal, sys
total_mib, ready = int(sys.argv[1]), sys.argv[2]
share = (total_mib << 20) // 16
r, w = os.pipe()
for _ in range(15):
    if os.fork() == 0:
        held = b'\x01' * share
        os.write(w, b'.')
        signal.pause()
        os._exit(0)
held = b'\x01' * share
got = 0
while got < 15:
    got += len(os.read(r, 15))
open(ready, 'w').close()
signal.pause()
PY

cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
# utime + stime come in 10 ms ticks, coarse for ~15 ms in 30 s: the scheduler's own nanosecond
# count of every thread (schedstat's first field) says it finely.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ ns += $1 } END { print ns }'; }

# Seconds since boot of PID's exec (field 22 of stat, in clock ticks).
started_s() { awk -v hz="$hz" '{ sub(/.*\) /, ""); print $20 / hz }' "/proc/$1/stat"; }
uptime_s() { awk '{ print $1 }' /proc/uptime; }

printf '%-6s %-8s %-5s %14s %14s %12s %10s\n' tree interval cgroup 'whole run' 'steady' 'steady/tick' 'peak RSS'
for case in $cases; do
    IFS=: read -r mib interval mode <<<"$case"
    cg=(--memory-max 12G)
    [ "$mode" = nocg ] && cg=(--no-cgroup)
    rm -f "$work/ready"
    "$bin" run --run-dir "$work/run-$mib-$interval-$mode" --max-attempts 1 --grace 2s \
        --interval "$interval" "${cg[@]}" -- python3 "$work/tree.py" "$mib" "$work/ready" \
        >/dev/null 2>"$work/stderr" &
    pid=$!
    until [ -e "$work/ready" ]; do
        kill -0 "$pid" 2>/dev/null || { cat "$work/stderr"; exit 1; }
        sleep 0.2
    done
    ready=$(uptime_s)
    sleep $((run_s - steady_s))
    t0=$(cpu_ticks "$pid"); n0=$(cpu_ns "$pid"); s0=$(uptime_s)
    sleep "$steady_s"
    t1=$(cpu_ticks "$pid"); n1=$(cpu_ns "$pid"); s1=$(uptime_s)
    born=$(started_s "$pid")
    hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
    # The raw numbers first: what the table below is computed from.
    echo "raw: case=$case ticks0=$t0 ticks1=$t1 ns=$((n1 - n0)) s0=$s0 s1=$s1 born=$born ready=$ready hwm_kib=$hwm" >&2
    awk -v t0="$t0" -v t1="$t1" -v ns=$((n1 - n0)) -v hz="$hz" -v s0="$s0" -v s1="$s1" \
        -v born="$born" -v ready="$ready" -v mib="$mib" -v iv="$interval" -v mode="$mode" \
        -v hwm="$hwm" 'BEGIN {
        n = iv + 0; if (iv ~ /ms$/) n /= 1000
        printf "%-6s %-8s %-5s %13.4f%% %13.4f%% %9.0f µs %6.1f MiB\n", mib "M", iv, mode,
            100 * t1 / hz / (s1 - born), 100 * ns / 1e9 / (s1 - s0), ns / 1e3 / ((s1 - s0) / n),
            hwm / 1024
        printf "       whole run: %d ticks in %.0f s (tree ready %.0f s in); steady: %d ticks, %.0f s from %.0f s\n",
            t1, s1 - born, ready - born, t1 - t0, s1 - s0, s0 - ready }'
done
