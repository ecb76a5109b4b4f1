#!/usr/bin/env python3
"""What a CPU user would write instead of linattn: the chunked linear-attention
forward in numpy (fp32, OpenBLAS through batched matmul), producing o and all
per-chunk snapshots h, timed on the given shapes (median of --reps).

    python3 bench/numpy_chunked.py --shape 1,8192,8,64 --shape 1,8192,8,128 [--json out.json]
"""
import argparse
import json
import time

import numpy as np


def chunked_forward(q, k, v, chunk, scale=1.0):
    """q, k: [B, T, H, DK], v: [B, T, H, DV] -> o [B, T, H, DV], h [B, NT, H, DK, DV], final [B, H, DK, DV]."""
    B, T, H, DK = q.shape
    DV = v.shape[-1]
    NT = -(-T // chunk)
    pad = NT * chunk - T
    if pad:
        q, k, v = (np.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
    # [B, H, NT, C, D]
    qc, kc, vc = (x.transpose(0, 2, 1, 3).reshape(B, H, NT, chunk, -1) for x in (q, k, v))
    kv = kc.transpose(0, 1, 2, 4, 3) @ vc                      # K_c^T V_c  [B, H, NT, DK, DV]
    inclusive = np.cumsum(kv, axis=2)
    h = np.empty_like(kv)                                      # state before each chunk (right shift)
    h[:, :, 0] = 0
    h[:, :, 1:] = inclusive[:, :, :-1]
    o = qc @ h                                                 # inter-chunk
    a = qc @ kc.transpose(0, 1, 2, 4, 3)                       # [B, H, NT, C, C]
    a *= np.tril(np.ones((chunk, chunk), dtype=a.dtype))       # causal mask: zero, no softmax
    o += a @ vc                                                # intra-chunk
    o *= scale
    o = o.reshape(B, H, NT * chunk, DV)[:, :, :T].transpose(0, 2, 1, 3)
    return np.ascontiguousarray(o), np.ascontiguousarray(h.transpose(0, 2, 1, 3, 4)), inclusive[:, :, -1]


def check_against_fp64(chunk):
    """The numpy form is the function linattn computes: compare with a token-by-token fp64 recurrence."""
    rng = np.random.default_rng(0)
    B, T, H, DK, DV = 1, 100, 2, 8, 12
    q, k, v = (rng.uniform(-1, 1, (B, T, H, d)) for d in (DK, DK, DV))
    o, h, _ = chunked_forward(q, k, v, 16)
    S = np.zeros((B, H, DK, DV))
    o_ref = np.empty((B, T, H, DV))
    for t in range(T):
        S += np.einsum("bhk,bhv->bhkv", k[:, t], v[:, t])
        o_ref[:, t] = np.einsum("bhk,bhkv->bhv", q[:, t], S)
    err = np.linalg.norm(o - o_ref) / np.linalg.norm(o_ref)
    assert err < 1e-12, err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", required=True, help="B,T,H,D or B,T,H,DK,DV")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    check_against_fp64(args.chunk)
    rows = []
    for s in args.shape:
        dims = [int(x) for x in s.split(",")]
        B, T, H, DK = dims[:4]
        DV = dims[4] if len(dims) > 4 else DK
        rng = np.random.default_rng(1)
        q, k = (rng.uniform(-1, 1, (B, T, H, DK)).astype(np.float32) for _ in range(2))
        v = rng.uniform(-1, 1, (B, T, H, DV)).astype(np.float32)
        chunked_forward(q, k, v, args.chunk)  # warm-up
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            chunked_forward(q, k, v, args.chunk)
            times.append(time.perf_counter() - t0)
        ms = float(np.median(times)) * 1e3
        rows.append({"shape": [B, T, H, DK, DV], "chunk": args.chunk, "dtype": "fp32", "numpy_ms": ms})
        print(f"numpy chunked  B={B} T={T} H={H} DK={DK} DV={DV}  {ms:9.2f} ms (median of {args.reps})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"numpy": np.__version__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
