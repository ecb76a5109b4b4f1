// The per-channel gated recurrence by definition, token by token: row i of S
// decays by exp(gk_t[i]), then S += k_t v_t^T, then o_t = scale * S^T q_t.
#include "reference/gla_per_sequence.hpp"
#include "reference/indexing.hpp"

#include <cmath>

namespace linattn::reference {
namespace {

Result plain_gla_recurrent(const Problem& p, const Inputs& in, const ChannelGate& gate) {
  detail::Index ix{p};
  Result r;
  detail::allocate(p, r.o, r.h, r.final_state);
  const std::int64_t DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      std::vector<double> S = detail::initial_state(p, in.initial_state, b, hh);
      for (std::int64_t t = 0; t < p.T; ++t) {
        if (t % p.chunk == 0)  // snapshot: the state before chunk t / C
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < DV; ++j) r.h[ix.snapshot(b, t / p.chunk, hh, i, j)] = S[i * DV + j];
        for (std::int64_t i = 0; i < DK; ++i) {
          const double a = std::exp(gate.at(p, b, t, hh, i));
          for (std::int64_t j = 0; j < DV; ++j)
            S[i * DV + j] = a * S[i * DV + j] + in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
        }
        for (std::int64_t j = 0; j < DV; ++j) {
          double acc = 0;
          for (std::int64_t i = 0; i < DK; ++i) acc += in.q[ix.qk(b, t, hh, i)] * S[i * DV + j];
          r.o[ix.vo(b, t, hh, j)] = p.scale * acc;
        }
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) r.final_state[ix.state(b, hh, i, j)] = S[i * DV + j];
    }
  return r;
}

}  // namespace

Result gla_recurrent(const Problem& p, const Inputs& in, const ChannelGate& gate) {
  return gla_per_sequence(p, in, gate, plain_gla_recurrent);
}

}  // namespace linattn::reference
