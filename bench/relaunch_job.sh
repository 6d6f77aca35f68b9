#!/usr/bin/env bash
# Benchmark fixture for the relaunch latency: a job that dies of a (fake) CUDA out-of-memory error
# until its batch is small enough, recording when each attempt started and died.
#
#   relaunch_job.sh TIMES_FILE --batch_size N [anything else, ignored]
#
# Appends `start $EPOCHREALTIME` to TIMES_FILE as its first action. While N > 2 it then appends
# `death $EPOCHREALTIME`, prints PyTorch's CUDA OOM line on stderr and exits 1, so oomguard
# relaunches it with half the batch; at N <= 2 it exits 0. `--probe` only records the start: the
# script's own start-up, timed alone.
times=$1
shift
echo "start $EPOCHREALTIME" >>"$times"
batch=
while [[ $# -gt 0 ]]; do
    case $1 in
    --probe) exit 0 ;;
    --batch_size) batch=$2; shift ;;
    --batch_size=*) batch=${1#*=} ;;
    esac
    shift
done
if ((batch > 2)); then
    echo "death $EPOCHREALTIME" >>"$times"
    echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free." >&2
    exit 1
fi
