// Team-cooperative moves between device tensors and scratch tiles. Every load
// widens to the accumulation type and every store rounds once to the stored
// type; callers place the team barriers.
#pragma once

#include "core/half_types.hpp"
#include "kernels/execution.hpp"

namespace linattn {

// dst_row(r)[c] = convert(src_row(r)[c]) for r < rows, c < cols, where
// dst_row(r) and src_row(r) point at the first element of row r (tensors and
// tiles are LayoutRight: a row's columns are contiguous). On the host each
// thread of the team moves whole rows in a contiguous loop that vectorizes;
// indexing the Views element by element (one flat range with a division per
// element, or a per-element loop the compiler cannot prove contiguous) made
// these moves cost more than the tile GEMMs there. On a GPU one flat range,
// so that neighbouring threads take neighbouring columns (coalesced).
template <class DstRow, class SrcRow, class Convert>
KOKKOS_INLINE_FUNCTION void team_copy_rows(const Member& m, int rows, int cols, const DstRow& dst_row,
                                           const SrcRow& src_row, const Convert& convert) {
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows), [&](const int r) {
      auto* __restrict dst = dst_row(r);
      const auto* __restrict src = src_row(r);
#pragma omp simd
      for (int c = 0; c < cols; ++c) dst[c] = convert(src[c]);
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows * cols), [&](const int e) {
      const int r = e / cols, c = e % cols;
      dst_row(r)[c] = convert(src_row(r)[c]);
    });
  }
}

// tile(r, c) = 0 for r0 <= r < r1, c < cols.
template <class Acc>
KOKKOS_INLINE_FUNCTION void team_zero_rows(const Member& m, const Tile<Acc>& tile, int r0, int r1, int cols) {
  if (r1 <= r0) return;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, (r1 - r0) * cols), [&](const int e) {
    tile(r0 + e / cols, e % cols) = Acc(0);
  });
}

// tile(r, c) = x(b, t0 + r, h, d0 + c) for r < rows, c < cols; the tile's rows
// past `rows` (a ragged last chunk) are zeroed so that full-tile GEMMs stay exact.
template <class Acc, class View4>
KOKKOS_INLINE_FUNCTION void load_token_tile(const Member& m, const Tile<Acc>& tile, const View4& x, int b, int t0,
                                            int rows, int h, int d0, int cols) {
  using T = typename View4::non_const_value_type;
  team_copy_rows(
      m, rows, cols, [&](const int r) { return &tile(r, 0); }, [&](const int r) { return &x(b, t0 + r, h, d0); },
      [](const T v) { return to_acc<Acc>(v); });
  team_zero_rows(m, tile, rows, static_cast<int>(tile.extent(0)), cols);
}

// x(b, t0 + r, h, d0 + c) = tile(r, c), rounded to x's element type.
template <class Acc, class View4>
KOKKOS_INLINE_FUNCTION void store_token_tile(const Member& m, const View4& x, const Tile<Acc>& tile, int b, int t0,
                                             int rows, int h, int d0, int cols) {
  using T = typename View4::non_const_value_type;
  team_copy_rows(
      m, rows, cols, [&](const int r) { return &x(b, t0 + r, h, d0); }, [&](const int r) { return &tile(r, 0); },
      [](const Acc a) { return from_acc<T>(a); });
}

// S(i, j) = state(b, h, i, d0 + j), or zero when the state View is empty.
template <class Acc, class View4>
KOKKOS_INLINE_FUNCTION void load_state(const Member& m, const Tile<Acc>& S, const View4& state, int b, int h, int d0) {
  using T = typename View4::non_const_value_type;
  const int rows = static_cast<int>(S.extent(0)), cols = static_cast<int>(S.extent(1));
  if (state.extent(0) == 0) {
    team_zero_rows(m, S, 0, rows, cols);
    return;
  }
  team_copy_rows(
      m, rows, cols, [&](const int i) { return &S(i, 0); }, [&](const int i) { return &state(b, h, i, d0); },
      [](const T v) { return to_acc<Acc>(v); });
}

// state(b, h, i, d0 + j) = S(i, j).
template <class Acc, class View4>
KOKKOS_INLINE_FUNCTION void store_state(const Member& m, const View4& state, const Tile<Acc>& S, int b, int h, int d0) {
  using T = typename View4::non_const_value_type;
  const int rows = static_cast<int>(S.extent(0)), cols = static_cast<int>(S.extent(1));
  team_copy_rows(
      m, rows, cols, [&](const int i) { return &state(b, h, i, d0); }, [&](const int i) { return &S(i, 0); },
      [](const Acc a) { return from_acc<T>(a); });
}

// snapshots(b, c, h, i, d0 + j) = S(i, j), rounded to the snapshot type.
template <class Acc, class View5>
KOKKOS_INLINE_FUNCTION void store_snapshot(const Member& m, const View5& snapshots, const Tile<Acc>& S, int b, int c,
                                           int h, int d0) {
  using T = typename View5::non_const_value_type;
  const int rows = static_cast<int>(S.extent(0)), cols = static_cast<int>(S.extent(1));
  team_copy_rows(
      m, rows, cols, [&](const int i) { return &snapshots(b, c, h, i, d0); }, [&](const int i) { return &S(i, 0); },
      [](const Acc a) { return from_acc<T>(a); });
}

// S(i, j) = snapshots(b, c, h, i, d0 + j), widened.
template <class Acc, class View5>
KOKKOS_INLINE_FUNCTION void load_snapshot(const Member& m, const Tile<Acc>& S, const View5& snapshots, int b, int c,
                                          int h, int d0) {
  using T = typename View5::non_const_value_type;
  const int rows = static_cast<int>(S.extent(0)), cols = static_cast<int>(S.extent(1));
  team_copy_rows(
      m, rows, cols, [&](const int i) { return &S(i, 0); }, [&](const int i) { return &snapshots(b, c, h, i, d0); },
      [](const T v) { return to_acc<Acc>(v); });
}

// The causal mask of the intra-chunk scores: zero above the diagonal (no
// softmax, so zero rather than -inf). On the host a contiguous loop over the
// tail of each row.
template <class Acc>
KOKKOS_INLINE_FUNCTION void mask_upper_triangle(const Member& m, const Tile<Acc>& A) {
  const int n = static_cast<int>(A.extent(0));
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), [&](const int i) {
      Acc* row = &A(i, 0);
      for (int j = i + 1; j < n; ++j) row[j] = Acc(0);
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n * n), [&](const int e) {
      const int i = e / n, j = e % n;
      if (j > i) A(i, j) = Acc(0);
    });
  }
}

}  // namespace linattn
