#include "reference/indexing.hpp"
#include "reference/references.hpp"

namespace linattn::reference {

Result recompute(const Problem& p, const Inputs& in) {
  validate_shapes(p);
  detail::Index ix{p};
  Result r;
  detail::allocate(p, r.o, r.h, r.final_state);
  const std::int64_t NT = p.num_chunks(), DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)        // grid.z <- batch
    for (std::int64_t hh = 0; hh < p.H; ++hh)   // grid.y <- head
      for (std::int64_t c = 0; c < NT; ++c) {   // grid.x <- chunk
        // (1) rebuild the prefix state from scratch: S = S0 + sum_{c' < c} K_c'^T V_c'.
        std::vector<double> S = detail::initial_state(p, in.initial_state, b, hh);
        for (std::int64_t t = 0; t < c * p.chunk; ++t)
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < DV; ++j) S[i * DV + j] += in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) r.h[ix.snapshot(b, c, hh, i, j)] = S[i * DV + j];
        // (2) + (3): O_c = scale * (Q_c S + tril(Q_c K_c^T) V_c).
        const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
        for (std::int64_t a = 0; a < L; ++a)
          for (std::int64_t j = 0; j < DV; ++j) {
            double acc = 0;
            for (std::int64_t i = 0; i < DK; ++i) acc += in.q[ix.qk(b, t0 + a, hh, i)] * S[i * DV + j];
            for (std::int64_t s = 0; s <= a; ++s) {
              double qk = 0;
              for (std::int64_t i = 0; i < DK; ++i) qk += in.q[ix.qk(b, t0 + a, hh, i)] * in.k[ix.qk(b, t0 + s, hh, i)];
              acc += qk * in.v[ix.vo(b, t0 + s, hh, j)];
            }
            r.o[ix.vo(b, t0 + a, hh, j)] = p.scale * acc;
          }
        if (c == NT - 1) {  // the last chunk's team also owns the final state
          for (std::int64_t t = t0; t < t0 + L; ++t)
            for (std::int64_t i = 0; i < DK; ++i)
              for (std::int64_t j = 0; j < DV; ++j) S[i * DV + j] += in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < DV; ++j) r.final_state[ix.state(b, hh, i, j)] = S[i * DV + j];
        }
      }
  return r;
}

}  // namespace linattn::reference
