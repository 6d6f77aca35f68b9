#!/usr/bin/env bash
# The shared-GPU check of oomguard (issue 25), run by hand or on a GPU machine (not by
# `cargo test`): two processes on card 0, as on a shared server.
#
# A neighbour (another user's job, a python process oomguard does not run) allocates most of
# the card: all that is free less the job's fixed part (card / 8) less 2 GiB. The job, started
# under oomguard once the neighbour holds its memory, allocates its fixed part (card / 8), then
# batch x card / 32: batch 8 needs 3/8 of the card, which fits on the card alone but not beside
# the neighbour, so attempt 1 dies of a real torch.OutOfMemoryError that names the neighbour.
# The neighbour leaves about 8 s after the job took its fixed part. oomguard must:
#   - call attempt 1's death `gpu_taken`, naming the neighbour's PID on that line;
#   - wait for room (--gpu-wait 60s) instead of cutting, and relaunch at batch 8, accum 1;
#   - end with `succeeded`.
#
# When $OUT is set, the run (summary.json, samples.csv, attempt-*.log), oomguard's stdout and
# stderr, the neighbour's log and the PIDs go to $OUT/shared-gpu/, to be recorded into
# tests/fixtures/replay/.
#
# Needs: an NVIDIA GPU, nvidia-smi, python3 with a CUDA build of torch, and cargo, or
# OOMGUARD_BIN naming an oomguard binary built elsewhere. Card 0 should be otherwise idle.
# Run from anywhere: tests/gpu/shared_gpu.sh. Exit status: 0 PASS, 1 FAIL, 2 cannot run here.
# Keeps its temporary directory when it fails, and says where.

set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2

name=shared_gpu.sh
# shellcheck source=tests/gpu/common.sh
. tests/gpu/common.sh

gpu_busy_warning "the neighbour takes what is free"

# (2) Build, unless a binary was given; the temporary directory. The neighbour is ended with it.
gpu_build
# shellcheck disable=SC2317 # called by common.sh's EXIT trap
cleanup() {
    if [ -n "${npid:-}" ]; then
        kill "$npid" 2>/dev/null
        wait "$npid" 2>/dev/null
    fi
    [ "${keep:-0}" = 1 ] || rm -rf "$tmp"
}
# The job's memory (what worked) lives under XDG_STATE_HOME: this check's own.
export XDG_STATE_HOME="$tmp/state"

# (3) The neighbour and the job.
cat >"$tmp/neighbour.py" <<'PY'
"""Another user's job: holds (free - card/8 - 2 GiB) on cuda:0 until the job has taken its
fixed part (--job-started exists), then --hold-s seconds more (--max-s at most), then exits."""
import argparse
import os
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--ready-file", required=True)
p.add_argument("--job-started", required=True)
p.add_argument("--hold-s", type=float, default=8.0)
p.add_argument("--max-s", type=float, default=90.0)
args = p.parse_args()

free, total = torch.cuda.mem_get_info(0)
nbytes = free - total // 8 - (2 << 30)
held = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
held.fill_(1)
torch.cuda.synchronize()
free_after, _ = torch.cuda.mem_get_info(0)
print(
    f"neighbour {os.getpid()}: holding {nbytes / 2**30:.2f} GiB of {total / 2**30:.2f} GiB; "
    f"{free_after / 2**30:.2f} GiB left free",
    flush=True,
)
open(args.ready_file, "a").close()
start = time.monotonic()
while not os.path.exists(args.job_started) and time.monotonic() - start < args.max_s:
    time.sleep(0.05)
print(f"neighbour {os.getpid()}: the job holds its fixed part; leaving in {args.hold_s:.0f} s", flush=True)
time.sleep(args.hold_s)
print(f"neighbour {os.getpid()}: leaving", flush=True)
PY

cat >"$tmp/job.py" <<'PY'
"""The job: card/8 fixed, then batch x card/32 on cuda:0 (dies here beside the neighbour),
then ~3 s of matmuls. Touches --started-file once it holds its fixed part."""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--batch_size", type=int, required=True)
p.add_argument("--grad_accum", type=int, default=1)
p.add_argument("--started-file", required=True)
args = p.parse_args()

total = torch.cuda.get_device_properties(0).total_memory
fixed, per_sample = total // 8, total // 32
need = fixed + args.batch_size * per_sample
print(
    f"batch {args.batch_size} x accum {args.grad_accum}: {fixed / 2**30:.2f} GiB fixed, "
    f"{need / 2**30:.2f} GiB in all, of {total / 2**30:.2f} GiB",
    flush=True,
)
weights = torch.empty(fixed, dtype=torch.uint8, device="cuda:0")
weights.fill_(1)
torch.cuda.synchronize()
open(args.started_file, "a").close()
time.sleep(0.5)  # a plateau before the first step, as a real job shows
acts = torch.empty(args.batch_size * per_sample, dtype=torch.uint8, device="cuda:0")
acts.fill_(1)
m = torch.randn(1024, 1024, device="cuda:0")
deadline = time.time() + 3
while time.time() < deadline:
    m = torch.tanh(m @ m)
    torch.cuda.synchronize()
print(f"done batch {args.batch_size} accum {args.grad_accum}", flush=True)
PY

say "starting the neighbour"
python3 "$tmp/neighbour.py" --ready-file "$tmp/neighbour.ready" --job-started "$tmp/job.started" \
    >"$tmp/neighbour.log" 2>&1 &
npid=$!
for _ in $(seq 600); do
    [ -e "$tmp/neighbour.ready" ] && break
    kill -0 "$npid" 2>/dev/null || break
    sleep 0.1
done
if [ ! -e "$tmp/neighbour.ready" ]; then
    sed 's/^/    /' "$tmp/neighbour.log" >&2
    keep=1
    say "FAIL: the neighbour did not take its memory (files kept in $tmp)"
    exit 1
fi
sed 's/^/    /' "$tmp/neighbour.log" >&2
# The PID the driver lists for the neighbour: its own, or another in a container's PID
# namespace (the process with the most memory on card 0 before the job starts).
nvml_pid=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -i 0 |
    sort -t, -k2 -n -r | head -n 1 | cut -d, -f1 | tr -d ' ')
say "neighbour PID $npid (the driver lists ${nvml_pid:-nothing})"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader -i 0 >&2

# (4) oomguard.
run_dir="$tmp/run"
say "running oomguard (2 attempts, about 20 s)"
"$bin" run --run-dir "$run_dir" --gpu-wait 60s --backoff 1s --interval 200ms \
    --accum-arg --grad_accum -- \
    python3 "$tmp/job.py" --batch_size 8 --grad_accum 1 --started-file "$tmp/job.started" \
    >"$tmp/oomguard.stdout" 2>"$tmp/oomguard.stderr"
status=$?
say "oomguard exited with status $status; its stderr:"
sed 's/^/    /' "$tmp/oomguard.stderr" >&2
say "its stdout:"
sed 's/^/    /' "$tmp/oomguard.stdout" >&2
# The neighbour has left by now (it holds 8 s after the job's start); end it if not.
if kill -0 "$npid" 2>/dev/null; then
    say "warning: the neighbour is still running; ending it"
    kill "$npid" 2>/dev/null
fi
wait "$npid" 2>/dev/null
say "the neighbour's log:"
sed 's/^/    /' "$tmp/neighbour.log" >&2
neighbour_pid=$npid
npid=

# (5) The record, pass or fail.
if [ -n "${OUT:-}" ]; then
    rec="$OUT/shared-gpu"
    mkdir -p "$rec" &&
        cp "$tmp/oomguard.stderr" "$tmp/oomguard.stdout" "$tmp/neighbour.log" "$rec/" &&
        for f in "$run_dir"/summary.json "$run_dir"/samples.csv "$run_dir"/attempt-*.log; do
            [ ! -f "$f" ] || cp "$f" "$rec/"
        done &&
        printf '{"neighbour_pid": %s, "nvml_pid": %s, "status": %s, "gpu": "%s"}\n' \
            "$neighbour_pid" "${nvml_pid:-null}" "$status" \
            "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader -i 0)" >"$rec/meta.json" &&
        say "recorded the run in $rec"
fi

# (6) The checks.
say "summary.json:"
python3 - "$run_dir" "$status" "$tmp/oomguard.stderr" "$neighbour_pid" "${nvml_pid:-}" <<'PY'
import json
import os
import re
import sys

run_dir, status, stderr_path, pids = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
pids = sorted({p for p in pids if p})
problems = []
try:
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
except (OSError, ValueError) as e:
    print(f"shared_gpu.sh: FAIL: cannot read summary.json: {e}", file=sys.stderr)
    sys.exit(1)
print(json.dumps(summary, indent=2), file=sys.stderr)

attempts = summary.get("attempts") or []
print(
    "shared_gpu.sh: attempts: "
    + ", ".join(f"{a.get('batch_size')} x {a.get('accum')} {a.get('cause')}" for a in attempts),
    file=sys.stderr,
)
if status != 0:
    problems.append(f"oomguard exited with status {status}, expected 0")
if summary.get("outcome") != "succeeded":
    problems.append(f"outcome is {summary.get('outcome')!r}, expected 'succeeded'")
if len(attempts) < 2:
    problems.append(f"{len(attempts)} attempts, expected 2 (gpu_taken, then batch 8 again)")
else:
    if attempts[0].get("cause") != "gpu_taken":
        problems.append(f"attempt 1's cause is {attempts[0].get('cause')!r}, expected 'gpu_taken'")
    second = attempts[1]
    if (second.get("batch_size"), second.get("accum")) != (8, 1):
        problems.append(
            f"attempt 2 ran at batch {second.get('batch_size')} x accum {second.get('accum')}, "
            "expected 8 x 1 (not cut: the neighbour left within --gpu-wait)"
        )
    if len(attempts) > 2:
        problems.append(f"{len(attempts)} attempts, expected 2")
    for a in attempts:
        if (a.get("batch_size") or 0) < 8:
            problems.append(f"attempt {a.get('attempt')} was cut to batch {a.get('batch_size')}")

try:
    lines = open(stderr_path).read().splitlines()
except OSError as e:
    lines = []
    problems.append(f"cannot read oomguard's stderr: {e}")
named = [
    line
    for line in lines
    if "gpu_taken" in line and any(re.search(rf"\b{p}\b", line) for p in pids)
]
if named:
    print(f"shared_gpu.sh: the cause line: {named[0]}", file=sys.stderr)
else:
    problems.append(
        f"no line of oomguard's stderr contains gpu_taken and the neighbour's PID ({' or '.join(pids)})"
    )

for p in problems:
    print(f"shared_gpu.sh: problem: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
verdict=$?

gpu_finish "$verdict"
