#!/usr/bin/env python3
"""The mutation fuzzer of fuzz_hostile_inputs.py, through `linattn backward`.

Runs `linattn run` on EXAMPLE_H5 (its three cases' forward outputs) and
`linattn generate --grad` (their gradient input), then makes --mutations
corrupted copies of those files with the same mutator (byte flips,
overwrites, truncations, zeroed blocks, biased toward HDF5's metadata): about
two in three a forward output (h, o, final_state and the attributes the
backward trusts: the input file's path, the chunk, the scale), the others the
gradient input (do, dht). Each mutant is one case of `linattn backward FWD...
--grad GRAD... --no-fsync --case-timeout 5`, paired with the pristine other
file (a copy of the pristine forward output under the mutant's own name, so
that every case writes its own output), in batches of --batch cases, each
batch ending with a pristine pair. libhdf5 may crash or hang in the reader
processes; that must cost only the case at hand. For every batch it asserts
what fuzz_hostile_inputs.py asserts of `run`:

  * the batch process ended by itself with exit code 0 or 1;
  * stdout and stderr are strict UTF-8 without control characters;
  * every case has exactly one result line and the summary agrees with them;
  * the pristine pair completed, and `linattn verify` accepts its output;
  * a failed case left no output (final or .partial), no .partial is left
    anywhere in OUTDIR, and every output in OUTDIR belongs to a case reported ok.

Mutation k of seed S is made by random.Random(S * 100000 + k) alone
(reproduce with --seed S --only k; the files stay in WORKDIR).

Usage: fuzz_backward.py LINATTN_EXE EXAMPLE_H5 WORKDIR [--mutations 160]
       [--seed 1] [--batch 40] [--jobs 2] [--only K[,K...]] [--data-limit MiB]
Exit 0 when every assertion held, 1 otherwise. Standard library only.
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import time

import fuzz_hostile_inputs as fz

GROUPS = fz.PRISTINE_GROUPS


class BackwardBatch:
    def __init__(self, index, seeds, pairs, pristine, outdir):
        self.index, self.seeds, self.outdir = index, seeds, outdir
        self.pairs = pairs          # (forward output, gradient input) of each mutant, in order
        self.pristine = pristine    # the pristine pair, last
        self.problems = []          # (seed or None, message)
        self.ok = self.failed = self.crashes = self.timeouts = 0
        self.failures = []          # (seed, message) of failed cases of mutants
        self.wall = 0.0

    def command(self, exe):
        pairs = self.pairs + [self.pristine]
        command = [exe, "backward", *[f for f, _ in pairs], "-o", self.outdir, "--no-fsync",
                   "--case-timeout", str(fz.CASE_TIMEOUT)]
        for _, grad in pairs:
            command += ["--grad", grad]
        return command + (["--memory-budget", fz.MEMORY_BUDGET] if fz.DATA_LIMIT else [])

    def problem(self, seed, message):
        self.problems.append((seed, message))


def output_of(outdir, forward):
    """Where backward writes the case of forward output FORWARD (grad_output_path)."""
    return os.path.normpath(os.path.join(outdir, os.path.splitext(os.path.basename(forward))[0] + ".grad.h5"))


def check_backward_batch(exe, batch, rc):
    pairs = batch.pairs + [batch.pristine]
    seed_of = {f: s for (f, _), s in zip(batch.pairs, batch.seeds)}
    seed_of[batch.pristine[0]] = None
    results = {}   # index -> (forward, ok, output or message)
    total = summary = None
    for stream, text in (("stdout", batch.stdout), ("stderr", batch.stderr)):
        for line in text.splitlines():
            m = fz.SUMMARY_LINE.match(line)
            if m and stream == "stdout":
                summary = (int(m.group(1)), int(m.group(2)))
                continue
            m = fz.RESULT_LINE.match(line)
            if not m:
                continue
            i, n, label = int(m.group(1)), int(m.group(2)), m.group(3)
            if label not in seed_of:
                batch.problem(None, f"{stream}: a result line for an unknown forward output: {line!r}")
                continue
            total = n if total is None else total
            if n != total or n != len(pairs):
                batch.problem(seed_of[label], f"{stream}: [{i}/{n}] but {len(pairs)} cases: {line!r}")
            ok = m.group(6) is None
            if ok != (stream == "stdout"):
                batch.problem(seed_of[label], f"{'an ok' if ok else 'a FAILED'} line on {stream}: {line!r}")
            if i in results:
                batch.problem(seed_of[label], f"case [{i}/{n}] reported twice: {line!r}")
            elif pairs[i - 1][0] != label:
                batch.problem(seed_of[label], f"case [{i}] should be {pairs[i - 1][0]}: {line!r}")
            results[i] = (label, ok, m.group(5) if ok else m.group(6))
    fz.check_counts(batch, len(pairs), {i: r[1] for i, r in results.items()}, summary, rc)

    present = set()
    for root, _, names in os.walk(batch.outdir):
        for name in names:
            full = os.path.normpath(os.path.join(root, name))
            if ".partial" in name:
                batch.problem(None, f"a partial output was left behind: {full}")
            else:
                present.add(full)
    ok_outputs = set()
    for i, (forward, ok, detail) in sorted(results.items()):
        seed, expected = seed_of[forward], output_of(batch.outdir, forward)
        if ok:
            ok_outputs.add(os.path.normpath(detail))
            if os.path.normpath(detail) != expected:
                batch.problem(seed, f"case [{i}] {forward} wrote {detail}, expected {expected}")
            elif expected not in present:
                batch.problem(seed, f"case [{i}] {forward} reported ok but {expected} does not exist")
            continue
        if seed is not None:
            batch.failures.append((seed, detail))
            batch.crashes += "died of signal" in detail
            batch.timeouts += "timed out" in detail
        for candidate in (expected, expected + ".partial"):
            if os.path.exists(candidate):
                batch.problem(seed, f"case [{i}] {forward} FAILED ({detail}) but {candidate} exists")
    for out in sorted(present - ok_outputs):
        batch.problem(None, f"{out} exists but no case reported it ok")

    # The pristine pair, last in the batch, ran after whatever the mutants did.
    pristine_out = output_of(batch.outdir, batch.pristine[0])
    last = results.get(len(pairs))
    if not last or not last[1]:
        batch.problem(None, f"the pristine pair did not complete: {last[2] if last else 'no result line'}")
    elif pristine_out in present:
        v = subprocess.run([exe, "verify", pristine_out], capture_output=True)
        if v.returncode != 0:
            batch.problem(None, f"linattn verify {pristine_out} exited with {v.returncode}: "
                                f"{(v.stdout + v.stderr).decode(errors='replace').strip()[-400:]}")


def run_checked(command, what):
    done = subprocess.run(command, capture_output=True)
    if done.returncode != 0:
        sys.exit(f"fuzz_backward: {what} failed ({done.returncode}): "
                 f"{(done.stdout + done.stderr).decode(errors='replace')[-600:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("exe")
    parser.add_argument("example")
    parser.add_argument("workdir")
    parser.add_argument("--mutations", type=int, default=160)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="")
    parser.add_argument("--data-limit", type=int, default=2048,
                        help=f"MiB of RLIMIT_DATA (default 2048; 0: none); with a limit --memory-budget "
                             f"{fz.MEMORY_BUDGET}")
    args = parser.parse_args()
    fz.DATA_LIMIT = args.data_limit << 20
    started = time.monotonic()
    exe, example, workdir = (os.path.abspath(p) for p in (args.exe, args.example, args.workdir))
    shutil.rmtree(workdir, ignore_errors=True)
    forwards, grads = os.path.join(workdir, "forward"), os.path.join(workdir, "grads")
    os.makedirs(grads)
    stem = os.path.splitext(os.path.basename(example))[0]
    pristine_input = os.path.join(workdir, os.path.basename(example))
    shutil.copyfile(example, pristine_input)
    run_checked([exe, "run", pristine_input, "-o", forwards, "--no-fsync"], "linattn run of the example")
    pristine_grad = os.path.join(workdir, "grad.h5")
    run_checked([exe, "generate", "--grad", pristine_input, "-o", pristine_grad, "--seed", "5"],
                "linattn generate --grad")
    pristine_forward = {g: os.path.join(forwards, f"{stem}.{g}.h5") for g in GROUPS}
    mutators = {g: fz.Mutator(open(pristine_forward[g], "rb").read()) for g in GROUPS}
    grad_mutator = fz.Mutator(open(pristine_grad, "rb").read())

    numbers = [int(k) for k in args.only.split(",") if k.strip()] if args.only else list(range(args.mutations))
    seeds, pairs, described = [], [], {}
    for k in numbers:
        seed = args.seed * 100000 + k
        pick = random.Random(seed)
        group = pick.choice(GROUPS)
        # The mutant's forward output lies beside the pristine ones: its
        # recorded input path (absolute and relative) stays right.
        forward = os.path.join(forwards, f"m{k:04d}.h5")
        if pick.random() < 2 / 3:
            data, what = mutators[group].make(seed)
            with open(forward, "wb") as f:
                f.write(data)
            grad, what = pristine_grad, f"forward output of {group}: {what}"
        else:
            data, what = grad_mutator.make(seed)
            grad = os.path.join(grads, f"g{k:04d}.h5")
            with open(grad, "wb") as f:
                f.write(data)
            shutil.copyfile(pristine_forward[group], forward)
            what = f"gradient input, case {group}: {what}"
        seeds.append(k)
        pairs.append((os.path.relpath(forward, workdir), os.path.relpath(grad, workdir)))
        described[k] = what
    with open(os.path.join(workdir, "mutations.txt"), "w") as log:
        for k in seeds:
            log.write(f"{k}\tseed {args.seed * 100000 + k}\t{described[k]}\n")
    pristine = (os.path.relpath(pristine_forward[GROUPS[0]], workdir), os.path.relpath(pristine_grad, workdir))
    batches = [BackwardBatch(b, seeds[i:i + args.batch], pairs[i:i + args.batch], pristine,
                             os.path.join("out", f"batch{b:02d}"))
               for b, i in enumerate(range(0, len(pairs), args.batch))]
    print(f"fuzz_backward: {len(pairs)} mutations of the forward outputs and the gradient input of {example}, "
          f"seed {args.seed}, {len(batches)} batches")

    os.chdir(workdir)
    running, pending = [], list(batches)
    while pending or running:
        while pending and len(running) < max(1, args.jobs):
            batch = pending.pop(0)
            fz.start_batch(exe, batch, workdir)
            running.append(batch)
        batch = running.pop(0)
        fz.finish_batch(exe, batch, check_backward_batch)
        print(f"batch {batch.index}: {len(batch.pairs)} mutants + pristine, {batch.ok} ok, {batch.failed} failed "
              f"({batch.crashes} reader crashes, {batch.timeouts} timeouts), exit {batch.proc.returncode}, "
              f"{batch.wall:.1f} s{'' if not batch.problems else f', {len(batch.problems)} PROBLEM(S)'}", flush=True)
        if batch.problems:
            with open(os.path.join(workdir, f"batch{batch.index:02d}.log"), "w", encoding="utf-8") as log:
                log.write(" ".join(batch.command(exe)) + "\n--- stdout\n" + batch.stdout + "--- stderr\n" +
                          batch.stderr)
        else:
            shutil.rmtree(batch.outdir, ignore_errors=True)

    reasons = {}
    for b in batches:
        for _, message in b.failures:
            key = re.sub(r"\d+", "N", message.split(": ", 1)[-1])[:90]
            reasons[key] = reasons.get(key, 0) + 1
    print("\nmost common failure messages (digits as N):")
    for key, count in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {count:4d}  {key}")
    print(f"\nmutations: {len(pairs)}")
    print(f"cases ok: {sum(b.ok for b in batches)}")
    print(f"cases failed: {sum(b.failed for b in batches)} ({sum(b.crashes for b in batches)} reader crashes, "
          f"{sum(b.timeouts for b in batches)} timeouts)")
    print(f"total wall time: {time.monotonic() - started:.1f} s")
    problems = [(b, seed, message) for b in batches for seed, message in b.problems]
    if not problems:
        print("fuzz_backward: ok, every batch held every assertion")
        return 0
    print(f"\nfuzz_backward: FAILED, {len(problems)} assertion(s) did not hold:")
    for b, seed, message in problems:
        where = f"batch {b.index}" if seed is None else f"mutation {seed} ({described[seed]})"
        print(f"  {where}: {message}")
    offending = sorted({seed for _, seed, _ in problems if seed is not None})
    if offending:
        print(f"reproduce with --seed {args.seed} --only {','.join(map(str, offending))}")
    print(f"logs and inputs kept in {workdir}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
