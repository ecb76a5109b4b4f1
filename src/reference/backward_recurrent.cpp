// The backward by definition, token by token: dq_t = scale * S_t do_t needs the
// state after token t, so it comes from a forward sweep of S; dk, dv and dh0
// read the gradient of the state, which collects scale * q_t do_t^T from every
// later token and is therefore accumulated in reverse (no state is ever
// subtracted back out, so nothing cancels).
#include "reference/backward.hpp"
#include "reference/indexing.hpp"

namespace linattn::reference {
namespace {

Gradients plain_recurrent(const Problem& p, const Inputs& in, const GradInputs& g) {
  detail::Index ix{p};
  Gradients d = detail::zero_gradients(p);
  const std::int64_t DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      std::vector<double> S = detail::initial_state(p, in.initial_state, b, hh);
      for (std::int64_t t = 0; t < p.T; ++t) {
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) S[i * DV + j] += in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
        for (std::int64_t i = 0; i < DK; ++i) {
          double acc = 0;
          for (std::int64_t j = 0; j < DV; ++j) acc += S[i * DV + j] * g.d_o[ix.vo(b, t, hh, j)];
          d.dq[ix.qk(b, t, hh, i)] = p.scale * acc;
        }
      }
      // dS = dL/dS_t: dht, plus scale * q_t' do_t'^T of every token t' >= t.
      std::vector<double> dS = detail::initial_state(p, g.dht, b, hh);
      for (std::int64_t t = p.T - 1; t >= 0; --t) {
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j)
            dS[i * DV + j] += p.scale * in.q[ix.qk(b, t, hh, i)] * g.d_o[ix.vo(b, t, hh, j)];
        // S_t = S_{t-1} + k_t v_t^T: dk_t = dS v_t, dv_t = dS^T k_t.
        for (std::int64_t i = 0; i < DK; ++i) {
          double acc = 0;
          for (std::int64_t j = 0; j < DV; ++j) acc += dS[i * DV + j] * in.v[ix.vo(b, t, hh, j)];
          d.dk[ix.qk(b, t, hh, i)] = acc;
        }
        for (std::int64_t j = 0; j < DV; ++j) {
          double acc = 0;
          for (std::int64_t i = 0; i < DK; ++i) acc += dS[i * DV + j] * in.k[ix.qk(b, t, hh, i)];
          d.dv[ix.vo(b, t, hh, j)] = acc;
        }
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) d.dh0[ix.state(b, hh, i, j)] = dS[i * DV + j];
    }
  return d;
}

}  // namespace

Gradients backward_recurrent(const Problem& p, const Inputs& in, const GradInputs& g) {
  return backward_per_sequence(p, in, g, nullptr,
                               [](const Problem& one, const Inputs& part, const GradInputs& grad,
                                  const std::vector<double>*) { return plain_recurrent(one, part, grad); });
}

}  // namespace linattn::reference
