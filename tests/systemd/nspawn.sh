#!/usr/bin/env bash
# The system unit under a real systemd (issue 19): boots this machine's own tree, through an
# overlay (nothing of the host changes), as a systemd-nspawn container whose PID 1 is systemd,
# installs oomguard and systemd/oomguard@.service there as README's "Installing the units" says,
# and checks what README promises. Root only; installs systemd-container where systemd-nspawn is
# missing. Prints `ok <check>` or `FAIL <check>: <why>` per check; exits 1 if any failed.
#
#     tests/systemd/nspawn.sh [target/debug/oomguard]
#
# Checked: `systemctl start` returns once READY=1 came (the unit is active); `systemctl status`
# shows oomguard's STATUS line; a CUDA out-of-memory error relaunches the job with a smaller
# batch; journald holds the job's lines and oomguard's; `kill -9` of oomguard makes the unit
# restart and go on from the batch that fit; `systemctl stop` gives the job its SIGTERM and
# leaves no process of it; a real kernel OOM kill under the job file's memory_max relaunches
# smaller (on cgroup v1 nspawn mounts the memory controller read-only inside the container: it
# is remounted read-write from the host); the user unit (`systemctl --user`, lingering user)
# starts, relaunches after a CUDA OOM and stops.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "${1:-$repo/target/debug/oomguard}")
[ "$(id -u)" = 0 ] || { echo "SKIPPED nspawn.sh: needs root"; exit 0; }
command -v systemd-nspawn >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd-container >/dev/null

dir=$(mktemp -d /tmp/oomguard-nspawn.XXXXXX)
root=$dir/root
nspawn=
cleanup() {
    if [ -n "$nspawn" ] && kill -0 "$nspawn" 2>/dev/null; then
        # SIGTERM asks the container's systemd to power off; it is killed if it does not.
        kill "$nspawn"
        for _ in $(seq 100); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$nspawn" 2>/dev/null || true
    fi
    umount "$root" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir"/{upper,work,root}
mount -t overlay overlay -o "lowerdir=/,upperdir=$dir/upper,workdir=$dir/work" "$root"
systemd-id128 new >"$root/etc/machine-id"
# The host's own services (databases, Slurm, munge) stay off in the container.
for unit in $(cd "$root/etc/systemd/system/multi-user.target.wants" && ls); do
    case $unit in systemd-*|dbus*|getty*|console*) ;; *) ln -sf /dev/null "$root/etc/systemd/system/$unit" ;; esac
done

# README's installation, inside the container.
install -m 755 "$bin" "$root/usr/local/bin/oomguard"
cp "$repo/systemd/oomguard@.service" "$root/etc/systemd/system/"
mkdir -p "$root/etc/oomguard" "$root/srv/og" "$root/etc/systemd/system/oomguard@.service.d"
# Tests wait 1 s for a restart, not the unit's 30 s.
printf '[Service]\nRestartSec=1s\n' >"$root/etc/systemd/system/oomguard@.service.d/fast.conf"
cat >"$root/srv/og/train.py" <<'EOF'
import signal, sys, time
batch = int(sys.argv[sys.argv.index("--batch_size") + 1])
print(f"job: batch {batch}", flush=True)
if batch > 8:
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", file=sys.stderr, flush=True)
    sys.exit(1)
def term(*_):
    print("job: SIGTERM, saving", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
while True:
    print(f"job: step at batch {batch}", flush=True)
    time.sleep(0.5)
EOF
cat >"$root/etc/oomguard/t.toml" <<'EOF'
name = "nspawn-t"
command = ["python3", "/srv/og/train.py", "--batch_size", "32"]
workdir = "/srv/og"
[run]
backoff = "0s"
grace = "10s"
EOF
cp "$repo/tests/fixtures/alloc.py" "$root/srv/og/alloc.py"
cat >"$root/etc/oomguard/k.toml" <<'EOF'
name = "nspawn-k"
command = ["python3", "/srv/og/alloc.py", "--batch_size", "32", "--sample-mb", "10"]
workdir = "/srv/og"
[run]
backoff = "0s"
memory_max = "150M"
EOF
chmod 700 "$root/etc/oomguard"

systemd-nspawn -D "$root" --register=no --keep-unit --link-journal=no --boot --console=pipe \
    >"$dir/console.log" 2>&1 &
nspawn=$!
leader=
for _ in $(seq 300); do
    leader=$(pgrep -P "$nspawn" -x systemd || true)
    [ -n "$leader" ] && break
    sleep 0.1
done
[ -n "$leader" ] || { echo "FAIL boot: no systemd in the container"; cat "$dir/console.log"; exit 1; }
inside() { nsenter -t "$leader" -a -- "$@"; }
for _ in $(seq 300); do
    state=$(inside systemctl is-system-running 2>/dev/null || true)
    case $state in running|degraded) break ;; esac
    sleep 0.1
done

failed=0
check() { # check NAME COMMAND...: ok, or FAIL with what the unit said
    local name=$1; shift
    if "$@"; then echo "ok $name"; else
        echo "FAIL $name"; failed=1
        inside systemctl status --no-pager oomguard@t 2>&1 | tail -n 20 || true
    fi
}
wait_for() { # wait_for SECONDS COMMAND...
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.2; done
}
prop() { inside systemctl show -P "$1" "${2:-oomguard@t}"; }
journal() { inside journalctl -q -u "${1:-oomguard@t}" --no-pager -o cat; }

echo "systemd $(inside systemctl --version | head -n1 | cut -d' ' -f2) in the container ($state)"
inside systemctl daemon-reload
check "systemctl start returns with the unit active (READY=1)" \
    bash -c "$(declare -f inside); leader=$leader; inside systemctl start oomguard@t && [ \"\$(inside systemctl is-active oomguard@t)\" = active ]"
check "a CUDA OOM relaunched smaller; STATUS says so" \
    wait_for 30 bash -c "$(declare -f inside prop); leader=$leader; prop StatusText | grep -q 'batch 8'"
check "systemctl status shows the STATUS line" \
    bash -c "$(declare -f inside); leader=$leader; inside systemctl status --no-pager oomguard@t | grep -q 'Status: \"attempt'"
check "journald holds the job's and oomguard's lines" \
    bash -c "$(declare -f inside journal); leader=$leader; j=\$(journal); grep -q 'CUDA out of memory' <<<\"\$j\" && grep -q 'job: step at batch 8' <<<\"\$j\" && grep -q 'attempt 1 ended' <<<\"\$j\""
main=$(prop MainPID)
inside kill -9 "$main"
check "kill -9 of oomguard: the unit restarts and starts from batch 8" \
    wait_for 30 bash -c "$(declare -f inside prop); leader=$leader; [ \"\$(prop NRestarts)\" = 1 ] && [ \"\$(prop MainPID)\" != $main ] && [ \"\$(prop MainPID)\" != 0 ] && prop StatusText | grep -q 'attempt 1/.*batch 8'"
# The restarted job has its SIGTERM handler once it steps: wait for its step line in this
# invocation's journal, since under load Python's start can outlast the status line above.
wait_for 30 bash -c "$(declare -f inside prop); leader=$leader; inside journalctl -q -u oomguard@t _SYSTEMD_INVOCATION_ID=\$(prop InvocationID) --no-pager -o cat | grep -q 'job: step at batch 8'" \
    || echo "note: the restarted job's step line did not show within 30 s"
inside systemctl stop oomguard@t
check "systemctl stop gives the job its SIGTERM and leaves none of it" \
    bash -c "$(declare -f inside journal); leader=$leader; journal | grep -q 'job: SIGTERM, saving' && ! inside pgrep -f /srv/og/train.py >/dev/null"

# A kernel OOM kill in the attempt cgroup, below the unit's delegated cgroup.
nsenter -t "$leader" -m -- mount -o remount,bind,rw /sys/fs/cgroup/memory
inside systemctl start oomguard@k || true
check "a kernel OOM kill under memory_max relaunches smaller until it fits" \
    wait_for 60 bash -c "$(declare -f inside prop journal); leader=$leader; [ \"\$(prop ActiveState oomguard@k)\" = inactive ] && [ \"\$(prop Result oomguard@k)\" = success ] && j=\$(journal oomguard@k) && grep -q 'oom_killed' <<<\"\$j\" && grep -q 'fits' <<<\"\$j\""

# The user unit, for a lingering user, as README installs it.
inside useradd -m -s /bin/bash oguser
home=$root/home/oguser
uid=$(inside id -u oguser)
mkdir -p "$home/.config/systemd/user" "$home/.config/oomguard"
cp "$repo/systemd/user/oomguard@.service" "$home/.config/systemd/user/"
sed 's/nspawn-t/nspawn-user/' "$root/etc/oomguard/t.toml" >"$home/.config/oomguard/u.toml"
inside chown -R oguser: /home/oguser/.config
inside loginctl enable-linger oguser
user() { inside runuser -u oguser -- env XDG_RUNTIME_DIR=/run/user/$uid systemctl --user "$@"; }
wait_for 30 bash -c "$(declare -f inside user); leader=$leader; uid=$uid; case \$(user is-system-running 2>/dev/null) in running|degraded) ;; *) false ;; esac" || true
user daemon-reload
check "user unit: start returns active, a CUDA OOM relaunches smaller" \
    bash -c "$(declare -f inside user wait_for); leader=$leader; uid=$uid; user start oomguard@u && wait_for 30 bash -c \"\$(declare -f inside user); leader=$leader; uid=$uid; user show -P StatusText oomguard@u | grep -q 'batch 8'\""
check "user unit: stop leaves none of the job" \
    bash -c "$(declare -f inside user); leader=$leader; uid=$uid; user stop oomguard@u && ! inside pgrep -u oguser -f /srv/og/train.py >/dev/null"
exit $failed
