#!/usr/bin/env bash
# The cgroup v2 check of oomguard, run by hand as root on a machine whose memory cgroups are v2
# (this project's CI machines are v1, where `cargo test` covers the same ground).
#
# Checks, each in a fresh cgroup of its own below the v2 root:
#   1. --memory-max: the kernel OOM-kills the job inside the attempt cgroup; oomguard calls it
#      oom_killed from the cgroup's counter, records memory.peak, and converges (16 -> 4).
#   2. a SIGKILLed oomguard: its guard removes the attempt cgroup and kills the job.
#   3. without root (uid 65534) inside a 64 MiB cgroup made by root, where oomguard can make no
#      cgroup and cannot read the kernel log: the kill is still oom_killed, from the counter of
#      the cgroup above the job, with its limit named.
#
# Needs: root, cgroup v2 at /sys/fs/cgroup with the memory controller, python3, setpriv, and
# cargo or OOMGUARD_BIN naming a built oomguard. Exit status: 0 PASS, 1 FAIL, 2 cannot run here.

set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
say() { printf 'cgroupv2/check.sh: %s\n' "$*" >&2; }
cannot_run() { say "cannot run here: $*"; exit 2; }

[ "$(id -u)" = 0 ] || cannot_run "needs root"
[ -f /sys/fs/cgroup/cgroup.controllers ] || cannot_run "no cgroup v2 hierarchy at /sys/fs/cgroup"
grep -qw memory /sys/fs/cgroup/cgroup.controllers || cannot_run "no memory controller in cgroup v2"
command -v setpriv >/dev/null || cannot_run "setpriv not found (util-linux)"
if [ -n "${OOMGUARD_BIN:-}" ]; then
    og=$OOMGUARD_BIN
else
    cargo build --release || { say "FAIL: build"; exit 1; }
    og=$PWD/target/release/oomguard
fi
alloc=$PWD/tests/fixtures/alloc.py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/oomguard-v2-check.XXXXXX") && chmod 755 "$tmp"
made=()
cleanup() { for d in "${made[@]}"; do rmdir "$d"/* "$d" 2>/dev/null; done; }
trap cleanup EXIT
fresh() { local d=/sys/fs/cgroup/oomguard-v2-check-$$-$1; mkdir "$d" && made+=("$d") && echo "$d"; }
summary() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['outcome'], ' '.join(f\"{a['batch_size']}:{a['cause']}\" for a in s['attempts']), '|', s['attempts'][0]['evidence'], '| peak_cgroup', s['attempts'][0]['peak_cgroup_bytes'])" "$1"; }
problems=0
problem() { say "problem: $*"; problems=$((problems + 1)); }

# 1. --memory-max, oomguard alone in its cgroup (v2 allows processes only in leaves).
cg=$(fresh mm)
sh -c "echo \$\$ > $cg/cgroup.procs && exec $og run --run-dir $tmp/r1 --backoff 0s --memory-max 100M -- python3 $alloc --batch_size 16 --sample-mb 16" >"$tmp/r1.out" 2>&1
rc=$?
line=$(summary "$tmp/r1/summary.json"); say "1: rc $rc; $line"
[ "$rc" = 0 ] || problem "--memory-max run exited $rc"
case $line in "succeeded 16:oom_killed "*"cgroup oom_kill +1"*) ;; *) problem "1: expected 16:oom_killed from the cgroup counter, then success" ;; esac
ls -d "$cg"/oomguard-*-attempt-* 2>/dev/null && problem "1: attempt cgroups left behind"

# 2. SIGKILL oomguard mid-attempt.
cg=$(fresh kill)
sh -c "echo \$\$ > $cg/cgroup.procs && exec $og run --run-dir $tmp/r2 -- python3 -c 'import time; print(\"up\", flush=True); time.sleep(600)'" >"$tmp/r2.out" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q '^up' "$tmp/r2.out" 2>/dev/null && break; sleep 0.05; done
job=$(cat "$cg"/oomguard-*-attempt-1/cgroup.procs 2>/dev/null | head -n 1)
[ -n "$job" ] || problem "2: the job is not in an attempt cgroup"
kill -9 "$pid"; wait "$pid" 2>/dev/null
for _ in $(seq 200); do ls -d "$cg"/oomguard-*-attempt-* >/dev/null 2>&1 || break; sleep 0.05; done
ls -d "$cg"/oomguard-*-attempt-* 2>/dev/null && problem "2: the guard left the attempt cgroup"
# Alive, not a zombie waiting for init to reap it.
alive() { [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)" != Z ]; }
for _ in $(seq 200); do [ -n "$job" ] && alive "$job" || break; sleep 0.05; done
[ -n "$job" ] && alive "$job" && problem "2: the job $job outlived oomguard"
say "2: after SIGKILL: attempt cgroup gone, job gone"

# 3. Not root, inside a limited cgroup made by root.
cg=$(fresh limited)
echo 64M >"$cg/memory.max"; echo 0 >"$cg/memory.swap.max" 2>/dev/null
mkdir -m 777 "$tmp/r3p"
sh -c "echo \$\$ > $cg/cgroup.procs && exec setpriv --reuid=65534 --regid=65534 --clear-groups $og run --run-dir $tmp/r3p/run --backoff 0s --max-attempts 2 -- python3 $alloc --batch_size 16 --sample-mb 16" >"$tmp/r3.out" 2>&1
line=$(summary "$tmp/r3p/run/summary.json"); say "3: $line"
case $line in *"16:oom_killed"*"oom_kill +1 (memory limit 64.0 MiB)"*) ;; *) problem "3: expected oom_killed naming the 64 MiB limit" ;; esac

if [ "$problems" = 0 ]; then say PASS; rm -rf "$tmp"; exit 0; fi
say "FAIL (files kept in $tmp)"; exit 1
