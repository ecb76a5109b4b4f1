// The decay of one chunk for the gated levels (README.md, "Gated levels"):
// b_i, the inclusive cumulative sum of the log-decays g over the chunk's
// tokens up to token i, which the chunk steps (chunk_steps.hpp) turn into
//   O_i  *= exp(b_i)                  (the inter-chunk term scale q_i^T S)
//   A_ij *= exp(b_i - b_j), j <= i    (the causal scores; 0 above the diagonal)
//   K_j  *= exp(b_L - b_j),  S *= exp(b_L)   (the state update; b_L = b at the last token)
// Every exponent is <= 0: differences of cumulative sums, never a product
// exp(b_i) * exp(-b_j), which overflows for strong decays.
#pragma once

#include "kernels/execution.hpp"

namespace linattn {

// b of the chunk in a 3 x C scratch tile (kDecayRows) with the factors
// that depend on one token only, computed once per chunk, and whether a gate
// exists at all (level 1: `on` false, b unused, every step the level-1 step).
constexpr int kDecayRows = 3;
template <class Acc>
struct ChunkDecay {
  Tile<Acc> b;  // b(0, i) = b_i, b(1, i) = exp(b_i), b(2, i) = exp(b_L - b_i), i < L; tokens past L repeat L - 1's
  int L = 0;    // the chunk's tokens
  bool on = false;
};

// Fills d.b (b, exp(b), exp(b_L - b)) for the tokens t0 .. t0 + L - 1 of batch row bb, head h, from the
// views' g or g_gamma (one thread: C additions), when the views are gated.
// The caller's next barrier publishes it.
template <class Acc, class Views>
KOKKOS_INLINE_FUNCTION ChunkDecay<Acc> chunk_decay(const Member& m, const Tile<Acc>& b, const Views& views, int bb,
                                                   int t0, int L, int h) {
  ChunkDecay<Acc> d{b, L, views.gated()};
  if (!d.on) return d;
  Kokkos::single(Kokkos::PerTeam(m), [&]() {
    const bool per_token = views.g.extent(0) > 0;
    const int n = static_cast<int>(b.extent(1));
    Acc s = Acc(0);
    for (int i = 0; i < n; ++i) {
      if (i < L) s += per_token ? views.g(bb, t0 + i, h) : views.g_gamma(h);
      b(0, i) = s;
    }
    for (int i = 0; i < n; ++i) {
      b(1, i) = kernel_exp(b(0, i));
      b(2, i) = kernel_exp(s - b(0, i));
    }
  });
  return d;
}

// O_i *= exp(b_i) for every row of O.
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_output_rows(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& O) {
  const int rows = static_cast<int>(O.extent(0)), cols = static_cast<int>(O.extent(1));
  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows * cols), [&](const int e) {
    const int i = e / cols, j = e % cols;
    O(i, j) *= d.b(1, i);
  });
}

// A_ij = j <= i ? A_ij exp(b_i - b_j) : 0: the causal mask with the decay.
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_scores(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& A) {
  const int n = static_cast<int>(A.extent(0));
  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n * n), [&](const int e) {
    const int i = e / n, j = e % n;
    A(i, j) = j <= i ? A(i, j) * kernel_exp(d.b(0, i) - d.b(0, j)) : Acc(0);
  });
}

// K_j *= exp(b_L - b_j) for the chunk's rows (rows past L are zero already).
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_key_rows(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& K) {
  const int cols = static_cast<int>(K.extent(1));
  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, d.L * cols), [&](const int e) {
    const int j = e / cols, c = e % cols;
    K(j, c) *= d.b(2, j);
  });
}

}  // namespace linattn
