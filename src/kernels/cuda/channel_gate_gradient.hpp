// GLA's per-key-channel gate gk (issue 28) in the tensor-core backward: the
// last kernel, after the chunk kernels' channel instantiations
// (chunk_gradient_tiled.hpp, kChannel) left, per chunk, dA = scale tril(dO V^T)
// (args.scores), dq_state = scale dO h[c]^T, dk_state = V dh[c]^T and
// state_rows = sum_v h[c] dh[c] per key row. One block per (chunk, head), on
// CUDA cores in fp32, with b the chunk's inclusive cumulative sums of gk:
//   dq_id  = exp(b_id) dq_state_id + sum_{j <= i} dA_ij k_jd exp(b_id - b_jd)
//   dk_jd  = exp(b_L,d - b_jd) dk_state_jd + sum_{i >= j} dA_ij q_id exp(b_id - b_jd)
//   dgk_td = sum_{s >= t in c} (q_sd dq_sd - k_sd dk_sd) + D_d,
//   D_d    = sum_v S_{c+1}[d, v] dS_{c+1}[d, v]
//          = exp(b_L,d) state_rows_d + sum_j k_jd exp(b_L,d - b_jd) dk_state_jd
// since S_{c+1} = diag(exp(b_L)) h[c] + sum_j (k_j exp(b_L - b_j)) v_j^T
// (kernels/channel_gate_backward.hpp is the portable form, reference/channel_gated.hpp
// the fp64 one). Every exponent is a difference of cumulative sums <= 0, taken
// by 16-token sub-chunks, as fla's chunk_gla takes them: the products of a
// query sub-chunk I with the keys of the earlier ones go through the token
// r = 16 I that starts I, exp(b_i - b_r) * exp(b_r - b_j), the products of a
// key sub-chunk J with the queries of the later ones through its last token
// r = 16 J + 15, exp(b_i - b_r) * exp(b_r - b_j) (all four factors <= 1),
// so that those off-diagonal blocks are matrix products on tensor cores
// (mma.sync over P and the decayed keys or queries in fp32, split hi + lo:
// with P rounded to 16 bits instead, dgk, whose terms cancel, was 3.3e-3 from
// fp64 against fla's 6.4e-4 at 8,4096,16,128 bf16 on the H100, and 4.0e-4 when
// these products were fp32 sums on CUDA cores, at 9edd928); the diagonal
// blocks are fp32 sums on CUDA cores, by 4-token blocks (below).
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/channel_gate_prep.hpp"
#include "kernels/cuda/gate_gradient.hpp"
#include "kernels/cuda/warp_tiles.hpp"

#include <cstddef>

namespace linattn::cuda::detail {

constexpr int kChannelGradientThreads = 256;
constexpr int kChannelGradientSlice = 32;  // key channels per pass
constexpr int kChannelGradientPad = kChannelGradientSlice + 1;
// The off-diagonal operands: keys decayed to the start of each later query
// sub-chunk I = 1, 2, 3 (16 I rows each), queries decayed to the end of each
// earlier key sub-chunk J = 0, 1, 2 (64 - 16 (J + 1) rows each): 96 rows each.
constexpr int kOffDiagonalRows = 96;

// Shared memory: b, q, k, dq_state, dk_state and the two off-diagonal sums
// (64 x 33 fp32 each), two sets of per-part sums, then P (64 x 64) and the
// decayed keys and queries in the products' element type M.
template <class M>
struct ChannelGradientLayout {
  static constexpr int p_stride = kChunk + kPadOf<M>, op_stride = kChannelGradientSlice + kPadOf<M>;
  static constexpr std::size_t floats =
      std::size_t(7) * kChunk * kChannelGradientPad + 2 * (kChannelGradientThreads / kChannelGradientSlice) * kChannelGradientSlice;
  static constexpr std::size_t bytes =
      floats * sizeof(float) + (std::size_t(kChunk) * p_stride + 2 * kOffDiagonalRows * op_stride) * sizeof(M);
};

// First row of sub-chunk I's keys in the decayed-key tile, of J's queries in the decayed-query tile.
__device__ inline int key_rows_of(int I) { return I == 1 ? 0 : I == 2 ? 16 : 48; }
__device__ inline int query_rows_of(int J) { return J == 0 ? 0 : J == 1 ? 48 : 80; }
// The same within a 16-block's 24 rows of the 4-token blocks' operands: the
// keys before 4-block I4 = 1, 2, 3 (4 I4 rows each), the queries after 4-block
// J4 = 0, 1, 2 (12 - 4 J4 rows each).
__device__ inline int key_tile_row(int I4) { return 2 * I4 * (I4 - 1); }
__device__ inline int query_tile_row(int J4) { return 12 * J4 - 2 * J4 * (J4 - 1); }

// grid: (chunks, H). Thread x: channel x % 32 of each slice; for the scans the
// 8 tokens 8 (x / 32).. of the chunk, for the outputs tokens x / 32 + 8 r.
// E: the input type; the products' operands are fp32, split hi + lo.
template <class E>
__global__ void __launch_bounds__(kChannelGradientThreads, 2) channel_gate_gradient_kernel(TensorCoreBackwardArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using M = float;
  using L = ChannelGradientLayout<M>;
  constexpr int S = kChannelGradientSlice, P = kChannelGradientPad, kParts = kChannelGradientThreads / S;
  constexpr int kRows = kChunk / kParts, PS = L::p_stride, OS = L::op_stride;
  static_assert(S == 32, "load_channel_slice takes slices of 32 channels");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* b_s = reinterpret_cast<float*>(smem_raw);  // b log2(e)
  float* q_s = b_s + kChunk * P;
  float* k_s = q_s + kChunk * P;
  float* dq_s = k_s + kChunk * P;
  float* dk_s = dq_s + kChunk * P;
  float* off_q = dk_s + kChunk * P;   // dq's off-diagonal sums (rows 16..63); later r_t
  float* off_k = off_q + kChunk * P;  // dk's off-diagonal sums (rows 0..47); later D's terms
  float* part_s = off_k + kChunk * P;  // [kParts][S]
  float* part2_s = part_s + kParts * S;
  M* p_m = reinterpret_cast<M*>(smem_raw + L::floats * sizeof(float));  // P [query][key]
  M* kr_m = p_m + kChunk * PS;          // decayed keys [key][channel]
  M* qr_m = kr_m + kOffDiagonalRows * OS;  // decayed queries [query][channel]
  const BackwardChunk ch = a.chunks[blockIdx.x];
  const int hh = blockIdx.y, H = a.H, dk = a.DK, len = ch.length;
  const std::size_t token0 = std::size_t(ch.token0), row_stride = std::size_t(H) * dk, head_off = std::size_t(hh) * dk;
  const E* q = static_cast<const E*>(a.q);
  const E* k = static_cast<const E*>(a.k);
  E* dq = static_cast<E*>(a.dq);
  E* dk_out = static_cast<E*>(a.dk);
  const int d = threadIdx.x % S, part = threadIdx.x / S, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  for (int e = threadIdx.x; e < kChunk * kChunk; e += kChannelGradientThreads) {
    const int r = e / kChunk, c = e % kChunk;
    p_m[r * PS + c] = from_float<M>(r < len ? a.scores[((token0 + r) * H + hh) * kChunk + c] : 0.0f);
  }
  for (int d0 = 0; d0 < dk; d0 += S) {
    const bool channel = d0 + d < dk;
    // b, q and k (the prep's loader), and the chunk kernels' dq_state and dk_state.
    load_channel_slice<kChannelGradientThreads>(a.gk, q, k, token0, len, row_stride, head_off, d0, dk, b_s, q_s, k_s,
                                                part_s, [&](int t, std::size_t off, bool live) {
                                                  dq_s[t * P + d] = live ? a.dq_state[off] : 0.0f;
                                                  dk_s[t * P + d] = live ? a.dk_state[off] : 0.0f;
                                                });
    // The off-diagonal operands (row x % 32 of the tiles is channel d: 256 is a multiple of 32).
    for (int row = part; row < kOffDiagonalRows; row += kParts) {
      const int I = row < 16 ? 1 : row < 48 ? 2 : 3, j = row - key_rows_of(I), r0 = 16 * I;
      kr_m[row * OS + d] = from_float<M>(k_s[j * P + d] * exp2_nonpositive(b_s[r0 * P + d] - b_s[j * P + d]));
      const int J = row < 48 ? 0 : row < 80 ? 1 : 2, i = 16 * (J + 1) + row - query_rows_of(J), r1 = 16 * J + 15;
      qr_m[row * OS + d] = from_float<M>(q_s[i * P + d] * exp2_nonpositive(b_s[i * P + d] - b_s[r1 * P + d]));
    }
    __syncthreads();
    if (warp < 3) {  // dq of query sub-chunk I: P[I, < 16 I] times the keys decayed to 16 I
      const int I = warp + 1, kr0 = key_rows_of(I);
      float acc[4][4];
      zero(acc);
      mma_rows<M, 4>(acc, 0, 16 * I, [&](FragOf<M>* f, int kk) { a_rows(f, p_m, PS, 16 * I, kk, lane); },
                     [&](FragOf<M>* f, int n, int kk) { b_cols(f, kr_m + kr0 * OS, OS, n, kk, lane); });
      #pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e)
          off_q[(16 * I + (lane >> 2) + 8 * (e / 2)) * P + 8 * nt + 2 * (lane & 3) + e % 2] = acc[nt][e];
    } else if (warp < 6) {  // dk of key sub-chunk J: P[> J, J]^T times the queries decayed to 16 J + 15
      const int J = warp - 3, qr0 = query_rows_of(J), i0 = 16 * (J + 1);
      float acc[4][4];
      zero(acc);
      mma_rows<M, 4>(acc, i0, kChunk, [&](FragOf<M>* f, int kk) { a_cols(f, p_m, PS, 16 * J, kk, lane); },
                     [&](FragOf<M>* f, int n, int kk) { b_cols(f, qr_m + qr0 * OS, OS, n, kk - i0, lane); });
      #pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e)
          off_k[(16 * J + (lane >> 2) + 8 * (e / 2)) * P + 8 * nt + 2 * (lane & 3) + e % 2] = acc[nt][e];
    }
    __syncthreads();
    // The diagonal 16-blocks by 4-token blocks, as the prep's diagonal_tile
    // takes them: a token's terms with the earlier (dq) or later (dk) 4-blocks
    // of its 16-block go through the token that starts (ends) its own 4-block,
    // both factors <= 1, so each needs one exp per channel. Their decayed
    // operands go into the off-diagonal tiles, free after the products: for
    // 16-block I, rows 24 I.. of kf_s hold, for I4 = 1, 2, 3, the keys
    // 16 I..16 I + 4 I4 - 1 decayed to 16 I + 4 I4; rows 24 I.. of qf_s, for
    // J4 = 0, 1, 2, the queries 16 I + 4 J4 + 4..16 I + 15 decayed to 16 I + 4 J4 + 3.
    float* kf_s = kr_m;
    float* qf_s = qr_m;
    for (int row = part; row < kOffDiagonalRows; row += kParts) {
      const int I = row / 24, x = row % 24;
      const int I4 = x < 4 ? 1 : x < 12 ? 2 : 3, j = 16 * I + x - key_tile_row(I4), r4 = 16 * I + 4 * I4;
      kf_s[row * OS + d] = k_s[j * P + d] * exp2_nonpositive(b_s[r4 * P + d] - b_s[j * P + d]);
      const int J4 = x < 12 ? 0 : x < 20 ? 1 : 2, e4 = 16 * I + 4 * J4 + 3, i = e4 + 1 + x - query_tile_row(J4);
      qf_s[row * OS + d] = q_s[i * P + d] * exp2_nonpositive(b_s[i * P + d] - b_s[e4 * P + d]);
    }
    __syncthreads();
    const float bl = b_s[(kChunk - 1) * P + d];  // b_L: gk is 0 past the chunk's tokens
    // Each (token, channel) is one thread's from here to the outputs: off_q and
    // off_k are read and then overwritten by the same thread.
    #pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = part + kParts * r, I = t / kSubChunk, I4 = (t % kSubChunk) / 4, r4 = 16 * I + 4 * I4, e4 = r4 + 3;
      const float bt = b_s[t * P + d];
      const M* p_row = p_m + t * PS;
      float acc = I > 0 ? off_q[t * P + d] * exp2_nonpositive(bt - b_s[16 * I * P + d]) : 0.0f;
      const float* kf = kf_s + (24 * I + key_tile_row(I4)) * OS + d;  // key 16 I + jj: kf[jj OS]
      float before = 0.0f;
      for (int jj = 0; jj < 4 * I4; ++jj) before = __fmaf_rn(to_float(p_row[16 * I + jj]), kf[jj * OS], before);
      acc = __fmaf_rn(before, exp2_nonpositive(bt - b_s[r4 * P + d]), acc);
      for (int j = r4; j <= t; ++j)
        acc = __fmaf_rn(to_float(p_row[j]) * k_s[j * P + d], exp2_nonpositive(bt - b_s[j * P + d]), acc);
      const float dq_v = __fmaf_rn(dq_s[t * P + d], exp2_nonpositive(bt), acc);
      acc = I < 3 ? off_k[t * P + d] * exp2_nonpositive(b_s[(16 * I + 15) * P + d] - bt) : 0.0f;
      const float* qf = qf_s + (24 * I + query_tile_row(I4)) * OS + d;  // query e4 + 1 + ii: qf[ii OS]
      float after = 0.0f;
      for (int ii = 0; ii < 12 - 4 * I4; ++ii) after = __fmaf_rn(to_float(p_m[(e4 + 1 + ii) * PS + t]), qf[ii * OS], after);
      acc = __fmaf_rn(after, exp2_nonpositive(b_s[e4 * P + d] - bt), acc);
      for (int i = t; i <= e4; ++i)
        acc = __fmaf_rn(to_float(p_m[i * PS + t]) * q_s[i * P + d], exp2_nonpositive(b_s[i * P + d] - bt), acc);
      const float to_end = exp2_nonpositive(bl - bt), dk_v = __fmaf_rn(dk_s[t * P + d], to_end, acc);
      off_q[t * P + d] = q_s[t * P + d] * dq_v - k_s[t * P + d] * dk_v;  // r_t
      off_k[t * P + d] = k_s[t * P + d] * to_end * dk_s[t * P + d];      // D's term of key t
      if (channel && t < len) {
        const std::size_t off = (token0 + t) * row_stride + head_off + d0 + d;
        dq[off] = from_float<E>(dq_v);
        dk_out[off] = from_float<E>(dk_v);
      }
    }
    __syncthreads();
    // dgk: suffix sums of r within the chunk (each thread its 8 tokens, then the parts after it) plus D.
    float suffix[kRows], tail = 0.0f, terms = 0.0f;
    #pragma unroll
    for (int r = kRows - 1; r >= 0; --r) {
      const int t = part * kRows + r;
      tail += off_q[t * P + d];
      suffix[r] = tail;
      terms += off_k[t * P + d];
    }
    part_s[part * S + d] = tail;
    part2_s[part * S + d] = terms;
    __syncthreads();
    float after = 0.0f, state = 0.0f;
    for (int p = part + 1; p < kParts; ++p) after += part_s[p * S + d];
    for (int p = 0; p < kParts; ++p) state += part2_s[p * S + d];
    if (channel) {
      state += exp2_nonpositive(bl) * a.state_rows[(std::size_t(ch.h_chunk) * H + hh) * dk + d0 + d];
      #pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int t = part * kRows + r;
        if (t < len) a.dg[(token0 + t) * row_stride + head_off + d0 + d] = suffix[r] + after + state;
      }
    }
    __syncthreads();  // the tiles are refilled by the next slice
  }
#endif
}

}  // namespace linattn::cuda::detail
