#!/usr/bin/env python3
"""A seeded mutation fuzzer: linattn run over corrupted copies of example.h5.

Makes --mutations corrupted copies of EXAMPLE_H5 (random byte flips, byte-range
overwrites with random or "interesting" values, truncations and zeroed blocks,
biased toward the first 4 KB and the other metadata regions of the file, where
libhdf5 parses structure) and runs them through `linattn run ... --no-fsync
--case-timeout 5` in batches of --batch files, each batch ending with the
pristine EXAMPLE_H5. libhdf5 may crash or hang on such files; that must cost
only the case at hand. For every batch it asserts:

  * the batch process ended by itself (no signal, no hang past the timeout)
    with exit code 0 or 1;
  * stdout and stderr are strict UTF-8 without control characters (messages
    never echo raw bytes from the file);
  * every case has exactly one result line ([i/N] ... -> path, or FAILED) and
    the summary line agrees with them;
  * the pristine file's three cases completed, and their outputs verify;
  * a failed case left no output (final or .partial), no .partial is left
    anywhere in OUTDIR, and every output in OUTDIR belongs to a case reported ok.

Beside the byte mutations, structural ones (made with h5py when it can be
imported; docs/HDF5.md, "Data outside the file" and "Unwritten data"): copies
of EXAMPLE_H5 in which one dataset of one case keeps its data in another file
(external raw storage, a virtual dataset, an external link; the targets by
absolute path, through '..' or beside the file) or was never written (no
storage allocated, chunks missing), and one in which a case group is an
external link. They run in a batch of their own, once as they are and once
with --allow-external-data; that case must fail in both (or, an external
target beside the file, in the first), besides every assertion above.

Mutation k of seed S is made by random.Random(S * 100000 + k) alone, so a
finding is reproduced with `--seed S --only k` (the mutated files stay in
WORKDIR/mutants; WORKDIR is emptied at the start of a run; a failing batch's
OUTDIR is kept).

The runs get RLIMIT_DATA --data-limit (2 GiB; then also --memory-budget 64M):
a corrupt size can make libhdf5 allocate gigabytes in the reader (e.g. seed 3,
mutation 213: 8 GiB for a 4-character attribute), which must not take down
the CI machine; --data-limit 0 runs unbounded and shows it in the summary's
largest peak RSS.

Usage: fuzz_hostile_inputs.py LINATTN_EXE EXAMPLE_H5 WORKDIR [--mutations 320]
       [--seed 1] [--batch 40] [--jobs 2] [--only K[,K...]] [--data-limit MiB]
Exit 0 when every assertion held, 1 otherwise (the offending mutations listed).
Standard library only, but for the structural mutations (h5py, numpy).
"""
import argparse
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time
import unicodedata

CASE_TIMEOUT = 5      # linattn run --case-timeout
BATCH_TIMEOUT = 60    # seconds before a batch process counts as hung
MEMORY_BUDGET = "64M" # linattn run --memory-budget under --data-limit (the example's cases are tiny)
PRISTINE_GROUPS = ("case0", "case1", "case2")

RESULT_LINE = re.compile(r"^\[(\d+)/(\d+)\] (.*?)  (?:(B=.*)  -> (.*)|FAILED: (.*)|skipped: (.*))$")
SUMMARY_LINE = re.compile(r"^cases: (\d+) ok, (\d+) failed")
PEAK_RSS_LINE = re.compile(r"^peak RSS: (\d+) MiB \(batch process\), (\d+) MiB \((?:largest )?reader process")


# ---------------------------------------------------------------- mutations

def metadata_regions(data, block=64):
    """[start, end) runs of blocks that look like HDF5 metadata (many zero
    bytes), unlike the random-valued tensor data between them."""
    runs = []
    for start in range(0, len(data), block):
        chunk = data[start:start + block]
        if chunk.count(0) >= len(chunk) * 0.3:
            if runs and start <= runs[-1][1]:
                runs[-1][1] = start + len(chunk)
            else:
                runs.append([start, start + len(chunk)])
    return [tuple(r) for r in runs] or [(0, min(len(data), 4096))]


class Mutator:
    INTERESTING = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\x01", b"\xff\xff", b"\x00\x80", b"\xff\x7f",
                   b"\xff\xff\xff\xff", b"\x00\x00\x00\x80", b"\xff\xff\xff\x7f", b"\x00\x00\x01\x00",
                   b"\xff" * 8, b"\x00" * 8, b"\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x00\x00\x00\x00\x00\x00\x00\x80",
                   b"\x00\x10\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x00\x01\x00\x00\x00"]

    def __init__(self, pristine):
        self.pristine = pristine
        self.size = len(pristine)
        self.regions = metadata_regions(pristine)
        self.region_bytes = sum(b - a for a, b in self.regions)

    def offset(self, rng, length=1):
        """Where a mutation starts: 45% in the first 4 KB, 35% in a metadata
        region (weighted by size), 20% anywhere."""
        size = self.size
        r = rng.random()
        if r < 0.45:
            lo, hi = 0, min(4096, size)
        elif r < 0.80:
            pick = rng.randrange(self.region_bytes)
            for lo, hi in self.regions:
                if pick < hi - lo:
                    break
                pick -= hi - lo
        else:
            lo, hi = 0, size
        hi = min(hi, size - length + 1)   # the mutation fits in the file
        return rng.randrange(lo, max(lo + 1, hi))

    def flip(self, rng, data):
        n = rng.randint(1, 16)
        where = []
        for _ in range(n):
            at = self.offset(rng)
            if rng.random() < 0.5:
                data[at] ^= 1 << rng.randrange(8)   # one bit
            else:
                data[at] ^= rng.randrange(1, 256)   # a random byte
            where.append(at)
        return f"flip {n} byte(s) at {','.join(map(str, sorted(where)))}"

    def overwrite(self, rng, data):
        if rng.random() < 0.4:
            # An "interesting" value (an undefined address, a huge size, ...) at an aligned offset.
            value = rng.choice(self.INTERESTING)
            at = self.offset(rng, len(value)) & ~(len(value) - 1 if len(value) in (2, 4, 8) else 0)
            at = min(at, len(data) - len(value))
            data[at:at + len(value)] = value
            return f"overwrite {len(value)} byte(s) at {at} with {value.hex()}"
        length = rng.randint(1, 64) if rng.random() < 0.7 else rng.randint(65, 2048)
        at = self.offset(rng, length)
        length = min(length, len(data) - at)
        data[at:at + length] = bytes(rng.randrange(256) for _ in range(length))
        return f"overwrite {length} random byte(s) at {at}"

    def zero(self, rng, data):
        length = rng.randint(1, 256) if rng.random() < 0.6 else rng.randint(257, 8192)
        at = self.offset(rng, length)
        length = min(length, len(data) - at)
        data[at:at + length] = bytes(length)
        return f"zero {length} byte(s) at {at}"

    def truncate(self, rng, data):
        r = rng.random()
        if r < 0.1:
            keep = rng.randrange(0, 96)          # inside the superblock (or empty)
        elif r < 0.6:
            keep = self.offset(rng)
        else:
            keep = rng.randrange(0, len(data))
        del data[keep:]
        return f"truncate to {keep} byte(s)"

    def make(self, seed):
        """The mutated bytes for one seed and what was done to them."""
        rng = random.Random(seed)
        data = bytearray(self.pristine)
        kind = rng.choices(["flip", "overwrite", "truncate", "zero", "combo"], [40, 22, 13, 15, 10])[0]
        if kind == "combo":
            steps = [rng.choice([self.flip, self.overwrite, self.zero]) for _ in range(rng.randint(2, 3))]
            if rng.random() < 0.3:
                steps.append(self.truncate)
            what = "; ".join(step(rng, data) for step in steps)
        else:
            what = getattr(self, kind)(rng, data)
        return bytes(data), what


def structural_mutants(pristine_path, folder, secret_folder):
    """Copies of the pristine file, each with one case made to point outside
    the file or to hold unwritten data: a list of (id, path, group, allowed_may_run,
    what), where allowed_may_run says the case may complete with
    --allow-external-data (its target lies beside the file). Empty without h5py."""
    try:
        import h5py
        import numpy as np
    except ImportError:
        print("fuzz: no h5py/numpy; the structural mutations are left out")
        return []
    os.makedirs(folder)
    os.makedirs(secret_folder)
    secret_bin = os.path.join(secret_folder, "secret.bin")
    secret_h5 = os.path.join(secret_folder, "secret.h5")
    rng = np.random.default_rng(31)
    with h5py.File(pristine_path, "r") as f:
        largest = max(f[g][d].size for g in PRISTINE_GROUPS for d in ("q", "k", "v"))
    secret = rng.uniform(-1, 1, largest).astype(np.float32)
    secret.tofile(secret_bin)
    secret.tofile(os.path.join(folder, "beside.bin"))
    # The HDF5 targets hold a dataset of the same path and shape for each of
    # the example's, and a group g holding a small case.
    for path in (secret_h5, os.path.join(folder, "beside.h5")):
        with h5py.File(pristine_path, "r") as f, h5py.File(path, "w") as s:
            for g in PRISTINE_GROUPS:
                for d in ("q", "k", "v"):
                    s[f"{g}/{d}"] = secret[:f[g][d].size].reshape(f[g][d].shape)
            for d in ("q", "k", "v"):
                s[f"g/{d}"] = secret[:8].reshape(1, 8, 1, 1)
    # The external links' target: small, so that its datasets' offsets lie
    # inside the linking file too (the link alone must be the reason to refuse).
    with h5py.File(pristine_path, "r") as f, h5py.File(os.path.join(folder, "linked.h5"), "w") as s:
        for d in ("q", "k", "v"):
            s[f"case2/{d}"] = secret[:f["case2"][d].size].reshape(f["case2"][d].shape)
    up = os.path.relpath(secret_folder, folder)   # '../secret'

    def external(f, name, shape, target):
        f.create_dataset(name, shape=shape, dtype=np.float32, external=[(target, 0, int(np.prod(shape)) * 4)])

    def virtual(f, name, shape, target):
        layout = h5py.VirtualLayout(shape=shape, dtype=np.float32)
        layout[...] = h5py.VirtualSource(target, f"{f.name}/{name}", shape=shape)
        f.create_virtual_dataset(name, layout)

    kinds = [
        ("external storage, absolute path", False, lambda f, n, s: external(f, n, s, secret_bin)),
        ("external storage, '..' path", False, lambda f, n, s: external(f, n, s, os.path.join(up, "secret.bin"))),
        ("external storage beside the file", True, lambda f, n, s: external(f, n, s, "beside.bin")),
        ("virtual dataset, absolute source", False, lambda f, n, s: virtual(f, n, s, secret_h5)),
        ("virtual dataset, '..' source", False, lambda f, n, s: virtual(f, n, s, os.path.join(up, "secret.h5"))),
        ("virtual dataset beside the file", True, lambda f, n, s: virtual(f, n, s, "beside.h5")),
        ("external link", False, lambda f, n, s: f.__setitem__(n, h5py.ExternalLink("linked.h5", f"{f.name}/{n}"))),
        ("chunked, never written", False,
         lambda f, n, s: f.create_dataset(n, shape=s, dtype=np.float32, chunks=(1, 16) + s[2:])),
        ("chunked, its first chunk missing", False, lambda f, n, s: f.create_dataset(
            n, shape=s, dtype=np.float32, chunks=(1, 16) + s[2:]).__setitem__((slice(None), slice(16, None)), 1.0)),
        ("contiguous, never written", False, lambda f, n, s: f.create_dataset(n, shape=s, dtype=np.float32)),
    ]
    # case2 is the example's fp32 case: the datasets made here are fp32.
    mutants = []
    group = "case2"
    for i, (what, allowed_may_run, make) in enumerate(kinds):
        for name in (("q", "k", "v")[i % 3:] + ("q", "k", "v")[:i % 3])[:2]:
            sid = f"s{len(mutants)}"
            path = os.path.join(folder, f"{sid}.h5")
            shutil.copyfile(pristine_path, path)
            with h5py.File(path, "r+") as f:
                shape = f[group][name].shape
                del f[group][name]
                make(f[group], name, shape)
            mutants.append((sid, path, group, allowed_may_run, f"{group}/{name}: {what}"))
    # A case group that is an external link: not listed, so not run.
    sid = f"s{len(mutants)}"
    path = os.path.join(folder, f"{sid}.h5")
    shutil.copyfile(pristine_path, path)
    with h5py.File(path, "r+") as f:
        del f["case1"]
        f["case1"] = h5py.ExternalLink("beside.h5", "/g")
    mutants.append((sid, path, "case1", False, "case1: an external link to a group of q, k, v in another file"))
    return mutants


# ---------------------------------------------------------------- checks

def group_output_name(group_printed):
    """OUTDIR name part of a group as linattn makes it from the printed
    (printable()-escaped) group name: '/' -> '.', anything else that is not
    [A-Za-z0-9._-] -> '_' per byte; an escape \\xNN stood for one byte."""
    out = []
    i = 0
    while i < len(group_printed):
        c = group_printed[i]
        if c == "\\" and re.match(r"\\x[0-9a-f]{2}", group_printed[i:i + 4]):
            out.append("_")
            i += 4
            continue
        if c == "/":
            out.append(".")
        elif c.isascii() and (c.isalnum() or c in "-_."):
            out.append(c)
        else:
            out.append("_" * len(c.encode()))
        i += 1
    return "".join(out)


def control_characters(text):
    """Control characters (C0 but newline, DEL, C1) in text, as repr."""
    return sorted({repr(c) for c in text if c != "\n" and unicodedata.category(c) == "Cc"})


DATA_LIMIT = 0   # bytes of RLIMIT_DATA for linattn and its reader (0: none), from --data-limit


def child_limits():
    """In the child before exec: no core files (the reader's crashes are
    expected), and, with --data-limit, a bound on heap memory: a corrupt size
    in a file makes libhdf5's allocation fail at once instead of taking
    gigabytes of the CI machine (linattn's reader has no bound of its own)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if DATA_LIMIT:
        resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))


class Batch:
    def __init__(self, index, seeds, files, pristine, outdir, extra=(), must_fail=None):
        self.index, self.seeds, self.files, self.pristine, self.outdir = index, seeds, files, pristine, outdir
        self.extra = list(extra)               # further options of `linattn run`
        self.must_fail = must_fail or {}       # file -> the group whose case must not complete
        self.problems = []          # (seed or None, message)
        self.ok = self.failed = self.crashes = self.timeouts = self.lost = 0
        self.failures = []          # (seed, message) of failed cases of mutated files
        self.wall = 0.0
        self.peak_rss = None        # (batch, reader) MiB as linattn reports them

    def command(self, exe):
        return [exe, "run", *self.files, self.pristine, "-o", self.outdir, "--no-fsync",
                "--case-timeout", str(CASE_TIMEOUT)] + (["--memory-budget", MEMORY_BUDGET] if DATA_LIMIT else []) + \
            self.extra

    def problem(self, seed, message):
        self.problems.append((seed, message))


def start_batch(exe, batch, workdir):
    batch.started = time.monotonic()
    batch.proc = subprocess.Popen(batch.command(exe), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd=workdir, preexec_fn=child_limits)


def finish_batch(exe, batch, check=None):
    """Waits for the batch (killing it past BATCH_TIMEOUT), checks how it
    ended and that its output is clean text, then runs check(exe, batch, rc)
    (check_batch by default) on what it reported."""
    proc = batch.proc
    try:
        out, err = proc.communicate(timeout=max(1.0, BATCH_TIMEOUT - (time.monotonic() - batch.started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        batch.wall = time.monotonic() - batch.started
        batch.problem(None, f"the batch process hung: killed after {BATCH_TIMEOUT} s "
                            f"(command: {' '.join(batch.command(exe))})")
        batch.stdout, batch.stderr = out.decode(errors="replace"), err.decode(errors="replace")
        return
    batch.wall = time.monotonic() - batch.started
    rc = proc.returncode
    if rc < 0:
        batch.problem(None, f"the batch process was killed by signal {-rc}")
    elif rc not in (0, 1):
        batch.problem(None, f"exit code {rc} (expected 0 or 1)")
    texts = {}
    for name, raw in (("stdout", out), ("stderr", err)):
        try:
            texts[name] = raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as e:
            texts[name] = raw.decode("utf-8", errors="replace")
            bad = raw[max(0, e.start - 40):e.end + 40]
            batch.problem(None, f"{name} is not UTF-8 ({e.reason} at byte {e.start}: {bad!r})")
        controls = control_characters(texts[name])
        if controls:
            batch.problem(None, f"{name} holds control characters {', '.join(controls)}")
    batch.stdout, batch.stderr = texts["stdout"], texts["stderr"]
    (check or check_batch)(exe, batch, rc)


def check_counts(batch, total, ok_of, summary, rc):
    """Cases 1..total each have a result line (ok_of: index -> ok), and the
    summary line and the exit code agree with them; sets batch.ok and .failed."""
    missing = [i for i in range(1, total + 1) if i not in ok_of]
    if missing:
        batch.problem(None, f"no result line for case(s) {missing[:10]} of {total}")
    n_ok = sum(1 for ok in ok_of.values() if ok)
    n_failed = len(ok_of) - n_ok
    if summary is None:
        batch.problem(None, "no summary line 'cases: N ok, M failed'")
    elif summary != (n_ok, n_failed):
        batch.problem(None, f"summary says {summary[0]} ok, {summary[1]} failed; result lines say {n_ok}, {n_failed}")
    if (rc == 0) != (n_failed == 0) and rc in (0, 1):
        batch.problem(None, f"exit code {rc} with {n_failed} failed case(s)")
    batch.ok, batch.failed = n_ok, n_failed


def check_batch(exe, batch, rc):
    inputs = [*batch.files, batch.pristine]
    seed_of = dict(zip(batch.files, batch.seeds))
    seed_of[batch.pristine] = None

    def input_of(label):
        """(input, group or None) for a printed label 'FILE:GROUP' or 'FILE'."""
        for path in inputs:
            if label == path:
                return path, None
            if label.startswith(path + ":"):
                return path, label[len(path) + 1:]
        return None, None

    results = {}   # index -> (input, group, ok, output or message)
    total = None
    summary = None
    for stream, text in (("stdout", batch.stdout), ("stderr", batch.stderr)):
        for line in text.splitlines():
            m = SUMMARY_LINE.match(line)
            if m and stream == "stdout":
                summary = (int(m.group(1)), int(m.group(2)))
                continue
            m = PEAK_RSS_LINE.match(line)
            if m and stream == "stdout":
                batch.peak_rss = (int(m.group(1)), int(m.group(2)))
                continue
            m = RESULT_LINE.match(line)
            if not m:
                continue
            i, n, label = int(m.group(1)), int(m.group(2)), m.group(3)
            path, group = input_of(label)
            if path is None:
                batch.problem(None, f"{stream}: a result line for an unknown input: {line!r}")
                continue
            if total is None:
                total = n
            elif n != total:
                batch.problem(seed_of[path], f"{stream}: [{i}/{n}] disagrees with N = {total}: {line!r}")
            if m.group(7) is not None:
                batch.problem(seed_of[path], f"{stream}: a case was skipped in a fresh OUTDIR: {line!r}")
                continue
            ok = m.group(6) is None
            if ok != (stream == "stdout"):
                batch.problem(seed_of[path], f"{'an ok' if ok else 'a FAILED'} line on {stream}: {line!r}")
            if i in results:
                batch.problem(seed_of[path], f"case [{i}/{n}] reported twice: {line!r}")
            results[i] = (path, group, ok, m.group(5) if ok else m.group(6))

    if rc is not None and rc >= 0 and total is None:
        batch.problem(None, "no result line at all")
        total = 0
    check_counts(batch, total or 0, {i: r[2] for i, r in results.items()}, summary, rc)

    def owner_seed(name):
        """The mutation whose input stem an output name starts with (None: the pristine file)."""
        stem = name.split(".")[0]
        return next((seed_of[p] for p in inputs if os.path.splitext(os.path.basename(p))[0] == stem), None)

    # What OUTDIR holds.
    present = set()
    for root, _, names in os.walk(batch.outdir):
        for name in names:
            full = os.path.join(root, name)
            if ".partial" in name:
                batch.problem(owner_seed(name), f"a partial output was left behind: {full}")
            elif name.startswith(".linattn-write-probe"):
                batch.problem(None, f"the write probe was left behind: {full}")
            else:
                present.add(os.path.normpath(full))

    ok_outputs = set()
    for i, (path, group, ok, detail) in sorted(results.items()):
        seed = seed_of[path]
        stem = os.path.splitext(os.path.basename(path))[0]
        if ok and batch.must_fail.get(path) == group:
            batch.problem(seed, f"case [{i}] {path}:{group} completed (-> {detail}), but it points outside its "
                                f"file or holds unwritten data")
        if ok:
            out = os.path.normpath(detail)
            ok_outputs.add(out)
            expected = os.path.normpath(os.path.join(batch.outdir, stem + ("." + group_output_name(group)
                                                                           if group is not None else "") + ".h5"))
            if out != expected:
                batch.problem(seed, f"case [{i}] {path}:{group} wrote {out}, expected {expected}")
            if out not in present:
                batch.problem(seed, f"case [{i}] {path}:{group} reported ok but {out} does not exist")
            continue
        if seed is not None:
            batch.failures.append((seed, detail))
            if "died of signal" in detail:
                batch.crashes += 1
            elif "timed out" in detail:
                batch.timeouts += 1
            elif "reader process" in detail:
                batch.lost += 1
        name = stem + ("." + group_output_name(group) if group is not None else "") + ".h5"
        for candidate in (name, name + ".partial"):
            full = os.path.normpath(os.path.join(batch.outdir, candidate))
            if os.path.exists(full):
                batch.problem(seed, f"case [{i}] {path}:{group} FAILED ({detail}) but {full} exists")
    for out in sorted(present - ok_outputs):
        batch.problem(owner_seed(os.path.basename(out)), f"{out} exists but no case reported it ok")

    # The pristine file, last in the batch, ran after whatever the mutants did.
    stem = os.path.splitext(os.path.basename(batch.pristine))[0]
    for group in PRISTINE_GROUPS:
        out = os.path.normpath(os.path.join(batch.outdir, f"{stem}.{group}.h5"))
        reported = [r for r in results.values() if r[0] == batch.pristine and r[1] == group]
        if not reported or not reported[0][2]:
            why = reported[0][3] if reported else "no result line"
            batch.problem(None, f"the pristine {batch.pristine}:{group} did not complete: {why}")
        elif out not in present:
            batch.problem(None, f"the pristine case {group}'s output {out} is missing")
        else:
            v = subprocess.run([exe, "verify", out], capture_output=True)
            if v.returncode != 0:
                batch.problem(None, f"linattn verify {out} exited with {v.returncode}: "
                                    f"{(v.stdout + v.stderr).decode(errors='replace').strip()[-400:]}")


# ---------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("exe")
    parser.add_argument("example")
    parser.add_argument("workdir")
    parser.add_argument("--mutations", type=int, default=320)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2, help="batches run at once (default 2)")
    parser.add_argument("--only", default="", help="comma-separated mutation numbers to run (reproduce a finding)")
    parser.add_argument("--data-limit", type=int, default=2048,
                        help=f"MiB of RLIMIT_DATA for linattn and its reader (default 2048; 0: none); with a limit "
                             f"the runs pass --memory-budget {MEMORY_BUDGET}")
    args = parser.parse_args()
    global DATA_LIMIT
    DATA_LIMIT = args.data_limit << 20
    started = time.monotonic()

    exe = os.path.abspath(args.exe)
    example = os.path.abspath(args.example)
    workdir = os.path.abspath(args.workdir)
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe} is not an executable")
    with open(example, "rb") as f:
        pristine = f.read()
    shutil.rmtree(workdir, ignore_errors=True)
    mutants = os.path.join(workdir, "mutants")
    os.makedirs(mutants)
    # The pristine input by a name of its own inside WORKDIR (so that no
    # other run can change it under us).
    pristine_copy = os.path.join(workdir, os.path.basename(example))
    shutil.copyfile(example, pristine_copy)

    mutator = Mutator(pristine)
    numbers = [int(k) for k in args.only.split(",") if k.strip()] if args.only else list(range(args.mutations))
    seeds, files, described = [], [], {}
    with open(os.path.join(workdir, "mutations.txt"), "w") as log:
        for k in numbers:
            seed = args.seed * 100000 + k
            data, what = mutator.make(seed)
            path = os.path.join(mutants, f"m{k:04d}.h5")
            with open(path, "wb") as f:
                f.write(data)
            seeds.append(k)
            files.append(os.path.relpath(path, workdir))
            described[k] = what
            log.write(f"{k}\tseed {seed}\t{os.path.basename(path)}\t{what}\n")
    made = time.monotonic() - started
    print(f"fuzz: {len(files)} mutations of {example} ({len(pristine)} bytes; metadata regions "
          f"{', '.join(f'[{a}, {b})' for a, b in mutator.regions)}), seed {args.seed}, made in {made:.1f} s")

    batches = []
    for b, first in enumerate(range(0, len(files), args.batch)):
        batches.append(Batch(b, seeds[first:first + args.batch], files[first:first + args.batch],
                             os.path.relpath(pristine_copy, workdir), os.path.join("out", f"batch{b:02d}")))
    # The structural mutations: one batch as they are, one with --allow-external-data.
    structural = [] if args.only else structural_mutants(pristine_copy, os.path.join(workdir, "structural"),
                                                          os.path.join(workdir, "secret"))
    if structural:
        ids = [m[0] for m in structural]
        rel = [os.path.relpath(m[1], workdir) for m in structural]
        for sid, _, _, _, what in structural:
            described[sid] = what
        for extra in ([], ["--allow-external-data"]):
            must_fail = {r: m[2] for r, m in zip(rel, structural) if not (extra and m[3])}
            b = len(batches)
            batches.append(Batch(b, ids, rel, os.path.relpath(pristine_copy, workdir),
                                 os.path.join("out", f"batch{b:02d}"), extra, must_fail))
        print(f"fuzz: {len(structural)} structural mutations (data outside the file, unwritten data), run twice: "
              f"as they are and with --allow-external-data")
    # Paths in the commands and in the checks are relative to WORKDIR (the
    # batches' cwd): shorter lines.
    os.chdir(workdir)
    running = []
    pending = list(batches)
    while pending or running:
        while pending and len(running) < max(1, args.jobs):
            batch = pending.pop(0)
            start_batch(exe, batch, workdir)
            running.append(batch)
        batch = running.pop(0)
        finish_batch(exe, batch)
        print(f"batch {batch.index}: {len(batch.files)} mutants + pristine, {batch.ok} ok, {batch.failed} failed "
              f"({batch.crashes} reader crashes, {batch.timeouts} timeouts), exit {batch.proc.returncode}, "
              f"{batch.wall:.1f} s{'' if not batch.problems else f', {len(batch.problems)} PROBLEM(S)'}",
              flush=True)
        if not batch.problems:
            shutil.rmtree(batch.outdir, ignore_errors=True)   # outputs of a good batch: not needed
        else:
            with open(os.path.join(workdir, f"batch{batch.index:02d}.log"), "w", encoding="utf-8") as log:
                log.write(" ".join(batch.command(exe)) + "\n--- stdout\n" + batch.stdout + "--- stderr\n" +
                          batch.stderr)

    total_wall = time.monotonic() - started
    ok = sum(b.ok for b in batches)
    failed = sum(b.failed for b in batches)
    crashes = sum(b.crashes for b in batches)
    timeouts = sum(b.timeouts for b in batches)
    lost = sum(b.lost for b in batches)
    reasons = {}
    for b in batches:
        for _, message in b.failures:
            key = re.sub(r"\d+", "N", message.split(": ", 1)[-1])[:90]
            reasons[key] = reasons.get(key, 0) + 1
    print()
    print("most common failure messages (digits as N):")
    for key, count in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {count:4d}  {key}")
    print()
    print(f"mutations: {len(files)}")
    print(f"structural mutations: {len(structural)} (each run twice)")
    print(f"batches: {len(batches)} (up to {args.batch} mutants + the pristine file each, {args.jobs} at a time)")
    print(f"cases ok: {ok}")
    print(f"cases failed: {failed}")
    print(f"  reader crashes (died of signal): {crashes}")
    print(f"  reader timeouts (timed out): {timeouts}")
    if lost:
        print(f"  other losses of the reader process: {lost}")
    rss = [(b.peak_rss[1], b.peak_rss[0], b.index) for b in batches if b.peak_rss]
    if rss:
        reader, batch_rss, where = max(rss)
        print(f"largest peak RSS: {reader} MiB in a reader process (batch {where}), "
              f"{max(r[1] for r in rss)} MiB in a batch process; heap limit "
              f"{f'{args.data_limit} MiB' if args.data_limit else 'none'}")
    print(f"total wall time: {total_wall:.1f} s")

    with open(os.path.join(workdir, "failures.txt"), "w", encoding="utf-8") as log:
        for b in batches:
            for seed, message in b.failures:
                log.write(f"{seed}\t{message}\n")

    problems = [(b, seed, message) for b in batches for seed, message in b.problems]
    if not problems:
        print("fuzz: ok, every batch held every assertion")
        return 0
    print(f"\nfuzz: FAILED, {len(problems)} assertion(s) did not hold:")
    for b, seed, message in problems:
        where = f"batch {b.index} (mutations {b.seeds[0]}..{b.seeds[-1]})" if seed is None \
            else f"structural mutation {seed} ({described[seed]})" if isinstance(seed, str) \
            else f"mutation {seed} (seed {args.seed * 100000 + seed}, {described[seed]})"
        print(f"  {where}: {message}")
    offending = sorted({seed for _, seed, _ in problems if isinstance(seed, int)})
    if offending:
        print(f"offending mutation seeds: {', '.join(map(str, offending))} "
              f"(reproduce with --seed {args.seed} --only {','.join(map(str, offending))})")
    print(f"logs and inputs kept in {workdir}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
