#include "reference/indexing.hpp"
#include "reference/references.hpp"

namespace linattn::reference {

Result chunked(const Problem& p, const Inputs& in, Ordering ordering) {
  validate_shapes(p);
  detail::Index ix{p};
  Result r;
  detail::allocate(p, r.o, r.h, r.final_state);
  const std::int64_t NT = p.num_chunks(), DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      // outer[c] = K_c^T V_c for every chunk.
      std::vector<std::vector<double>> outer(NT, std::vector<double>(DK * DV, 0.0));
      for (std::int64_t c = 0; c < NT; ++c)
        for (std::int64_t t = c * p.chunk; t < c * p.chunk + p.chunk_length(c); ++t)
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < DV; ++j) outer[c][i * DV + j] += in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
      // Inclusive prefix sums (cumsum), then the right shift: prev[c] = S0 + sum_{c' < c} outer[c'].
      std::vector<std::vector<double>> inclusive(NT);
      std::vector<double> running = detail::initial_state(p, in.initial_state, b, hh);
      const std::vector<double> s0 = running;
      for (std::int64_t c = 0; c < NT; ++c) {
        for (std::int64_t e = 0; e < DK * DV; ++e) running[e] += outer[c][e];
        inclusive[c] = running;
      }
      for (std::int64_t c = 0; c < NT; ++c) {
        const std::vector<double>& prev =
            ordering == Ordering::correct ? (c == 0 ? s0 : inclusive[c - 1]) : inclusive[c];
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) r.h[ix.snapshot(b, c, hh, i, j)] = prev[i * DV + j];
        const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
        for (std::int64_t a = 0; a < L; ++a) {
          // A[a][s] = q_a . k_s for s <= a (mask to zero, not -inf: no softmax).
          std::vector<double> A(L, 0.0);
          for (std::int64_t s = 0; s <= a; ++s)
            for (std::int64_t i = 0; i < DK; ++i) A[s] += in.q[ix.qk(b, t0 + a, hh, i)] * in.k[ix.qk(b, t0 + s, hh, i)];
          for (std::int64_t j = 0; j < DV; ++j) {
            double inter = 0, intra = 0;
            for (std::int64_t i = 0; i < DK; ++i) inter += in.q[ix.qk(b, t0 + a, hh, i)] * prev[i * DV + j];
            for (std::int64_t s = 0; s <= a; ++s) intra += A[s] * in.v[ix.vo(b, t0 + s, hh, j)];
            r.o[ix.vo(b, t0 + a, hh, j)] = p.scale * (inter + intra);
          }
        }
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) r.final_state[ix.state(b, hh, i, j)] = running[i * DV + j];
    }
  return r;
}

}  // namespace linattn::reference
