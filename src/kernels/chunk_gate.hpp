// The decay of one chunk for the gated levels (README.md, "Gated levels"):
// b_i, the inclusive cumulative sum of the log-decays g over the chunk's
// tokens up to token i, which the chunk steps (chunk_steps.hpp) turn into
//   O_i  *= exp(b_i)                  (the inter-chunk term scale q_i^T S)
//   A_ij *= exp(b_i - b_j), j <= i    (the causal scores; 0 above the diagonal)
//   K_j  *= exp(b_L - b_j),  S *= exp(b_L)   (the state update; b_L = b at the last token)
// With one decay per key channel (GLA's gk, issue 28) b_i is a vector over
// the DK channels and every factor is taken channel by channel:
//   Q_id *= exp(b_id)                 (before Q S)
//   A_ij  = sum_d Q_id K_jd exp(b_id - b_jd), j <= i   (no longer one product)
//   K_jd *= exp(b_Ld - b_jd),  S_d: *= exp(b_Ld)
// Every exponent is <= 0: differences of cumulative sums, never a product
// exp(b_i) * exp(-b_j), which overflows for strong decays. So no decay is too
// strong: a factor below fp32's range is 0, as the true one nearly is.
#pragma once

#include "core/gate.hpp"
#include "core/problem.hpp"
#include "kernels/execution.hpp"
#include "kernels/host_exp.hpp"

#include <cstdint>

namespace linattn {

// b of the chunk in a scratch tile with the factors that depend on one token
// only, computed once per chunk, and whether a gate exists at all (level 1:
// `on` false, b unused, every step the level-1 step).
// Scalar gates: a 4 x C tile (kDecayRows). Per-channel gates (`channels`): a
// C x DK tile of b, and on the host 2 C more rows: exp(b_i - b_{i-1}) = exp(gk_i),
// then the running factors of the scores' walk (decay_channel_scores).
constexpr int kDecayRows = 4;
template <class Acc>
struct ChunkDecay {
  // Scalar: b(0, i) = b_i, b(1, i) = exp(b_i), b(2, i) = exp(b_L - b_i), b(3, i) = exp(b_i - b_{i-1}) = exp(g_i)
  // (b(3, 0) = exp(b_0)), i < L; tokens past L repeat L - 1's (b(3, i) = 1 there).
  // Per channel: b(i, d) = b_id, i < C (tokens past L repeat L - 1's); host: b(C + i, d) = exp(b_id - b_{i-1}d).
  Tile<Acc> b;
  int L = 0;    // the chunk's tokens
  bool on = false;
  bool channels = false;
};

// The form of a gate's decay: none (level 1), scalar (g per token or RetNet's
// g_gamma), channels (gk). The register-blocked kernels take it as a template
// argument, an instantiation per form.
enum class DecayForm { none, scalar, channels };
inline DecayForm decay_form(GateKind gate) {
  return channel_gate(gate) ? DecayForm::channels : gate != GateKind::none ? DecayForm::scalar : DecayForm::none;
}
template <class Views>
KOKKOS_INLINE_FUNCTION DecayForm decay_form(const Views& views) {
  return views.channel_gated() ? DecayForm::channels : views.gated() ? DecayForm::scalar : DecayForm::none;
}

// The decay tile's extents for a form on chunk C (0 x 0 for level 1), for the
// scratch plans and for decay_tile below.
struct DecayExtent {
  std::int64_t rows = 0, cols = 0;
};
KOKKOS_INLINE_FUNCTION DecayExtent decay_extent(DecayForm form, std::int64_t C, std::int64_t DK) {
  if (form == DecayForm::channels) return {host_execution ? 3 * C : C, DK};
  if (form == DecayForm::scalar) return {kDecayRows, C};
  return {};
}
template <class Views>
KOKKOS_INLINE_FUNCTION DecayExtent decay_extent(const Views& views, std::int64_t C, std::int64_t DK) {
  return decay_extent(decay_form(views), C, DK);
}
template <class Views>
DecayExtent decay_extent(const Problem& p, const Views& views) {
  return decay_extent(views, p.chunk, p.DK);
}

// The team's decay tile in scratch `level` (empty for level 1).
template <class Acc, class Views>
KOKKOS_INLINE_FUNCTION Tile<Acc> decay_tile(const Member& m, int level, const Views& views, int C, int DK) {
  const DecayExtent e = decay_extent(views, C, DK);
  return e.rows > 0 ? Tile<Acc>(m.team_scratch(level), e.rows, e.cols) : Tile<Acc>();
}

// Fills d.b for the tokens t0 .. t0 + L - 1 of batch row bb, head h, from the
// views' g or g_gamma (one thread: C additions) or gk (a thread per channel:
// C additions each), when the views are gated.
// The caller's next barrier publishes it.
template <class Acc, class Views>
KOKKOS_INLINE_FUNCTION ChunkDecay<Acc> chunk_decay(const Member& m, const Tile<Acc>& b, const Views& views, int bb,
                                                   int t0, int L, int h) {
  ChunkDecay<Acc> d{b, L, views.gated(), views.channel_gated()};
  if (!d.on) return d;
  if (d.channels) {
    const int C = static_cast<int>(b.extent(0)) / (host_execution ? 3 : 1), DK = static_cast<int>(b.extent(1));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int c) {
      Acc s = Acc(0);
      for (int i = 0; i < C; ++i) {
        if (i < L) s += views.gk(bb, t0 + i, h, c);
        b(i, c) = s;
      }
    });
    if constexpr (host_execution) {  // the walk's steps exp(b_i - b_{i-1}), a row at a time
      m.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(m, C), [&](const int i) {
        Acc* __restrict step = &b(C + i, 0);
        for (int c = 0; c < DK; ++c) step[c] = i > 0 ? b(i, c) - b(i - 1, c) : b(0, c);
        exp_in_place(step, DK);
      });
    }
    return d;
  }
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

// Per channel: Q_id *= exp(b_id), the rows of the inter-chunk term (every row
// of Q: rows past L are zero).
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_query_channels(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& Q) {
  const int rows = static_cast<int>(Q.extent(0)), cols = static_cast<int>(Q.extent(1));
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows),
                         [&](const int i) { scale_by_exp(&Q(i, 0), &d.b(i, 0), nullptr, cols); });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, rows * cols), [&](const int e) {
      const int i = e / cols, c = e % cols;
      Q(i, c) *= kernel_exp(d.b(i, c));
    });
  }
}

// sum_c x_c y_c in kLanes partial sums, so that the compiler can keep them in
// vector registers (one running sum cannot be reordered without fast-math).
template <class Acc>
KOKKOS_INLINE_FUNCTION Acc lane_dot(const Acc* __restrict x, const Acc* __restrict y, int n) {
  constexpr int kLanes = 16;  // the folds below are written for 16
  Acc lanes[kLanes] = {};
  int c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += x[c + l] * y[c + l];
  Acc tail = Acc(0);  // apart, so that every lane index is a constant and the lanes stay in registers
  for (; c < n; ++c) tail += x[c] * y[c];
  // halves folded with constant trip counts (a loop over the width kept the lanes in memory)
  for (int l = 0; l < 8; ++l) lanes[l] += lanes[l + 8];
  for (int l = 0; l < 4; ++l) lanes[l] += lanes[l + 4];
  for (int l = 0; l < 2; ++l) lanes[l] += lanes[l + 2];
  return (lanes[0] + lanes[1]) + tail;
}

// Per channel: A_ij = j <= i ? scale sum_d Q_id K_jd exp(b_id - b_jd) : 0.
// Devices take one exp per score and channel, every score in parallel. Host
// threads walk each row from the diagonal to the left with the running
// products p_d = Q_id exp(b_id - b_jd) in the tile's last C rows, times
// exp(gk_{j+1}d) per step (chunk_decay's): no exp per score, as the scalar
// gate's decay_scores does, and each score one dot product (lane_dot). Each
// factor is <= 1, so p never overflows and fades to zero as the true one
// does (up to 2 (i - j) roundings: fp32 7.5e-6 relative at i - j = 63).
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_channel_scores(const Member& m, const ChunkDecay<Acc>& d, Acc scale,
                                                 const Tile<Acc>& Q, const Tile<Acc>& K, const Tile<Acc>& A) {
  const int n = static_cast<int>(A.extent(0)), DK = static_cast<int>(Q.extent(1));
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), [&](const int i) {
      for (int j = i + 1; j < n; ++j) A(i, j) = Acc(0);
      Acc* __restrict p = &d.b(2 * n + i, 0);  // q_id exp(b_id - b_jd), walked left from j = i
      const Acc* __restrict qi = &Q(i, 0);
      for (int c = 0; c < DK; ++c) p[c] = qi[c];
      for (int j = i; j >= 0; --j) {
        if (j < i) {
          const Acc* __restrict step = &d.b(n + j + 1, 0);  // exp(gk_{j+1})
          for (int c = 0; c < DK; ++c) p[c] *= step[c];
        }
        A(i, j) = scale * lane_dot(p, &K(j, 0), DK);
      }
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n * n), [&](const int e) {
      const int i = e / n, j = e % n;
      Acc sum = Acc(0);
      if (j <= i)
        for (int c = 0; c < DK; ++c) sum += Q(i, c) * K(j, c) * kernel_exp(d.b(i, c) - d.b(j, c));
      A(i, j) = scale * sum;
    });
  }
}

// Per channel: X_jd *= exp(b_Ld - b_jd) for the chunk's rows j < L (the
// state update's keys; the backward's dS terms of dK).
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_key_channels(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& X) {
  const int DK = static_cast<int>(X.extent(1)), last = d.L - 1;
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, d.L),
                         [&](const int j) { scale_by_exp(&X(j, 0), &d.b(last, 0), &d.b(j, 0), DK); });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, d.L * DK), [&](const int e) {
      const int j = e / DK, c = e % DK;
      X(j, c) *= kernel_exp(d.b(last, c) - d.b(j, c));
    });
  }
}

// Per channel: the state's row d (a key channel) by exp(b_Ld).
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_state_channels(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& S) {
  const int DK = static_cast<int>(S.extent(0)), W = static_cast<int>(S.extent(1)), last = d.L - 1;
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int c) {
      const Acc f = kernel_exp(d.b(last, c));
      for (int j = 0; j < W; ++j) S(c, j) *= f;
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK * W), [&](const int e) {
      const int c = e / W, j = e % W;
      S(c, j) *= kernel_exp(d.b(last, c));
    });
  }
}

// Per channel, the state update's factors: K_jd *= exp(b_Ld - b_jd) for the
// chunk's rows, and the state's row d by exp(b_Ld) (independent: no barrier).
template <class Acc>
KOKKOS_INLINE_FUNCTION void decay_channel_state(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& K,
                                                const Tile<Acc>& S) {
  decay_key_channels(m, d, K);
  decay_state_channels(m, d, S);
}

}  // namespace linattn
