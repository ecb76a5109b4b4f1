// The `fused` variant (README.md "The variants"): league over (DV block,
// batch*head); the chunk loop runs inside the team with the state strip
// S[:, dv block] kept in team scratch; o and the snapshot h[c] are written as
// the loop passes. Each chunk costs one K^T V: FLOPs linear in T. The league
// runs over sequences (SequenceMap), so packed variable-length batches take
// the same path: each sequence starts from its own initial state.
#pragma once

#include "core/problem.hpp"
#include "kernels/chunk_steps.hpp"
#include "kernels/forward_views.hpp"
#include "kernels/kernel_shape.hpp"
#include "kernels/scratch_plan.hpp"
#include "kernels/sequence_map.hpp"
#include "kernels/team_gemm.hpp"
#include "kernels/tile_ops.hpp"

namespace linattn {

template <class Views>
struct FusedForward : KernelShape, BlockPlan {
  using Acc = typename Views::acc_type;
  Views views;
  SequenceMap seqs;
  Acc scale;
  TileGemm gemm;

  // Gated runs add the chunk's cumulative log-decays b and their factors (chunk_gate.hpp).
  static std::size_t scratch_bytes(const Problem& p, std::int64_t bdv, DecayExtent decay = {}) {
    std::vector<std::pair<std::int64_t, std::int64_t>> tiles{{p.chunk, p.DK}, {p.chunk, p.DK}, {p.chunk, bdv}, {p.chunk, p.chunk}, {p.DK, bdv}, {p.chunk, bdv}};
    if (decay.rows > 0) tiles.push_back({decay.rows, decay.cols});
    return tile_bytes<Acc>(tiles);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const SequenceBlock blk = sequence_block(seqs, m.league_rank(), num_blocks, H, block_dv, DV);
    const Sequence& seq = blk.seq;
    const int n = blk.n, h = blk.h, b = seq.b, d0 = blk.d0, W = blk.W;
    Tile<Acc> Q(m.team_scratch(level), C, DK), K(m.team_scratch(level), C, DK), V(m.team_scratch(level), C, W);
    Tile<Acc> A(m.team_scratch(level), C, C), S(m.team_scratch(level), DK, W), O(m.team_scratch(level), C, W);
    const Tile<Acc> Bd = decay_tile<Acc>(m, level, views, C, DK);
    const bool store_snapshots = views.h.extent(0) > 0;

    load_state(m, S, views.initial_state, n, h, d0);
    m.team_barrier();
    for (int c = 0; c < seq.num_chunks; ++c) {
      const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
      load_token_tile(m, Q, views.q, b, t0, L, h, 0, DK);
      load_token_tile(m, K, views.k, b, t0, L, h, 0, DK);
      load_token_tile(m, V, views.v, b, t0, L, h, d0, W);
      if (store_snapshots) store_snapshot(m, views.h, S, seq.h_b, seq.h_c0 + c, h, d0);  // h[c] = state before chunk c
      const ChunkDecay<Acc> decay = chunk_decay(m, Bd, views, b, t0, L, h);
      m.team_barrier();
      chunk_output(m, gemm, scale, Q, K, V, S, A, O, decay);  // from S_prev
      store_token_tile(m, views.o, O, b, t0, L, h, d0, W);
      state_update(m, gemm, K, V, S, decay);  // after the output: the right shift
    }
    store_state(m, views.final_state, S, n, h, d0);
  }
};

template <class Views>
ScratchPlan run_fused(const Problem& p, const Views& views, const SequenceMap& seqs, std::int64_t block_dv,
                      int team_size, TileGemm gemm) {
  ScopedRegion region("linattn::fused");
  using Kernel = FusedForward<Views>;
  const ScratchPlan plan =
      plan_scratch(p.DV, block_dv, [&](std::int64_t w) { return Kernel::scratch_bytes(p, w, decay_extent(p, views)); });
  const Kernel kernel{kernel_shape(p), block_plan(plan, p.DV), views, seqs, static_cast<typename Kernel::Acc>(p.scale),
                      gemm};
  const int league = static_cast<int>(kernel.num_blocks * p.num_sequences() * p.H);
  auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
  Kokkos::parallel_for("linattn::fused_forward", policy.set_scratch_size(plan.level, Kokkos::PerTeam(plan.bytes)), kernel);
  return plan;
}

}  // namespace linattn
