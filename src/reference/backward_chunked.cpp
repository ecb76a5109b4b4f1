// The chunked backward: the forward's chunk recurrence run in reverse. Within
// a chunk the causal (tril, diagonal included) terms; across chunks the
// gradient of the state, dS, carried from the last chunk to the first and
// updated only after a chunk has used it (the chunk's own tokens reach its
// keys and values through the tril terms, not through dS).
#include "reference/backward.hpp"
#include "reference/indexing.hpp"

namespace linattn::reference {
namespace {

// h[c] (the state before chunk c) of (b, hh) for every chunk: read from the
// forward's snapshots when given, else S0 + sum_{c' < c} K_c'^T V_c'.
std::vector<std::vector<double>> snapshots(const Problem& p, const Inputs& in, const std::vector<double>* h,
                                           std::int64_t b, std::int64_t hh) {
  detail::Index ix{p};
  const std::int64_t NT = p.num_chunks(), DK = p.DK, DV = p.DV;
  std::vector<std::vector<double>> before(NT, std::vector<double>(DK * DV, 0.0));
  std::vector<double> running = detail::initial_state(p, in.initial_state, b, hh);
  for (std::int64_t c = 0; c < NT; ++c) {
    if (h) {
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) before[c][i * DV + j] = (*h)[ix.snapshot(b, c, hh, i, j)];
      continue;
    }
    before[c] = running;
    std::vector<double> outer(DK * DV, 0.0);
    for (std::int64_t t = c * p.chunk; t < c * p.chunk + p.chunk_length(c); ++t)
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) outer[i * DV + j] += in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
    for (std::int64_t e = 0; e < DK * DV; ++e) running[e] += outer[e];
  }
  return before;
}

Gradients plain_chunked(const Problem& p, const Inputs& in, const GradInputs& g, const std::vector<double>* h) {
  detail::Index ix{p};
  Gradients d = detail::zero_gradients(p);
  const std::int64_t DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      const std::vector<std::vector<double>> before = snapshots(p, in, h, b, hh);
      auto q = [&](std::int64_t t, std::int64_t i) { return in.q[ix.qk(b, t, hh, i)]; };
      auto k = [&](std::int64_t t, std::int64_t i) { return in.k[ix.qk(b, t, hh, i)]; };
      auto v = [&](std::int64_t t, std::int64_t j) { return in.v[ix.vo(b, t, hh, j)]; };
      auto dO = [&](std::int64_t t, std::int64_t j) { return g.d_o[ix.vo(b, t, hh, j)]; };
      std::vector<double> dS = detail::initial_state(p, g.dht, b, hh);  // dL/d(state after chunk c)
      for (std::int64_t c = p.num_chunks() - 1; c >= 0; --c) {
        const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
        // Row a, column s <= a (zero above the diagonal): dOV = tril(dO_c V_c^T), QK = tril(Q_c K_c^T).
        std::vector<double> dOV(L * L, 0.0), QK(L * L, 0.0);
        for (std::int64_t a = 0; a < L; ++a)
          for (std::int64_t s = 0; s <= a; ++s) {
            for (std::int64_t j = 0; j < DV; ++j) dOV[a * L + s] += dO(t0 + a, j) * v(t0 + s, j);
            for (std::int64_t i = 0; i < DK; ++i) QK[a * L + s] += q(t0 + a, i) * k(t0 + s, i);
          }
        const std::vector<double>& S = before[c];
        for (std::int64_t a = 0; a < L; ++a)
          for (std::int64_t i = 0; i < DK; ++i) {
            double inter = 0, intra = 0;
            for (std::int64_t j = 0; j < DV; ++j) inter += dO(t0 + a, j) * S[i * DV + j];
            for (std::int64_t s = 0; s <= a; ++s) intra += dOV[a * L + s] * k(t0 + s, i);
            d.dq[ix.qk(b, t0 + a, hh, i)] = p.scale * (inter + intra);
          }
        for (std::int64_t s = 0; s < L; ++s) {
          for (std::int64_t i = 0; i < DK; ++i) {
            double intra = 0, later = 0;
            for (std::int64_t a = s; a < L; ++a) intra += dOV[a * L + s] * q(t0 + a, i);
            for (std::int64_t j = 0; j < DV; ++j) later += v(t0 + s, j) * dS[i * DV + j];
            d.dk[ix.qk(b, t0 + s, hh, i)] = p.scale * intra + later;
          }
          for (std::int64_t j = 0; j < DV; ++j) {
            double intra = 0, later = 0;
            for (std::int64_t a = s; a < L; ++a) intra += QK[a * L + s] * dO(t0 + a, j);
            for (std::int64_t i = 0; i < DK; ++i) later += k(t0 + s, i) * dS[i * DV + j];
            d.dv[ix.vo(b, t0 + s, hh, j)] = p.scale * intra + later;
          }
        }
        // Only now: chunk c's outputs read the states that chunks before it produced.
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) {
            double acc = 0;
            for (std::int64_t a = 0; a < L; ++a) acc += q(t0 + a, i) * dO(t0 + a, j);
            dS[i * DV + j] += p.scale * acc;
          }
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) d.dh0[ix.state(b, hh, i, j)] = dS[i * DV + j];
    }
  return d;
}

}  // namespace

Gradients backward_chunked(const Problem& p, const Inputs& in, const GradInputs& g, const std::vector<double>* h) {
  return backward_per_sequence(p, in, g, h, plain_chunked);
}

}  // namespace linattn::reference
