#!/usr/bin/env python3
"""linattn run interrupted by SIGTERM and by SIGINT, then resumed with --skip-existing.

Generates WORKDIR/in.h5 with a small case0 and a large case1 (fp32, B = 1 and a
long T, so that with --memory-budget 2.5M case1 streams through thousands of
windows for a second or two), starts `linattn run in.h5 -o OUT --memory-budget
2.5M`, polls OUT every 2 ms until in.case1.h5.partial appears and case0's result
line is out (case0's fsync and rename run on their own thread, after case1 has
begun: until its line, case0 is not finished and an interrupt discards it),
and sends the signal. Then, for each signal:

  * the exit code is 128 + the signal (a third round sends SIGTERM later, once
    the .partial holds 32 MiB, in the middle of case1's stream);
  * no *.partial is left in OUT, case1's output does not exist, case0's does
    (it finished before), and the reader process did not outlive the run;
  * `run ... --skip-existing` exits 0, says case0 was skipped, completes
    case1, and `linattn verify OUT/in.case1.h5` exits 0.

Also checks that --skip-existing together with --force is refused. When the
machine is so fast that case1 finishes before the signal lands, the input is
made again with twice the tokens (3 tries in all), then the test fails saying so.

Usage: interrupt_and_resume.py LINATTN_EXE WORKDIR. Standard library only.
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
    sys.exit("usage: interrupt_and_resume.py LINATTN_EXE WORKDIR")
EXE, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SMALL = "1,8,2,16,16"
LONG_T = [131072, 262144, 524288]    # case1's tokens per try (1.5 s, 3 s, 6 s here)
POLL = 0.002
size = 0                             # index into LONG_T of the current in.h5
NEEDS = 2 << 30                      # bytes of disk: in.h5 and two outputs of case1 (first size)


def linattn(*args):
    return run_linattn(EXE, WORK, *args)


def generate(tokens):
    if os.path.exists(os.path.join(WORK, "in.h5")):
        os.remove(os.path.join(WORK, "in.h5"))
    r = linattn("generate", "-o", "in.h5", "--shape", SMALL, "--shape", f"1,{tokens},4,64,64", "--dtype", "fp32",
                "--seed", "11", "--cases", "2")
    if r.returncode != 0:
        show(r, "generate")
        sys.exit(f"linattn generate exited with {r.returncode}")
    print(f"generated in.h5: case0 [{SMALL}], case1 [1,{tokens},4,64,64] fp32, "
          f"{os.path.getsize(os.path.join(WORK, 'in.h5')) / 2**20:.0f} MiB, in {r.wall:.1f} s")


def interrupt(out, sig, min_bytes):
    """Starts the run and signals it once case0 is reported complete (its
    result line is out: since the durable step (fsync, rename) runs on its own
    thread, case0 may still be committing when case1's .partial appears) and
    case1's .partial exists and holds at least min_bytes. Returns (run, reader
    pids seen), "too fast" when case1 beat the signal, or None when the run
    failed before it."""
    shutil.rmtree(out, ignore_errors=True)
    partial = os.path.join(out, "in.case1.h5.partial")

    def grown():
        try:
            return os.path.getsize(partial) >= min_bytes
        except OSError:
            return False

    r, readers, seen = signal_when(EXE, WORK, ["run", "in.h5", "-o", os.path.basename(out), "--memory-budget", "2.5M"],
                                   "[1/2] in.h5:case0  B=", grown, sig, "run", POLL)
    if seen is None:
        if r.returncode != 0:
            show(r, "run")
            check(False, f"{sig.name}: the run failed before it could be interrupted (exit {r.returncode})")
            return None
        print(f"  case0's result line and {os.path.basename(partial)}"
              f"{f' with {min_bytes} bytes' if min_bytes else ''} never were there at once: the run ended first "
              f"(exit {r.returncode} after {r.wall:.2f} s)")
        return "too fast"
    print(f"  case0 reported and {os.path.basename(partial)} there{f' with {min_bytes} bytes' if min_bytes else ''} "
          f"after {seen:.3f} s; sent {sig.name}")
    if r.returncode == 0:
        print(f"  the run finished before {sig.name} landed (exit 0 after {r.wall:.2f} s)")
        return "too fast"
    return r, readers


def round_trip(sig, min_bytes=0, verify=True):
    """Interrupt (once the .partial holds min_bytes), check, resume, check
    (and verify the outputs)."""
    out_name = f"out-{sig.name.lower()}" + (f"-at-{min_bytes >> 20}M" if min_bytes else "")
    out = os.path.join(WORK, out_name)
    print(f"\n== {sig.name}" + (f" once the .partial holds {min_bytes >> 20} MiB" if min_bytes else "") + " ==")
    global size
    while True:
        got = interrupt(out, sig, min_bytes)
        if got is None:
            return
        if got != "too fast":
            break
        if size + 1 == len(LONG_T):
            check(False, f"case1 finished before {sig.name} could interrupt it, up to T = {LONG_T[-1]} "
                         f"({len(LONG_T)} sizes tried); the machine is too fast for this test's sizes")
            return
        size += 1
        print(f"  too fast: retrying with T = {LONG_T[size]}")
        generate(LONG_T[size])
    r, readers = got
    show(r, f"run interrupted by {sig.name}")
    check(r.returncode == 128 + sig.value, f"{sig.name}: exit code {r.returncode}, expected {128 + sig.value}")
    left = sorted(n for n in os.listdir(out) if n.endswith(".partial"))
    check(not left, f"{sig.name}: partial outputs left in {out}: {left}")
    check(not os.path.exists(os.path.join(out, "in.case1.h5")), f"{sig.name}: case1's output exists after the interrupt")
    check(os.path.exists(os.path.join(out, "in.case0.h5")), f"{sig.name}: case0's output (finished before) is missing")
    check("[1/2] in.h5:case0  B=1 T=8" in r.stdout, f"{sig.name}: no result line for case0 before the interrupt")
    check("interrupted" in r.stderr, f"{sig.name}: stderr does not say the run was interrupted")
    deadline = time.monotonic() + 5
    while any(alive(p) for p in readers) and time.monotonic() < deadline:
        time.sleep(0.01)
    check(not any(alive(p) for p in readers),
          f"{sig.name}: the reader process {sorted(readers)} outlived the batch process")

    r = linattn("run", "in.h5", "-o", out_name, "--memory-budget", "2.5M", "--skip-existing")
    show(r, "resumed with --skip-existing")
    check(r.returncode == 0, f"{sig.name}: the resumed run exited with {r.returncode}")
    check(re.search(r"^\[1/2\] in\.h5:case0  skipped", r.stdout, re.M),
          f"{sig.name}: the resumed run does not say case0 was skipped")
    check(re.search(r"^\[2/2\] in\.h5:case1  B=1 .* -> " + re.escape(out_name) + r"/in\.case1\.h5$", r.stdout, re.M),
          f"{sig.name}: the resumed run does not report case1 complete")
    check(os.path.exists(os.path.join(out, "in.case1.h5")), f"{sig.name}: case1's output is missing after the resume")
    left = sorted(n for n in os.listdir(out) if n.endswith(".partial"))
    check(not left, f"{sig.name}: partial outputs left in {out} after the resume: {left}")
    for case in ("case0", "case1") if verify else ():
        v = linattn("verify", f"{out_name}/in.{case}.h5")
        show(v, f"verify {out_name}/in.{case}.h5")
        check(v.returncode == 0, f"{sig.name}: linattn verify {out_name}/in.{case}.h5 exited with {v.returncode}")
    if not failures and out_name != "out-sigterm":   # out-sigterm serves the --force check
        shutil.rmtree(out)


def main():
    started = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    free = shutil.disk_usage(WORK).free
    if free < NEEDS:
        print(f"SKIPPED: {WORK} has {free / 2**30:.1f} GiB free; this test needs {NEEDS / 2**30:.1f} GiB")
        return 77
    generate(LONG_T[size])
    for sig in (signal.SIGTERM, signal.SIGINT):
        round_trip(sig)
    # Mid-stream too: the writer thread is busy with case1's windows (the
    # outputs were verified above; this round checks the clean-up and resume).
    round_trip(signal.SIGTERM, min_bytes=32 << 20, verify=False)

    print("\n== --skip-existing with --force ==")
    out = os.path.join(WORK, "out-sigterm")
    before = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)} if os.path.isdir(out) else {}
    r = linattn("run", "in.h5", "-o", "out-sigterm", "--skip-existing", "--force")
    show(r, "run --skip-existing --force")
    check(r.returncode != 0, "--skip-existing with --force was accepted")
    after = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)} if os.path.isdir(out) else {}
    check(before == after, "the refused run changed OUT")

    print(f"\ntotal wall time: {time.monotonic() - started:.1f} s")
    if failures:
        print(f"interrupt_and_resume: FAILED ({len(failures)}):\n  " + "\n  ".join(failures))
        print(f"files kept in {WORK}")
        return 1
    shutil.rmtree(WORK, ignore_errors=True)   # hundreds of MiB of input and output
    print("interrupt_and_resume: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
