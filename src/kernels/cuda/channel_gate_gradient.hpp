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
// by 16-token sub-chunks as channel_gate_prep.hpp takes the forward's scores:
// a key j of an earlier sub-chunk J meets query i through J's last token e,
// exp(b_i - b_e) * exp(b_e - b_j); a query i of a later sub-chunk I meets key
// j through the token s = 16 I - 1 before I, exp(b_i - b_s) * exp(b_s - b_j);
// within a sub-chunk one exp per term.
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/channel_gate_prep.hpp"

#include <cstddef>

namespace linattn::cuda::detail {

constexpr int kChannelGradientThreads = 256;
constexpr int kChannelGradientSlice = 32;  // key channels per pass
// Shared memory: b, q, k, keys decayed to their sub-chunk's end, queries
// decayed from the token before theirs, dq_state, dk_state (64 x 33 each),
// dA (64 x 65), two sets of per-part sums.
constexpr int kChannelGradientPad = kChannelGradientSlice + 1;
constexpr std::size_t kChannelGradientBytes =
    (std::size_t(7) * kChunk * kChannelGradientPad + kChunk * (kChunk + 1) +
     2 * (kChannelGradientThreads / kChannelGradientSlice) * kChannelGradientSlice) *
    sizeof(float);

// grid: (chunks, H). Thread x: channel x % 32 of each slice; for the scans the
// 8 tokens 8 (x / 32).. of the chunk, for the outputs tokens x / 32 + 8 r.
template <class E>
__global__ void __launch_bounds__(kChannelGradientThreads) channel_gate_gradient_kernel(TensorCoreBackwardArgs a) {
  constexpr int S = kChannelGradientSlice, P = kChannelGradientPad, kParts = kChannelGradientThreads / S;
  constexpr int kRows = kChunk / kParts, kDA = kChunk + 1;
  extern __shared__ __align__(16) float smem[];
  float* b_s = smem;  // b log2(e)
  float* q_s = b_s + kChunk * P;
  float* k_s = q_s + kChunk * P;
  float* kh_s = k_s + kChunk * P;  // k_j exp(b_e - b_j), e the end of j's sub-chunk; later r_t
  float* qh_s = kh_s + kChunk * P;  // q_i exp(b_i - b_s), s the token before i's sub-chunk; later D's terms
  float* dq_s = qh_s + kChunk * P;
  float* dk_s = dq_s + kChunk * P;
  float* da_s = dk_s + kChunk * P;  // [64][65]
  float* part_s = da_s + kChunk * kDA;  // [kParts][S]
  float* part2_s = part_s + kParts * S;
  const BackwardChunk ch = a.chunks[blockIdx.x];
  const int hh = blockIdx.y, H = a.H, dk = a.DK, len = ch.length;
  const std::size_t token0 = std::size_t(ch.token0), row_stride = std::size_t(H) * dk, head_off = std::size_t(hh) * dk;
  const E* q = static_cast<const E*>(a.q);
  const E* k = static_cast<const E*>(a.k);
  E* dq = static_cast<E*>(a.dq);
  E* dk_out = static_cast<E*>(a.dk);
  const int d = threadIdx.x % S, part = threadIdx.x / S;

  for (int e = threadIdx.x; e < kChunk * kChunk; e += kChannelGradientThreads) {
    const int r = e / kChunk, c = e % kChunk;
    da_s[r * kDA + c] = r < len ? a.scores[((token0 + r) * H + hh) * kChunk + c] : 0.0f;
  }
  for (int d0 = 0; d0 < dk; d0 += S) {
    const bool channel = d0 + d < dk;
    // b by a scan in two steps (each thread its 8 tokens, then the parts before it); the tiles.
    float run = 0.0f;
    #pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = part * kRows + r;
      const bool live = channel && t < len;  // past the chunk's tokens: gk 0, the rest 0
      const std::size_t off = (token0 + (live ? t : 0)) * row_stride + head_off + d0 + d;
      run += live ? a.gk[off] * kLog2e : 0.0f;
      b_s[t * P + d] = run;
      q_s[t * P + d] = live ? to_float(q[off]) : 0.0f;
      k_s[t * P + d] = live ? to_float(k[off]) : 0.0f;
      dq_s[t * P + d] = live ? a.dq_state[off] : 0.0f;
      dk_s[t * P + d] = live ? a.dk_state[off] : 0.0f;
    }
    part_s[part * S + d] = run;
    __syncthreads();
    float before = 0.0f;
    for (int p = 0; p < part; ++p) before += part_s[p * S + d];
    #pragma unroll
    for (int r = 0; r < kRows; ++r) b_s[(part * kRows + r) * P + d] += before;
    __syncthreads();
    #pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = part * kRows + r, end = t | (kSubChunk - 1), start = (t & ~(kSubChunk - 1)) - 1;
      const float bt = b_s[t * P + d];
      kh_s[t * P + d] = k_s[t * P + d] * exp2f(b_s[end * P + d] - bt);
      qh_s[t * P + d] = start >= 0 ? q_s[t * P + d] * exp2f(bt - b_s[start * P + d]) : 0.0f;
    }
    __syncthreads();
    const float bl = b_s[(kChunk - 1) * P + d];  // b_L: gk is 0 past the chunk's tokens
    float dq_t[kRows], dk_t[kRows];
    #pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = part + kParts * r, I = t / kSubChunk;
      const float bt = b_s[t * P + d];
      const float* da_row = da_s + t * kDA;
      float acc = 0.0f;
      for (int J = 0; J < I; ++J) {  // keys of earlier sub-chunks, through their last token
        float sum = 0.0f;
        #pragma unroll
        for (int j = kSubChunk * J; j < kSubChunk * J + kSubChunk; ++j) sum = __fmaf_rn(da_row[j], kh_s[j * P + d], sum);
        acc = __fmaf_rn(sum, exp2f(bt - b_s[(kSubChunk * J + kSubChunk - 1) * P + d]), acc);
      }
      for (int j = kSubChunk * I; j <= t; ++j)
        acc = __fmaf_rn(da_row[j] * k_s[j * P + d], exp2f(bt - b_s[j * P + d]), acc);
      dq_t[r] = __fmaf_rn(dq_s[t * P + d], exp2f(bt), acc);
      acc = 0.0f;
      for (int i = t; i < kSubChunk * I + kSubChunk; ++i)
        acc = __fmaf_rn(da_s[i * kDA + t] * q_s[i * P + d], exp2f(b_s[i * P + d] - bt), acc);
      for (int J = I + 1; J < kChunk / kSubChunk; ++J) {  // queries of later sub-chunks, through the token before them
        float sum = 0.0f;
        #pragma unroll
        for (int i = kSubChunk * J; i < kSubChunk * J + kSubChunk; ++i)
          sum = __fmaf_rn(da_s[i * kDA + t], qh_s[i * P + d], sum);
        acc = __fmaf_rn(sum, exp2f(b_s[(kSubChunk * J - 1) * P + d] - bt), acc);
      }
      dk_t[r] = __fmaf_rn(dk_s[t * P + d], exp2f(bl - bt), acc);
    }
    __syncthreads();  // every thread is done with kh_s and qh_s
    #pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = part + kParts * r;
      kh_s[t * P + d] = q_s[t * P + d] * dq_t[r] - k_s[t * P + d] * dk_t[r];  // r_t
      qh_s[t * P + d] = k_s[t * P + d] * exp2f(bl - b_s[t * P + d]) * dk_s[t * P + d];  // D's term of key t
      if (channel && t < len) {
        const std::size_t off = (token0 + t) * row_stride + head_off + d0 + d;
        dq[off] = from_float<E>(dq_t[r]);
        dk_out[off] = from_float<E>(dk_t[r]);
      }
    }
    __syncthreads();
    // dgk: suffix sums of r within the chunk (each thread its 8 tokens, then the parts after it) plus D.
    float suffix[kRows], tail = 0.0f, terms = 0.0f;
    #pragma unroll
    for (int r = kRows - 1; r >= 0; --r) {
      const int t = part * kRows + r;
      tail += kh_s[t * P + d];
      suffix[r] = tail;
      terms += qh_s[t * P + d];
    }
    part_s[part * S + d] = tail;
    part2_s[part * S + d] = terms;
    __syncthreads();
    float after = 0.0f, state = 0.0f;
    for (int p = part + 1; p < kParts; ++p) after += part_s[p * S + d];
    for (int p = 0; p < kParts; ++p) state += part2_s[p * S + d];
    if (channel) {
      state += exp2f(bl) * a.state_rows[(std::size_t(ch.h_chunk) * H + hh) * dk + d0 + d];
      #pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int t = part * kRows + r;
        if (t < len) a.dg[(token0 + t) * row_stride + head_off + d0 + d] = suffix[r] + after + state;
      }
    }
    __syncthreads();  // the tiles are refilled by the next slice
  }
}

}  // namespace linattn::cuda::detail
