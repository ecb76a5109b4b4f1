#!/usr/bin/env python3
"""Whole batch jobs end to end, file to file: `linattn run` beside the script a user
would write instead, in one run on one host, like against like.

Each job is one subprocess, timed with time.perf_counter around it (median of --reps
after --warmup untimed runs, jobs interleaved). Each runs under this script's --child
mode, which reports its peak RSS on its last output line: for `linattn run` and dd
the RUSAGE_CHILDREN maxrss of the one process it launched (linattn's reader process
included, as linattn waits for it), and linattn's own 'peak RSS' line verbatim; for
the user script the RUSAGE_SELF maxrss of the process that ran it.

Jobs, for h (the per-chunk state snapshots) in bf16 and in fp32:
  linattn   `linattn run INPUT -o DIR --snapshots bf16|fp32 --force --no-fsync`
            (--sync: without --no-fsync), plus --linattn-args.
  baseline  GPU (default): the 20-line user script: h5py reads q, k, v of each case
            (fp16 as numpy float16; bf16 comes back as float32 through HDF5's
            conversion and torch makes it bfloat16), torch moves them to the GPU, fla's
            chunk_fwd_h + chunk_fwd_o (chunk 64, as bench/compare_fla.py calls them)
            compute h and o, o, h and final_state come back to the host and h5py writes
            them to DIR/<stem>.<group>.h5 (no compression, no chunking; bf16 as the
            same 2-byte HDF5 float linattn writes, its bits written unconverted).
            h in the input dtype (bf16 h from bf16 inputs) is chunk_fwd_h's h as it
            is, as compare_fla.py calls it; any other h (fp32 h; bf16 h from fp16
            inputs) comes from chunk_fwd_h(..., states_in_fp32=True) and is cast on the
            GPU (rounded once, as linattn rounds it; an fla without states_in_fp32: its
            h is cast, and the notes say so). fla's chunk_fwd_o takes h in q's dtype
            (its tl.dot takes one dtype), so o comes from h cast to q's dtype.
            --cpu: the same script with numpy instead of torch + fla: o, h, final_state
            chunkwise in fp32 (bench/numpy_chunked.py's chunked_forward), o stored in
            the input dtype as linattn stores it.
            --sync: f.flush(), close, os.fsync of each output file and of DIR at the end
            (linattn fsyncs each file and its directory).
  dd        (--sync only) `dd if=/dev/zero of=DIR/dd.bin bs=16M count=BYTES
            iflag=count_bytes conv=fsync`, BYTES = the size of linattn's output files
            for that h dtype: the disk's floor.

GB/s = (bytes of q, k, v in the input + bytes of the job's output files) / wall.
The scratch folder (the generated input, and outputs without --outdir) is
/dev/shm/linattn-e2e when /dev/shm has room, kept for the next run; else a temp
dir, removed at the end. The input is read once (cat INPUT > /dev/null) before
timing, so that every job sees a warm page cache; each job's outputs are deleted
before the next job. The first run also compares the baseline's case0 (batch 0)
with linattn's (relative L2 of o, h, final_state), so that both rows are known to
produce the same thing.

torch, triton and fla are imported only in the GPU baseline's child process; fla is
imported from the folder given by --fla (the folder that holds the `fla` package).

GPU host (the CUDA build carried in .gpu/, fla in .fla/); the issue's batch is 4 cases
of (8, 8192, 16, 128) fp16:
    LD_LIBRARY_PATH=$PWD/.gpu/lib python3 bench/e2e_compare.py --linattn .gpu/linattn \\
        --fla .fla --shape 8,8192,16,128,128 --dtype fp16 --cases 4 --json e2e.json
CPU (Serial linattn beside h5py + numpy):
    python3 bench/e2e_compare.py --cpu --shape 2,2048,4,64,64 --cases 2 --dtype fp32
Add --sync (and --outdir on a real disk) for the fsync rows and the dd floor.
"""
import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHUNK = 64
H_DTYPES = ("bf16", "fp32")
BF16_FIELDS = (15, 7, 8, 0, 7)  # sign bit, exponent position and size, mantissa position and size


# ----------------------------------------------------------------------------- HDF5 helpers

def natural_key(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def case_groups(f):
    """The groups of an open input file that hold a q/k/v case, in natural order (case2 before case10)."""
    import h5py
    return sorted((n for n in f if isinstance(f[n], h5py.Group) and "q" in f[n]), key=natural_key)


def is_bf16(ds):
    t = ds.id.get_type()
    return t.get_class() == 1 and t.get_size() == 2 and tuple(t.get_fields()) == BF16_FIELDS  # 1: H5T_FLOAT


def bf16_type():
    """bfloat16 as linattn stores it: an HDF5 user-defined float of 2 bytes (inputs/README.md)."""
    import h5py
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(*BF16_FIELDS)
    t.set_size(2)
    t.set_ebias(127)
    return t


def bf16_bits(x):
    """float32 -> bfloat16 bit patterns (round to nearest even; finite values), as uint16."""
    import numpy as np
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def write_outputs(path, arrays, sync):
    """arrays: name -> numpy array, or (\"bf16\", uint16 bits). Plain datasets: contiguous, no compression."""
    import h5py
    with h5py.File(path, "w") as f:
        for name, x in arrays.items():
            if isinstance(x, tuple):
                t = bf16_type()
                ds = h5py.h5d.create(f.id, name.encode(), t, h5py.h5s.create_simple(x[1].shape))
                ds.write(h5py.h5s.ALL, h5py.h5s.ALL, x[1], mtype=t)  # the bits, no conversion
            else:
                f.create_dataset(name, data=x)
        if sync:
            f.flush()
    if sync:
        fsync_path(path)


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def input_bytes(path):
    """Bytes of q, k, v over all cases (element size of the stored type x elements)."""
    import h5py
    total, cases = 0, []
    with h5py.File(path, "r") as f:
        for case in case_groups(f):
            for n in ("q", "k", "v"):
                ds = f[case][n]
                total += int(ds.id.get_type().get_size()) * int(ds.size)
            cases.append({"group": case, "q": list(f[case]["q"].shape), "v": list(f[case]["v"].shape),
                          "dtype": "bf16" if is_bf16(f[case]["q"]) else str(f[case]["q"].dtype)})
    return total, cases


# ----------------------------------------------------------------------------- the user scripts

def read_raw(ds):
    """A dataset as torch tensor, read in the file's own element type (no HDF5 conversion: a user-defined
    16-bit float converted element by element to h5py's float16 or to float32 is far slower than the read),
    16-bit patterns viewed as float16 or bfloat16."""
    import numpy as np
    import torch
    t = ds.id.get_type()
    if t.get_size() != 2:
        return torch.from_numpy(ds[...])
    bits = np.empty(ds.shape, dtype=np.uint16)
    ds.id.read(h5py_all(), h5py_all(), bits, mtype=t)
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16 if is_bf16(ds) else torch.float16)


def h5py_all():
    import h5py
    return h5py.h5s.ALL


def user_script_gpu(inp, outdir, h_dtype, sync, scale):
    """The 20-line script: h5py -> torch on the GPU -> fla chunk_fwd_h + chunk_fwd_o -> host -> h5py.
    Each phase's seconds go into the report (where the script's time goes), with a synchronize after the
    GPU's part so that its time is not charged to the copy that follows."""
    t_start = time.perf_counter()
    import h5py
    import torch
    from fla.ops.common.chunk_h import chunk_fwd_h
    from fla.ops.common.chunk_o import chunk_fwd_o
    phases = {"import": time.perf_counter() - t_start}
    t = time.perf_counter()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    phases["cuda_init"] = time.perf_counter() - t

    def timed(name, fn, *args, **kw):
        t0 = time.perf_counter()
        r = fn(*args, **kw)
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0
        return r

    def host(x):  # torch -> what write_outputs takes; bf16 as its bits
        x = x.cpu()
        return ("bf16", x.view(torch.int16).numpy().view("u2")) if x.dtype == torch.bfloat16 else x.numpy()

    import inspect
    # h in fp32 from the kernel where this fla has the switch, whenever the stored h is not the input dtype
    # (fp32 h; bf16 h from fp16 inputs, then rounded once to bf16); else fla's h is cast after the call
    has_fp32 = "states_in_fp32" in inspect.signature(chunk_fwd_h).parameters
    want = torch.bfloat16 if h_dtype == "bf16" else torch.float32
    stem = os.path.splitext(os.path.basename(inp))[0]
    with h5py.File(inp, "r") as f:
        for case in case_groups(f):
            q, k, v = timed("read", lambda: [read_raw(f[case][n]) for n in ("q", "k", "v")])
            q, k, v = timed("upload", lambda: [x.cuda() for x in (q, k, v)])
            kw = {"states_in_fp32": True} if has_fp32 and want != q.dtype else {}

            def compute():
                h, ht = chunk_fwd_h(k, v, output_final_state=True, chunk_size=CHUNK, **kw)
                o = chunk_fwd_o(q, k, v, h.to(q.dtype), scale=scale, chunk_size=CHUNK)  # its tl.dot takes one dtype
                h = h.to(want)
                torch.cuda.synchronize()
                return o, h, ht
            o, h, ht = timed("gpu_first" if "gpu_first" not in phases else "gpu", compute)
            out = timed("download", lambda: {"o": host(o), "h": host(h), "final_state": host(ht)})
            timed("write", write_outputs, os.path.join(outdir, f"{stem}.{case}.h5"), out, sync)
            del q, k, v, h, ht, o, out
    import triton
    fla = sys.modules["fla"]
    return {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "fla": getattr(fla, "__version__", "?"), "gpu": torch.cuda.get_device_name(),
            "h_fp32_from": "chunk_fwd_h(states_in_fp32=True)" if has_fp32 else "fla's h cast after chunk_fwd_h",
            "phases_s": {k: round(v, 3) for k, v in phases.items()}}


def user_script_cpu(inp, outdir, h_dtype, sync, scale):
    """The same script with numpy: h5py -> fp32 chunked form (bench/numpy_chunked.py) -> h5py."""
    import h5py
    import numpy as np
    sys.path.insert(0, HERE)
    sys.dont_write_bytecode = True  # no __pycache__ left in bench/
    from numpy_chunked import chunked_forward

    stem = os.path.splitext(os.path.basename(inp))[0]
    with h5py.File(inp, "r") as f:
        for case in case_groups(f):
            bf16 = is_bf16(f[case]["q"])
            q, k, v = (f[case][n][...] for n in ("q", "k", "v"))
            in_dtype = q.dtype
            q, k, v = (x.astype(np.float32, copy=False) for x in (q, k, v))
            o, h, ht = chunked_forward(q, k, v, CHUNK, scale)
            o = ("bf16", bf16_bits(o)) if bf16 else o.astype(in_dtype, copy=False)
            h = ("bf16", bf16_bits(h)) if h_dtype == "bf16" else h
            write_outputs(os.path.join(outdir, f"{stem}.{case}.h5"),
                          {"o": o, "h": h, "final_state": np.ascontiguousarray(ht)}, sync)
    return {"numpy": np.__version__, "h5py": h5py.__version__}


# ----------------------------------------------------------------------------- child mode

def child_main(argv):
    """--child exec -- CMD... | --child baseline ...: run one job, print its rusage as JSON on the last line."""
    import resource
    ap = argparse.ArgumentParser(prog="e2e_compare.py --child")
    ap.add_argument("kind", choices=["exec", "baseline"])
    ap.add_argument("--input")
    ap.add_argument("--outdir")
    ap.add_argument("--h-dtype", choices=H_DTYPES)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--fla")
    ap.add_argument("--scale", type=float, default=1.0)
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    report = {}
    t0 = time.perf_counter()
    if a.kind == "exec":
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        report["inner_wall_s"] = time.perf_counter() - t0
        sys.stdout.write(p.stdout)
        report["rc"] = p.returncode
        m = re.findall(r"^peak RSS:.*$", p.stdout, flags=re.M)
        report["peak_rss_line"] = m[-1] if m else None
        m = re.findall(r"^pipeline:.*$", p.stdout, flags=re.M)
        report["pipeline_line"] = m[-1] if m else None
    else:
        if a.cpu:
            report["info"] = user_script_cpu(a.input, a.outdir, a.h_dtype, a.sync, a.scale)
        else:
            sys.path.insert(0, os.path.abspath(a.fla))
            report["info"] = user_script_gpu(a.input, a.outdir, a.h_dtype, a.sync, a.scale)
        if a.sync:
            fsync_path(a.outdir)
        report["inner_wall_s"] = time.perf_counter() - t0
        report["rc"] = 0
    report["self_maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report["children_maxrss_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    sys.stdout.flush()
    print("\n" + json.dumps(report), flush=True)
    return 0 if report["rc"] == 0 else 1


# ----------------------------------------------------------------------------- parent

def fs_type(path):
    """Filesystem type of the mount that holds path (from /proc/mounts), or '?'."""
    path = os.path.realpath(path)
    best, kind = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1].replace("\\040", " ")
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind


def cpu_model():
    sys.path.insert(0, HERE)
    from cpu_compare import cpu_model as model  # one reader of /proc/cpuinfo for the bench scripts
    return model()


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)))


def shown(cmd):
    return " ".join(shlex.quote(c) for c in cmd)


def run_child(child_args, label):
    """Run this script in --child mode; return (wall seconds around the subprocess, report, output)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child"] + child_args
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    wall = time.perf_counter() - t0
    lines = [x for x in p.stdout.splitlines() if x.strip()]
    report = None
    if lines:
        try:
            report = json.loads(lines[-1])
        except ValueError:
            report = None
    if p.returncode != 0 or report is None or report.get("rc") != 0:
        sys.stderr.write(f"{label} failed (exit {p.returncode}):\n{p.stdout[-6000:]}\n{p.stderr[-6000:]}\n")
        sys.exit(1)
    return wall, report, "\n".join(lines[:-1]), p.stderr


def rel_l2(x, ref):
    import numpy as np
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    d = np.linalg.norm(ref)
    return float(np.linalg.norm(x - ref) / d) if d > 0 else float(np.linalg.norm(x))


def compare_case0(lin_path, base_path):
    """Relative L2 of the baseline's o, h, final_state (batch 0) against linattn's."""
    import h5py
    out = {}
    with h5py.File(lin_path, "r") as a, h5py.File(base_path, "r") as b:
        for n in ("o", "h", "final_state"):
            out[n] = rel_l2(b[n][0], a[n][0])
    return out


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(child_main(sys.argv[2:]))

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--linattn", default=os.path.join(ROOT, "build", "linattn"), help="path of the linattn binary")
    ap.add_argument("--fla", default=os.path.join(ROOT, ".fla"), help="folder that holds the fla package (GPU mode)")
    ap.add_argument("--input", help="input HDF5 file (default: made with --generate in the scratch folder)")
    ap.add_argument("--generate", action="store_true",
                    help="make --input with `linattn generate` unless it exists (implied without --input)")
    ap.add_argument("--outdir", help="where jobs write (default /dev/shm/linattn-e2e when /dev/shm exists, else a "
                                     "temp dir; with --sync a new temp dir under $TMPDIR or /tmp, removed at the end: "
                                     "fsync means something only on a disk)")
    ap.add_argument("--shape", default="8,8192,16,128,128", help="B,T,H,DK,DV for --generate (default: %(default)s)")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16", "fp32"], help="for --generate")
    ap.add_argument("--cases", type=int, default=4, help="for --generate (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="for --generate")
    ap.add_argument("--scale", type=float, default=1.0, help="o's scale, given to both sides (linattn's default is DK^-0.5; 1 here, as the recorded runs had)")
    ap.add_argument("--reps", type=int, default=1, help="timed runs of each job; the median is reported")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed runs of every job first (triton's kernel cache, fla's autotuning cache)")
    ap.add_argument("--sync", action="store_true", help="fsync on: linattn without --no-fsync, the baseline with "
                                                        "fsync, and dd's floor")
    ap.add_argument("--cpu", action="store_true", help="baseline with h5py + numpy instead of torch + fla")
    ap.add_argument("--linattn-args", default="", help="extra arguments for `linattn run`, one string: "
                                                      "--linattn-args='--variant materialized'")
    ap.add_argument("--no-check", action="store_true", help="skip comparing the baseline's case0 with linattn's")
    ap.add_argument("--json", help="write all numbers here")
    args = ap.parse_args()
    import h5py  # noqa: F401  (the parent needs it for the input's sizes; fail early)

    linattn = os.path.abspath(args.linattn)
    dims = [int(x) for x in args.shape.split(",")]
    if len(dims) == 4:
        dims.append(dims[3])
    el = {"fp16": 2, "bf16": 2, "fp32": 4}[args.dtype]
    default_name = "e2e_%s_%s_%dcases.h5" % ("x".join(map(str, dims)), args.dtype, args.cases)
    if args.input and os.path.exists(args.input):
        _, shapes = input_bytes(args.input)
        need_in = 0
        el = 4 if any(c["dtype"] == "float32" for c in shapes) else 2
        shapes = [c["q"] + [c["v"][-1]] for c in shapes]
    else:
        shapes = [dims] * args.cases
        need_in = 0 if args.input or os.path.exists(os.path.join("/dev/shm/linattn-e2e", default_name)) else \
            args.cases * dims[0] * dims[1] * dims[2] * (2 * dims[3] + dims[4]) * el
    # one job's outputs (h in fp32) and one case's kept for the check, with some room for HDF5's metadata
    per_case = [B * T * H * DV * el + B * -(-T // CHUNK) * H * DK * DV * 4 + B * H * DK * DV * 4
                for B, T, H, DK, DV in shapes]
    need_out = int(1.1 * (sum(per_case) + max(per_case))) + (64 << 20)
    need = need_in + (0 if args.outdir or args.sync else need_out)
    shm_free = 0
    if os.path.isdir("/dev/shm"):
        st = os.statvfs("/dev/shm")
        shm_free = st.f_bavail * st.f_frsize
    keep_scratch = shm_free > need
    scratch = "/dev/shm/linattn-e2e" if keep_scratch else tempfile.mkdtemp(prefix="linattn-e2e-")
    os.makedirs(scratch, exist_ok=True)
    made_outdir = False
    if args.outdir:
        outdir = os.path.abspath(args.outdir)
        os.makedirs(outdir, exist_ok=True)
    elif args.sync:
        outdir, made_outdir = tempfile.mkdtemp(prefix="linattn-e2e-out-"), True
    else:
        outdir = scratch
    if args.input:
        inp = os.path.abspath(args.input)
    else:
        inp = os.path.join(scratch, default_name)
        args.generate = True
    if not os.path.exists(inp):
        if not args.generate:
            sys.exit(f"{inp} does not exist (add --generate to make it)")
        cmd = [linattn, "generate", "-o", inp, "--shape", ",".join(map(str, dims)), "--dtype", args.dtype,
               "--seed", str(args.seed), "--cases", str(args.cases)]
        print("$ " + shown(cmd), flush=True)
        subprocess.run(cmd, check=True)
    bytes_in, cases = input_bytes(inp)
    stem = os.path.splitext(os.path.basename(inp))[0]

    version = subprocess.run([linattn, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    t0 = time.perf_counter()
    subprocess.run(["cat", inp], stdout=subprocess.DEVNULL, check=True)
    warm_s = time.perf_counter() - t0
    file_size = os.path.getsize(inp)
    notes = [
        f"input {inp} ({fs_type(inp)}): {len(cases)} case(s) {', '.join(sorted({c['dtype'] for c in cases}))}, "
        f"q {cases[0]['q']} v {cases[0]['v']}; q, k, v = {bytes_in / 1e9:.3f} GB (file {file_size / 1e9:.3f} GB)",
        f"page cache warmed before timing: cat INPUT > /dev/null ({file_size / 1e9:.3f} GB in {warm_s:.2f} s); "
        "every job reads a warm cache",
        (f"scratch {scratch} kept for the next run (rm -r it to free the memory)" if keep_scratch else
         f"scratch {scratch} (/dev/shm {'absent' if not os.path.isdir('/dev/shm') else 'has too little room'}: "
         f"{shm_free / 1e9:.1f} GB free, {need / 1e9:.1f} GB needed); removed at the end"),
        f"outputs in {outdir} ({fs_type(outdir)}), each job's deleted before the next; "
        f"fsync {'on (--sync)' if args.sync else 'off (--no-fsync; the baseline does not fsync)'}",
    ]
    if args.sync and fs_type(outdir) in ("tmpfs", "ramfs"):
        notes.append(f"WARNING: --sync with outputs on {fs_type(outdir)}: fsync is a no-op there; "
                     "give --outdir on a disk")
    if args.cpu:
        notes.append("baseline: h5py + numpy (bench/numpy_chunked.py chunked_forward, fp32; o stored in the input "
                     "dtype, h in the row's dtype, final_state fp32); linattn is the host build given by --linattn")
    else:
        notes.append("baseline: h5py + torch + fla chunk_fwd_h/chunk_fwd_o (chunk 64); h stored in the input dtype "
                     "comes from chunk_fwd_h as it is (bench/compare_fla.py's call); any other h is made in fp32 and "
                     "cast on the GPU (bf16 h from fp16 inputs rounded once, as linattn does), o then from h cast to "
                     "q's dtype (chunk_fwd_o's tl.dot takes one dtype)")
    notes.append(f"wall = perf_counter around each job's subprocess (this script's --child wrapper: Python "
                 f"start-up included for every row), median of {args.reps} after {args.warmup} untimed run(s); "
                 "peak RSS: the largest of the timed runs; GB/s = (q, k, v bytes + output file bytes) / wall")

    extra = shlex.split(args.linattn_args)
    jobs = []
    for hd in H_DTYPES:
        jdir = os.path.join(outdir, f"linattn-{hd}")
        cmd = [linattn, "run", inp, "-o", jdir, "--snapshots", hd, "--force", "--scale", repr(args.scale)] + \
            ([] if args.sync else ["--no-fsync"]) + extra
        jobs.append({"job": "linattn run", "h": hd, "dir": jdir, "cmd": cmd, "child": ["exec", "--"] + cmd})
        jdir = os.path.join(outdir, f"baseline-{hd}")
        name = "h5py+numpy" if args.cpu else "h5py+torch+fla"
        child = ["baseline", "--input", inp, "--outdir", jdir, "--h-dtype", hd, "--scale", repr(args.scale)] + \
            (["--sync"] if args.sync else []) + (["--cpu"] if args.cpu else ["--fla", os.path.abspath(args.fla)])
        jobs.append({"job": name, "h": hd, "dir": jdir, "cmd": None, "child": child})
        if args.sync:
            jobs.append({"job": "dd (disk floor)", "h": hd, "dir": os.path.join(outdir, f"dd-{hd}"), "cmd": None,
                         "child": None})
    for j in jobs:
        j.update(walls=[], inner_walls=[], warmup_walls=[], bytes_out=None, rss_kib=None, peak_rss_line=None,
                 report=None, output_tail="")

    checks = {}
    lin_out = {}  # h dtype -> linattn's output bytes (dd's size)
    try:
        for it in range(args.warmup + args.reps):
            timed = it >= args.warmup
            for j in jobs:
                shutil.rmtree(j["dir"], ignore_errors=True)
                os.makedirs(j["dir"])
                if j["job"].startswith("dd"):
                    n = lin_out[j["h"]]
                    j["cmd"] = ["dd", "if=/dev/zero", "of=" + os.path.join(j["dir"], "dd.bin"), "bs=16M",
                                f"count={n}", "iflag=count_bytes", "conv=fsync"]
                    j["child"] = ["exec", "--"] + j["cmd"]
                label = f"{j['job']} (h {j['h']}){'' if timed else ' [warm-up]'}"
                what = shown(j["cmd"]) if j["cmd"] else \
                    f"python3 {os.path.relpath(__file__)} --child " + shown(j["child"])
                print(f"[{it + 1}/{args.warmup + args.reps}] {label}: {what}", flush=True)
                wall, rep, out, err = run_child(j["child"], label)
                nbytes = dir_bytes(j["dir"])
                if j["job"] == "linattn run":
                    lin_out[j["h"]] = nbytes
                    if not args.no_check and j["h"] not in checks:
                        keep = os.path.join(outdir, f"check-linattn-{j['h']}.h5")
                        shutil.move(os.path.join(j["dir"], f"{stem}.{cases[0]['group']}.h5"), keep)
                elif not j["job"].startswith("dd") and not args.no_check and j["h"] not in checks:
                    keep = os.path.join(outdir, f"check-linattn-{j['h']}.h5")
                    checks[j["h"]] = compare_case0(keep, os.path.join(j["dir"], f"{stem}.{cases[0]['group']}.h5"))
                    os.unlink(keep)
                    print("    check case0 batch 0, baseline vs linattn, rel L2: " +
                          "  ".join(f"{k} {v:.2e}" for k, v in checks[j["h"]].items()), flush=True)
                shutil.rmtree(j["dir"], ignore_errors=True)
                rss = rep["children_maxrss_kib"] if j["child"][0] == "exec" else rep["self_maxrss_kib"]
                print(f"    {wall:.3f} s  {nbytes / 1e6:.1f} MB out  peak RSS {rss / 1024:.0f} MiB" +
                      (f"  (linattn: {rep['peak_rss_line']})" if rep.get("peak_rss_line") else ""), flush=True)
                if rep.get("pipeline_line"):
                    print(f"    linattn: {rep['pipeline_line']}", flush=True)
                phases = (rep.get("info") or {}).get("phases_s")
                if phases:
                    print("    baseline phases (s): " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()) +
                          f"; inside the script {rep['inner_wall_s']:.3f}", flush=True)
                if timed:
                    j["walls"].append(wall)
                    j["inner_walls"].append(rep["inner_wall_s"])
                    j["bytes_out"] = nbytes
                    j["rss_kib"] = max(j["rss_kib"] or 0, rss)
                    j["peak_rss_line"] = rep.get("peak_rss_line")
                    j["report"] = rep
                    j["output_tail"] = (out + err)[-3000:]
                else:
                    j["warmup_walls"].append(wall)
    finally:  # no job folder or kept check file is left behind, whatever happened
        for j in jobs:
            shutil.rmtree(j["dir"], ignore_errors=True)
        for hd in H_DTYPES:
            if os.path.exists(os.path.join(outdir, f"check-linattn-{hd}.h5")):
                os.unlink(os.path.join(outdir, f"check-linattn-{hd}.h5"))
        if made_outdir:
            shutil.rmtree(outdir, ignore_errors=True)
        if not keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)

    rows = []
    base = {j["h"]: j for j in jobs if j["job"].startswith("h5py")}
    dd = {j["h"]: j for j in jobs if j["job"].startswith("dd")}
    for j in jobs:
        med = statistics.median(j["walls"])
        b_in = 0 if j["job"].startswith("dd") else bytes_in
        row = {"job": j["job"], "h": j["h"], "fsync": args.sync, "cmd": j["cmd"] or ["python3", __file__, "--child"] +
               j["child"], "walls_s": j["walls"], "warmup_walls_s": j["warmup_walls"], "wall_s": med,
               "bytes_in": b_in, "bytes_out": j["bytes_out"], "gbps": (b_in + j["bytes_out"]) / med / 1e9,
               "peak_rss_mib": j["rss_kib"] / 1024, "linattn_peak_rss_line": j["peak_rss_line"],
               "inner_wall_s": statistics.median(j["inner_walls"]), "child_report": j["report"],
               "output_tail": j["output_tail"]}
        phases = ((j["report"] or {}).get("info") or {}).get("phases_s") or {}
        if j["job"].startswith("h5py") and "import" in phases:
            # The script's own work: its time inside Python, less the one-time `import fla` (a long-lived
            # user process pays it once, not per batch)
            row["steady_s"] = row["inner_wall_s"] - phases["import"]
        if j["job"] == "linattn run":
            row["ratio_to_baseline"] = med / statistics.median(base[j["h"]]["walls"])
            b = base[j["h"]]
            b_phases = ((b["report"] or {}).get("info") or {}).get("phases_s") or {}
            if "import" in b_phases:
                row["ratio_to_steady"] = med / (statistics.median(b["inner_walls"]) - b_phases["import"])
            if j["h"] in dd:
                row["ratio_to_dd"] = med / statistics.median(dd[j["h"]]["walls"])
        if j["job"].startswith("h5py") and j["h"] in dd:
            row["ratio_to_dd"] = med / statistics.median(dd[j["h"]]["walls"])
        rows.append(row)

    info = next((r["child_report"].get("info") for r in rows if r["job"].startswith("h5py")), {}) or {}
    host = f"{platform.node()}: {cpu_model()}, {os.cpu_count()} CPUs"
    if not args.cpu and info.get("gpu"):
        host += f"; GPU {info['gpu']} (torch {info.get('torch')}, triton {info.get('triton')}, "
        host += f"CUDA {info.get('cuda')}, fla {info.get('fla')})"
    elif info:
        host += f"; numpy {info.get('numpy')}, h5py {info.get('h5py')}"
    print()
    print(f"host {host}; linattn {version} ({linattn})")
    for r in rows:
        how = ((r["child_report"] or {}).get("info") or {}).get("h_fp32_from")
        if r["job"].startswith("h5py") and r["h"] == "fp32" and how:
            notes.append(f"baseline's fp32 h from {how}")
    for n in notes:
        print("note: " + n)
    for r in rows:
        if r["linattn_peak_rss_line"]:
            print(f"note: linattn (h {r['h']}) printed: {r['linattn_peak_rss_line']}")
        if r["job"] == "linattn run":
            print(f"note: linattn (h {r['h']}) alone, without the wrapper's Python start-up: {r['inner_wall_s']:.3f} s "
                  "(median; the table's wall includes it, as it does for the baseline)")
    for hd, c in checks.items():
        print(f"note: h {hd}: baseline vs linattn, case0 batch 0, rel L2: " +
              "  ".join(f"{k} {v:.2e}" for k, v in c.items()))
    if any("ratio_to_steady" in r for r in rows):
        print("note: ÷ script w/o import = linattn's wall (Python start-up included) over the script's time inside "
              "Python less its `import fla` phase (in its phases line; paid once per process): the script's own work")
    steady = any("steady_s" in r for r in rows)
    head = ["job", "h", "fsync", "wall s", "GB/s", "out MB", "peak RSS MiB", "linattn/baseline"]
    if steady:
        head.append("÷ script w/o import")
    if args.sync:
        head.append("÷ dd")
    table = [head]
    for r in rows:
        cells = [r["job"], r["h"], "on" if r["fsync"] else "off", f"{r['wall_s']:.3f}", f"{r['gbps']:.2f}",
                 f"{r['bytes_out'] / 1e6:.1f}", f"{r['peak_rss_mib']:.0f}",
                 f"{r['ratio_to_baseline']:.2f}" if "ratio_to_baseline" in r else ""]
        if steady:
            cells.append(f"{r['ratio_to_steady']:.2f}" if "ratio_to_steady" in r else
                         (f"({r['steady_s']:.3f} s)" if "steady_s" in r else ""))
        if args.sync:
            cells.append(f"{r['ratio_to_dd']:.2f}" if "ratio_to_dd" in r else "")
        table.append(cells)
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    print()
    for t in table:
        print(" | ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(t, widths))))

    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"host": host, "linattn_version": version, "linattn": linattn, "input": inp,
                       "input_cases": cases, "input_qkv_bytes": bytes_in, "outdir": outdir,
                       "outdir_fs": fs_type(outdir), "cache_warm_s": warm_s, "mode": "cpu" if args.cpu else "gpu",
                       "sync": args.sync, "reps": args.reps, "warmup": args.warmup, "scale": args.scale,
                       "baseline_info": info, "checks": checks, "notes": notes, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
