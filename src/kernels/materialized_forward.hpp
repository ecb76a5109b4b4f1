// The `materialized` variant (README.md "The variants", fla's chunk_fwd_h +
// chunk_fwd_o): kernel 1 walks the chunks of each (DV block, batch*head) and
// stores every snapshot h[c]; kernel 2 computes o for all chunks in parallel
// from those snapshots. h round-trips through device memory, in the snapshot
// type (as fla's chunk_fwd_o reads its stored h). Both kernels iterate over
// sequences (SequenceMap): kernel 1 over (DV block, sequence*head), kernel 2
// over the global chunks of all sequences, so packed variable-length batches
// take the same path.
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

// Kernel 1: h[c] = S before chunk c; S += K_c^T V_c; final_state = S.
template <class Views, class Snapshots>
struct MaterializedStatePass : KernelShape, BlockPlan {
  using Acc = typename Views::acc_type;
  Views views;
  Snapshots snapshots;
  SequenceMap seqs;
  TileGemm gemm;

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
    for (int c = 0; c < seq.num_chunks; ++c) {
      const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
      m.team_barrier();
      store_snapshot(m, snapshots, S, seq.h_b, seq.h_c0 + c, h, d0);
      load_token_tile(m, K, views.k, b, t0, L, h, 0, DK);
      load_token_tile(m, V, views.v, b, t0, L, h, d0, W);
      const ChunkDecay<Acc> decay = chunk_decay(m, Bd, views, b, t0, L, h);
      m.team_barrier();
      state_update(m, gemm, K, V, S, decay);
    }
    store_state(m, views.final_state, S, n, h, d0);
  }
};

// Kernel 2: O_c = scale (Q_c h[c] + tril(Q_c K_c^T) V_c), all chunks at once.
template <class Views, class Snapshots>
struct MaterializedOutputPass : KernelShape, BlockPlan {
  using Acc = typename Views::acc_type;
  Views views;
  Snapshots snapshots;
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
    const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
    load_snapshot(m, S, snapshots, seq.h_b, seq.h_c0 + c, h, d0);
    load_token_tile(m, Q, views.q, b, t0, L, h, 0, DK);
    load_token_tile(m, K, views.k, b, t0, L, h, 0, DK);
    load_token_tile(m, V, views.v, b, t0, L, h, d0, W);
    const ChunkDecay<Acc> decay = chunk_decay(m, Bd, views, b, t0, L, h);
    m.team_barrier();
    chunk_output(m, gemm, scale, Q, K, V, S, A, O, decay);
    store_token_tile(m, views.o, O, b, t0, L, h, d0, W);
  }
};

template <class Views, class Snapshots>
ScratchPlan run_materialized_with(const Problem& p, const Views& views, const Snapshots& snapshots,
                                  const SequenceMap& seqs, std::int64_t block_dv, int team_size, TileGemm gemm) {
  using StatePass = MaterializedStatePass<Views, Snapshots>;
  using OutputPass = MaterializedOutputPass<Views, Snapshots>;
  using Acc = typename Views::acc_type;
  // One block width for both kernels, sized by the larger (output) pass.
  const ScratchPlan plan =
      plan_scratch(p.DV, block_dv, [&](std::int64_t w) { return OutputPass::scratch_bytes(p, w, decay_extent(p, views)); });
  const KernelShape shape = kernel_shape(p);
  const BlockPlan blocks = block_plan(plan, p.DV);
  const int num_blocks = blocks.num_blocks;
  {
    ScopedRegion region("linattn::materialized::states");
    const std::size_t bytes = StatePass::scratch_bytes(p, plan.block_dv, decay_extent(p, views));
    const int level = bytes <= static_cast<std::size_t>(TeamPolicy::scratch_size_max(0)) ? 0 : 1;
    const StatePass kernel{shape, {blocks.block_dv, num_blocks, level}, views, snapshots, seqs, gemm};
    const int league = static_cast<int>(num_blocks * p.num_sequences() * p.H);
    auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
    Kokkos::parallel_for("linattn::materialized_states", policy.set_scratch_size(level, Kokkos::PerTeam(bytes)), kernel);
  }
  {
    ScopedRegion region("linattn::materialized::outputs");
    const OutputPass kernel{shape, blocks, views, snapshots, seqs, static_cast<Acc>(p.scale), gemm};
    const int league = static_cast<int>(seqs.total_chunks * num_blocks * p.H);
    auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
    Kokkos::parallel_for("linattn::materialized_outputs", policy.set_scratch_size(plan.level, Kokkos::PerTeam(plan.bytes)), kernel);
  }
  return plan;
}

// Uses the caller's snapshot View when it is present; otherwise an internal
// buffer in the accumulation type that lives only for this call.
template <class Views>
ScratchPlan run_materialized(const Problem& p, const Views& views, const SequenceMap& seqs, std::int64_t block_dv,
                             int team_size, TileGemm gemm) {
  ScopedRegion region("linattn::materialized");
  if (views.h.extent(0) > 0) return run_materialized_with(p, views, views.h, seqs, block_dv, team_size, gemm);
  using Acc = typename Views::acc_type;
  const std::vector<std::int64_t> hs = p.h_shape();
  DeviceView5<Acc> buffer(Kokkos::view_alloc(std::string("linattn::h_buffer"), Kokkos::WithoutInitializing), hs[0],
                          hs[1], hs[2], hs[3], hs[4]);
  return run_materialized_with(p, views, buffer, seqs, block_dv, team_size, gemm);
}

}  // namespace linattn
