// Warp-level products over tiles in shared memory (16-bit, or fp32 with
// fragments of fp32 pairs: Elem<float>), for kernels whose warps each own 16
// rows of an output (the backward's chunk kernels): fragment loads of the
// m16n8k16 operands from tiles stored either way, acc += X Y over a range of
// k, and stores of the fp32 accumulators.
#pragma once

#include "kernels/cuda/mma_primitives.hpp"

#include <cstddef>
#include <cstdint>

namespace linattn::cuda::detail {

template <class E>
using FragOf = typename Elem<E>::Frag;

// Operand A (16 x 16, rows m0..): from a tile stored [m][k] (a_rows), or
// stored [k][m] (a_cols). Operand B of two 8-column tiles n0.., n0 + 8..: from
// a tile stored [n][k] (b_rows: regs 0, 1 the first tile, 2, 3 the second), or
// stored [k][n] (b_cols).
template <class E>
__device__ inline void a_rows(FragOf<E>* f, const E* t, int stride, int m0, int k0, int lane) {
  ldmatrix_x4(f, t + (m0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * stride + k0 + 8 * (lane >> 4));
}
template <class E>
__device__ inline void a_cols(FragOf<E>* f, const E* t, int stride, int m0, int k0, int lane) {
  ldmatrix_x4_trans(f, t + (k0 + (lane & 7) + 8 * (lane >> 4)) * stride + m0 + 8 * ((lane >> 3) & 1));
}
template <class E>
__device__ inline void b_rows(FragOf<E>* f, const E* t, int stride, int n0, int k0, int lane) {
  ldmatrix_x4(f, t + (n0 + (lane & 7) + 8 * (lane >> 4)) * stride + k0 + 8 * ((lane >> 3) & 1));
}
template <class E>
__device__ inline void b_cols(FragOf<E>* f, const E* t, int stride, int n0, int k0, int lane) {
  ldmatrix_x4_trans(f, t + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * stride + n0 + 8 * (lane >> 4));
}

template <int kN>
__device__ inline void zero(float (&acc)[kN][4]) {
  #pragma unroll
  for (int nt = 0; nt < kN; ++nt)
    #pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
}

// acc += X Y over k in [k_begin, k_end) steps of 16: X rows m0.. loaded by
// load_a(f, k0), Y's 8 * kN columns n0.. by load_b(f, n, k0); column pairs
// (16 columns) at or past n_pairs are skipped (causal masks: keys past the
// warp's rows).
template <class E, int kN, class LoadA, class LoadB>
__device__ inline void mma_rows(float (&acc)[kN][4], int k_begin, int k_end, LoadA load_a, LoadB load_b,
                                int n_pairs = kN / 2) {
  for (int k0 = k_begin; k0 < k_end; k0 += 16) {
    FragOf<E> af[4];
    load_a(af, k0);
    #pragma unroll
    for (int np = 0; np < kN / 2; ++np) {
      if (np >= n_pairs) continue;
      FragOf<E> bf[4];
      load_b(bf, 16 * np, k0);
      Elem<E>::mma(acc[2 * np], af, bf[0], bf[1]);
      Elem<E>::mma(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// acc (16 rows x 8 * kN columns of this warp) in E pairs to rows row0.. of a
// [tokens][H][width] tensor, rows at or past `valid` left alone.
template <class E, int kN>
__device__ inline void store_rows(E* out, std::size_t row_stride, const float (&acc)[kN][4], int row0, int col0,
                                  int valid, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + g + 8 * half;
    if (r >= valid) continue;
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt)
      store_pair<E>(out + r * row_stride + col0 + 8 * nt + 2 * t4, acc[nt][2 * half], acc[nt][2 * half + 1]);
  }
}

// store_rows for padded tiles: columns at or past `cols` left alone too, and
// element by element where a row's width is odd (pairs would leave 4 bytes).
template <class E, int kN>
__device__ inline void store_rows_bounded(E* out, std::size_t row_stride, const float (&acc)[kN][4], int row0,
                                          int col0, int valid, int cols, bool pairs, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + g + 8 * half;
    if (r >= valid) continue;
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt) {
      const int c = col0 + 8 * nt + 2 * t4;
      E* p = out + r * row_stride + c;
      if (pairs && c + 1 < cols) {
        store_pair<E>(p, acc[nt][2 * half], acc[nt][2 * half + 1]);
      } else {
        if (c < cols) store_one(p, acc[nt][2 * half]);
        if (c + 1 < cols) store_one(p + 1, acc[nt][2 * half + 1]);
      }
    }
  }
}

// store_rows, or store_rows_bounded at a head narrower than its tile (kBounded).
template <class E, int kN, bool kBounded>
__device__ inline void store_tile_rows(E* out, std::size_t row_stride, const float (&acc)[kN][4], int row0, int col0,
                                       int valid, int cols, int lane) {
  if constexpr (kBounded) store_rows_bounded<E, kN>(out, row_stride, acc, row0, col0, valid, cols, cols % 2 == 0, lane);
  else store_rows<E, kN>(out, row_stride, acc, row0, col0, valid, lane);
}

}  // namespace linattn::cuda::detail
