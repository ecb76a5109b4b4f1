// The `fused` variant (seed 000 section 6.4.2): league over (DV block,
// batch*head); the chunk loop runs inside the team with the state strip
// S[:, dv block] kept in team scratch; o and the snapshot h[c] are written as
// the loop passes. Each chunk costs one K^T V: FLOPs linear in T.
#pragma once

#include "core/problem.hpp"
#include "kernels/forward_views.hpp"
#include "kernels/scratch_plan.hpp"
#include "kernels/team_gemm.hpp"
#include "kernels/tile_ops.hpp"

namespace linattn {

template <class Views>
struct FusedForward {
  using Acc = typename Views::acc_type;
  Views views;
  int T, H, DK, DV, C, NT, block_dv, num_blocks, level;
  Acc scale;
  TileGemm gemm;

  static std::size_t scratch_bytes(const Problem& p, std::int64_t bdv) {
    return tile_bytes<Acc>({{p.chunk, p.DK}, {p.chunk, p.DK}, {p.chunk, bdv}, {p.chunk, p.chunk}, {p.DK, bdv}, {p.chunk, bdv}});
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int bv = m.league_rank() % num_blocks, bh = m.league_rank() / num_blocks;
    const int b = bh / H, h = bh % H;
    const int d0 = bv * block_dv, W = DV - d0 < block_dv ? DV - d0 : block_dv;
    Tile<Acc> Q(m.team_scratch(level), C, DK), K(m.team_scratch(level), C, DK), V(m.team_scratch(level), C, W);
    Tile<Acc> A(m.team_scratch(level), C, C), S(m.team_scratch(level), DK, W), O(m.team_scratch(level), C, W);
    const bool store_snapshots = views.h.extent(0) > 0;

    load_state(m, S, views.initial_state, b, h, d0);
    m.team_barrier();
    for (int c = 0; c < NT; ++c) {
      const int t0 = c * C, L = T - t0 < C ? T - t0 : C;
      load_token_tile(m, Q, views.q, b, t0, L, h, 0, DK);
      load_token_tile(m, K, views.k, b, t0, L, h, 0, DK);
      load_token_tile(m, V, views.v, b, t0, L, h, d0, W);
      if (store_snapshots) store_snapshot(m, views.h, S, b, c, h, d0);  // h[c] = state before chunk c
      m.team_barrier();
      team_gemm<NoTrans, NoTrans>(m, gemm, scale, Q, S, Acc(0), O);  // O = scale Q S_prev
      team_gemm<NoTrans, Trans>(m, gemm, scale, Q, K, Acc(0), A);    // A = scale Q K^T
      mask_upper_triangle(m, A);
      m.team_barrier();
      team_gemm<NoTrans, NoTrans>(m, gemm, Acc(1), A, V, Acc(1), O);  // O += tril(A) V
      store_token_tile(m, views.o, O, b, t0, L, h, d0, W);
      team_gemm<Trans, NoTrans>(m, gemm, Acc(1), K, V, Acc(1), S);  // S += K^T V, after the output: the right shift
    }
    store_state(m, views.final_state, S, b, h, d0);
  }
};

template <class Views>
ScratchPlan run_fused(const Problem& p, const Views& views, std::int64_t block_dv, int team_size, TileGemm gemm) {
  ScopedRegion region("linattn::fused");
  using Kernel = FusedForward<Views>;
  const ScratchPlan plan = plan_scratch(p.DV, block_dv, [&](std::int64_t w) { return Kernel::scratch_bytes(p, w); });
  const int num_blocks = static_cast<int>(ceil_div(p.DV, plan.block_dv));
  Kernel kernel{views,
                static_cast<int>(p.T), static_cast<int>(p.H), static_cast<int>(p.DK), static_cast<int>(p.DV),
                static_cast<int>(p.chunk), static_cast<int>(p.num_chunks()), static_cast<int>(plan.block_dv),
                num_blocks, plan.level, static_cast<typename Kernel::Acc>(p.scale), gemm};
  const int league = static_cast<int>(num_blocks * p.B * p.H);
  auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
  Kokkos::parallel_for("linattn::fused_forward", policy.set_scratch_size(plan.level, Kokkos::PerTeam(plan.bytes)), kernel);
  return plan;
}

}  // namespace linattn
