// The per-channel gated chunked reverse scan (channel_gated.hpp has the
// formulas), and dgk from an identity instead of the state overlaps.
//
// The identity. Write B_t[i] for the cumulative sum of gk[i] over the sequence
// up to token t. Then S_s = sum_{u <= s} diag(exp(B_s - B_u)) k_u v_u^T +
// diag(exp(B_s)) S_0, so gk_t[i] enters only through B_s[i] for s >= t. Adding
// e to gk_t[i] multiplies every factor exp(B_s[i] - B_u[i]) with u < t <= s, and
// exp(B_s[i]) for s >= t, by exp(e). That is what scaling q_s[i] (s >= t) by
// exp(e) and k_u[i] (u >= t) by exp(-e) does to every output o_s, except
// that the final state S_T, which does not read q, is scaled in row i by
// exp(e) as well. Differentiating at e = 0:
//   dgk_t[i] = sum_{s >= t} (q_s[i] dq_s[i] - k_s[i] dk_s[i]) + sum_j S_T[i][j] dht[i][j].
#include "reference/gla_per_sequence.hpp"
#include "reference/indexing.hpp"

#include <cmath>

namespace linattn::reference {
namespace {

ChannelGatedGradients plain_gla_backward_chunked(const Problem& p, const Inputs& in, const ChannelGate& gate,
                                                 const GradInputs& g) {
  detail::Index ix{p};
  ChannelGatedGradients d;
  static_cast<Gradients&>(d) = detail::zero_gradients(p);
  d.dgk.assign(static_cast<std::size_t>(p.B * p.T * p.H * p.DK), 0.0);
  const std::int64_t DK = p.DK, DV = p.DV, NT = p.num_chunks();
  const Result fw = gla_chunked(p, in, gate);  // h[c], the state before chunk c, and S_T
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      const std::vector<double> dht = detail::initial_state(p, g.dht, b, hh);
      std::vector<double> dS = dht;  // the gradient of the state after the chunk
      for (std::int64_t c = NT - 1; c >= 0; --c) {
        const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
        std::vector<double> cum(static_cast<std::size_t>(L * DK));
        for (std::int64_t a = 0; a < L; ++a)
          for (std::int64_t i = 0; i < DK; ++i)
            cum[a * DK + i] = (a == 0 ? 0.0 : cum[(a - 1) * DK + i]) + gate.at(p, b, t0 + a, hh, i);
        const double* bL = &cum[(L - 1) * DK];
        auto q = [&](std::int64_t a, std::int64_t i) { return in.q[ix.qk(b, t0 + a, hh, i)]; };
        auto k = [&](std::int64_t a, std::int64_t i) { return in.k[ix.qk(b, t0 + a, hh, i)]; };
        auto v = [&](std::int64_t a, std::int64_t j) { return in.v[ix.vo(b, t0 + a, hh, j)]; };
        auto dout = [&](std::int64_t a, std::int64_t j) { return g.d_o[ix.vo(b, t0 + a, hh, j)]; };
        auto Sc = [&](std::int64_t i, std::int64_t j) { return fw.h[ix.snapshot(b, c, hh, i, j)]; };
        auto decay = [&](std::int64_t a, std::int64_t s, std::int64_t i) {
          return std::exp(cum[a * DK + i] - cum[s * DK + i]);
        };
        // dP[a][s] = do_a . v_s and the scores A[a][s] = sum_i q_a[i] k_s[i] exp(b_a[i] - b_s[i]), s <= a.
        std::vector<double> dP(static_cast<std::size_t>(L * L), 0.0), A(static_cast<std::size_t>(L * L), 0.0);
        for (std::int64_t a = 0; a < L; ++a)
          for (std::int64_t s = 0; s <= a; ++s) {
            for (std::int64_t j = 0; j < DV; ++j) dP[a * L + s] += dout(a, j) * v(s, j);
            for (std::int64_t i = 0; i < DK; ++i) A[a * L + s] += q(a, i) * k(s, i) * decay(a, s, i);
          }
        for (std::int64_t a = 0; a < L; ++a)
          for (std::int64_t i = 0; i < DK; ++i) {
            double inter = 0, intra = 0;
            for (std::int64_t j = 0; j < DV; ++j) inter += Sc(i, j) * dout(a, j);
            for (std::int64_t s = 0; s <= a; ++s) intra += dP[a * L + s] * k(s, i) * decay(a, s, i);
            d.dq[ix.qk(b, t0 + a, hh, i)] = p.scale * (std::exp(cum[a * DK + i]) * inter + intra);
          }
        for (std::int64_t s = 0; s < L; ++s) {
          for (std::int64_t i = 0; i < DK; ++i) {
            double intra = 0, carried = 0;
            for (std::int64_t a = s; a < L; ++a) intra += dP[a * L + s] * q(a, i) * decay(a, s, i);
            for (std::int64_t j = 0; j < DV; ++j) carried += dS[i * DV + j] * v(s, j);
            d.dk[ix.qk(b, t0 + s, hh, i)] = p.scale * intra + std::exp(bL[i] - cum[s * DK + i]) * carried;
          }
          for (std::int64_t j = 0; j < DV; ++j) {
            double intra = 0, carried = 0;
            for (std::int64_t a = s; a < L; ++a) intra += A[a * L + s] * dout(a, j);
            for (std::int64_t i = 0; i < DK; ++i) carried += std::exp(bL[i] - cum[s * DK + i]) * k(s, i) * dS[i * DV + j];
            d.dv[ix.vo(b, t0 + s, hh, j)] = p.scale * intra + carried;
          }
        }
        // The gradient of the state before the chunk.
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) {
            double from_outputs = 0;
            for (std::int64_t a = 0; a < L; ++a) from_outputs += std::exp(cum[a * DK + i]) * q(a, i) * dout(a, j);
            dS[i * DV + j] = std::exp(bL[i]) * dS[i * DV + j] + p.scale * from_outputs;
          }
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) d.dh0[ix.state(b, hh, i, j)] = dS[i * DV + j];
      // dgk by the identity, a suffix sum from the last token.
      std::vector<double> suffix(static_cast<std::size_t>(DK), 0.0);
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) suffix[i] += fw.final_state[ix.state(b, hh, i, j)] * dht[i * DV + j];
      for (std::int64_t t = p.T - 1; t >= 0; --t)
        for (std::int64_t i = 0; i < DK; ++i) {
          const std::int64_t at = ix.qk(b, t, hh, i);
          suffix[i] += in.q[at] * d.dq[at] - in.k[at] * d.dk[at];
          d.dgk[at] = suffix[i];
        }
    }
  return d;
}

}  // namespace

ChannelGatedGradients gla_backward_chunked(const Problem& p, const Inputs& in, const ChannelGate& gate,
                                           const GradInputs& g) {
  return gla_backward_per_sequence(p, in, gate, g, plain_gla_backward_chunked);
}

}  // namespace linattn::reference
