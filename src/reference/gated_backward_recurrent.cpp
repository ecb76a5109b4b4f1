// The gated backward by definition, token by token. A forward sweep keeps every
// state (S_{t-1} is needed for dg_t, and recovering it from S_t would divide by
// a_t and subtract k_t v_t^T back out); the gradient of the state, G_t, then
// runs in reverse:
//   G_t = scale * q_t do_t^T + a_{t+1} G_{t+1}, dk_t = G_t v_t, dv_t = G_t^T k_t,
//   dg_t = a_t <S_{t-1}, G_t>, dh0 = a_1 G_1 (tokens counted from 1 here).
// The decays are their own loops, so that at level 1 every other bit is
// backward_recurrent.cpp's.
#include "reference/gated.hpp"
#include "reference/indexing.hpp"

#include <cmath>

namespace linattn::reference {
namespace {

GatedGradients plain_gated_recurrent(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g) {
  detail::Index ix{p};
  GatedGradients d;
  static_cast<Gradients&>(d) = detail::zero_gradients(p);
  d.dg.assign(static_cast<std::size_t>(p.B * p.T * p.H), 0.0);
  const std::int64_t DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      auto a = [&](std::int64_t t) { return std::exp(gate.at(p, b, t, hh)); };
      // states[t + 1] = S after token t; states[0] = S0.
      std::vector<std::vector<double>> states(p.T + 1);
      states[0] = detail::initial_state(p, in.initial_state, b, hh);
      for (std::int64_t t = 0; t < p.T; ++t) {
        std::vector<double> S = states[t];
        const double at = a(t);
        for (double& e : S) e *= at;
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) S[i * DV + j] += in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
        for (std::int64_t i = 0; i < DK; ++i) {
          double acc = 0;
          for (std::int64_t j = 0; j < DV; ++j) acc += S[i * DV + j] * g.d_o[ix.vo(b, t, hh, j)];
          d.dq[ix.qk(b, t, hh, i)] = p.scale * acc;
        }
        states[t + 1] = std::move(S);
      }
      std::vector<double> G = detail::initial_state(p, g.dht, b, hh);  // dht: the final state is not decayed again
      for (std::int64_t t = p.T - 1; t >= 0; --t) {
        if (t + 1 < p.T) {
          const double next = a(t + 1);
          for (double& e : G) e *= next;
        }
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j)
            G[i * DV + j] += p.scale * in.q[ix.qk(b, t, hh, i)] * g.d_o[ix.vo(b, t, hh, j)];
        for (std::int64_t i = 0; i < DK; ++i) {
          double acc = 0;
          for (std::int64_t j = 0; j < DV; ++j) acc += G[i * DV + j] * in.v[ix.vo(b, t, hh, j)];
          d.dk[ix.qk(b, t, hh, i)] = acc;
        }
        for (std::int64_t j = 0; j < DV; ++j) {
          double acc = 0;
          for (std::int64_t i = 0; i < DK; ++i) acc += G[i * DV + j] * in.k[ix.qk(b, t, hh, i)];
          d.dv[ix.vo(b, t, hh, j)] = acc;
        }
        double overlap = 0;  // <S_{t-1}, G_t>
        for (std::int64_t e = 0; e < DK * DV; ++e) overlap += states[t][e] * G[e];
        d.dg[static_cast<std::size_t>((b * p.T + t) * p.H + hh)] = a(t) * overlap;
      }
      const double first = a(0);
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) d.dh0[ix.state(b, hh, i, j)] = first * G[i * DV + j];
    }
  return d;
}

}  // namespace

GatedGradients gated_backward_recurrent(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g) {
  return gated_backward_per_sequence(
      p, in, gate, g, nullptr,
      [](const Problem& one, const Inputs& part, const Gate& gt, const GradInputs& grad, const std::vector<double>*) {
        return plain_gated_recurrent(one, part, gt, grad);
      });
}

}  // namespace linattn::reference
