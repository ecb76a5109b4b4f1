#!/usr/bin/env python3
"""linattn on the CPU beside what a CPU user would write instead, in one run.

Times bench/numpy_chunked.py (numpy/OpenBLAS chunked form, fp32, producing o and
all snapshots h; OpenBLAS uses every core) and then `linattn bench --dtype fp32
--snapshots fp32` (Kokkos' host backend; Serial uses one core) on the same
shapes, and prints one table: shape, numpy ms, each variant's ms and the ratio
numpy / variant, the fused variant's GFLOP/s (ledger FLOPs over its median),
and whether fused meets the target of issue 6 (at most 1/5 of numpy's time).
recompute is O(T^2) in work, so it gets fewer repetitions.

    python3 bench/cpu_compare.py [--linattn build/linattn] [--json out.json] [--check]

--check exits with status 1 when fused misses the target on any shape.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHAPES = ["1,8192,8,64", "1,8192,8,128"]
VARIANTS = ["fused", "materialized", "recompute"]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run(cmd):
    shown = [os.path.relpath(c) if c.startswith(ROOT + os.sep) and os.path.isfile(c) else c for c in cmd]
    print("$ " + " ".join(shown), flush=True)
    subprocess.run(cmd, check=True)


def time_numpy(shapes, reps, chunk, out):
    cmd = [sys.executable, os.path.join(HERE, "numpy_chunked.py"), "--reps", str(reps), "--chunk", str(chunk),
           "--json", out]
    for s in shapes:
        cmd += ["--shape", s]
    run(cmd)
    with open(out) as f:
        data = json.load(f)
    return data["numpy"], {tuple(r["shape"]): r["numpy_ms"] for r in data["rows"]}


def time_linattn(exe, shapes, variants, reps, chunk, out):
    cmd = [exe, "bench", "--dtype", "fp32", "--snapshots", "fp32", "--chunk", str(chunk), "--variants",
           ",".join(variants), "--reps", str(reps), "--warmup", "1", "--json", out]
    for s in shapes:
        cmd += ["--shape", s]
    run(cmd)
    with open(out) as f:
        data = json.load(f)
    return data, {(tuple(r["shape"]), r["variant"]): r for r in data["rows"]}


def full_shape(s):
    dims = [int(x) for x in s.split(",")]
    return tuple(dims if len(dims) == 5 else dims + [dims[3]])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--linattn", default=os.path.join(ROOT, "build", "linattn"))
    ap.add_argument("--shape", action="append", help="B,T,H,D or B,T,H,DK,DV (default: %s)" % " ".join(SHAPES))
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--numpy-reps", type=int, default=5)
    ap.add_argument("--reps", type=int, default=7, help="repetitions of fused and materialized")
    ap.add_argument("--recompute-reps", type=int, default=3)
    ap.add_argument("--target", type=float, default=5.0, help="required ratio numpy / fused")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--check", action="store_true", help="exit 1 when fused misses the target")
    args = ap.parse_args()
    shapes = args.shape or SHAPES

    with tempfile.TemporaryDirectory() as tmp:
        numpy_version, numpy_ms = time_numpy(shapes, args.numpy_reps, args.chunk, os.path.join(tmp, "numpy.json"))
        report, rows = time_linattn(args.linattn, shapes, ["fused", "materialized"], args.reps, args.chunk,
                                    os.path.join(tmp, "linattn.json"))
        _, slow = time_linattn(args.linattn, shapes, ["recompute"], args.recompute_reps, args.chunk,
                               os.path.join(tmp, "recompute.json"))
        rows.update(slow)

    print()
    print(f"# {cpu_model()}, {os.cpu_count()} cores; numpy {numpy_version}; linattn {report['linattn_version']} on "
          f"Kokkos {report['kokkos_version']} ({report['backend']}); fp32 in, fp32 o and h, chunk {args.chunk}")
    print(f"# medians: numpy of {args.numpy_reps}, fused and materialized of {args.reps}, "
          f"recompute of {args.recompute_reps}; ratio = numpy ms / variant ms; target: fused ratio >= {args.target:g}")
    header = ["shape (B,T,H,DK,DV)", "numpy ms"]
    for v in VARIANTS:
        header += [f"{v} ms", "ratio"]
    header += ["fused GFLOP/s", "target met"]
    table = [header]
    results = []
    all_met = True
    for s in shapes:
        shape = full_shape(s)
        np_ms = numpy_ms[shape]
        line = [",".join(map(str, shape)), f"{np_ms:.1f}"]
        entry = {"shape": list(shape), "numpy_ms": np_ms}
        for v in VARIANTS:
            r = rows[(shape, v)]
            line += [f"{r['median_ms']:.1f}", f"{np_ms / r['median_ms']:.1f}"]
            entry[v] = {"ms": r["median_ms"], "ratio": np_ms / r["median_ms"], "gemm": r["gemm"],
                        "o_rel_l2": r["o_rel_l2"], "flops": r["flops"]}
        fused = rows[(shape, "fused")]
        met = np_ms / fused["median_ms"] >= args.target
        all_met = all_met and met
        line += [f"{fused['flops'] / fused['median_ms'] / 1e6:.1f}", "yes" if met else "no"]
        entry["target_met"] = met
        table.append(line)
        results.append(entry)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "cores": os.cpu_count(), "numpy": numpy_version, "linattn": report,
                       "target": args.target, "rows": results}, f, indent=2)
    return 1 if args.check and not all_met else 0


if __name__ == "__main__":
    sys.exit(main())
