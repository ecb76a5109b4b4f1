// The state pass of the fused variant's TeamPolicy kernel (fused_forward.hpp):
// the same league, the same DV blocks and the same state_update step
// (chunk_steps.hpp) per chunk, without Q, A, O or h. Its final state is therefore the fused
// forward's, bit for bit, at about a third of its products (docs/PARALLEL.md
// "Context parallel"). Gated (levels 2 and 3), each chunk's decays come from
// the same chunk_decay (chunk_gate.hpp), so the decayed update is the forward's too.
#pragma once

#include "core/problem.hpp"
#include "kernels/chunk_steps.hpp"
#include "kernels/fused_forward.hpp"
#include "kernels/kernel_shape.hpp"
#include "kernels/scratch_plan.hpp"
#include "kernels/sequence_map.hpp"
#include "kernels/team_gemm.hpp"
#include "kernels/tile_ops.hpp"

namespace linattn {

template <class In, class Acc>
struct StatePassViews {
  DeviceView4<const In> k, v;
  DeviceView4<const Acc> initial_state;  // [N, H, DK, DV] or empty
  DeviceView4<Acc> final_state;          // [N, H, DK, DV]
  // The gate (core/gate.hpp), at most one, in Acc: as ForwardViews holds it.
  DeviceView3<const Acc> g;              // [B, T, H] (per token) or empty
  DeviceView1<const Acc> g_gamma;        // [H] (per head) or empty
  DeviceView4<const Acc> gk;             // [B, T, H, DK] (per key channel) or empty

  KOKKOS_INLINE_FUNCTION bool gated() const { return g.extent(0) > 0 || g_gamma.extent(0) > 0 || gk.extent(0) > 0; }
  KOKKOS_INLINE_FUNCTION bool channel_gated() const { return gk.extent(0) > 0; }
};

template <class In, class Acc>
struct FusedStatePass : KernelShape, BlockPlan {
  StatePassViews<In, Acc> views;
  SequenceMap seqs;
  TileGemm gemm;

  // Gated runs add the chunk's cumulative log-decays b and their factors (chunk_gate.hpp).
  static std::size_t scratch_bytes(const Problem& p, std::int64_t bdv, DecayExtent decay = {}) {
    std::vector<std::pair<std::int64_t, std::int64_t>> tiles{{p.chunk, p.DK}, {p.chunk, bdv}, {p.DK, bdv}};
    if (decay.rows > 0) tiles.push_back({decay.rows, decay.cols});
    return tile_bytes<Acc>(tiles);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const SequenceBlock blk = sequence_block(seqs, m.league_rank(), num_blocks, H, block_dv, DV);
    const Sequence& seq = blk.seq;
    const int n = blk.n, h = blk.h, b = seq.b, d0 = blk.d0, W = blk.W;
    Tile<Acc> K(m.team_scratch(level), C, DK), V(m.team_scratch(level), C, W), S(m.team_scratch(level), DK, W);
    const Tile<Acc> Bd = decay_tile<Acc>(m, level, views, C, DK);
    load_state(m, S, views.initial_state, n, h, d0);
    m.team_barrier();
    for (int c = 0; c < seq.num_chunks; ++c) {
      const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
      load_token_tile(m, K, views.k, b, t0, L, h, 0, DK);
      load_token_tile(m, V, views.v, b, t0, L, h, d0, W);
      const ChunkDecay<Acc> decay = chunk_decay(m, Bd, views, b, t0, L, h);
      m.team_barrier();
      state_update(m, gemm, K, V, S, decay);  // the fused forward's state update
    }
    store_state(m, views.final_state, S, n, h, d0);
  }
};

// The DV blocks are the fused forward's (its scratch plan, gated or not), so
// that every state element is summed by the same product as there.
template <class In, class Acc, class ForwardViewsType>
void run_fused_state_pass(const Problem& p, const StatePassViews<In, Acc>& views, std::int64_t block_dv, int team_size,
                          TileGemm gemm) {
  ScopedRegion region("linattn::fused_state_pass");
  const ScratchPlan forward_plan = plan_scratch(
      p.DV, block_dv, [&](std::int64_t w) { return FusedForward<ForwardViewsType>::scratch_bytes(p, w, decay_extent(p, views)); });
  using Kernel = FusedStatePass<In, Acc>;
  const std::size_t bytes = Kernel::scratch_bytes(p, forward_plan.block_dv, decay_extent(p, views));
  const int level = bytes <= static_cast<std::size_t>(TeamPolicy::scratch_size_max(0)) ? 0 : 1;
  const BlockPlan blocks = block_plan(forward_plan, p.DV);
  const Kernel kernel{kernel_shape(p), {blocks.block_dv, blocks.num_blocks, level}, views, make_sequence_map(p), gemm};
  const int league = static_cast<int>(kernel.num_blocks * p.num_sequences() * p.H);
  auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
  Kokkos::parallel_for("linattn::fused_state_pass", policy.set_scratch_size(level, Kokkos::PerTeam(bytes)), kernel);
}

}  // namespace linattn
