// The `recurrent` variant (README.md "The math", first two lines): token by token,
// S += k_t v_t^T (gated: S = exp(g_t) S + k_t v_t^T; per key channel S = diag(exp(gk_t)) S + k_t v_t^T),
// then o_t = scale S^T q_t. Not a chunked form (4 T DK DV
// FLOPs per head, no tile products): for decode-style workloads and short
// sequences. League over (DV block, sequence*head); each thread of the team
// owns a range of columns of the state strip S[:, dv block] (team scratch)
// and walks all tokens for them, so no barrier is needed between tokens. On a
// GPU a thread owns one column (neighbouring threads, neighbouring columns);
// on the host a contiguous range, so that the loops over columns run along
// rows of S and vectorize. The snapshot h[c] (the state before chunk c) is
// stored as the walk passes each chunk start, so the outputs are those of the
// chunked variants.
#pragma once

#include "core/half_types.hpp"
#include "core/problem.hpp"
#include "kernels/forward_views.hpp"
#include "kernels/kernel_shape.hpp"
#include "kernels/scratch_plan.hpp"
#include "kernels/sequence_map.hpp"

namespace linattn {

template <class Views>
struct RecurrentForward : KernelShape, BlockPlan {
  using Acc = typename Views::acc_type;
  using Snap = typename Views::snapshot_type;
  using Out = typename Views::output_type;
  Views views;
  SequenceMap seqs;
  Acc scale;

  static std::size_t scratch_bytes(const Problem& p, std::int64_t bdv) {
    return tile_bytes<Acc>({{p.DK, bdv}, {1, bdv}, {1, bdv}});  // S, and v_t and o_t of the block
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const SequenceBlock blk = sequence_block(seqs, m.league_rank(), num_blocks, H, block_dv, DV);
    const Sequence& seq = blk.seq;
    const int n = blk.n, h = blk.h, b = seq.b, d0 = blk.d0, W = blk.W;
    Tile<Acc> S(m.team_scratch(level), DK, W), Vt(m.team_scratch(level), 1, W), Ot(m.team_scratch(level), 1, W);
    const bool has_s0 = views.initial_state.extent(0) > 0, store_snapshots = views.h.extent(0) > 0;
    const bool gated = views.gated();
    const int width = host_execution ? (W + m.team_size() - 1) / m.team_size() : 1;  // columns per thread
    const int ranges = (W + width - 1) / width;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, ranges), [&](const int r) {
      const int j0 = r * width, j1 = j0 + width < W ? j0 + width : W;
      for (int i = 0; i < DK; ++i)
        for (int j = j0; j < j1; ++j) S(i, j) = has_s0 ? views.initial_state(n, h, i, d0 + j) : Acc(0);
      Acc* v = &Vt(0, 0);
      Acc* o = &Ot(0, 0);
      for (int s = 0; s < seq.length; ++s) {
        const int t = seq.t0 + s;
        if (store_snapshots && s % C == 0)  // h[c] = the state before chunk c of the sequence
          for (int i = 0; i < DK; ++i)
            for (int j = j0; j < j1; ++j) views.h(seq.h_b, seq.h_c0 + s / C, h, i, d0 + j) = from_acc<Snap>(S(i, j));
        for (int j = j0; j < j1; ++j) {
          v[j] = to_acc<Acc>(views.v(b, t, h, d0 + j));
          o[j] = Acc(0);
        }
        if (views.channel_gated()) {  // S = diag(a_t) S + k v^T, a_t = exp(gk_t) per key channel
          for (int i = 0; i < DK; ++i) {
            const Acc a = kernel_exp(views.gk(b, t, h, i));
            const Acc ki = to_acc<Acc>(views.k(b, t, h, i)), qi = to_acc<Acc>(views.q(b, t, h, i));
            Acc* Si = &S(i, 0);
            for (int j = j0; j < j1; ++j) {
              Si[j] = a * Si[j] + ki * v[j];
              o[j] += qi * Si[j];
            }
          }
        } else if (gated) {  // S = a_t S + k v^T, a_t = exp(g_t)
          const Acc a = kernel_exp(views.g.extent(0) > 0 ? views.g(b, t, h) : views.g_gamma(h));
          for (int i = 0; i < DK; ++i) {
            const Acc ki = to_acc<Acc>(views.k(b, t, h, i)), qi = to_acc<Acc>(views.q(b, t, h, i));
            Acc* Si = &S(i, 0);
            for (int j = j0; j < j1; ++j) {
              Si[j] = a * Si[j] + ki * v[j];
              o[j] += qi * Si[j];
            }
          }
        } else {
          for (int i = 0; i < DK; ++i) {
            const Acc ki = to_acc<Acc>(views.k(b, t, h, i)), qi = to_acc<Acc>(views.q(b, t, h, i));
            Acc* Si = &S(i, 0);
            for (int j = j0; j < j1; ++j) {
              Si[j] += ki * v[j];  // S += k v^T, then the readout sees it
              o[j] += qi * Si[j];
            }
          }
        }
        for (int j = j0; j < j1; ++j) views.o(b, t, h, d0 + j) = from_acc<Out>(scale * o[j]);
      }
      for (int i = 0; i < DK; ++i)
        for (int j = j0; j < j1; ++j) views.final_state(n, h, i, d0 + j) = S(i, j);
    });
  }
};

template <class Views>
ScratchPlan run_recurrent(const Problem& p, const Views& views, const SequenceMap& seqs, std::int64_t block_dv,
                          int team_size) {
  ScopedRegion region("linattn::recurrent");
  using Kernel = RecurrentForward<Views>;
  const ScratchPlan plan = plan_scratch(p.DV, block_dv, [&](std::int64_t w) { return Kernel::scratch_bytes(p, w); });
  const Kernel kernel{kernel_shape(p), block_plan(plan, p.DV), views, seqs, static_cast<typename Kernel::Acc>(p.scale)};
  const int league = static_cast<int>(kernel.num_blocks * p.num_sequences() * p.H);
  auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
  Kokkos::parallel_for("linattn::recurrent_forward", policy.set_scratch_size(plan.level, Kokkos::PerTeam(plan.bytes)),
                       kernel);
  return plan;
}

}  // namespace linattn
