// The `fused` variant as a portable register-blocked TeamPolicy kernel (every
// Kokkos backend; `--gemm registers`; register_tiles.hpp has the building
// blocks). League over (DV block, sequence*head); the chunk loop runs inside
// the team, the state S stays in registers (accumulation type) for the whole
// sequence, each thread owning 4 x 4 tiles of S, of the chunk's K^T V, of the
// scores and of the output. Per chunk:
//   stage Q, K^T, V | dS = K^T V, A = scale tril(Q K^T) | S into R2 |
//   h[c] = S, O = scale Q S | A into R1 | O += A V, store o | S += dS
// (the state update after the output, as in the chunk recurrence of README.md "The math").
// Gated (README.md "Gated levels"; an instantiation per DecayForm, so that
// level 1's kernel is compiled as it was): the chunk's decay tile is computed
// once after staging (chunk_decay) and the gated steps apply it
// (register_gate.hpp): dS's keys by exp(b_L - b_j), A by exp(b_i - b_j), Q S's
// rows by exp(b_i), and S = exp(b_L) S + dS; per key channel (gk) each factor
// channel by channel inside the products.
#pragma once

#include "kernels/kernel_shape.hpp"
#include "kernels/forward.hpp"
#include "kernels/forward_views.hpp"
#include "kernels/register_tiles.hpp"
#include "kernels/sequence_map.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>

namespace linattn {

// Teams of up to register_tiles::kGpuTeam threads, two per SM on a GPU: at
// most 128 registers per thread (the fused kernel wants 194 unbounded and
// spills 156 bytes at 128). Measured on the H200 (bf16, block_dv 32): 23.1 ms
// against 32.8 ms with one team per SM at 8,16384,16,128; 17.6 against 16.5 ms
// at 1,32768,32,128.
using RegisterPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::LaunchBounds<register_tiles::kGpuTeam, 2>>;

template <class Views, DecayForm kForm>
struct FusedRegisterForward : KernelShape, BlockPlan {
  using In = typename Views::input_type;
  using Snap = typename Views::snapshot_type;
  using Acc = typename Views::acc_type;
  using Tiles = register_tiles::ChunkTiles<In, Acc>;
  static constexpr int R = register_tiles::kTile;
  static constexpr int kS = register_tiles::kStateSlots, kA = register_tiles::kScoreSlots,
                       kO = register_tiles::kOutputSlots;
  static constexpr bool kScalar = kForm == DecayForm::scalar,
                        kChannels = kForm == DecayForm::channels;

  Views views;
  SequenceMap seqs;
  Acc scale;
  register_tiles::Layout lay;
  bool quad_qk, quad_v, quad_h;  // rows of q, k (of v, o; of h) start on quad boundaries: move them as quads

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const SequenceBlock blk = sequence_block(seqs, m.league_rank(), num_blocks, H, block_dv, DV);
    const Sequence& seq = blk.seq;
    const int n = blk.n, h = blk.h, b = seq.b, d0 = blk.d0, W = blk.W;
    const Tiles tl(m, level, lay, DK, C, W);
    const bool store_snapshots = views.h.extent(0) > 0, has_initial = views.initial_state.extent(0) > 0;

    // Elements past DK or W stay zero: they meet only zero-padded K^T rows and V columns.
    register_tiles::RegTile<Acc> s[kS], ds[kS], a[kA];
    for (int u = 0; u < kS; ++u) {
      const int tile = tl.my_tile(u, tl.state_tiles), dr = R * (tile / tl.wt), jc = R * (tile % tl.wt);
      for (int x = 0; x < R; ++x)
        for (int y = 0; y < R; ++y) {
          const bool inside = tile >= 0 && dr + x < DK && jc + y < W;
          s[u][x][y] = inside && has_initial ? views.initial_state(n, h, dr + x, d0 + jc + y) : Acc(0);
        }
    }

    for (int c = 0; c < seq.num_chunks; ++c) {
      const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
      m.team_barrier();  // the previous chunk is done with R1, R2, R3
      tl.stage_q(views.q, b, t0, L, h, quad_qk);
      tl.stage_kt(views.k, b, t0, L, h, quad_qk);
      tl.stage_v(views.v, b, t0, L, h, d0, quad_v);
      [[maybe_unused]] const auto decay =
          register_tiles::chunk_decay_rows<kForm>(m, tl.q_s, lay, C, DK, views, b, t0, L, h);
      m.team_barrier();
      for (int u = 0; u < kS; ++u) {
        register_tiles::zero(ds[u]);
        if constexpr (kScalar)
          tl.add_decayed_state_update(ds[u], tl.my_tile(u, tl.state_tiles), register_tiles::round4(L), decay);
        else if constexpr (kChannels)
          tl.add_channel_decayed_state_update(ds[u], tl.my_tile(u, tl.state_tiles), register_tiles::round4(L), decay);
        else
          tl.add_state_update(ds[u], tl.my_tile(u, tl.state_tiles), register_tiles::round4(L));
      }
      for (int u = 0; u < kA; ++u) {
        if constexpr (kChannels) {
          tl.channel_scores(a[u], tl.my_tile(u, tl.score_tiles), L, scale, decay);
        } else {
          tl.scores(a[u], tl.my_tile(u, tl.score_tiles), L, scale);
          if constexpr (kScalar) tl.decay_scores(a[u], tl.my_tile(u, tl.score_tiles), L, decay);
        }
      }
      m.team_barrier();  // K^T is no longer read: R2 takes the state before this chunk
      for (int u = 0; u < kS; ++u) tl.publish_state(s[u], tl.my_tile(u, tl.state_tiles));
      m.team_barrier();
      if (store_snapshots)  // h[c] = the state before chunk c, quad by quad along its rows (coalesced)
        for (int e = tl.rank; e < DK * tl.wt; e += tl.TS) {
          const int d = e / tl.wt, j = R * (e % tl.wt);
          register_tiles::store_rounded(&views.h(seq.h_b, seq.h_c0 + c, h, d, d0 + j), tl.s_s + d * tl.ss + j, W - j,
                                        quad_h);
        }
      if constexpr (kScalar) {
        tl.template decayed_outputs<kA, kO>(m, a, L, scale, views.o, b, t0, h, d0, quad_v, decay);
        for (int u = 0; u < kS; ++u) register_tiles::decay_state_tile(s[u], decay);  // S = exp(b_L) S + dS
      } else if constexpr (kChannels) {
        tl.template channel_decayed_outputs<kA, kO>(m, a, L, scale, views.o, b, t0, h, d0, quad_v, decay);
        for (int u = 0; u < kS; ++u) {  // S = diag(exp(b_L)) S + dS
          const int tile = tl.my_tile(u, tl.state_tiles);
          if (tile >= 0) register_tiles::decay_state_channels_tile(s[u], decay, R * (tile / tl.wt), DK);
        }
      } else {
        tl.template outputs<kA, kO>(m, a, L, scale, views.o, b, t0, h, d0, quad_v);
      }
      for (int u = 0; u < kS; ++u)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) s[u][x][y] += ds[u][x][y];
    }

    for (int u = 0; u < kS; ++u) {
      const int tile = tl.my_tile(u, tl.state_tiles), dr = R * (tile / tl.wt), jc = R * (tile % tl.wt);
      if (tile < 0) continue;
      for (int x = 0; x < R; ++x)
        for (int y = 0; y < R; ++y)
          if (dr + x < DK && jc + y < W) views.final_state(n, h, dr + x, d0 + jc + y) = s[u][x][y];
    }
  }
};

// The plan (with the decay tile of `form`). choose_path (path_choice.hpp) has
// refused every problem without one before a kernel launches, so a missing
// plan here is a caller's bug.
template <class In, class Acc>
register_tiles::Plan register_plan(const Problem& p, std::int64_t block_dv, int team_size,
                                   DecayForm form) {
  const register_tiles::Plan plan = register_tiles::make_plan<In, Acc>(p, block_dv, team_size, form);
  if (!plan.unavailable.empty())
    throw std::logic_error("register-blocked kernel launched without a plan: " + plan.unavailable);
  return plan;
}

template <class Views>
ScratchPlan run_fused_registers(const Problem& p, const Views& views, const SequenceMap& seqs, std::int64_t block_dv,
                                int team_size) {
  ScopedRegion region("linattn::fused_registers");
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  const DecayForm form = decay_form(views);
  const register_tiles::Plan plan = register_plan<In, Acc>(p, block_dv, team_size, form);
  const int C = static_cast<int>(p.chunk), DK = static_cast<int>(p.DK), w = static_cast<int>(plan.scratch.block_dv);
  const int num_blocks = static_cast<int>(ceil_div(p.DV, w));
  const bool quad_qk = p.DK % 4 == 0 && register_tiles::quad_aligned(views.q) && register_tiles::quad_aligned(views.k);
  const bool quad_v = p.DV % 4 == 0 && w % 4 == 0 && register_tiles::quad_aligned(views.v) &&
                      register_tiles::quad_aligned(views.o);
  const int league = static_cast<int>(num_blocks * p.num_sequences() * p.H);
  auto launch = [&](auto gate) {
    using Kernel = FusedRegisterForward<Views, decltype(gate)::value>;
    const Kernel kernel{kernel_shape(p), {w, num_blocks, plan.scratch.level}, views, seqs, static_cast<Acc>(p.scale),
                        register_tiles::make_layout<In, Acc>(C, DK, w, form), quad_qk, quad_v,
                        quad_v && register_tiles::quad_aligned(views.h)};
    Kokkos::parallel_for("linattn::fused_registers",
                         RegisterPolicy(league, plan.team_size)
                             .set_scratch_size(plan.scratch.level, Kokkos::PerTeam(plan.scratch.bytes)),
                         kernel);
  };
  switch (form) {
    case DecayForm::channels: launch(std::integral_constant<DecayForm, DecayForm::channels>{}); break;
    case DecayForm::scalar: launch(std::integral_constant<DecayForm, DecayForm::scalar>{}); break;
    case DecayForm::none: launch(std::integral_constant<DecayForm, DecayForm::none>{}); break;
  }
  return plan.scratch;
}

}  // namespace linattn
