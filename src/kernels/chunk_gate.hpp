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

// b of the chunk in a 4 x C scratch tile (kDecayRows) with the factors
// that depend on one token only, computed once per chunk, and whether a gate
// exists at all (level 1: `on` false, b unused, every step the level-1 step).
constexpr int kDecayRows = 4;
template <class Acc>
struct ChunkDecay {
  // b(0, i) = b_i, b(1, i) = exp(b_i), b(2, i) = exp(b_L - b_i), b(3, i) = exp(b_i - b_{i-1}) = exp(g_i)
  // (b(3, 0) = exp(b_0)), i < L; tokens past L repeat L - 1's (b(3, i) = 1 there).
  Tile<Acc> b;
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
      b(3, i) = kernel_exp(i > 0 ? b(0, i) - b(0, i - 1) : b(0, 0));
    }
  });
  return d;
}

// X_i *= w(r, i) for rows i < rows of X: devices spread every element over
// the team, host threads take whole rows (a plain loop over a row's columns,
// no division per element).
template <class Acc>
KOKKOS_INLINE_FUNCTION void scale_rows(const Member& m, const Tile<Acc>& w, int r, int rows, const Tile<Acc>& X) {
  const int cols = static_cast<int>(X.extent(1));
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows), [&](const int i) {
      const Acc f = w(r, i);
      for (int j = 0; j < cols; ++j) X(i, j) *= f;
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows * cols), [&](const int e) {
      const int i = e / cols, j = e % cols;
      X(i, j) *= w(r, i);
    });
  }
}

// O_i *= exp(b_i) for every row of O.
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_output_rows(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& O) {
  scale_rows(m, d.b, 1, static_cast<int>(O.extent(0)), O);
}

// A_ij = j <= i ? A_ij exp(b_i - b_j) : 0: the causal mask with the decay.
// Devices take one exp per score, all scores in parallel. Host threads walk
// each row from the diagonal to the left, the weight times exp(g_{j+1}) per
// step: one exp per token instead of one per score, which was most of the
// gate's cost on the CPU (BENCHMARKS.md "Gated forward on the CPU"). Each factor
// is <= 1, so the weight never overflows and fades to zero as the true one
// does; it carries up to 2 (i - j) roundings (fp32: 7.5e-6 at i - j = 63).
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_scores(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& A) {
  const int n = static_cast<int>(A.extent(0));
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), [&](const int i) {
      for (int j = i + 1; j < n; ++j) A(i, j) = Acc(0);
      Acc w = Acc(1);
      for (int j = i - 1; j >= 0; --j) {
        w *= d.b(3, j + 1);
        A(i, j) *= w;
      }
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n * n), [&](const int e) {
      const int i = e / n, j = e % n;
      A(i, j) = j <= i ? A(i, j) * kernel_exp(d.b(0, i) - d.b(0, j)) : Acc(0);
    });
  }
}

// K_j *= exp(b_L - b_j) for the chunk's rows (rows past L are zero already).
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_key_rows(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& K) {
  scale_rows(m, d.b, 2, d.L, K);
}

}  // namespace linattn
