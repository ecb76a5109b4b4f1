#!/usr/bin/env python3
"""linattn backward interrupted by SIGTERM and by SIGINT, then resumed with --skip-existing.

The backward's twin of interrupt_and_resume.py. Generates WORKDIR/in.h5 with a
small case0 and a long case1 (fp32, B = 1), their forward outputs (`linattn
run`) and gradient input (`generate --grad`), then starts `linattn backward
fwd/in.case0.h5 fwd/in.case1.h5 ... --memory-budget 8M`, so that case1 streams
through hundreds of windows. Once case0's result line is out and case1's
.partial exists, it sends the signal. For each signal:

  * the exit code is 128 + the signal, stderr says the run was interrupted;
  * no *.partial is left, case1's output does not exist, case0's does, and
    the reader processes did not outlive the run;
  * `backward ... --skip-existing` exits 0, says case0 was skipped, completes
    case1, and `linattn verify` accepts case1's output.

When case1 finishes before the signal lands, the input is made again with
twice the tokens (3 tries), then the test fails saying so.

Usage: interrupt_backward.py LINATTN_EXE WORKDIR. Standard library only.
Exit 77 (skipped) when WORKDIR's file system has less than 2 GiB free.
"""
import os
import re
import shutil
import signal
import sys
import time

from interrupt_helpers import alive, check, failures, run_linattn, show, signal_when

if len(sys.argv) != 3:
    sys.exit("usage: interrupt_backward.py LINATTN_EXE WORKDIR")
EXE, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SMALL = "1,8,2,16,16"
LONG_T = [65536, 131072, 262144]  # case1's tokens per try
BUDGET = "8M"
POLL = 0.002
NEEDS = 2 << 30


def linattn(*args):
    return run_linattn(EXE, WORK, *args)


def prepare(tokens):
    """in.h5, its forward outputs in fwd/ and the gradient input grad.h5."""
    for name in ("in.h5", "grad.h5", "fwd"):
        path = os.path.join(WORK, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.path.exists(path) and os.remove(path)
    for args in (("generate", "-o", "in.h5", "--shape", SMALL, "--shape", f"1,{tokens},4,64,64", "--dtype", "fp32",
                  "--seed", "11", "--cases", "2"),
                 ("run", "in.h5", "-o", "fwd", "--no-fsync"),
                 ("generate", "--grad", "in.h5", "-o", "grad.h5", "--seed", "12")):
        r = linattn(*args)
        if r.returncode != 0:
            show(r, args[0])
            sys.exit(f"linattn {args[0]} exited with {r.returncode}")
    print(f"prepared: case0 [{SMALL}], case1 [1,{tokens},4,64,64] fp32, their forward outputs and gradients")


def command(out, *extra):
    return ["backward", "fwd/in.case0.h5", "fwd/in.case1.h5", "--grad", "grad.h5", "--grad", "grad.h5", "-o", out,
            "--memory-budget", BUDGET, *extra]


def interrupt(out, sig):
    """Starts the backward and signals it once case0 is reported and case1's
    .partial exists: (result, reader pids), "too fast", or None when it failed first."""
    shutil.rmtree(os.path.join(WORK, out), ignore_errors=True)
    partial = os.path.join(WORK, out, "in.case1.grad.h5.partial")
    r, readers, seen = signal_when(EXE, WORK, command(out), "[1/2] fwd/in.case0.h5  B=",
                                   lambda: os.path.exists(partial), sig, "backward", POLL)
    signalled = seen is not None
    if not signalled and r.returncode != 0:
        show(r, "backward")
        check(False, f"{sig.name}: the backward failed before it could be interrupted (exit {r.returncode})")
        return None
    if not signalled or r.returncode == 0:
        print(f"  the backward finished before {sig.name} (exit {r.returncode} after {r.wall:.2f} s)")
        return "too fast"
    print(f"  sent {sig.name} after {r.wall:.2f} s")
    return r, readers


def round_trip(sig, size):
    out = f"out-{sig.name.lower()}"
    print(f"\n== {sig.name} ==")
    while True:
        got = interrupt(out, sig)
        if got is None:
            return size
        if got != "too fast":
            break
        if size + 1 == len(LONG_T):
            check(False, f"case1 finished before {sig.name} could interrupt it, up to T = {LONG_T[-1]}")
            return size
        size += 1
        prepare(LONG_T[size])
    r, readers = got
    show(r, f"backward interrupted by {sig.name}")
    outdir = os.path.join(WORK, out)
    check(r.returncode == 128 + sig.value, f"{sig.name}: exit code {r.returncode}, expected {128 + sig.value}")
    left = sorted(n for n in os.listdir(outdir) if n.endswith(".partial"))
    check(not left, f"{sig.name}: partial outputs left: {left}")
    check(not os.path.exists(os.path.join(outdir, "in.case1.grad.h5")), f"{sig.name}: case1's output exists")
    check(os.path.exists(os.path.join(outdir, "in.case0.grad.h5")), f"{sig.name}: case0's output is missing")
    check("interrupted" in r.stderr, f"{sig.name}: stderr does not say the run was interrupted")
    deadline = time.monotonic() + 5
    while any(alive(p) for p in readers) and time.monotonic() < deadline:
        time.sleep(0.01)
    check(not any(alive(p) for p in readers), f"{sig.name}: reader processes {sorted(readers)} outlived the run")

    r = linattn(*command(out, "--skip-existing"))
    show(r, "resumed with --skip-existing")
    check(r.returncode == 0, f"{sig.name}: the resumed backward exited with {r.returncode}")
    check(re.search(r"^\[1/2\] fwd/in\.case0\.h5  skipped", r.stdout, re.M),
          f"{sig.name}: the resumed backward does not say case0 was skipped")
    check(re.search(r"^\[2/2\] fwd/in\.case1\.h5  B=1 .* -> " + re.escape(out) + r"/in\.case1\.grad\.h5$", r.stdout,
                    re.M), f"{sig.name}: the resumed backward does not report case1 complete")
    v = linattn("verify", f"{out}/in.case1.grad.h5")
    show(v, "verify case1")
    check(v.returncode == 0, f"{sig.name}: linattn verify of case1's gradients exited with {v.returncode}")
    return size


def main():
    started = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    free = shutil.disk_usage(WORK).free
    if free < NEEDS:
        print(f"SKIPPED: {WORK} has {free / 2**30:.1f} GiB free; this test needs {NEEDS / 2**30:.1f} GiB")
        return 77
    size = 0
    prepare(LONG_T[size])
    for sig in (signal.SIGTERM, signal.SIGINT):
        size = round_trip(sig, size)
    print(f"\ntotal wall time: {time.monotonic() - started:.1f} s")
    if failures:
        print(f"interrupt_backward: FAILED ({len(failures)}):\n  " + "\n  ".join(failures))
        print(f"files kept in {WORK}")
        return 1
    shutil.rmtree(WORK, ignore_errors=True)
    print("interrupt_backward: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
