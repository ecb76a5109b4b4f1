#!/usr/bin/env python3
"""How the rounding of gk's off-diagonal score operands moves dv (a numpy model; docs/NUMERICS.md).

GLA's scores A (scale q_i . k_j exp(b_i - b_j), j <= i in a chunk of 64) are taken by 16-token
sub-chunks: the blocks below the diagonal 16 x 16 blocks as products of the factors
q_i exp(b_i - b_r) and k_j exp(b_r - b_j), r the token that starts the query's sub-chunk, and
the diagonal blocks exactly. This model rounds those factors three ways before their product:

  bf16   to bf16 (8 significant bits), as linattn's prep did for bf16 inputs;
  tf32   to TF32 (11 bits), as fla's chunk_gla does (tl.dot of fp32 operands);
  hilo   split into bf16 hi + lo, three products (linattn's prep for bf16 in the backward);

and measures dv = A^T dO + (k exp(b_L - b)) dh[c] (its inter-chunk term from bf16 operands, as
both libraries take it) against fp64, rounded to bf16 and over dv's own rounding (the floor).
Inputs as the tests draw them: q, k, v, dO uniform in [-1, 1] rounded to bf16, gk uniform in
[-1, 0), one head of DK = DV = 128.

  /usr/bin/python3 bench/gk_score_operands_model.py
"""
import numpy as np

from e2e_compare import bf16_bits

C, SUB, DK, DV = 64, 16, 128, 128


def bf16(x):
    """x rounded to bf16 (e2e_compare.bf16_bits), back in fp64."""
    return (bf16_bits(x).astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def tf32(x):
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0xFFF + ((bits >> 13) & 1)) >> 13) << 13).astype(np.uint32).view(np.float32).astype(np.float64)


def product(a, b, mode):
    if mode == "exact":
        return a @ b.T
    if mode == "bf16":
        return bf16(a) @ bf16(b).T
    if mode == "tf32":
        return tf32(a) @ tf32(b).T
    ah, bh = bf16(a), bf16(b)
    al, bl = bf16(a - ah), bf16(b - bh)
    return ah @ bh.T + ah @ bl.T + al @ bh.T


def scores(q, k, b, scale, mode):
    """A of one chunk: diagonal 16-blocks exact, the blocks below them by `mode`."""
    a = np.zeros((C, C))
    for i in range(C // SUB):
        qi, bi = q[SUB * i:SUB * i + SUB], b[SUB * i:SUB * i + SUB]
        for j in range(i + 1):
            kj, bj = k[SUB * j:SUB * j + SUB], b[SUB * j:SUB * j + SUB]
            if i == j:
                blk = np.einsum("id,jd,ijd->ij", qi, kj, np.exp(bi[:, None, :] - bj[None, :, :]))
            else:
                br = b[SUB * i]
                blk = product(qi * np.exp(bi - br), kj * np.exp(br - bj), mode)
            a[SUB * i:SUB * i + SUB, SUB * j:SUB * j + SUB] = blk
    return scale * np.tril(a)


def dv_of(q, k, do, gk, mode, with_inter):
    scale, exact = DK ** -0.5, mode == "exact"
    dv, dh = np.zeros((len(q), DV)), np.zeros((DK, DV))
    for c in reversed(range(len(q) // C)):
        s = slice(c * C, c * C + C)
        b = np.cumsum(gk[s], axis=0)
        dv[s] = scores(q[s], k[s], b, scale, mode).T @ do[s]
        if with_inter:
            kd = k[s] * np.exp(b[-1] - b)
            dv[s] += kd @ dh if exact else bf16(kd) @ bf16(dh)
            qd = q[s] * np.exp(b) * scale
            dh = np.exp(b[-1])[:, None] * dh + (qd.T if exact else bf16(qd).T) @ do[s]
    return dv


def report(tokens, seed, with_inter):
    rng = np.random.default_rng(seed)
    q, k = (bf16(rng.uniform(-1, 1, (tokens, DK))) for _ in range(2))
    do = bf16(rng.uniform(-1, 1, (tokens, DV)))
    gk = rng.uniform(-1, -1e-6, (tokens, DK)).astype(np.float32).astype(np.float64)
    ref = dv_of(q, k, do, gk, "exact", with_inter)
    floor = np.linalg.norm(bf16(ref) - ref) / np.linalg.norm(ref)
    what = "dv" if with_inter else "dv's intra-chunk term"
    print(f"{what}, {tokens} tokens, seed {seed}: floor (fp64 rounded to bf16) {floor:.4e}")
    for mode in ("bf16", "tf32", "hilo"):
        d = dv_of(q, k, do, gk, mode, with_inter)
        unrounded = np.linalg.norm(d - ref) / np.linalg.norm(ref)
        rounded = np.linalg.norm(bf16(d) - ref) / np.linalg.norm(ref)
        print(f"  {mode:5s} fp32 dv {unrounded:.3e}   bf16 dv {rounded:.4e} = {rounded / floor:.4f}x the floor")


if __name__ == "__main__":
    report(512, 1, True)
    report(512, 2, True)
    report(8192, 5, False)
