#!/usr/bin/env bash
# The probe on a real GPU (issue 32), run by hand or on a GPU machine (not by `cargo test`).
#
# A real PyTorch training loop whose step holds about 1.5 × batch × (GPU memory / 40) bytes: batch 32
# dies of a real torch.OutOfMemoryError in its first backward, 16 fits (accumulation keeps the
# effective batch 32). Checks what only a card can show: the probe's step events carry the
# CUDA allocator's peaks (reserved at most what NVML saw), the out-of-memory observer fired
# before the allocator unwound (requested, device total, reserved, allocated), and the fit read
# them. With RECORD=DIR, the run directory is copied there, to record into tests/fixtures/replay/.
#
# Needs what check.sh needs. Exit status: 0 PASS, 1 FAIL, 2 cannot run here.

set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2

name=probe.sh
# shellcheck source=tests/gpu/common.sh
. tests/gpu/common.sh

gpu_busy_warning "batch 16 may not fit"
gpu_build

cat >"$tmp/probe_job.py" <<'PY'
"""A training loop on cuda:0 whose step holds about 1.5 x batch x (GPU memory / 40) bytes."""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--batch_size", type=int, required=True)
p.add_argument("--gradient_accumulation_steps", type=int, default=1)
p.add_argument("--steps", type=int, default=6)
a = p.parse_args()

per_sample = torch.cuda.get_device_properties(0).total_memory // 40
w = torch.nn.Parameter(torch.ones(1024, device="cuda"))
opt = torch.optim.SGD([w], lr=1e-6)
for step in range(a.steps):
    opt.zero_grad()
    for _ in range(a.gradient_accumulation_steps):
        # Half of the step's memory in the input, half in the product kept for backward.
        x = torch.ones(a.batch_size * per_sample // 8, device="cuda")
        loss = (x * w.sum()).mean()
        loss.backward()
        del x, loss
    opt.step()
    print(f"batch {a.batch_size} step {step + 1}", flush=True)
PY

run_dir="$tmp/run"
say "running oomguard (2 attempts expected, about 20 s)"
"$bin" run --run-dir "$run_dir" --backoff 1s --interval 200ms -- \
    python3 "$tmp/probe_job.py" --batch_size 32 --gradient_accumulation_steps 1 \
    >"$tmp/oomguard.stdout" 2>"$tmp/oomguard.stderr"
status=$?
say "oomguard exited with status $status; its stderr:"
sed 's/^/    /' "$tmp/oomguard.stderr" >&2

python3 - "$run_dir" "$status" <<'PY'
import json
import os
import sys

run_dir, status = sys.argv[1], int(sys.argv[2])
problems = []
with open(os.path.join(run_dir, "summary.json")) as f:
    summary = json.load(f)
attempts = summary.get("attempts") or []
for a in attempts:
    print(f"probe.sh: attempt {a.get('attempt')}: batch {a.get('batch_size')} cause {a.get('cause')} "
          f"peak_gpu_bytes {a.get('peak_gpu_bytes')} probe {json.dumps(a.get('probe'))}", file=sys.stderr)
if status != 0 or summary.get("outcome") != "succeeded":
    problems.append(f"status {status}, outcome {summary.get('outcome')!r}: expected 0, succeeded")
if len(attempts) < 2:
    problems.append(f"{len(attempts)} attempts, expected a death then a success")
else:
    first, last = attempts[0], attempts[-1]
    oom = (first.get("probe") or {}).get("oom") or {}
    for key in ("requested_bytes", "device_total_bytes", "reserved_bytes", "allocated_bytes"):
        if not isinstance(oom.get(key), int):
            problems.append(f"attempt 1's probe.oom has no {key}: {oom}")
    seen = last.get("probe") or {}
    if seen.get("steps") != 6:
        problems.append(f"the last attempt's probe counted {seen.get('steps')!r} steps, expected 6")
    reserved, nvml = seen.get("cuda_peak_reserved_bytes"), last.get("peak_gpu_bytes")
    if not isinstance(reserved, int) or reserved <= 0:
        problems.append(f"no cuda_peak_reserved_bytes in the last attempt's probe: {seen}")
    elif isinstance(nvml, int) and reserved > nvml:
        problems.append(f"the allocator's reserved peak {reserved} is above NVML's {nvml}")
    if not seen.get("samples_per_second"):
        problems.append("no samples_per_second")
for p in problems:
    print(f"probe.sh: problem: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
verdict=$?

if [ -n "${RECORD:-}" ]; then
    mkdir -p "$RECORD" && cp -r "$run_dir"/. "$RECORD"/ && say "run directory copied to $RECORD"
fi
gpu_finish "$verdict"
