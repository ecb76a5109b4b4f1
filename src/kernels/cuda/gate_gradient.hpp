// The gated levels in the tensor-core backward (tensor_core_backward.hpp;
// README.md "Gated levels"; the portable form is kernels/fused_backward.hpp):
//  - chunk_log_decay_kernel, before the others: b_t log2(e), b_t the
//    inclusive cumulative sum of g over its chunk up to token t (g_gamma: the
//    head's constant), so that every decay of the other kernels is exp2 of a
//    difference of these sums (<= 0: no overflow, kernels/chunk_gate.hpp),
//    and exp(b_t), the state gradient's weight of token t;
//  - the chunk kernels' decay factors (ChunkDecays) and their shares of
//    r_t = q_t . dq_t - k_t . dk_t per column block (add_row_dots, store_row_dots),
//    and of <S_{c+1}, dS_{c+1}> per chunk (acc_dot, block_sum, store_state_part);
//  - gate_gradient_kernel, after them: dg within each chunk (below).
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/log2_units.hpp"
#include "kernels/cuda/mma_primitives.hpp"

#include <cstddef>
#include <cstdint>

namespace linattn::cuda::detail {

constexpr int kLogDecayThreads = 128;  // 4 warps: one (chunk, head) each

// grid: chunks * H / 4 rounded up; warp w of block x takes (chunk, head) number 4x + w.
static __global__ void __launch_bounds__(kLogDecayThreads) chunk_log_decay_kernel(TensorCoreBackwardArgs a, int chunk_heads) {
  const int lane = threadIdx.x & 31, item = blockIdx.x * (kLogDecayThreads / 32) + (threadIdx.x >> 5);
  if (item >= chunk_heads) return;
  const int H = a.H, head = item % H;
  const BackwardChunk ch = a.chunks[item / H];
  float x[2];
  #pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int t = 2 * lane + e;
    x[e] = t < ch.length ? (a.g ? a.g[(std::size_t(ch.token0) + t) * H + head] : a.g_gamma[head]) * kLog2e : 0.0f;
  }
  float incl = x[0] + x[1];  // the lane's pair, then an inclusive scan over the lanes
  #pragma unroll
  for (int step = 1; step < 32; step *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, incl, step);
    if (lane >= step) incl += y;
  }
  float before = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) before = 0.0f;
  const float b0 = before + x[0], b1 = b0 + x[1];
  const std::size_t at = std::size_t(ch.token0) * H + head;
  if (2 * lane < ch.length) {
    a.log2_decay[at + std::size_t(2 * lane) * H] = b0;
    a.row_decay[at + std::size_t(2 * lane) * H] = exp2f(b0);
  }
  if (2 * lane + 1 < ch.length) {
    a.log2_decay[at + std::size_t(2 * lane + 1) * H] = b1;
    a.row_decay[at + std::size_t(2 * lane + 1) * H] = exp2f(b1);
  }
}

// The chunk's b log2(e) into shared memory (64 floats), as one more
// asynchronous copy of the caller's current group (tokens past the chunk
// repeat its last one, so that their factors are finite: their rows are zero).
__device__ inline void load_decays_async(float* b_s, const TensorCoreBackwardArgs& a, const BackwardChunk& ch, int head) {
  if (threadIdx.x < kChunk)
    cp_async4(b_s + threadIdx.x, a.log2_decay + (std::size_t(ch.token0) + min(int(threadIdx.x), ch.length - 1)) * a.H + head, 4);
}

// The factors of kernels/chunk_gate.hpp from the chunk's b log2(e) (ChunkDecays::b, in shared memory).
struct ChunkDecays {
  const float* b;
  int last;  // the chunk's last token
  __device__ float pair(int i, int j) const { return exp2f(b[i] - b[j]); }    // exp(b_i - b_j), j <= i
  __device__ float row(int i) const { return exp2f(b[i]); }                   // exp(b_i)
  __device__ float to_end(int j) const { return exp2f(b[last] - b[j]); }      // exp(b_L - b_j)
  __device__ float whole() const { return exp2f(b[last]); }                   // exp(b_L)
};

// Two consecutive elements of a tile or a snapshot as floats.
__device__ inline float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ inline float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ inline float2 load_pair(const __half* p) { return __half22float2(*reinterpret_cast<const __half2*>(p)); }

// dot[half] += sum over the warp's 8 kN columns col0.. of x[row][col] acc[row][col]
// for its rows g + 8 half (the accumulator layout of mma m16n8k16), x a tile
// in shared memory [row][col] (the unscaled q or k), summed over the 4 lanes of a row.
template <class E, int kN>
__device__ inline void add_row_dots(float (&dot)[2], const float (&acc)[kN][4], const E* x, int stride, int row0,
                                    int col0, float sign, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    float s = 0.0f;
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt) {
      const float2 v = load_pair(x + (row0 + g + 8 * half) * stride + col0 + 8 * nt + 2 * t4);
      s += v.x * acc[nt][2 * half] + v.y * acc[nt][2 * half + 1];
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    dot[half] += sign * s;
  }
}

// acc's rows row0 + g, + 8 (keys j) times exp(b_L - b_j): the dh terms of dK and dV.
template <int kN>
__device__ inline void decay_key_rows(float (&acc)[kN][4], const ChunkDecays& d, int row0, int lane) {
  const float w[2] = {d.to_end(row0 + (lane >> 2)), d.to_end(row0 + (lane >> 2) + 8)};
  #pragma unroll
  for (int nt = 0; nt < kN; ++nt)
    #pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] *= w[e / 2];
}

// This column block's share of r for the warp's rows row0 + g, + 8 (< valid).
__device__ inline void store_row_dots(const TensorCoreBackwardArgs& a, int part, const BackwardChunk& ch, int head,
                                      int row0, const float (&dot)[2], int lane) {
  if ((lane & 3) != 0) return;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + (lane >> 2) + 8 * half;
    if (r < ch.length)
      a.dg_part[(std::size_t(part) * a.num_tokens + ch.token0 + r) * a.H + head] = dot[half];
  }
}

// Sum over x[row][col] acc[row][col] of this thread's accumulator elements
// (the mma layout: rows row0 + g, + 8; columns col0 + 8 nt + 2 t4, + 1).
template <class E, int kN>
__device__ inline float acc_dot(const float (&acc)[kN][4], const E* x, int stride, int row0, int col0, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  float s = 0.0f;
  #pragma unroll
  for (int half = 0; half < 2; ++half)
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt) {
      const float2 v = load_pair(x + (row0 + g + 8 * half) * stride + col0 + 8 * nt + 2 * t4);
      s += v.x * acc[nt][2 * half] + v.y * acc[nt][2 * half + 1];
    }
  return s;
}

// The block's sum of x in a fixed order (warps by shuffles, then warp by
// warp), for thread 0; scratch holds a float per warp. Ends with a barrier.
__device__ inline float block_sum(float x, float* scratch) {
  #pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < int(blockDim.x >> 5); ++w) total += scratch[w];
  __syncthreads();
  return total;
}

// sum over the tiles' elements of x y, both 64 x 64 [row][col] in shared
// memory of row stride `stride`, this thread's share (kThreads threads).
template <int kThreads, class E>
__device__ inline float tile_dot(const E* x, const E* y, int stride) {
  float s = 0.0f;
  for (int i = threadIdx.x; i < kChunk * kChunk / 2; i += kThreads) {
    const int r = i / (kChunk / 2), c = 2 * (i % (kChunk / 2));
    const float2 u = load_pair(x + r * stride + c), v = load_pair(y + r * stride + c);
    s += u.x * v.x + u.y * v.y;
  }
  return s;
}

// This column block's share of <S_{c+1}, dS_{c+1}> for chunk ch (thread 0's value).
__device__ inline void store_state_part(const TensorCoreBackwardArgs& a, int part, const BackwardChunk& ch, int head,
                                        float share) {
  if (threadIdx.x == 0) a.state_part[(std::size_t(part) * a.num_chunks + ch.h_chunk) * a.H + head] = share;
}

constexpr int kGateGradientThreads = 128;  // 4 warps: one (chunk, head) each

// dg from the chunk kernels' shares, every chunk on its own (README.md "Gated
// levels"): with b the chunk's cumulative log-decays,
//   dL/db_i = q_i . dq_i - k_i . dk_i  (+ <S_{c+1}, dS_{c+1}> at the chunk's last token)
// and g_t enters b_i for the chunk's i >= t only, so
//   dg_t = sum_{i >= t in the chunk} (q_i . dq_i - k_i . dk_i) + <S_{c+1}, dS_{c+1}>,
// S_{c+1} = exp(b_L) h[c] + sum_j exp(b_L - b_j) k_j v_j^T the state after the
// chunk and dS_{c+1} = dh[c] its gradient (the chunk kernels' state_part). No sum
// runs across chunks: the terms of a long one cancel, and 16-bit errors of dq
// and dk would grow with it; and a window cut at chunk boundaries gets the
// whole case's bits with nothing carried.
// grid: chunks * H / 4 rounded up; warp w of block x takes (chunk, head) number 4x + w.
static __global__ void __launch_bounds__(kGateGradientThreads) gate_gradient_kernel(TensorCoreBackwardArgs a) {
  const int lane = threadIdx.x & 31, item = blockIdx.x * (kGateGradientThreads / 32) + (threadIdx.x >> 5);
  if (item >= a.num_chunks * a.H) return;
  const int H = a.H, head = item % H;
  const BackwardChunk ch = a.chunks[item / H];
  float state = 0.0f;
  for (int p = 0; p < a.dg_parts; ++p) state += a.state_part[(std::size_t(p) * a.num_chunks + ch.h_chunk) * H + head];
  float r[2];  // lane l: tokens 2l, 2l + 1
  #pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int t = 2 * lane + e;
    float x = 0.0f;
    if (t < ch.length)
      for (int p = 0; p < a.dg_parts; ++p) x += a.dg_part[(std::size_t(p) * a.num_tokens + ch.token0 + t) * H + head];
    r[e] = x;
  }
  // Suffix sums: the lane's pair, then an inclusive scan from the last lane down.
  float incl = r[0] + r[1];
  #pragma unroll
  for (int step = 1; step < 32; step *= 2) {
    const float y = __shfl_down_sync(0xffffffffu, incl, step);
    if (lane + step < 32) incl += y;
  }
  float after = __shfl_down_sync(0xffffffffu, incl, 1);
  if (lane == 31) after = 0.0f;
  const float s1 = after + r[1], s0 = s1 + r[0];
  float* dg = a.dg + std::size_t(ch.token0) * H + head;
  if (2 * lane < ch.length) dg[std::size_t(2 * lane) * H] = state + s0;
  if (2 * lane + 1 < ch.length) dg[std::size_t(2 * lane + 1) * H] = state + s1;
}

}  // namespace linattn::cuda::detail
