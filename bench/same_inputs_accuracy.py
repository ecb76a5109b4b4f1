#!/usr/bin/env python3
"""o's accuracy of linattn and of flash-linear-attention on the very same inputs.

compare_fla.py draws separate inputs for each side (same distribution); this script
feeds both the same q, k, v and measures o against one fp64 reference (the parallel
form, whole tensors). Three steps, so that each can run where its packages are (prepare
and evaluate need h5py, fla torch and fla; the GPU machine's image has all three, so the
three can also run there one after another, with linattn generating the file there):

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

fp16 inputs travel as float16 .npy instead of bf16 bits. A case with GLA's per-channel gate
(`linattn generate --gate gk`) travels its gk too: fla then runs chunk_gla (forward) and
chunk_gla_fwd + chunk_gla_bwd (backward, dht given), and evaluate takes o, dq, dk, dv and dgk
against an fp64 token recurrence. fla's dq, dk, dv are compared twice: as chunk_gla_bwd
computes them (fp32) and cast to the input dtype, as its autograd function returns them
(linattn writes them in the input dtype).

The scale is linattn's default and fla's, DK^-0.5, unless --scale is given to `fla`; evaluate
takes the scale each linattn output records and refuses fla outputs made with another.
"""
import argparse
import os
import sys

import numpy as np

from e2e_compare import is_bf16


def cases_with(f, dataset):
    """The groups of an open file that hold `dataset`."""
    import h5py
    return sorted(name for name in f if isinstance(f[name], h5py.Group) and dataset in f[name])


def cases(f):
    """The groups of an open input file that hold a q/k/v case."""
    return cases_with(f, "q")


def dtype_name(dataset):
    """linattn's name of a dataset's type (h5py reads bf16 as float32)."""
    if is_bf16(dataset):
        return "bf16"
    return {np.float16: "fp16", np.float32: "fp32", np.float64: "fp64"}.get(dataset.dtype.type, str(dataset.dtype))


def sixteen_bits(dataset):
    """A 16-bit dataset as it travels: float16 as is, bf16 as its bit patterns (uint16)."""
    if dataset.dtype == np.float16:
        return np.ascontiguousarray(dataset[...])
    x = np.ascontiguousarray(dataset[...], dtype=np.float32)  # bf16 read exactly as fp32
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def prepare(args):
    import h5py
    with h5py.File(args.input, "r") as f:
        for case in cases(f):
            for name in ("q", "k", "v"):
                np.save(os.path.join(args.dir, f"{case}.{name}.npy"), sixteen_bits(f[case][name]))
            if "gk" in f[case]:
                np.save(os.path.join(args.dir, f"{case}.gk.npy"), np.asarray(f[case]["gk"][...], dtype=np.float32))
            print(case, f[case]["q"].shape, f[case]["v"].shape, dtype_name(f[case]["q"]), "gk" if "gk" in f[case] else "")
    if args.grad:
        with h5py.File(args.grad, "r") as g:
            for case in cases_with(g, "do"):
                np.save(os.path.join(args.dir, f"{case}.do.npy"), sixteen_bits(g[case]["do"]))
                np.save(os.path.join(args.dir, f"{case}.dht.npy"), np.asarray(g[case]["dht"][...], dtype=np.float32))
                print(case, "do", g[case]["do"].shape)


def run_fla(args):
    sys.path.insert(0, os.path.abspath(args.fla))
    import torch

    def load16(path):
        x = np.load(path)
        if x.dtype == np.float16:
            return torch.from_numpy(x).cuda()
        return torch.from_numpy(x.astype(np.int16)).view(torch.bfloat16).cuda()

    names = sorted({f.split(".")[0] for f in os.listdir(args.dir) if f.endswith(".q.npy")})
    for case in names:
        q, k, v = (load16(os.path.join(args.dir, f"{case}.{n}.npy")) for n in ("q", "k", "v"))
        scale = args.scale if args.scale is not None else q.shape[-1] ** -0.5
        gk_file = os.path.join(args.dir, f"{case}.gk.npy")
        if os.path.exists(gk_file):
            run_fla_gla(case, q, k, v, torch.from_numpy(np.load(gk_file)).cuda(), scale, args, load16)
        else:
            run_fla_level1(case, q, k, v, scale, args, load16)
        # Written last: evaluate takes a case whose scale file exists as one fla finished.
        with open(os.path.join(args.out, f"fla.{case}.scale.txt"), "w") as f:
            f.write(repr(float(scale)))


def run_fla_level1(case, q, k, v, scale, args, load16):
    """Level 1 through fla: chunk_fwd_h + chunk_fwd_o; with a gradient, chunk_simple_gla_bwd (no gate, dht)."""
    import torch
    from fla.ops.common.chunk_h import chunk_fwd_h
    from fla.ops.common.chunk_o import chunk_fwd_o

    h, _ = chunk_fwd_h(k, v, output_final_state=True, chunk_size=64)
    o = chunk_fwd_o(q, k, v, h, scale=scale, chunk_size=64)
    np.save(os.path.join(args.out, f"fla.{case}.o.npy"), o.float().cpu().numpy())
    print(case, "fla o", tuple(o.shape))
    do_file = os.path.join(args.dir, f"{case}.do.npy")
    if os.path.exists(do_file):
        from fla.ops.simple_gla.chunk import chunk_simple_gla_bwd
        do = load16(do_file)
        dht = torch.from_numpy(np.load(os.path.join(args.dir, f"{case}.dht.npy"))).cuda()
        dq, dk, dv = chunk_simple_gla_bwd(q, k, v, None, None, None, do, dht, scale, chunk_size=64)[:3]
        for name, x in (("dq", dq), ("dk", dk), ("dv", dv)):
            np.save(os.path.join(args.out, f"fla.{case}.{name}.npy"), x.float().cpu().numpy())
        # fla's errors here too, from the same bf16 values (for when the outputs cannot travel back;
        # `linattn verify` prints linattn's against the same reference).
        as64 = lambda t: t.double().cpu().numpy()
        refs = reference_grads(as64(q), as64(k), as64(v), as64(do), dht.double().cpu().numpy(), scale)
        errs = [rel_l2(as64(x), r) for x, r in zip((dq, dk, dv), refs)]
        print(case, "fla dq / dk / dv rel L2", " / ".join(f"{e:.4e}" for e in errs))


def run_fla_gla(case, q, k, v, gk, scale, args, load16):
    """GLA's gk through fla: chunk_gla's o (chunk 64, as compare_fla.py times it); with a
    gradient, chunk_gla_fwd then chunk_gla_bwd with dht, as its autograd function calls them."""
    import torch
    from fla.ops.gla import chunk_gla
    from fla.ops.gla.chunk import chunk_gla_bwd, chunk_gla_fwd

    save = lambda name, x: np.save(os.path.join(args.out, f"fla.{case}.{name}.npy"), x.float().cpu().numpy())
    with torch.no_grad():
        o, _ = chunk_gla(q, k, v, g=gk, scale=scale, output_final_state=True)
    save("o", o)
    print(case, "fla chunk_gla o", tuple(o.shape), q.dtype)
    do_file = os.path.join(args.dir, f"{case}.do.npy")
    if not os.path.exists(do_file):
        return
    do = load16(do_file)
    dht = torch.from_numpy(np.load(os.path.join(args.dir, f"{case}.dht.npy"))).cuda()
    with torch.no_grad():
        g_cumsum, A, _, _, _ = chunk_gla_fwd(q=q, k=k, v=v, g=gk, g_cumsum=None, scale=scale, initial_state=None,
                                             output_final_state=False, cu_seqlens=None, chunk_size=64)
        dq, dk, dv, dgk, _ = chunk_gla_bwd(q=q, k=k, v=v, g=None, g_cumsum=g_cumsum, scale=scale, initial_state=None,
                                           h=None, A=A, do=do, dht=dht, chunk_size=64)
    for name, x in (("dq", dq), ("dk", dk), ("dv", dv)):
        save(name, x)
        save(name + "_returned", x.to(q.dtype))  # what ChunkGLAFunction.backward returns
    save("dgk", dgk)


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


def gla_reference(q, k, v, gk, scale, do=None, dht=None, C=64):
    """GLA by its token recurrence in fp64, per (batch, head): S_t = diag(exp(gk_t)) S_{t-1} +
    k_t v_t^T, o_t = scale S_t^T q_t (README.md, "Gated levels"). With do and dht also dq, dk, dv
    and dgk by the reverse recurrence: G, the gradient of S_t, starts at dht and gains
    scale q_t do_t^T at each token; dq_t = scale S_t do_t, dk_t = G v_t, dv_t = G^T k_t,
    dgk_t = exp(gk_t) * rowsum(G * S_{t-1}), then G = diag(exp(gk_t)) G. The states of each
    span of C tokens are recomputed from the one before it (a whole row's would not fit)."""
    B, T, H, DK = q.shape
    DV = v.shape[-1]
    o = np.empty((B, T, H, DV))
    grads = None if do is None else [np.empty((B, T, H, DK)), np.empty((B, T, H, DK)), np.empty((B, T, H, DV)),
                                     np.empty((B, T, H, DK))]
    for b in range(B):
        for h in range(H):
            qs, ks, vs, a = q[b, :, h], k[b, :, h], v[b, :, h], np.exp(gk[b, :, h])
            S = np.zeros((DK, DV))
            starts = []  # the state before each span
            for t in range(T):
                if t % C == 0:
                    starts.append(S.copy())
                S = a[t][:, None] * S + np.outer(ks[t], vs[t])
                o[b, t, h] = scale * (S.T @ qs[t])
            if do is None:
                continue
            dq, dk, dv, dg = (g[b, :, h] for g in grads)
            G = np.array(dht[b, h], dtype=np.float64)
            for s0 in reversed(range(0, T, C)):
                span = range(s0, min(s0 + C, T))
                states = [starts[s0 // C]]
                for t in span:
                    states.append(a[t][:, None] * states[-1] + np.outer(ks[t], vs[t]))
                for i, t in reversed(list(enumerate(span))):
                    G = G + scale * np.outer(qs[t], do[b, t, h])
                    dq[t] = scale * (states[i + 1] @ do[b, t, h])
                    dk[t] = G @ vs[t]
                    dv[t] = G.T @ ks[t]
                    dg[t] = a[t] * np.sum(G * states[i], axis=1)
                    G = a[t][:, None] * G
    return o, grads


def rel_l2(x, ref):
    x = np.asarray(x, dtype=np.float64)
    return np.linalg.norm(x - ref) / np.linalg.norm(ref) if np.isfinite(x).all() else float("nan")


def attr(out, name):
    x = out.attrs[name]
    return x.decode() if isinstance(x, bytes) else x


def case_scale(args, stem, case):
    """The scale linattn's output of this case used; fla's must be the same."""
    import h5py
    with h5py.File(os.path.join(args.out, f"{stem}.{case}.h5"), "r") as out:
        scale = float(attr(out, "scale"))
    with open(os.path.join(args.out, f"fla.{case}.scale.txt")) as f:
        theirs = float(f.read())
    if not np.isclose(scale, theirs, rtol=1e-6):
        sys.exit(f"{case}: linattn ran with scale {scale}, fla with {theirs}")
    return scale


def evaluate(args):
    import h5py
    stem = os.path.splitext(os.path.basename(args.input))[0]
    with h5py.File(args.input, "r") as f:
        gated = ["gk" in f[case] for case in cases(f)]
    if any(gated):
        if not all(gated):
            sys.exit(f"{args.input}: evaluate takes files whose cases all have gk, or none")
        return evaluate_gla(args, stem)
    print("case | shape B,T,H,DK,DV | linattn o rel L2 | fla o rel L2 | linattn gemm path")
    with h5py.File(args.input, "r") as f:
        for case in cases(f):
            q, k, v = (np.asarray(f[case][n][...], dtype=np.float64) for n in ("q", "k", "v"))
            ref = reference_o(q, k, v, case_scale(args, stem, case))
            with h5py.File(os.path.join(args.out, f"{stem}.{case}.h5"), "r") as out:
                ours = rel_l2(out["o"][...], ref)
                path = attr(out, "gemm_path")
            theirs = rel_l2(np.load(os.path.join(args.out, f"fla.{case}.o.npy")), ref)
            shape = ",".join(map(str, q.shape + v.shape[-1:]))
            print(f"{case} | {shape} | {ours:.3e} | {theirs:.3e} | {path}")
    if args.grad:
        evaluate_backward(args, stem)


def evaluate_gla(args, stem):
    """Cases with gk: o and, with --grad, dq, dk, dv, dgk of both against gla_reference."""
    import h5py
    fmt = lambda errs: " / ".join(f"{e:.4e}" for e in errs)
    rows = []
    with h5py.File(args.input, "r") as f:
        g = h5py.File(args.grad, "r") if args.grad else None
        for case in cases(f):
            if not os.path.exists(os.path.join(args.out, f"fla.{case}.scale.txt")):
                print(f"{case}: no fla outputs (fla not run on it), skipped")
                continue
            q, k, v, gk = (np.asarray(f[case][n][...], dtype=np.float64) for n in ("q", "k", "v", "gk"))
            dtype = dtype_name(f[case]["q"])
            scale = case_scale(args, stem, case)
            do = dht = None
            if g is not None:
                do = np.asarray(g[case]["do"][...], dtype=np.float64)
                dht = np.asarray(g[case]["dht"][...], dtype=np.float64)
            o_ref, grads = gla_reference(q, k, v, gk, scale, do, dht)
            fla = lambda name: np.load(os.path.join(args.out, f"fla.{case}.{name}.npy"))
            with h5py.File(os.path.join(args.out, f"{stem}.{case}.h5"), "r") as out:
                row = [case, ",".join(map(str, q.shape + v.shape[-1:])), dtype, attr(out, "gemm_path"),
                       f"{rel_l2(out['o'][...], o_ref):.4e}", f"{rel_l2(fla('o'), o_ref):.4e}"]
            if grads is not None:
                names = ("dq", "dk", "dv", "dgk")
                with h5py.File(os.path.join(args.out, f"{stem}.{case}.grad.h5"), "r") as out:
                    row.append(fmt(rel_l2(out[n][...], r) for n, r in zip(names, grads)))
                    row.append(attr(out, "gemm_path"))
                row.append(fmt(rel_l2(fla(n), r) for n, r in zip(names, grads)))
                row.append(fmt(rel_l2(fla(n + "_returned"), r) for n, r in zip(names[:3], grads)))
            rows.append(row)
        if g is not None:
            g.close()
    head = ["case", "shape B,T,H,DK,DV", "dtype", "linattn forward path", "linattn o rel L2", "fla o rel L2"]
    if args.grad:
        head += ["linattn dq / dk / dv / dgk", "linattn backward path", "fla dq / dk / dv / dgk (fp32)",
                 "fla dq / dk / dv as returned (input dtype)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def evaluate_backward(args, stem):
    import h5py
    print("case | shape B,T,H,DK,DV | linattn dq / dk / dv rel L2 | fla dq / dk / dv rel L2 | linattn gemm path")
    with h5py.File(args.input, "r") as f, h5py.File(args.grad, "r") as g:
        for case in cases(f):
            q, k, v = (np.asarray(f[case][n][...], dtype=np.float64) for n in ("q", "k", "v"))
            do = np.asarray(g[case]["do"][...], dtype=np.float64)
            dht = np.asarray(g[case]["dht"][...], dtype=np.float64)
            refs = reference_grads(q, k, v, do, dht, case_scale(args, stem, case))
            with h5py.File(os.path.join(args.out, f"{stem}.{case}.grad.h5"), "r") as out:
                ours = [rel_l2(out[n][...], r) for n, r in zip(("dq", "dk", "dv"), refs)]
                path = attr(out, "gemm_path")
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
    p.add_argument("--scale", type=float, help="default DK^-0.5, fla's and linattn's")
    p.set_defaults(func=run_fla)
    p = sub.add_parser("evaluate", help="both o against the fp64 reference")
    p.add_argument("input")
    p.add_argument("out")
    p.add_argument("--grad", help="the gradient file given to prepare: compare dq, dk, dv (and dgk) too")
    p.set_defaults(func=evaluate)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
