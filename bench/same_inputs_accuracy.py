#!/usr/bin/env python3
"""o's accuracy of linattn and of flash-linear-attention on the very same inputs.

compare_fla.py draws separate inputs for each side (same distribution); this script
feeds both the same q, k, v and measures o against one fp64 reference (the parallel
form, whole tensors). Three steps, because the GPU machine has torch and fla but no
h5py, and this one the reverse:

  here:    linattn generate -o acc/in.h5 --shape 1,8192,1,128,128 --shape 1,4096,2,64,64 --seed 7
           python3 bench/same_inputs_accuracy.py prepare acc/in.h5 acc
  GPU:     linattn run acc/in.h5 -o OUT --snapshots bf16
           python3 bench/same_inputs_accuracy.py fla acc OUT --fla .fla
  here:    python3 bench/same_inputs_accuracy.py evaluate acc/in.h5 OUT

prepare writes each case's q, k, v as bf16 bit patterns (uint16 .npy); fla writes
fla's o (chunk_fwd_h + chunk_fwd_o, chunk 64, h in bf16, as compare_fla.py times it)
as float32 .npy; evaluate reads linattn's OUT/<stem>.<case>.h5 beside them.
"""
import argparse
import os
import sys

import numpy as np


def cases(f):
    """The groups of an open input file that hold a q/k/v case."""
    import h5py
    return sorted(name for name in f if isinstance(f[name], h5py.Group) and "q" in f[name])


def prepare(args):
    import h5py
    with h5py.File(args.input, "r") as f:
        for case in cases(f):
            for name in ("q", "k", "v"):
                x = np.ascontiguousarray(f[case][name][...], dtype=np.float32)  # bf16 read exactly as fp32
                bits = (x.view(np.uint32) >> 16).astype(np.uint16)
                np.save(os.path.join(args.dir, f"{case}.{name}.npy"), bits)
            print(case, f[case]["q"].shape, f[case]["v"].shape)


def run_fla(args):
    sys.path.insert(0, os.path.abspath(args.fla))
    import torch
    from fla.ops.common.chunk_h import chunk_fwd_h
    from fla.ops.common.chunk_o import chunk_fwd_o

    names = sorted({f.split(".")[0] for f in os.listdir(args.dir) if f.endswith(".q.npy")})
    for case in names:
        q, k, v = (
            torch.from_numpy(np.load(os.path.join(args.dir, f"{case}.{n}.npy")).astype(np.int16))
            .view(torch.bfloat16)
            .cuda()
            for n in ("q", "k", "v")
        )
        h, _ = chunk_fwd_h(k, v, output_final_state=True, chunk_size=64)
        o = chunk_fwd_o(q, k, v, h, scale=args.scale, chunk_size=64)
        np.save(os.path.join(args.out, f"fla.{case}.o.npy"), o.float().cpu().numpy())
        print(case, "fla o", tuple(o.shape))


def reference_o(q, k, v, scale):
    """o = scale * tril(Q K^T) V per (batch, head), in fp64."""
    B, T, H, _ = q.shape
    o = np.empty((B, T, H, v.shape[-1]))
    for b in range(B):
        for h in range(H):
            a = np.tril(q[b, :, h] @ k[b, :, h].T) * scale
            o[b, :, h] = a @ v[b, :, h]
    return o


def rel_l2(x, ref):
    x = np.asarray(x, dtype=np.float64)
    return np.linalg.norm(x - ref) / np.linalg.norm(ref) if np.isfinite(x).all() else float("nan")


def evaluate(args):
    import h5py
    stem = os.path.splitext(os.path.basename(args.input))[0]
    print("case | shape B,T,H,DK,DV | linattn o rel L2 | fla o rel L2 | linattn gemm path")
    with h5py.File(args.input, "r") as f:
        for case in cases(f):
            q, k, v = (np.asarray(f[case][n][...], dtype=np.float64) for n in ("q", "k", "v"))
            ref = reference_o(q, k, v, args.scale)
            with h5py.File(os.path.join(args.out, f"{stem}.{case}.h5"), "r") as out:
                ours = rel_l2(out["o"][...], ref)
                path = out.attrs["gemm_path"]
                path = path.decode() if isinstance(path, bytes) else path
            theirs = rel_l2(np.load(os.path.join(args.out, f"fla.{case}.o.npy")), ref)
            shape = ",".join(map(str, q.shape + v.shape[-1:]))
            print(f"{case} | {shape} | {ours:.3e} | {theirs:.3e} | {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="inputs as bf16 .npy for the GPU machine")
    p.add_argument("input")
    p.add_argument("dir")
    p.set_defaults(func=prepare)
    p = sub.add_parser("fla", help="fla's o on the prepared inputs (GPU machine)")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--fla", required=True, help="folder that holds the fla package")
    p.add_argument("--scale", type=float, default=1.0)
    p.set_defaults(func=run_fla)
    p = sub.add_parser("evaluate", help="both o against the fp64 reference")
    p.add_argument("input")
    p.add_argument("out")
    p.add_argument("--scale", type=float, default=1.0)
    p.set_defaults(func=evaluate)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
