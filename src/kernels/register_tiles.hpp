// The building blocks of the portable register-blocked kernels (`--gemm
// registers`, every Kokkos backend): one chunk of one head staged in team
// scratch in the input type, and the chunk's products computed on 4 x 4
// register tiles that each thread of the team owns.
//   - q, k, v are staged in their input type (bf16: half the bytes of fp32),
//     so that a chunk, the published state and the scores fit the ~40 KB of
//     level-0 scratch a CUDA team gets (docs/ARCHITECTURE.md, "Scratch
//     plans"); fp32 tiles would need 150+ KB and fall back to level-1 scratch
//     in device memory;
//   - every operand moves as a quad (four consecutive elements, one aligned
//     8- or 16-byte load), K is staged transposed so that the keys of a tile
//     are consecutive, and rows are padded to an odd number of quads so that
//     neighbouring rows fall on different banks;
//   - staging loads are batched (kBatch per thread before their stores), so
//     that their device-memory latencies overlap.
// Scratch regions, reused within a chunk:
//   R1: Q [C][DK] (input type), then the scores A [C][C] (accumulation type)
//   R2: K^T [DK][C] (input type), then the state S [DK][W] (accumulation type)
//   R3: V [C][W] (input type)
//   with a gate, after them: the chunk's decay tile (accumulation type;
//   chunk_gate.hpp): rows b [4][C] for scalar gates, b [C][DK] per key
//   channel, filled once per chunk, applied by register_gate.hpp
// Elements past DK, W or the chunk's L tokens are staged as zeros, so that
// whole quads and tiles can be computed without bounds checks.
#pragma once

#include "core/half_types.hpp"
#include "core/problem.hpp"
#include "kernels/chunk_gate.hpp"
#include "kernels/execution.hpp"
#include "kernels/register_gate.hpp"
#include "kernels/scratch_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
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
// for bf16, 16 for fp32; alignment capped at 16 bytes, the widest load a GPU
// has: fp64 quads move as two 16-byte halves).
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
template <class View>
bool quad_aligned(const View& view) {
  using T = typename View::non_const_value_type;
  return reinterpret_cast<std::uintptr_t>(view.data()) % alignof(Quad<T>) == 0;
}

// A row stride (elements) for rows of n elements: a multiple of 4 (quads stay
// aligned) that is an odd number of quads, so that rows 1, 2, 3 ... apart
// start on different banks.
inline int padded_stride(int n) {
  const int q = tiles(n);
  return kTile * (q % 2 == 1 ? q : q + 1);
}

inline std::size_t align16(std::size_t x) { return (x + 15) / 16 * 16; }
constexpr std::size_t kScratchAlignment = 16;  // slack for get_shmem_aligned

// Where the three scratch regions start and how their rows are strided.
struct Layout {
  int q_stride, kt_stride, v_stride, a_stride, s_stride;  // elements
  std::size_t r2, r3, bytes;                               // byte offsets of R2 and R3, total
};

// A gate's decay tile (chunk_gate.hpp's decay_extent: kDecayRows x C for
// scalar gates, b C x DK per key channel, accumulation type) is a layout's
// last bytes: make_layout and make_state_pass_layout add it for a decay form,
// and the gated kernels find it from the end (decay_tile_at), so that Layout
// and ChunkTiles stay what level 1 compiles.
template <class Acc>
KOKKOS_INLINE_FUNCTION std::size_t decay_tile_bytes(DecayForm form, int C, int DK) {
  const DecayExtent e = decay_extent(form, C, DK);
  return (std::size_t(e.rows * e.cols) * sizeof(Acc) + 15) / 16 * 16;  // align16
}
// `base`: the start of the team's layout (ChunkTiles::q_s).
template <class Acc>
KOKKOS_INLINE_FUNCTION Tile<Acc> decay_tile_at(void* base, const Layout& l, DecayForm form, int C, int DK) {
  const DecayExtent e = decay_extent(form, C, DK);
  return Tile<Acc>(reinterpret_cast<Acc*>(static_cast<char*>(base) + l.bytes - decay_tile_bytes<Acc>(form, C, DK)),
                   e.rows, e.cols);
}

// The chunk's decay (chunk_decay into the decay tile of the team's layout
// `lay` at `base`, ChunkTiles::q_s) in a gated instantiation; NoDecay at level
// 1. The caller's next barrier publishes it.
template <DecayForm kForm, class Views>
KOKKOS_INLINE_FUNCTION auto chunk_decay_rows(const Member& m, void* base, const Layout& lay, int C, int DK,
                                             const Views& views, int bb, int t0, int L, int h) {
  using Acc = typename Views::acc_type;
  if constexpr (kForm != DecayForm::none) {
    return chunk_decay(m, decay_tile_at<Acc>(base, lay, kForm, C, DK), views, bb, t0, L, h);
  } else {
    return NoDecay{};
  }
}

template <class In, class Acc>
Layout make_layout(int C, int DK, int W, DecayForm form = DecayForm::none) {
  Layout l;
  l.q_stride = padded_stride(DK);
  l.kt_stride = padded_stride(C);
  l.v_stride = padded_stride(W);
  l.a_stride = padded_stride(C);
  l.s_stride = padded_stride(W);
  const std::size_t q = std::size_t(C) * l.q_stride * sizeof(In), a = std::size_t(C) * l.a_stride * sizeof(Acc);
  const std::size_t kt = std::size_t(round4(DK)) * l.kt_stride * sizeof(In);
  const std::size_t st = std::size_t(round4(DK)) * l.s_stride * sizeof(Acc);
  const std::size_t r1 = align16(std::max(q, a)), r2 = align16(std::max(kt, st));
  l.r2 = r1;
  l.r3 = r1 + r2;
  l.bytes = r1 + r2 + align16(std::size_t(C) * l.v_stride * sizeof(In)) + decay_tile_bytes<Acc>(form, C, DK);
  return l;
}

// The state pass's layout: R2 = K by rows [C][q_stride] at the start, R3 = V
// after it, no R1 (about 22 KB for bf16 at chunk 64, DK 128, W 32, against
// 37 KB for the full layout: more teams fit an SM); a gate's decay rows last.
template <class In, class Acc>
Layout make_state_pass_layout(int C, int DK, int W, DecayForm form = DecayForm::none) {
  Layout l{};
  l.q_stride = padded_stride(DK);
  l.v_stride = padded_stride(W);
  l.r2 = 0;
  // one quad of slack: the 8-row tiles read up to 4 elements past round4(DK) in the last row
  l.r3 = align16((std::size_t(C) * l.q_stride + kTile) * sizeof(In));
  l.bytes = l.r3 + align16(std::size_t(C) * l.v_stride * sizeof(In)) + decay_tile_bytes<Acc>(form, C, DK);
  return l;
}

// The block width and team size: the widest of DV, 128, 64, 32, 16, 8, 4
// whose tiles fit the team's register slots and whose regions fit level-0
// scratch (block_dv > 0 asks for one width); when no width fits level 0 (fp32
// and fp64 inputs stage 4-8 byte tiles), the widest that fits the team, on
// level 1. team_size 0 takes the smallest team (a multiple of 32) that holds
// every tile; on a host backend the team is one thread. `form`: the layouts
// carry the decay tile, so that a gate may narrow the width, move it to level
// 1 or leave no plan.
struct Plan {
  ScratchPlan scratch;
  int team_size = 0;
  std::string unavailable;  // why no plan exists (then scratch is empty)
};

template <class In, class Acc>
Plan make_plan(const Problem& p, std::int64_t block_dv, int team_size, DecayForm form = DecayForm::none) {
  const int C = static_cast<int>(p.chunk), DK = static_cast<int>(p.DK), DV = static_cast<int>(p.DV);
  std::vector<int> widths;
  if (block_dv > 0) {
    widths.push_back(static_cast<int>(std::min<std::int64_t>(block_dv, DV)));
  } else {
    widths.push_back(DV);
    for (int w : {128, 64, 32, 16, 8, 4})
      if (w < DV) widths.push_back(w);
  }
  const int max_team = host_execution ? 1 : kGpuTeam;
  const std::size_t max0 = static_cast<std::size_t>(TeamPolicy::scratch_size_max(0));
  const std::size_t max1 = static_cast<std::size_t>(TeamPolicy::scratch_size_max(1));
  auto need = [](int tiles_, int slots) { return (tiles_ + slots - 1) / slots; };
  Plan level1, none;
  for (int w : widths) {
    const std::size_t bytes = make_layout<In, Acc>(C, DK, w, form).bytes + kScratchAlignment;
    const int needed = std::max({need(tiles(DK) * tiles(w), kStateSlots), need(tiles(C) * tiles(C), kScoreSlots),
                                 need(tiles(C) * tiles(w), kOutputSlots)});
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
    if (level1.team_size == 0 && bytes <= max1) level1 = {{1, w, bytes}, ts, {}};
  }
  if (level1.team_size > 0) return level1;
  if (none.unavailable.empty()) none.unavailable = "the tiles need more team scratch than the backend offers";
  return none;
}

// dst[0..3] = values rounded to T, as one quad store when `quad` (dst aligned)
// and all four are inside (`count` >= 4), else element by element up to count.
template <class T, class Acc>
KOKKOS_INLINE_FUNCTION void store_rounded(T* dst, const Acc* values, int count, bool quad) {
  if (quad && count >= kTile) {
    Quad<T> q;
    for (int y = 0; y < kTile; ++y) q.v[y] = from_acc<T>(values[y]);
    store_quad(dst, q);
  } else {
    for (int y = 0; y < kTile && y < count; ++y) dst[y] = from_acc<T>(values[y]);
  }
}

// A thread's 4 x 4 register tile.
template <class Acc>
using RegTile = Acc[kTile][kTile];

template <class Acc>
KOKKOS_INLINE_FUNCTION void zero(RegTile<Acc>& t) {
  for (int x = 0; x < kTile; ++x)
    for (int y = 0; y < kTile; ++y) t[x][y] = Acc(0);
}

// One team's view of one chunk in scratch, and the tile products on it. Tile
// numbering: state tile s covers S rows 4 (s / wt).., columns 4 (s % wt)..;
// score tile a covers A rows 4 (a / ct).., keys 4 (a % ct)..; output tile o
// covers o rows 4 (o / wt).., columns 4 (o % wt).., with wt = tiles(W), ct = tiles(C).
template <class In, class Acc>
struct ChunkTiles {
  static constexpr int R = kTile;
  static constexpr int kBatch = 8;  // staging loads in flight per thread before their stores
  In* q_s;
  Acc* a_s;
  In* kt_s;
  Acc* s_s;
  In* v_s;
  int qs, ks, vs, as, ss;
  int DK, DK4, C, W, wt, ct, rank, TS;
  int state_tiles, score_tiles, output_tiles;

  KOKKOS_INLINE_FUNCTION ChunkTiles(const Member& m, int level, const Layout& lay, int DK_, int C_, int W_)
      : qs(lay.q_stride), ks(lay.kt_stride), vs(lay.v_stride), as(lay.a_stride), ss(lay.s_stride), DK(DK_),
        DK4(round4(DK_)), C(C_), W(W_), wt(tiles(W_)), ct(tiles(C_)), rank(m.team_rank()), TS(m.team_size()) {
    char* base = static_cast<char*>(m.team_scratch(level).get_shmem_aligned(lay.bytes, kScratchAlignment));
    q_s = reinterpret_cast<In*>(base);
    a_s = reinterpret_cast<Acc*>(base);
    kt_s = reinterpret_cast<In*>(base + lay.r2);
    s_s = reinterpret_cast<Acc*>(base + lay.r2);
    v_s = reinterpret_cast<In*>(base + lay.r3);
    state_tiles = tiles(DK) * wt;
    score_tiles = ct * ct;
    output_tiles = ct * wt;
  }

  // The u-th tile of this thread, or -1 past the last tile.
  KOKKOS_INLINE_FUNCTION int my_tile(int u, int count) const {
    const int t = rank + u * TS;
    return t < count ? t : -1;
  }

  // Moves the chunk's tokens t0 .. t0+L-1 of head h, columns col0 + 4 qc (qc <
  // quads) of a token tensor x into scratch quad by quad, calling
  // store(token, qc, quad); rows past L and columns past `cols` are zero. Each
  // thread issues kBatch loads before it stores, so that their latencies
  // overlap; neighbouring threads take neighbouring quads of a row.
  template <class View4, class Store>
  KOKKOS_INLINE_FUNCTION void stage(const View4& x, int b, int t0, int L, int h, int col0, int cols, int quads,
                                    bool quad, const Store& store) const {
    // Element e = rank + k TS is (row e / quads, quad e % quads); both advance
    // by adding (TS / quads, TS % quads) instead of dividing per element (the
    // divisions made the state pass issue 2.5x the instructions its products
    // need; ncu).
    const int di = TS / quads, dq = TS % quads;
    int i = rank / quads, qc = rank % quads;
    while (i < C) {
      Quad<In> tmp[kBatch];
      int rows[kBatch], cols_q[kBatch];
      for (int u = 0; u < kBatch; ++u) {
        rows[u] = i;
        cols_q[u] = qc;
        if (i < C) tmp[u] = i < L ? token_quad(x, b, t0 + i, h, col0 + R * qc, cols, quad) : Quad<In>{};
        i += di;
        qc += dq;
        if (qc >= quads) {
          qc -= quads;
          ++i;
        }
      }
      for (int u = 0; u < kBatch; ++u)
        if (rows[u] < C) store(rows[u], cols_q[u], tmp[u]);
    }
  }

  // Four elements of x(b, t, h, col..), zero past column `cols`.
  template <class View4>
  KOKKOS_INLINE_FUNCTION static Quad<In> token_quad(const View4& x, int b, int t, int h, int col, int cols,
                                                    bool as_quad) {
    if (as_quad && col + R <= cols) return load_quad(&x(b, t, h, col));
    Quad<In> q;
    for (int e = 0; e < R; ++e) q.v[e] = col + e < cols ? x(b, t, h, col + e) : In{};
    return q;
  }

  // The chunk's rows of q (into R1) and k (into R2 for the state pass, which
  // needs no K^T), columns 0 .. DK, and of v (into R3), columns d0 .. d0+W;
  // each into rows of `stride` elements.
  template <class View4>
  KOKKOS_INLINE_FUNCTION void stage_rows(const View4& x, int b, int t0, int L, int h, int col0, int cols, bool quad,
                                         In* dst, int stride) const {
    stage(x, b, t0, L, h, col0, cols, tiles(cols - col0), quad,
          [&](int i, int qc, const Quad<In>& v) { store_quad(dst + i * stride + R * qc, v); });
  }
  template <class View4>
  KOKKOS_INLINE_FUNCTION void stage_q(const View4& q, int b, int t0, int L, int h, bool quad) const {
    stage_rows(q, b, t0, L, h, 0, DK, quad, q_s, qs);
  }
  template <class View4>
  KOKKOS_INLINE_FUNCTION void stage_k_rows(const View4& k, int b, int t0, int L, int h, bool quad) const {
    stage_rows(k, b, t0, L, h, 0, DK, quad, kt_s, qs);
  }
  template <class View4>
  KOKKOS_INLINE_FUNCTION void stage_v(const View4& v, int b, int t0, int L, int h, int d0, bool quad) const {
    stage_rows(v, b, t0, L, h, d0, d0 + W, quad, v_s, vs);
  }
  // K transposed into R2 (for the scores, whose tiles take four consecutive
  // keys). Measured on the H200: staging it by runs of 8 tokens, so that a
  // warp's scalar stores into K^T avoid bank conflicts, made the fused kernel
  // 3% slower and the state pass 11% slower than this row-by-row order.
  template <class View4>
  KOKKOS_INLINE_FUNCTION void stage_kt(const View4& k, int b, int t0, int L, int h, bool quad) const {
    stage(k, b, t0, L, h, 0, DK, DK4 / R, quad, [&](int i, int qc, const Quad<In>& x) {
      for (int j = 0; j < R; ++j) kt_s[(R * qc + j) * ks + i] = x.v[j];
    });
  }

  // ds += K^T V over the chunk's first L4 keys (a multiple of 4), for state tile `tile`.
  KOKKOS_INLINE_FUNCTION void add_state_update(RegTile<Acc>& ds, int tile, int L4) const {
    if (tile < 0) return;
    const int dr = R * (tile / wt), jc = R * (tile % wt);
    for (int t = 0; t < L4; t += R) {
      Quad<In> kq[R], vq[R];
      for (int x = 0; x < R; ++x) kq[x] = load_quad(kt_s + (dr + x) * ks + t);
      for (int e = 0; e < R; ++e) vq[e] = load_quad(v_s + (t + e) * vs + jc);
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) ds[x][y] += to_acc<Acc>(kq[x].v[e]) * to_acc<Acc>(vq[e].v[y]);
    }
  }

  // The gated add_state_update: key j weighted by exp(b_L - b_j) (register_gate.hpp),
  // a step of its own so that level 1's stays the code it was. The four keys'
  // weights meet the widened K^T quads before the products, which then have
  // level 1's form: weighting V inside the product made the host compiler
  // vectorize it into scalar products and separate adds, no FMAs, and a zero
  // gate lost level 1's bits (tests/test_gated_kernels.cpp, ZeroGateGivesLevelOneBits).
  KOKKOS_INLINE_FUNCTION void add_decayed_state_update(RegTile<Acc>& ds, int tile, int L4,
                                                       const ChunkDecay<Acc>& decay) const {
    if (tile < 0) return;
    const int dr = R * (tile / wt), jc = R * (tile % wt);
    for (int t = 0; t < L4; t += R) {
      Quad<In> kq[R], vq[R];
      for (int x = 0; x < R; ++x) kq[x] = load_quad(kt_s + (dr + x) * ks + t);
      for (int e = 0; e < R; ++e) vq[e] = load_quad(v_s + (t + e) * vs + jc);
      Acc w[R], kf[R][R];
      for (int e = 0; e < R; ++e) w[e] = decay.b(2, t + e);
      for (int x = 0; x < R; ++x)
        for (int e = 0; e < R; ++e) kf[x][e] = to_acc<Acc>(kq[x].v[e]) * w[e];
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) ds[x][y] += kf[x][e] * to_acc<Acc>(vq[e].v[y]);
    }
  }

  // Per key channel (gk): add_state_update with key j's channel d weighted by
  // exp(b_Ld - b_jd) (register_gate.hpp), the weights meeting the widened K^T
  // quads as in add_decayed_state_update. Rows past DK are zero and have no b.
  KOKKOS_INLINE_FUNCTION void add_channel_decayed_state_update(RegTile<Acc>& ds, int tile, int L4,
                                                               const ChunkDecay<Acc>& decay) const {
    if (tile < 0) return;
    const int dr = R * (tile / wt), jc = R * (tile % wt), rows = DK - dr < R ? DK - dr : R;
    Acc last[R];
    for (int x = 0; x < rows; ++x) last[x] = decay.b(decay.L - 1, dr + x);
    for (int t = 0; t < L4; t += R) {
      Quad<In> kq[R], vq[R];
      for (int x = 0; x < R; ++x) kq[x] = load_quad(kt_s + (dr + x) * ks + t);
      for (int e = 0; e < R; ++e) vq[e] = load_quad(v_s + (t + e) * vs + jc);
      Acc kf[R][R];
      for (int x = 0; x < R; ++x)
        for (int e = 0; e < R; ++e)
          kf[x][e] = x < rows ? to_acc<Acc>(kq[x].v[e]) * kernel_exp(last[x] - decay.b(t + e, dr + x)) : Acc(0);
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) ds[x][y] += kf[x][e] * to_acc<Acc>(vq[e].v[y]);
    }
  }

  // s += K^T V over the chunk's first L4 keys for the RX x 4 tile at state
  // rows dr.., columns jc.. (RX a multiple of 4), with K staged by rows
  // (stage_k_rows): the state pass's product. Each key's K and V quads are
  // widened once and used RX x 4 times (8 rows: 12 loads and conversions per
  // 128 FMAs; 4 rows: 8 per 64).
  template <int RX>
  KOKKOS_INLINE_FUNCTION void add_state_update_rows(Acc (&s)[RX][R], int dr, int jc, int L4) const {
    for (int t = 0; t < L4; t += R) {
      Acc kf[R][RX], vf[R][R];
      for (int e = 0; e < R; ++e) {
        for (int xq = 0; xq < RX; xq += R) {
          const Quad<In> kq = load_quad(kt_s + (t + e) * qs + dr + xq);
          for (int x = 0; x < R; ++x) kf[e][xq + x] = to_acc<Acc>(kq.v[x]);
        }
        const Quad<In> vq = load_quad(v_s + (t + e) * vs + jc);
        for (int y = 0; y < R; ++y) vf[e][y] = to_acc<Acc>(vq.v[y]);
      }
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < RX; ++x)
          for (int y = 0; y < R; ++y) s[x][y] += kf[e][x] * vf[e][y];
    }
  }

  // The gated add_state_update_rows (a step of its own, as
  // add_decayed_state_update): key j's widened V row weighted by exp(b_L - b_j).
  template <int RX>
  KOKKOS_INLINE_FUNCTION void add_decayed_state_update_rows(Acc (&s)[RX][R], int dr, int jc, int L4,
                                                            const ChunkDecay<Acc>& decay) const {
    for (int t = 0; t < L4; t += R) {
      Acc kf[R][RX], vf[R][R];
      for (int e = 0; e < R; ++e) {
        for (int xq = 0; xq < RX; xq += R) {
          const Quad<In> kq = load_quad(kt_s + (t + e) * qs + dr + xq);
          for (int x = 0; x < R; ++x) kf[e][xq + x] = to_acc<Acc>(kq.v[x]);
        }
        const Quad<In> vq = load_quad(v_s + (t + e) * vs + jc);
        const Acc w = decay.b(2, t + e);
        for (int y = 0; y < R; ++y) vf[e][y] = to_acc<Acc>(vq.v[y]) * w;
      }
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < RX; ++x)
          for (int y = 0; y < R; ++y) s[x][y] += kf[e][x] * vf[e][y];
    }
  }

  // Per key channel (gk): add_state_update_rows with key j's channel d
  // weighted by exp(b_Ld - b_jd), K staged by rows (stage_k_rows).
  template <int RX>
  KOKKOS_INLINE_FUNCTION void add_channel_decayed_state_update_rows(Acc (&s)[RX][R], int dr, int jc, int L4,
                                                                    const ChunkDecay<Acc>& decay) const {
    const int rows = DK - dr < RX ? DK - dr : RX;
    Acc last[RX];
    for (int x = 0; x < rows; ++x) last[x] = decay.b(decay.L - 1, dr + x);
    for (int t = 0; t < L4; t += R) {
      Acc kf[R][RX], vf[R][R];
      for (int e = 0; e < R; ++e) {
        for (int xq = 0; xq < RX; xq += R) {
          const Quad<In> kq = load_quad(kt_s + (t + e) * qs + dr + xq);
          for (int x = 0; x < R; ++x) kf[e][xq + x] = to_acc<Acc>(kq.v[x]);
        }
        for (int x = 0; x < RX; ++x)
          kf[e][x] = x < rows ? kf[e][x] * kernel_exp(last[x] - decay.b(t + e, dr + x)) : Acc(0);
        const Quad<In> vq = load_quad(v_s + (t + e) * vs + jc);
        for (int y = 0; y < R; ++y) vf[e][y] = to_acc<Acc>(vq.v[y]);
      }
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < RX; ++x)
          for (int y = 0; y < R; ++y) s[x][y] += kf[e][x] * vf[e][y];
    }
  }

  // Whether score tile `tile` is computed and read: on or below the diagonal, rows before L.
  KOKKOS_INLINE_FUNCTION bool score_needed(int tile, int L) const {
    if (tile < 0) return false;
    const int ir = R * (tile / ct), tc = R * (tile % ct);
    return tc <= ir && ir < L;
  }

  // a = scale Q K^T, zero above the diagonal (causal mask: zero, no softmax).
  KOKKOS_INLINE_FUNCTION void scores(RegTile<Acc>& a, int tile, int L, Acc scale) const {
    zero(a);
    if (!score_needed(tile, L)) return;
    const int ir = R * (tile / ct), tc = R * (tile % ct);
    for (int d = 0; d < DK4; d += R) {
      Quad<In> qq[R], kq[R];
      for (int x = 0; x < R; ++x) qq[x] = load_quad(q_s + (ir + x) * qs + d);
      for (int e = 0; e < R; ++e) kq[e] = load_quad(kt_s + (d + e) * ks + tc);
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) a[x][y] += to_acc<Acc>(qq[x].v[e]) * to_acc<Acc>(kq[e].v[y]);
    }
    for (int x = 0; x < R; ++x)
      for (int y = 0; y < R; ++y) a[x][y] = tc + y <= ir + x ? scale * a[x][y] : Acc(0);
  }

  // Gated: score tile `tile` (from scores) decayed by exp(b_i - b_j) where the mask keeps it.
  KOKKOS_INLINE_FUNCTION void decay_scores(RegTile<Acc>& a, int tile, int L, const ChunkDecay<Acc>& decay) const {
    if (!score_needed(tile, L)) return;
    decay_score_tile(a, decay, R * (tile / ct), R * (tile % ct));
  }


  // Per key channel (gk): a = scale sum_d q_id k_jd exp(b_id - b_jd) for
  // j <= i, zero above the diagonal. Below the diagonal tile every key j of
  // the tile precedes every row i, and the factor splits at the tile's last
  // key r: exp(b_id - b_rd) exp(b_rd - b_jd), both <= 1 (never overflowing,
  // fading to 0 as the true factor does), 8 exps per channel for 16
  // products. The diagonal tile takes one exp per score and channel, masked.
  KOKKOS_INLINE_FUNCTION void channel_scores(RegTile<Acc>& a, int tile, int L, Acc scale,
                                             const ChunkDecay<Acc>& decay) const {
    zero(a);
    if (!score_needed(tile, L)) return;
    const int ir = R * (tile / ct), tc = R * (tile % ct);
    if (tc < ir) {
      const int r = tc + R - 1;
      for (int d = 0; d < DK; ++d) {
        const Acc br = decay.b(r, d);
        const Quad<In> kq = load_quad(kt_s + d * ks + tc);
        Acc qf[R], kf[R];
        for (int x = 0; x < R; ++x) qf[x] = to_acc<Acc>(q_s[(ir + x) * qs + d]) * kernel_exp(decay.b(ir + x, d) - br);
        for (int y = 0; y < R; ++y) kf[y] = to_acc<Acc>(kq.v[y]) * kernel_exp(br - decay.b(tc + y, d));
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) a[x][y] += qf[x] * kf[y];
      }
    } else {
      for (int d = 0; d < DK; ++d) {
        const Quad<In> kq = load_quad(kt_s + d * ks + tc);
        for (int x = 0; x < R; ++x) {
          const Acc q = to_acc<Acc>(q_s[(ir + x) * qs + d]), bi = decay.b(ir + x, d);
          for (int y = 0; y <= x; ++y) a[x][y] += q * to_acc<Acc>(kq.v[y]) * kernel_exp(bi - decay.b(tc + y, d));
        }
      }
    }
    for (int x = 0; x < R; ++x)
      for (int y = 0; y < R; ++y) a[x][y] = tc + y <= ir + x ? scale * a[x][y] : Acc(0);
  }

  // R2 (after K^T's last read) takes state tile `tile` from registers.
  KOKKOS_INLINE_FUNCTION void publish_state(const RegTile<Acc>& s, int tile) const {
    if (tile < 0) return;
    const int dr = R * (tile / wt), jc = R * (tile % wt);
    for (int x = 0; x < R; ++x) {
      Quad<Acc> row;
      for (int y = 0; y < R; ++y) row.v[y] = s[x][y];
      store_quad(s_s + (dr + x) * ss + jc, row);
    }
  }

  // o = Q S (S from R2) for output tile `tile`.
  KOKKOS_INLINE_FUNCTION void output_from_state(RegTile<Acc>& o, int tile, int L) const {
    zero(o);
    if (tile < 0) return;
    const int ir = R * (tile / wt), jc = R * (tile % wt);
    if (ir >= L) return;
    for (int d = 0; d < DK4; d += R) {
      Quad<In> qq[R];
      Quad<Acc> sq[R];
      for (int x = 0; x < R; ++x) qq[x] = load_quad(q_s + (ir + x) * qs + d);
      for (int e = 0; e < R; ++e) sq[e] = load_quad(s_s + (d + e) * ss + jc);
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) o[x][y] += to_acc<Acc>(qq[x].v[e]) * sq[e].v[y];
    }
  }

  // Per key channel (gk): o = (Q .* exp(b)) S (S from R2) for output tile
  // `tile`, q_id by exp(b_id) as it is widened. A step of its own beside
  // output_from_state, as the gated state updates are, so that level 1's stays
  // the code it was.
  KOKKOS_INLINE_FUNCTION void channel_output_from_state(RegTile<Acc>& o, int tile, int L,
                                                        const ChunkDecay<Acc>& decay) const {
    zero(o);
    if (tile < 0) return;
    const int ir = R * (tile / wt), jc = R * (tile % wt);
    if (ir >= L) return;
    for (int d = 0; d < DK4; d += R) {
      Quad<In> qq[R];
      Quad<Acc> sq[R];
      for (int x = 0; x < R; ++x) qq[x] = load_quad(q_s + (ir + x) * qs + d);
      for (int e = 0; e < R; ++e) sq[e] = load_quad(s_s + (d + e) * ss + jc);
      Acc qf[R][R];
      for (int x = 0; x < R; ++x)
        for (int e = 0; e < R; ++e)
          qf[x][e] = d + e < DK ? to_acc<Acc>(qq[x].v[e]) * kernel_exp(decay.b(ir + x, d + e)) : Acc(0);
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) o[x][y] += qf[x][e] * sq[e].v[y];
    }
  }

  // R1 (after Q's last read) takes score tile `tile` from registers.
  KOKKOS_INLINE_FUNCTION void publish_scores(const RegTile<Acc>& a, int tile, int L) const {
    if (!score_needed(tile, L)) return;
    const int ir = R * (tile / ct), tc = R * (tile % ct);
    for (int x = 0; x < R; ++x) {
      Quad<Acc> row;
      for (int y = 0; y < R; ++y) row.v[y] = a[x][y];
      store_quad(a_s + (ir + x) * as + tc, row);
    }
  }

  // o = scale o + A V over the keys up to the tile's rows, rounded once into
  // out(b, t0 + row, h, d0 + column) for rows < L and columns < W.
  template <class View4>
  KOKKOS_INLINE_FUNCTION void finish_output(RegTile<Acc>& o, int tile, int L, Acc scale, const View4& out, int b,
                                            int t0, int h, int d0, bool quad) const {
    using Out = typename View4::non_const_value_type;
    if (tile < 0) return;
    const int ir = R * (tile / wt), jc = R * (tile % wt), L4 = round4(L);
    if (ir >= L) return;
    const int keys = ir + R < L4 ? ir + R : L4;
    for (int x = 0; x < R; ++x)
      for (int y = 0; y < R; ++y) o[x][y] *= scale;  // A carries its scale already
    for (int t = 0; t < keys; t += R) {
      Quad<Acc> aq[R];
      Quad<In> vq[R];
      for (int x = 0; x < R; ++x) aq[x] = load_quad(a_s + (ir + x) * as + t);
      for (int e = 0; e < R; ++e) vq[e] = load_quad(v_s + (t + e) * vs + jc);
      for (int e = 0; e < R; ++e)
        for (int x = 0; x < R; ++x)
          for (int y = 0; y < R; ++y) o[x][y] += aq[x].v[e] * to_acc<Acc>(vq[e].v[y]);
    }
    for (int x = 0; x < R && ir + x < L; ++x) {
      Out* row = &out(b, t0 + ir + x, h, d0 + jc);
      if (quad && jc + R <= W) {
        Quad<Out> qo;
        for (int y = 0; y < R; ++y) qo.v[y] = from_acc<Out>(o[x][y]);
        store_quad(row, qo);
      } else {
        for (int y = 0; y < R && jc + y < W; ++y) row[y] = from_acc<Out>(o[x][y]);
      }
    }
  }

  // The end of a chunk's output, with the state in R2 and this thread's score
  // tiles in `a`: O = Q S by from_state(o, tile) (Q's last reads), A into R1,
  // O = scale O + A V stored into out(b, t0 + row, h, d0 + column).
  template <int kA, int kO, class View4, class FromState>
  KOKKOS_INLINE_FUNCTION void outputs_with(const Member& m, const RegTile<Acc> (&a)[kA], int L, Acc scale,
                                           const View4& out, int b, int t0, int h, int d0, bool quad,
                                           const FromState& from_state) const {
    RegTile<Acc> o[kO];
    for (int u = 0; u < kO; ++u) from_state(o[u], my_tile(u, output_tiles));
    m.team_barrier();  // Q is no longer read: R1 takes the scores
    for (int u = 0; u < kA; ++u) publish_scores(a[u], my_tile(u, score_tiles), L);
    m.team_barrier();
    for (int u = 0; u < kO; ++u) finish_output(o[u], my_tile(u, output_tiles), L, scale, out, b, t0, h, d0, quad);
  }

  // Level 1's outputs.
  template <int kA, int kO, class View4>
  KOKKOS_INLINE_FUNCTION void outputs(const Member& m, const RegTile<Acc> (&a)[kA], int L, Acc scale,
                                      const View4& out, int b, int t0, int h, int d0, bool quad) const {
    outputs_with<kA, kO>(m, a, L, scale, out, b, t0, h, d0, quad,
                         [&](RegTile<Acc>& o, int tile) { output_from_state(o, tile, L); });
  }

  // The gated outputs: the rows of Q S by exp(b_i) before the scores (decayed
  // by decay_scores) add A V. A step of its own, so that level 1's outputs
  // stays the code it was.
  template <int kA, int kO, class View4>
  KOKKOS_INLINE_FUNCTION void decayed_outputs(const Member& m, const RegTile<Acc> (&a)[kA], int L, Acc scale,
                                              const View4& out, int b, int t0, int h, int d0, bool quad,
                                              const ChunkDecay<Acc>& decay) const {
    outputs_with<kA, kO>(m, a, L, scale, out, b, t0, h, d0, quad, [&](RegTile<Acc>& o, int tile) {
      output_from_state(o, tile, L);
      if (tile >= 0) decay_rows(o, decay, R * (tile / wt));
    });
  }

  // Per key channel (gk): Q S taken as (Q .* exp(b)) S, the scores already
  // decayed (channel_scores).
  template <int kA, int kO, class View4>
  KOKKOS_INLINE_FUNCTION void channel_decayed_outputs(const Member& m, const RegTile<Acc> (&a)[kA], int L, Acc scale,
                                                      const View4& out, int b, int t0, int h, int d0, bool quad,
                                                      const ChunkDecay<Acc>& decay) const {
    outputs_with<kA, kO>(m, a, L, scale, out, b, t0, h, d0, quad,
                         [&](RegTile<Acc>& o, int tile) { channel_output_from_state(o, tile, L, decay); });
  }
};

}  // namespace register_tiles
}  // namespace linattn
