#!/usr/bin/env python3
"""Datasets declared but never written (docs/HDF5.md, "Unwritten data").

h5py declares datasets without writing them (libhdf5 would read them as zeros):
chunked q, k, v with no data at all; q with only some chunks written; a
contiguous q, an initial_state and a cu_seqlens never written; and a case
declaring q, k, v of (8, 262144, 16, 64) fp32 (8 GiB each) in a file of a few
KB, run with a memory budget too small for it, which must be refused for its
missing data, not for the budget. Then h of a forward output (through
`linattn backward`) and do of a gradient file, and an input that `linattn
verify` opens. Each is refused: exit 1 (verify: 2), one line naming the dataset
and saying that no data was written, and no output file left. Fully written
chunked datasets, compressed or with partial edge chunks, still run.

Usage: unwritten_datasets.py LINATTN_EXE WORKDIR. Exit 77 (skipped) when h5py
or numpy cannot be imported.
"""
import os
import shutil
import sys

from cli_check import CliCheck, import_h5py_or_skip

h5py, np = import_h5py_or_skip()
check = CliCheck(sys.argv)
EXE, WORK = check.exe, check.work
fail, linattn = check.fail, check.linattn
NO_DATA = "no data written"
WHY = "a file with unwritten data is not an input"


rng = np.random.default_rng(26)
T, H, DK, DV, CHUNK_T = 1000, 2, 8, 8, 128


def data(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def write_input(path, declare=(), partial=(), contiguous=(), shapes=None, compress=False):
    """q, k, v chunked along T (the last chunk partial), plus initial_state and
    cu_seqlens; names in `declare` are created without data, those in
    `partial` get only their first chunk, those in `contiguous` are
    contiguous and unwritten."""
    shapes = shapes or {"q": (1, T, H, DK), "k": (1, T, H, DK), "v": (1, T, H, DV)}
    with h5py.File(path, "w") as f:
        for name, shape in shapes.items():
            if name in contiguous:
                f.create_dataset(name, shape=shape, dtype=np.float32)
                continue
            chunks = (1, min(CHUNK_T, shape[1]), shape[2], shape[3])
            ds = f.create_dataset(name, shape=shape, dtype=np.float32, chunks=chunks,
                                  compression="gzip" if compress else None)
            if name in partial:
                ds[:, :CHUNK_T] = data(shape[0], CHUNK_T, shape[2], shape[3])
            elif name not in declare:
                ds[...] = data(*shape)
        extras = {"initial_state": ((2, H, DK, DV), np.float32, data(2, H, DK, DV)),
                  "cu_seqlens": ((3,), np.int64, np.array([0, 333, T], dtype=np.int64))}
        if shapes["q"][1] == T:
            for name, (shape, dtype, values) in extras.items():
                if name in declare:
                    f.create_dataset(name, shape=shape, dtype=dtype)
                else:
                    f.create_dataset(name, data=values)
    return path


def outputs_in(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def refused(label, rc, out, err, dataset, words, outdir, exit_code=1):
    line = next((l for l in err.splitlines() if "FAILED" in l or "error:" in l), "")
    if rc != exit_code:
        fail(f"{label}: exit {rc}, expected {exit_code}\n{out}{err}")
    if f"dataset '{dataset}'" not in line:
        fail(f"{label}: the line does not name dataset '{dataset}': {line!r}")
    for w in words:
        if w not in line:
            fail(f"{label}: the line does not say {w!r}: {line!r}")
    if "memory budget" in line:
        fail(f"{label}: refused for the memory budget rather than the missing data: {line!r}")
    if outdir and outputs_in(outdir):
        fail(f"{label}: outputs left after a refusal: {outputs_in(outdir)}")
    print(f"  refused: {line.split(': ', 1)[-1]}")


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
count = [0]


def run_case(label, path, *extra):
    count[0] += 1
    outdir = os.path.join(WORK, f"out{count[0]}")
    print(label)
    return (*linattn("run", path, "-o", outdir, "--no-fsync", "--chunk", "16", *extra), outdir)


# 1. Written inputs run: chunked with a partial edge chunk, and compressed.
for compress in (False, True):
    label = f"written, chunked{' and compressed' if compress else ''}"
    rc, out, err, outdir = run_case(label, write_input(os.path.join(WORK, f"written{int(compress)}.h5"),
                                                       compress=compress))
    if rc != 0:
        fail(f"{label}: exit {rc}\n{out}{err}")

# 2. Unwritten inputs are refused.
unallocated = [NO_DATA + " (its storage is not allocated)", WHY]
for n, (label, kwargs, dataset, words) in enumerate((
        ("q, k, v declared, none written", {"declare": ("q", "k", "v")}, "q", unallocated),
        ("k declared, not written", {"declare": ("k",)}, "k", unallocated),
        ("v declared, not written", {"declare": ("v",)}, "v", unallocated),
        ("q with only its first chunk written", {"partial": ("q",)}, "q",
         [NO_DATA + " in 7 of its 8 chunks", WHY]),
        ("contiguous q, not written", {"contiguous": ("q",)}, "q", unallocated),
        ("initial_state declared, not written", {"declare": ("initial_state",)}, "initial_state", unallocated),
        ("cu_seqlens declared, not written", {"declare": ("cu_seqlens",)}, "cu_seqlens", unallocated))):
    path = write_input(os.path.join(WORK, f"unwritten{n}.h5"), **kwargs)
    rc, out, err, outdir = run_case(label, path)
    refused(label, rc, out, err, dataset, words, outdir)

# 3. 8 GiB declared in a tiny file, with a budget too small for it: the missing
# data is the reason, not the budget (a small written case under the same
# budget shows that the budget alone would refuse it).
big = {"q": (8, 262144, 16, 64), "k": (8, 262144, 16, 64), "v": (8, 262144, 16, 64)}
path = write_input(os.path.join(WORK, "declared_8GiB.h5"), declare=("q", "k", "v"), shapes=big)
print(f"  {path}: {os.path.getsize(path)} bytes")
rc, out, err, outdir = run_case("8 GiB q, k, v declared, --memory-budget 1M", path, "--memory-budget", "1M")
refused("8 GiB declared", rc, out, err, "q", unallocated, outdir)
small = write_input(os.path.join(WORK, "written_budget.h5"),
                    shapes={"q": (8, 32, 16, 64), "k": (8, 32, 16, 64), "v": (8, 32, 16, 64)})
rc, out, err, outdir = run_case("a written case of that kind, --memory-budget 1M", small, "--memory-budget", "1M")
if rc != 1 or "memory budget" not in err:
    fail(f"the budget control case was not refused for the budget (exit {rc}): {err}")

# 4. backward: h of the forward output, do of the gradient file.
plain = write_input(os.path.join(WORK, "plain.h5"))
rc, out, err = linattn("run", plain, "-o", os.path.join(WORK, "fwd"), "--no-fsync", "--chunk", "16")
if rc != 0:
    sys.exit(f"the forward did not run (exit {rc}):\n{out}{err}")
forward = os.path.join(WORK, "fwd", "plain.h5")
grad = os.path.join(WORK, "grad.h5")
with h5py.File(grad, "w") as f:
    f["do"] = data(1, T, H, DV)


def unwritten_copy(source, path, name):
    shutil.copyfile(source, path)
    with h5py.File(path, "r+") as f:
        shape, dtype, attrs = f[name].shape, f[name].dtype, dict(f[name].attrs)
        del f[name]
        f.create_dataset(name, shape=shape, dtype=dtype)
        for key, value in attrs.items():
            f[name].attrs[key] = value
    return path


for name in ("h", "do"):
    label = f"backward, {name} declared, not written"
    print(label)
    fw = unwritten_copy(forward, os.path.join(WORK, "fwd_h.h5"), "h") if name == "h" else forward
    gr = unwritten_copy(grad, os.path.join(WORK, "grad_do.h5"), "do") if name == "do" else grad
    outdir = os.path.join(WORK, f"bwd-{name}")
    rc, out, err = linattn("backward", fw, "--grad", gr, "-o", outdir, "--no-fsync")
    refused(label, rc, out, err, name, unallocated, outdir)
rc, out, err = linattn("backward", forward, "--grad", grad, "-o", os.path.join(WORK, "bwd"), "--no-fsync")
if rc != 0:
    fail(f"the written backward did not run (exit {rc}):\n{out}{err}")

# 5. verify: the input it opens lost its q's data since the run.
print("verify, the input's q declared, not written")
unwritten_copy(os.path.join(WORK, "plain.h5"), os.path.join(WORK, "plain_copy.h5"), "q")
os.replace(os.path.join(WORK, "plain_copy.h5"), plain)
rc, out, err = linattn("verify", forward)
refused("verify", rc, out, err, "q", unallocated, None, exit_code=2)

check.finish("every unwritten dataset was refused, before any output and before the memory budget")
