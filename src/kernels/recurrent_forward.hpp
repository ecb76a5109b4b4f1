// The `recurrent` variant (seed 001 section 3.2): token by token,
// S += k_t v_t^T, then o_t = scale S^T q_t. Not a chunked form (4 T DK DV
// FLOPs per head, no tile products): for decode-style workloads and short
// sequences. League over (DV block, sequence*head); each thread of the team
// owns columns j of the state strip S[:, dv block] in team scratch and walks
// all tokens for them, so no barrier is needed between tokens. The snapshot
// h[c] (the state before chunk c) is stored as the walk passes each chunk
// start, so the outputs are those of the chunked variants.
#pragma once

#include "core/half_types.hpp"
#include "core/problem.hpp"
#include "kernels/forward_views.hpp"
#include "kernels/scratch_plan.hpp"
#include "kernels/sequence_map.hpp"

namespace linattn {

template <class Views>
struct RecurrentForward {
  using Acc = typename Views::acc_type;
  using Snap = typename Views::snapshot_type;
  using Out = typename Views::output_type;
  Views views;
  SequenceMap seqs;
  int H, DK, DV, C, block_dv, num_blocks, level;
  Acc scale;

  static std::size_t scratch_bytes(const Problem& p, std::int64_t bdv) { return tile_bytes<Acc>({{p.DK, bdv}}); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int bv = m.league_rank() % num_blocks, nh = m.league_rank() / num_blocks;
    const int n = nh / H, h = nh % H;
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b;
    const int d0 = bv * block_dv, W = DV - d0 < block_dv ? DV - d0 : block_dv;
    Tile<Acc> S(m.team_scratch(level), DK, W);
    const bool has_s0 = views.initial_state.extent(0) > 0, store_snapshots = views.h.extent(0) > 0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, W), [&](const int j) {
      for (int i = 0; i < DK; ++i) S(i, j) = has_s0 ? views.initial_state(n, h, i, d0 + j) : Acc(0);
      for (int s = 0; s < seq.length; ++s) {
        const int t = seq.t0 + s;
        if (store_snapshots && s % C == 0)  // h[c] = the state before chunk c of the sequence
          for (int i = 0; i < DK; ++i) views.h(seq.h_b, seq.h_c0 + s / C, h, i, d0 + j) = from_acc<Snap>(S(i, j));
        const Acc vj = to_acc<Acc>(views.v(b, t, h, d0 + j));
        Acc o = 0;
        for (int i = 0; i < DK; ++i) {
          S(i, j) += to_acc<Acc>(views.k(b, t, h, i)) * vj;  // S += k v^T, then the readout sees it
          o += to_acc<Acc>(views.q(b, t, h, i)) * S(i, j);
        }
        views.o(b, t, h, d0 + j) = from_acc<Out>(scale * o);
      }
      for (int i = 0; i < DK; ++i) views.final_state(n, h, i, d0 + j) = S(i, j);
    });
  }
};

template <class Views>
ScratchPlan run_recurrent(const Problem& p, const Views& views, const SequenceMap& seqs, std::int64_t block_dv,
                          int team_size) {
  ScopedRegion region("linattn::recurrent");
  using Kernel = RecurrentForward<Views>;
  const ScratchPlan plan = plan_scratch(p.DV, block_dv, [&](std::int64_t w) { return Kernel::scratch_bytes(p, w); });
  const int num_blocks = static_cast<int>(ceil_div(p.DV, plan.block_dv));
  Kernel kernel{views, seqs, static_cast<int>(p.H), static_cast<int>(p.DK), static_cast<int>(p.DV),
                static_cast<int>(p.chunk), static_cast<int>(plan.block_dv), num_blocks, plan.level,
                static_cast<typename Kernel::Acc>(p.scale)};
  const int league = static_cast<int>(num_blocks * p.num_sequences() * p.H);
  auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
  Kokkos::parallel_for("linattn::recurrent_forward", policy.set_scratch_size(plan.level, Kokkos::PerTeam(plan.bytes)),
                       kernel);
  return plan;
}

}  // namespace linattn
