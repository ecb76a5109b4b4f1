#!/usr/bin/env python3
"""STREAM-like copy bandwidth of N processes at once, one array pair each.

The ceiling a CPU node's ranks share (issue 30, docs/PARALLEL.md): each
process copies its own array into another (numpy's copyto, one thread: a
memcpy), all of them started together at a barrier, and the aggregate is
every byte read and written over the slowest process's time, as STREAM's
"Copy" counts it (2 x the array per pass).

  python3 bench/memory_bandwidth.py --processes 1,4,8,16 --mib 512 --passes 10
"""
import argparse
import multiprocessing as mp
import os
import time

import numpy as np


def worker(mib, passes, barrier, results):
    a = np.ones(mib << 18, dtype=np.float32)  # mib MiB
    b = np.empty_like(a)
    barrier.wait()
    t0 = time.perf_counter()
    np.copyto(b, a)  # the first copy into fresh pages: page faults included
    fresh = time.perf_counter() - t0
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(passes):
        np.copyto(b, a)
    results.put((2 * a.nbytes * passes, time.perf_counter() - t0, 2 * a.nbytes / fresh))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", default="1,2,4,8,16", help="comma-separated process counts")
    ap.add_argument("--mib", type=int, default=512, help="array size per process (MiB), far above the caches")
    ap.add_argument("--passes", type=int, default=10)
    args = ap.parse_args()
    print(f"copy bandwidth, {args.mib} MiB per process, {args.passes} passes, os.cpu_count {os.cpu_count()}")
    for n in [int(x) for x in args.processes.split(",")]:
        barrier, results = mp.Barrier(n), mp.Queue()
        procs = [mp.Process(target=worker, args=(args.mib, args.passes, barrier, results)) for _ in range(n)]
        for p in procs:
            p.start()
        got = [results.get() for _ in procs]
        for p in procs:
            p.join()
        total = sum(b for b, _, _ in got)
        slowest = max(t for _, t, _ in got)
        each = [b / t / 1e9 for b, t, _ in got]
        fresh = [f / 1e9 for _, _, f in got]
        print(f"{n:3d} processes: {total / slowest / 1e9:7.1f} GB/s aggregate, "
              f"per process {min(each):.1f}-{max(each):.1f} GB/s; "
              f"first copy into fresh pages {min(fresh):.2f}-{max(fresh):.2f} GB/s per process")


if __name__ == "__main__":
    main()
