// The decay gate (README.md, "Gated levels") on the register-blocked kernels'
// tiles (register_tiles.hpp): the factors of chunk_gate.hpp, read from the
// chunk's ChunkDecay (b_i, exp(b_i), exp(b_L - b_i), computed once per chunk
// and team by chunk_decay into the layout's decay rows), applied to a
// thread's register tiles:
//   output rows        O_i  *= exp(b_i)         (the inter-chunk term q_i^T S)
//   causal scores      A_ij *= exp(b_i - b_j)   (j <= i only: above the diagonal exp > 1 may overflow)
//   state update keys  k_j  *= exp(b_L - b_j),  S *= exp(b_L)
// Every exponent is a difference of cumulative sums (<= 0). The gated
// kernels are instantiations of their own (kGated); level 1's call none of
// these and hold NoDecay. The gated steps that read the staged tiles are
// ChunkTiles' add_decayed_state_update(_rows), decay_scores and
// decayed_outputs, beside level 1's unchanged steps.
// Per key channel (GLA's gk, DecayForm::channels) the decay tile is b itself
// (C x DK, chunk_gate.hpp) and the factors are taken channel by channel inside
// the products (ChunkTiles' channel_* steps): a state tile's row d (a key
// channel) by exp(b_Ld), the keys of the update by exp(b_Ld - b_jd), q_id by
// exp(b_id) in Q S, and the scores as sum_d q_id k_jd exp(b_id - b_jd).
#pragma once

#include "kernels/chunk_gate.hpp"
#include "kernels/execution.hpp"

namespace linattn {
namespace register_tiles {

// Level 1's stand-in for a ChunkDecay (register_tiles::chunk_decay_rows):
// nothing, so that level 1's kernels carry no decay state (the gated kernels
// are instantiations of their own).
struct NoDecay {};

// Rows ir.. of an RX x RY tile by exp(b_i).
template <class Acc, int RX, int RY>
KOKKOS_INLINE_FUNCTION void decay_rows(Acc (&t)[RX][RY], const ChunkDecay<Acc>& d, int ir) {
  for (int x = 0; x < RX; ++x)
    for (int y = 0; y < RY; ++y) t[x][y] *= d.b(1, ir + x);
}

// The causal part (key tc + y <= row ir + x) of an already masked score tile by exp(b_i - b_j).
template <class Acc, int R>
KOKKOS_INLINE_FUNCTION void decay_score_tile(Acc (&a)[R][R], const ChunkDecay<Acc>& d, int ir, int tc) {
  for (int x = 0; x < R; ++x)
    for (int y = 0; y < R; ++y)
      if (tc + y <= ir + x) a[x][y] *= kernel_exp(d.b(0, ir + x) - d.b(0, tc + y));
}

// A state tile by exp(b_L), b_L the cumulative log-decay at the chunk's last token.
template <class Acc, int RX, int RY>
KOKKOS_INLINE_FUNCTION void decay_state_tile(Acc (&s)[RX][RY], const ChunkDecay<Acc>& d) {
  const Acc last = d.b(1, d.L - 1);
  for (int x = 0; x < RX; ++x)
    for (int y = 0; y < RY; ++y) s[x][y] *= last;
}

// Per channel: the RX rows dr.. of a state tile (key channels) by exp(b_Ld);
// rows past DK hold zeros and have no b.
template <class Acc, int RX, int RY>
KOKKOS_INLINE_FUNCTION void decay_state_channels_tile(Acc (&s)[RX][RY], const ChunkDecay<Acc>& d, int dr, int DK) {
  for (int x = 0; x < RX && dr + x < DK; ++x) {
    const Acc f = kernel_exp(d.b(d.L - 1, dr + x));
    for (int y = 0; y < RY; ++y) s[x][y] *= f;
  }
}

}  // namespace register_tiles
}  // namespace linattn
