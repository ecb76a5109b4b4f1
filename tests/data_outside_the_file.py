#!/usr/bin/env python3
"""Datasets whose data are outside their file (docs/HDF5.md, "Data outside the file").

h5py writes a packed case (q, k, v, initial_state, cu_seqlens, random and seeded)
and, for each of those datasets, three copies of it in which that dataset points
outside the file: external raw storage in a file beside it, a virtual dataset of
a file beside it, and an external link to a file beside it. Then the same for h
of a forward output (through `linattn backward`) and for do of a gradient file.
For each:

  * by default linattn refuses it: exit 1, one FAILED line naming the dataset,
    saying that it points outside the file and naming the target, and no output
    file (nor .partial) left;
  * with --allow-external-data, external storage and virtual datasets run, the
    result line says which datasets were read from other files, and the output
    is bit for bit that of the same case stored in one file; the external link
    is still refused;
  * with --allow-external-data, a target given as an absolute path, one holding
    '..' and one that is a symbolic link leading out of the folder are refused,
    as are an external file too short for the data and a virtual dataset whose
    mappings leave elements out.

Soft links inside the file still work; a soft link leading to an external link
is refused as that link; a case group that is an external link is not listed
("no case found", naming the link). `linattn verify` refuses an input that
points outside unless given the option.

Usage: data_outside_the_file.py LINATTN_EXE WORKDIR. Exit 77 (skipped) when
h5py or numpy cannot be imported.
"""
import os
import shutil
import sys

from cli_check import CliCheck, import_h5py_or_skip

h5py, np = import_h5py_or_skip()
check = CliCheck(sys.argv)
EXE, WORK = check.exe, check.work
fail, linattn = check.fail, check.linattn
OPT_IN = "--allow-external-data"


def outputs_in(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


# ---------------------------------------------------------------- files

rng = np.random.default_rng(31)
T, H, DK, DV = 40, 2, 8, 8
CASE = {
    "q": rng.standard_normal((1, T, H, DK)).astype(np.float32),
    "k": rng.standard_normal((1, T, H, DK)).astype(np.float32),
    "v": rng.standard_normal((1, T, H, DV)).astype(np.float32),
    "initial_state": rng.standard_normal((2, H, DK, DV)).astype(np.float32),
    "cu_seqlens": np.array([0, 17, T], dtype=np.int64),
}


def store(f, name, data, how, folder, target=None):
    """Dataset `name` of h5py file f holding `data`, kept as `how` says:
    'here' in f itself, 'external' in a raw file, 'virtual' in a source file,
    'link' as an external link to a source file. The target file is written in
    `folder` under `target` (default NAME.bin or NAME-src.h5), and named in f
    by `target` as given (a path relative to f's folder, or absolute)."""
    if how == "here":
        f.create_dataset(name, data=data)
        return
    if how == "external":
        target = target or f"{name}.bin"
        data.tofile(os.path.join(folder, target))
        f.create_dataset(name, shape=data.shape, dtype=data.dtype, external=[(target, 0, data.nbytes)])
        return
    target = target or f"{name}-src.h5"
    with h5py.File(os.path.join(folder, target), "w") as src:
        src.create_dataset(name, data=data)
    if how == "virtual":
        layout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
        layout[...] = h5py.VirtualSource(target, name, shape=data.shape)
        f.create_virtual_dataset(name, layout)
    else:
        f[name] = h5py.ExternalLink(target, "/" + name)


def write_case(path, moved=None, how="here", target=None):
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    with h5py.File(path, "w") as f:
        for name, data in CASE.items():
            store(f, name, data, how if name == moved else "here", folder, target)
    return path


def refused(label, rc, out, err, dataset, *words, folder):
    """Exit 1, a FAILED line naming the dataset and holding `words`, and no output file."""
    line = next((l for l in err.splitlines() if "FAILED" in l), "")
    if rc != 1:
        fail(f"{label}: exit {rc}, expected 1\n{out}{err}")
    if f"dataset '{dataset}'" not in line:
        fail(f"{label}: the FAILED line does not name dataset '{dataset}': {line!r}")
    for w in words:
        if w not in line:
            fail(f"{label}: the FAILED line does not say {w!r}: {line!r}")
    left = outputs_in(folder)
    if left:
        fail(f"{label}: outputs left after a refusal: {left}")
    print(f"  refused: {line.split('FAILED: ', 1)[-1]}")


def same_datasets(label, path, reference, names):
    with h5py.File(path, "r") as a, h5py.File(reference, "r") as b:
        for n in names:
            if not np.array_equal(a[n][...], b[n][...]):
                fail(f"{label}: {n} differs from the output of the same case in one file")


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# The case in one file, run once: what every accepted variant must reproduce.
plain = write_case(os.path.join(WORK, "plain", "in.h5"))
rc, out, err = linattn("run", plain, "-o", os.path.join(WORK, "plain", "out"), "--no-fsync", "--chunk", "16")
if rc != 0:
    sys.exit(f"the plain case did not run (exit {rc}):\n{out}{err}")
plain_out = os.path.join(WORK, "plain", "out", "in.h5")
if "read external data" in out:
    fail(f"the plain case's result line says it read external data: {out}")

# Decoys by the targets' names in the working directory, where libhdf5 would
# look without the input folder as prefix: reading them changes the output.
for name, data in CASE.items():
    decoy = (data + 1).astype(data.dtype)
    decoy.tofile(os.path.join(WORK, f"{name}.bin"))
    with h5py.File(os.path.join(WORK, f"{name}-src.h5"), "w") as f:
        f.create_dataset(name, data=decoy)

TARGET_WORDS = {"external": ["points outside the file", "(external raw storage)"],
                "virtual": ["points outside the file", "a virtual dataset"],
                "link": ["points outside the file", "is an external link"]}

# 1. run: each input dataset, each way of pointing outside.
for name in CASE:
    for how in ("external", "virtual", "link"):
        label = f"run, {name} as {how}"
        print(label)
        folder = os.path.join(WORK, "run", f"{name}-{how}")
        path = write_case(os.path.join(folder, "in.h5"), name, how)
        target = f"{name}.bin" if how == "external" else f"{name}-src.h5"
        outdir = os.path.join(folder, "out")
        rc, out, err = linattn("run", path, "-o", outdir, "--no-fsync", "--chunk", "16")
        refused(label, rc, out, err, name, *TARGET_WORDS[how], f"'{target}'", folder=outdir)

        outdir = os.path.join(folder, "out-allowed")
        rc, out, err = linattn("run", path, "-o", outdir, "--no-fsync", "--chunk", "16", OPT_IN)
        if how == "link":  # external links stay refused
            refused(label + " " + OPT_IN, rc, out, err, name, "is an external link", folder=outdir)
            continue
        if rc != 0:
            fail(f"{label} {OPT_IN}: exit {rc}\n{out}{err}")
            continue
        if f"read external data ({name})" not in out:
            fail(f"{label} {OPT_IN}: the result line does not say it read external data ({name}): {out}")
        same_datasets(label, os.path.join(outdir, "in.h5"), plain_out, ["o", "h", "final_state"])

# 1b. Links inside the file still work; a case group that is an external link
# is not listed (the third input), and a soft link leading to an
# external link is refused like the external link itself.
label = "run, q and k as soft links inside the file"
print(label)
folder = os.path.join(WORK, "soft")
path = write_case(os.path.join(folder, "in.h5"))
with h5py.File(path, "r+") as f:
    f.move("q", "store/query")
    f["q"] = h5py.SoftLink("/store/query")   # absolute
    f.move("k", "k_data")
    f["k"] = h5py.SoftLink("k_data")     # relative to the group holding the link
rc, out, err = linattn("run", path, "-o", os.path.join(folder, "out"), "--no-fsync", "--chunk", "16")
if rc != 0:
    fail(f"{label}: exit {rc}\n{out}{err}")
else:
    same_datasets(label, os.path.join(folder, "out", "in.h5"), plain_out, ["o", "h", "final_state"])

label = "run, the case group an external link to a group in another file"
print(label)
folder = os.path.join(WORK, "group-link")
write_case(os.path.join(folder, "other.h5"))
path = os.path.join(folder, "in.h5")
with h5py.File(path, "w") as f:
    f["case0"] = h5py.ExternalLink("other.h5", "/")
outdir = os.path.join(folder, "out")
rc, out, err = linattn("run", path, "-o", outdir, "--no-fsync", OPT_IN)
line = next((l for l in err.splitlines() if "FAILED" in l), "")
if rc != 1 or "no case found" not in line or "external links" not in line or "'case0'" not in line or outputs_in(outdir):
    fail(f"{label}: exit {rc}, outputs {outputs_in(outdir)}, expected 1, none and 'no case found' naming 'case0': {line!r}")
print(f"  refused: {line.split('FAILED: ', 1)[-1]}")

label = "run, q a soft link to an external link"
print(label)
folder = os.path.join(WORK, "soft-to-external")
path = write_case(os.path.join(folder, "in.h5"), "q", "link")
with h5py.File(path, "r+") as f:
    f.move("q", "elsewhere_q")
    f["q"] = h5py.SoftLink("/elsewhere_q")
outdir = os.path.join(folder, "out")
rc, out, err = linattn("run", path, "-o", outdir, "--no-fsync", OPT_IN)
refused(label, rc, out, err, "q", "points outside the file", "'elsewhere_q' is an external link to 'q-src.h5'",
        folder=outdir)

# 2. run --allow-external-data: targets that leave the folder, short files, gaps.
outside = os.path.join(WORK, "elsewhere")
os.makedirs(outside)
for how in ("external", "virtual"):
    secret = os.path.join(outside, "secret.bin" if how == "external" else "secret.h5")
    for n, (kind, target, words) in enumerate((
            ("an absolute path", secret, ["is an absolute path"]),
            ("a '..' path", os.path.join("..", "..", "elsewhere", os.path.basename(secret)), ["climbs out of the folder"]),
            ("a symbolic link out of the folder", "escape" + os.path.splitext(secret)[1], ["outside the input's folder"]))):
        label = f"run {OPT_IN}, q as {how} through {kind}"
        print(label)
        folder = os.path.join(WORK, "escape", f"{how}-{n}")
        os.makedirs(folder)
        # q's data lie in `secret`, outside the input's folder; the input names
        # it by `target` (for the symbolic link, a name in the folder linking there).
        path = os.path.join(folder, "in.h5")
        with h5py.File(path, "w") as f:
            for name, data in CASE.items():
                if name != "q":
                    f.create_dataset(name, data=data)
            if how == "external":
                CASE["q"].tofile(secret)
                f.create_dataset("q", shape=CASE["q"].shape, dtype=np.float32, external=[(target, 0, CASE["q"].nbytes)])
            else:
                with h5py.File(secret, "w") as src:
                    src["q"] = CASE["q"]
                layout = h5py.VirtualLayout(shape=CASE["q"].shape, dtype=np.float32)
                layout[...] = h5py.VirtualSource(target, "q", shape=CASE["q"].shape)
                f.create_virtual_dataset("q", layout)
        if not os.path.isabs(target) and ".." not in target:
            os.symlink(secret, os.path.join(folder, target))
        outdir = os.path.join(folder, "out")
        rc, out, err = linattn("run", path, "-o", outdir, "--no-fsync", "--chunk", "16", OPT_IN)
        refused(label, rc, out, err, "q", *words, folder=outdir)

label = f"run {OPT_IN}, q in an external file shorter than its data"
print(label)
folder = os.path.join(WORK, "short")
path = write_case(os.path.join(folder, "in.h5"), "q", "external")
with open(os.path.join(folder, "q.bin"), "r+b") as f:
    f.truncate(CASE["q"].nbytes // 2)
rc, out, err = linattn("run", path, "-o", os.path.join(folder, "out"), "--no-fsync", OPT_IN)
refused(label, rc, out, err, "q", "external file 'q.bin' holds", folder=os.path.join(folder, "out"))

label = f"run {OPT_IN}, q a virtual dataset mapping half of its tokens"
print(label)
folder = os.path.join(WORK, "gap")
os.makedirs(folder)
path = os.path.join(folder, "in.h5")
with h5py.File(os.path.join(folder, "src.h5"), "w") as src:
    src["q"] = CASE["q"]
with h5py.File(path, "w") as f:
    for name, data in CASE.items():
        if name != "q":
            f.create_dataset(name, data=data)
    layout = h5py.VirtualLayout(shape=CASE["q"].shape, dtype=np.float32)
    layout[:, :T // 2] = h5py.VirtualSource("src.h5", "q", shape=CASE["q"].shape)[:, :T // 2]
    f.create_virtual_dataset("q", layout)
rc, out, err = linattn("run", path, "-o", os.path.join(folder, "out"), "--no-fsync", OPT_IN)
refused(label, rc, out, err, "q", "no data written for", folder=os.path.join(folder, "out"))

# 3. backward: h of the forward output, do of the gradient file.
grad_plain = os.path.join(WORK, "plain", "grad.h5")
with h5py.File(grad_plain, "w") as f:
    f["do"] = rng.standard_normal((1, T, H, DV)).astype(np.float32)
rc, out, err = linattn("backward", plain_out, "--grad", grad_plain, "-o", os.path.join(WORK, "plain", "bwd"),
                       "--no-fsync")
if rc != 0:
    sys.exit(f"the plain backward did not run (exit {rc}):\n{out}{err}")
plain_grad_out = os.path.join(WORK, "plain", "bwd", "in.grad.h5")


def moved_copy(source, path, name, how):
    """A copy of h5py file `source` at `path` with dataset `name` moved outside as `how` says."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copyfile(source, path)
    with h5py.File(path, "r+") as f:
        data = f[name][...]
        attrs = dict(f[name].attrs)
        del f[name]
        store(f, name, data, how, os.path.dirname(path))
        if how != "link":
            for key, value in attrs.items():
                f[name].attrs[key] = value


for name in ("h", "do"):
    for how in ("external", "virtual", "link"):
        label = f"backward, {name} as {how}"
        print(label)
        folder = os.path.join(WORK, "backward", f"{name}-{how}")
        forward, grad = plain_out, grad_plain
        if name == "h":
            forward = os.path.join(folder, "in.h5")
            moved_copy(plain_out, forward, "h", how)
        else:
            grad = os.path.join(folder, "grad.h5")
            moved_copy(grad_plain, grad, "do", how)
        target = f"{name}.bin" if how == "external" else f"{name}-src.h5"
        outdir = os.path.join(folder, "out")
        rc, out, err = linattn("backward", forward, "--grad", grad, "-o", outdir, "--no-fsync")
        refused(label, rc, out, err, name, *TARGET_WORDS[how], f"'{target}'", folder=outdir)
        outdir = os.path.join(folder, "out-allowed")
        rc, out, err = linattn("backward", forward, "--grad", grad, "-o", outdir, "--no-fsync", OPT_IN)
        if how == "link":
            refused(label + " " + OPT_IN, rc, out, err, name, "is an external link", folder=outdir)
            continue
        if rc != 0:
            fail(f"{label} {OPT_IN}: exit {rc}\n{out}{err}")
            continue
        if f"read external data ({name})" not in out:
            fail(f"{label} {OPT_IN}: the result line does not say it read external data ({name}): {out}")
        same_datasets(label, os.path.join(outdir, "in.grad.h5"), plain_grad_out, ["dq", "dk", "dv", "dh0"])

# 4. verify opens the input the output names: refused unless allowed.
print("verify, q as external")
allowed_out = os.path.join(WORK, "run", "q-external", "out-allowed", "in.h5")
rc, out, err = linattn("verify", allowed_out)
if rc != 2 or "dataset 'q'" not in err or "points outside the file" not in err:
    fail(f"verify of a case whose q points outside: exit {rc} (expected 2 and the dataset named)\n{out}{err}")
rc, out, err = linattn("verify", allowed_out, OPT_IN)
if rc != 0 or "verify: ok" not in out or "read external data (q)" not in out:
    fail(f"verify {OPT_IN}: exit {rc}\n{out}{err}")

check.finish("every dataset that points outside its file was refused, and read only when allowed")
