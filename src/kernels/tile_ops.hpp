// Team-cooperative moves between device tensors and scratch tiles. Every load
// widens to the accumulation type and every store rounds once to the stored
// type; callers place the team barriers.
#pragma once

#include "core/half_types.hpp"
#include "kernels/execution.hpp"

namespace linattn {

// Runs f(r, c) for r < rows, c < cols across the team. On the host, rows go
// to the team's threads and each runs a contiguous inner loop over c: no
// integer division per element (with one flat loop, the divisions took about
// 3x the time of the host tile GEMMs on one core).
// On a GPU one flat range, so that neighbouring threads take neighbouring
// columns (coalesced accesses).
template <class F>
KOKKOS_INLINE_FUNCTION void team_for_tile(const Member& m, int rows, int cols, const F& f) {
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows), [&](const int r) {
      for (int c = 0; c < cols; ++c) f(r, c);
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows * cols), [&](const int e) { f(e / cols, e % cols); });
  }
}

// tile(r, c) = x(b, t0 + r, h, d0 + c) for r < rows, c < cols; the tile's rows
// past `rows` (a ragged last chunk) are zeroed so that full-tile GEMMs stay exact.
template <class Acc, class View4>
KOKKOS_INLINE_FUNCTION void load_token_tile(const Member& m, const Tile<Acc>& tile, const View4& x, int b, int t0,
                                            int rows, int h, int d0, int cols) {
  const int all_rows = static_cast<int>(tile.extent(0));
  team_for_tile(m, all_rows, cols, [&](const int r, const int c) {
    tile(r, c) = r < rows ? to_acc<Acc>(x(b, t0 + r, h, d0 + c)) : Acc(0);
  });
}

// x(b, t0 + r, h, d0 + c) = tile(r, c), rounded to x's element type.
template <class Acc, class View4>
KOKKOS_INLINE_FUNCTION void store_token_tile(const Member& m, const View4& x, const Tile<Acc>& tile, int b, int t0,
                                             int rows, int h, int d0, int cols) {
  using T = typename View4::non_const_value_type;
  team_for_tile(m, rows, cols, [&](const int r, const int c) {
    x(b, t0 + r, h, d0 + c) = from_acc<T>(tile(r, c));
  });
}

// S(i, j) = state(b, h, i, d0 + j), or zero when the state View is empty.
template <class Acc, class View4>
KOKKOS_INLINE_FUNCTION void load_state(const Member& m, const Tile<Acc>& S, const View4& state, int b, int h, int d0) {
  const int rows = static_cast<int>(S.extent(0)), cols = static_cast<int>(S.extent(1));
  const bool present = state.extent(0) > 0;
  team_for_tile(m, rows, cols, [&](const int i, const int j) {
    S(i, j) = present ? to_acc<Acc>(state(b, h, i, d0 + j)) : Acc(0);
  });
}

// state(b, h, i, d0 + j) = S(i, j).
template <class Acc, class View4>
KOKKOS_INLINE_FUNCTION void store_state(const Member& m, const View4& state, const Tile<Acc>& S, int b, int h, int d0) {
  using T = typename View4::non_const_value_type;
  const int rows = static_cast<int>(S.extent(0)), cols = static_cast<int>(S.extent(1));
  team_for_tile(m, rows, cols, [&](const int i, const int j) {
    state(b, h, i, d0 + j) = from_acc<T>(S(i, j));
  });
}

// snapshots(b, c, h, i, d0 + j) = S(i, j), rounded to the snapshot type.
template <class Acc, class View5>
KOKKOS_INLINE_FUNCTION void store_snapshot(const Member& m, const View5& snapshots, const Tile<Acc>& S, int b, int c,
                                           int h, int d0) {
  using T = typename View5::non_const_value_type;
  const int rows = static_cast<int>(S.extent(0)), cols = static_cast<int>(S.extent(1));
  team_for_tile(m, rows, cols, [&](const int i, const int j) {
    snapshots(b, c, h, i, d0 + j) = from_acc<T>(S(i, j));
  });
}

// S(i, j) = snapshots(b, c, h, i, d0 + j), widened.
template <class Acc, class View5>
KOKKOS_INLINE_FUNCTION void load_snapshot(const Member& m, const Tile<Acc>& S, const View5& snapshots, int b, int c,
                                          int h, int d0) {
  const int rows = static_cast<int>(S.extent(0)), cols = static_cast<int>(S.extent(1));
  team_for_tile(m, rows, cols, [&](const int i, const int j) {
    S(i, j) = to_acc<Acc>(snapshots(b, c, h, i, d0 + j));
  });
}

// The causal mask of the intra-chunk scores: zero above the diagonal (no
// softmax, so zero rather than -inf).
template <class Acc>
KOKKOS_INLINE_FUNCTION void mask_upper_triangle(const Member& m, const Tile<Acc>& A) {
  const int n = static_cast<int>(A.extent(0));
  team_for_tile(m, n, n, [&](const int i, const int j) {
    if (j > i) A(i, j) = Acc(0);
  });
}

}  // namespace linattn
