#!/usr/bin/env bash
# The second real-GPU check (beside check.sh), run by hand or on a GPU machine (not by
# `cargo test`): a job nobody here wrote, the Hugging Face Trainer on a randomly initialised
# GPT-2 small (124M), seq 1024, fp32, synthetic tokens, nothing downloaded (hf_gpt2_job.py,
# the job of ../shared/gpu-runs/hf-gpt2-seq1024). Issue 17: on an H200 the default strategy
# once went 256 -> 128 -> 1 x 256 on it; halving goes 256 -> 128 -> 64 x 4, which fits.
#
# It runs oomguard with default settings twice on the same command and checks:
#   - the first run succeeds with at most 2 failed attempts;
#   - no relaunch cuts the batch below half of the attempt before it, and batch x accumulation
#     stays the command's;
#   - summary.json's limits.gpu_total_bytes is the card's (from NVML);
#   - the second run starts from what worked in the first and succeeds with no failed attempt.
#
# The command's batch is 256 on a card of 139 GiB or more (an H200); on a smaller card the
# largest power of two at or below 256 x card / 139.8 GiB (128 on an 80 GB H100), so that the
# job needs about as many halvings; START_BATCH=N overrides it.
#
# Needs: an NVIDIA GPU, nvidia-smi, python3 with a CUDA build of torch, transformers and
# accelerate, and cargo, or OOMGUARD_BIN naming an oomguard binary built elsewhere.
# Run from anywhere: tests/gpu/hf_trainer.sh. Exit status: 0 PASS, 1 FAIL, 2 cannot run here.
# Keeps its temporary directory when it fails, and says where.

set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2

name=hf_trainer.sh
# shellcheck source=tests/gpu/common.sh
. tests/gpu/common.sh
python3 -c 'import transformers, accelerate' >/dev/null 2>&1 ||
    cannot_run "python3 cannot import transformers and accelerate (pip install transformers accelerate)"

total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | tr -d ' ')
case "$total_mib" in
'' | *[!0-9]*) cannot_run "cannot read GPU 0's memory from nvidia-smi (got '$total_mib')" ;;
esac
gpu_busy_warning "the batches that fit will be smaller"

# The command's batch: 256 on an H200 (143,771 MiB in nvidia-smi's units), scaled down by the
# card otherwise.
if [ -n "${START_BATCH:-}" ]; then
    start=$START_BATCH
else
    start=$(python3 -c "
import sys
total = int(sys.argv[1])
b = 256
while b > 1 and b * 143000 > 256 * total:
    b //= 2
print(b)" "$total_mib")
fi
say "command batch: $start (GPU 0: $total_mib MiB)"

# (2) Build, unless a binary was given; the temporary directory.
gpu_build
cp tests/gpu/hf_gpt2_job.py "$tmp/job.py" || exit 2
# The job's memory (what worked) lives under XDG_STATE_HOME: this check's own.
export XDG_STATE_HOME="$tmp/state"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# (3) Two runs of the same command, default settings (strategy fit), as the issue ran it.
run() {
    local n=$1
    say "run $n: oomguard run -- python3 job.py --per_device_train_batch_size $start --gradient_accumulation_steps 1 (a few minutes at most)"
    (cd "$tmp" && "$bin" run --run-dir "$tmp/run$n" --backoff 1s -- \
        python3 job.py --output_dir "$tmp/out" --per_device_train_batch_size "$start" \
        --gradient_accumulation_steps 1 --max_steps 3 --logging_steps 1 --report_to none \
        --save_strategy no --dataloader_num_workers 2 \
        >"$tmp/run$n.stdout" 2>"$tmp/run$n.stderr")
    local status=$?
    say "run $n: oomguard exited with status $status; its lines:"
    grep '^oomguard:' "$tmp/run$n.stderr" | sed 's/^/    /' >&2
    grep '^TRAINED' "$tmp/run$n.stdout" | sed 's/^/    /' >&2
    return $status
}
run 1
status1=$?
run 2
status2=$?

# (4) The checks, on both summaries.
python3 - "$tmp" "$start" "$status1" "$status2" "$total_mib" <<'PY'
import json
import os
import sys

tmp, start, status1, status2, total_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
problems = []


def load(n):
    try:
        with open(os.path.join(tmp, f"run{n}", "summary.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        problems.append(f"run {n}: cannot read summary.json: {e}")
        return {}


def sizes(summary):
    return [(a.get("batch_size"), a.get("accum"), a.get("cause")) for a in summary.get("attempts") or []]


first, second = load(1), load(2)
for n, summary, status in [(1, first, status1), (2, second, status2)]:
    print(f"hf_trainer.sh: run {n}: {summary.get('outcome')!r}, attempts {sizes(summary)}", file=sys.stderr)
    if status != 0:
        problems.append(f"run {n}: oomguard exited with status {status}, expected 0")
    if summary.get("outcome") != "succeeded":
        problems.append(f"run {n}: outcome {summary.get('outcome')!r}, expected 'succeeded'")
    attempts = summary.get("attempts") or []
    for a in attempts:
        batch, accum = a.get("batch_size"), a.get("accum")
        if batch is None or accum is None or batch * accum != start:
            problems.append(f"run {n}: attempt {a.get('attempt')}: {batch} x {accum} != {start} x 1")
    for before, after in zip(attempts, attempts[1:]):
        b0, b1 = before.get("batch_size") or 0, after.get("batch_size") or 0
        if b1 * 2 < b0:
            problems.append(f"run {n}: attempt {after.get('attempt')} cut {b0} -> {b1}, below half")
    failed = [a for a in attempts if a.get("cause") != "ok"]
    if n == 1 and len(failed) > 2:
        problems.append(f"run 1: {len(failed)} failed attempts, expected at most 2")
    gpu_total = (summary.get("limits") or {}).get("gpu_total_bytes")
    if not isinstance(gpu_total, int) or abs(gpu_total / 2**20 - total_mib) > total_mib * 0.02:
        problems.append(f"run {n}: limits.gpu_total_bytes is {gpu_total!r}, expected about {total_mib} MiB")

worked = [a for a in first.get("attempts") or [] if a.get("cause") == "ok"]
second_attempts = second.get("attempts") or []
if worked and second_attempts:
    w, s = worked[-1], second_attempts[0]
    if (s.get("batch_size"), s.get("accum")) != (w.get("batch_size"), w.get("accum")):
        problems.append(
            f"run 2 started at {s.get('batch_size')} x {s.get('accum')}, not at what worked in run 1 "
            f"({w.get('batch_size')} x {w.get('accum')})"
        )
    if any(a.get("cause") != "ok" for a in second_attempts):
        problems.append(f"run 2 had failed attempts: {sizes(second)}")

for p in problems:
    print(f"hf_trainer.sh: problem: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
verdict=$?

gpu_finish "$verdict"
