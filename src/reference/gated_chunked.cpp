// The gated chunked form: within chunk c, b_i is the inclusive cumulative sum
// of g up to token i (b_L at the last token), and every decay factor is exp of
// a difference of those sums (exp(b_i - b_j), exp(b_L - b_j), exp(b_i),
// exp(b_L)), so every exponent is <= 0 and nothing overflows however strong the
// decay. At level 1 every factor is exp(0) = 1, applied to a product or a sum
// already formed, which leaves chunked.cpp's bits unchanged.
#include "reference/gated.hpp"
#include "reference/indexing.hpp"

#include <cmath>

namespace linattn::reference {
namespace {

Result plain_gated_chunked(const Problem& p, const Inputs& in, const Gate& gate, Ordering ordering) {
  detail::Index ix{p};
  Result r;
  detail::allocate(p, r.o, r.h, r.final_state);
  const std::int64_t DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      std::vector<double> S = detail::initial_state(p, in.initial_state, b, hh);  // state before chunk c
      for (std::int64_t c = 0; c < p.num_chunks(); ++c) {
        const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
        std::vector<double> cum(L);  // b_i
        for (std::int64_t a = 0; a < L; ++a) cum[a] = (a == 0 ? 0.0 : cum[a - 1]) + gate.at(p, b, t0 + a, hh);
        const double bL = cum[L - 1];
        // S_{c+1} = exp(b_L) S_c + sum_j exp(b_L - b_j) k_j v_j^T.
        std::vector<double> outer(DK * DV, 0.0), next(DK * DV);
        for (std::int64_t s = 0; s < L; ++s) {
          const double w = std::exp(bL - cum[s]);
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < DV; ++j)
              outer[i * DV + j] += w * in.k[ix.qk(b, t0 + s, hh, i)] * in.v[ix.vo(b, t0 + s, hh, j)];
        }
        for (std::int64_t e = 0; e < DK * DV; ++e) next[e] = std::exp(bL) * S[e] + outer[e];
        const std::vector<double>& prev = ordering == Ordering::correct ? S : next;
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) r.h[ix.snapshot(b, c, hh, i, j)] = prev[i * DV + j];
        for (std::int64_t a = 0; a < L; ++a) {
          // A[s] = exp(b_a - b_s) q_a . k_s for s <= a.
          std::vector<double> A(L, 0.0);
          for (std::int64_t s = 0; s <= a; ++s) {
            for (std::int64_t i = 0; i < DK; ++i) A[s] += in.q[ix.qk(b, t0 + a, hh, i)] * in.k[ix.qk(b, t0 + s, hh, i)];
            A[s] *= std::exp(cum[a] - cum[s]);
          }
          const double to_a = std::exp(cum[a]);  // the decay from the chunk's start to token a
          for (std::int64_t j = 0; j < DV; ++j) {
            double inter = 0, intra = 0;
            for (std::int64_t i = 0; i < DK; ++i) inter += in.q[ix.qk(b, t0 + a, hh, i)] * prev[i * DV + j];
            for (std::int64_t s = 0; s <= a; ++s) intra += A[s] * in.v[ix.vo(b, t0 + s, hh, j)];
            r.o[ix.vo(b, t0 + a, hh, j)] = p.scale * (to_a * inter + intra);
          }
        }
        S = next;
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) r.final_state[ix.state(b, hh, i, j)] = S[i * DV + j];
    }
  return r;
}

}  // namespace

Result gated_chunked(const Problem& p, const Inputs& in, const Gate& gate, Ordering ordering) {
  return gated_per_sequence(p, in, gate, [ordering](const Problem& one, const Inputs& part, const Gate& g) {
    return plain_gated_chunked(one, part, g, ordering);
  });
}

}  // namespace linattn::reference
