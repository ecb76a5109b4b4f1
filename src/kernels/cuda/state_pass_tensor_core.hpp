// The state after a plain batch's tokens, without q, o or h, on tensor cores
// (docs/PARALLEL.md "Context parallel"): final_state = initial_state + the
// K^T V sums of each row's segments, added in segment order (with
// normalization z_state = initial_z + the key sums likewise). The segment sums
// are segment_sum_kernel's (segment_sums.hpp), the ones the forward adds
// when it splits a sequence, so the state pass is the forward's own arithmetic
// for the state, minus everything that reads q. It reads k and v once: about
// a third of the forward's bytes. Gated (args.g or args.g_gamma, no
// normalization), each segment's sum is its own decayed state with its decay
// (segment_sums.hpp) and they compose as the forward composes them when it
// splits: S = exp(G_j) S + sum_j, segment by segment.
#pragma once

#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/fused_common.hpp"
#include "kernels/cuda/segment_split.hpp"
#include "kernels/cuda/segment_sums.hpp"
#include "kernels/cuda/tile_rules.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace linattn::cuda {
namespace detail {

// out[row][e] = (init ? init[row][e] : 0) + sums[row b, segment 0, head][e] + ... + segment (segments - 1),
// row = b * H + head, e < elems; the sums laid out [B][segments][H][elems] as segment_sum_kernel writes them.
// With log2_decays ([B][segments][H], gated) each step is acc = exp2(decay) acc + sum, the fused kernel's.
// static: one copy per translation unit, as it is no template.
static __global__ void add_segment_sums_kernel(const float* init, const float* sums, const float* log2_decays,
                                               int segments, int H, std::size_t rows, std::size_t elems, float* out) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * elems) return;
  const std::size_t row = i / elems, e = i % elems, b = row / H, head = row % H;
  float acc = init ? init[i] : 0.0f;
  for (int j = 0; j < segments; ++j) {
    const std::size_t sum_row = (b * segments + j) * H + head;
    if (log2_decays) acc = __fmaf_rn(acc, exp2f(log2_decays[sum_row]), sums[sum_row * elems + e]);
    else acc += sums[sum_row * elems + e];
  }
  out[i] = acc;
}

inline void add_segment_sums(const float* init, const float* sums, int segments, int H, std::size_t rows,
                             std::size_t elems, float* out, cudaStream_t stream, const float* log2_decays = nullptr) {
  const std::size_t n = rows * elems;
  if (n == 0) return;
  add_segment_sums_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(init, sums, log2_decays, segments,
                                                                                      H, rows, elems, out);
  check_launch(cudaGetLastError(), "state pass: adding the segment sums");
}

}  // namespace detail

// Segments per row for the state pass: enough blocks of the widest DV block
// for about one wave on num_sms SMs (segment_sum_kernel takes one SM per
// block with DK 128), at least one chunk each.
inline int choose_state_pass_segments(int B, int H, int NT, int DK, int DV, int num_sms) {
  const std::int64_t blocks = std::int64_t(B) * H * dv_blocks(DV, widest_block_dv(DK, DV));
  const std::int64_t segments = std::min<std::int64_t>(std::max<std::int64_t>(num_sms / blocks, 1), NT);
  return static_cast<int>(std::max<std::int64_t>(segments, 1));
}

// args: k, v, initial_state (or null), final_state [B, H, DK, DV]; with
// normalization initial_z (or null) and z_state [B, H, DK]; B, T, H, DK, DV.
// q, o and h are not read; args.g or args.g_gamma decays the state (levels 2
// and 3, without normalization). Returns the segments per row it used.
template <class E>
int run_state_pass_tensor_core(FusedTensorCoreArgs args, int num_sms, cudaStream_t stream) {
  const bool normalize = args.z_state != nullptr, gated = args.g != nullptr || args.g_gamma != nullptr;
  if (gated && normalize) throw std::invalid_argument("tensor-core state pass: normalize with a gate is not supported");
  if (args.g && args.g_gamma) throw std::invalid_argument("tensor-core state pass: a gate is g or g_gamma, not both");
  const int NT = (args.T + detail::kChunk - 1) / detail::kChunk;
  const std::size_t rows = std::size_t(args.B) * args.H, state_elems = std::size_t(args.DK) * args.DV;
  if (NT == 0) {  // no tokens: the state is the initial one
    detail::add_segment_sums(args.initial_state, nullptr, 0, args.H, rows, state_elems, args.final_state, stream);
    if (normalize) detail::add_segment_sums(args.initial_z, nullptr, 0, args.H, rows, args.DK, args.z_state, stream);
    return 0;
  }
  const SegmentSplit split =
      split_segments(NT, choose_state_pass_segments(args.B, args.H, NT, args.DK, args.DV, num_sms));
  args.seg_chunks = split.seg_chunks;
  args.work = nullptr;
  StreamBuffer sums(rows * split.segments * state_elems * sizeof(float), stream, "state pass: segment states");
  StreamBuffer zsums(normalize ? rows * split.segments * args.DK * sizeof(float) : 0, stream,
                     "state pass: segment key sums");
  StreamBuffer decays(gated ? rows * split.segments * sizeof(float) : 0, stream, "state pass: segment decays");
  const int bv = widest_block_dv(args.DK, args.DV), dkt = dk_tile(args.DK);
  const bool exact = exact_tiles(args.DK, args.DV, bv);
  const dim3 grid(dv_blocks(args.DV, bv), split.segments, args.B * args.H);
  auto launch = [&](auto dk, auto norm, auto pad, auto gate) {
    constexpr int DK = decltype(dk)::value;
    constexpr bool kNorm = decltype(norm)::value, kPad = decltype(pad)::value, kGate = decltype(gate)::value;
    float* out = sums.as<float>();
    float* zout = zsums.as<float>();
    float* dout = decays.as<float>();
    if constexpr (DK == 256) detail::launch_segment_sums<E, DK, 32, kNorm, kPad, kGate>(args, grid, out, zout, stream, dout);
    else if (bv == 128) detail::launch_segment_sums<E, DK, 128, kNorm, kPad, kGate>(args, grid, out, zout, stream, dout);
    else if (bv == 64) detail::launch_segment_sums<E, DK, 64, kNorm, kPad, kGate>(args, grid, out, zout, stream, dout);
    else detail::launch_segment_sums<E, DK, 32, kNorm, kPad, kGate>(args, grid, out, zout, stream, dout);
  };
  auto with_gate = [&](auto dk, auto norm, auto pad) {
    if constexpr (decltype(norm)::value) launch(dk, norm, pad, std::false_type{});
    else if (gated) launch(dk, norm, pad, std::true_type{});
    else launch(dk, norm, pad, std::false_type{});
  };
  auto with_pad = [&](auto dk, auto norm) {
    if (exact) with_gate(dk, norm, std::false_type{});
    else with_gate(dk, norm, std::true_type{});
  };
  auto with_norm = [&](auto dk) {
    if (normalize) with_pad(dk, std::true_type{});
    else with_pad(dk, std::false_type{});
  };
  if (dkt == 256) with_norm(std::integral_constant<int, 256>{});
  else if (dkt == 128) with_norm(std::integral_constant<int, 128>{});
  else if (dkt == 64) with_norm(std::integral_constant<int, 64>{});
  else throw std::invalid_argument("tensor-core state pass: DK must be in 1..256");
  detail::add_segment_sums(args.initial_state, sums.as<float>(), split.segments, args.H, rows, state_elems,
                           args.final_state, stream, decays.as<float>());
  if (normalize)
    detail::add_segment_sums(args.initial_z, zsums.as<float>(), split.segments, args.H, rows, args.DK, args.z_state,
                             stream);
  return split.segments;
}

}  // namespace linattn::cuda
