#!/usr/bin/env python3
"""Gate datasets in HDF5 files, end to end (docs/HDF5.md, "Gates").

h5py writes one file with a plain case, a case with g [B, T, H] (Mamba-2), one
with g_gamma [H] (RetNet) and packed sequences, one with gk [B, T, H, DK] (GLA)
and packed sequences, and three that must be refused: g and g_gamma together,
g and gk together, and a g holding a positive value. `linattn run` (exit 1)
must write the four good cases and fail each bad one with a line naming its
dataset; the gated outputs must match a numpy fp64 recurrence
S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = scale S_t^T q_t (g_t one value,
or one per key channel for gk; and be far from the level-1 one, so the check
can fail), carry the attribute gate, and pass `linattn verify`. `linattn
backward` of the g, g_gamma and gk forwards must write dg [1, T, H], dg_gamma
[H] or dgk [1, T, H, DK], and verify must check them; dgk must also match a
numpy fp64 backward by the definition (dgk_t = exp(gk_t) * sum over DV of
S_{t-1} * dL/dS_t). A gate removed from the input after its forward ran
makes `verify` refuse (exit 2), as does a gate added to the plain case.

Usage: gates_in_files.py LINATTN_EXE WORKDIR. Exit 77 (skipped) when h5py or
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

rng = np.random.default_rng(27)
T, H, DK, DV, CHUNK = 150, 2, 8, 12, 16
SCALE = DK ** -0.5
SEQLENS = [1, 63, 64, 22]  # the packed case: T = 150 tokens


def data(*shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def log_decay(*shape):
    return -rng.uniform(0.01, 0.8, shape).astype(np.float32)


def write_case(f, group, gate=None, packed=False):
    for name, d in (("q", DK), ("k", DK), ("v", DV)):
        f[f"{group}/{name}"] = data(1, T, H, d)
        f[f"{group}/{name}"].attrs["layout"] = "BTHD"
    if packed:
        f[f"{group}/cu_seqlens"] = np.cumsum([0] + SEQLENS).astype(np.int64)
    if gate == "g":
        f[f"{group}/g"] = log_decay(1, T, H)
    elif gate == "g_gamma":
        f[f"{group}/g_gamma"] = np.log1p(-np.exp2(-5.0 - np.arange(H))).astype(np.float32)


def reference_o(f, group, use_gate=True):
    """o by the definition, token by token, in fp64."""
    q, k, v = (f[f"{group}/{n}"][0].astype(np.float64) for n in ("q", "k", "v"))
    g = np.zeros((T, H, DK))  # the log-decay of each key channel
    if use_gate and f"{group}/g" in f:
        g[:] = f[f"{group}/g"][0].astype(np.float64)[:, :, None]
    if use_gate and f"{group}/g_gamma" in f:
        g[:] = f[f"{group}/g_gamma"][:].astype(np.float64)[None, :, None]
    if use_gate and f"{group}/gk" in f:
        g = f[f"{group}/gk"][0].astype(np.float64)
    starts = np.cumsum([0] + SEQLENS) if f"{group}/cu_seqlens" in f else [0, T]
    o = np.zeros((T, H, DV))
    for a, b in zip(starts[:-1], starts[1:]):
        for h in range(H):
            S = np.zeros((DK, DV))
            for t in range(a, b):
                S = np.exp(g[t, h])[:, None] * S + np.outer(k[t, h], v[t, h])
                o[t, h] = SCALE * S.T @ q[t, h]
    return o


def reference_dgk(f, group, do):
    """dgk by the definition, token by token, in fp64 (no initial state, no dht):
    G_t = dL/dS_t = scale q_t do_t^T + diag(a_{t+1}) G_{t+1}, dgk_t = a_t * sum_v S_{t-1} * G_t."""
    q, k, v, gk = (f[f"{group}/{n}"][0].astype(np.float64) for n in ("q", "k", "v", "gk"))
    starts = np.cumsum([0] + SEQLENS)
    dgk = np.zeros((T, H, DK))
    for a, b in zip(starts[:-1], starts[1:]):
        for h in range(H):
            before = []  # S_{t-1} for each token t
            S = np.zeros((DK, DV))
            for t in range(a, b):
                before.append(S)
                S = np.exp(gk[t, h])[:, None] * S + np.outer(k[t, h], v[t, h])
            G = np.zeros((DK, DV))
            for t in range(b - 1, a - 1, -1):
                nxt = np.exp(gk[t + 1, h])[:, None] if t + 1 < b else 0.0
                G = SCALE * np.outer(q[t, h], do[t, h]) + nxt * G
                dgk[t, h] = np.exp(gk[t, h]) * (before[t - a] * G).sum(axis=1)
    return dgk


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
batch = os.path.join(WORK, "gates.h5")
with h5py.File(batch, "w") as f:
    write_case(f, "plain")
    write_case(f, "mamba", "g")
    write_case(f, "retnet", "g_gamma", packed=True)
    write_case(f, "gla", packed=True)
    f["gla/gk"] = log_decay(1, T, H, DK)
    write_case(f, "both", "g")
    f["both/g_gamma"] = log_decay(H)
    write_case(f, "channels_too", "g")
    f["channels_too/gk"] = log_decay(1, T, H, DK)
    write_case(f, "positive", "g")
    f["positive/g"][0, 17, 1] = 0.25

outdir = os.path.join(WORK, "out")
print("run: plain, g, g_gamma (packed), gk (packed), and g with g_gamma, g with gk, a positive g")
rc, out, err = linattn("run", batch, "-o", outdir, "--no-fsync", "--chunk", str(CHUNK))
if rc != 1:
    fail(f"run: exit {rc}, expected 1 (three bad cases)\n{out}{err}")
refusals = {"both/g": "holds both g_gamma and g", "channels_too/gk": "holds both g and gk",
            "positive/g": "at [0, 17, 1]"}
for dataset, words in refusals.items():
    line = next((l for l in err.splitlines() if f"dataset '{dataset}'" in l), "")
    if words not in line:
        fail(f"run: no line names dataset '{dataset}' with {words!r}:\n{err}")
    else:
        print(f"  refused: {line.split(': ', 1)[-1]}")
written = sorted(os.listdir(outdir)) if os.path.isdir(outdir) else []
expected = ["gates.gla.h5", "gates.mamba.h5", "gates.plain.h5", "gates.retnet.h5"]
if written != expected:
    fail(f"run: outputs {written}, expected {expected}")

with h5py.File(batch, "r") as f:
    for group, gate in (("mamba", "g"), ("retnet", "g_gamma"), ("gla", "gk"), ("plain", "none")):
        path = os.path.join(outdir, f"gates.{group}.h5")
        if not os.path.exists(path):
            continue
        with h5py.File(path, "r") as o:
            got = o["o"][0].astype(np.float64)
            attr = o.attrs.get("gate")
            attr = attr.decode() if isinstance(attr, bytes) else attr
        if attr != gate:
            fail(f"{group}: attribute gate = {attr!r}, expected {gate!r}")
        err_gated = rel_l2(got, reference_o(f, group))
        err_level1 = rel_l2(got, reference_o(f, group, use_gate=False))
        print(f"  {group}: o against the gated recurrence {err_gated:.2e}, against level 1 {err_level1:.2e}")
        if not err_gated < 1e-5:
            fail(f"{group}: o is {err_gated:.2e} from the fp64 gated recurrence (fp32 inputs: expected < 1e-5)")
        if gate != "none" and not err_level1 > 1e-2:
            fail(f"{group}: o is only {err_level1:.2e} from level 1: was the gate ignored?")
        rc, vout, verr = linattn("verify", path)
        if rc != 0 or "verify: ok" not in vout:
            fail(f"verify {group}: exit {rc}\n{vout}{verr}")

# The backward of the gated cases: dg (g), dg_gamma (g_gamma) or dgk (gk) beside dq, dk, dv, dh0, and verify
# checks them.
grad = os.path.join(WORK, "grad.h5")
with h5py.File(grad, "w") as f:
    for group in ("mamba", "retnet", "gla"):
        f[f"{group}/do"] = data(1, T, H, DV)
bwd = os.path.join(WORK, "bwd")
for group, dataset, shape in (("mamba", "dg", (1, T, H)), ("retnet", "dg_gamma", (H,)), ("gla", "dgk", (1, T, H, DK))):
    forward = os.path.join(outdir, f"gates.{group}.h5")
    if not os.path.exists(forward):
        continue
    rc, out, err = linattn("backward", forward, "--grad", grad, "-o", bwd, "--no-fsync")
    if rc != 0:
        fail(f"backward {group}: exit {rc}\n{out}{err}")
        continue
    path = os.path.join(bwd, f"gates.{group}.grad.h5")
    with h5py.File(path, "r") as g:
        got = g[dataset].shape if dataset in g else None
        for other in {"dg", "dg_gamma", "dgk"} - {dataset}:
            if other in g:
                fail(f"backward {group}: {other} written beside {dataset}")
        if dataset == "dgk" and got == shape:
            with h5py.File(batch, "r") as f, h5py.File(grad, "r") as gf:
                err = rel_l2(g["dgk"][0].astype(np.float64), reference_dgk(f, group, gf[f"{group}/do"][0].astype(np.float64)))
            print(f"  backward {group}: dgk against the numpy fp64 backward {err:.2e}")
            if not err < 1e-4:
                fail(f"backward {group}: dgk is {err:.2e} from the numpy fp64 backward (fp32: expected < 1e-4)")
    if got != shape:
        fail(f"backward {group}: {dataset} has shape {got}, expected {shape}")
    rc, vout, verr = linattn("verify", path)
    if rc != 0 or "verify: ok" not in vout or dataset not in vout:
        fail(f"verify {path}: exit {rc}, expected ok with a {dataset} row\n{vout}{verr}")
    else:
        print(f"  backward {group}: {dataset} {shape}, verify ok")

# The input changed after the run: verify refuses rather than compare against another problem.
with h5py.File(batch, "r+") as f:
    del f["mamba/g"]
    f["plain/g"] = log_decay(1, T, H)
for group in ("mamba", "plain"):
    path = os.path.join(outdir, f"gates.{group}.h5")
    if not os.path.exists(path):
        continue
    rc, vout, verr = linattn("verify", path)
    if rc != 2 or "was made with gate" not in verr:
        fail(f"verify {group} after its gate changed: exit {rc}, expected 2 naming the gates\n{vout}{verr}")
    else:
        print(f"  verify {group} refused: {verr.strip().splitlines()[-1]}")

check.finish("g, g_gamma and gk ran and matched the fp64 recurrence two gates in one case and "
             "a positive g were refused, the backward wrote dg, dg_gamma and dgk (dgk matching numpy's) and verified, verify caught "
             "changed gates")
