// The portable backward (README.md "The backward"): one team per (sequence,
// head) walks the chunks in reverse with the state gradient dS (DK x DV) in
// team scratch, reads each chunk's h[c] (the state before it) from the
// forward's snapshots, and writes dq, dk, dv once:
//   dQ_c = scale dO_c h[c]^T + (scale tril(dO_c V_c^T)) K_c
//   dK_c = (scale tril(dO_c V_c^T))^T Q_c + V_c dS^T
//   dV_c = (scale tril(Q_c K_c^T))^T dO_c + K_c dS
//   dS  += scale Q_c^T dO_c          (after the chunk: dS is the gradient of the state after it)
// dS starts from dht (or zero) and ends as dh0. dq and dk sum over all of DV,
// so a team holds every DV column (no DV blocks): the tiles live on scratch
// level 1 when they outgrow level 0. Packed batches walk each sequence on its
// own, like the forward (SequenceMap).
#pragma once

#include "core/chunk_length.hpp"
#include "core/problem.hpp"
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
};

template <class Views, class Acc>
struct FusedBackward : KernelShape {
  Views views;
  SequenceMap seqs;
  int level;
  Acc scale;
  TileGemm gemm;

  static std::size_t scratch_bytes(const Problem& p) {
    return tile_bytes<Acc>({{p.chunk, p.DK},  // Q
                            {p.chunk, p.DK},  // K
                            {p.chunk, p.DV},  // V
                            {p.chunk, p.DV},  // dO
                            {p.chunk, p.chunk},  // scores
                            {p.DK, p.DV},     // dS
                            {p.DK, p.DV},     // h[c]
                            {p.chunk, p.DK},  // dQ
                            {p.chunk, p.DK},  // dK
                            {p.chunk, p.DV}});  // dV
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int n = m.league_rank() / H, h = m.league_rank() % H;
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b;
    auto tile = [&](int rows, int cols) { return Tile<Acc>(m.team_scratch(level), rows, cols); };
    const Tile<Acc> Q = tile(C, DK), K = tile(C, DK), V = tile(C, DV), dO = tile(C, DV), A = tile(C, C);
    const Tile<Acc> dS = tile(DK, DV), Hc = tile(DK, DV), dQ = tile(C, DK), dK = tile(C, DK), dV = tile(C, DV);

    load_state(m, dS, views.dht, n, h, 0);
    m.team_barrier();
    for (int c = seq.num_chunks - 1; c >= 0; --c) {
      const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
      load_token_tile(m, Q, views.q, b, t0, L, h, 0, DK);
      load_token_tile(m, K, views.k, b, t0, L, h, 0, DK);
      load_token_tile(m, V, views.v, b, t0, L, h, 0, DV);
      load_token_tile(m, dO, views.d_o, b, t0, L, h, 0, DV);
      load_snapshot(m, Hc, views.h, seq.h_b, seq.h_c0 + c, h, 0);  // h[c]: the state before chunk c
      m.team_barrier();
      team_gemm<NoTrans, Trans>(m, gemm, scale, dO, V, Acc(0), A, Triangle::lower_c);  // A = scale dO V^T, lower part
      mask_upper_triangle(m, A);
      team_gemm<NoTrans, Trans>(m, gemm, scale, dO, Hc, Acc(0), dQ);                  // dQ = scale dO h[c]^T
      m.team_barrier();
      team_gemm<NoTrans, NoTrans>(m, gemm, Acc(1), A, K, Acc(1), dQ, Triangle::lower_a);  // dQ += tril(A) K
      team_gemm<Trans, NoTrans>(m, gemm, Acc(1), A, Q, Acc(0), dK);                    // dK = tril(A)^T Q
      team_gemm<NoTrans, Trans>(m, gemm, Acc(1), V, dS, Acc(1), dK);                   // dK += V dS^T
      team_gemm<NoTrans, Trans>(m, gemm, scale, Q, K, Acc(0), A, Triangle::lower_c);   // A = scale Q K^T, lower part
      mask_upper_triangle(m, A);
      m.team_barrier();
      team_gemm<Trans, NoTrans>(m, gemm, Acc(1), A, dO, Acc(0), dV);                   // dV = tril(A)^T dO
      team_gemm<NoTrans, NoTrans>(m, gemm, Acc(1), K, dS, Acc(1), dV);                 // dV += K dS
      store_token_tile(m, views.dq, dQ, b, t0, L, h, 0, DK);
      store_token_tile(m, views.dk, dK, b, t0, L, h, 0, DK);
      store_token_tile(m, views.dv, dV, b, t0, L, h, 0, DV);
      team_gemm<Trans, NoTrans>(m, gemm, scale, Q, dO, Acc(1), dS);                    // dS += scale Q^T dO, after the chunk
    }
    store_state(m, views.dh0, dS, n, h, 0);
  }
};

template <class Views, class Acc>
void run_fused_backward(const Problem& p, const Views& views, const SequenceMap& seqs, int team_size, TileGemm gemm) {
  ScopedRegion region("linattn::fused_backward");
  using Kernel = FusedBackward<Views, Acc>;
  const std::size_t bytes = Kernel::scratch_bytes(p);
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
