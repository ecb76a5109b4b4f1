// The per-channel gated chunked form: within chunk c, b_a[i] is the inclusive
// cumulative sum of gk[i] up to token a (b_L at the last token), and every
// decay factor is exp of a difference of those sums in one channel
// (exp(b_a[i] - b_s[i]), exp(b_L[i] - b_s[i]), exp(b_a[i]), exp(b_L[i])), so
// every exponent is <= 0 and nothing overflows however strong the decay.
#include "reference/gla_per_sequence.hpp"
#include "reference/indexing.hpp"

#include <cmath>

namespace linattn::reference {
namespace {

Result plain_gla_chunked(const Problem& p, const Inputs& in, const ChannelGate& gate) {
  detail::Index ix{p};
  Result r;
  detail::allocate(p, r.o, r.h, r.final_state);
  const std::int64_t DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      std::vector<double> S = detail::initial_state(p, in.initial_state, b, hh);  // state before chunk c
      for (std::int64_t c = 0; c < p.num_chunks(); ++c) {
        const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
        std::vector<double> cum(static_cast<std::size_t>(L * DK));  // b_a[i] at [a * DK + i]
        for (std::int64_t a = 0; a < L; ++a)
          for (std::int64_t i = 0; i < DK; ++i)
            cum[a * DK + i] = (a == 0 ? 0.0 : cum[(a - 1) * DK + i]) + gate.at(p, b, t0 + a, hh, i);
        const double* bL = &cum[(L - 1) * DK];
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) r.h[ix.snapshot(b, c, hh, i, j)] = S[i * DV + j];
        for (std::int64_t a = 0; a < L; ++a) {
          // A[s] = sum_i q_a[i] k_s[i] exp(b_a[i] - b_s[i]) for s <= a.
          std::vector<double> A(static_cast<std::size_t>(L), 0.0);
          for (std::int64_t s = 0; s <= a; ++s)
            for (std::int64_t i = 0; i < DK; ++i)
              A[s] += in.q[ix.qk(b, t0 + a, hh, i)] * in.k[ix.qk(b, t0 + s, hh, i)] *
                      std::exp(cum[a * DK + i] - cum[s * DK + i]);
          for (std::int64_t j = 0; j < DV; ++j) {
            double inter = 0, intra = 0;
            for (std::int64_t i = 0; i < DK; ++i)
              inter += in.q[ix.qk(b, t0 + a, hh, i)] * std::exp(cum[a * DK + i]) * S[i * DV + j];
            for (std::int64_t s = 0; s <= a; ++s) intra += A[s] * in.v[ix.vo(b, t0 + s, hh, j)];
            r.o[ix.vo(b, t0 + a, hh, j)] = p.scale * (inter + intra);
          }
        }
        // S_{c+1} = diag(exp(b_L)) S_c + sum_s (k_s * exp(b_L - b_s)) v_s^T.
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) {
            double sum = std::exp(bL[i]) * S[i * DV + j];
            for (std::int64_t s = 0; s < L; ++s)
              sum += std::exp(bL[i] - cum[s * DK + i]) * in.k[ix.qk(b, t0 + s, hh, i)] * in.v[ix.vo(b, t0 + s, hh, j)];
            S[i * DV + j] = sum;
          }
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) r.final_state[ix.state(b, hh, i, j)] = S[i * DV + j];
    }
  return r;
}

}  // namespace

Result gla_chunked(const Problem& p, const Inputs& in, const ChannelGate& gate) {
  return gla_per_sequence(p, in, gate, plain_gla_chunked);
}

}  // namespace linattn::reference
