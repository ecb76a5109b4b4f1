// fp64 host references for level 3 with one decay per key channel (GLA,
// RWKV-6; issue 28): per sequence and head, with log-decays gk_t in R^DK,
// every entry <= 0,
//   S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T,    o_t = scale * S_t^T q_t
// gk is [B, T, H, DK] (packed: [1, T, H, DK]). gk = 0 is level 1, and gk equal
// in every channel is the scalar gate of gated.hpp; the tests hold the forms
// to both. Every form takes plain and packed (cu_seqlens) batches: each
// sequence runs from its own initial state, its decays never reach another.
#pragma once

#include "reference/backward.hpp"
#include "reference/gated.hpp"
#include "reference/references.hpp"

#include <utility>
#include <vector>

namespace linattn::reference {

struct ChannelGate {
  std::vector<double> gk;  // [B, T, H, DK]

  // gk of channel i of token t of batch row b, head h.
  double at(const Problem& p, std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t i) const {
    return gk[static_cast<std::size_t>(((b * p.T + t) * p.H + h) * p.DK + i)];
  }
};

// Throws std::invalid_argument when gk's size does not fit p, or an element is
// positive, NaN or Inf (naming its index).
void check_channel_gate(const Problem& p, const ChannelGate& gate);

// A: token by token (the definition): S = diag(a_t) S, S += k_t v_t^T, o_t.
Result gla_recurrent(const Problem& p, const Inputs& in, const ChannelGate& gate);

// B: the chunked form, with b_i in R^DK the inclusive cumulative sum of gk over
// chunk c up to token i, b_L its value at the chunk's last token, S_c = h[c]:
//   O_c[i]  = scale * ( (q_i * exp(b_i))^T S_c + sum_{j <= i} ( sum_d q_id k_jd exp(b_id - b_jd) ) v_j )
//   S_{c+1} = diag(exp(b_L)) S_c + sum_j (k_j * exp(b_L - b_j)) v_j^T
// Each factor is exp of a difference of cumulative sums taken channel by
// channel (every exponent <= 0): exact in fp64 at any decay, the form a kernel
// that factors the scores into (q exp(b)) (k exp(-b))^T must match.
Result gla_chunked(const Problem& p, const Inputs& in, const ChannelGate& gate);

struct ChannelGatedGradients : Gradients {  // dq, dk, dv, dh0 as in backward.hpp
  std::vector<double> dgk;                  // [B, T, H, DK]
};

// The gk gradients in the scalar gates' form, dgk in dg: what verify and
// bench compare every gate kind's gradients by.
inline GatedGradients as_gated_gradients(ChannelGatedGradients c) {
  GatedGradients g;
  g.dg = std::move(c.dgk);
  static_cast<Gradients&>(g) = std::move(c);  // dq, dk, dv, dh0
  return g;
}

// The backward by definition, token by token, with G_t = dL/dS_t:
//   G_t = scale * q_t do_t^T + diag(a_{t+1}) G_{t+1}  (G_T's successor is dht, undecayed)
//   dq_t = scale * S_t do_t,  dk_t = G_t v_t,  dv_t = G_t^T k_t,  dh0 = diag(a_1) G_1,
//   dgk_t = a_t * (S_{t-1} . G_t summed over DV)   (elementwise in the DK channels).
ChannelGatedGradients gla_backward_recurrent(const Problem& p, const Inputs& in, const ChannelGate& gate,
                                             const GradInputs& g);

// The chunked reverse scan (dS the gradient of the state after chunk c, from
// dht; b as in gla_chunked):
//   dq_i = scale * ( exp(b_i) * (S_c do_i) + sum_{j <= i} (do_i . v_j) k_j * exp(b_i - b_j) )
//   dk_j = scale * sum_{i >= j} (do_i . v_j) q_i * exp(b_i - b_j) + exp(b_L - b_j) * (dS v_j)
//   dv_j = scale * sum_{i >= j} ( sum_d q_id k_jd exp(b_id - b_jd) ) do_i + dS^T (k_j * exp(b_L - b_j))
//   dS  <- diag(exp(b_L)) dS + scale * sum_i (q_i * exp(b_i)) do_i^T     (the state before the chunk)
// and dgk from the identity (derived in gla_backward_chunked.cpp)
//   dgk_t = sum_{s >= t} (q_s * dq_s - k_s * dk_s) + (S_T * dht) summed over DV   (within the sequence).
ChannelGatedGradients gla_backward_chunked(const Problem& p, const Inputs& in, const ChannelGate& gate,
                                           const GradInputs& g);

}  // namespace linattn::reference
