#!/usr/bin/env python3
"""The backward end to end, file to file: `linattn backward` beside the script a user would
write instead, in one run on one host (the backward's twin of bench/e2e_compare.py).

Set-up (not timed): `linattn generate` writes --cases cases of --shape, `linattn run
--snapshots bf16` their forward outputs, `linattn generate --grad` the gradient file (do, dht),
all under --workdir (default /dev/shm/linattn-e2e-backward), read once before timing.

Jobs, each one subprocess timed with time.perf_counter around it:
  linattn   `linattn backward FWD... --grad GRAD (once per output) -o DIR --force --no-fsync`
  script    h5py reads q, k, v (input) and do, dht (gradient file) of each case, torch moves
            them to the GPU, fla's chunk_simple_gla_bwd(g=None) (it recomputes h; given a zero
            initial state so that it returns dh0) gives dq, dk, dv, dh0, which come back to the host and h5py writes to DIR/<stem>.<case>.grad.h5
            (no compression, no chunking). It reports its phases; "own work" is its wall time
            less the import of fla (paid once per process).
Peak RSS: linattn's own 'peak RSS' line; the script's RUSAGE_SELF maxrss.

    python3 bench/e2e_backward.py --linattn .gpu/linattn --fla .fla --shape 8,8192,16,128,128 --cases 4
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_compare import case_groups, read_raw, write_outputs  # noqa: E402


def script(inp, grad, outdir, scale):
    t_start = time.perf_counter()
    import h5py
    import torch
    from fla.ops.simple_gla.chunk import chunk_simple_gla_bwd
    phases = {"import": time.perf_counter() - t_start}

    def timed(name, fn):
        t0 = time.perf_counter()
        r = fn()
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0
        return r

    def host(x):
        x = x.cpu()
        return ("bf16", x.view(torch.int16).numpy().view("u2")) if x.dtype == torch.bfloat16 else x.numpy()

    timed("cuda_init", lambda: torch.empty(1, device="cuda"))
    stem = os.path.splitext(os.path.basename(inp))[0]
    with h5py.File(inp, "r") as f, h5py.File(grad, "r") as g:
        for case in case_groups(f):
            q, k, v, do = timed("read", lambda: [read_raw(f[case][n]) for n in ("q", "k", "v")] + [read_raw(g[case]["do"])])
            dht = timed("read", lambda: torch.from_numpy(g[case]["dht"][...]))
            q, k, v, do, dht = timed("upload", lambda: [x.cuda() for x in (q, k, v, do, dht)])

            # A zero initial state, so that fla computes dh0 too (it returns None without one), as linattn writes it.
            h0 = timed("upload", lambda: torch.zeros(dht.shape, dtype=torch.float32, device="cuda"))

            def compute():
                dq, dk, dv, _, dh0 = chunk_simple_gla_bwd(q, k, v, None, None, h0, do, dht, scale, chunk_size=64)
                torch.cuda.synchronize()
                return dq, dk, dv, dh0
            dq, dk, dv, dh0 = timed("gpu", compute)
            out = timed("download", lambda: {"dq": host(dq), "dk": host(dk), "dv": host(dv), "dh0": host(dh0)})
            timed("write", lambda: write_outputs(os.path.join(outdir, f"{stem}.{case}.grad.h5"), out, False))
    phases["total"] = time.perf_counter() - t_start
    return {"phases_s": {k: round(v, 3) for k, v in phases.items()},
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--linattn", required=True)
    ap.add_argument("--fla", required=True, help="folder that holds the fla package")
    ap.add_argument("--shape", default="8,8192,16,128,128", help="B,T,H,DK,DV")
    ap.add_argument("--cases", type=int, default=4)
    ap.add_argument("--workdir", default="/dev/shm/linattn-e2e-backward")
    ap.add_argument("--no-script", action="store_true", help="time linattn alone (no fla script)")
    ap.add_argument("--budget", action="append", default=[],
                    help="also time the backward under this --memory-budget (repeatable; its peak RSS against it)")
    ap.add_argument("--also", action="append", default=[],
                    help="also time the backward with these options, e.g. '--readers 2' (repeatable)")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=4, metavar=("INPUT", "GRAD", "OUTDIR", "SCALE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.fla))
    if args.child:
        inp, grad, outdir, scale = args.child
        print(json.dumps(script(inp, grad, outdir, float(scale))))
        return

    w = args.workdir
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    inp, grad, fwd = os.path.join(w, "in.h5"), os.path.join(w, "grad.h5"), os.path.join(w, "fwd")
    run = lambda *a: subprocess.run([args.linattn, *a], check=True, stdout=subprocess.DEVNULL)
    run("generate", "-o", inp, "--shape", args.shape, "--dtype", "bf16", "--seed", "11", "--cases", str(args.cases))
    subprocess.run(["cat", inp], stdout=subprocess.DEVNULL, check=True)
    # The forward of the same cases, timed: issue 29 compares the backward's wall time with run's.
    t0 = time.perf_counter()
    run("run", inp, "-o", fwd, "--snapshots", "bf16", "--no-fsync")
    run_wall = time.perf_counter() - t0
    run("generate", "--grad", inp, "-o", grad, "--seed", "12")
    outputs = sorted(os.path.join(fwd, n) for n in os.listdir(fwd))
    for p in [inp, grad] + outputs:
        subprocess.run(["cat", p], stdout=subprocess.DEVNULL, check=True)
    bytes_in = sum(os.path.getsize(p) for p in [inp, grad] + outputs)

    rows = [{"job": "linattn run --snapshots bf16 --no-fsync (the forward of the same cases)", "wall_s": round(run_wall, 3)}]
    cmd = [args.linattn, "backward", *outputs, "-o", os.path.join(w, "lin"), "--force", "--no-fsync"]
    for _ in outputs:
        cmd += ["--grad", grad]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss = next((l for l in p.stdout.splitlines() if l.startswith("peak RSS")), "")
    print(p.stdout)
    rows.append({"job": "linattn backward --no-fsync", "wall_s": round(wall, 3), "peak_rss": rss})
    for extra in [["--memory-budget", b] for b in args.budget] + [a.split() for a in args.also]:
        t0 = time.perf_counter()
        p = subprocess.run(cmd + extra, check=True, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        print(p.stdout)
        rss = next((l for l in p.stdout.splitlines() if l.startswith("peak RSS")), "")
        rows.append({"job": "linattn backward --no-fsync " + " ".join(extra), "wall_s": round(wall, 3),
                     "peak_rss": rss})

    if not args.no_script:
        os.makedirs(os.path.join(w, "script"))
        scale = int(args.shape.split(",")[3]) ** -0.5  # linattn run's default, DK^-0.5, which the backward reads from the forward output
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--linattn", args.linattn, "--fla", args.fla,
                            "--child", inp, grad, os.path.join(w, "script"), str(scale)],
                           check=True, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        rep = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append({"job": "h5py + torch + fla script", "wall_s": round(wall, 3),
                     "own_work_s": round(wall - rep["phases_s"]["import"], 3), **rep})
    bytes_out = sum(os.path.getsize(os.path.join(w, "lin", n)) for n in os.listdir(os.path.join(w, "lin")))
    print(f"shape {args.shape} bf16, {args.cases} cases; read {bytes_in / 1e9:.2f} GB (input, gradient file, "
          f"forward outputs with bf16 h), linattn wrote {bytes_out / 1e9:.2f} GB")
    for r in rows:
        print(json.dumps(r))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"shape": args.shape, "cases": args.cases, "bytes_in": bytes_in, "rows": rows}, fh, indent=2)
    shutil.rmtree(w, ignore_errors=True)

if __name__ == "__main__":
    main()
