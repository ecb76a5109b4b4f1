#!/usr/bin/env python3
"""Gate datasets are refused, never ignored (docs/HDF5.md, "Gates").

linattn computes level 1 (no decay). A case holding g [B, T, H] (Mamba-2),
g_gamma [H] (RetNet) or gk [B, T, H, DK] (GLA) would get level-1 outputs if the
gate were ignored: wrong numbers and exit 0. h5py writes one file with a plain
case and one case per gate; `linattn run` must exit 1, fail each gated case with
one line naming its gate dataset, write no output for it, and still run the
plain case. Then a gate added to the plain case's input after its forward ran:
`linattn backward` (exit 1) and `linattn verify` (exit 2) refuse it the same way.

Usage: gates_refused.py LINATTN_EXE WORKDIR. Exit 77 (skipped) when h5py or
numpy cannot be imported.
"""
import os
import shutil
import sys

from cli_check import CliCheck, import_h5py_or_skip

h5py, np = import_h5py_or_skip()
check = CliCheck(sys.argv)
EXE, WORK = check.exe, check.work
fail, linattn = check.fail, check.linattn
WORDS = ["is not implemented yet", "refuses a gate rather than ignore it"]


rng = np.random.default_rng(27)
T, H, DK, DV = 40, 2, 8, 12
GATES = {"g": (1, T, H), "g_gamma": (H,), "gk": (1, T, H, DK)}


def data(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def log_decay(shape):
    return -rng.uniform(0.01, 1.0, shape).astype(np.float32)  # valid gates (<= 0): refused for what they are


def write_case(f, group, gate=None):
    for name, d in (("q", DK), ("k", DK), ("v", DV)):
        f[f"{group}/{name}"] = data(1, T, H, d)
        f[f"{group}/{name}"].attrs["layout"] = "BTHD"
    if gate:
        f[f"{group}/{gate}"] = log_decay(GATES[gate])


def refused_line(err, dataset):
    return next((l for l in err.splitlines() if f"dataset '{dataset}'" in l), "")


def check_refused(label, rc, err, dataset, exit_code):
    line = refused_line(err, dataset)
    if rc != exit_code:
        fail(f"{label}: exit {rc}, expected {exit_code}\n{err}")
    if not line:
        fail(f"{label}: no line names dataset '{dataset}':\n{err}")
    for w in WORDS:
        if w not in line:
            fail(f"{label}: the line does not say {w!r}: {line!r}")
    print(f"  refused: {line.split(': ', 1)[-1]}")


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# 1. run: every gated case fails, the plain case beside them runs.
batch = os.path.join(WORK, "gated.h5")
with h5py.File(batch, "w") as f:
    write_case(f, "plain")
    for gate in GATES:
        write_case(f, f"with_{gate}", gate)
outdir = os.path.join(WORK, "out")
print("run: a plain case and one case per gate")
rc, out, err = linattn("run", batch, "-o", outdir, "--no-fsync", "--chunk", "16")
for gate in GATES:
    check_refused(f"run, {gate}", 1, err, f"with_{gate}/{gate}", 1)
if rc != 1:
    fail(f"run: exit {rc}, expected 1\n{out}{err}")
written = sorted(os.listdir(outdir)) if os.path.isdir(outdir) else []
if written != ["gated.plain.h5"]:
    fail(f"run: outputs {written}, expected only the plain case's gated.plain.h5")

# 2. backward and verify: the forward's input case gained a gate since the run.
forward = os.path.join(outdir, "gated.plain.h5")
grad = os.path.join(WORK, "grad.h5")
with h5py.File(grad, "w") as f:
    f["do"] = data(1, T, H, DV)
if os.path.exists(forward):
    with h5py.File(batch, "r+") as f:
        f["plain/g"] = log_decay(GATES["g"])
    print("backward: the forward's input case now holds g")
    bwd = os.path.join(WORK, "bwd")
    rc, out, err = linattn("backward", forward, "--grad", grad, "-o", bwd, "--no-fsync")
    check_refused("backward", rc, err, "plain/g", 1)
    if os.path.isdir(bwd) and os.listdir(bwd):
        fail(f"backward: outputs left after a refusal: {sorted(os.listdir(bwd))}")
    print("verify: the forward's input case now holds g")
    rc, out, err = linattn("verify", forward)
    check_refused("verify", rc, err, "plain/g", 2)

check.finish("g, g_gamma and gk were refused by run, backward and verify, and the plain case ran")
