// The decay of one chunk for the gated tensor-core kernels (the fused kernel,
// fused_tensor_core_kernel.hpp, and the segment sums, segment_sums.hpp): the
// gate's pointers, the copy of a chunk's log-decays into shared memory, and
// the warp's scan that turns them into the factors of kernels/chunk_gate.hpp,
// in log2 units for exp2f. Both kernels make a chunk's factors with these
// same functions, so a split sequence's segment sums decay exactly as the
// fused kernel's state does.
#pragma once

#include "kernels/cuda/log2_units.hpp"
#include "kernels/cuda/mma_primitives.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

namespace linattn::cuda {
namespace detail {

// The gated kernels' second parameter (FusedTensorCoreKernelArgs says why it is not a field).
struct GatePointers {
  const float* g;        // [B, T, H] or null
  const float* g_gamma;  // [H] or null
  // Split sequences: each segment's own decay, log2(e) times the sum of its
  // g, one float per row of the segment sums (written by segment_sum_kernel,
  // read by the fused kernel when it adds the earlier segments' sums).
  float* seg_log2_decay;
};

// A kernel's optional gate argument (its pack `Gate... gate`: empty, a
// GatePointers, or a gk kernel's operands) as type G: the argument where it is
// a G, else G{} (null pointers), so that each instantiation reads only its own gate.
template <class G>
__device__ inline G gate_as() { return {}; }
template <class G, class Arg>
__device__ inline G gate_as(Arg arg) {
  if constexpr (std::is_same<G, Arg>::value) return arg;
  else return {};
}

// A chunk's decay in shared memory (GateRows floats), in log2 units:
// [0, 64) b_i log2(e), [64, 128) exp(b_i), [128, 192) exp(b_L - b_i), [192] exp(b_L).
struct GateRows {
  static constexpr int b = 0, decay = kChunk, to_end = 2 * kChunk, whole = 3 * kChunk;
  static constexpr int floats = 4 * kChunk;
};

// Warp-wide: chunk c's 64 log-decays of head hh into dst[64] as 4-byte
// asynchronous copies, in the caller's group (lane l copies tokens 2l, 2l + 1;
// g_gamma gives every token the head's one value). Tokens past the
// sequence's T read as zero: their key rows are zero and their outputs are
// never stored.
__device__ inline void copy_chunk_gate(float* dst, const GatePointers& gp, std::size_t token0, int T, int H, int hh,
                                       int c, int lane) {
  #pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int t = c * kChunk + 2 * lane + e;
    const float* src = gp.g ? gp.g + (token0 + std::size_t(t < T ? t : 0)) * H + hh : gp.g_gamma + hh;
    cp_async4(dst + 2 * lane + e, src, t < T ? 4 : 0);
  }
}

// Warp-wide: the factors of a chunk whose log-decays are g[64] (its last
// real token at index last) into d (GateRows), b_i log2(e) by an inclusive
// scan over the lanes' pairs (exp(x) = exp2(x log2 e)): every exponent is a
// difference of these sums, so <= 0 up to their rounding. Returns b_L log2(e).
__device__ inline float make_chunk_decay(const float* g, int last, int lane, float* d) {
  const float x0 = g[2 * lane] * kLog2e, x1 = g[2 * lane + 1] * kLog2e;  // the lane's own copies
  float incl = x0 + x1;
  #pragma unroll
  for (int step = 1; step < 32; step *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, incl, step);
    if (lane >= step) incl += y;
  }
  float before = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) before = 0.0f;
  const float b0 = before + x0, b1 = b0 + x1;
  const float bl = __shfl_sync(0xffffffffu, (last & 1) ? b1 : b0, last >> 1);
  d += 2 * lane;
  *reinterpret_cast<float2*>(d + GateRows::b) = make_float2(b0, b1);
  *reinterpret_cast<float2*>(d + GateRows::decay) = make_float2(exp2f(b0), exp2f(b1));
  *reinterpret_cast<float2*>(d + GateRows::to_end) = make_float2(exp2f(bl - b0), exp2f(bl - b1));
  if (lane == 0) d[GateRows::whole] = exp2f(bl);
  return bl;
}

// The last real token of chunk c of a sequence of T tokens (0 for an empty one).
__device__ inline int last_token_of_chunk(int c, int T) { return max(min(kChunk, T - c * kChunk), 1) - 1; }

}  // namespace detail
}  // namespace linattn::cuda
