#!/usr/bin/env bash
# The real-GPU check of oomguard, run by hand or on a GPU machine (not by `cargo test`).
#
# It runs a PyTorch job that allocates batch_size × (GPU memory / 16) bytes: batch 32 needs
# twice the card and dies of a real torch.OutOfMemoryError, batch 16 needs all of it and dies
# too, batch 8 fits. oomguard must relaunch it (32 → 16 → 8, accumulation 1 → 2 → 4), end with
# `succeeded`, and record through NVML a GPU peak for the attempt that succeeded.
#
# Needs: an NVIDIA GPU, its driver (nvidia-smi), python3 with a CUDA build of torch, and cargo,
# or OOMGUARD_BIN naming an oomguard binary built elsewhere (a GPU machine without a toolchain).
# Run from anywhere: tests/gpu/check.sh. Exit status: 0 PASS, 1 FAIL, 2 cannot run here.
# Keeps its temporary directory when it fails, and says where.

set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2

name=check.sh
# shellcheck source=tests/gpu/common.sh
. tests/gpu/common.sh

# A busy GPU would make batch 8 (half the card) fail for reasons of its own.
gpu_busy_warning "batch 8 may not fit"

# (2) Build, unless a binary was given; the temporary directory.
gpu_build

# (3) The job.
cat >"$tmp/oom_job.py" <<'PY'
"""Allocates batch_size x (GPU memory / 16) bytes on cuda:0, holds it ~3 s doing matmuls."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, required=True)
parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
args = parser.parse_args()

total = torch.cuda.get_device_properties(0).total_memory
nbytes = args.batch_size * (total // 16)
print(
    f"batch {args.batch_size} x accum {args.gradient_accumulation_steps}: "
    f"allocating {nbytes} bytes ({nbytes / 2**30:.1f} GiB of {total / 2**30:.1f} GiB)",
    flush=True,
)
held = torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # dies here when too big
held.fill_(1)
m = torch.randn(1024, 1024, device="cuda")
deadline = time.time() + 3
while time.time() < deadline:
    m = torch.tanh(m @ m)
    torch.cuda.synchronize()
print(f"done, held {held.numel()} bytes", flush=True)
PY

# (4) oomguard, with the default strategy (fit): from the real message's numbers it should go
# straight to a batch that fits (8, the largest divisor of the effective batch 32 under the
# card), where halving takes 3 attempts (32, 16, 8). STRATEGY=halve checks the halving path.
run_dir="$tmp/run"
say "running oomguard --strategy ${STRATEGY:-fit} (at most 3 attempts, about 15 s)"
"$bin" run --run-dir "$run_dir" --backoff 1s --interval 200ms --strategy "${STRATEGY:-fit}" -- \
    python3 "$tmp/oom_job.py" --batch_size 32 --gradient_accumulation_steps 1 \
    >"$tmp/oomguard.stdout" 2>"$tmp/oomguard.stderr"
status=$?
say "oomguard exited with status $status; its stderr:"
sed 's/^/    /' "$tmp/oomguard.stderr" >&2
say "its stdout:"
sed 's/^/    /' "$tmp/oomguard.stdout" >&2

# (5) summary.json.
say "summary.json:"
python3 - "$run_dir" "$status" <<'PY'
import json
import os
import re
import sys

run_dir, status = sys.argv[1], int(sys.argv[2])
problems = []
try:
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
except (OSError, ValueError) as e:
    print(f"check.sh: FAIL: cannot read summary.json: {e}", file=sys.stderr)
    sys.exit(1)
print(json.dumps(summary, indent=2), file=sys.stderr)

attempts = summary.get("attempts") or []
if status != 0:
    problems.append(f"oomguard exited with status {status}, expected 0")
if not attempts:
    problems.append("no attempts recorded")
else:
    first, last = attempts[0], attempts[-1]
    if first.get("cause") != "device_oom":
        problems.append(f"first attempt's cause is {first.get('cause')!r}, expected 'device_oom'")
    if last.get("cause") != "ok":
        problems.append(f"last attempt's cause is {last.get('cause')!r}, expected 'ok'")
    for a in attempts:
        batch, accum = a.get("batch_size"), a.get("accum")
        if batch is None or accum is None or batch * accum != 32:
            problems.append(
                f"attempt {a.get('attempt')}: batch {batch} x accum {accum} != 32 x 1"
            )
    peak = last.get("peak_gpu_bytes")
    if not isinstance(peak, int) or peak <= 0:
        problems.append(f"successful attempt's peak_gpu_bytes is {peak!r}, expected > 0")
    else:
        # What the job allocated, from its own log line (a warning only: the peak is sampled).
        allocated = None
        try:
            with open(os.path.join(run_dir, f"attempt-{last.get('attempt')}.log")) as f:
                m = re.search(r"allocating (\d+) bytes", f.read())
                allocated = int(m.group(1)) if m else None
        except OSError:
            pass
        print(
            f"check.sh: successful attempt: peak_gpu_bytes {peak} ({peak / 2**30:.2f} GiB)"
            + (f", job allocated {allocated} ({allocated / 2**30:.2f} GiB)" if allocated else ""),
            file=sys.stderr,
        )
        if allocated and peak < allocated:
            print(
                "check.sh: warning: the peak is below what the job allocated "
                "(sampling missed the hold, or the peak counts something else)",
                file=sys.stderr,
            )
if len(attempts) > 3:
    problems.append(f"{len(attempts)} attempts, expected at most 3 (32, 16, 8 when halving)")
if summary.get("outcome") != "succeeded":
    problems.append(f"outcome is {summary.get('outcome')!r}, expected 'succeeded'")

for p in problems:
    print(f"check.sh: problem: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
verdict=$?

# Waiting for the GPU to be freed between attempts: only oomguard's own wait lines count (its
# death lines quote torch's message, which also speaks of free GPU memory).
wait_lines=$(grep -E '^oomguard: (waiting up to .* for the GPU|GPU free after|warning: the GPU still lists)' "$tmp/oomguard.stderr")
if [ -n "$wait_lines" ]; then
    say "GPU-free wait lines:"
    printf '%s\n' "$wait_lines" | sed 's/^/    /' >&2
else
    say "no GPU-free wait was needed: NVML no longer listed an attempt's processes when it ended"
fi

gpu_finish "$verdict"
