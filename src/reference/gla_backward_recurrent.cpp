// The per-channel gated backward by definition, token by token. A forward
// sweep keeps every state (S_{t-1} is needed for dgk_t); the gradient of the
// state, G_t, then runs in reverse:
//   G_t = scale * q_t do_t^T + diag(a_{t+1}) G_{t+1}, dk_t = G_t v_t, dv_t = G_t^T k_t,
//   dgk_t[i] = a_t[i] sum_j S_{t-1}[i][j] G_t[i][j], dh0 = diag(a_1) G_1 (tokens from 1 here).
#include "reference/gla_per_sequence.hpp"
#include "reference/indexing.hpp"

#include <cmath>

namespace linattn::reference {
namespace {

ChannelGatedGradients plain_gla_backward_recurrent(const Problem& p, const Inputs& in, const ChannelGate& gate,
                                                   const GradInputs& g) {
  detail::Index ix{p};
  ChannelGatedGradients d;
  static_cast<Gradients&>(d) = detail::zero_gradients(p);
  d.dgk.assign(static_cast<std::size_t>(p.B * p.T * p.H * p.DK), 0.0);
  const std::int64_t DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      auto a = [&](std::int64_t t, std::int64_t i) { return std::exp(gate.at(p, b, t, hh, i)); };
      // states[t + 1] = S after token t; states[0] = S0.
      std::vector<std::vector<double>> states(static_cast<std::size_t>(p.T + 1));
      states[0] = detail::initial_state(p, in.initial_state, b, hh);
      for (std::int64_t t = 0; t < p.T; ++t) {
        std::vector<double> S = states[t];
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j)
            S[i * DV + j] = a(t, i) * S[i * DV + j] + in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
        for (std::int64_t i = 0; i < DK; ++i) {
          double acc = 0;
          for (std::int64_t j = 0; j < DV; ++j) acc += S[i * DV + j] * g.d_o[ix.vo(b, t, hh, j)];
          d.dq[ix.qk(b, t, hh, i)] = p.scale * acc;
        }
        states[t + 1] = std::move(S);
      }
      std::vector<double> G = detail::initial_state(p, g.dht, b, hh);  // dht: the final state is not decayed again
      for (std::int64_t t = p.T - 1; t >= 0; --t) {
        if (t + 1 < p.T)
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < DV; ++j) G[i * DV + j] *= a(t + 1, i);
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j)
            G[i * DV + j] += p.scale * in.q[ix.qk(b, t, hh, i)] * g.d_o[ix.vo(b, t, hh, j)];
        for (std::int64_t i = 0; i < DK; ++i) {
          double acc = 0, overlap = 0;  // (G v_t)[i], and <S_{t-1}[i], G[i]>
          for (std::int64_t j = 0; j < DV; ++j) {
            acc += G[i * DV + j] * in.v[ix.vo(b, t, hh, j)];
            overlap += states[t][i * DV + j] * G[i * DV + j];
          }
          d.dk[ix.qk(b, t, hh, i)] = acc;
          d.dgk[ix.qk(b, t, hh, i)] = a(t, i) * overlap;
        }
        for (std::int64_t j = 0; j < DV; ++j) {
          double acc = 0;
          for (std::int64_t i = 0; i < DK; ++i) acc += G[i * DV + j] * in.k[ix.qk(b, t, hh, i)];
          d.dv[ix.vo(b, t, hh, j)] = acc;
        }
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) d.dh0[ix.state(b, hh, i, j)] = a(0, i) * G[i * DV + j];
    }
  return d;
}

}  // namespace

ChannelGatedGradients gla_backward_recurrent(const Problem& p, const Inputs& in, const ChannelGate& gate,
                                             const GradInputs& g) {
  return gla_backward_per_sequence(p, in, gate, g, plain_gla_backward_recurrent);
}

}  // namespace linattn::reference
