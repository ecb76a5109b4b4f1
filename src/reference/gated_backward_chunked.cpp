// The gated chunked backward: backward_chunked.cpp's reverse scan with the
// decay weights of gated_chunked.cpp (every exponent a difference of in-chunk
// cumulative sums, <= 0), and dg from an identity rather than from states.
//
// The identity. With G_t = dL/dS_t and S_t = a_t S_{t-1} + k_t v_t^T, the
// gate's gradient is dg_t = a_t <S_{t-1}, G_t> = <S_t, G_t> - k_t . dk_t
// (dk_t = G_t v_t). And G_t = scale * q_t do_t^T + a_{t+1} G_{t+1} gives
// <S_t, G_t> = q_t . dq_t + dg_{t+1} (dq_t = scale * S_t do_t), the last token's
// successor term being <S_T, dht>. Unrolled:
//   dg_t = sum_{s >= t} (q_s . dq_s - k_s . dk_s) + <S_T, dht>
// so dg needs only the gradients and the final state: one reverse sum per row.
// At level 1 every weight is exp(0) = 1, applied to a sum already formed or to
// one factor of a product, which leaves backward_chunked.cpp's bits unchanged.
#include "reference/gated.hpp"
#include "reference/indexing.hpp"

#include <cmath>

namespace linattn::reference {
namespace {

// b_i of chunk c of row (b, hh): the inclusive cumulative sum of g.
std::vector<double> cumulative(const Problem& p, const Gate& gate, std::int64_t b, std::int64_t c, std::int64_t hh) {
  const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
  std::vector<double> cum(L);
  for (std::int64_t a = 0; a < L; ++a) cum[a] = (a == 0 ? 0.0 : cum[a - 1]) + gate.at(p, b, t0 + a, hh);
  return cum;
}

// The state after chunk c from the state S before it: exp(b_L) S + sum_j exp(b_L - b_j) k_j v_j^T.
std::vector<double> after_chunk(const Problem& p, const Inputs& in, const Gate& gate, const std::vector<double>& S,
                                std::int64_t b, std::int64_t c, std::int64_t hh) {
  detail::Index ix{p};
  const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c), DK = p.DK, DV = p.DV;
  const std::vector<double> cum = cumulative(p, gate, b, c, hh);
  const double bL = cum[L - 1];
  std::vector<double> outer(DK * DV, 0.0), next(DK * DV);
  for (std::int64_t s = 0; s < L; ++s) {
    const double w = std::exp(bL - cum[s]);
    for (std::int64_t i = 0; i < DK; ++i)
      for (std::int64_t j = 0; j < DV; ++j)
        outer[i * DV + j] += w * in.k[ix.qk(b, t0 + s, hh, i)] * in.v[ix.vo(b, t0 + s, hh, j)];
  }
  for (std::int64_t e = 0; e < DK * DV; ++e) next[e] = std::exp(bL) * S[e] + outer[e];
  return next;
}

// before[c] = h[c] for every chunk (read from the forward's snapshots when
// given, else recomputed), and before[NT] = the final state S_T.
std::vector<std::vector<double>> states(const Problem& p, const Inputs& in, const Gate& gate,
                                        const std::vector<double>* h, std::int64_t b, std::int64_t hh) {
  detail::Index ix{p};
  const std::int64_t NT = p.num_chunks(), DK = p.DK, DV = p.DV;
  std::vector<std::vector<double>> before(NT + 1, std::vector<double>(DK * DV, 0.0));
  before[0] = detail::initial_state(p, in.initial_state, b, hh);
  for (std::int64_t c = 0; c < NT; ++c) {
    if (h)
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) before[c][i * DV + j] = (*h)[ix.snapshot(b, c, hh, i, j)];
    before[c + 1] = after_chunk(p, in, gate, before[c], b, c, hh);
  }
  return before;
}

GatedGradients plain_gated_chunked(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g,
                                   const std::vector<double>* h) {
  detail::Index ix{p};
  GatedGradients d;
  static_cast<Gradients&>(d) = detail::zero_gradients(p);
  d.dg.assign(static_cast<std::size_t>(p.B * p.T * p.H), 0.0);
  const std::int64_t DK = p.DK, DV = p.DV, NT = p.num_chunks();
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      const std::vector<std::vector<double>> before = states(p, in, gate, h, b, hh);
      auto q = [&](std::int64_t t, std::int64_t i) { return in.q[ix.qk(b, t, hh, i)]; };
      auto k = [&](std::int64_t t, std::int64_t i) { return in.k[ix.qk(b, t, hh, i)]; };
      auto v = [&](std::int64_t t, std::int64_t j) { return in.v[ix.vo(b, t, hh, j)]; };
      auto dO = [&](std::int64_t t, std::int64_t j) { return g.d_o[ix.vo(b, t, hh, j)]; };
      std::vector<double> dS = detail::initial_state(p, g.dht, b, hh);  // dL/d(state after chunk c)
      for (std::int64_t c = NT - 1; c >= 0; --c) {
        const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
        const std::vector<double> cum = cumulative(p, gate, b, c, hh);
        const double bL = cum[L - 1];
        // Row a, column s <= a: dOV = exp(b_a - b_s) dO_a . v_s, QK = exp(b_a - b_s) q_a . k_s.
        std::vector<double> dOV(L * L, 0.0), QK(L * L, 0.0);
        for (std::int64_t a = 0; a < L; ++a)
          for (std::int64_t s = 0; s <= a; ++s) {
            for (std::int64_t j = 0; j < DV; ++j) dOV[a * L + s] += dO(t0 + a, j) * v(t0 + s, j);
            for (std::int64_t i = 0; i < DK; ++i) QK[a * L + s] += q(t0 + a, i) * k(t0 + s, i);
            const double w = std::exp(cum[a] - cum[s]);
            dOV[a * L + s] *= w;
            QK[a * L + s] *= w;
          }
        const std::vector<double>& S = before[c];
        for (std::int64_t a = 0; a < L; ++a) {
          const double to_a = std::exp(cum[a]);
          for (std::int64_t i = 0; i < DK; ++i) {
            double inter = 0, intra = 0;
            for (std::int64_t j = 0; j < DV; ++j) inter += dO(t0 + a, j) * S[i * DV + j];
            for (std::int64_t s = 0; s <= a; ++s) intra += dOV[a * L + s] * k(t0 + s, i);
            d.dq[ix.qk(b, t0 + a, hh, i)] = p.scale * (to_a * inter + intra);
          }
        }
        for (std::int64_t s = 0; s < L; ++s) {
          const double to_end = std::exp(bL - cum[s]);  // from token s to the chunk's end, where dS applies
          for (std::int64_t i = 0; i < DK; ++i) {
            double intra = 0, later = 0;
            for (std::int64_t a = s; a < L; ++a) intra += dOV[a * L + s] * q(t0 + a, i);
            for (std::int64_t j = 0; j < DV; ++j) later += to_end * v(t0 + s, j) * dS[i * DV + j];
            d.dk[ix.qk(b, t0 + s, hh, i)] = p.scale * intra + later;
          }
          for (std::int64_t j = 0; j < DV; ++j) {
            double intra = 0, later = 0;
            for (std::int64_t a = s; a < L; ++a) intra += QK[a * L + s] * dO(t0 + a, j);
            for (std::int64_t i = 0; i < DK; ++i) later += to_end * k(t0 + s, i) * dS[i * DV + j];
            d.dv[ix.vo(b, t0 + s, hh, j)] = p.scale * intra + later;
          }
        }
        // Only now: dS becomes the gradient of the state before chunk c.
        const double whole = std::exp(bL);
        for (double& e : dS) e *= whole;
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) {
            double acc = 0;
            for (std::int64_t a = 0; a < L; ++a) acc += std::exp(cum[a]) * q(t0 + a, i) * dO(t0 + a, j);
            dS[i * DV + j] += p.scale * acc;
          }
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) d.dh0[ix.state(b, hh, i, j)] = dS[i * DV + j];
      // dg by the identity: <S_T, dht>, then q_s . dq_s - k_s . dk_s summed from the end.
      double running = 0;
      if (g.dht) {
        const std::vector<double> dht = detail::initial_state(p, g.dht, b, hh);
        for (std::int64_t e = 0; e < DK * DV; ++e) running += before[NT][e] * dht[e];
      }
      for (std::int64_t t = p.T - 1; t >= 0; --t) {
        for (std::int64_t i = 0; i < DK; ++i)
          running += q(t, i) * d.dq[ix.qk(b, t, hh, i)] - k(t, i) * d.dk[ix.qk(b, t, hh, i)];
        d.dg[static_cast<std::size_t>((b * p.T + t) * p.H + hh)] = running;
      }
    }
  return d;
}

}  // namespace

GatedGradients gated_backward_chunked(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g,
                                      const std::vector<double>* h) {
  return gated_backward_per_sequence(p, in, gate, g, h, plain_gated_chunked);
}

}  // namespace linattn::reference
