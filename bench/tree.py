#!/usr/bin/env python3
"""Benchmark fixture: a process tree of a known shape for oomguard, psrecord and earlyoom to watch.

    tree.py N BYTES

Makes N processes in all (this one plus N-1 forked children), each of which allocates and touches
BYTES of its own anonymous memory, so the tree holds N x BYTES. Prints `ready <pid>` on stdout
once every process has touched its memory, then waits until it gets SIGTERM or SIGINT and exits
0. The children wait on a pipe whose write end only this process holds, so they exit as soon as
it does, however it ends (no orphans holding gigabytes)."""
import os
import signal
import sys


def touch(size):
    # bytes * n is one memset in C: every page is written, so it is resident (RSS == PSS == size).
    return bytearray(b"\x01") * size


def main():
    count, size = int(sys.argv[1]), int(sys.argv[2])
    # Block the stop signals before forking: the children inherit the mask and are ended by the
    # pipe, the parent takes them with sigwait.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    hold_r, hold_w = os.pipe()
    ready_r, ready_w = os.pipe()
    for _ in range(count - 1):
        if os.fork() == 0:
            os.close(hold_w)
            os.close(ready_r)
            buf = touch(size)
            os.write(ready_w, b"r")
            os.close(ready_w)
            os.read(hold_r, 1)  # EOF when the parent is gone
            del buf
            os._exit(0)
    os.close(hold_r)
    os.close(ready_w)
    buf = touch(size)
    got = 0
    while got < count - 1:
        chunk = os.read(ready_r, count)
        if not chunk:
            sys.exit("a child died before it was ready")
        got += len(chunk)
    sys.stdout.write(f"ready {os.getpid()}\n")
    sys.stdout.flush()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    del buf
    os.close(hold_w)
    for _ in range(count - 1):
        os.wait()


if __name__ == "__main__":
    main()
