"""What interrupt_and_resume.py (run) and interrupt_backward.py share: running
linattn and showing what it said, and the processes a run leaves behind.
Standard library only."""
import os
import subprocess
import time

failures = []  # what did not hold, in order


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"  FAILED: {message}")
    return condition


def run_linattn(exe, work, *args, timeout=600):
    """linattn ARGS in folder `work`, its output captured; .wall is its wall time."""
    started = time.monotonic()
    r = subprocess.run([exe, *args], cwd=work, capture_output=True, text=True, timeout=timeout)
    r.wall = time.monotonic() - started
    return r


def show(r, what):
    text = (r.stdout + r.stderr).rstrip()
    print(f"  {what}: exit {r.returncode} after {r.wall:.1f} s" + ("\n    " + text.replace("\n", "\n    ") if text else ""))


def children_of(pid):
    """Pids whose parent is pid (from /proc; empty when unreadable)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
