#!/usr/bin/env python3
"""A toy training loop for trying oomguard: standard library only, no GPU needed.

Each step really allocates `--batch_size` x `--sample-mb` MiB of host memory (and touches every
page). The process caps its own address space at `--cap-mb` MiB above what it used at start
(RLIMIT_AS), so a batch that does not fit raises a real Python MemoryError, exactly as a host
out-of-memory looks in a real job. Gradient accumulation keeps the effective batch: with
`--gradient_accumulation_steps N` each optimiser step sums N micro-batches.

    oomguard run --backoff 1s -- python3 examples/toy_trainer.py --batch_size 64
"""
import argparse
import resource
import sys
import time


def vm_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--sample-mb", type=int, default=4, help="MiB of activations per sample")
    p.add_argument("--cap-mb", type=int, default=100, help="memory the 'device' has, in MiB")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--step-seconds", type=float, default=0.05)
    args = p.parse_args()

    cap = vm_bytes() + args.cap_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    effective = args.batch_size * args.gradient_accumulation_steps
    print(f"toy_trainer: batch {args.batch_size} x accumulation {args.gradient_accumulation_steps}"
          f" = effective batch {effective}; {args.batch_size * args.sample_mb} MiB per step of {args.cap_mb} MiB",
          flush=True)
    for step in range(1, args.steps + 1):
        for _micro in range(args.gradient_accumulation_steps):
            activations = bytearray(args.batch_size * args.sample_mb * 2**20)  # MemoryError when too big
            for i in range(0, len(activations), 4096):
                activations[i] = 1
            del activations
        bar = "#" * (20 * step // args.steps)
        sys.stderr.write(f"\rstep {step:3d}/{args.steps} |{bar:<20}|")
        sys.stderr.flush()
        time.sleep(args.step_seconds)
    sys.stderr.write("\n")
    print("toy_trainer: done", flush=True)


if __name__ == "__main__":
    main()
