// The `fused` variant as a portable register-blocked TeamPolicy kernel (every
// Kokkos backend; `--gemm registers`). Same algorithm as fused_forward.hpp,
// but the products never go through scratch-to-scratch GEMMs:
//   - every thread owns 4 x 4 tiles of the state S, of this chunk's K^T V, of
//     the scores A and of the output O, in registers (accumulation type);
//   - q, k, v are staged in team scratch in their input type (bf16: half the
//     bytes of fp32), so that one chunk, the published state and the scores
//     fit the ~40 KB of level-0 scratch a CUDA team gets (DESIGN.md 7); the
//     fp32-tile kernel needs 150+ KB and falls back to level-1 scratch in
//     device memory;
//   - staging loads are one flat range per tile (coalesced), and the tile
//     rows are padded so that neighbouring rows fall on different banks.
// Scratch regions are reused within a chunk:
//   R1: Q (input type), then the scores A (accumulation type)
//   R2: K (input type), then the published old state S (accumulation type)
//   R3: V (input type)
// Per chunk: stage Q, K, V | dS = K^T V and A = scale tril(Q K^T) into
// registers | publish S into R2 | O = scale Q S, snapshot h[c] = S | A into R1
// | O += A V, store o | S += dS (the right shift: the update after the output).
#pragma once

#include "core/half_types.hpp"
#include "core/problem.hpp"
#include "kernels/forward.hpp"
#include "kernels/forward_views.hpp"
#include "kernels/scratch_plan.hpp"
#include "kernels/sequence_map.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace linattn {

namespace register_tiles {

constexpr int kTile = 4;  // every register tile is kTile x kTile

// Tiles one thread holds per product. On a GPU a team of a few hundred threads
// with one tile each of S, dS and O (two of A, whose lower triangle is half
// empty) keeps ~80 values in registers; on the host a team is one thread
// (Serial), which then holds them all (on its stack).
constexpr int kStateSlots = host_execution ? 256 : 1;
constexpr int kScoreSlots = host_execution ? 1024 : 2;
constexpr int kOutputSlots = host_execution ? 256 : 1;

KOKKOS_INLINE_FUNCTION constexpr int tiles(int n) { return (n + kTile - 1) / kTile; }

// A row stride (elements) for rows of n elements of `bytes` each whose length
// in 4-byte words is odd, so that rows k apart start on different banks.
inline int padded_stride(int n, int bytes) {
  if (bytes >= 4) return bytes == 4 && n % 2 == 1 ? n : n + 1;
  int s = n + 1;
  while ((s * bytes) % 4 != 0 || ((s * bytes) / 4) % 2 == 0) ++s;
  return s;
}

inline std::size_t align16(std::size_t x) { return (x + 15) / 16 * 16; }

// Where the three scratch regions start and how their rows are strided.
struct Layout {
  int qk_stride, v_stride, a_stride, s_stride;  // elements
  std::size_t r2, r3, bytes;                     // byte offsets of R2 and R3, total
};

template <class In, class Acc>
Layout make_layout(int C, int DK, int W) {
  Layout l;
  l.qk_stride = padded_stride(DK, sizeof(In));
  l.v_stride = padded_stride(W, sizeof(In));
  l.a_stride = padded_stride(C, sizeof(Acc));
  l.s_stride = padded_stride(W, sizeof(Acc));
  const std::size_t qk = std::size_t(C) * l.qk_stride * sizeof(In);
  const std::size_t r1 = align16(std::max(qk, std::size_t(C) * l.a_stride * sizeof(Acc)));
  const std::size_t r2 = align16(std::max(qk, std::size_t(DK) * l.s_stride * sizeof(Acc)));
  const std::size_t r3 = align16(std::size_t(C) * l.v_stride * sizeof(In));
  l.r2 = r1;
  l.r3 = r1 + r2;
  l.bytes = r1 + r2 + r3;
  return l;
}

// Threads needed for block width W with `team_size` (0: one tile per slot-1 thread).
struct TeamShape {
  int state_tiles, score_tiles, output_tiles;
  int min_team_size() const {
    auto need = [](int tiles, int slots) { return (tiles + slots - 1) / slots; };
    return std::max({need(state_tiles, kStateSlots), need(score_tiles, kScoreSlots), need(output_tiles, kOutputSlots)});
  }
};

inline TeamShape team_shape(int C, int DK, int W) {
  return {tiles(DK) * tiles(W), tiles(C) * tiles(C), tiles(C) * tiles(W)};
}

}  // namespace register_tiles

template <class Views>
struct FusedRegisterForward {
  using In = typename Views::input_type;
  using Out = typename Views::output_type;
  using Snap = typename Views::snapshot_type;
  using Acc = typename Views::acc_type;
  static constexpr int R = register_tiles::kTile;
  static constexpr int kS = register_tiles::kStateSlots, kA = register_tiles::kScoreSlots,
                       kO = register_tiles::kOutputSlots;

  Views views;
  SequenceMap seqs;
  int H, DK, DV, C, block_dv, num_blocks, level;
  Acc scale;
  register_tiles::Layout lay;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int bv = m.league_rank() % num_blocks, nh = m.league_rank() / num_blocks;
    const int n = nh / H, h = nh % H;
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b;
    const int d0 = bv * block_dv, W = DV - d0 < block_dv ? DV - d0 : block_dv;
    const int rank = m.team_rank(), TS = m.team_size();
    char* base = static_cast<char*>(m.team_scratch(level).get_shmem(lay.bytes));
    In* q_s = reinterpret_cast<In*>(base);
    Acc* a_s = reinterpret_cast<Acc*>(base);
    In* k_s = reinterpret_cast<In*>(base + lay.r2);
    Acc* s_s = reinterpret_cast<Acc*>(base + lay.r2);
    In* v_s = reinterpret_cast<In*>(base + lay.r3);
    const int qs = lay.qk_stride, vs = lay.v_stride, as = lay.a_stride, ss = lay.s_stride;
    const int wt = register_tiles::tiles(W), ct = register_tiles::tiles(C);
    const int state_tiles = register_tiles::tiles(DK) * wt, score_tiles = ct * ct, output_tiles = ct * wt;
    const bool store_snapshots = views.h.extent(0) > 0, has_initial = views.initial_state.extent(0) > 0;

    // s[u]: state tile rank + u*TS, rows d = 4 (tile / wt) + x, columns j = 4 (tile % wt) + y.
    Acc s[kS][R][R], ds[kS][R][R], a[kA][R][R], o[kO][R][R];
    for (int u = 0; u < kS; ++u) {
      const int tile = rank + u * TS, dr = R * (tile / wt), jc = R * (tile % wt);
      for (int x = 0; x < R; ++x)
        for (int y = 0; y < R; ++y) {
          const bool inside = tile < state_tiles && dr + x < DK && jc + y < W;
          s[u][x][y] = inside && has_initial ? views.initial_state(n, h, dr + x, d0 + jc + y) : Acc(0);
        }
    }

    for (int c = 0; c < seq.num_chunks; ++c) {
      const int t0 = seq.t0 + c * C, rest = seq.length - c * C, L = rest < C ? rest : C;
      m.team_barrier();  // the previous chunk is done with R1, R2, R3
      // Stage this chunk in the input type; rows past L (a ragged last chunk) are zero.
      for (int e = rank; e < C * DK; e += TS) {
        const int i = e / DK, d = e % DK;
        q_s[i * qs + d] = i < L ? views.q(b, t0 + i, h, d) : In{};
        k_s[i * qs + d] = i < L ? views.k(b, t0 + i, h, d) : In{};
      }
      for (int e = rank; e < C * W; e += TS) {
        const int i = e / W, j = e % W;
        v_s[i * vs + j] = i < L ? views.v(b, t0 + i, h, d0 + j) : In{};
      }
      m.team_barrier();

      // dS = K^T V for this thread's state tiles.
      for (int u = 0; u < kS; ++u) {
        const int tile = rank + u * TS, dr = R * (tile / wt), jc = R * (tile % wt);
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) ds[u][x][y] = Acc(0);
        if (tile >= state_tiles) continue;
        for (int t = 0; t < L; ++t) {
          Acc kv[R], vv[R];
          for (int x = 0; x < R; ++x) kv[x] = dr + x < DK ? to_acc<Acc>(k_s[t * qs + dr + x]) : Acc(0);
          for (int y = 0; y < R; ++y) vv[y] = jc + y < W ? to_acc<Acc>(v_s[t * vs + jc + y]) : Acc(0);
          for (int x = 0; x < R; ++x)
            for (int y = 0; y < R; ++y) ds[u][x][y] += kv[x] * vv[y];
        }
      }
      // A = scale Q K^T on and below the diagonal; tiles wholly above it (or
      // whose rows are all past L) are never computed nor read.
      for (int u = 0; u < kA; ++u) {
        const int tile = rank + u * TS, ir = R * (tile / ct), tc = R * (tile % ct);
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) a[u][x][y] = Acc(0);
        if (tile >= score_tiles || tc > ir || ir >= L) continue;
        for (int d = 0; d < DK; ++d) {
          Acc qv[R], kv[R];
          for (int x = 0; x < R; ++x) qv[x] = to_acc<Acc>(q_s[(ir + x) * qs + d]);
          for (int y = 0; y < R; ++y) kv[y] = to_acc<Acc>(k_s[(tc + y) * qs + d]);
          for (int x = 0; x < R; ++x)
            for (int y = 0; y < R; ++y) a[u][x][y] += qv[x] * kv[y];
        }
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) a[u][x][y] = tc + y <= ir + x ? scale * a[u][x][y] : Acc(0);  // causal mask
      }
      m.team_barrier();  // K is no longer read: R2 takes the old state

      for (int u = 0; u < kS; ++u) {
        const int tile = rank + u * TS, dr = R * (tile / wt), jc = R * (tile % wt);
        if (tile >= state_tiles) continue;
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y)
            if (dr + x < DK && jc + y < W) s_s[(dr + x) * ss + jc + y] = s[u][x][y];
      }
      m.team_barrier();

      if (store_snapshots)  // h[c] = the state before chunk c, in whole rows (coalesced)
        for (int e = rank; e < DK * W; e += TS) {
          const int d = e / W, j = e % W;
          views.h(seq.h_b, seq.h_c0 + c, h, d, d0 + j) = from_acc<Snap>(s_s[d * ss + j]);
        }
      // O = scale Q S for this thread's output tiles.
      for (int u = 0; u < kO; ++u) {
        const int tile = rank + u * TS, ir = R * (tile / wt), jc = R * (tile % wt);
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) o[u][x][y] = Acc(0);
        if (tile >= output_tiles || ir >= L) continue;
        for (int d = 0; d < DK; ++d) {
          Acc qv[R], sv[R];
          for (int x = 0; x < R; ++x) qv[x] = to_acc<Acc>(q_s[(ir + x) * qs + d]);
          for (int y = 0; y < R; ++y) sv[y] = jc + y < W ? s_s[d * ss + jc + y] : Acc(0);
          for (int x = 0; x < R; ++x)
            for (int y = 0; y < R; ++y) o[u][x][y] += qv[x] * sv[y];
        }
      }
      m.team_barrier();  // Q is no longer read: R1 takes the scores

      for (int u = 0; u < kA; ++u) {
        const int tile = rank + u * TS, ir = R * (tile / ct), tc = R * (tile % ct);
        if (tile >= score_tiles || tc > ir || ir >= L) continue;
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) a_s[(ir + x) * as + tc + y] = a[u][x][y];
      }
      m.team_barrier();

      // O += A V over the keys up to each row, then o = O rounded once.
      for (int u = 0; u < kO; ++u) {
        const int tile = rank + u * TS, ir = R * (tile / wt), jc = R * (tile % wt);
        if (tile >= output_tiles || ir >= L) continue;
        const int keys = ir + R < L ? ir + R : L;
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) o[u][x][y] *= scale;
        for (int t = 0; t < keys; ++t) {
          Acc av[R], vv[R];
          for (int x = 0; x < R; ++x) av[x] = a_s[(ir + x) * as + t];
          for (int y = 0; y < R; ++y) vv[y] = to_acc<Acc>(v_s[t * vs + jc + y]);
          for (int x = 0; x < R; ++x)
            for (int y = 0; y < R; ++y) o[u][x][y] += av[x] * vv[y];
        }
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y)
            if (ir + x < L && jc + y < W) views.o(b, t0 + ir + x, h, d0 + jc + y) = from_acc<Out>(o[u][x][y]);
      }
      for (int u = 0; u < kS; ++u)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) s[u][x][y] += ds[u][x][y];
    }

    for (int u = 0; u < kS; ++u) {
      const int tile = rank + u * TS, dr = R * (tile / wt), jc = R * (tile % wt);
      if (tile >= state_tiles) continue;
      for (int x = 0; x < R; ++x)
        for (int y = 0; y < R; ++y)
          if (dr + x < DK && jc + y < W) views.final_state(n, h, dr + x, d0 + jc + y) = s[u][x][y];
    }
  }
};

// The block width and team size: the widest of DV, 128, 64, 32, 16, 8, 4
// whose tiles fit the team's register slots and whose regions fit level-0
// scratch (block_dv > 0 asks for one width); when no width fits level 0 (fp32
// and fp64 inputs stage 4-8 byte tiles), the widest that fits the team, on
// level 1. team_size 0 takes the smallest team (a multiple of 32) that holds
// every tile; on a host backend the team is one thread. On a GPU the default
// team stays at or below 256 threads, so that ~100 registers per thread remain.
struct RegisterPlan {
  ScratchPlan scratch;
  int team_size = 0;
  std::string unavailable;  // why no plan exists (then scratch is empty)
};

template <class In, class Acc>
RegisterPlan plan_register_forward(const Problem& p, std::int64_t block_dv, int team_size) {
  const int C = static_cast<int>(p.chunk), DK = static_cast<int>(p.DK), DV = static_cast<int>(p.DV);
  std::vector<int> widths;
  if (block_dv > 0) {
    widths.push_back(static_cast<int>(std::min<std::int64_t>(block_dv, DV)));
  } else {
    widths.push_back(DV);
    for (int w : {128, 64, 32, 16, 8, 4})
      if (w < DV) widths.push_back(w);
  }
  const int max_team = host_execution ? 1 : (team_size > 0 ? 1024 : 256);
  const std::size_t max0 = static_cast<std::size_t>(TeamPolicy::scratch_size_max(0));
  RegisterPlan level1;
  RegisterPlan none;
  for (int w : widths) {
    const std::size_t bytes = register_tiles::make_layout<In, Acc>(C, DK, w).bytes;
    const int needed = register_tiles::team_shape(C, DK, w).min_team_size();
    const int ts = team_size > 0 ? team_size : (host_execution ? 1 : (needed + 31) / 32 * 32);
    if (needed > ts || ts > max_team) {
      if (none.unavailable.empty())
        none.unavailable = "block_dv " + std::to_string(w) + " at chunk " + std::to_string(C) + ", DK " +
                           std::to_string(DK) + " needs a team of " + std::to_string(needed) + " threads" +
                           (host_execution ? " (a host team is one thread)"
                                           : ", more than " + std::to_string(team_size > 0 ? ts : max_team));
      continue;
    }
    if (bytes <= max0) return {{0, w, bytes}, ts, {}};
    if (level1.team_size == 0 && bytes <= static_cast<std::size_t>(TeamPolicy::scratch_size_max(1)))
      level1 = {{1, w, bytes}, ts, {}};
  }
  if (level1.team_size > 0) return level1;
  if (none.unavailable.empty()) none.unavailable = "the tiles need more team scratch than the backend offers";
  return none;
}

// Empty when the register-blocked kernel can run this problem; otherwise why not.
template <class In, class Acc>
std::string register_forward_unavailable(const Problem& p, const ForwardConfig& config) {
  if (config.variant != Variant::fused) return "only the fused variant has a register-blocked kernel";
  return plan_register_forward<In, Acc>(p, config.block_dv, config.team_size).unavailable;
}

template <class Views>
ScratchPlan run_fused_registers(const Problem& p, const Views& views, const SequenceMap& seqs, std::int64_t block_dv,
                                int team_size) {
  ScopedRegion region("linattn::fused_registers");
  using Kernel = FusedRegisterForward<Views>;
  using Acc = typename Kernel::Acc;
  const RegisterPlan plan = plan_register_forward<typename Kernel::In, Acc>(p, block_dv, team_size);
  if (!plan.unavailable.empty()) throw std::invalid_argument("--gemm registers is not available: " + plan.unavailable);
  const int C = static_cast<int>(p.chunk), DK = static_cast<int>(p.DK), w = static_cast<int>(plan.scratch.block_dv);
  const int num_blocks = static_cast<int>(ceil_div(p.DV, w));
  Kernel kernel{views, seqs, static_cast<int>(p.H), DK, static_cast<int>(p.DV), C, w, num_blocks,
                plan.scratch.level, static_cast<Acc>(p.scale), register_tiles::make_layout<typename Kernel::In, Acc>(C, DK, w)};
  const int league = static_cast<int>(num_blocks * p.num_sequences() * p.H);
  TeamPolicy policy(league, plan.team_size);
  Kokkos::parallel_for("linattn::fused_registers",
                       policy.set_scratch_size(plan.scratch.level, Kokkos::PerTeam(plan.scratch.bytes)), kernel);
  return plan.scratch;
}

}  // namespace linattn
