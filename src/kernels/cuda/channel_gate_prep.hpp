// GLA's per-key-channel decay gk (issue 28) before the fused tensor-core
// kernel: one block per (chunk, head) turns the chunk's gk into what the fused
// kernel reads instead of a gate, so that its products stay level 1's
// (fused_tensor_core_kernel.hpp, kChannel):
//   qg[i]        = q_i * exp(b_i)                  (the inter-chunk term's rows)
//   kg[j]        = k_j * exp(b_L - b_j)            (the state update's keys)
//   decay[d]     = exp(b_L,d)                      (the state's rows, per chunk)
//   scores[i][j] = scale * sum_d q_id k_jd exp(b_id - b_jd), j <= i, else 0
// with b the inclusive cumulative sum of gk over the chunk, channel by channel
// (kernels/chunk_gate.hpp has the same factors for the portable kernels).
// Every exponent is a difference of cumulative sums that is <= 0, so no
// factor overflows at any decay that fp32 holds, unlike a product
// (q exp(b)) (k exp(-b))^T, which overflows once a channel decays by more than
// fp32's range over the chunk (docs/NUMERICS.md). The scores are taken on CUDA
// cores in fp32 by 16-token sub-chunks, as fla's chunk_gla takes them: within
// a sub-chunk one exp per term and channel; a key j of an earlier sub-chunk
// J meets query i through the token e at J's end, between them:
//   q_id exp(b_id - b_ed) * k_jd exp(b_ed - b_jd),
// both factors <= 1, the second made once per key (one exp per query,
// channel and earlier sub-chunk, where one per term would take 2.2x the
// exps).
// qg and kg are rounded to the input type (fla's chunk_gla rounds them the
// same way); scores stay fp32, [token][H][64] like fla's A.
#pragma once

#include "kernels/cuda/mma_primitives.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

namespace linattn::cuda {

struct ChannelGateArgs {
  const void* q;
  const void* k;
  const float* gk;  // [rows, H, DK] fp32, <= 0
  void* qg;         // [rows, H, DK], the input type
  void* kg;         // [rows, H, DK]
  float* scores;    // [rows, H, 64]
  float* decay;     // [chunks, H, DK], chunk indexed as h is
  int B, T, H, DK;
  float scale;
  // Packed batches: chunk x (h's chunk x) starts at token chunk_token0[x] of
  // the packed row and holds chunk_length[x] tokens; null for plain batches,
  // whose chunk x is chunk x % NT of batch row x / NT.
  const int* chunk_token0;
  const int* chunk_length;
};

namespace detail {

// What the fused kernel's channel instantiation reads besides its level-1
// operands: the scores [rows, H, 64] and the state decay [chunks, H, DK].
struct ChannelGateOperands {
  const float* scores;
  const float* decay;
};

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }
template <class E>
__device__ inline E from_float(float x) {
  if constexpr (std::is_same<E, float>::value) return x;
  else if constexpr (std::is_same<E, __half>::value) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}

constexpr int kPrepThreads = 256;
constexpr int kPrepSlice = 32;  // key channels per pass: four fp32 tiles of 64 x 33 in static shared memory
constexpr int kSubChunk = 16;

// grid: (chunks, H). Thread x scans channel x % 32 over tokens 8(x / 32)..+7
// of each slice, then owns score row i = x / 4 and columns j = x % 4 + 4m
// (m < 16) over every slice.
template <class E>
__global__ void __launch_bounds__(kPrepThreads) channel_gate_prep_kernel(ChannelGateArgs a) {
  constexpr int S = kPrepSlice, P = S + 1, kRows = kChunk / (kPrepThreads / S);
  constexpr float kLog2e = 1.4426950408889634f;
  // b (log2 units), q, k, and each key decayed to its sub-chunk's end (kh).
  __shared__ float b_s[kChunk * P], q_s[kChunk * P], k_s[kChunk * P], kh_s[kChunk * P], part_s[kPrepThreads / S][S];
  const int x = blockIdx.x, hh = blockIdx.y, H = a.H, dk = a.DK;
  std::size_t token0;
  int len;
  if (a.chunk_token0) {
    token0 = std::size_t(a.chunk_token0[x]);
    len = a.chunk_length[x];
  } else {
    const int NT = (a.T + kChunk - 1) / kChunk, b = x / NT, c = x % NT;
    token0 = std::size_t(b) * a.T + std::size_t(c) * kChunk;
    len = min(kChunk, a.T - c * kChunk);
  }
  const E* q = static_cast<const E*>(a.q);
  const E* k = static_cast<const E*>(a.k);
  E* qg = static_cast<E*>(a.qg);
  E* kg = static_cast<E*>(a.kg);
  const std::size_t row_stride = std::size_t(H) * dk, head_off = std::size_t(hh) * dk;
  const int d = threadIdx.x % S, part = threadIdx.x / S;
  const int i = threadIdx.x / 4, c4 = threadIdx.x % 4;
  float acc[16];
  #pragma unroll
  for (int m = 0; m < 16; ++m) acc[m] = 0.0f;

  for (int d0 = 0; d0 < dk; d0 += S) {
    const bool channel = d0 + d < dk;
    // b by a scan in two steps: each thread its 8 tokens, then the parts before it.
    float run = 0.0f;
    #pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = part * kRows + r;
      const bool live = channel && t < len;  // past the chunk's tokens: gk 0, q and k 0
      const std::size_t off = (token0 + (live ? t : 0)) * row_stride + head_off + d0 + d;
      run += live ? a.gk[off] * kLog2e : 0.0f;
      b_s[t * P + d] = run;
      q_s[t * P + d] = live ? to_float(q[off]) : 0.0f;
      k_s[t * P + d] = live ? to_float(k[off]) : 0.0f;
    }
    part_s[part][d] = run;
    __syncthreads();
    float before = 0.0f;
    for (int p = 0; p < part; ++p) before += part_s[p][d];
    #pragma unroll
    for (int r = 0; r < kRows; ++r) b_s[(part * kRows + r) * P + d] += before;
    __syncthreads();
    // The fused kernel's operands and the chunk's state decay (b_L: row 63, as gk is 0 past len).
    const float bl = b_s[(kChunk - 1) * P + d];
    #pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = part + r * (kPrepThreads / S);
      if (channel && t < len) {
        const std::size_t off = (token0 + t) * row_stride + head_off + d0 + d;
        const float bt = b_s[t * P + d];
        qg[off] = from_float<E>(q_s[t * P + d] * exp2f(bt));
        kg[off] = from_float<E>(k_s[t * P + d] * exp2f(bl - bt));
      }
      const int end = t | (kSubChunk - 1);  // the last token of t's sub-chunk
      kh_s[t * P + d] = k_s[t * P + d] * exp2f(b_s[end * P + d] - b_s[t * P + d]);
    }
    if (part == 0 && channel) {
      const std::size_t chunk_row = std::size_t(x) * H + hh;
      a.decay[chunk_row * dk + d0 + d] = exp2f(bl);
    }
    __syncthreads();  // kh_s
    // The scores over this slice's channels (every exponent <= 0). Column
    // j = c4 + 4m lies in sub-chunk m / 4; row i in I, the same for the whole warp.
    const int nd = min(S, dk - d0), I = i / kSubChunk;
    for (int e = 0; e < nd; ++e) {
      const float qi = q_s[i * P + e], bi = b_s[i * P + e];
      float f[3];  // q_i decayed to the end of each earlier sub-chunk
      #pragma unroll
      for (int J = 0; J < 3; ++J)
        f[J] = J < I ? qi * exp2f(bi - b_s[(kSubChunk * J + kSubChunk - 1) * P + e]) : 0.0f;
      #pragma unroll
      for (int m = 0; m < 16; ++m) {
        const int j = c4 + 4 * m, J = m / 4;
        if (J < I) acc[m] = __fmaf_rn(f[J], kh_s[j * P + e], acc[m]);
        else if (J == I && j <= i) acc[m] = __fmaf_rn(qi * k_s[j * P + e], exp2f(bi - b_s[j * P + e]), acc[m]);
      }
    }
    __syncthreads();  // the tiles are refilled by the next slice
  }
  if (i < len) {
    float* row = a.scores + ((token0 + i) * H + hh) * kChunk;
    #pragma unroll
    for (int m = 0; m < 16; ++m) {
      const int j = c4 + 4 * m;
      row[j] = j <= i ? a.scale * acc[m] : 0.0f;
    }
  }
}

}  // namespace detail

template <class E>
void launch_channel_gate_prep(const ChannelGateArgs& args, int chunks, cudaStream_t stream) {
  if (chunks == 0) return;
  detail::channel_gate_prep_kernel<E><<<dim3(chunks, args.H), detail::kPrepThreads, 0, stream>>>(args);
}

}  // namespace linattn::cuda
