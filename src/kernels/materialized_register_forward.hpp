// The `materialized` variant (fla's chunk_fwd_h + chunk_fwd_o) as portable
// register-blocked TeamPolicy kernels (`--gemm registers`; building blocks in
// register_tiles.hpp):
//   kernel 1, league (DV block, sequence*head): the state in registers walks
//     the chunks, h[c] = S is stored from registers, S += K^T V;
//   kernel 2, league (chunk, DV block, head), all chunks at once: O = scale
//     (Q h[c] + tril(Q K^T) V) with h[c] read back in the snapshot type.
#pragma once

#include "kernels/fused_register_forward.hpp"

namespace linattn {

// The state pass holds one tile of S per thread and little else. ncu at two
// teams per SM (the register limit the other kernels need): 16 warps per SM,
// 7.3 cycles between issues per warp, SM 50% busy: latency-bound. Three teams
// per SM (at most 85 registers); four (64 registers, 344 bytes of spills)
// measured 14.8 ms against 8.4 ms.
using StatePassPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::LaunchBounds<register_tiles::kGpuTeam, 3>>;

template <class Views, class Snapshots>
struct MaterializedRegisterStatePass {
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  using Snap = typename Snapshots::non_const_value_type;
  using Tiles = register_tiles::ChunkTiles<In, Acc>;
  static constexpr int R = register_tiles::kTile, kS = register_tiles::kStateSlots;

  Views views;
  Snapshots snapshots;
  SequenceMap seqs;
  int H, DK, DV, C, block_dv, num_blocks, level;
  register_tiles::Layout lay;
  bool quad_qk, quad_v;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const SequenceBlock blk = sequence_block(seqs, m.league_rank(), num_blocks, H, block_dv, DV);
    const Sequence& seq = blk.seq;
    const int n = blk.n, h = blk.h, b = seq.b, d0 = blk.d0, W = blk.W;
    const Tiles tl(m, level, lay, DK, C, W);
    const bool has_initial = views.initial_state.extent(0) > 0;
    register_tiles::RegTile<Acc> s[kS];
    int dr[kS], jc[kS];
    for (int u = 0; u < kS; ++u) {
      const int tile = tl.my_tile(u, tl.state_tiles);
      dr[u] = tile < 0 ? DK : R * (tile / tl.wt);  // a thread without a tile stores nothing
      jc[u] = tile < 0 ? W : R * (tile % tl.wt);
      for (int x = 0; x < R; ++x)
        for (int y = 0; y < R; ++y) {
          const bool inside = dr[u] + x < DK && jc[u] + y < W;
          s[u][x][y] = inside && has_initial ? views.initial_state(n, h, dr[u] + x, d0 + jc[u] + y) : Acc(0);
        }
    }
    for (int c = 0; c < seq.num_chunks; ++c) {
      const int t0 = seq.t0 + c * C, rest = seq.length - c * C, L = rest < C ? rest : C;
      m.team_barrier();  // the previous chunk is done with R2, R3
      tl.stage_k_rows(views.k, b, t0, L, h, quad_qk);
      tl.stage_v(views.v, b, t0, L, h, d0, quad_v);
      // h[c] = the state before chunk c, element by element (quad stores here
      // measured the same: 7.31-7.34 ms either way at three teams per SM).
      for (int u = 0; u < kS; ++u)
        for (int x = 0; x < R && dr[u] + x < DK; ++x)
          for (int y = 0; y < R && jc[u] + y < W; ++y)
            snapshots(seq.h_b, seq.h_c0 + c, h, dr[u] + x, d0 + jc[u] + y) = from_acc<Snap>(s[u][x][y]);
      m.team_barrier();
      for (int u = 0; u < kS; ++u)
        tl.add_state_update_k_rows(s[u], tl.my_tile(u, tl.state_tiles), register_tiles::round4(L));
    }
    for (int u = 0; u < kS; ++u)
      for (int x = 0; x < R && dr[u] + x < DK; ++x)
        for (int y = 0; y < R && jc[u] + y < W; ++y)
          views.final_state(n, h, dr[u] + x, d0 + jc[u] + y) = s[u][x][y];
  }
};

template <class Views, class Snapshots>
struct MaterializedRegisterOutputPass {
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  using Tiles = register_tiles::ChunkTiles<In, Acc>;
  static constexpr int kA = register_tiles::kScoreSlots, kO = register_tiles::kOutputSlots;

  Views views;
  Snapshots snapshots;
  SequenceMap seqs;
  int H, DK, DV, C, block_dv, num_blocks, level;
  Acc scale;
  register_tiles::Layout lay;
  bool quad_qk, quad_v;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int g = m.league_rank() % seqs.total_chunks, rest_rank = m.league_rank() / seqs.total_chunks;
    const int bv = rest_rank % num_blocks, h = rest_rank / num_blocks;
    int n = 0, c = 0;
    seqs.locate_chunk(g, n, c);
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b;
    const int d0 = bv * block_dv, W = DV - d0 < block_dv ? DV - d0 : block_dv;
    const int t0 = seq.t0 + c * C, left = seq.length - c * C, L = left < C ? left : C;
    const Tiles tl(m, level, lay, DK, C, W);
    tl.stage_q(views.q, b, t0, L, h, quad_qk);
    tl.stage_kt(views.k, b, t0, L, h, quad_qk);
    tl.stage_v(views.v, b, t0, L, h, d0, quad_v);
    m.team_barrier();
    register_tiles::RegTile<Acc> a[kA];
    for (int u = 0; u < kA; ++u) tl.scores(a[u], tl.my_tile(u, tl.score_tiles), L, scale);
    m.team_barrier();  // K^T is no longer read: R2 takes h[c], zero past DK and W
    const int W4 = register_tiles::round4(W);
    for (int e = tl.rank; e < tl.DK4 * W4; e += tl.TS) {
      const int d = e / W4, j = e % W4;
      tl.s_s[d * tl.ss + j] = d < DK && j < W ? to_acc<Acc>(snapshots(seq.h_b, seq.h_c0 + c, h, d, d0 + j)) : Acc(0);
    }
    m.team_barrier();
    tl.template outputs<kA, kO>(m, a, L, scale, views.o, b, t0, h, d0, quad_v);
  }
};

template <class Views, class Snapshots>
ScratchPlan run_materialized_registers_with(const Problem& p, const Views& views, const Snapshots& snapshots,
                                            const SequenceMap& seqs, std::int64_t block_dv, int team_size) {
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  const register_tiles::Plan plan = register_plan_or_throw<In, Acc>(p, block_dv, team_size);
  const int C = static_cast<int>(p.chunk), DK = static_cast<int>(p.DK), DV = static_cast<int>(p.DV),
            H = static_cast<int>(p.H), w = static_cast<int>(plan.scratch.block_dv);
  const int num_blocks = static_cast<int>(ceil_div(p.DV, w));
  const register_tiles::Layout lay = register_tiles::make_layout<In, Acc>(C, DK, w);
  const bool quad_qk = p.DK % 4 == 0 && register_tiles::quad_aligned(views.q) && register_tiles::quad_aligned(views.k);
  const bool quad_v = p.DV % 4 == 0 && w % 4 == 0 && register_tiles::quad_aligned(views.v) &&
                      register_tiles::quad_aligned(views.o);
  const auto scratch = Kokkos::PerTeam(plan.scratch.bytes);
  {
    ScopedRegion region("linattn::materialized_registers::states");
    MaterializedRegisterStatePass<Views, Snapshots> kernel{views, snapshots, seqs, H, DK, DV, C, w, num_blocks,
                                                           plan.scratch.level, lay, quad_qk, quad_v};
    const int league = static_cast<int>(num_blocks * p.num_sequences() * p.H);
    Kokkos::parallel_for("linattn::materialized_registers_states",
                         StatePassPolicy(league, plan.team_size).set_scratch_size(plan.scratch.level, scratch), kernel);
  }
  {
    ScopedRegion region("linattn::materialized_registers::outputs");
    MaterializedRegisterOutputPass<Views, Snapshots> kernel{views, snapshots, seqs, H, DK, DV, C, w, num_blocks,
                                                            plan.scratch.level, static_cast<Acc>(p.scale), lay,
                                                            quad_qk, quad_v};
    const int league = static_cast<int>(seqs.total_chunks * num_blocks * p.H);
    Kokkos::parallel_for("linattn::materialized_registers_outputs",
                         RegisterPolicy(league, plan.team_size).set_scratch_size(plan.scratch.level, scratch), kernel);
  }
  return plan.scratch;
}

// Uses the caller's snapshot View when present; otherwise an internal buffer
// in the accumulation type that lives only for this call.
template <class Views>
ScratchPlan run_materialized_registers(const Problem& p, const Views& views, const SequenceMap& seqs,
                                       std::int64_t block_dv, int team_size) {
  ScopedRegion region("linattn::materialized_registers");
  if (views.h.extent(0) > 0) return run_materialized_registers_with(p, views, views.h, seqs, block_dv, team_size);
  using Acc = typename Views::acc_type;
  const std::vector<std::int64_t> hs = p.h_shape();
  DeviceView5<Acc> buffer(Kokkos::view_alloc(std::string("linattn::h_buffer"), Kokkos::WithoutInitializing), hs[0],
                          hs[1], hs[2], hs[3], hs[4]);
  return run_materialized_registers_with(p, views, buffer, seqs, block_dv, team_size);
}

}  // namespace linattn
