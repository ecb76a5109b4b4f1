"""What interrupt_and_resume.py (run) and interrupt_backward.py share: running
linattn and showing what it said, signalling it at a chosen moment, and the
processes a run leaves behind. Standard library only."""
import os
import subprocess
import threading
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


def signal_when(exe, work, args, first_line, ready, sig, what, poll=0.002, limit=300):
    """Starts linattn ARGS in folder `work` and sends it sig once a line of its
    stdout has started with first_line and ready() holds, noting its reader
    processes first. Returns (result, reader pids, seconds to the signal or None
    when it was never sent); result.wall is the wall time. A run still alive
    60 s after the signal is killed and counted as a failure."""
    started = time.monotonic()
    proc = subprocess.Popen([exe, *args], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    streams = {"stdout": [], "stderr": []}
    line_seen = threading.Event()

    def collect(name, pipe):
        for line in pipe:
            streams[name].append(line)
            if name == "stdout" and line.startswith(first_line):
                line_seen.set()

    threads = [threading.Thread(target=collect, args=(n, getattr(proc, n)), daemon=True) for n in streams]
    for t in threads:
        t.start()
    seen, readers = None, set()
    while proc.poll() is None and time.monotonic() - started < limit:
        if line_seen.is_set() and ready():
            seen = time.monotonic() - started
            readers.update(children_of(proc.pid))
            proc.send_signal(sig)
            break
        time.sleep(poll)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        check(False, f"linattn {what} did not end within 60 s of {sig.name}")
    for t in threads:
        t.join()
    r = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(streams["stdout"]), "".join(streams["stderr"]))
    r.wall = time.monotonic() - started
    return r, readers, seen
