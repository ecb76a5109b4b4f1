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
// fp32's range over the chunk (docs/NUMERICS.md). The scores are taken by
// 16-token sub-chunks, as fla's chunk_gla takes them: a query i of sub-chunk I
// meets the keys j of the earlier sub-chunks through the token r = 16 I that
// starts I, (q_i exp(b_i - b_r)) . (k_j exp(b_r - b_j)), both factors <= 1,
// so those off-diagonal blocks are matrix products on tensor cores (mma.sync
// over the decayed queries and keys rounded to the input type, as fla rounds
// them; fp32 inputs split hi + lo), accumulated in fp32 over the channels; the
// diagonal blocks take one exp per term and channel on CUDA cores in fp32.
// qg and kg are rounded to the input type (fla's chunk_gla rounds them the
// same way); scores stay fp32, [token][H][64] like fla's A.
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/warp_tiles.hpp"

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
  // Packed batches: chunk x (its decay row x) is chunks[x], the backward's
  // table (backward_args.hpp); null for plain batches, whose chunk x is chunk
  // x % NT of batch row x / NT.
  const BackwardChunk* chunks;
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
constexpr int kPrepSlice = 32;  // key channels per pass
constexpr int kSubChunk = 16;

// One slice of key channels d0..d0+31 of a chunk into fp32 tiles [64][P]:
// b = the chunk's inclusive cumulative sums of gk in log2 units (by a scan in
// two steps: each thread its kRows tokens, then the parts before it), q and k,
// zero past the chunk's tokens and the head's channels. Thread x loads channel
// x % 32 of tokens kRows (x / 32)..; extra(t, off, live) loads what else the
// caller tiles per token (its element off of [rows, H, DK]). part_s: [parts][32]
// scratch. Ends after a barrier, with every tile complete.
template <int kThreads, class E, class Extra>
__device__ inline void load_channel_slice(const float* gk, const E* q, const E* k, std::size_t token0, int len,
                                          std::size_t row_stride, std::size_t head_off, int d0, int dk, float* b_s,
                                          float* q_s, float* k_s, float* part_s, Extra&& extra) {
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr int S = 32, P = S + 1, kParts = kThreads / S, kRows = kChunk / kParts;
  const int d = threadIdx.x % S, part = threadIdx.x / S;
  const bool channel = d0 + d < dk;
  float run = 0.0f;
  #pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int t = part * kRows + r;
    const bool live = channel && t < len;  // past the chunk's tokens: gk 0, the rest 0
    const std::size_t off = (token0 + (live ? t : 0)) * row_stride + head_off + d0 + d;
    run += live ? gk[off] * kLog2e : 0.0f;
    b_s[t * P + d] = run;
    q_s[t * P + d] = live ? to_float(q[off]) : 0.0f;
    k_s[t * P + d] = live ? to_float(k[off]) : 0.0f;
    extra(t, off, live);
  }
  part_s[part * S + d] = run;
  __syncthreads();
  float before = 0.0f;
  for (int p = 0; p < part; ++p) before += part_s[p * S + d];
  #pragma unroll
  for (int r = 0; r < kRows; ++r) b_s[(part * kRows + r) * P + d] += before;
  __syncthreads();
}

// Shared memory of the prep: b, q, k (64 x 33 fp32 each) and the per-part sums,
// then the off-diagonal operands in the input type M: the queries of
// sub-chunks 1..3 decayed from the token that starts theirs (48 rows) and, for
// each query sub-chunk I = 1, 2, 3, the keys before it decayed to its start
// (16 I rows each, 96 in all).
template <class M>
struct PrepLayout {
  static constexpr int stride = kPrepSlice + kPadOf<M>;
  static constexpr std::size_t floats = std::size_t(3) * kChunk * (kPrepSlice + 1) + kPrepThreads;
  static constexpr std::size_t bytes = floats * sizeof(float) + std::size_t(48 + 96) * stride * sizeof(M);
};
// First row of query sub-chunk I's keys in the decayed-key tile.
__device__ inline int prep_key_rows_of(int I) { return I == 1 ? 0 : I == 2 ? 16 : 48; }

// grid: (chunks, H). Thread x scans channel x % 32 over tokens 8(x / 32)..+7
// of each slice; for the diagonal blocks it owns row i = 16 (x / 64) + (x % 64) / 4
// and columns 16 (x / 64) + 4 (x % 4)..+3; warps 0..2 own the off-diagonal
// rows of query sub-chunks 1..3.
template <class E>
__global__ void __launch_bounds__(kPrepThreads) channel_gate_prep_kernel(ChannelGateArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using M = E;
  using L = PrepLayout<M>;
  constexpr int S = kPrepSlice, P = S + 1, kParts = kPrepThreads / S, kRows = kChunk / kParts, OS = L::stride;
  static_assert(S == 32, "load_channel_slice takes slices of 32 channels");
  extern __shared__ __align__(16) unsigned char prep_raw[];
  float* b_s = reinterpret_cast<float*>(prep_raw);  // b log2(e)
  float* q_s = b_s + kChunk * P;
  float* k_s = q_s + kChunk * P;
  float* part_s = k_s + kChunk * P;  // [kParts][S]
  M* qh_m = reinterpret_cast<M*>(prep_raw + L::floats * sizeof(float));  // [48][OS]
  M* kr_m = qh_m + 48 * OS;                                                // [96][OS]
  const int x = blockIdx.x, hh = blockIdx.y, H = a.H, dk = a.DK;
  std::size_t token0;
  int len;
  if (a.chunks) {
    const BackwardChunk ch = a.chunks[x];
    token0 = std::size_t(ch.token0);
    len = ch.length;
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
  const int d = threadIdx.x % S, part = threadIdx.x / S, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int diag = threadIdx.x / 64, di = 16 * diag + (threadIdx.x % 64) / 4, dj = 16 * diag + 4 * (threadIdx.x % 4);
  float acc_d[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // scores (di, dj..dj + 3)
  float acc[6][4];                         // warp w < 3: rows of query sub-chunk w + 1, keys 0..16 (w + 1)
  zero(acc);

  for (int d0 = 0; d0 < dk; d0 += S) {
    const bool channel = d0 + d < dk;
    load_channel_slice<kPrepThreads>(a.gk, q, k, token0, len, row_stride, head_off, d0, dk, b_s, q_s, k_s, part_s,
                                     [](int, std::size_t, bool) {});
    // The fused kernel's operands and the chunk's state decay (b_L: row 63, as gk is 0 past len).
    const float bl = b_s[(kChunk - 1) * P + d];
    #pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = part + r * kParts;
      if (channel && t < len) {
        const std::size_t off = (token0 + t) * row_stride + head_off + d0 + d;
        const float bt = b_s[t * P + d];
        qg[off] = from_float<E>(q_s[t * P + d] * exp2f(bt));
        kg[off] = from_float<E>(k_s[t * P + d] * exp2f(bl - bt));
      }
    }
    if (part == 0 && channel) {
      const std::size_t chunk_row = std::size_t(x) * H + hh;
      a.decay[chunk_row * dk + d0 + d] = exp2f(bl);
    }
    // The off-diagonal operands (row x % 32 of the tiles is channel d).
    for (int row = part; row < 48 + 96; row += kParts) {
      if (row < 48) {
        const int i = 16 + row, r0 = 16 * (i / 16);
        qh_m[row * OS + d] = from_float<M>(q_s[i * P + d] * exp2f(b_s[i * P + d] - b_s[r0 * P + d]));
      } else {
        const int kr = row - 48, I = kr < 16 ? 1 : kr < 48 ? 2 : 3, j = kr - prep_key_rows_of(I), r0 = 16 * I;
        kr_m[kr * OS + d] = from_float<M>(k_s[j * P + d] * exp2f(b_s[r0 * P + d] - b_s[j * P + d]));
      }
    }
    __syncthreads();
    if (warp < 3) {  // query sub-chunk I = warp + 1 against the keys before it, over this slice's channels
      const int I = warp + 1, kr0 = prep_key_rows_of(I);
      mma_rows<M, 6>(acc, 0, S, [&](FragOf<M>* f, int kk) { a_rows(f, qh_m, OS, 16 * warp, kk, lane); },
                     [&](FragOf<M>* f, int n, int kk) { b_rows(f, kr_m + kr0 * OS, OS, n, kk, lane); }, I);
    }
    // The diagonal blocks: one exp per term and channel (every exponent <= 0).
    const int nd = min(S, dk - d0);
    for (int e = 0; e < nd; ++e) {
      const float qi = q_s[di * P + e], bi = b_s[di * P + e];
      #pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int j = dj + c;
        if (j <= di) acc_d[c] = __fmaf_rn(qi * k_s[j * P + e], exp2f(bi - b_s[j * P + e]), acc_d[c]);
      }
    }
    __syncthreads();  // the tiles are refilled by the next slice
  }
  float* scores = a.scores + (token0 * H + hh) * kChunk;  // row i at i * H * 64
  const std::size_t srow = std::size_t(H) * kChunk;
  if (di < len)
    #pragma unroll
    for (int c = 0; c < 4; ++c) scores[di * srow + dj + c] = dj + c <= di ? a.scale * acc_d[c] : 0.0f;
  if (warp < 3) {
    const int I = warp + 1;
    #pragma unroll
    for (int nt = 0; nt < 6; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 16 * I + (lane >> 2) + 8 * (e / 2), j = 8 * nt + 2 * (lane & 3) + e % 2;
        if (nt < 2 * I && i < len) scores[i * srow + j] = a.scale * acc[nt][e];
      }
  }
  // Keys past a query's sub-chunk: zero.
  for (int e = threadIdx.x; e < kChunk * kChunk; e += kPrepThreads) {
    const int i = e / kChunk, j = e % kChunk;
    if (i < len && j / kSubChunk > i / kSubChunk) scores[i * srow + j] = 0.0f;
  }
#endif
}

}  // namespace detail

template <class E>
void launch_channel_gate_prep(const ChannelGateArgs& args, int chunks, cudaStream_t stream) {
  if (chunks == 0) return;
  constexpr std::size_t bytes = detail::PrepLayout<E>::bytes;
  cudaFuncSetAttribute(detail::channel_gate_prep_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  detail::channel_gate_prep_kernel<E><<<dim3(chunks, args.H), detail::kPrepThreads, bytes, stream>>>(args);
}

}  // namespace linattn::cuda
