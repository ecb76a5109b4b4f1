// The gated recurrence by definition, token by token: S = a_t S, then
// S += k_t v_t^T, then o_t = scale * S^T q_t. The decay is its own loop, so
// that at level 1 (a_t = 1) S keeps the bits of recurrent.cpp's S += k v^T.
#include "reference/gated.hpp"
#include "reference/indexing.hpp"

#include <cmath>

namespace linattn::reference {
namespace {

Result plain_gated_recurrent(const Problem& p, const Inputs& in, const Gate& gate) {
  detail::Index ix{p};
  Result r;
  detail::allocate(p, r.o, r.h, r.final_state);
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      std::vector<double> S = detail::initial_state(p, in.initial_state, b, hh);
      for (std::int64_t t = 0; t < p.T; ++t) {
        if (t % p.chunk == 0) {  // snapshot: the state before chunk t / C
          for (std::int64_t i = 0; i < p.DK; ++i)
            for (std::int64_t j = 0; j < p.DV; ++j) r.h[ix.snapshot(b, t / p.chunk, hh, i, j)] = S[i * p.DV + j];
        }
        const double a = std::exp(gate.at(p, b, t, hh));
        for (double& e : S) e *= a;
        for (std::int64_t i = 0; i < p.DK; ++i)
          for (std::int64_t j = 0; j < p.DV; ++j) S[i * p.DV + j] += in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
        for (std::int64_t j = 0; j < p.DV; ++j) {
          double acc = 0;
          for (std::int64_t i = 0; i < p.DK; ++i) acc += in.q[ix.qk(b, t, hh, i)] * S[i * p.DV + j];
          r.o[ix.vo(b, t, hh, j)] = p.scale * acc;
        }
      }
      for (std::int64_t i = 0; i < p.DK; ++i)
        for (std::int64_t j = 0; j < p.DV; ++j) r.final_state[ix.state(b, hh, i, j)] = S[i * p.DV + j];
    }
  return r;
}

}  // namespace

Result gated_recurrent(const Problem& p, const Inputs& in, const Gate& gate) {
  return gated_per_sequence(p, in, gate, plain_gated_recurrent);
}

}  // namespace linattn::reference
