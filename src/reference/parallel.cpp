#include "reference/indexing.hpp"
#include "reference/references.hpp"

namespace linattn::reference {

Result parallel(const Problem& p, const Inputs& in) {
  validate_shapes(p);
  detail::Index ix{p};
  Result r;
  detail::allocate(p, r.o, r.h, r.final_state);
  const std::int64_t T = p.T, DK = p.DK, DV = p.DV;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      const std::vector<double> s0 = detail::initial_state(p, in.initial_state, b, hh);
      // A = (Q K^T) .* M, materialized T x T (lower triangle only).
      std::vector<double> A(T * T, 0.0);
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t s = 0; s <= t; ++s)
          for (std::int64_t i = 0; i < DK; ++i) A[t * T + s] += in.q[ix.qk(b, t, hh, i)] * in.k[ix.qk(b, s, hh, i)];
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < DV; ++j) {
          double acc = 0;
          for (std::int64_t i = 0; i < DK; ++i) acc += in.q[ix.qk(b, t, hh, i)] * s0[i * DV + j];
          for (std::int64_t s = 0; s <= t; ++s) acc += A[t * T + s] * in.v[ix.vo(b, s, hh, j)];
          r.o[ix.vo(b, t, hh, j)] = p.scale * acc;
        }
      // States by definition: h[c] = S0 + sum_{t < c C} k_t v_t^T, final = S0 + sum_t k_t v_t^T.
      std::vector<double> S = s0;
      for (std::int64_t t = 0; t <= T; ++t) {
        if (t % p.chunk == 0 && t < T)
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < DV; ++j) r.h[ix.snapshot(b, t / p.chunk, hh, i, j)] = S[i * DV + j];
        if (t == T) break;
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < DV; ++j) S[i * DV + j] += in.k[ix.qk(b, t, hh, i)] * in.v[ix.vo(b, t, hh, j)];
      }
      for (std::int64_t i = 0; i < DK; ++i)
        for (std::int64_t j = 0; j < DV; ++j) r.final_state[ix.state(b, hh, i, j)] = S[i * DV + j];
    }
  return r;
}

}  // namespace linattn::reference
