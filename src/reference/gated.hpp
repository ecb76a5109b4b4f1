// fp64 host references for the gated levels 2 and 3 (README.md, "Gated levels"):
// per sequence and head, with log-decays g_t <= 0 and a_t = exp(g_t),
//   S_t = a_t S_{t-1} + k_t v_t^T,    o_t = scale * S_t^T q_t
// Level 2 (RetNet) has one g per head (g_gamma [H]); level 3 (Mamba-2) one per
// token and head (g [B, T, H], packed: [1, T, H]). Level 1 is the gate `none`
// and gives exactly the bits of references.hpp and backward.hpp (every decay
// factor is then exp(0) = 1, applied where a factor of 1 changes nothing).
//
// The gate is its own argument, not a field of Inputs, so that no level-1 form
// can be handed a gate and ignore it. Every form takes plain and packed
// (cu_seqlens) batches: each sequence runs from its own initial state, and the
// decays of one sequence never reach another.
#pragma once

#include "core/gate.hpp"
#include "reference/backward.hpp"
#include "reference/references.hpp"

#include <vector>

namespace linattn::reference {

using linattn::GateKind;  // core/gate.hpp

struct Gate {
  GateKind kind = GateKind::none;
  std::vector<double> log_decay;  // none: empty; per_head: g_gamma [H]; per_token: g [B, T, H]

  static Gate none() { return {}; }
  static Gate per_head(std::vector<double> g_gamma) { return {GateKind::per_head, std::move(g_gamma)}; }
  static Gate per_token(std::vector<double> g) { return {GateKind::per_token, std::move(g)}; }

  // g of token t of batch row b, head h (0 for none).
  double at(const Problem& p, std::int64_t b, std::int64_t t, std::int64_t h) const {
    switch (kind) {
      case GateKind::none: return 0.0;
      case GateKind::per_head: return log_decay[static_cast<std::size_t>(h)];
      case GateKind::per_token: return log_decay[static_cast<std::size_t>((b * p.T + t) * p.H + h)];
      case GateKind::per_channel: break;  // one per channel: reference/channel_gated.hpp's forms
    }
    return 0.0;
  }
};

// Throws std::invalid_argument when the gate's size does not fit p, or an
// element is positive, NaN or Inf (naming its index).
void check_gate(const Problem& p, const Gate& gate);

// A: token by token (the definition): S = a_t S, then S += k_t v_t^T, then o_t.
Result gated_recurrent(const Problem& p, const Inputs& in, const Gate& gate);

// B: the chunked form. With b_i the inclusive cumulative sum of g over chunk c
// up to token i and b_L its value at the chunk's last token (S_c = h[c]):
//   O_c[i]  = scale * ( exp(b_i) q_i^T S_c + sum_{j <= i in c} exp(b_i - b_j) (q_i . k_j) v_j )
//   S_{c+1} = exp(b_L) S_c + sum_{j in c} exp(b_L - b_j) k_j v_j^T
// Every exponent is <= 0 (differences of cumulative sums). Ordering::inclusive_prefix
// reads S_{c+1} instead of S_c: the state updated before the output, the mistake tests must catch.
Result gated_chunked(const Problem& p, const Inputs& in, const Gate& gate, Ordering ordering = Ordering::correct);

struct GatedGradients : Gradients {         // dq, dk, dv, dh0 as in backward.hpp
  std::vector<double> dg;                   // [B, T, H]: dL/dg_t of every token, for every gate kind
  std::vector<double> dg_gamma;             // [H]: sum of dg over the head's tokens of all sequences
};

// d.dg_gamma[h] = the sum of d.dg over every token of head h (dg [B, T, H] or [1, T, H]).
void sum_dg_per_head(const Problem& p, GatedGradients& d);

// The backward by definition, token by token, with G_t = dL/dS_t:
//   G_t = scale * q_t do_t^T + a_{t+1} G_{t+1}  (G_T's successor is dht, undecayed)
//   dq_t = scale * S_t do_t,  dk_t = G_t v_t,  dv_t = G_t^T k_t,  dh0 = a_1 G_1,
//   dg_t = a_t <S_{t-1}, G_t>   (dS_t / dg_t = a_t S_{t-1}).
GatedGradients gated_backward_recurrent(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g);

// The chunked reverse scan (dS = gradient of the state after chunk c, from dht;
// b as in gated_chunked; h, when given, the forward's snapshots):
//   dq_i = scale * ( exp(b_i) S_c do_i + sum_{j <= i} exp(b_i - b_j) (do_i . v_j) k_j )
//   dk_j = scale * sum_{i >= j} exp(b_i - b_j) (do_i . v_j) q_i + exp(b_L - b_j) dS v_j
//   dv_j = scale * sum_{i >= j} exp(b_i - b_j) (q_i . k_j) do_i + exp(b_L - b_j) dS^T k_j
//   dS  <- exp(b_L) dS + scale * sum_i exp(b_i) q_i do_i^T          (after the chunk)
// and dg from the identity (derived in gated_backward_chunked.cpp)
//   dg_t = sum_{s >= t} (q_s . dq_s - k_s . dk_s) + <S_T, dht>   (sums within the sequence).
GatedGradients gated_backward_chunked(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g,
                                      const std::vector<double>* h = nullptr);

// The ground truths of a gated run: the chunked forms.
Result gated_forward(const Problem& p, const Inputs& in, const Gate& gate);
GatedGradients gated_backward(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g);

// A gated form on a plain batch, and the packed driver that runs it on each
// sequence as its own B = 1 problem (its tokens' gate values sliced out with
// q, k, v), like per_sequence and backward_per_sequence. dg_gamma is summed
// after assembly, over all sequences.
using GatedForm = std::function<Result(const Problem&, const Inputs&, const Gate&)>;
using GatedBackwardForm = std::function<GatedGradients(const Problem&, const Inputs&, const Gate&, const GradInputs&,
                                                       const std::vector<double>* h)>;
Result gated_per_sequence(const Problem& p, const Inputs& in, const Gate& gate, const GatedForm& form);
GatedGradients gated_backward_per_sequence(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g,
                                           const std::vector<double>* h, const GatedBackwardForm& form);

}  // namespace linattn::reference
