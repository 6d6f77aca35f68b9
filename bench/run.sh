#!/usr/bin/env bash
# oomguard's cost and speed beside the tools it is compared with, all measured in this one run:
#
#   1. watching: oomguard's CPU (fraction of one core, and ms of CPU per minute) and peak RSS
#      around a 16-process python tree (bench/tree.py) of 100 MiB and of 8 GiB, at --interval 1s
#      and 100ms, with a memory cgroup (--memory-max 12G) and without (--no-cgroup); beside
#      psrecord (--include-children --interval 1) and earlyoom (-r 0 --dryrun) watching the same
#      tree shape;
#   2. output passthrough of 1 GiB: oomguard run against `| cat` and `| tee log`;
#   3. relaunch latency with --backoff 0s: from an attempt's death to the next attempt's start.
#
# Writes raw numbers to bench/results/LATEST.txt and prints Markdown tables for BENCHMARKS.md.
# Run as root on a machine with some 10 GiB free: `bench/run.sh`. Env: WINDOW_S (seconds each
# watching configuration is measured, default 30), PASS_ROUNDS (default 3), RELAUNCHES (default
# 10), BIG_BYTES (per process of the big tree, default 512 MiB), SKIP_INSTALL=1.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
WINDOW_S=${WINDOW_S:-30}
PASS_ROUNDS=${PASS_ROUNDS:-3}
RELAUNCHES=${RELAUNCHES:-10}
BIG_BYTES=${BIG_BYTES:-$((512 << 20))}
SMALL_BYTES=$(((100 << 20) / 16))
PROCS=16
results=$root/bench/results
mkdir -p "$results"
raw=$results/LATEST.txt
work=$(mktemp -d /tmp/oomguard-bench.XXXXXX)
children=()
cleanup() {
    for pid in "${children[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

log() { echo "bench: $*" >&2; }
: >"$raw"
rawline() { echo "$*" >>"$raw"; }

# ---- what we compare against -------------------------------------------------------------
if [[ -z ${SKIP_INSTALL:-} ]]; then
    command -v psrecord >/dev/null || pip install --quiet psrecord >&2 || log "pip install psrecord failed"
    command -v earlyoom >/dev/null || { apt-get install -y earlyoom >&2 || { apt-get update >&2 && apt-get install -y earlyoom >&2; }; } || log "apt-get install earlyoom failed"
fi
psrecord_bin=
if command -v psrecord >/dev/null; then
    # pyenv puts a shell shim first on PATH; run the real script, so that $! is psrecord itself.
    psrecord_bin=$( (command -v pyenv >/dev/null && pyenv which psrecord 2>/dev/null) || command -v psrecord)
fi
have_earlyoom=$(command -v earlyoom || true)

log "building oomguard (release)"
cargo build --release --quiet
oomguard=$root/target/release/oomguard

clk_tck=$(getconf CLK_TCK)

# utime+stime of PID in clock ticks (/proc/PID/stat fields 14 and 15, after the comm field).
stat_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# CPU time of every live thread of PID in ns (schedstat's first field: exact, not tick-sampled).
sched_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# Measures PID over WINDOW_S; prints "cpu_pct_ticks cpu_pct_exact ms_per_min hwm_mib".
measure() {
    local pid=$1 t0 t1 n0 n1 w0 w1
    t0=$(stat_ticks "$pid"); n0=$(sched_ns "$pid"); w0=$EPOCHREALTIME
    sleep "$WINDOW_S"
    t1=$(stat_ticks "$pid"); n1=$(sched_ns "$pid"); w1=$EPOCHREALTIME
    awk -v t0="$t0" -v t1="$t1" -v n0="$n0" -v n1="$n1" -v w0="$w0" -v w1="$w1" \
        -v hz="$clk_tck" -v hwm="$(hwm_kib "$pid")" 'BEGIN {
            wall = w1 - w0
            ticks = (t1 - t0) / hz / wall * 100
            exact = (n1 - n0) / 1e9 / wall * 100
            printf "%.4f %.4f %.1f %.1f\n", ticks, exact, exact / 100 * 60000, hwm / 1024 }'
}

wait_ready() { # FILE [PID]: waits for tree.py's `ready PID` line, prints PID; gives up at
    # once when PID (the process that runs the tree) has already exited
    local i
    for ((i = 0; i < 1200; i++)); do
        if grep -q '^ready ' "$1" 2>/dev/null; then
            awk '/^ready / {print $2; exit}' "$1"
            return
        fi
        if [[ -n ${2:-} ]] && ! kill -0 "$2" 2>/dev/null; then
            log "the watcher exited before the tree got ready (not root? --memory-max needs a memory cgroup)"
            exit 1
        fi
        sleep 0.1
    done
    log "tree never got ready: $(cat "$1")"
    exit 1
}

declare -A cpu hwm
size_name() { # per-process BYTES: the tree's total, as the tables name it
    local total=$((PROCS * $1))
    if ((total % (1 << 30) == 0)); then echo "$((total >> 30)) GiB"; else echo "$(((total + (1 << 19)) >> 20)) MiB"; fi
}

# ---- 1. watching cost ----------------------------------------------------------------------
for bytes in "$SMALL_BYTES" "$BIG_BYTES"; do
    size=$(size_name "$bytes")
    for cg in cgroup none; do
        for interval in 1s 100ms; do
            key="$size|oomguard --interval $interval, $([[ $cg == cgroup ]] && echo "--memory-max 12G" || echo "--no-cgroup")"
            out=$work/out.$$
            : >"$out"
            cg_args=(--no-cgroup)
            [[ $cg == cgroup ]] && cg_args=(--memory-max 12G)
            "$oomguard" -q run --run-dir "$work/run-$RANDOM$RANDOM" --state-dir "$work/state" --no-pty \
                --interval "$interval" "${cg_args[@]}" -- python3 "$root/bench/tree.py" "$PROCS" "$bytes" >"$out" &
            og=$!
            children+=("$og")
            tree=$(wait_ready "$out" "$og")
            sleep 1 # past the first ticks, which read more (binary pages, first PSS)
            log "measuring $key for ${WINDOW_S}s"
            read -r pt pe mpm mib < <(measure "$og")
            cpu[$key]="$pt $pe $mpm"; hwm[$key]=$mib
            rawline "watch|$key|cpu_pct_ticks=$pt|cpu_pct_exact=$pe|cpu_ms_per_min=$mpm|hwm_mib=$mib"
            kill -TERM "$tree"
            wait "$og" || log "oomguard exited $? after the tree was stopped"
        done
    done
    # The same tree shape, without oomguard, watched by psrecord and earlyoom at the same time.
    out=$work/out.$$
    python3 "$root/bench/tree.py" "$PROCS" "$bytes" >"$out" &
    tree=$!
    children+=("$tree")
    wait_ready "$out" >/dev/null
    pr= eo=
    if [[ -n $psrecord_bin ]]; then
        python3 "$psrecord_bin" "$tree" --include-children --interval 1 --log "$work/psrecord.log" >/dev/null 2>&1 &
        pr=$!
        children+=("$pr")
    fi
    if [[ -n $have_earlyoom ]]; then
        # --dryrun: it measures and decides as usual but kills nothing (other users share this machine).
        earlyoom -r 0 --dryrun >/dev/null 2>&1 &
        eo=$!
        children+=("$eo")
    fi
    sleep 3 # past python's imports
    log "measuring psrecord and earlyoom on the $size tree for ${WINDOW_S}s"
    pm=$work/pr.m eom=$work/eo.m
    [[ -n $pr ]] && measure "$pr" >"$pm" &
    m1=$!
    [[ -n $eo ]] && measure "$eo" >"$eom" &
    m2=$!
    wait "$m1" "$m2" || true
    for tool in psrecord earlyoom; do
        if [[ $tool == psrecord ]]; then f=$pm p=$pr label="psrecord PID --include-children --interval 1"; else f=$eom p=$eo label="earlyoom -r 0 --dryrun"; fi
        key="$size|$label"
        if [[ -z $p ]]; then
            cpu[$key]="n/a n/a n/a"; hwm[$key]=n/a
            rawline "watch|$key|not installed"
            continue
        fi
        read -r pt pe mpm mib <"$f"
        cpu[$key]="$pt $pe $mpm"; hwm[$key]=$mib
        rawline "watch|$key|cpu_pct_ticks=$pt|cpu_pct_exact=$pe|cpu_ms_per_min=$mpm|hwm_mib=$mib"
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    kill -TERM "$tree"
    wait "$tree" || true
done

# ---- 2. passthrough -------------------------------------------------------------------------
best() { # COMMAND...: best wall seconds of PASS_ROUNDS runs of `bash -c COMMAND`
    local b= s e d i
    for ((i = 0; i < PASS_ROUNDS; i++)); do
        s=$EPOCHREALTIME
        bash -c "$1"
        e=$EPOCHREALTIME
        d=$(awk -v s="$s" -v e="$e" 'BEGIN {print e - s}')
        if [[ -z $b ]] || awk -v d="$d" -v b="$b" 'BEGIN {exit !(d < b)}'; then b=$d; fi
    done
    echo "$b"
}
log "passthrough of 1 GiB, best of $PASS_ROUNDS"
p_cat=$(best "head -c 1G /dev/zero | cat > /dev/null")
p_tee=$(best "head -c 1G /dev/zero | tee $work/tee.log > /dev/null")
p_og=$(best "rm -rf $work/prun; $oomguard -q run --run-dir $work/prun --state-dir $work/state --no-pty -- head -c 1G /dev/zero > /dev/null")
rm -rf "$work/prun" "$work/tee.log"
rawline "passthrough|cat_s=$p_cat|tee_s=$p_tee|oomguard_s=$p_og"

# ---- 3. relaunch latency --------------------------------------------------------------------
log "relaunch latency over $RELAUNCHES relaunches"
times=$work/times
: >"$times"
probe=$work/probe
: >"$probe"
for ((i = 0; i < RELAUNCHES; i++)); do
    echo "spawn $EPOCHREALTIME" >>"$probe"
    bash "$root/bench/relaunch_job.sh" "$probe" --probe
done
batch=$((2 << RELAUNCHES)) # halved RELAUNCHES times down to 2, where the job succeeds
"$oomguard" -q run --run-dir "$work/rrun" --state-dir "$work/state" --no-pty --backoff 0s \
    --strategy halve --max-attempts $((RELAUNCHES + 1)) --no-cgroup \
    -- bash "$root/bench/relaunch_job.sh" "$times" --batch_size "$batch" 2>/dev/null
# bash start-up alone: from the parent's fork to the script's first line.
startup_ms=$(awk '/^spawn/ {s = $2} /^start/ {print ($2 - s) * 1000}' "$probe" | sort -n | awk '{a[NR] = $1} END {printf "%.2f\n", a[int((NR + 1) / 2)]}')
latencies=$(awk -v st="$startup_ms" '/^death/ {d = $2} /^start/ && d {printf "%.2f\n", ($2 - d) * 1000 - st; d = 0}' "$times" | sort -n)
n_lat=$(echo "$latencies" | wc -l)
lat_med=$(echo "$latencies" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
lat_max=$(echo "$latencies" | tail -1)
rawline "relaunch|bash_startup_ms=$startup_ms|latencies_ms=$(echo $latencies | tr ' ' ,)"

# ---- tables ---------------------------------------------------------------------------------
{
    echo
    echo "### Watching cost (${PROCS}-process python tree, ${WINDOW_S} s per row)"
    echo
    echo "| tree | watcher | CPU, % of a core | CPU ms per minute | CPU % (utime+stime) | peak RSS MiB | CPU vs psrecord |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    for size in "$(size_name "$SMALL_BYTES")" "$(size_name "$BIG_BYTES")"; do
        base=$(awk '{print $2}' <<<"${cpu["$size|psrecord PID --include-children --interval 1"]}")
        for watcher in "oomguard --interval 1s, --memory-max 12G" "oomguard --interval 100ms, --memory-max 12G" \
            "oomguard --interval 1s, --no-cgroup" "oomguard --interval 100ms, --no-cgroup" \
            "psrecord PID --include-children --interval 1" "earlyoom -r 0 --dryrun"; do
            read -r pt pe mpm <<<"${cpu["$size|$watcher"]}"
            ratio=$(awk -v a="$pe" -v b="$base" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "n/a"}')
            echo "| $size | \`$watcher\` | $pe | $mpm | $pt | ${hwm["$size|$watcher"]} | $ratio |"
        done
    done
    echo
    echo "### Passthrough of 1 GiB (best of $PASS_ROUNDS)"
    echo
    echo "| pipeline | MiB/s | time vs cat |"
    echo "|---|---:|---:|"
    for row in "head -c 1G /dev/zero \\| cat > /dev/null:$p_cat" \
        "head -c 1G /dev/zero \\| tee log > /dev/null:$p_tee" \
        "oomguard run -- head -c 1G /dev/zero > /dev/null:$p_og"; do
        s=${row##*:}
        awk -v n="${row%:*}" -v s="$s" -v c="$p_cat" 'BEGIN {printf "| `%s` | %.0f | %.2fx |\n", n, 1024 / s, s / c}'
    done
    echo
    echo "### Relaunch latency (--backoff 0s, $n_lat relaunches)"
    echo
    echo "From the job's death to the next attempt's first line, minus bash's own start-up timed alone (${startup_ms} ms median here)."
    echo
    echo "| median ms | max ms | goal |"
    echo "|---:|---:|---:|"
    echo "| $lat_med | $lat_max | < 100 ms |"
} | tee -a "$raw"
