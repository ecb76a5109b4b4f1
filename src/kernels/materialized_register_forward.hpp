// The `materialized` variant (fla's chunk_fwd_h + chunk_fwd_o) as portable
// register-blocked TeamPolicy kernels (`--gemm registers`; building blocks in
// register_tiles.hpp):
//   kernel 1, league (DV block, sequence*head): the state in registers walks
//     the chunks, h[c] = S is stored from registers, S += K^T V;
//   kernel 2, league (chunk, DV block, head), all chunks at once: O = scale
//     (Q h[c] + tril(Q K^T) V) with h[c] read back in the snapshot type.
// Gated (README.md "Gated levels"; an instantiation per DecayForm, so that
// level 1's kernels are compiled as they were), each kernel computes a chunk's
// decay tile once per team (chunk_decay) and its gated steps apply it
// (register_gate.hpp): kernel 1 S = exp(b_L) S + K^T V with keys by
// exp(b_L - b_j), kernel 2 the rows of Q h[c] by exp(b_i) and the scores by
// exp(b_i - b_j); per key channel (gk) each factor channel by channel.
#pragma once

#include "kernels/kernel_shape.hpp"
#include "kernels/fused_register_forward.hpp"

namespace linattn {

// The state pass: each thread holds an RX x 4 tile of S (RX = 8 or 4) and
// the team stages only K (by rows) and V, ~22 KB of scratch for bf16 at chunk
// 64, DK 128, W 32 (the full layout: 37 KB). Measured on the H200 (bf16,
// block 32, the pass alone, ncu): at 8,16384,16,128 (512 teams) 4 x 4 tiles
// in teams of 256 ran 7.32 ms at three teams per SM (1.3 waves; four spilled:
// 14.8 ms), 8 x 4 tiles in teams of 128 6.87 ms at four per SM (one wave);
// at 1,32768,32,128 (128 teams) the 8-row tiles leave an SM four warps:
// slower there (see state_pass_rows).
using StatePassPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::LaunchBounds<register_tiles::kGpuTeam, 2>>;

// 8-row tiles when the league alone holds at least one 128-thread team per
// 1024 threads the device can run at once (the H200: 264 teams), else 4-row
// tiles in twice the threads. The host (one thread per team) takes 8.
inline int state_pass_rows(std::int64_t league) {
  return league * 1024 >= static_cast<std::int64_t>(ExecSpace().concurrency()) ? 8 : 4;
}

// Tiles of rows x 4 that cover the state block DK x W.
KOKKOS_INLINE_FUNCTION int state_pass_tiles(int DK, int W, int rows) {
  return (DK + rows - 1) / rows * register_tiles::tiles(W);
}

// Threads of a state-pass team: one tile each on a GPU (a multiple of 32),
// one thread holding them all on the host.
inline int state_pass_team(int DK, int W, int rows) {
  if (host_execution) return 1;
  return (state_pass_tiles(DK, W, rows) + 31) / 32 * 32;
}

template <class Views, class Snapshots, int RX, DecayForm kForm>
struct MaterializedRegisterStatePass : KernelShape, BlockPlan {
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  using Snap = typename Snapshots::non_const_value_type;
  using Tiles = register_tiles::ChunkTiles<In, Acc>;
  static constexpr int R = register_tiles::kTile;
  static constexpr int kS = host_execution ? register_tiles::kStateSlots : 1;

  Views views;
  Snapshots snapshots;
  SequenceMap seqs;
  register_tiles::Layout lay;  // make_state_pass_layout
  bool quad_qk, quad_v, quad_h;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const SequenceBlock blk = sequence_block(seqs, m.league_rank(), num_blocks, H, block_dv, DV);
    const Sequence& seq = blk.seq;
    const int n = blk.n, h = blk.h, b = seq.b, d0 = blk.d0, W = blk.W;
    const Tiles tl(m, level, lay, DK, C, W);
    const int count = state_pass_tiles(DK, W, RX);
    const bool has_initial = views.initial_state.extent(0) > 0;
    Acc s[kS][RX][R];
    int dr[kS], jc[kS];
    for (int u = 0; u < kS; ++u) {
      const int tile = tl.my_tile(u, count);
      dr[u] = tile < 0 ? DK : RX * (tile / tl.wt);  // a thread without a tile stores nothing
      jc[u] = tile < 0 ? W : R * (tile % tl.wt);
      for (int x = 0; x < RX; ++x)
        for (int y = 0; y < R; ++y) {
          const bool inside = dr[u] + x < DK && jc[u] + y < W;
          s[u][x][y] = inside && has_initial ? views.initial_state(n, h, dr[u] + x, d0 + jc[u] + y) : Acc(0);
        }
    }
    for (int c = 0; c < seq.num_chunks; ++c) {
      const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
      m.team_barrier();  // the previous chunk is done with K and V
      tl.stage_k_rows(views.k, b, t0, L, h, quad_qk);
      tl.stage_v(views.v, b, t0, L, h, d0, quad_v);
      // h[c] = the state before chunk c, a quad per row of the tile.
      for (int u = 0; u < kS; ++u)
        for (int x = 0; x < RX && dr[u] + x < DK; ++x)
          register_tiles::store_rounded(&snapshots(seq.h_b, seq.h_c0 + c, h, dr[u] + x, d0 + jc[u]), s[u][x],
                                        W - jc[u], quad_h);
      if constexpr (kForm == DecayForm::scalar) {
        const auto decay = register_tiles::chunk_decay_rows<kForm>(m, tl.q_s, lay, C, DK, views, b, t0, L, h);
        m.team_barrier();
        for (int u = 0; u < kS; ++u)
          if (dr[u] < DK) {
            register_tiles::decay_state_tile(s[u], decay);  // S = exp(b_L) S + (decayed K)^T V
            tl.template add_decayed_state_update_rows<RX>(s[u], dr[u], jc[u], register_tiles::round4(L), decay);
          }
      } else if constexpr (kForm == DecayForm::channels) {
        const auto decay = register_tiles::chunk_decay_rows<kForm>(m, tl.q_s, lay, C, DK, views, b, t0, L, h);
        m.team_barrier();
        for (int u = 0; u < kS; ++u)
          if (dr[u] < DK) {  // S = diag(exp(b_L)) S + (decayed K)^T V
            register_tiles::decay_state_channels_tile(s[u], decay, dr[u], DK);
            tl.template add_channel_decayed_state_update_rows<RX>(s[u], dr[u], jc[u], register_tiles::round4(L),
                                                                  decay);
          }
      } else {
        m.team_barrier();
        for (int u = 0; u < kS; ++u)
          if (dr[u] < DK) tl.template add_state_update_rows<RX>(s[u], dr[u], jc[u], register_tiles::round4(L));
      }
    }
    for (int u = 0; u < kS; ++u)
      for (int x = 0; x < RX && dr[u] + x < DK; ++x)
        for (int y = 0; y < R && jc[u] + y < W; ++y)
          views.final_state(n, h, dr[u] + x, d0 + jc[u] + y) = s[u][x][y];
  }
};

template <class Views, class Snapshots, DecayForm kForm>
struct MaterializedRegisterOutputPass : KernelShape, BlockPlan {
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  using Tiles = register_tiles::ChunkTiles<In, Acc>;
  static constexpr int kA = register_tiles::kScoreSlots, kO = register_tiles::kOutputSlots;

  Views views;
  Snapshots snapshots;
  SequenceMap seqs;
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
    const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
    const Tiles tl(m, level, lay, DK, C, W);
    tl.stage_q(views.q, b, t0, L, h, quad_qk);
    tl.stage_kt(views.k, b, t0, L, h, quad_qk);
    tl.stage_v(views.v, b, t0, L, h, d0, quad_v);
    [[maybe_unused]] const auto decay =
        register_tiles::chunk_decay_rows<kForm>(m, tl.q_s, lay, C, DK, views, b, t0, L, h);
    m.team_barrier();
    register_tiles::RegTile<Acc> a[kA];
    for (int u = 0; u < kA; ++u) {
      if constexpr (kForm == DecayForm::channels) {
        tl.channel_scores(a[u], tl.my_tile(u, tl.score_tiles), L, scale, decay);
      } else {
        tl.scores(a[u], tl.my_tile(u, tl.score_tiles), L, scale);
        if constexpr (kForm == DecayForm::scalar)
          tl.decay_scores(a[u], tl.my_tile(u, tl.score_tiles), L, decay);
      }
    }
    m.team_barrier();  // K^T is no longer read: R2 takes h[c], zero past DK and W
    const int W4 = register_tiles::round4(W);
    for (int e = tl.rank; e < tl.DK4 * W4; e += tl.TS) {
      const int d = e / W4, j = e % W4;
      tl.s_s[d * tl.ss + j] = d < DK && j < W ? to_acc<Acc>(snapshots(seq.h_b, seq.h_c0 + c, h, d, d0 + j)) : Acc(0);
    }
    m.team_barrier();
    if constexpr (kForm == DecayForm::scalar)
      tl.template decayed_outputs<kA, kO>(m, a, L, scale, views.o, b, t0, h, d0, quad_v, decay);
    else if constexpr (kForm == DecayForm::channels)
      tl.template channel_decayed_outputs<kA, kO>(m, a, L, scale, views.o, b, t0, h, d0, quad_v, decay);
    else
      tl.template outputs<kA, kO>(m, a, L, scale, views.o, b, t0, h, d0, quad_v);
  }
};

// The two kernels, for the decay form kForm (decay_form(views)).
template <DecayForm kForm, class Views, class Snapshots>
ScratchPlan run_materialized_registers_on(const Problem& p, const Views& views, const Snapshots& snapshots,
                                          const SequenceMap& seqs, std::int64_t block_dv, int team_size) {
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  const register_tiles::Plan plan = register_plan<In, Acc>(p, block_dv, team_size, kForm);
  const KernelShape shape = kernel_shape(p);
  const int C = shape.C, DK = shape.DK, w = static_cast<int>(plan.scratch.block_dv);
  const int num_blocks = static_cast<int>(ceil_div(p.DV, w));
  const register_tiles::Layout lay = register_tiles::make_layout<In, Acc>(C, DK, w, kForm);
  const bool quad_qk = p.DK % 4 == 0 && register_tiles::quad_aligned(views.q) && register_tiles::quad_aligned(views.k);
  const bool quad_v = p.DV % 4 == 0 && w % 4 == 0 && register_tiles::quad_aligned(views.v) &&
                      register_tiles::quad_aligned(views.o);
  const auto scratch = Kokkos::PerTeam(plan.scratch.bytes);
  {
    ScopedRegion region("linattn::materialized_registers::states");
    const register_tiles::Layout state_lay = register_tiles::make_state_pass_layout<In, Acc>(C, DK, w, kForm);
    const std::size_t bytes = state_lay.bytes + register_tiles::kScratchAlignment;
    const int state_level = bytes <= static_cast<std::size_t>(TeamPolicy::scratch_size_max(0)) ? 0 : 1;
    const bool quad_h = quad_v && register_tiles::quad_aligned(snapshots);
    const int league = static_cast<int>(num_blocks * p.num_sequences() * p.H);
    auto run = [&](auto rows) {
      constexpr int RX = decltype(rows)::value;
      const MaterializedRegisterStatePass<Views, Snapshots, RX, kForm> kernel{
          shape, {w, num_blocks, state_level}, views, snapshots, seqs, state_lay, quad_qk, quad_v, quad_h};
      Kokkos::parallel_for("linattn::materialized_registers_states",
                           StatePassPolicy(league, state_pass_team(DK, w, RX))
                               .set_scratch_size(state_level, Kokkos::PerTeam(bytes)),
                           kernel);
    };
    if (state_pass_rows(league) == 8) run(std::integral_constant<int, 8>{});
    else run(std::integral_constant<int, 4>{});
  }
  {
    ScopedRegion region("linattn::materialized_registers::outputs");
    const MaterializedRegisterOutputPass<Views, Snapshots, kForm> kernel{
        shape, {w, num_blocks, plan.scratch.level}, views, snapshots, seqs, static_cast<Acc>(p.scale), lay, quad_qk, quad_v};
    const int league = static_cast<int>(seqs.total_chunks * num_blocks * p.H);
    Kokkos::parallel_for("linattn::materialized_registers_outputs",
                         RegisterPolicy(league, plan.team_size).set_scratch_size(plan.scratch.level, scratch), kernel);
  }
  return plan.scratch;
}

template <class Views, class Snapshots>
ScratchPlan run_materialized_registers_with(const Problem& p, const Views& views, const Snapshots& snapshots,
                                            const SequenceMap& seqs, std::int64_t block_dv, int team_size) {
  switch (decay_form(views)) {
    case DecayForm::channels:
      return run_materialized_registers_on<DecayForm::channels>(p, views, snapshots, seqs, block_dv, team_size);
    case DecayForm::scalar:
      return run_materialized_registers_on<DecayForm::scalar>(p, views, snapshots, seqs, block_dv, team_size);
    case DecayForm::none: break;
  }
  return run_materialized_registers_on<DecayForm::none>(p, views, snapshots, seqs, block_dv, team_size);
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
