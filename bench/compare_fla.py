#!/usr/bin/env python3
"""linattn beside flash-linear-attention on one GPU, in one run.

Times fla's forward that produces what linattn produces (chunk_fwd_h + chunk_fwd_o,
chunk 64, bf16 inputs (or fp16 with --dtype fp16), h stored in the input dtype by fla and in
bf16 by linattn (16 bits both; with --dtype fp32 fp32 inputs and h in fp32 for both), final state in fp32; and chunk_linear_attn
with normalize=False) with triton.testing.do_bench (median), runs `linattn bench`
on the same shapes, and prints one table: shape, fla ms, each linattn variant ms,
ratio to fla, percent of the copy-bandwidth floor, and the relative L2 of o against
an fp64 reference for each.

With --backward the rows are the backward instead: fla's chunk_simple_gla_bwd(g=None) (what
chunk_linear_attn's backward runs: it recomputes h, then dh, dq/dk and dv) beside
`linattn bench --backward` (bf16 snapshots stored by one forward, then the backward timed), with
the relative L2 of dq, dk and dv of the (0, 0) row against fp64 for both. The floor reads q, k, v,
do and h and writes dq, dk, dv and dh0 once.

With --gate g|gamma the forward rows are gated (README.md, "Gated levels"): fla's chunk_simple_gla
forward on the same kind of gate (g: its chunk_local_cumsum of g, then chunk_fwd_h + chunk_fwd_o
with it; gamma: chunk_fwd_h + chunk_fwd_o with g_gamma), g uniform in [-1, 0) for both (gamma:
RetNet's log(1 - 2^(-5-h)) for both), beside `linattn bench --gate`; the second fla column is then
chunk_simple_gla itself, and o's reference the gated fp64 form. With --gate gk (GLA's per-key-channel
decay) both fla columns are chunk_gla's forward (gk uniform in [-1, 0) for both), o's
reference an fp64 token recurrence with the per-channel decays.

With --backward --gate g|gamma the backward rows are gated: fla's chunk_simple_gla_bwd with the
forward's chunk-local cumulative sums of g in log2 units (what its autograd function saves), then
its reverse chunk-local cumsum of dg (what its backward returns as g's gradient); with gamma
fla computes no gate gradient at all (its autograd returns None for g_gamma) while linattn still
computes dg; beside `linattn bench --backward --gate`, with dg's relative L2 too (fla's against an
fp64 autograd of the gated form on the (0, 0) row). With --backward --gate gk fla's column is
chunk_gla_bwd as its autograd calls it (after one chunk_gla_fwd: the saved chunk-local cumsums of gk
and the scores A, h recomputed inside), dgk's relative L2 (both) against an fp64 autograd of the
chunked per-channel form on the (0, 0) row.

With --seqlens N the rows are packed batches (shape 1,T,H,D; B = 1): the T tokens cut at
N - 1 uniform random points (seeded), the same cuts for both (linattn gets them as
--seqlens L1,L2,...), fla with cu_seqlens. With --normalize both normalize o (fla's
chunk_linear_attn(normalize=True) is then the fla time; q and k drawn in (0, 1) for both,
as feature maps give them).

fla is not a dependency of linattn: it is imported from the folder given with --fla
(the folder that holds the `fla` package).

    python3 bench/compare_fla.py --fla .fla --linattn build-cuda/linattn --json results.json
    python3 bench/compare_fla.py --fla .fla --linattn .gpu/linattn --shape 1,65536,16,128 --seqlens 32
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

SHAPES = ["8,4096,16,128", "8,16384,16,128", "1,32768,32,128", "8,16384,16,64", "32,2048,16,128"]


def fp64_reference_o(q, k, v, scale, cuts=None, normalize=False, g0=None):
    """o for the (b=0, h=0) slice by the parallel form in fp64: ((Q K^T) .* M) V, with M
    causal within each sequence of the slice (cuts: its sequence starts), and with
    normalize divided by scale q_t . cumsum(k)_t + 1e-10. g0: the slice's log-decays [T]
    (gated: M_ij = exp(B_i - B_j), B the cumulative sum of g0 within the sequence)."""
    import torch
    q0, k0, v0 = (x[0, :, 0].double() for x in (q, k, v))
    T = q0.shape[0]
    starts = sorted(set([0] + [c for c in (cuts or []) if 0 < c < T])) + [T]
    o = torch.empty_like(v0)
    for a_, b_ in zip(starts[:-1], starts[1:]):
        qs, ks, vs = q0[a_:b_], k0[a_:b_], v0[a_:b_]
        a = torch.tril(qs @ ks.T) * scale
        if g0 is not None:
            cum = torch.cumsum(g0[a_:b_].double(), 0)
            a = a * torch.tril(torch.exp(cum[:, None] - cum[None, :]))
        o[a_:b_] = a @ vs
        if normalize:
            o[a_:b_] /= (scale * (qs * torch.cumsum(ks, 0)).sum(-1, keepdim=True) + 1e-10)
    return o


def random_cuts(T, n, seed):
    """N - 1 distinct uniform random cut points of T tokens -> cu_seqlens [0, ..., T]."""
    rng = random.Random(seed)
    return [0] + sorted(rng.sample(range(1, T), n - 1)) + [T]


def rel_l2(x, ref):
    import torch
    x = x.double()
    if not torch.isfinite(x).all():
        return float("nan")
    return (torch.linalg.norm(x - ref) / torch.linalg.norm(ref)).item()


def time_fla_gla(shape, reps_ms, slice_tokens, dtype, cu=None):
    """fla's chunk_gla forward (GLA: gk [B, T, H, DK] uniform in [-1, 0), as `linattn bench --gate gk`
    draws it), under no_grad; o of the (0, 0) row against an fp64 token recurrence
    S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T on its first tokens (within the first sequence when packed)."""
    import torch
    import triton
    from fla.ops.gla import chunk_gla

    B, T, H, DK, DV = shape
    gen = torch.Generator(device="cuda").manual_seed(1234)
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    q, k = (torch.rand(B, T, H, DK, device="cuda", generator=gen).mul_(2).sub_(1).to(torch_dtype) for _ in range(2))
    v = torch.rand(B, T, H, DV, device="cuda", generator=gen).mul_(2).sub_(1).to(torch_dtype)
    gk = -torch.rand(B, T, H, DK, device="cuda", generator=gen, dtype=torch.float32)
    cu_seqlens = None if cu is None else torch.tensor(cu, dtype=torch.long, device="cuda")

    def run():
        with torch.no_grad():
            return chunk_gla(q, k, v, g=gk, scale=1.0, output_final_state=True, cu_seqlens=cu_seqlens)

    o, _ = run()
    torch.cuda.synchronize()
    tokens = min(T, slice_tokens, cu[1] if cu else T)
    S = torch.zeros(DK, DV, dtype=torch.float64, device="cuda")
    ref = torch.empty(tokens, DV, dtype=torch.float64, device="cuda")
    q0, k0, v0, g0 = (x[0, :tokens, 0].double() for x in (q, k, v, gk))
    for t in range(tokens):
        S = torch.exp(g0[t])[:, None] * S + torch.outer(k0[t], v0[t])
        ref[t] = S.T @ q0[t]
    err = rel_l2(o[0, :tokens, 0], ref)
    ms = triton.testing.do_bench(run, warmup=25, rep=reps_ms, return_mode="median")
    return {"fla_ms": ms, "fla_o_rel_l2": err, "fla_linear_attn_ms": ms, "fla_linear_attn_o_rel_l2": err,
            "h_dtype": "chunk_gla's own"}


def time_fla(shape, reps_ms, slice_tokens, dtype, cu=None, normalize=False, gate=None):
    import math
    import torch
    import triton
    from fla.ops.common.chunk_h import chunk_fwd_h
    from fla.ops.common.chunk_o import chunk_fwd_o
    from fla.ops.linear_attn import chunk_linear_attn
    from fla.ops.simple_gla.chunk import chunk_simple_gla
    from fla.ops.utils import chunk_local_cumsum
    from fla.ops.utils.constant import RCP_LN2

    B, T, H, DK, DV = shape
    gen = torch.Generator(device="cuda").manual_seed(1234)
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    signed = not normalize  # normalized: q, k in (0, 1)
    q, k = (torch.rand(B, T, H, DK, device="cuda", generator=gen).mul_(2 if signed else 1).sub_(1 if signed else 0)
            .to(torch_dtype) for _ in range(2))
    v = torch.rand(B, T, H, DV, device="cuda", generator=gen).mul_(2).sub_(1).to(torch_dtype)
    scale = 1.0
    cu_seqlens = None if cu is None else torch.tensor(cu, dtype=torch.long, device="cuda")
    g = g_gamma = None
    if gate == "g":
        g = -torch.rand(B, T, H, device="cuda", generator=gen, dtype=torch.float32)
    elif gate == "gamma":
        g_gamma = torch.tensor([math.log1p(-2.0 ** (-5 - h)) for h in range(H)], device="cuda", dtype=torch.float32)

    def h_then_o():
        # fla's chunk_simple_gla forward, step by step: g's chunk-local cumulative sum in log2 units, then h and o.
        gc = chunk_local_cumsum(g, chunk_size=64, scale=RCP_LN2, cu_seqlens=cu_seqlens) if g is not None else None
        gg = g_gamma * RCP_LN2 if g_gamma is not None else None
        h, ht = chunk_fwd_h(k, v, g=gc, g_gamma=gg, output_final_state=True, chunk_size=64, cu_seqlens=cu_seqlens)
        return chunk_fwd_o(q, k, v, h, g=gc, g_gamma=gg, scale=scale, chunk_size=64, cu_seqlens=cu_seqlens), h, ht

    def linear_attn():
        if gate:
            return chunk_simple_gla(q, k, v, g=g, g_gamma=g_gamma, scale=scale, output_final_state=True,
                                    cu_seqlens=cu_seqlens)
        return chunk_linear_attn(q, k, v, scale=scale, output_final_state=True, normalize=normalize,
                                 cu_seqlens=cu_seqlens)

    o, h, _ = h_then_o()
    o2, _ = linear_attn()
    torch.cuda.synchronize()
    tokens = min(T, slice_tokens)
    g0 = None
    if g is not None:
        g0 = g[0, :tokens, 0]
    elif g_gamma is not None:
        g0 = g_gamma[0].expand(tokens)
    ref = fp64_reference_o(q[:, :tokens], k[:, :tokens], v[:, :tokens], scale, cu, g0=g0)
    err = rel_l2(o[0, :tokens, 0], ref)
    ref2 = fp64_reference_o(q[:, :tokens], k[:, :tokens], v[:, :tokens], scale, cu, normalize) if normalize and not gate else ref
    err2 = rel_l2(o2[0, :tokens, 0], ref2)
    ms = triton.testing.do_bench(h_then_o, warmup=25, rep=reps_ms, return_mode="median")
    ms2 = triton.testing.do_bench(linear_attn, warmup=25, rep=reps_ms, return_mode="median")
    return {"fla_ms": ms, "fla_o_rel_l2": err, "fla_linear_attn_ms": ms2, "fla_linear_attn_o_rel_l2": err2,
            "h_dtype": str(h.dtype)}


def gated_reference_grads(q, k, v, do, g, scale):
    """dq, dk, dv, dg of one (sequence, head) row ([T, D] fp64 tensors on the GPU; g [T], raw
    log-decays) by autograd of the gated form o = scale ((exp(B_i - B_j), j <= i) * (Q K^T)) V,
    B the inclusive cumulative sum of g; the exponents are masked before exp (no overflow)."""
    import torch
    q, k, v, g = (x.detach().clone().requires_grad_(True) for x in (q, k, v, g))
    b = torch.cumsum(g, 0)
    T = q.shape[0]
    lower = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    m = torch.exp(torch.where(lower, b[:, None] - b[None, :], torch.full_like(b[:, None] - b[None, :], -float("inf"))))
    o = scale * ((m * (q @ k.T)) @ v)
    (o * do).sum().backward()
    return q.grad, k.grad, v.grad, g.grad


def gla_reference_grads(q, k, v, do, gk, scale, C=64):
    """dq, dk, dv, dgk of one (sequence, head) row ([T, D] fp64 tensors on the GPU; gk [T, DK], raw
    log-decays) by autograd of the chunked per-channel form (README.md "Gated levels", GLA): every
    factor exp of a difference of cumulative sums within the chunk, masked before exp."""
    import torch
    q, k, v, gk = (x.detach().clone().requires_grad_(True) for x in (q, k, v, gk))
    T, DK = q.shape
    S = torch.zeros(DK, v.shape[1], dtype=q.dtype, device=q.device)
    outs = []
    for c0 in range(0, T, C):
        qc, kc, vc, gc = (x[c0:c0 + C] for x in (q, k, v, gk))
        b = torch.cumsum(gc, 0)
        L = b.shape[0]
        lower = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()[:, :, None]
        diff = b[:, None, :] - b[None, :, :]
        w = torch.exp(torch.where(lower, diff, torch.full_like(diff, -float("inf"))))
        A = torch.einsum("id,jd,ijd->ij", qc, kc, w)
        outs.append(scale * ((qc * torch.exp(b)) @ S + A @ vc))
        S = torch.exp(b[-1])[:, None] * S + (kc * torch.exp(b[-1] - b)).T @ vc
    (torch.cat(outs) * do).sum().backward()
    return q.grad, k.grad, v.grad, gk.grad


def time_fla_gla_backward(shape, reps_ms, dtype):
    """fla's chunk_gla backward as its autograd function calls it: one chunk_gla_fwd saves the
    chunk-local cumsums of gk (log2 units) and the scores A; chunk_gla_bwd (h recomputed, dh, dv, dA,
    dq/dk, then dq/dk/dgk) is timed. Inputs and do uniform in [-1, 1], gk in [-1, 0), scale DK^-0.5;
    the relative L2 of dq, dk, dv, dgk on the (0, 0) row against gla_reference_grads."""
    import torch
    import triton
    from fla.ops.gla.chunk import chunk_gla_bwd, chunk_gla_fwd

    B, T, H, DK, DV = shape
    gen = torch.Generator(device="cuda").manual_seed(4321)
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    q, k = (torch.rand(B, T, H, DK, device="cuda", generator=gen).mul_(2).sub_(1).to(torch_dtype) for _ in range(2))
    v, do = (torch.rand(B, T, H, DV, device="cuda", generator=gen).mul_(2).sub_(1).to(torch_dtype) for _ in range(2))
    gk = -torch.rand(B, T, H, DK, device="cuda", generator=gen, dtype=torch.float32)
    scale = DK ** -0.5
    with torch.no_grad():
        g_cumsum, A, _, _, _ = chunk_gla_fwd(q=q, k=k, v=v, g=gk, g_cumsum=None, scale=scale, initial_state=None,
                                             output_final_state=False, cu_seqlens=None, chunk_size=64)

    def backward():
        with torch.no_grad():
            return chunk_gla_bwd(q=q, k=k, v=v, g=None, g_cumsum=g_cumsum, scale=scale, initial_state=None, h=None,
                                 A=A, do=do, dht=None, chunk_size=64)

    dq, dk, dv, dgk, _ = backward()
    torch.cuda.synchronize()
    ref = [r.cpu() for r in gla_reference_grads(*(x[0, :, 0].double() for x in (q, k, v, do, gk)), scale)]
    errs = {f"fla_{n}_rel_l2": rel_l2(x[0, :, 0].cpu(), r) for n, x, r in zip(("dq", "dk", "dv", "dg"), (dq, dk, dv, dgk), ref)}
    # What fla's autograd function returns to the user: dq, dk, dv cast to the inputs' dtype
    # (ChunkGLAFunction.backward: dq.to(q), ...), the outputs that compare with linattn's.
    errs.update({f"fla_{n}_returned_rel_l2": rel_l2(x[0, :, 0].to(torch_dtype).cpu(), r)
                 for n, x, r in zip(("dq", "dk", "dv"), (dq, dk, dv), ref)})
    del ref
    torch.cuda.empty_cache()
    ms = triton.testing.do_bench(backward, warmup=25, rep=reps_ms, return_mode="median")
    return {"fla_backward_ms": ms, **errs}


def time_fla_backward(shape, reps_ms, dtype, gate=None):
    """fla's backward of chunk_linear_attn (chunk_simple_gla_bwd with no gate: it recomputes h,
    then dh, dq/dk, dv), inputs and do uniform in [-1, 1], scale DK^-0.5; with the relative L2
    of dq, dk, dv on the (0, 0) slice against fp64. gate g|gamma: chunk_simple_gla_bwd gated as
    its autograd calls it (g: the forward's chunk-local cumsum in log2 units, then dg's reverse
    chunk-local cumsum), the reference the gated form (dg too, for g)."""
    import math
    import numpy as np
    import torch
    import triton
    from fla.ops.simple_gla.chunk import chunk_simple_gla_bwd
    from fla.ops.utils import chunk_local_cumsum
    from fla.ops.utils.constant import RCP_LN2

    B, T, H, DK, DV = shape
    gen = torch.Generator(device="cuda").manual_seed(4321)
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    q, k = (torch.rand(B, T, H, DK, device="cuda", generator=gen).mul_(2).sub_(1).to(torch_dtype) for _ in range(2))
    v, do = (torch.rand(B, T, H, DV, device="cuda", generator=gen).mul_(2).sub_(1).to(torch_dtype) for _ in range(2))
    scale = DK ** -0.5
    g = gc = g_gamma = None
    if gate == "g":
        # fla refuses its per-token gated chunk_bwd_dqkwg on Hopper with Triton >= 3.4 and < 3.7.1 (its
        # issue #640: "produces incorrect results"); the device has Triton 3.6 and no tilelang. The guard
        # is lifted here to time the same kernels; their errors are reported as measured.
        import fla.ops.common.chunk_o as chunk_o
        if getattr(chunk_o, "IS_NVIDIA_HOPPER", False) and not getattr(chunk_o, "TRITON_ABOVE_3_7_1", True):
            print("note: fla's Hopper guard on gated chunk_bwd_dqkwg lifted (fla says Triton < 3.7.1 gives "
                  "incorrect results there); fla's dq/dk/dv/dg errors below are what it computed", flush=True)
            chunk_o.IS_NVIDIA_HOPPER = False
        g = -torch.rand(B, T, H, device="cuda", generator=gen, dtype=torch.float32)
        gc = chunk_local_cumsum(g, chunk_size=64, scale=RCP_LN2)  # what fla's forward saves for its backward
    elif gate == "gamma":
        g_gamma = torch.tensor([math.log1p(-2.0 ** (-5 - h)) for h in range(H)], device="cuda", dtype=torch.float32)

    def backward():
        if gate is None:
            return chunk_simple_gla_bwd(q, k, v, None, None, None, do, None, scale, chunk_size=64)
        dq, dk, dv, dg, dh0 = chunk_simple_gla_bwd(q, k, v, gc, None if g_gamma is None else g_gamma * RCP_LN2, None,
                                                   do, None, scale, chunk_size=64)
        if gc is not None:
            dg = chunk_local_cumsum(dg, chunk_size=64, reverse=True)
        return dq, dk, dv, dg, dh0

    grads = backward()
    dq, dk, dv = grads[:3]
    torch.cuda.synchronize()
    if gate is None:
        # The (b=0, h=0) slice by same_inputs_accuracy.py's fp64 chunked backward (no dht).
        from same_inputs_accuracy import reference_grads
        row = lambda x: x[:1, :, :1].double().cpu().numpy()
        ref = [torch.from_numpy(r[0, :, 0]) for r in
               reference_grads(row(q), row(k), row(v), row(do), np.zeros((1, 1, DK, DV)), scale)]
        errs = {f"fla_{n}_rel_l2": rel_l2(x[0, :, 0].cpu(), r) for n, x, r in zip(("dq", "dk", "dv"), (dq, dk, dv), ref)}
    elif T > 16384:  # the dense fp64 autograd holds several T x T matrices: not above 16384 tokens (nan)
        errs = {f"fla_{n}_rel_l2": float("nan") for n in ("dq", "dk", "dv", "dg")[:4 if g is not None else 3]}
    else:
        g0 = g[0, :, 0].double() if g is not None else g_gamma[0].double().expand(T)
        ref = [r.cpu() for r in gated_reference_grads(*(x[0, :, 0].double() for x in (q, k, v, do)), g0, scale)]
        outs = [dq, dk, dv] + ([grads[3]] if g is not None else [])
        errs = {f"fla_{n}_rel_l2": rel_l2(x[0, :, 0].cpu(), r) for n, x, r in zip(("dq", "dk", "dv", "dg"), outs, ref)}
        del ref
        torch.cuda.empty_cache()
    ms = triton.testing.do_bench(backward, warmup=25, rep=reps_ms, return_mode="median")
    return {"fla_backward_ms": ms, **errs}


def e2(x):
    """An error in two-digit scientific form, or '-' where it was not measured (null in linattn's JSON)."""
    return "-" if x is None else f"{x:.2e}"


def compare_backward(args, shapes):
    import torch
    import triton
    rows = []
    for s in shapes:
        dims = [int(x) for x in s.split(",")]
        shape = dims[:4] + [dims[4] if len(dims) > 4 else dims[3]]
        fla_row = (time_fla_gla_backward(shape, args.fla_rep_ms, args.dtype) if args.gate == "gk" else
                   time_fla_backward(shape, args.fla_rep_ms, args.dtype, args.gate))
        print("fla:", json.dumps(fla_row), flush=True)  # kept should a later step be cut short
        torch.cuda.empty_cache()
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        cmd = [args.linattn, "bench", "--backward", "--shape", s, "--dtype", args.dtype, "--gemm", args.gemm,
               "--snapshots", "fp32" if args.dtype == "fp32" else "bf16", "--reps", str(args.reps), "--json", out]
        if args.gate:
            cmd += ["--gate", args.gate]
        if args.accuracy_tokens == 0:  # linattn's whole-row fp64 check skipped (minutes at 256 x 512 with gk)
            cmd += ["--accuracy-tokens", "0"]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        with open(out) as f:
            lin = json.load(f)
        os.unlink(out)
        rows.append({"shape": shape, "fla": fla_row, "linattn": lin})
    print()
    gated = f"gated by {args.gate} (fla: chunk_simple_gla_bwd" + (", no gate gradient" if args.gate == "gamma" else
                                                              " + dg's reverse cumsum") + "); " if args.gate else ""
    if args.gate == "gk":
        gated = "gated by gk (fla: chunk_gla_bwd after one chunk_gla_fwd; dg columns: dgk); "
    print(f"{gated}backward, inputs {args.dtype}; GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"triton {triton.__version__}  CUDA {torch.version.cuda}  fla {getattr(sys.modules['fla'], '__version__', '?')}  "
          f"linattn {rows[0]['linattn']['linattn_version']} (Kokkos {rows[0]['linattn']['kokkos_version']})")
    print(f"copy bandwidth (linattn, same run): {rows[0]['linattn']['rows'][0]['copy_gbps']:.0f} GB/s; floor = minimum "
          "bytes (q, k, v, do, h read once; dq, dk, dv, dh0 written once) / copy bandwidth")
    print(" | ".join(["shape B,T,H,DK,DV", "floor ms", "fla ms", "fla %floor", "linattn ms", "linattn/fla",
                      "linattn %floor", "dq/dk/dv L2 linattn", "dq/dk/dv L2 fla"] +
                     (["dg L2 linattn", "dg L2 fla"] if args.gate else [])))
    for r in rows:
        x, f = r["linattn"]["rows"][0], r["fla"]
        print(" | ".join([",".join(map(str, r["shape"])), f"{x['floor_ms']:.3f}", f"{f['fla_backward_ms']:.3f}",
                          f"{100 * x['floor_ms'] / f['fla_backward_ms']:.1f}", f"{x['median_ms']:.3f} ({x['gemm']})",
                          f"{x['median_ms'] / f['fla_backward_ms']:.2f}", f"{100 * x['copy_fraction']:.1f}",
                          f"{e2(x['o_rel_l2'])}/{e2(x['dk_rel_l2'])}/{e2(x['dv_rel_l2'])}",
                          f"{f['fla_dq_rel_l2']:.2e}/{f['fla_dk_rel_l2']:.2e}/{f['fla_dv_rel_l2']:.2e}"] +
                         ([e2(x['dg_rel_l2']), f"{f['fla_dg_rel_l2']:.2e}" if "fla_dg_rel_l2" in f else "-"]
                          if args.gate else [])))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"backward": True, "dtype": args.dtype, "gate": args.gate, "gpu": torch.cuda.get_device_name(), "rows": rows}, fh,
                      indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fla", required=True, help="folder that holds the fla package")
    ap.add_argument("--linattn", required=True, help="path of the linattn binary (CUDA build)")
    ap.add_argument("--shape", action="append", help="B,T,H,D[,DV] (default: the five benchmark shapes)")
    ap.add_argument("--variants", default="fused,materialized,recompute")
    ap.add_argument("--gemm", default="auto", help="linattn --gemm")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"],
                    help="input dtype of both (fp32: h in fp32 for both, as fla keeps it in the input dtype)")
    ap.add_argument("--reps", type=int, default=20, help="linattn timed repetitions (median)")
    ap.add_argument("--fla-rep-ms", type=int, default=200, help="do_bench rep time in ms")
    ap.add_argument("--accuracy-tokens", type=int, default=1024,
                    help="tokens of the forward's checked slice; 0 with --backward: linattn's whole-row fp64 check "
                         "is skipped (its errors print as '-')")
    ap.add_argument("--seqlens", type=int, help="packed rows: N sequences at uniform random cut points (B must be 1)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the cut points")
    ap.add_argument("--normalize", action="store_true", help="normalized rows (fla: chunk_linear_attn(normalize=True))")
    ap.add_argument("--backward", action="store_true", help="the backward (fla: chunk_simple_gla_bwd with no gate)")
    ap.add_argument("--gate", choices=["g", "gamma", "gk"],
                    help="gated rows (fla: chunk_simple_gla's forward, or with --backward chunk_simple_gla_bwd; "
                         "gk: chunk_gla's forward, both fla columns, or with --backward chunk_gla_bwd)")
    ap.add_argument("--json", help="write all numbers here")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.fla))
    import fla  # noqa: F401  (fails loudly when the path is wrong)
    import torch
    import triton

    shapes = args.shape or SHAPES
    if args.backward:
        return compare_backward(args, shapes)
    rows = []
    for s in shapes:
        dims = [int(x) for x in s.split(",")]
        shape = dims[:4] + [dims[4] if len(dims) > 4 else dims[3]]
        cu = None
        if args.seqlens:
            if shape[0] != 1:
                sys.exit("--seqlens packs sequences into one row: B must be 1")
            cu = random_cuts(shape[1], args.seqlens, args.seed)
        fla_row = (time_fla_gla(shape, args.fla_rep_ms, args.accuracy_tokens, args.dtype, cu) if args.gate == "gk" else
                   time_fla(shape, args.fla_rep_ms, args.accuracy_tokens, args.dtype, cu, args.normalize, args.gate))
        torch.cuda.empty_cache()
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        cmd = [args.linattn, "bench", "--shape", s, "--dtype", args.dtype, "--variants", args.variants,
               "--gemm", args.gemm, "--snapshots", "fp32" if args.dtype == "fp32" else "bf16", "--reps", str(args.reps),
               "--accuracy-tokens", str(args.accuracy_tokens), "--json", out]
        if cu:
            cmd += ["--seqlens", ",".join(str(b - a) for a, b in zip(cu[:-1], cu[1:]))]
        if args.normalize:
            cmd += ["--normalize"]
        if args.gate:
            cmd += ["--gate", args.gate]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        with open(out) as f:
            lin = json.load(f)
        os.unlink(out)
        rows.append({"shape": shape, "fla": fla_row, "linattn": lin, "num_sequences": len(cu) - 1 if cu else shape[0],
                     "longest": max(b - a for a, b in zip(cu[:-1], cu[1:])) if cu else shape[1]})

    print()
    mode = (f"packed ({args.seqlens} sequences, uniform random cuts, seed {args.seed}); " if args.seqlens else "") + \
        ("normalized (fla time: chunk_linear_attn(normalize=True)); " if args.normalize else "") + \
        ("gated by gk (fla: chunk_gla's forward in both columns); " if args.gate == "gk" else
         f"gated by {args.gate} (fla: chunk_simple_gla's forward; second column chunk_simple_gla); " if args.gate else "")
    print(f"{mode}inputs {args.dtype}; GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}  "
          f"CUDA {torch.version.cuda}  fla {getattr(sys.modules['fla'], '__version__', '?')}  "
          f"linattn {rows[0]['linattn']['linattn_version']} (Kokkos {rows[0]['linattn']['kokkos_version']})")
    print(f"copy bandwidth (linattn, same run): {rows[0]['linattn']['rows'][0]['copy_gbps']:.0f} GB/s; "
          "floor = minimum bytes (q,k,v read once; o, h written once) / copy bandwidth")
    # The fla time the ratios are taken against: h + o, or chunk_linear_attn when normalized.
    key, l2 = ("fla_linear_attn_ms", "fla_linear_attn_o_rel_l2") if args.normalize else ("fla_ms", "fla_o_rel_l2")
    head = ["shape B,T,H,DK,DV", "floor ms", "fla h+o ms", "fla %floor", "fla linear_attn ms", "fla o L2"]
    if args.seqlens:
        head[0] += " (N, longest)"
    variants = args.variants.split(",")
    for v in variants:
        head += [f"{v} ms", f"{v}/fla", f"{v} %floor", f"{v} o L2"]
    print(" | ".join(head))
    for r in rows:
        lin = {x["variant"]: x for x in r["linattn"]["rows"]}
        floor = next(iter(lin.values()))["floor_ms"]
        f = r["fla"]
        name = ",".join(map(str, r["shape"])) + (f" ({r['num_sequences']}, {r['longest']})" if args.seqlens else "")
        cells = [name, f"{floor:.3f}", f"{f['fla_ms']:.3f}", f"{100 * floor / f[key]:.1f}",
                 f"{f['fla_linear_attn_ms']:.3f}", f"{f[l2]:.2e}"]
        for v in variants:
            x = lin[v]
            cells += [f"{x['median_ms']:.3f} ({x['gemm']})", f"{x['median_ms'] / f[key]:.2f}",
                      f"{100 * x['copy_fraction']:.1f}", f"{x['o_rel_l2']:.2e}"]
        print(" | ".join(cells))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"dtype": args.dtype, "gate": args.gate, "seqlens": args.seqlens, "seed": args.seed, "normalize": args.normalize, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                       "cuda": torch.version.cuda, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
