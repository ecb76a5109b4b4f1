// The steps of one chunk that the TeamPolicy forwards share (fused,
// materialized, recompute) and the state pass: written once, so that every
// variant sums each output and state element by the same products in the
// same order, and the state pass equals the forward's state by construction.
// Callers load the tiles and place the barrier before each step; each step
// ends with its result ready for the whole team (team_gemm's barrier).
// The gate is a policy of the steps (chunk_gate.hpp): with a ChunkDecay that
// is on, the output rows, the scores and the state update decay; without one
// (level 1) every step is exactly the level-1 step.
#pragma once

#include "kernels/chunk_gate.hpp"
#include "kernels/execution.hpp"
#include "kernels/team_gemm.hpp"
#include "kernels/tile_ops.hpp"

namespace linattn {

// O = scale (Q S + tril(Q K^T) V): the chunk's output from the state S before
// it; A is the scores' scratch tile (C x C).
// Gated: O = scale (diag(exp(b)) Q S + (tril(Q K^T) * exp(b_i - b_j)) V).
// Per channel: the scores first, from Q as loaded; then Q's channels decay in
// place (its last use in the chunk) and O = scale (Q * exp(b)) S + A V.
template <class Acc>
KOKKOS_INLINE_FUNCTION void chunk_output(const Member& m, TileGemm gemm, Acc scale, const Tile<Acc>& Q,
                                         const Tile<Acc>& K, const Tile<Acc>& V, const Tile<Acc>& S,
                                         const Tile<Acc>& A, const Tile<Acc>& O, const ChunkDecay<Acc>& decay = {}) {
  if (decay.channels) {
    decay_channel_scores(m, decay, scale, Q, K, A);
    m.team_barrier();
    decay_query_channels(m, decay, Q);
    m.team_barrier();
    team_gemm<NoTrans, NoTrans>(m, gemm, scale, Q, S, Acc(0), O);                      // O = scale (Q * exp(b)) S
    team_gemm<NoTrans, NoTrans>(m, gemm, Acc(1), A, V, Acc(1), O, Triangle::lower_a);  // O += A V
    return;
  }
  team_gemm<NoTrans, NoTrans>(m, gemm, scale, Q, S, Acc(0), O);                   // O = scale Q S
  if (decay.on) decay_output_rows(m, decay, O);                                   // row i by exp(b_i)
  team_gemm<NoTrans, Trans>(m, gemm, scale, Q, K, Acc(0), A, Triangle::lower_c);  // A = scale Q K^T, lower part
  if (decay.on) decay_scores(m, decay, A);  // masked and decayed
  else mask_upper_triangle(m, A);
  m.team_barrier();
  team_gemm<NoTrans, NoTrans>(m, gemm, Acc(1), A, V, Acc(1), O, Triangle::lower_a);  // O += tril(A) V
}

// S += K^T V: the state after the chunk. Gated: S = exp(b_L) S + (K * exp(b_L - b_j))^T V,
// K's rows decayed in place (its last use in the chunk). Per channel:
// S = diag(exp(b_L)) S + (K * exp(b_L - b_j))^T V, channel by channel.
template <class Acc>
KOKKOS_INLINE_FUNCTION void state_update(const Member& m, TileGemm gemm, const Tile<Acc>& K, const Tile<Acc>& V,
                                         const Tile<Acc>& S, const ChunkDecay<Acc>& decay = {}) {
  if (!decay.on) {
    team_gemm<Trans, NoTrans>(m, gemm, Acc(1), K, V, Acc(1), S);
    return;
  }
  if (decay.channels) {
    decay_channel_state(m, decay, K, S);
    m.team_barrier();
    team_gemm<Trans, NoTrans>(m, gemm, Acc(1), K, V, Acc(1), S);
    return;
  }
  decay_key_rows(m, decay, K);
  m.team_barrier();
  team_gemm<Trans, NoTrans>(m, gemm, Acc(1), K, V, decay.b(1, decay.L - 1), S);  // exp(b_L)
}

}  // namespace linattn
