// The backward on NVIDIA tensor cores (mma.sync m16n8k16, bf16/fp16 operands,
// or fp32 ones split into bf16 hi + lo, three products each: mma_primitives.hpp;
// fp32 accumulation), chunk 64, every head size up to DK 256 and DV 512
// (README.md "The backward", docs/ARCHITECTURE.md "The tensor-core backward"):
//
//  1. state_gradient.hpp: one block per (DV block, sequence, head) walks the
//     chunks in reverse with its strip of dS in registers and stores dS after
//     each chunk into dh[c]; ends with dh0.
//  2. the chunk gradients dq, dk, dv from Q, K, V, dO, h[c] and dh[c], all
//     chunks independent: chunk_gradient.hpp holds a whole head of DK, DV in
//     {64, 128} per block; chunk_gradient_tiled.hpp takes every other head
//     size in 64 x 64 tiles (zero-padded on chip).
// Gated (args.g or args.g_gamma; gate_gradient.hpp): the chunks' cumulative
// log-decays first, the gated instantiations of both kernels, then dg.
// Per key channel (args.gk, GLA): channel_gate_prep.hpp's decayed queries and
// keys, state decays and scores first, the walk on them, the tiled chunk
// kernels' channel instantiations, then channel_gate_gradient.hpp (dq, dk, dgk).
//
// Why not one reverse walk that also writes dq, dk, dv: dq and dk sum over
// every DV column, so a walk split into DV blocks (which the forward needs for
// enough blocks) would have to add partial dq and dk across blocks, and one
// block holding all of dS (64 KB of fp32 at 128 x 128) leaves one block per SM
// walking 256 chunks in series. The chunk pass instead has B * NT * H
// independent blocks; dh costs one more write and read of the size of h. P and
// A are rounded once to 16 bits, as dh and h are, as fla's backward rounds them
// (docs/NUMERICS.md, tensor_core_backward_level; BENCHMARKS.md has both sides'
// errors on the very same inputs).
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/chunk_gradient.hpp"
#include "kernels/cuda/chunk_gradient_tiled.hpp"
#include "kernels/cuda/channel_gate_gradient.hpp"
#include "kernels/cuda/channel_gate_prep.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/gate_gradient.hpp"
#include "kernels/cuda/state_gradient.hpp"
#include "kernels/cuda/tile_rules.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace linattn::cuda {

namespace detail {

// The type of gk's off-diagonal score operands in the backward
// (channel_gate_prep.hpp): dv's intra-chunk term A^T dO is nearly all of dv
// under strong decays, and bf16 operands (8 significant bits) made those scores
// coarser than fla's TF32 products, dv about 2% further from its fp64 value;
// split hi + lo they are exact to fp32's level. fp16's 11 bits match TF32.
template <class E>
using ScoreOperand = std::conditional_t<std::is_same<E, __nv_bfloat16>::value, float, E>;

// all_shared: ask for the largest shared-memory carveout, so that blocks of
// over half of it (the fp32 tiled kernels, chunk_gradient_tiled.hpp's
// kTiledStages) still run two to an SM.
template <class Kernel>
void launch(Kernel kernel, std::size_t bytes, int blocks, int threads, const TensorCoreBackwardArgs& args,
            cudaStream_t stream, const char* what, bool all_shared = false) {
  check_launch(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
               "cudaFuncSetAttribute");
  if (all_shared)
    check_launch(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      static_cast<int>(cudaSharedmemCarveoutMaxShared)),
                 "cudaFuncSetAttribute");
  kernel<<<blocks, threads, bytes, stream>>>(args);
  check_launch(cudaGetLastError(), what);
}

}  // namespace detail

// Runs both kernels on `stream`. E: the inputs' and outputs' type
// (__nv_bfloat16, __half or float); SnapT: h's (E, __nv_bfloat16 or float).
// args.seqs, args.chunks and dh's padding are set here; dh is allocated here.
// Gated: args.g or args.g_gamma, and args.dg; the decays and dg's shares are
// allocated here.
// compact: the whole-head chunk kernel shares one tile between h[c] and dh[c]
// (false: separate tiles, heads of whole tiles only). tiled: the tiled chunk
// kernels for every head (tests and the standalone harness compare the two).
template <class E, class SnapT>
void run_tensor_core_backward(TensorCoreBackwardArgs args, int B, std::int64_t T,
                              const std::vector<std::int64_t>* cu_seqlens, int num_sms, cudaStream_t stream,
                              bool compact = true, bool tiled = false) {
  if (args.DK < 1 || args.DK > kMaxTensorCoreDK || args.DV < 1 || args.DV > kMaxTensorCoreDV)
    throw std::invalid_argument("tensor-core backward: DK must be in 1..256 and DV in 1..512");
  const BackwardWork work = backward_work(B, T, cu_seqlens);
  const std::size_t seq_bytes = work.seqs.size() * sizeof(BackwardSequence);
  const std::size_t chunk_bytes = work.chunks.size() * sizeof(BackwardChunk);
  StreamBuffer tables(seq_bytes + chunk_bytes, stream, "tensor-core backward: work lists");
  std::vector<unsigned char> host(seq_bytes + chunk_bytes);
  std::copy_n(reinterpret_cast<const unsigned char*>(work.seqs.data()), seq_bytes, host.data());
  std::copy_n(reinterpret_cast<const unsigned char*>(work.chunks.data()), chunk_bytes, host.data() + seq_bytes);
  detail::check_launch(cudaMemcpyAsync(tables.ptr.get(), host.data(), host.size(), cudaMemcpyHostToDevice, stream),
                       "tensor-core backward: work list upload");  // pageable: copied out before the call returns
  args.seqs = tables.as<BackwardSequence>();
  args.chunks = reinterpret_cast<const BackwardChunk*>(tables.as<unsigned char>() + seq_bytes);
  constexpr bool kFp32 = detail::kFp32Tiles<E>;
  const bool channel = args.gk != nullptr;  // the tiled kernels only
  const bool whole_head = !tiled && !channel && whole_head_gradient(args.DK, args.DV, kFp32);
  args.dh_rows = gradient_rows(args.DK, args.DV, kFp32);
  args.dh_cols = gradient_cols(args.DK, args.DV, kFp32);
  StreamBuffer dh(work.chunks.size() * args.H * std::size_t(args.dh_rows) * args.dh_cols * sizeof(E), stream,
                  "tensor-core backward: dh");
  args.dh = dh.ptr.get();

  // The gated levels: each chunk's decays first (every later kernel reads them).
  const bool gated = args.g != nullptr || args.g_gamma != nullptr;
  const int chunk_heads = static_cast<int>(work.chunks.size() * args.H);
  args.num_tokens = static_cast<std::int64_t>(B) * T;
  args.num_chunks = static_cast<int>(work.chunks.size());
  args.dg_parts = !gated ? 0 : whole_head ? 2 : (args.DK + detail::kGradientBlock - 1) / detail::kGradientBlock;
  const std::size_t token_heads = gated ? std::size_t(args.num_tokens) * args.H : 0;
  StreamBuffer decays(2 * token_heads * sizeof(float), stream, "tensor-core backward: chunk decays");
  StreamBuffer dg_part((token_heads + (gated ? std::size_t(chunk_heads) : 0)) * args.dg_parts * sizeof(float), stream,
                       "tensor-core backward: dg shares");
  if (gated) {
    if (!args.dg) throw std::invalid_argument("tensor-core backward: a gate needs dg");
    args.log2_decay = decays.as<float>();
    args.row_decay = args.log2_decay + token_heads;
    args.dg_part = dg_part.as<float>();
    args.state_part = args.dg_part + token_heads * args.dg_parts;
    if (chunk_heads > 0) {
      constexpr int per_block = detail::kLogDecayThreads / 32;
      detail::chunk_log_decay_kernel<<<(chunk_heads + per_block - 1) / per_block, detail::kLogDecayThreads, 0, stream>>>(
          args, chunk_heads);
      detail::check_launch(cudaGetLastError(), "tensor-core backward: chunk decays");
    }
  }

  // GLA's gk: the forward's prepared operands (channel_gate_prep.hpp), which the walk reads.
  const std::size_t key_elems = channel ? std::size_t(args.num_tokens) * args.H * args.DK : 0;
  const std::size_t chunk_keys = channel ? std::size_t(chunk_heads) * args.DK : 0;
  StreamBuffer operands(2 * key_elems * sizeof(E), stream, "tensor-core backward: decayed queries and keys");
  StreamBuffer channel_f32((std::size_t(args.num_tokens) * args.H * detail::kChunk + 2 * key_elems + 2 * chunk_keys) *
                               (channel ? sizeof(float) : 0),
                           stream, "tensor-core backward: scores, state gradients and decays");
  if (channel) {
    if (!args.dg) throw std::invalid_argument("tensor-core backward: gk needs dgk");
    args.qg = operands.as<E>();
    args.kg = operands.as<E>() + key_elems;
    args.scores = channel_f32.as<float>();
    args.dq_state = args.scores + std::size_t(args.num_tokens) * args.H * detail::kChunk;
    args.dk_state = args.dq_state + key_elems;
    args.state_rows = args.dk_state + key_elems;
    float* decay = args.state_rows + chunk_keys;
    args.channel_decay = decay;
    ChannelGateArgs prep{};
    prep.q = args.q;
    prep.k = args.k;
    prep.gk = args.gk;
    prep.qg = operands.as<E>();
    prep.kg = operands.as<E>() + key_elems;
    prep.scores = args.scores;
    prep.decay = decay;
    prep.B = 1;
    prep.T = 0;
    prep.H = args.H;
    prep.DK = args.DK;
    prep.scale = args.scale;
    prep.chunks = args.chunks;  // the work list's chunk table, already on the device
    launch_channel_gate_prep<E, detail::ScoreOperand<E>>(prep, static_cast<int>(work.chunks.size()), stream);
    detail::check_launch(cudaGetLastError(), "tensor-core backward: gk operands");
  }

  const std::int64_t walks = static_cast<std::int64_t>(work.seqs.size()) * args.H;
  const int bv = state_gradient_block(args.DK, args.dh_cols, walks, num_sms);
  // Heads that fill their DK tile and whole blocks of 64 columns run without bounds checks.
  const bool bounded = !(args.DK == dk_tile(args.DK) && args.DV % detail::kGradientBlock == 0);
  auto walk = [&](auto dkt, auto bvc, auto bnd) {
    constexpr int DKT = decltype(dkt)::value, BV = decltype(bvc)::value;
    constexpr bool kB = decltype(bnd)::value;
    const int blocks = static_cast<int>(walks * (args.dh_cols / BV));
    if (channel)
      detail::launch(detail::state_gradient_kernel<E, DKT, BV, kB, false, true>,
                     detail::StateGradientLayout<E, DKT, BV, false, kB>::bytes, blocks, detail::kStateGradientThreads,
                     args, stream, "tensor-core backward: state gradient");
    else if (gated)
      detail::launch(detail::state_gradient_kernel<E, DKT, BV, kB, true>,
                     detail::StateGradientLayout<E, DKT, BV, true, kB>::bytes, blocks, detail::kStateGradientThreads, args,
                     stream, "tensor-core backward: state gradient");
    else
      detail::launch(detail::state_gradient_kernel<E, DKT, BV, kB>, detail::StateGradientLayout<E, DKT, BV, false, kB>::bytes,
                     blocks, detail::kStateGradientThreads, args, stream, "tensor-core backward: state gradient");
  };
  auto with_bv = [&](auto dkt, auto bnd) {
    constexpr int DKT = decltype(dkt)::value;
    if constexpr (DKT == 64) {
      if (bv == 64) return walk(dkt, std::integral_constant<int, 64>{}, bnd);
    }
    if (bv == 32) return walk(dkt, std::integral_constant<int, 32>{}, bnd);
    walk(dkt, std::integral_constant<int, 16>{}, bnd);
  };
  auto with_dkt = [&](auto bnd) {
    switch (dk_tile(args.DK)) {
      case 64: return with_bv(std::integral_constant<int, 64>{}, bnd);
      case 128: return with_bv(std::integral_constant<int, 128>{}, bnd);
      default: return with_bv(std::integral_constant<int, 256>{}, bnd);
    }
  };
  if (bounded) with_dkt(std::true_type{});
  else with_dkt(std::false_type{});

  if (work.chunks.empty()) return;
  // dg from the chunk kernels' shares, once they are done (same stream).
  auto gate_gradient = [&] {
    if (gated) {
      constexpr int per_block = detail::kGateGradientThreads / 32;
      detail::launch(detail::gate_gradient_kernel, 0, (chunk_heads + per_block - 1) / per_block,
                     detail::kGateGradientThreads, args, stream, "tensor-core backward: dg");
    }
  };
  const int nkb = (args.DK + detail::kGradientBlock - 1) / detail::kGradientBlock;
  const int nvb = (args.DV + detail::kGradientBlock - 1) / detail::kGradientBlock;
  if (channel) {  // dv reads the scores A before the query-key kernel overwrites them with dA
    auto channel_chunks = [&](auto bnd) {
      constexpr bool kB = decltype(bnd)::value;
      detail::launch(detail::value_gradient_kernel<E, kB, false, true>, detail::kChannelValueGradientBytes<E>,
                     chunk_heads * nvb,
                     detail::kTiledGradientThreads, args, stream, "tensor-core backward: dv", kFp32);
      detail::launch(detail::query_key_gradient_kernel<E, SnapT, kB, false, true>, detail::kQueryKeyGradientBytes<E>,
                     chunk_heads * nkb, detail::kTiledGradientThreads, args, stream, "tensor-core backward: dq, dk", kFp32);
    };
    if (bounded) channel_chunks(std::true_type{});
    else channel_chunks(std::false_type{});
    auto kernel = detail::channel_gate_gradient_kernel<E>;
    detail::check_launch(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(detail::ChannelGradientLayout<float>::bytes)),
                         "cudaFuncSetAttribute");
    kernel<<<dim3(static_cast<unsigned>(work.chunks.size()), args.H), detail::kChannelGradientThreads,
             detail::ChannelGradientLayout<float>::bytes, stream>>>(args);
    detail::check_launch(cudaGetLastError(), "tensor-core backward: dq, dk, dgk");
    return;
  }
  if (!whole_head) {
    auto tiled = [&](auto bnd, auto gate) {
      constexpr bool kB = decltype(bnd)::value, kG = decltype(gate)::value;
      const std::size_t extra = kG ? detail::kGateBytes : 0;
      detail::launch(detail::query_key_gradient_kernel<E, SnapT, kB, kG>, detail::kQueryKeyGradientBytes<E> + extra,
                     chunk_heads * nkb, detail::kTiledGradientThreads, args, stream, "tensor-core backward: dq, dk", kFp32);
      detail::launch(detail::value_gradient_kernel<E, kB, kG>, detail::kValueGradientBytes<E> + extra, chunk_heads * nvb,
                     detail::kTiledGradientThreads, args, stream, "tensor-core backward: dv", kFp32);
    };
    auto with_bound = [&](auto gate) {
      if (bounded) tiled(std::true_type{}, gate);
      else tiled(std::false_type{}, gate);
    };
    if (gated) with_bound(std::true_type{});
    else with_bound(std::false_type{});
    gate_gradient();
    return;
  }
  if constexpr (!kFp32) {  // the whole-head kernel: 16-bit tiles only, DK and DV in tiles of 64 or 128
    auto chunks = [&](auto dk, auto dv, auto bnd) {
      constexpr int DK = decltype(dk)::value, DV = decltype(dv)::value;
      constexpr bool kB = decltype(bnd)::value;
      if (gated)  // compact only
        return detail::launch(detail::chunk_gradient_kernel<E, DK, DV, SnapT, true, true, kB>,
                              detail::ChunkGradientLayout<DK, DV, true, true>::bytes, chunk_heads,
                              detail::kChunkGradientThreads, args, stream, "tensor-core backward: chunk gradients");
      if constexpr (!kB)
        if (!compact)
          return detail::launch(detail::chunk_gradient_kernel<E, DK, DV, SnapT, false>,
                                detail::ChunkGradientLayout<DK, DV, false>::bytes, chunk_heads,
                                detail::kChunkGradientThreads, args, stream, "tensor-core backward: chunk gradients");
      detail::launch(detail::chunk_gradient_kernel<E, DK, DV, SnapT, true, false, kB>,
                     detail::ChunkGradientLayout<DK, DV, true>::bytes, chunk_heads, detail::kChunkGradientThreads, args,
                     stream, "tensor-core backward: chunk gradients");
    };
    const int dkt = whole_head_tile(args.DK), dvt = whole_head_tile(args.DV);
    const bool padded = args.DK != dkt || args.DV != dvt;
    auto with_bound = [&](auto dk, auto dv) {
      if (padded) chunks(dk, dv, std::true_type{});
      else chunks(dk, dv, std::false_type{});
    };
    auto with_dv = [&](auto dk) {
      if (dvt == 128) with_bound(dk, std::integral_constant<int, 128>{});
      else with_bound(dk, std::integral_constant<int, 64>{});
    };
    if (dkt == 128) with_dv(std::integral_constant<int, 128>{});
    else with_dv(std::integral_constant<int, 64>{});
    gate_gradient();
  }
}

}  // namespace linattn::cuda
