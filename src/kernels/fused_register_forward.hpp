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
#include <cstdint>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <vector>

namespace linattn {

namespace register_tiles {

constexpr int kTile = 4;  // every register tile is kTile x kTile

// Tiles one thread holds per product. On a GPU a team of up to kGpuTeam
// threads with one tile each of S, dS, A and O keeps 64 values in registers;
// on the host a team is one thread (Serial), which then holds them all (on its
// stack).
constexpr int kGpuTeam = 256;
constexpr int kStateSlots = host_execution ? 256 : 1;
constexpr int kScoreSlots = host_execution ? 1024 : 1;
constexpr int kOutputSlots = host_execution ? 256 : 1;

KOKKOS_INLINE_FUNCTION constexpr int tiles(int n) { return (n + kTile - 1) / kTile; }
KOKKOS_INLINE_FUNCTION constexpr int round4(int n) { return tiles(n) * kTile; }

// Four consecutive elements, moved with one aligned load or store (8 bytes
// for bf16, 16 for fp32): the vector loads of every tile product.
// (Alignment capped at 16 bytes, the widest load a GPU has: fp64 quads move
// as two 16-byte halves.)
template <class T>
struct alignas(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16) Quad {
  T v[4];
};
template <class T>
KOKKOS_INLINE_FUNCTION Quad<T> load_quad(const T* p) {
  return *reinterpret_cast<const Quad<T>*>(p);
}
template <class T>
KOKKOS_INLINE_FUNCTION void store_quad(T* p, const Quad<T>& q) {
  *reinterpret_cast<Quad<T>*>(p) = q;
}

// A row stride (elements) for rows of n elements: a multiple of 4 (quads stay
// aligned) that is an odd number of quads, so that rows 1, 2, 3 ... apart
// start on different banks.
inline int padded_stride(int n) {
  const int q = tiles(n);
  return kTile * (q % 2 == 1 ? q : q + 1);
}

inline std::size_t align16(std::size_t x) { return (x + 15) / 16 * 16; }

// Where the three scratch regions start and how their rows are strided.
struct Layout {
  int q_stride, kt_stride, v_stride, a_stride, s_stride;  // elements
  std::size_t r2, r3, bytes;                               // byte offsets of R2 and R3, total
};

template <class In, class Acc>
Layout make_layout(int C, int DK, int W) {
  Layout l;
  l.q_stride = padded_stride(DK);   // Q [C][DK]
  l.kt_stride = padded_stride(C);   // K^T [DK][C]
  l.v_stride = padded_stride(W);    // V [C][W]
  l.a_stride = padded_stride(C);    // A [C][C]
  l.s_stride = padded_stride(W);    // S [DK][W]
  const std::size_t q = std::size_t(C) * l.q_stride * sizeof(In), a = std::size_t(C) * l.a_stride * sizeof(Acc);
  const std::size_t kt = std::size_t(round4(DK)) * l.kt_stride * sizeof(In);
  const std::size_t st = std::size_t(round4(DK)) * l.s_stride * sizeof(Acc);
  const std::size_t r1 = align16(std::max(q, a)), r2 = align16(std::max(kt, st));
  l.r2 = r1;
  l.r3 = r1 + r2;
  l.bytes = r1 + r2 + align16(std::size_t(C) * l.v_stride * sizeof(In));
  return l;
}

// Threads needed for block width W.
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
  template <class T>
  using Quad = register_tiles::Quad<T>;
  static constexpr int R = register_tiles::kTile;
  static constexpr int kS = register_tiles::kStateSlots, kA = register_tiles::kScoreSlots,
                       kO = register_tiles::kOutputSlots;
  static constexpr int kBatch = 8;  // staging loads in flight per thread before their stores

  Views views;
  SequenceMap seqs;
  int H, DK, DV, C, block_dv, num_blocks, level;
  Acc scale;
  register_tiles::Layout lay;
  bool quad_qk, quad_v;  // rows of q, k (of v and o) start on 4-element boundaries: move them as quads

  // Copies rows [0, C) x quads [0, quads) of a token tile into scratch with
  // load(i, quad) -> Quad<In> (zero past L or the row's end) and store(i, quad, Quad<In>);
  // each thread issues kBatch loads before it stores, so that their latencies overlap.
  template <class Load, class Store>
  KOKKOS_INLINE_FUNCTION static void stage(int rank, int TS, int quads, int rows, const Load& load, const Store& store) {
    const int n = rows * quads;
    for (int base = rank; base < n; base += TS * kBatch) {
      Quad<In> tmp[kBatch];
      for (int u = 0; u < kBatch; ++u) {
        const int e = base + u * TS;
        if (e < n) tmp[u] = load(e / quads, e % quads);
      }
      for (int u = 0; u < kBatch; ++u) {
        const int e = base + u * TS;
        if (e < n) store(e / quads, e % quads, tmp[u]);
      }
    }
  }

  // Four elements of row x of a 4D tensor from column `col` on, zero past `cols`.
  template <class View4>
  KOKKOS_INLINE_FUNCTION static Quad<In> token_quad(const View4& x, int b, int t, int h, int col, int cols, bool as_quad) {
    if (as_quad && col + R <= cols) return register_tiles::load_quad(&x(b, t, h, col));
    Quad<In> q;
    for (int e = 0; e < R; ++e) q.v[e] = col + e < cols ? x(b, t, h, col + e) : In{};
    return q;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    using register_tiles::load_quad;
    using register_tiles::store_quad;
    const int bv = m.league_rank() % num_blocks, nh = m.league_rank() / num_blocks;
    const int n = nh / H, h = nh % H;
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b;
    const int d0 = bv * block_dv, W = DV - d0 < block_dv ? DV - d0 : block_dv;
    const int rank = m.team_rank(), TS = m.team_size();
    char* base = static_cast<char*>(m.team_scratch(level).get_shmem_aligned(lay.bytes, 16));
    In* q_s = reinterpret_cast<In*>(base);               // R1: Q [C][DK4]
    Acc* a_s = reinterpret_cast<Acc*>(base);             //     then A [C][C]
    In* kt_s = reinterpret_cast<In*>(base + lay.r2);     // R2: K^T [DK4][C]
    Acc* s_s = reinterpret_cast<Acc*>(base + lay.r2);    //     then S [DK4][W4]
    In* v_s = reinterpret_cast<In*>(base + lay.r3);      // R3: V [C][W4]
    const int qs = lay.q_stride, ks = lay.kt_stride, vs = lay.v_stride, as = lay.a_stride, ss = lay.s_stride;
    const int DK4 = register_tiles::round4(DK), wt = register_tiles::tiles(W), ct = register_tiles::tiles(C);
    const int state_tiles = register_tiles::tiles(DK) * wt, score_tiles = ct * ct, output_tiles = ct * wt;
    const bool store_snapshots = views.h.extent(0) > 0, has_initial = views.initial_state.extent(0) > 0;
    const bool quad_o = quad_v;

    // s[u]: state tile rank + u*TS, rows d = 4 (tile / wt) + x, columns j = 4 (tile % wt) + y.
    // Elements past DK or W stay zero: they meet only zero-padded K^T rows and V columns.
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
      const int L4 = register_tiles::round4(L);
      m.team_barrier();  // the previous chunk is done with R1, R2, R3
      // Stage this chunk in the input type, Q and V by rows, K transposed;
      // rows past L (a ragged last chunk) and columns past DK or W are zero.
      stage(rank, TS, DK4 / R, C,
            [&](int i, int qd) { return i < L ? token_quad(views.q, b, t0 + i, h, R * qd, DK, quad_qk) : Quad<In>{}; },
            [&](int i, int qd, const Quad<In>& x) { store_quad(q_s + i * qs + R * qd, x); });
      stage(rank, TS, DK4 / R, C,
            [&](int i, int qd) { return i < L ? token_quad(views.k, b, t0 + i, h, R * qd, DK, quad_qk) : Quad<In>{}; },
            [&](int i, int qd, const Quad<In>& x) {
              for (int e = 0; e < R; ++e) kt_s[(R * qd + e) * ks + i] = x.v[e];
            });
      stage(rank, TS, wt, C,
            [&](int i, int qj) {
              return i < L ? token_quad(views.v, b, t0 + i, h, d0 + R * qj, d0 + W, quad_v) : Quad<In>{};
            },
            [&](int i, int qj, const Quad<In>& x) { store_quad(v_s + i * vs + R * qj, x); });
      m.team_barrier();

      // dS = K^T V for this thread's state tiles, four keys per step.
      for (int u = 0; u < kS; ++u) {
        const int tile = rank + u * TS, dr = R * (tile / wt), jc = R * (tile % wt);
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) ds[u][x][y] = Acc(0);
        if (tile >= state_tiles) continue;
        for (int t = 0; t < L4; t += R) {
          Quad<In> kq[R], vq[R];
          for (int x = 0; x < R; ++x) kq[x] = load_quad(kt_s + (dr + x) * ks + t);
          for (int e = 0; e < R; ++e) vq[e] = load_quad(v_s + (t + e) * vs + jc);
          for (int e = 0; e < R; ++e)
            for (int x = 0; x < R; ++x)
              for (int y = 0; y < R; ++y) ds[u][x][y] += to_acc<Acc>(kq[x].v[e]) * to_acc<Acc>(vq[e].v[y]);
        }
      }
      // A = scale Q K^T on and below the diagonal; tiles wholly above it (or
      // whose rows are all past L) are never computed nor read.
      for (int u = 0; u < kA; ++u) {
        const int tile = rank + u * TS, ir = R * (tile / ct), tc = R * (tile % ct);
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) a[u][x][y] = Acc(0);
        if (tile >= score_tiles || tc > ir || ir >= L) continue;
        for (int d = 0; d < DK4; d += R) {
          Quad<In> qq[R], kq[R];
          for (int x = 0; x < R; ++x) qq[x] = load_quad(q_s + (ir + x) * qs + d);
          for (int e = 0; e < R; ++e) kq[e] = load_quad(kt_s + (d + e) * ks + tc);
          for (int e = 0; e < R; ++e)
            for (int x = 0; x < R; ++x)
              for (int y = 0; y < R; ++y) a[u][x][y] += to_acc<Acc>(qq[x].v[e]) * to_acc<Acc>(kq[e].v[y]);
        }
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) a[u][x][y] = tc + y <= ir + x ? scale * a[u][x][y] : Acc(0);  // causal mask
      }
      m.team_barrier();  // K^T is no longer read: R2 takes the old state

      for (int u = 0; u < kS; ++u) {
        const int tile = rank + u * TS, dr = R * (tile / wt), jc = R * (tile % wt);
        if (tile >= state_tiles) continue;
        for (int x = 0; x < R; ++x) {
          Quad<Acc> row;
          for (int y = 0; y < R; ++y) row.v[y] = s[u][x][y];
          store_quad(s_s + (dr + x) * ss + jc, row);
        }
      }
      m.team_barrier();

      if (store_snapshots)  // h[c] = the state before chunk c, in whole rows (coalesced)
        for (int e = rank; e < DK * W; e += TS) {
          const int d = e / W, j = e % W;
          views.h(seq.h_b, seq.h_c0 + c, h, d, d0 + j) = from_acc<Snap>(s_s[d * ss + j]);
        }
      // O = Q S for this thread's output tiles (scaled with A V below).
      for (int u = 0; u < kO; ++u) {
        const int tile = rank + u * TS, ir = R * (tile / wt), jc = R * (tile % wt);
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) o[u][x][y] = Acc(0);
        if (tile >= output_tiles || ir >= L) continue;
        for (int d = 0; d < DK4; d += R) {
          Quad<In> qq[R];
          Quad<Acc> sq[R];
          for (int x = 0; x < R; ++x) qq[x] = load_quad(q_s + (ir + x) * qs + d);
          for (int e = 0; e < R; ++e) sq[e] = load_quad(s_s + (d + e) * ss + jc);
          for (int e = 0; e < R; ++e)
            for (int x = 0; x < R; ++x)
              for (int y = 0; y < R; ++y) o[u][x][y] += to_acc<Acc>(qq[x].v[e]) * sq[e].v[y];
        }
      }
      m.team_barrier();  // Q is no longer read: R1 takes the scores

      for (int u = 0; u < kA; ++u) {
        const int tile = rank + u * TS, ir = R * (tile / ct), tc = R * (tile % ct);
        if (tile >= score_tiles || tc > ir || ir >= L) continue;
        for (int x = 0; x < R; ++x) {
          Quad<Acc> row;
          for (int y = 0; y < R; ++y) row.v[y] = a[u][x][y];
          store_quad(a_s + (ir + x) * as + tc, row);
        }
      }
      m.team_barrier();

      // O = scale Q S + A V over the keys up to each row's tile, rounded once into o.
      for (int u = 0; u < kO; ++u) {
        const int tile = rank + u * TS, ir = R * (tile / wt), jc = R * (tile % wt);
        if (tile >= output_tiles || ir >= L) continue;
        const int keys = ir + R < L4 ? ir + R : L4;
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) o[u][x][y] *= scale;  // A carries its scale already
        for (int t = 0; t < keys; t += R) {
          Quad<Acc> aq[R];
          Quad<In> vq[R];
          for (int x = 0; x < R; ++x) aq[x] = load_quad(a_s + (ir + x) * as + t);
          for (int e = 0; e < R; ++e) vq[e] = load_quad(v_s + (t + e) * vs + jc);
          for (int e = 0; e < R; ++e)
            for (int x = 0; x < R; ++x)
              for (int y = 0; y < R; ++y) o[u][x][y] += aq[x].v[e] * to_acc<Acc>(vq[e].v[y]);
        }
        for (int x = 0; x < R; ++x) {
          if (ir + x >= L) break;
          Out* row = &views.o(b, t0 + ir + x, h, d0 + jc);
          if (quad_o && jc + R <= W) {
            Quad<Out> q;
            for (int y = 0; y < R; ++y) q.v[y] = from_acc<Out>(o[u][x][y]);
            store_quad(row, q);
          } else {
            for (int y = 0; y < R && jc + y < W; ++y) row[y] = from_acc<Out>(o[u][x][y]);
          }
        }
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
constexpr std::size_t kScratchAlignment = 16;  // slack for get_shmem_aligned

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
  const int max_team = host_execution ? 1 : register_tiles::kGpuTeam;
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
    if (bytes + kScratchAlignment <= max0) return {{0, w, bytes + kScratchAlignment}, ts, {}};
    if (level1.team_size == 0 && bytes + kScratchAlignment <= static_cast<std::size_t>(TeamPolicy::scratch_size_max(1)))
      level1 = {{1, w, bytes + kScratchAlignment}, ts, {}};
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
  auto aligned = [](const auto& view) {
    return reinterpret_cast<std::uintptr_t>(view.data()) % alignof(register_tiles::Quad<typename std::decay_t<decltype(view)>::non_const_value_type>) == 0;
  };
  const bool quad_qk = p.DK % 4 == 0 && aligned(views.q) && aligned(views.k);
  const bool quad_v = p.DV % 4 == 0 && w % 4 == 0 && aligned(views.v) && aligned(views.o);
  Kernel kernel{views, seqs, static_cast<int>(p.H), DK, static_cast<int>(p.DV), C, w, num_blocks,
                plan.scratch.level, static_cast<Acc>(p.scale), register_tiles::make_layout<typename Kernel::In, Acc>(C, DK, w),
                quad_qk, quad_v};
  const int league = static_cast<int>(num_blocks * p.num_sequences() * p.H);
  // Launch bounds of 256 threads and two teams per SM cap the kernel at 128
  // registers (it wants 194 unbounded; 156 bytes spill). Measured on the H200
  // (bf16, block_dv 32): 23.1 ms against 32.8 ms with one team per SM at
  // 8,16384,16,128; 17.6 against 16.5 ms at 1,32768,32,128.
  Kokkos::TeamPolicy<ExecSpace, Kokkos::LaunchBounds<register_tiles::kGpuTeam, 2>> policy(league, plan.team_size);
  Kokkos::parallel_for("linattn::fused_registers",
                       policy.set_scratch_size(plan.scratch.level, Kokkos::PerTeam(plan.scratch.bytes)), kernel);
  return plan.scratch;
}

}  // namespace linattn
