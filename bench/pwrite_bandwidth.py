#!/usr/bin/env python3
"""Write bandwidth into one file from several threads: pwrite of 8 MiB pieces
at disjoint offsets (what linattn's raw writers do), 1, 2, 4 and 8 threads.

    python3 bench/pwrite_bandwidth.py FILE BYTES
"""
import os
import sys
import threading
import time


def main():
    path, total = sys.argv[1], int(sys.argv[2])
    piece = 8 << 20
    buf = os.urandom(piece)
    n = max(1, total // piece)
    for threads in (1, 2, 4, 8):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        start = time.perf_counter()
        workers = [threading.Thread(target=lambda i: [os.pwrite(fd, buf, j * piece) for j in range(i, n, threads)],
                                    args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        seconds = time.perf_counter() - start
        os.close(fd)
        os.remove(path)
        print(f"pwrite of 8 MiB pieces into one file, {threads} thread(s): {n * piece / seconds / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main()
