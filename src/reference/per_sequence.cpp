// A packed variable-length batch as N independent B = 1 problems: slice each
// sequence out, run the plain reference on it, put the pieces back.
#include "reference/references.hpp"

#include <algorithm>

namespace linattn::reference {

Result per_sequence(const Problem& p, const Inputs& in, const Form& form) {
  validate_shapes(p);
  if (!p.varlen()) return form(p, in);
  const std::int64_t H = p.H, DK = p.DK, DV = p.DV, state = H * DK * DV;
  // Once, not per sequence: each sum is O(N) (as is a copy of p, hence plain_problem below).
  const std::vector<std::int64_t> chunk_starts = p.chunk_starts();
  Result r;
  r.o.assign(static_cast<std::size_t>(p.T * H * DV), 0.0);
  r.h.assign(static_cast<std::size_t>(chunk_starts.back() * state), 0.0);
  r.final_state.assign(static_cast<std::size_t>(p.num_sequences() * state), 0.0);
  for (std::int64_t n = 0; n < p.num_sequences(); ++n) {
    const Problem one = plain_problem(p, 1, p.sequence_length(n));
    const std::int64_t t0 = p.sequence_start(n);
    // Tokens are rows of H * D elements: a sequence is a contiguous range.
    auto slice = [&](const std::vector<double>& x, std::int64_t D) {
      return std::vector<double>(x.begin() + t0 * H * D, x.begin() + (t0 + one.T) * H * D);
    };
    const std::vector<double> q = slice(in.q, DK), k = slice(in.k, DK), v = slice(in.v, DV);
    std::vector<double> s0;
    if (in.initial_state) s0.assign(in.initial_state->begin() + n * state, in.initial_state->begin() + (n + 1) * state);
    const Result part = form(one, {q, k, v, in.initial_state ? &s0 : nullptr});
    std::copy(part.o.begin(), part.o.end(), r.o.begin() + t0 * H * DV);
    std::copy(part.h.begin(), part.h.end(), r.h.begin() + chunk_starts[n] * state);
    std::copy(part.final_state.begin(), part.final_state.end(), r.final_state.begin() + n * state);
  }
  return r;
}

Result forward(const Problem& p, const Inputs& in, bool normalized) {
  Result r = per_sequence(p, in, [](const Problem& one, const Inputs& part) { return chunked(one, part); });
  if (normalized) normalize(p, in, r);
  return r;
}

}  // namespace linattn::reference
