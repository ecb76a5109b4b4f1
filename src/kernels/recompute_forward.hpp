// The `recompute` variant (README.md "The variants"): league over (chunk, DV block,
// batch*head); every team rebuilds the prefix state of its chunk from scratch,
// (NT - 1) / 2 redundant K^T V per chunk on average. Kept to show the O(T^2)
// cost of putting the sequence axis into the league. The chunk axis of the
// league is the global chunk index over all sequences (SequenceMap), so a
// packed variable-length batch rebuilds prefixes within each sequence only.
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
struct RecomputeForward : KernelShape, BlockPlan {
  using Acc = typename Views::acc_type;
  Views views;
  SequenceMap seqs;
  Acc scale;
  TileGemm gemm;

  static std::size_t scratch_bytes(const Problem& p, std::int64_t bdv, DecayExtent decay = {}) {
    std::vector<std::pair<std::int64_t, std::int64_t>> tiles{{p.chunk, p.DK}, {p.chunk, p.DK}, {p.chunk, bdv}, {p.chunk, p.chunk}, {p.DK, bdv}, {p.chunk, bdv}};
    if (decay.rows > 0) tiles.push_back({decay.rows, decay.cols});
    return tile_bytes<Acc>(tiles);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int g = m.league_rank() % seqs.total_chunks;
    const int rest = m.league_rank() / seqs.total_chunks;
    const int bv = rest % num_blocks, h = rest / num_blocks;
    int n = 0, c = 0;
    seqs.locate_chunk(g, n, c);
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b;
    const int d0 = bv * block_dv, W = DV - d0 < block_dv ? DV - d0 : block_dv;
    Tile<Acc> Q(m.team_scratch(level), C, DK), K(m.team_scratch(level), C, DK), V(m.team_scratch(level), C, W);
    Tile<Acc> A(m.team_scratch(level), C, C), S(m.team_scratch(level), DK, W), O(m.team_scratch(level), C, W);
    const Tile<Acc> Bd = decay_tile<Acc>(m, level, views, C, DK);

    // (1) S = S0 + sum_{c' < c} K_c'^T V_c' (every earlier chunk of the sequence is full; gated: each decayed).
    load_state(m, S, views.initial_state, n, h, d0);
    for (int cp = 0; cp < c; ++cp) {
      m.team_barrier();
      load_token_tile(m, K, views.k, b, seq.t0 + cp * C, C, h, 0, DK);
      load_token_tile(m, V, views.v, b, seq.t0 + cp * C, C, h, d0, W);
      const ChunkDecay<Acc> decay = chunk_decay(m, Bd, views, b, seq.t0 + cp * C, C, h);
      m.team_barrier();
      state_update(m, gemm, K, V, S, decay);
    }
    m.team_barrier();
    const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
    load_token_tile(m, Q, views.q, b, t0, L, h, 0, DK);
    load_token_tile(m, K, views.k, b, t0, L, h, 0, DK);
    load_token_tile(m, V, views.v, b, t0, L, h, d0, W);
    if (views.h.extent(0) > 0) store_snapshot(m, views.h, S, seq.h_b, seq.h_c0 + c, h, d0);
    m.team_barrier();  // every thread is done with the last prefix chunk's b
    const ChunkDecay<Acc> decay = chunk_decay(m, Bd, views, b, t0, L, h);
    m.team_barrier();
    // (2) + (3): O = scale (Q S + tril(Q K^T) V).
    chunk_output(m, gemm, scale, Q, K, V, S, A, O, decay);
    store_token_tile(m, views.o, O, b, t0, L, h, d0, W);
    if (c == seq.num_chunks - 1) {  // the last chunk's team owns the final state
      state_update(m, gemm, K, V, S, decay);
      store_state(m, views.final_state, S, n, h, d0);
    }
  }
};

template <class Views>
ScratchPlan run_recompute(const Problem& p, const Views& views, const SequenceMap& seqs, std::int64_t block_dv,
                          int team_size, TileGemm gemm) {
  ScopedRegion region("linattn::recompute");
  using Kernel = RecomputeForward<Views>;
  const ScratchPlan plan =
      plan_scratch(p.DV, block_dv, [&](std::int64_t w) { return Kernel::scratch_bytes(p, w, decay_extent(p, views)); });
  const Kernel kernel{kernel_shape(p), block_plan(plan, p.DV), views, seqs, static_cast<typename Kernel::Acc>(p.scale),
                      gemm};
  const int league = static_cast<int>(seqs.total_chunks * kernel.num_blocks * p.H);
  auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
  Kokkos::parallel_for("linattn::recompute_forward", policy.set_scratch_size(plan.level, Kokkos::PerTeam(plan.bytes)), kernel);
  return plan;
}

}  // namespace linattn
