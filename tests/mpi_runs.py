#!/usr/bin/env python3
"""linattn under mpirun (docs/PARALLEL.md), end to end, read back with h5py.

1. A batch shared by 2 and by 3 ranks writes the same bits as one rank (plain
   and packed cases, fp32 and bf16, initial states), and prints one summary.
2. A case with a NaN, which the plan gives to rank 1, fails there: every rank
   exits with 1, and rank 0's summary still lists every case.
3. --context-parallel on 2 ranks writes, into one file per case (each rank
   streaming its segment through its pipeline, in windows), the same bits as one rank
   and as the same ranks in small windows (--memory-budget 1M): plain and packed, with initial states, with
   --normalize and initial key sums; by default rank 0 takes more chunks (the
   others also run the state pass), evenly with --normalize. On 3 ranks
   (--carry-cost 0: an even split), a segment whose start state
   is one carry (the segment before it started its sequence) is still bitwise,
   and one whose start adds two carries matches to the fp32 accumulation
   order; a case of one chunk (empty segments on the other ranks) is bitwise;
   gated cases (g per token, RetNet's g_gamma, GLA's gk per key channel; plain and
   packed) alike: bitwise
   on 2 ranks, and on 3 bitwise before the segment whose start adds two decayed
   carries, to the fp32 order after it; `linattn verify` accepts every output.
   A case failing on one rank fails on all.
4. The start-state chain on 4 ranks, from each rank's order of events: exactly
   the N - 2 messages of one sequence, each delivered before its sender's
   forward and received before the receiver's (no forward waits for another).

Usage: mpi_runs.py LINATTN_EXE MPIEXEC WORKDIR. Exit 77 (skipped) when h5py or
numpy cannot be imported.
"""
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"SKIPPED: {sys.executable} cannot import h5py/numpy ({e}); install python3-h5py python3-numpy")
    sys.exit(77)

EXE, MPIEXEC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
ENV = dict(os.environ)
# Containers often forbid the cross-memory attach Open MPI's shared-memory
# transport uses for large messages; copying through the shared segment always works.
ENV.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
UNIT_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8}
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def mpirun(ranks):
    return [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]


def run(args, ranks=None, expect=0):
    cmd = ([EXE] if ranks is None else mpirun(ranks) + [EXE]) + args
    result = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    if result.returncode != expect:
        print(result.stdout + result.stderr)
        sys.exit(f"{' '.join(cmd)} exited with {result.returncode}, expected {expect}")
    return result


def generate(name, *args):
    path = os.path.join(WORK, name)
    run(["generate", "-o", path, *args])
    return path


def outputs(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".h5"))


def read(path):
    """Every dataset (as stored, bf16 through HDF5's conversion to float32) and the attributes."""
    with h5py.File(path, "r") as f:
        data = {name: f[name][()] for name in f}
        dtypes = {name: f[name].dtype.str + str(f[name].shape) for name in f}
        attrs = {k: v for k, v in f.attrs.items() if not k.endswith("_seconds")}
    return data, dtypes, attrs


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def compare_folders(one, many, label):
    names = outputs(one)
    check(names == outputs(many) and len(names) > 0, f"{label}: the same output files ({len(names)})")
    for name in names:
        a, a_types, a_attrs = read(os.path.join(one, name))
        b, b_types, b_attrs = read(os.path.join(many, name))
        check(a_types == b_types, f"{label}: {name}: the same datasets, dtypes and shapes")
        check(a_attrs.keys() == b_attrs.keys() and all(str(a_attrs[k]) == str(b_attrs[k]) for k in a_attrs),
              f"{label}: {name}: the same attributes (times aside)")
        for ds in a:
            check(ds in b and same_bits(a[ds], b[ds]), f"{label}: {name}: {ds} bitwise")


def relative_l2(x, ref):
    x, ref = x.astype(np.float64), ref.astype(np.float64)
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


os.makedirs(WORK, exist_ok=True)
for entry in os.listdir(WORK):
    shutil.rmtree(os.path.join(WORK, entry), ignore_errors=True) if os.path.isdir(os.path.join(WORK, entry)) \
        else os.remove(os.path.join(WORK, entry))
out = lambda name: os.path.join(WORK, name)

# ---- 1. A batch shared by the ranks
mixed = generate("mixed.h5", "--shape", "2,300,2,16,24", "--shape", "1,700,2,32,16", "--shape", "3,100,1,16,16",
                 "--shape", "1,1000,2,16,16", "--dtype", "fp32", "--dtype", "bf16", "--cases", "6",
                 "--initial-state", "--seed", "11")
packed = generate("packed.h5", "--shape", "1,1,2,16,16", "--seqlens", "1,63,64,65,300", "--dtype", "bf16",
                  "--cases", "2", "--seed", "12")
run(["run", mixed, packed, "-o", out("batch1"), "--no-fsync"])
for ranks in (2, 3):
    result = run(["run", mixed, packed, "-o", out(f"batch{ranks}"), "--no-fsync"], ranks=ranks)
    check(result.stdout.count("cases: 8 ok, 0 failed") == 1, f"batch on {ranks} ranks: one summary of all 8 cases")
    check(all(f"rank {r} pipeline:" in result.stderr for r in range(ranks)),
          f"batch on {ranks} ranks: every rank reports its pipeline")
    compare_folders(out("batch1"), out(f"batch{ranks}"), f"batch on {ranks} ranks")

# ---- 2. A failing case. Input bytes 900, 600, 300 tokens -> ranks 0, 1, 1: a NaN in
# case1 fails on rank 1 (its result must reach rank 0's summary), in case0 on rank 0
# (rank 1, whose own cases pass, must still exit with 1).
script = 'exe="$1"; shift; "$exe" "$@"; echo "$OMPI_COMM_WORLD_RANK $?" >> "$EXIT_LOG"'
for bad_case, rank in (("case1", 1), ("case0", 0)):
    bad = generate(f"bad_{bad_case}.h5", "--shape", "1,900,2,16,16", "--shape", "1,600,2,16,16", "--shape",
                   "1,300,2,16,16", "--dtype", "fp32", "--cases", "3", "--seed", "13")
    with h5py.File(bad, "r+") as f:
        k = f[f"{bad_case}/k"][()]
        k[0, 5, 1, 3] = np.nan
        f[f"{bad_case}/k"][...] = k
    log = out(f"exit-codes-{bad_case}.txt")
    folder = out(f"bad_{bad_case}")
    result = subprocess.run(mpirun(2) + ["sh", "-c", script, "sh", EXE, "run", bad, "-o", folder, "--no-fsync"],
                            capture_output=True, text=True, env=dict(ENV, EXIT_LOG=log), timeout=120)
    label = f"a failing case on rank {rank}"
    codes = dict(line.split() for line in open(log)) if os.path.exists(log) else {}
    check(codes == {"0": "1", "1": "1"}, f"{label}: every rank exits with 1 (got {codes})")
    check(result.stdout.count("cases: 2 ok, 1 failed") == 1, f"{label}: one summary")
    table = result.stdout.split("cases:")[0].split("\n\n")[-1]
    check(all(f"bad_{bad_case}.h5:case{i}" in table for i in range(3)), f"{label}: the summary lists all three cases")
    failed_lines = [l for l in result.stderr.splitlines() if "FAILED" in l]
    check(len(failed_lines) == 1 and f"{bad_case}/k" in failed_lines[0] and "NaN" in failed_lines[0],
          f"{label}: one FAILED line, naming {bad_case}'s k ({failed_lines})")
    after_rank0 = result.stderr.find("FAILED") > result.stderr.find("rank 0 pipeline:")
    check(after_rank0 == (rank == 1), f"{label}: it failed on rank {rank} (its line is {'after' if rank else 'before'} rank 0's report)")
    check(outputs(folder) == [f"bad_{bad_case}.case{i}.h5" for i in range(3) if f"case{i}" != bad_case],
          f"{label}: the other cases are written")

# ---- 3. Context parallel
plain = generate("cp_plain.h5", "--shape", "2,1000,2,16,24", "--shape", "1,777,2,32,16", "--dtype", "fp32",
                 "--dtype", "bf16", "--cases", "2", "--initial-state", "--seed", "21")
cut = generate("cp_packed.h5", "--shape", "1,1,2,16,24", "--seqlens", "1,63,64,65,300,700,129", "--dtype", "fp32",
               "--initial-state", "--seed", "22")
long = generate("cp_long.h5", "--shape", "1,1,2,16,16", "--seqlens", "10,1000,20", "--dtype", "fp32", "--seed", "23")
norm = generate("cp_norm.h5", "--shape", "2,1000,2,16,24", "--dtype", "fp32", "--positive", "--initial-state",
                "--initial-z", "--seed", "24")
norm_packed = generate("cp_norm_packed.h5", "--shape", "1,1,2,16,16", "--seqlens", "5,200,90,400,700", "--dtype",
                       "fp32", "--positive", "--initial-state", "--initial-z", "--seed", "25")
# One chunk: every rank but the last has an empty segment and writes empty selections.
tiny = generate("cp_tiny.h5", "--shape", "2,50,2,16,16", "--dtype", "bf16", "--initial-state", "--seed", "26")
# Gated (README.md "Gated levels"): weak enough (g in [-0.01, 0)) that a carry decays to a fraction
# of itself over a segment (not to zero), so a carry decayed wrongly, or not at all, shows.
gated = generate("cp_gated.h5", "--shape", "2,1000,2,16,24", "--dtype", "fp32", "--initial-state", "--gate", "g",
                 "--gate-strength", "0.01", "--seed", "27")
gated_gamma = generate("cp_gated_gamma.h5", "--shape", "1,777,2,32,16", "--dtype", "bf16", "--initial-state", "--gate",
                       "gamma", "--seed", "28")
gated_packed = generate("cp_gated_packed.h5", "--shape", "1,1,2,16,16", "--seqlens", "10,1000,20", "--dtype", "fp32",
                        "--gate", "g", "--gate-strength", "0.01", "--seed", "29")
# GLA's gk (one decay per key channel): each carry's rows decay by their own channel's sum.
gated_gk = generate("cp_gated_gk.h5", "--shape", "2,1000,2,16,24", "--dtype", "fp32", "--initial-state", "--gate", "gk",
                    "--gate-strength", "0.01", "--seed", "30")
# gk on a packed batch whose long sequence spans every segment, with initial states per sequence.
gated_gk_packed = generate("cp_gated_gk_packed.h5", "--shape", "1,1,2,16,24", "--seqlens", "10,1000,20", "--dtype",
                           "fp32", "--initial-state", "--gate", "gk", "--gate-strength", "0.01", "--seed", "31")
sets = {"cp": [plain, cut, long, tiny], "cpnorm": [norm, norm_packed],
        "cpgate": [gated, gated_gamma, gated_packed, gated_gk, gated_gk_packed]}
flags = {"cp": [], "cpnorm": ["--normalize"], "cpgate": []}
cases = {"cp": 5, "cpnorm": 2, "cpgate": 5}


def rank_chunks(stdout, case):
    """Each rank's chunks of `case`, from its progress line ("chunks 9+7 by rank")."""
    line = next(l for l in stdout.splitlines() if case in l and "chunks " in l)
    return [int(x) for x in line.split("chunks ")[1].split()[0].split("+")]


# Default split: each rank but the first runs the state pass over the segment before its own, so
# rank 0 takes more chunks (docs/PARALLEL.md "Cost"); 3 ranks with --carry-cost 0 split evenly, the
# cuts the bitwise checks below name. Normalized runs have no state kernel (the pass is the
# forward itself): the split is even.
runs = {("cp", 2): [], ("cp", 3): ["--carry-cost", "0"], ("cp", "3b"): [],
        ("cpnorm", 2): [], ("cpnorm", 3): ["--carry-cost", "0"],
        ("cpgate", 2): [], ("cpgate", 3): ["--carry-cost", "0"]}
results = {}
for name, inputs in sets.items():
    run(["run", *inputs, "-o", out(f"{name}1"), "--no-fsync", *flags[name]])
for (name, tag), extra in runs.items():
    ranks = int(str(tag)[0])
    result = run(["run", "--context-parallel", *sets[name], "-o", out(f"{name}{tag}"), "--no-fsync",
                  *flags[name], *extra], ranks=ranks)
    results[(name, tag)] = result.stdout
    check(result.stdout.count(f"cases: {cases[name]} ok, 0 failed") == 1, f"{name} on {ranks} ranks: one summary")
    for f in outputs(out(f"{name}{tag}")):
        run(["verify", os.path.join(out(f"{name}{tag}"), f)])  # exit 1 above the accuracy level
        check(True, f"{name} on {ranks} ranks {' '.join(extra)}: linattn verify accepts {f}")
chunks = rank_chunks(results[("cp", 2)], "cp_plain.h5:case0")
check(len(chunks) == 2 and sum(chunks) == 16 and chunks[0] > chunks[1],
      f"2 ranks, default split: rank 0 takes more of the 16 chunks ({chunks})")
chunks = rank_chunks(results[("cp", "3b")], "cp_plain.h5:case0")
check(len(chunks) == 3 and sum(chunks) == 16 and chunks[0] > chunks[1] and chunks[0] > chunks[2],
      f"3 ranks, default split: rank 0 takes the most ({chunks})")
check(rank_chunks(results[("cp", 3)], "cp_plain.h5:case0") == [5, 5, 6], "3 ranks, --carry-cost 0: even split")
check(rank_chunks(results[("cpnorm", 2)], "cp_norm.h5:case0") == [8, 8],
      "normalized (the state pass is the forward): even split")
# One rank, started by hand (MPI never started): an ordinary file, the same bits as run.
run(["run", "--context-parallel", *sets["cp"], "-o", out("cp_alone"), "--no-fsync"])
compare_folders(out("cp1"), out("cp_alone"), "context parallel without mpirun")
run(["run", "--context-parallel", *sets["cpgate"], "-o", out("cpgate_alone"), "--no-fsync"])
compare_folders(out("cpgate1"), out("cpgate_alone"), "context parallel, gated, without mpirun")
compare_folders(out("cp1"), out("cp2"), "context parallel on 2 ranks")
# Each rank streams its segment through the pipeline: with a budget of 1 MiB (slots of 128 KiB) a
# segment runs in several windows, the state carried from one to the next, and the bits do not change:
# on one rank `run`'s, on 2 ranks those of the case's whole segments.
def rank_windows(stdout, case):
    """Each rank's windows of `case`, from rank 0's lines by rank ("forward 0.001 s in 5 windows")."""
    lines = stdout.splitlines()
    at = next(i for i, l in enumerate(lines) if case in l and "chunks " in l)
    return [int(l.split(" s in ")[1].split()[0]) for l in lines[at + 1:] if l.startswith("  rank ")][:2]


for name in ("cp", "cpgate"):
    small = run(["run", "--context-parallel", *sets[name], "-o", out(f"{name}_small1"), "--no-fsync",
                 "--memory-budget", "1M"])
    compare_folders(out(f"{name}1"), out(f"{name}_small1"), f"{name}, context parallel on 1 rank in small windows")
    small = run(["run", "--context-parallel", *sets[name], "-o", out(f"{name}_small2"), "--no-fsync",
                 "--memory-budget", "1M"], ranks=2)
    case = "cp_plain.h5:case0" if name == "cp" else "cp_gated.h5:case0"
    windows = rank_windows(small.stdout, case)
    check(len(windows) == 2 and min(windows) >= 3, f"{name}, 2 ranks, 1 MiB: each segment in several windows ({windows})")
    compare_folders(out(f"{name}2"), out(f"{name}_small2"), f"{name}, context parallel on 2 ranks in small windows")
    # Several writers: every rank maps the shared file and copies its windows in with 2 threads.
    mapped = run(["run", "--context-parallel", *sets[name], "-o", out(f"{name}_mapped2"), "--no-fsync",
                  "--memory-budget", "1M", "--writers", "2"], ranks=2)
    check(all(f"rank {r} pipeline:" in mapped.stdout + mapped.stderr for r in (0, 1)) and
          (mapped.stdout + mapped.stderr).count("(2 threads, ") == 2 and " 0 files mapped" not in mapped.stdout + mapped.stderr,
          f"{name}, 2 ranks, --writers 2: both ranks wrote through a mapping")
    compare_folders(out(f"{name}2"), out(f"{name}_mapped2"), f"{name}, context parallel on 2 ranks, 2 mapped writers each")
compare_folders(out("cpnorm1"), out("cpnorm2"), "context parallel, normalized, on 2 ranks")
compare_folders(out("cpgate1"), out("cpgate2"), "context parallel, gated, on 2 ranks")
chunks = rank_chunks(results[("cpgate", 2)], "cp_gated.h5:case0")
check(len(chunks) == 2 and sum(chunks) == 16 and chunks[0] > chunks[1],
      f"gated, 2 ranks, default split: the gated state pass is the fused tiles' (rank 0 takes more: {chunks})")
for name, gate in (("cp_gated", "g"), ("cp_gated_gamma", "g_gamma"), ("cp_gated_packed", "g"), ("cp_gated_gk", "gk"),
                   ("cp_gated_gk_packed", "gk")):
    with h5py.File(out(f"cpgate2/{name}.case0.h5"), "r") as f:
        attr = f.attrs.get("gate")
        attr = attr.decode() if isinstance(attr, bytes) else attr
        check(attr == gate, f"gated, 2 ranks: {name}'s output records gate {gate} ({attr!r})")

# 3 ranks. Where bitwise: every segment whose start is one carry. In cp_packed
# (24 chunks, cuts at chunks 8 and 16) the second cut falls in the sequence of
# 700 tokens, which starts in segment 1: the whole file is bitwise.
a, _, _ = read(out("cp1/cp_packed.case0.h5"))
b, _, _ = read(out("cp3/cp_packed.case0.h5"))
check(all(same_bits(a[d], b[d]) for d in a), "3 ranks, packed, cuts in sequences started in the segment before: bitwise")
a, _, _ = read(out("cp1/cp_tiny.case0.h5"))
b, _, _ = read(out("cp3/cp_tiny.case0.h5"))
check(all(same_bits(a[d], b[d]) for d in a), "3 ranks, one chunk (two empty segments): bitwise")


def split_check(one, many, t_exact, h_exact, rows_exact, label, o_level=1e-5):
    """Bitwise before the third segment (o tokens < t_exact, h chunks < h_exact, the final rows
    `rows_exact`); elsewhere the agreement of the fp32 accumulation order (relative L2 1e-5,
    docs/NUMERICS.md), plus for a bf16 o the flips of its last bit that the state's difference
    causes (o_level)."""
    a, _, _ = read(one)
    b, _, _ = read(many)
    check(same_bits(a["o"][:, :t_exact], b["o"][:, :t_exact]), f"{label}: o bitwise before the third segment")
    check(same_bits(a["h"][:, :h_exact], b["h"][:, :h_exact]), f"{label}: h bitwise before the third segment")
    for d in ("final_state", "z_state"):
        if d in a:
            check(same_bits(a[d][rows_exact], b[d][rows_exact]), f"{label}: {d} rows {rows_exact} bitwise")
    for d in a:
        if d == "cu_seqlens":
            continue
        level = o_level if d == "o" else 1e-5
        err = relative_l2(b[d], a[d])
        check(err <= level, f"{label}: {d} matches to the fp32 accumulation order (rel L2 {err:.2e} <= {level:.0e})")
    return a, b


# Plain T = 1000: 16 chunks, cuts at chunks 5 and 10 (token 640): segment 2 adds two carries.
_, b = split_check(out("cp1/cp_plain.case0.h5"), out("cp3/cp_plain.case0.h5"), 640, 10, slice(0, 0), "3 ranks, plain")
a, _, _ = read(out("cp1/cp_plain.case0.h5"))
check(not same_bits(a["h"][:, 10:], b["h"][:, 10:]),
      "3 ranks, plain: past two carries the bits differ (what the docs say: fp32 order, not bitwise)")
# bf16, T = 777: 13 chunks, cuts at 4 and 8 (token 512).
split_check(out("cp1/cp_plain.case1.h5"), out("cp3/cp_plain.case1.h5"), 512, 8, slice(0, 0), "3 ranks, plain bf16",
            o_level=UNIT_ROUNDOFF["bfloat16"])
# Packed 10, 1000, 20: 18 chunks, cuts at 6 and 12 (token 10 + 11 * 64); sequence 1 (chunks 1-16) spans all three.
split_check(out("cp1/cp_long.case0.h5"), out("cp3/cp_long.case0.h5"), 10 + 11 * 64, 12, slice(0, 1), "3 ranks, long sequence")
# Normalized, plain: as above; packed 5, 200, 90, 400, 700: chunks 1, 4, 2, 7, 11 = 25, cuts at 8 and 16
# (sequence 3's 2nd chunk, started in segment 1, and sequence 4's 2nd: started in segment 1).
split_check(out("cpnorm1/cp_norm.case0.h5"), out("cpnorm3/cp_norm.case0.h5"), 640, 10, slice(0, 0), "3 ranks, normalized")
a, _, _ = read(out("cpnorm1/cp_norm_packed.case0.h5"))
b, _, _ = read(out("cpnorm3/cp_norm_packed.case0.h5"))
check(all(same_bits(a[d], b[d]) for d in a), "3 ranks, normalized packed, one carry per start: bitwise")
# Gated on 3 ranks: the same cuts as their level-1 twins above. Segment 2 starts from segment 1's carry plus
# segment 0's decayed by segment 1's tokens (parallel/gated_carry.hpp).
_, b = split_check(out("cpgate1/cp_gated.case0.h5"), out("cpgate3/cp_gated.case0.h5"), 640, 10, slice(0, 0),
                   "3 ranks, gated g")
a, _, _ = read(out("cpgate1/cp_gated.case0.h5"))
check(not same_bits(a["h"][:, 10:], b["h"][:, 10:]), "3 ranks, gated g: past two carries the bits differ (fp32 order)")
split_check(out("cpgate1/cp_gated_gamma.case0.h5"), out("cpgate3/cp_gated_gamma.case0.h5"), 512, 8, slice(0, 0),
            "3 ranks, gated g_gamma bf16", o_level=UNIT_ROUNDOFF["bfloat16"])
split_check(out("cpgate1/cp_gated_packed.case0.h5"), out("cpgate3/cp_gated_packed.case0.h5"), 10 + 11 * 64, 12,
            slice(0, 1), "3 ranks, gated packed long sequence")
split_check(out("cpgate1/cp_gated_gk.case0.h5"), out("cpgate3/cp_gated_gk.case0.h5"), 640, 10, slice(0, 0),
            "3 ranks, gated gk")
# Packed 10, 1000, 20 with gk: the cuts of cp_gated_packed; sequence 1's carries decay per key channel.
split_check(out("cpgate1/cp_gated_gk_packed.case0.h5"), out("cpgate3/cp_gated_gk_packed.case0.h5"), 10 + 11 * 64,
            12, slice(0, 1), "3 ranks, gated gk packed long sequence")

# A case that fails on one rank only (the NaN lies in rank 0's segment of bad_case1.h5's
# case1) fails on every rank, leaves no file, and the next case still runs.
log = out("exit-codes-cp.txt")
result = subprocess.run(mpirun(2) + ["sh", "-c", script, "sh", EXE, "run", "--context-parallel", out("bad_case1.h5"),
                                     "-o", out("bad_cp"), "--no-fsync"],
                        capture_output=True, text=True, env=dict(ENV, EXIT_LOG=log), timeout=120)
codes = dict(line.split() for line in open(log)) if os.path.exists(log) else {}
check(codes == {"0": "1", "1": "1"}, f"context parallel, a failing case: every rank exits with 1 (got {codes})")
check(result.stdout.count("cases: 2 ok, 1 failed") == 1 and result.stderr.count("FAILED") == 1,
      "context parallel, a failing case: one FAILED line, one summary")
check(outputs(out("bad_cp")) == ["bad_case1.case0.h5", "bad_case1.case2.h5"] and
      not any(f.endswith(".partial") for f in os.listdir(out("bad_cp"))),
      "context parallel, a failing case: the other cases are written, no partial file is left")

# h5py reads the parallel-HDF5 files as it reads any other: the packed output's cu_seqlens and shapes.
with h5py.File(out("cp2/cp_packed.case0.h5"), "r") as f:
    check(list(f["cu_seqlens"][()]) == [0, 1, 64, 128, 193, 493, 1193, 1322], "h5py reads cu_seqlens back")
    check(f["o"].shape == (1, 1322, 2, 24) and f["h"].shape == (1, 24, 2, 16, 24) and
          f["final_state"].shape == (7, 2, 16, 24), "h5py reads the shapes of o, h and final_state")
    check(np.isfinite(f["o"][()]).all() and np.isfinite(f["h"][()]).all(), "every element written")

# The start-state chain (docs/PARALLEL.md, "A CPU node"), pinned by each rank's order of events
# (LINATTN_CHAIN_TRACE), not by times: on 4 ranks with one sequence, rank r > 1 receives its start
# state from rank r - 1 alone (rank 1 computes its own from segment 0), so the chain is N - 2 = 2
# messages (1 -> 2 -> 3); each is delivered before its sender's forward starts, and every receive
# comes before the receiver's forward. So no rank's forward waits for another rank's forward.
# The state (2 x 32 x 32 fp32, 8 KiB) is above Open MPI's eager limit, where a send left in flight
# across the forward made the next rank wait for it (measured on the H200 host).
chain = generate("chain.h5", "--shape", "1,4096,2,32,32", "--dtype", "fp32", "--seed", "41")
prefix = os.path.join(WORK, "chain_trace")
result = subprocess.run(mpirun(4) + [EXE, "run", "--context-parallel", chain, "-o", out("chain4"), "--no-fsync"],
                        capture_output=True, text=True, env=dict(ENV, LINATTN_CHAIN_TRACE=prefix), timeout=120)
check(result.returncode == 0, "chain on 4 ranks: the run succeeds")
events = {r: open(f"{prefix}.rank{r}").read().split("\n")[:-1] if os.path.exists(f"{prefix}.rank{r}") else []
          for r in range(4)}
sends = [(r, e) for r in events for e in events[r] if e.startswith("send ")]
receives = [(r, e) for r in events for e in events[r] if e.startswith("receive ")]
check(sorted((r, e.split()[1]) for r, e in sends) == [(1, "2"), (2, "3")] and
      sorted((r, e.split()[1]) for r, e in receives) == [(2, "1"), (3, "2")],
      f"chain on 4 ranks: exactly the messages 1 -> 2 -> 3 ({sends}, {receives})")
check(all(e.split()[2] == "8192" for _, e in sends + receives), "chain on 4 ranks: each message is one 8 KiB state")
for r in range(4):
    ev = events[r]
    before = ev[:ev.index("forward start")] if "forward start" in ev else None
    check(before is not None and ev[-1] == "forward end" and
          all(e in before for e in ev if e.startswith(("send ", "receive "))),
          f"chain on 4 ranks: rank {r} delivers and receives its start states before its forward ({ev})")
check(result.stdout.count("  rank ") == 4 and all(f"  rank {r}: warm-up" in result.stdout for r in range(4)),
      "chain on 4 ranks: rank 0 prints every rank's seconds by step")
run(["run", chain, "-o", out("chain1"), "--no-fsync"])
a, _, _ = read(os.path.join(out("chain1"), "chain.case0.h5"))
b, _, _ = read(os.path.join(out("chain4"), "chain.case0.h5"))
check(relative_l2(b["o"], a["o"]) < 1e-6 and relative_l2(b["final_state"], a["final_state"]) < 1e-6,
      "chain on 4 ranks: o and the final state match one rank's to the fp32 order")

# ---- 5. One rank of mpirun: Open MPI binds it to one core, as it binds each of two, and its reader
# processes and writer thread would share that core (1.6x the wall time of a run without mpirun on
# the H100 host): it widens to the node's CPUs, as a rank of several does, and says so.
probe = subprocess.run(mpirun(1) + ["sh", "-c", "taskset -pc $$"], capture_output=True, text=True, env=ENV, timeout=60)
launcher_cpus = probe.stdout.strip().rsplit(" ", 1)[-1] if probe.returncode == 0 else ""
one = run(["run", tiny, "-o", out("one_rank"), "--no-fsync"], ranks=1)
if launcher_cpus.isdigit():  # bound to a single CPU by mpirun
    check("bound to one CPU by the launcher; runs on CPUs" in one.stderr,
          f"1 rank bound by mpirun to CPU {launcher_cpus}: linattn widens it ({one.stderr.strip()[:200]!r})")
else:
    check(True, f"1 rank: mpirun did not bind it to one CPU here ({launcher_cpus!r}), nothing to widen")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all MPI checks passed")
