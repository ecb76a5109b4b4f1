// What the tensor-core forward's two kernels share (the fused kernel,
// fused_tensor_core_kernel.hpp, and the segment sums, segment_sums.hpp): the
// arguments they take, the width of a group of 4 warps, and normalization's
// key sums and z pairs.
#pragma once

#include "kernels/cuda/mma_primitives.hpp"
#include "kernels/cuda/packed_schedule.hpp"

#include <cstddef>
#include <cstdint>

namespace linattn::cuda {

// Everything but the gate: what the kernels take by value. NVPTX lowers a
// by-value kernel parameter of up to 128 bytes (this one's size) by loading
// its fields into registers up front, a larger one by loads from parameter
// space where they are used: with the gate's two pointers inside it, every
// level-1 kernel's PTX changed. The gated kernel takes them as a second
// parameter (GatePointers), so level 1's kernels compile as before.
struct FusedTensorCoreKernelArgs {
  const void* q;
  const void* k;
  const void* v;
  const float* initial_state;  // [B, H, DK, DV] fp32 or null (zero)
  void* o;                     // [B, T, H, DV], element type = input or fp32
  void* h;                     // [B, NT, H, DK, DV] (packed: [1, chunks, ...]), bf16 or fp32, or null
  float* final_state;          // [B or N, H, DK, DV]
  int B, T, H, DK, DV;
  float scale;
  // Split sequences (set by run_fused_tensor_core): each block walks
  // seg_chunks chunks of one segment (blockIdx.z), starting from the initial
  // state plus the rows of seg_sums[rows * H][DK][DV] (each segment's sum of
  // K^T V) of the segments before it (BlockWork); 0 walks whole sequences.
  int seg_chunks;
  const float* seg_sums;
  // Packed batches (cu_seqlens, B = 1): the blocks' walks (packed_schedule.hpp),
  // blockIdx.x = DV block + (DV / BV) * (head + H * walk); null for plain batches.
  const TensorCoreWork* work;
  // fla's normalize=True (fused kernel with kNormalize): o_t is divided by
  // scale q_t . z_t + 1e-10 before it is stored, z_t = z0 + the keys so far;
  // initial_z [N, H, DK] or null, z_state [N, H, DK] out; seg_zsums [rows][H][DK]
  // the key sums of the segments, beside seg_sums.
  const float* initial_z;
  float* z_state;
  const float* seg_zsums;
};

struct FusedTensorCoreArgs : FusedTensorCoreKernelArgs {
  // The gated levels (README.md, "Gated levels"; kernels/chunk_gate.hpp): fp32
  // log-decays <= 0, either g per token [B, T, H] (packed: [1, T, H]) or
  // g_gamma per head [H]; both null is level 1. The launcher refuses a gate
  // with normalization or with split sequences (segments > 1).
  const float* g = nullptr;
  const float* g_gamma = nullptr;
  // GLA's per-key-channel decay (issue 28): fp32 log-decays <= 0 [B, T, H, DK]
  // (packed: [1, T, H, DK]), or null. Its sequences are walked whole.
  const float* gk = nullptr;
};

namespace detail {

constexpr int kGroupWidth = 32;  // DV columns owned by one group of 4 warps

// Normalization's key sums (kNormalize): thread x sums key columns 2p, 2p+1
// (p = x % (DK/2)) over rows x / (DK/2), + parts, ... of a chunk's K tile;
// the parts are then added in a fixed order, so the sums are deterministic.
template <int DK, int kThreads>
struct KeySumShare {
  static constexpr int pairs = DK / 2, parts = kThreads / pairs;
  static_assert(kThreads % pairs == 0 && kChunk % parts == 0, "whole rows per part");
};
template <class E, int DK, int kThreads>
__device__ inline float2 key_sum_part(const E* kt, int k_stride) {
  using S = KeySumShare<DK, kThreads>;
  const int p = threadIdx.x % S::pairs;
  float2 acc = make_float2(0.0f, 0.0f);
  #pragma unroll 4
  for (int r = threadIdx.x / S::pairs; r < kChunk; r += S::parts) {
    float2 x;  // the tile's pair of columns 2p, 2p + 1
    if constexpr (kFp32Tiles<E>) x = *reinterpret_cast<const float2*>(kt + r * k_stride + 2 * p);
    else x = Elem<E>::unpack(*reinterpret_cast<const std::uint32_t*>(kt + r * k_stride + 2 * p));
    acc.x += x.x;
    acc.y += x.y;
  }
  return acc;
}
// z + the parts of one pair of columns (thread p < DK/2), parts [S::parts][DK].
template <int DK, int kThreads>
__device__ inline float2 add_key_parts(float2 z, const float* parts) {
  using S = KeySumShare<DK, kThreads>;
  const int p = threadIdx.x;
  #pragma unroll
  for (int j = 0; j < S::parts; ++j) {
    const float2 x = *reinterpret_cast<const float2*>(parts + j * DK + 2 * p);
    z.x += x.x;
    z.y += x.y;
  }
  return z;
}

// z's columns d, d + 1 of a row of dk (kPad: those past dk read as zero and
// not written; an odd dk leaves pairs off 8 bytes).
template <bool kPad>
__device__ inline float2 load_z_pair(const float* row, int d, int dk) {
  if (!kPad) return *reinterpret_cast<const float2*>(row + d);
  return make_float2(d < dk ? row[d] : 0.0f, d + 1 < dk ? row[d + 1] : 0.0f);
}
template <bool kPad>
__device__ inline void store_z_pair(float* row, int d, int dk, float2 z) {
  if (!kPad) {
    *reinterpret_cast<float2*>(row + d) = z;
    return;
  }
  if (d < dk) row[d] = z.x;
  if (d + 1 < dk) row[d + 1] = z.y;
}

}  // namespace detail
}  // namespace linattn::cuda
