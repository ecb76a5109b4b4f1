// The backward's steps for one decay per key channel (GLA's gk, issue 28),
// beside the forward's in chunk_gate.hpp and on its decay tile: with b_i in
// R^DK the chunk's inclusive cumulative sums and P = scale tril(dO V^T),
//   dq_id += sum_{j <= i} P_ij k_jd exp(b_id - b_jd)
//   dk_jd += sum_{i >= j} P_ij q_id exp(b_id - b_jd)
// (the score products no longer factor into one GEMM per chunk: each channel
// weighs them by its own decay), and the gate's gradient within the chunk,
//   dgk_td = sum_{s >= t in c} (q_sd dq_sd - k_sd dk_sd) + sum_v S_{c+1}[d, v] dS_{c+1}[d, v]
// (reference/channel_gated.hpp; src/reference/gla_backward_chunked.cpp derives
// it), S_{c+1} the state after the chunk from h[c] and the chunk, dS_{c+1} its
// gradient. Every exponent is <= 0, as in the forward. Devices take one exp per
// term, all outputs in parallel; host threads walk a row (or column) with the
// running factors exp(b_id - b_jd) times exp(gk) per step, as
// decay_channel_scores does.
#pragma once

#include "kernels/chunk_gate.hpp"
#include "kernels/execution.hpp"
#include "kernels/host_exp.hpp"

namespace linattn {

// dQ_id += sum_{j <= i} P_ij K_jd exp(b_id - b_jd), for every row i of dQ.
template <class Acc>
KOKKOS_INLINE_FUNCTION void add_channel_decayed_keys(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& P,
                                                     const Tile<Acc>& K, const Tile<Acc>& dQ) {
  const int n = static_cast<int>(P.extent(0)), DK = static_cast<int>(K.extent(1));
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), [&](const int i) {
      Acc* __restrict w = &d.b(2 * n + i, 0);  // exp(b_i - b_j), j walking down from i
      Acc* __restrict out = &dQ(i, 0);
      for (int c = 0; c < DK; ++c) w[c] = Acc(1);
      for (int j = i; j >= 0; --j) {
        if (j < i) {
          const Acc* __restrict step = &d.b(n + j + 1, 0);  // exp(gk_{j+1})
          for (int c = 0; c < DK; ++c) w[c] *= step[c];
        }
        const Acc p = P(i, j);
        const Acc* __restrict kj = &K(j, 0);
        for (int c = 0; c < DK; ++c) out[c] += p * kj[c] * w[c];
      }
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n * DK), [&](const int e) {
      const int i = e / DK, c = e % DK;
      const Acc bi = d.b(i, c);
      Acc sum = Acc(0);
      for (int j = 0; j <= i; ++j) sum += P(i, j) * K(j, c) * kernel_exp(bi - d.b(j, c));
      dQ(i, c) += sum;
    });
  }
}

// dK_jd += sum_{i >= j} P_ij Q_id exp(b_id - b_jd), for every row j of dK.
template <class Acc>
KOKKOS_INLINE_FUNCTION void add_channel_decayed_queries(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& P,
                                                        const Tile<Acc>& Q, const Tile<Acc>& dK) {
  const int n = static_cast<int>(P.extent(0)), DK = static_cast<int>(Q.extent(1));
  if constexpr (host_execution) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), [&](const int j) {
      Acc* __restrict w = &d.b(2 * n + j, 0);  // exp(b_i - b_j), i walking up from j
      Acc* __restrict out = &dK(j, 0);
      for (int c = 0; c < DK; ++c) w[c] = Acc(1);
      for (int i = j; i < n; ++i) {
        if (i > j) {
          const Acc* __restrict step = &d.b(n + i, 0);  // exp(gk_i)
          for (int c = 0; c < DK; ++c) w[c] *= step[c];
        }
        const Acc p = P(i, j);
        const Acc* __restrict qi = &Q(i, 0);
        for (int c = 0; c < DK; ++c) out[c] += p * qi[c] * w[c];
      }
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n * DK), [&](const int e) {
      const int j = e / DK, c = e % DK;
      const Acc bj = d.b(j, c);
      Acc sum = Acc(0);
      for (int i = j; i < n; ++i) sum += P(i, j) * Q(i, c) * kernel_exp(d.b(i, c) - bj);
      dK(j, c) += sum;
    });
  }
}

// dgk of the chunk's L tokens (batch row bb, tokens t0.., head h) into dgk
// [B, T, H, DK], a thread per channel: the state dot of S_{c+1} = diag(exp(b_L))
// h[c] + sum_j (k_j * exp(b_L - b_j)) v_j^T with dS (the gradient of the state
// after the chunk), then the suffix sums of q dq - k dk, token by token in a
// fixed order. Q, K, V, Hc and dS as loaded (undecayed); dQ, dK complete.
template <class Acc, class DgkView>
KOKKOS_INLINE_FUNCTION void store_channel_gate_gradient(const Member& m, const ChunkDecay<Acc>& d,
                                                        const Tile<Acc>& Q, const Tile<Acc>& dQ, const Tile<Acc>& K,
                                                        const Tile<Acc>& dK, const Tile<Acc>& V, const Tile<Acc>& Hc,
                                                        const Tile<Acc>& dS, const DgkView& dgk, int bb, int t0, int h) {
  const int DK = static_cast<int>(Q.extent(1)), DV = static_cast<int>(V.extent(1)), L = d.L;
  if constexpr (host_execution) {
    // The decayed keys k_td exp(b_Ld - b_td) a row at a time (vectorized exps)
    // into the walk rows of the decay tile, free here; then each channel's
    // dots over DV as lane_dot's vector sums.
    const int C = static_cast<int>(d.b.extent(0)) / 3;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, L), [&](const int t) {
      Acc* __restrict kd = &d.b(2 * C + t, 0);
      for (int c = 0; c < DK; ++c) kd[c] = K(t, c);
      scale_by_exp(kd, &d.b(L - 1, 0), &d.b(t, 0), DK);
    });
    m.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int c) {
      const Acc* __restrict ds = &dS(c, 0);
      Acc s = kernel_exp(d.b(L - 1, c)) * lane_dot(&Hc(c, 0), ds, DV);
      for (int t = 0; t < L; ++t) s += d.b(2 * C + t, c) * lane_dot(&V(t, 0), ds, DV);
      for (int t = L - 1; t >= 0; --t) {
        s += Q(t, c) * dQ(t, c) - K(t, c) * dK(t, c);
        dgk(bb, t0 + t, h, c) = s;
      }
    });
    m.team_barrier();  // the walk rows are the next step's (decay_channel_scores)
    return;
  }
  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int c) {
    const Acc bl = d.b(L - 1, c);
    Acc hs = Acc(0);
    for (int v = 0; v < DV; ++v) hs += Hc(c, v) * dS(c, v);
    Acc s = kernel_exp(bl) * hs;
    for (int t = 0; t < L; ++t) {
      Acc vs = Acc(0);
      for (int v = 0; v < DV; ++v) vs += V(t, v) * dS(c, v);
      s += kernel_exp(bl - d.b(t, c)) * K(t, c) * vs;
    }
    for (int t = L - 1; t >= 0; --t) {
      s += Q(t, c) * dQ(t, c) - K(t, c) * dK(t, c);
      dgk(bb, t0 + t, h, c) = s;
    }
  });
}

}  // namespace linattn
