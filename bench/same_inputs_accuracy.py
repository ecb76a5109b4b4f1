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

The backward the same way, with a gradient file from `linattn generate --grad`:

  here:    linattn generate --grad acc/in.h5 -o acc/grad.h5 --seed 8
           python3 bench/same_inputs_accuracy.py prepare acc/in.h5 acc --grad acc/grad.h5
  GPU:     linattn run acc/in.h5 -o OUT --snapshots bf16
           linattn backward OUT/in.*.h5 --grad acc/grad.h5 (once per output) -o OUT
           python3 bench/same_inputs_accuracy.py fla acc OUT --fla .fla
  here:    python3 bench/same_inputs_accuracy.py evaluate acc/in.h5 OUT --grad acc/grad.h5

prepare then also writes do (bf16 bits) and dht (fp32); fla also runs chunk_simple_gla_bwd
(no gate, dht given) and writes dq, dk, dv; evaluate compares linattn's
OUT/<stem>.<case>.grad.h5 and fla's against the fp64 chunked backward.
"""
import argparse
import os
import sys

import numpy as np


def cases_with(f, dataset):
    """The groups of an open file that hold `dataset`."""
    import h5py
    return sorted(name for name in f if isinstance(f[name], h5py.Group) and dataset in f[name])


def cases(f):
    """The groups of an open input file that hold a q/k/v case."""
    return cases_with(f, "q")


def prepare(args):
    import h5py
    with h5py.File(args.input, "r") as f:
        for case in cases(f):
            for name in ("q", "k", "v"):
                x = np.ascontiguousarray(f[case][name][...], dtype=np.float32)  # bf16 read exactly as fp32
                bits = (x.view(np.uint32) >> 16).astype(np.uint16)
                np.save(os.path.join(args.dir, f"{case}.{name}.npy"), bits)
            print(case, f[case]["q"].shape, f[case]["v"].shape)
    if args.grad:
        with h5py.File(args.grad, "r") as g:
            for case in cases_with(g, "do"):
                x = np.ascontiguousarray(g[case]["do"][...], dtype=np.float32)
                np.save(os.path.join(args.dir, f"{case}.do.npy"), (x.view(np.uint32) >> 16).astype(np.uint16))
                np.save(os.path.join(args.dir, f"{case}.dht.npy"), np.asarray(g[case]["dht"][...], dtype=np.float32))
                print(case, "do", g[case]["do"].shape)


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
        do_file = os.path.join(args.dir, f"{case}.do.npy")
        if os.path.exists(do_file):
            from fla.ops.simple_gla.chunk import chunk_simple_gla_bwd
            do = torch.from_numpy(np.load(do_file).astype(np.int16)).view(torch.bfloat16).cuda()
            dht = torch.from_numpy(np.load(os.path.join(args.dir, f"{case}.dht.npy"))).cuda()
            dq, dk, dv = chunk_simple_gla_bwd(q, k, v, None, None, None, do, dht, args.scale, chunk_size=64)[:3]
            for name, x in (("dq", dq), ("dk", dk), ("dv", dv)):
                np.save(os.path.join(args.out, f"fla.{case}.{name}.npy"), x.float().cpu().numpy())
            # fla's errors here too, from the same bf16 values (for when the outputs cannot travel back;
            # `linattn verify` prints linattn's against the same reference).
            as64 = lambda t: t.double().cpu().numpy()
            refs = reference_grads(as64(q), as64(k), as64(v), as64(do), dht.double().cpu().numpy(), args.scale)
            errs = [rel_l2(as64(x), r) for x, r in zip((dq, dk, dv), refs)]
            print(case, "fla dq / dk / dv rel L2", " / ".join(f"{e:.4e}" for e in errs))


def reference_o(q, k, v, scale):
    """o = scale * tril(Q K^T) V per (batch, head), in fp64."""
    B, T, H, _ = q.shape
    o = np.empty((B, T, H, v.shape[-1]))
    for b in range(B):
        for h in range(H):
            a = np.tril(q[b, :, h] @ k[b, :, h].T) * scale
            o[b, :, h] = a @ v[b, :, h]
    return o


def reference_grads(q, k, v, do, dht, scale, C=64):
    """dq, dk, dv in fp64 by the chunked backward (README.md "The backward"), no initial
    state: per (batch, head), S_c the state before chunk c, G_c the state gradient after it."""
    B, T, H, DK = q.shape
    DV = v.shape[-1]
    n = (T + C - 1) // C
    out = [np.empty((B, T, H, DK)), np.empty((B, T, H, DK)), np.empty((B, T, H, DV))]
    mask = np.tril(np.ones((C, C)))
    for b in range(B):
        for h in range(H):
            qc, kc, vc, oc = (np.pad(x[b, :, h], ((0, n * C - T), (0, 0))).reshape(n, C, -1) for x in (q, k, v, do))
            kv = kc.transpose(0, 2, 1) @ vc
            S = np.cumsum(kv, 0) - kv
            qd = scale * (qc.transpose(0, 2, 1) @ oc)
            G = np.cumsum(qd[::-1], 0)[::-1] - qd + dht[b, h]
            P = scale * (oc @ vc.transpose(0, 2, 1)) * mask
            A = scale * (qc @ kc.transpose(0, 2, 1)) * mask
            grads = (scale * (oc @ S.transpose(0, 2, 1)) + P @ kc, P.transpose(0, 2, 1) @ qc + vc @ G.transpose(0, 2, 1),
                     A.transpose(0, 2, 1) @ oc + kc @ G)
            for o, g in zip(out, grads):
                o[b, :, h] = g.reshape(n * C, -1)[:T]
    return out


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
    if args.grad:
        evaluate_backward(args, stem)


def evaluate_backward(args, stem):
    import h5py
    print("case | shape B,T,H,DK,DV | linattn dq / dk / dv rel L2 | fla dq / dk / dv rel L2 | linattn gemm path")
    with h5py.File(args.input, "r") as f, h5py.File(args.grad, "r") as g:
        for case in cases(f):
            q, k, v = (np.asarray(f[case][n][...], dtype=np.float64) for n in ("q", "k", "v"))
            do = np.asarray(g[case]["do"][...], dtype=np.float64)
            dht = np.asarray(g[case]["dht"][...], dtype=np.float64)
            refs = reference_grads(q, k, v, do, dht, args.scale)
            with h5py.File(os.path.join(args.out, f"{stem}.{case}.grad.h5"), "r") as out:
                ours = [rel_l2(out[n][...], r) for n, r in zip(("dq", "dk", "dv"), refs)]
                path = out.attrs["gemm_path"]
                path = path.decode() if isinstance(path, bytes) else path
            theirs = [rel_l2(np.load(os.path.join(args.out, f"fla.{case}.{n}.npy")), r)
                      for n, r in zip(("dq", "dk", "dv"), refs)]
            shape = ",".join(map(str, q.shape + v.shape[-1:]))
            print(f"{case} | {shape} | {' / '.join(f'{e:.4e}' for e in ours)} | "
                  f"{' / '.join(f'{e:.4e}' for e in theirs)} | {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="inputs as bf16 .npy for the GPU machine")
    p.add_argument("input")
    p.add_argument("dir")
    p.add_argument("--grad", help="gradient file of `linattn generate --grad`: do and dht too")
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
    p.add_argument("--grad", help="the gradient file given to prepare: compare dq, dk, dv too")
    p.add_argument("--scale", type=float, default=1.0)
    p.set_defaults(func=evaluate)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
