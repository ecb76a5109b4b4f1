#include "reference/indexing.hpp"
#include "reference/references.hpp"

#include <algorithm>
#include <stdexcept>

namespace linattn::reference {

Result sequential(const Problem& p, const Inputs& in, std::int64_t block_dv, UpdatePlacement placement) {
  validate_shapes(p);
  if (block_dv <= 0) throw std::invalid_argument("block_dv must be positive");
  detail::Index ix{p};
  Result r;
  detail::allocate(p, r.o, r.h, r.final_state);
  const std::int64_t NT = p.num_chunks(), DK = p.DK;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hh = 0; hh < p.H; ++hh) {
      const std::vector<double> s0 = detail::initial_state(p, in.initial_state, b, hh);
      for (std::int64_t dv0 = 0; dv0 < p.DV; dv0 += block_dv) {  // grid.x <- DV block
        const std::int64_t W = std::min(block_dv, p.DV - dv0);
        std::vector<double> S(DK * W);  // the state's dv strip, loop-carried
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < W; ++j) S[i * W + j] = s0[i * p.DV + dv0 + j];
        auto update = [&](std::int64_t t0, std::int64_t L) {  // S += K_c^T V_c
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < W; ++j) {
              double kv = 0;
              for (std::int64_t s = 0; s < L; ++s) kv += in.k[ix.qk(b, t0 + s, hh, i)] * in.v[ix.vo(b, t0 + s, hh, dv0 + j)];
              S[i * W + j] += kv;
            }
        };
        for (std::int64_t c = 0; c < NT; ++c) {  // sequential chunk loop
          const std::int64_t t0 = c * p.chunk, L = p.chunk_length(c);
          if (placement == UpdatePlacement::before_output) update(t0, L);
          for (std::int64_t i = 0; i < DK; ++i)
            for (std::int64_t j = 0; j < W; ++j) r.h[ix.snapshot(b, c, hh, i, dv0 + j)] = S[i * W + j];
          for (std::int64_t a = 0; a < L; ++a) {
            std::vector<double> A(a + 1, 0.0);  // row a of tril(Q_c K_c^T): independent of the dv block
            for (std::int64_t s = 0; s <= a; ++s)
              for (std::int64_t i = 0; i < DK; ++i) A[s] += in.q[ix.qk(b, t0 + a, hh, i)] * in.k[ix.qk(b, t0 + s, hh, i)];
            for (std::int64_t j = 0; j < W; ++j) {
              double inter = 0, intra = 0;
              for (std::int64_t i = 0; i < DK; ++i) inter += in.q[ix.qk(b, t0 + a, hh, i)] * S[i * W + j];
              for (std::int64_t s = 0; s <= a; ++s) intra += A[s] * in.v[ix.vo(b, t0 + s, hh, dv0 + j)];
              r.o[ix.vo(b, t0 + a, hh, dv0 + j)] = p.scale * (inter + intra);
            }
          }
          if (placement == UpdatePlacement::after_output) update(t0, L);  // the right shift
        }
        for (std::int64_t i = 0; i < DK; ++i)
          for (std::int64_t j = 0; j < W; ++j) r.final_state[ix.state(b, hh, i, dv0 + j)] = S[i * W + j];
      }
    }
  return r;
}

}  // namespace linattn::reference
