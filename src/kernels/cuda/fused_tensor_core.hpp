// The tensor-core forward's launcher: the tile choices (tile_rules.hpp,
// segment_split.hpp, packed_schedule.hpp), the segment sums of split
// sequences (segment_sums.hpp), then the fused kernel
// (fused_tensor_core_kernel.hpp) for the head's shape.
#pragma once

#include "kernels/cuda/channel_gate_prep.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/fused_tensor_core_kernel.hpp"
#include "kernels/cuda/key_halves.hpp"
#include "kernels/cuda/packed_schedule.hpp"
#include "kernels/cuda/segment_split.hpp"
#include "kernels/cuda/segment_sums.hpp"
#include "kernels/cuda/tile_rules.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace linattn::cuda {

struct FusedTensorCorePlan {
  int block_dv;
  int segments;  // per sequence (packed: of the most-split sequence)
};

// GLA's gk prepared for the fused kernel (channel_gate_prep.hpp), in device
// memory given back on the stream after the kernels that read it.
struct ChannelGateBuffers {
  StreamBuffer qg, kg, scores, decay, chunks;
};
template <class E>
ChannelGateBuffers prepare_channel_gate(const FusedTensorCoreArgs& args, const std::vector<std::int64_t>* cu_seqlens,
                                        cudaStream_t stream) {
  const std::size_t rows = std::size_t(args.B) * args.T, qk = rows * args.H * args.DK;
  // Packed batches: the chunks in h's order, the backward's table (backward_args.hpp).
  const std::vector<BackwardChunk> table =
      cu_seqlens ? backward_work(args.B, args.T, cu_seqlens).chunks : std::vector<BackwardChunk>{};
  const int chunks = cu_seqlens ? static_cast<int>(table.size())
                                : args.B * ((args.T + detail::kChunk - 1) / detail::kChunk);
  ChannelGateBuffers b{StreamBuffer(qk * sizeof(E), stream, "tensor-core gk: decayed queries"),
                       StreamBuffer(qk * sizeof(E), stream, "tensor-core gk: decayed keys"),
                       StreamBuffer(rows * args.H * detail::kChunk * sizeof(float), stream, "tensor-core gk: scores"),
                       StreamBuffer(std::size_t(chunks) * args.H * args.DK * sizeof(float), stream,
                                    "tensor-core gk: state decays"),
                       StreamBuffer(table.size() * sizeof(BackwardChunk), stream, "tensor-core gk: chunk table")};
  ChannelGateArgs prep{args.q, args.k, args.gk, b.qg.ptr.get(), b.kg.ptr.get(), b.scores.as<float>(),
                       b.decay.as<float>(), args.B, args.T, args.H, args.DK, args.scale, nullptr};
  if (!table.empty()) {
    detail::check_launch(cudaMemcpyAsync(b.chunks.ptr.get(), table.data(), table.size() * sizeof(BackwardChunk),
                                         cudaMemcpyHostToDevice, stream),
                         "tensor-core gk: chunk table upload");  // pageable: copied out before the call returns
    prep.chunks = b.chunks.as<BackwardChunk>();
  }
  launch_channel_gate_prep<E>(prep, chunks, stream);
  detail::check_launch(cudaGetLastError(), "tensor-core gk: prepare launch");
  return b;
}

template <class E, class OutT, class SnapT>
FusedTensorCorePlan run_fused_tensor_core(FusedTensorCoreArgs args, int block_dv, int segments, int num_sms,
                                          cudaStream_t stream, const std::vector<std::int64_t>* cu_seqlens = nullptr);

// fp32 heads of an even DK in 130..256 (tile_rules.hpp, fp32_key_parts): as
// two heads of DK / 2 keys each. In memory q, k, gk, h, initial_state and
// final_state of H heads of DK keys are those of 2H heads of DK / 2, so only
// the values (and g, g_gamma) are copied to both halves, and o is the sum of
// the halves' outputs, each an fp32 buffer of twice o's size. Normalization
// divides by the whole head's q . z and is refused (choose_path keeps those
// heads on the portable kernels). The plan is the halves'.
template <class OutT, class SnapT>
FusedTensorCorePlan run_fp32_key_halves(const FusedTensorCoreArgs& args, int block_dv, int segments, int num_sms,
                                        cudaStream_t stream, const std::vector<std::int64_t>* cu_seqlens) {
  static_assert(std::is_same<OutT, float>::value, "fp32 inputs write fp32 o");
  if (args.z_state != nullptr)
    throw std::invalid_argument("tensor-core fused: fp32 inputs with normalization need DK <= 128");
  const std::size_t rows_heads = std::size_t(args.B) * args.T * args.H;
  const std::size_t halves_bytes = 2 * rows_heads * args.DV * sizeof(float);
  StreamBuffer v(halves_bytes, stream, "tensor-core fp32 key halves: values");
  StreamBuffer o(halves_bytes, stream, "tensor-core fp32 key halves: outputs");
  StreamBuffer g(args.g ? 2 * rows_heads * sizeof(float) : 0, stream, "tensor-core fp32 key halves: g");
  StreamBuffer g_gamma(args.g_gamma ? 2 * std::size_t(args.H) * sizeof(float) : 0, stream,
                       "tensor-core fp32 key halves: g_gamma");
  copy_to_key_halves(static_cast<const float*>(args.v), v.as<float>(), rows_heads, args.DV, stream);
  if (args.g) copy_to_key_halves(args.g, g.as<float>(), rows_heads, 1, stream);
  if (args.g_gamma) copy_to_key_halves(args.g_gamma, g_gamma.as<float>(), std::size_t(args.H), 1, stream);
  FusedTensorCoreArgs halves = args;
  halves.H = 2 * args.H;
  halves.DK = args.DK / 2;
  halves.v = v.ptr.get();
  halves.o = o.ptr.get();
  halves.g = args.g ? g.as<float>() : nullptr;
  halves.g_gamma = args.g_gamma ? g_gamma.as<float>() : nullptr;
  const FusedTensorCorePlan plan =
      run_fused_tensor_core<float, OutT, SnapT>(halves, block_dv, segments, num_sms, stream, cu_seqlens);
  sum_key_halves(o.as<float>(), static_cast<float*>(args.o), rows_heads, args.DV, stream);
  return plan;
}

// block_dv: 32, 64 or 128; segments: 1 walks whole sequences; 0 chooses.
// cu_seqlens (host, N + 1 offsets, B = 1) makes a packed batch: its
// sequences are walked as packed_schedule.hpp lists them. args.z_state
// non-null normalizes o in the same pass (initial_z optional). args.g or
// args.g_gamma runs the gated kernels (no normalization): a split sequence's
// segment sums are then each segment's own decayed state, and its decay
// (segment_sums.hpp), which the fused kernel applies as it adds them.
// args.gk (GLA's per-key-channel decay) runs channel_gate_prep.hpp's pass
// first and the fused kernel's channel instantiation on what it prepares; a
// split sequence's segment sums are then each segment's own decayed state and
// its decay per key channel, which the fused kernel applies row by row.
// Which problems come here is choose_path's rule (kernels/path_choice.cpp);
// the checks below only guard the launcher against other callers.
template <class E, class OutT, class SnapT>
FusedTensorCorePlan run_fused_tensor_core(FusedTensorCoreArgs args, int block_dv, int segments, int num_sms,
                                          cudaStream_t stream, const std::vector<std::int64_t>* cu_seqlens) {
  const bool packed = cu_seqlens != nullptr, normalize = args.z_state != nullptr;
  if constexpr (detail::kFp32Tiles<E>) {
    if (fp32_key_parts(args.DK) == 2) return run_fp32_key_halves<OutT, SnapT>(args, block_dv, segments, num_sms, stream, cu_seqlens);
  }
  // One 16-bit copy of the state on chip (tile_rules.hpp, max_block_dv): a 256-row DK tile then takes blocks of 64.
  constexpr bool kOneStateTile = !detail::kSplitState<E, OutT> && !detail::kStageSnapshot<E, OutT, SnapT>;
  constexpr bool kFp32 = detail::kFp32Tiles<E>;  // fp32 tiles: their own block limits
  const int dkt = dk_tile(args.DK), fused_cap = max_block_dv(dkt, kOneStateTile, kFp32);
  if (segments < 0 || segments > 65535) throw std::invalid_argument("tensor-core fused: segments must be in 0..65535");
  const bool gated = args.g != nullptr || args.g_gamma != nullptr, channel = args.gk != nullptr;
  if (gated || channel) {
    if (int(args.g != nullptr) + int(args.g_gamma != nullptr) + int(channel) > 1)
      throw std::invalid_argument("tensor-core fused: a gate is g, g_gamma or gk, not several");
    if (normalize) throw std::invalid_argument("tensor-core fused: normalize with a gate is not supported");
  }
  const int NT = (args.T + detail::kChunk - 1) / detail::kChunk;
  PackedSchedule schedule;
  if (packed) {
    if (args.B != 1) throw std::invalid_argument("tensor-core fused: a packed batch has B = 1");
    schedule = schedule_packed(*cu_seqlens, detail::kChunk, args.H, args.DK, args.DV, num_sms, segments);
    segments = schedule.max_segments;
    if (block_dv == 0)
      block_dv = segments > 1 ? widest_block_within(args.DV, std::min(fused_cap, max_block_dv(dkt, false)))
                              : choose_block_dv(static_cast<int>(schedule.walks.size()), args.H, args.DK, args.DV, num_sms,
                                                kOneStateTile, kFp32);
  } else {
    if (segments == 0) segments = choose_segments(args.B, args.H, NT, args.DK, args.DV, num_sms);
    if (block_dv == 0)
      block_dv = segments > 1 ? widest_block_within(args.DV, std::min(fused_cap, max_block_dv(dkt, false)))
                              : choose_block_dv(args.B, args.H, args.DK, args.DV, num_sms, kOneStateTile, kFp32);
  }
  if (dkt == 0 || args.DV < 1 || args.DV > kMaxTensorCoreDV)
    throw std::invalid_argument("tensor-core fused: DK must be in 1..256 and DV in 1..512");
  if (fused_cap == 0) throw std::invalid_argument("tensor-core fused: fp32 inputs need DK <= 128, or an even DK <= 256");
  if ((block_dv != 32 && block_dv != 64 && block_dv != 128) || block_dv > fused_cap)
    throw std::invalid_argument("tensor-core fused: block_dv must be 32, 64 or 128, and at most what the DK tile allows");
  // Kernels are compiled for DK tiles of 64, 128 (blocks of 32, 64 and 128
  // columns) and 256 (blocks of 32, and 64 with one state tile), level 1 with
  // and without normalization and gated (never both), exact or padded
  // (tile_rules.hpp). f(dk, bv, norm, gate, pad).
  auto with_shape = [&](int bv, auto f) {
    const bool exact = exact_tiles(args.DK, args.DV, bv);
    auto with_pad = [&](auto dk, auto bvc, auto norm, auto gate) {
      if (exact) f(dk, bvc, norm, gate, std::false_type{});
      else f(dk, bvc, norm, gate, std::true_type{});
    };
    auto with_norm = [&](auto dk, auto bvc) {  // gate: 0 level 1, 1 scalar, 2 gk
      if (normalize) with_pad(dk, bvc, std::true_type{}, std::integral_constant<int, 0>{});
      else if (gated) with_pad(dk, bvc, std::false_type{}, std::integral_constant<int, 1>{});
      else if (channel) with_pad(dk, bvc, std::false_type{}, std::integral_constant<int, 2>{});
      else with_pad(dk, bvc, std::false_type{}, std::integral_constant<int, 0>{});
    };
    auto with_bv = [&](auto dk) {
      if constexpr (decltype(dk)::value == 256) {
        if constexpr (kOneStateTile) {
          if (bv == 64) return with_norm(dk, std::integral_constant<int, 64>{});
        }
        with_norm(dk, std::integral_constant<int, 32>{});
      } else {
        if (bv == 128) with_norm(dk, std::integral_constant<int, 128>{});
        else if (bv == 64) with_norm(dk, std::integral_constant<int, 64>{});
        else with_norm(dk, std::integral_constant<int, 32>{});
      }
    };
    if (dkt == 256) {
      if constexpr (!kFp32) with_bv(std::integral_constant<int, 256>{});
    } else if (dkt == 128) with_bv(std::integral_constant<int, 128>{});
    else with_bv(std::integral_constant<int, 64>{});
  };
  args.seg_chunks = 0;
  args.seg_sums = nullptr;
  args.seg_zsums = nullptr;
  args.work = nullptr;
  const std::size_t state_elems = std::size_t(args.DK) * args.DV;
  // Segment decays: one log2 decay per row for a scalar gate, one decay per key channel for gk.
  auto segment_decay_floats = [&](std::size_t rows) { return gated ? rows : channel ? rows * args.DK : 0; };
  const int sum_bv = widest_block_dv(args.DK, args.DV);
  // gk: the prepared operands, and the fused kernel reads the decayed Q and K.
  std::unique_ptr<ChannelGateBuffers> prepared;
  detail::ChannelGateOperands channel_ops{};
  if (channel) {
    prepared = std::make_unique<ChannelGateBuffers>(prepare_channel_gate<E>(args, cu_seqlens, stream));
    channel_ops = {prepared->scores.as<float>(), prepared->decay.as<float>()};
    args.q = prepared->qg.ptr.get();
    args.k = prepared->kg.ptr.get();
  }

  if (packed) {  // the walks and the sums to compute, in one upload
    const std::size_t n_walks = schedule.walks.size(), n_sums = schedule.sums.size();
    std::vector<TensorCoreWork> items(schedule.walks);
    items.insert(items.end(), schedule.sums.begin(), schedule.sums.end());
    StreamBuffer work(items.size() * sizeof(TensorCoreWork), stream, "tensor-core fused: work list");
    detail::check_launch(cudaMemcpyAsync(work.ptr.get(), items.data(), items.size() * sizeof(TensorCoreWork),
                                         cudaMemcpyHostToDevice, stream),
                         "tensor-core fused: work list upload");
    const std::size_t rows = std::size_t(schedule.sum_rows) * args.H;
    StreamBuffer sums(rows * state_elems * sizeof(float), stream, "tensor-core fused: segment states");
    StreamBuffer zsums(normalize ? rows * args.DK * sizeof(float) : 0, stream, "tensor-core fused: segment key sums");
    StreamBuffer decays(segment_decay_floats(rows) * sizeof(float), stream, "tensor-core fused: segment decays");
    channel_ops.seg_decay = decays.as<float>();
    if (n_sums > 0) {
      args.work = work.as<TensorCoreWork>() + n_walks;
      with_shape(sum_bv, [&](auto dk, auto bv, auto norm, auto gate, auto pad) {
        detail::launch_segment_sums<E, decltype(dk)::value, decltype(bv)::value, decltype(norm)::value,
                                    decltype(pad)::value, decltype(gate)::value>(
            args, dim3(dv_blocks(args.DV, sum_bv) * args.H * n_sums), sums.as<float>(), zsums.as<float>(), stream,
            decays.as<float>(), channel_ops.decay);
      });
    }
    args.work = work.as<TensorCoreWork>();
    args.seg_sums = sums.as<float>();
    args.seg_zsums = zsums.as<float>();
    if (n_walks > 0)
      with_shape(block_dv, [&](auto dk, auto bv, auto norm, auto gate, auto pad) {
        detail::launch_fused_tensor_core<E, decltype(dk)::value, decltype(bv)::value, OutT, SnapT, decltype(norm)::value,
                                         decltype(pad)::value, decltype(gate)::value>(
            args, dim3(dv_blocks(args.DV, block_dv) * args.H * n_walks), stream, decays.as<float>(), &channel_ops);
      });
    return {block_dv, segments};
  }

  std::unique_ptr<StreamBuffer> sums, zsums, decays;
  if (segments > 1) {
    const SegmentSplit split = split_segments(NT, segments);
    args.seg_chunks = split.seg_chunks;
    segments = split.segments;
    const std::size_t rows = std::size_t(args.B) * args.H * segments;
    sums = std::make_unique<StreamBuffer>(rows * state_elems * sizeof(float), stream, "tensor-core fused: segment states");
    zsums = std::make_unique<StreamBuffer>(normalize ? rows * args.DK * sizeof(float) : 0, stream,
                                           "tensor-core fused: segment key sums");
    decays = std::make_unique<StreamBuffer>(segment_decay_floats(rows) * sizeof(float), stream,
                                            "tensor-core fused: segment decays");
    channel_ops.seg_decay = decays->as<float>();
    with_shape(sum_bv, [&](auto dk, auto bv, auto norm, auto gate, auto pad) {
      detail::launch_segment_sums<E, decltype(dk)::value, decltype(bv)::value, decltype(norm)::value,
                                  decltype(pad)::value, decltype(gate)::value>(
          args, dim3(dv_blocks(args.DV, sum_bv), segments, args.B * args.H), sums->as<float>(), zsums->as<float>(),
          stream, decays->as<float>(), channel_ops.decay);
    });
    args.seg_sums = sums->as<float>();
    args.seg_zsums = zsums->as<float>();
  }
  with_shape(block_dv, [&](auto dk, auto bv, auto norm, auto gate, auto pad) {
    detail::launch_fused_tensor_core<E, decltype(dk)::value, decltype(bv)::value, OutT, SnapT, decltype(norm)::value,
                                     decltype(pad)::value, decltype(gate)::value>(
        args, dim3(dv_blocks(args.DV, block_dv), args.B * args.H, segments), stream,
        decays ? decays->as<float>() : nullptr, &channel_ops);
  });
  return {block_dv, segments};
}

}  // namespace linattn::cuda
