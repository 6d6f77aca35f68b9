#!/usr/bin/env bash
# What oomguard itself costs while it watches a job (issue 10, deliverable 1): CPU of the oomguard
# process alone (utime + stime from /proc/PID/stat, all its threads, not the job's) over a
# window, as a share of one core, and its peak RSS (VmHWM), around a 16-process python tree.
#
#   bench/watchcost.sh [SECONDS]          # default 30 s per case
#   CASES="8192:1s:cg 8192:1s:nocg" bench/watchcost.sh
#   OOMGUARD_BIN=/path/to/oomguard bench/watchcost.sh   # measure that build, do not build
#
# A case is TREE_MIB:INTERVAL:cg|nocg (cg: --memory-max 12G, a cgroup; nocg: --no-cgroup). The
# default runs 100 MiB and 8 GiB trees at 1s and 100ms, with and without a cgroup (8 cases;
# the 8 GiB tree needs that much free memory). Standalone: needs cargo, python3, and root for
# the cgroup cases.
set -euo pipefail
cd "$(dirname "$0")/.."
window_s=${1:-30}
cases=${CASES:-"100:1s:cg 8192:1s:cg 100:100ms:cg 8192:100ms:cg 100:1s:nocg 8192:1s:nocg 100:100ms:nocg 8192:100ms:nocg"}
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

printf '%-6s %-8s %-5s %12s %12s %11s %10s\n' tree interval cgroup 'core (stat)' 'core (ns)' 'per tick' 'peak RSS'
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
    sleep 2 # let the first ticks of the full tree pass
    t0=$(cpu_ticks "$pid"); n0=$(cpu_ns "$pid"); s0=$(date +%s.%N)
    sleep "$window_s"
    t1=$(cpu_ticks "$pid"); n1=$(cpu_ns "$pid"); s1=$(date +%s.%N)
    hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
    ticks=$(awk -v s0="$s0" -v s1="$s1" -v iv="$interval" 'BEGIN {
        n = iv + 0; if (iv ~ /ms$/) n /= 1000; print (s1 - s0) / n }')
    awk -v t=$((t1 - t0)) -v ns=$((n1 - n0)) -v hz="$hz" -v s0="$s0" -v s1="$s1" -v mib="$mib" \
        -v iv="$interval" -v mode="$mode" -v hwm="$hwm" -v ticks="$ticks" 'BEGIN {
        printf "%-6s %-8s %-5s %11.3f%% %11.4f%% %8.0f µs %6.1f MiB\n", mib "M", iv, mode,
            100 * t / hz / (s1 - s0), 100 * ns / 1e9 / (s1 - s0), ns / 1e3 / ticks, hwm / 1024 }'
done
