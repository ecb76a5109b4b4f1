// The portable backward (README.md "The backward"): one team per (sequence,
// head) walks the chunks in reverse with the state gradient dS (DK x DV) in
// team scratch, reads each chunk's h[c] (the state before it) from the
// forward's snapshots, and writes dq, dk, dv once:
//   dQ_c = scale dO_c h[c]^T + (scale tril(dO_c V_c^T)) K_c
//   dK_c = (scale tril(dO_c V_c^T))^T Q_c + V_c dS^T
//   dV_c = (scale tril(Q_c K_c^T))^T dO_c + K_c dS
//   dS  += scale Q_c^T dO_c          (after the chunk: dS is the gradient of the state after it)
// dS starts from dht (or zero) and ends as dh0. With a decay gate (README.md,
// "Gated levels"; chunk_gate.hpp's b_i, b_L of each chunk) the scores take
// exp(b_i - b_j), dO h[c]^T's rows exp(b_i), the dS terms of dK and dV the
// rows exp(b_L - b_j), and dS <- exp(b_L) dS + scale (exp(b_i) Q)^T dO; the
// gate's gradient is a sum within each chunk c,
//   dg_t = sum_{s >= t in c} (q_s . dq_s - k_s . dk_s) + <S_{c+1}, dS_{c+1}>
// (README.md "Gated levels"), S_{c+1} the state after the chunk, from h[c]
// and the chunk, dS_{c+1} its gradient: it equals the reverse sum over the
// whole sequence from <S_T, dht> (src/reference/gated.hpp), whose terms
// cancel over long sequences, and needs nothing from later chunks (nor from
// later windows). With one decay per key channel (GLA's gk) the chunk takes
// channel_gate_backward.hpp's steps (chunk_channel_gated below): the score
// products weighed channel by channel, dgk [B, T, H, DK] by the same identity
// per channel. dq and dk sum over all of DV,
// so a team holds every DV column (no DV blocks): the tiles live on scratch
// level 1 when they outgrow level 0. Packed batches walk each sequence on its
// own, like the forward (SequenceMap).
#pragma once

#include "core/chunk_length.hpp"
#include "core/problem.hpp"
#include "kernels/channel_gate_backward.hpp"
#include "kernels/chunk_gate.hpp"
#include "kernels/kernel_shape.hpp"
#include "kernels/scratch_plan.hpp"
#include "kernels/sequence_map.hpp"
#include "kernels/team_gemm.hpp"
#include "kernels/tile_ops.hpp"

namespace linattn {

template <class In, class Out, class Snap, class Acc>
struct BackwardViews {
  using input_type = In;
  using output_type = Out;
  using snapshot_type = Snap;
  DeviceView4<const In> q, k, v, d_o;   // [B, T, H, DK|DV]
  DeviceView5<const Snap> h;            // the forward's snapshots [B or 1, NT or chunks, H, DK, DV]
  DeviceView4<const Acc> dht;           // [N, H, DK, DV] or empty (zero)
  DeviceView4<Out> dq, dk, dv;          // [B, T, H, DK|DV]
  DeviceView4<Acc> dh0;                 // [N, H, DK, DV]
  // Levels 2 and 3: the forward's log-decays (one of the three, or none) and dg [B, T, H] or dgk out.
  DeviceView3<const Acc> g;             // [B, T, H] or empty
  DeviceView1<const Acc> g_gamma;       // [H] or empty
  DeviceView4<const Acc> gk;            // [B, T, H, DK] or empty
  DeviceView3<Acc> dg;                  // [B, T, H]: dL/dg_t (per head: summed by the caller); empty unless g or g_gamma
  DeviceView4<Acc> dgk;                 // [B, T, H, DK]: dL/dgk_t; empty unless gk
  KOKKOS_INLINE_FUNCTION bool gated() const { return g.extent(0) > 0 || g_gamma.extent(0) > 0 || gk.extent(0) > 0; }
  KOKKOS_INLINE_FUNCTION bool channel_gated() const { return gk.extent(0) > 0; }
};

template <class Views, class Acc>
struct FusedBackward : KernelShape {
  Views views;
  SequenceMap seqs;
  int level;
  Acc scale;
  TileGemm gemm;

  // gated: g or g_gamma (their per-token terms); decay: chunk_gate.hpp's tile for the views' gate.
  static std::size_t scratch_bytes(const Problem& p, bool scalar_gated, DecayExtent decay) {
    return tile_bytes<Acc>({{p.chunk, p.DK},  // Q
                            {p.chunk, p.DK},  // K
                            {p.chunk, p.DV},  // V
                            {p.chunk, p.DV},  // dO
                            {p.chunk, p.chunk},  // scores
                            {p.DK, p.DV},     // dS
                            {p.DK, p.DV},     // h[c]
                            {p.chunk, p.DK},  // dQ
                            {p.chunk, p.DK},  // dK
                            {p.chunk, p.DV},  // dV
                            {decay.rows, decay.cols},  // the chunk's decays
                            {scalar_gated ? 1 : 0, p.chunk}});  // q . dq - k . dk per token
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int n = m.league_rank() / H, h = m.league_rank() % H;
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b;
    auto tile = [&](int rows, int cols) { return Tile<Acc>(m.team_scratch(level), rows, cols); };
    const Tile<Acc> Q = tile(C, DK), K = tile(C, DK), V = tile(C, DV), dO = tile(C, DV), A = tile(C, C);
    const Tile<Acc> dS = tile(DK, DV), Hc = tile(DK, DV), dQ = tile(C, DK), dK = tile(C, DK), dV = tile(C, DV);
    const bool gated = views.gated() && !views.channel_gated();  // g or g_gamma
    const Tile<Acc> decays = decay_tile<Acc>(m, level, views, C, DK), r = gated ? tile(1, C) : Tile<Acc>();

    load_state(m, dS, views.dht, n, h, 0);
    m.team_barrier();
    for (int c = seq.num_chunks - 1; c >= 0; --c) {
      const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
      load_token_tile(m, Q, views.q, b, t0, L, h, 0, DK);
      load_token_tile(m, K, views.k, b, t0, L, h, 0, DK);
      load_token_tile(m, V, views.v, b, t0, L, h, 0, DV);
      load_token_tile(m, dO, views.d_o, b, t0, L, h, 0, DV);
      load_snapshot(m, Hc, views.h, seq.h_b, seq.h_c0 + c, h, 0);  // h[c]: the state before chunk c
      const ChunkDecay<Acc> d = chunk_decay(m, decays, views, b, t0, L, h);
      m.team_barrier();
      if (d.channels) {
        chunk_channel_gated(m, d, Q, K, V, dO, A, dS, Hc, dQ, dK, dV, b, t0, h);
        continue;
      }
      const Acc state_dot = gated ? state_after_dot(m, d, K, V, Hc, dS, L) : Acc(0);  // <S_{c+1}, dS_{c+1}>
      team_gemm<NoTrans, Trans>(m, gemm, scale, dO, V, Acc(0), A, Triangle::lower_c);  // A = scale dO V^T, lower part
      if (d.on) decay_scores(m, d, A);  // the causal mask with exp(b_i - b_j) (team_gemm ends with a barrier)
      else mask_upper_triangle(m, A);
      team_gemm<NoTrans, Trans>(m, gemm, scale, dO, Hc, Acc(0), dQ);                  // dQ = scale dO h[c]^T
      m.team_barrier();
      if (d.on) {
        decay_output_rows(m, d, dQ);  // dQ_i *= exp(b_i)
        m.team_barrier();
      }
      team_gemm<NoTrans, NoTrans>(m, gemm, Acc(1), A, K, Acc(1), dQ, Triangle::lower_a);  // dQ += tril(A) K
      team_gemm<Trans, NoTrans>(m, gemm, Acc(1), A, Q, Acc(0), dK);                    // dK = tril(A)^T Q
      if (d.on) {
        decay_key_rows(m, d, V);  // V_j *= exp(b_L - b_j): V is not read again in this chunk
        m.team_barrier();
      }
      team_gemm<NoTrans, Trans>(m, gemm, Acc(1), V, dS, Acc(1), dK);                   // dK += V dS^T
      team_gemm<NoTrans, Trans>(m, gemm, scale, Q, K, Acc(0), A, Triangle::lower_c);   // A = scale Q K^T, lower part
      if (d.on) {
        decay_scores(m, d, A);
        token_gate_terms(m, Q, dQ, K, dK, L, r);  // r_i = q_i . dq_i - k_i . dk_i, from the unscaled Q and K
      } else {
        mask_upper_triangle(m, A);
      }
      m.team_barrier();
      team_gemm<Trans, NoTrans>(m, gemm, Acc(1), A, dO, Acc(0), dV);                   // dV = tril(A)^T dO
      if (d.on) {
        decay_key_rows(m, d, K);  // K_j *= exp(b_L - b_j) for dV's dS term
        decay_output_rows(m, d, Q);  // Q_i *= exp(b_i) for dS's update
        m.team_barrier();
      }
      team_gemm<NoTrans, NoTrans>(m, gemm, Acc(1), K, dS, Acc(1), dV);                 // dV += K dS
      store_token_tile(m, views.dq, dQ, b, t0, L, h, 0, DK);
      store_token_tile(m, views.dk, dK, b, t0, L, h, 0, DK);
      store_token_tile(m, views.dv, dV, b, t0, L, h, 0, DV);
      if (d.on) store_gate_gradient(m, r, state_dot, b, t0, L, h);
      // dS = exp(b_L) dS + scale Q^T dO, after the chunk (level 1: exp(b_L) = 1)
      team_gemm<Trans, NoTrans>(m, gemm, scale, Q, dO, d.on ? d.b(1, L - 1) : Acc(1), dS);
    }
    store_state(m, views.dh0, dS, n, h, 0);
  }

 private:
  // One chunk with a decay per key channel (channel_gate_backward.hpp), the
  // tiles loaded and d published: dq, dk, dv and dgk stored, dS turned into the
  // gradient of the state before the chunk.
  KOKKOS_INLINE_FUNCTION void chunk_channel_gated(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& Q,
                                                  const Tile<Acc>& K, const Tile<Acc>& V, const Tile<Acc>& dO,
                                                  const Tile<Acc>& A, const Tile<Acc>& dS, const Tile<Acc>& Hc,
                                                  const Tile<Acc>& dQ, const Tile<Acc>& dK, const Tile<Acc>& dV, int b,
                                                  int t0, int h) const {
    team_gemm<NoTrans, Trans>(m, gemm, scale, dO, V, Acc(0), A, Triangle::lower_c);  // P = scale dO V^T, lower part
    team_gemm<NoTrans, Trans>(m, gemm, scale, dO, Hc, Acc(0), dQ);                  // dQ = scale dO h[c]^T
    decay_query_channels(m, d, dQ);                                                  // dQ_id *= exp(b_id)
    m.team_barrier();
    add_channel_decayed_keys(m, d, A, K, dQ);                                       // dQ += P K, channel-decayed
    team_gemm<NoTrans, Trans>(m, gemm, Acc(1), V, dS, Acc(0), dK);                  // dK = V dS^T
    decay_key_channels(m, d, dK);                                                    // dK_jd *= exp(b_Ld - b_jd)
    m.team_barrier();
    add_channel_decayed_queries(m, d, A, Q, dK);                                    // dK += P^T Q, channel-decayed
    m.team_barrier();
    store_channel_gate_gradient(m, d, Q, dQ, K, dK, V, Hc, dS, views.dgk, b, t0, h);  // from the undecayed tiles
    decay_channel_scores(m, d, scale, Q, K, A);  // A = scale sum_d Q K exp(b_i - b_j), masked
    m.team_barrier();
    team_gemm<Trans, NoTrans>(m, gemm, Acc(1), A, dO, Acc(0), dV);  // dV = A^T dO
    decay_key_channels(m, d, K);                                    // K_jd *= exp(b_Ld - b_jd) for dV's dS term
    m.team_barrier();
    team_gemm<NoTrans, NoTrans>(m, gemm, Acc(1), K, dS, Acc(1), dV);  // dV += K dS
    store_token_tile(m, views.dq, dQ, b, t0, d.L, h, 0, DK);
    store_token_tile(m, views.dk, dK, b, t0, d.L, h, 0, DK);
    store_token_tile(m, views.dv, dV, b, t0, d.L, h, 0, DV);
    // dS = diag(exp(b_L)) dS + scale (Q * exp(b))^T dO, after the chunk
    decay_query_channels(m, d, Q);
    decay_state_channels(m, d, dS);
    m.team_barrier();
    team_gemm<Trans, NoTrans>(m, gemm, scale, Q, dO, Acc(1), dS);
  }

  // <S_{c+1}, dS_{c+1}> with S_{c+1} = exp(b_L) h[c] + sum_j exp(b_L - b_j) k_j v_j^T,
  // before any tile of the chunk is changed (dS holds the gradient of the state after it).
  KOKKOS_INLINE_FUNCTION Acc state_after_dot(const Member& m, const ChunkDecay<Acc>& d, const Tile<Acc>& K,
                                             const Tile<Acc>& V, const Tile<Acc>& Hc, const Tile<Acc>& dS,
                                             int L) const {
    const Acc last = d.b(1, L - 1);  // exp(b_L)
    Acc sum = Acc(0);
    if constexpr (host_execution) {
      // A key channel i at a time: exp(b_L) <h[c]_i, dS_i> + sum_t w_t k_ti (v_t . dS_i),
      // each dot over DV as lane_dot's vector sums (the loop over t below walks
      // K's column and V's rows; one running sum over t per element did not vectorize).
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(m, DK),
          [&](const int i, Acc& acc) {
            const Acc* __restrict ds = &dS(i, 0);
            Acc s = last * lane_dot(&Hc(i, 0), ds, DV);
            for (int t = 0; t < L; ++t) s += d.b(2, t) * K(t, i) * lane_dot(&V(t, 0), ds, DV);
            acc += s;
          },
          sum);
      return sum;
    }
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(m, DK * DV),
        [&](const int e, Acc& acc) {
          const int i = e / DV, j = e % DV;
          Acc s = last * Hc(i, j);
          for (int t = 0; t < L; ++t) s += d.b(2, t) * K(t, i) * V(t, j);
          acc += s * dS(i, j);
        },
        sum);
    return sum;
  }

  // r(0, t) = q_t . dq_t - k_t . dk_t for the chunk's tokens.
  KOKKOS_INLINE_FUNCTION void token_gate_terms(const Member& m, const Tile<Acc>& Q, const Tile<Acc>& dQ,
                                               const Tile<Acc>& K, const Tile<Acc>& dK, int L,
                                               const Tile<Acc>& r) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, L), [&](const int t) {
      Acc s = Acc(0);
      for (int i = 0; i < DK; ++i) s += Q(t, i) * dQ(t, i) - K(t, i) * dK(t, i);
      r(0, t) = s;
    });
  }

  // dg of the chunk's tokens: state_dot + the suffix sums of r within the
  // chunk (one thread: C additions, in a fixed order).
  KOKKOS_INLINE_FUNCTION void store_gate_gradient(const Member& m, const Tile<Acc>& r, Acc state_dot, int b, int t0,
                                                  int L, int h) const {
    Kokkos::single(Kokkos::PerTeam(m), [&]() {
      Acc s = state_dot;
      for (int t = L - 1; t >= 0; --t) {
        s += r(0, t);
        views.dg(b, t0 + t, h) = s;
      }
    });
  }
};

template <class Views, class Acc>
void run_fused_backward(const Problem& p, const Views& views, const SequenceMap& seqs, int team_size, TileGemm gemm) {
  ScopedRegion region("linattn::fused_backward");
  using Kernel = FusedBackward<Views, Acc>;
  const std::size_t bytes = Kernel::scratch_bytes(p, views.gated() && !views.channel_gated(), decay_extent(p, views));
  const int level = bytes <= static_cast<std::size_t>(TeamPolicy::scratch_size_max(0)) ? 0 : 1;
  if (level == 1 && bytes > static_cast<std::size_t>(TeamPolicy::scratch_size_max(1)))
    throw std::invalid_argument("backward: the tiles of DK " + std::to_string(p.DK) + ", DV " + std::to_string(p.DV) +
                                ", chunk " + std::to_string(p.chunk) + " exceed the team scratch (" +
                                std::to_string(bytes) + " bytes)");
  const Kernel kernel{kernel_shape(p), views, seqs, level, static_cast<Acc>(p.scale), gemm};
  const int league = static_cast<int>(p.num_sequences() * p.H);
  auto policy = team_size > 0 ? TeamPolicy(league, team_size) : TeamPolicy(league, Kokkos::AUTO);
  Kokkos::parallel_for("linattn::fused_backward", policy.set_scratch_size(level, Kokkos::PerTeam(bytes)), kernel);
}

}  // namespace linattn
