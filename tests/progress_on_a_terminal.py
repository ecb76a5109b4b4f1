#!/usr/bin/env python3
"""The progress bar of `linattn run` and `linattn verify`, on a terminal.

Runs linattn with stderr on a pseudo-terminal (so that it draws its bar) on a
case of B = 4 rows streamed in many windows, and reads what it drew:

  * run's bar counts every token of every row: it goes past 1/B (it once
    stopped at 25% for B = 4, ETA far off, Mtok/s 0.00) and never past 100%,
    and its Mtok/s is not 0;
  * verify draws the same bar while it computes the fp64 reference.

Usage: progress_on_a_terminal.py LINATTN_EXE WORKDIR. Standard library only.
"""
import os
import re
import shutil
import subprocess
import sys

if len(sys.argv) != 3:
    sys.exit("usage: progress_on_a_terminal.py LINATTN_EXE WORKDIR")
EXE, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
B = 4
SHAPE = f"{B},8192,2,64,64"
BAR = re.compile(r"(\d+)% \|[#.]{20}\| ([0-9.]+) Mtok/s")
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"  FAILED: {message}")


def on_a_terminal(*args):
    """Runs linattn with stderr on a pseudo-terminal; returns (exit code, stdout, what stderr showed)."""
    master, slave = os.openpty()
    proc = subprocess.Popen([EXE, *args], cwd=WORK, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    drawn = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not data:
            break
        drawn += data
    os.close(master)
    out = proc.stdout.read().decode(errors="replace")
    proc.wait()
    return proc.returncode, out, drawn.decode(errors="replace")


def bars(text, label):
    """The (percent, Mtok/s) of every bar drawn for `label`."""
    found = []
    for piece in re.split(r"[\r\n]", text):
        if label in piece:
            found += [(int(m.group(1)), float(m.group(2))) for m in BAR.finditer(piece)]
    return found


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
r = subprocess.run([EXE, "generate", "-o", "in.h5", "--shape", SHAPE, "--dtype", "fp32", "--seed", "5", "--cases", "1"],
                   cwd=WORK, capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"linattn generate exited with {r.returncode}: {r.stdout}{r.stderr}")

# KokkosBatched's tiles: a portable path slow enough on the host for a bar every 0.1 s to show.
print(f"run on [{SHAPE}] fp32 in small windows, stderr on a terminal")
code, out, drawn = on_a_terminal("run", "in.h5", "-o", "out", "--memory-budget", "24M", "--snapshots", "none",
                                 "--gemm", "kokkoskernels", "--no-fsync")
check(code == 0, f"run exited with {code}: {out}{drawn}")
shown = bars(drawn, "in.h5:case0")
print(f"  {len(shown)} bars drawn: " + ", ".join(f"{p}%" for p, _ in shown))
check(len(shown) >= 3, "run drew fewer than 3 bars (the case was too quick to show its progress?)")
if shown:
    check(max(p for p, _ in shown) > 100 // B + 25,
          f"run's bar never went past {100 // B + 25}% (B = {B}: does it count every row?)")
    check(max(p for p, _ in shown) <= 100, "run's bar went past 100%")
    check(any(rate > 0 for _, rate in shown), "run's bar shows 0.00 Mtok/s throughout")

print("verify, stderr on a terminal")
code, out, drawn = on_a_terminal("verify", "out/in.case0.h5")
check(code == 0, f"verify exited with {code}: {out}{drawn}")
check("verify: ok" in out, f"verify did not say ok: {out}")
shown = bars(drawn, "verify out/in.case0.h5")
print(f"  {len(shown)} bars drawn: " + ", ".join(f"{p}%" for p, _ in shown))
check(len(shown) >= 1, "verify drew no progress bar")
if shown:
    check(max(p for p, _ in shown) <= 100, "verify's bar went past 100%")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("ok")
