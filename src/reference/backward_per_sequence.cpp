// The backward twin of per_sequence.cpp: a packed variable-length batch as N
// independent B = 1 problems. Slice each sequence (and its rows of the
// initial state, dht and h) out, run the plain backward on it, put the
// gradients back.
#include "reference/backward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace linattn::reference {
namespace {

// The plain references index without bounds checks: a wrong size would read
// out of range instead of failing.
void check_size(const std::vector<double>* x, std::int64_t expected, const char* name) {
  if (x && static_cast<std::int64_t>(x->size()) != expected)
    throw std::invalid_argument(std::string("backward reference: ") + name + " holds " + std::to_string(x->size()) +
                                " values, the problem needs " + std::to_string(expected));
}

void check_sizes(const Problem& p, const Inputs& in, const GradInputs& g, const std::vector<double>* h) {
  const std::int64_t tokens = p.B * p.T * p.H, state = p.H * p.DK * p.DV;
  check_size(&in.q, tokens * p.DK, "q");
  check_size(&in.k, tokens * p.DK, "k");
  check_size(&in.v, tokens * p.DV, "v");
  check_size(&g.d_o, tokens * p.DV, "do");
  check_size(in.initial_state, p.num_sequences() * state, "initial_state");
  check_size(g.dht, p.num_sequences() * state, "dht");
  check_size(h, (p.varlen() ? 1 : p.B) * p.total_chunks() * state, "h");
}

}  // namespace

Gradients backward_per_sequence(const Problem& p, const Inputs& in, const GradInputs& g, const std::vector<double>* h,
                                const BackwardForm& form) {
  validate_shapes(p);
  check_sizes(p, in, g, h);
  if (!p.varlen()) return form(p, in, g, h);
  const std::int64_t H = p.H, DK = p.DK, DV = p.DV, state = H * DK * DV;
  // Once, not per sequence: each sum is O(N) (as is a copy of p, hence plain_problem below).
  const std::vector<std::int64_t> chunk_starts = p.chunk_starts();
  Gradients d;
  d.dq.assign(static_cast<std::size_t>(p.T * H * DK), 0.0);
  d.dk.assign(d.dq.size(), 0.0);
  d.dv.assign(static_cast<std::size_t>(p.T * H * DV), 0.0);
  d.dh0.assign(static_cast<std::size_t>(p.num_sequences() * state), 0.0);
  for (std::int64_t n = 0; n < p.num_sequences(); ++n) {
    const Problem one = plain_problem(p, 1, p.sequence_length(n));
    const std::int64_t t0 = p.sequence_start(n);
    // Tokens are rows of H * D elements, states and chunks rows of H * DK * DV:
    // a sequence's share of each is a contiguous range.
    auto rows = [](const std::vector<double>& x, std::int64_t first, std::int64_t end, std::int64_t row) {
      return std::vector<double>(x.begin() + first * row, x.begin() + end * row);
    };
    const std::vector<double> q = rows(in.q, t0, t0 + one.T, H * DK), k = rows(in.k, t0, t0 + one.T, H * DK),
                              v = rows(in.v, t0, t0 + one.T, H * DV), d_o = rows(g.d_o, t0, t0 + one.T, H * DV);
    std::vector<double> s0, dht, hn;
    if (in.initial_state) s0 = rows(*in.initial_state, n, n + 1, state);
    if (g.dht) dht = rows(*g.dht, n, n + 1, state);
    if (h) hn = rows(*h, chunk_starts[n], chunk_starts[n + 1], state);
    const Gradients part = form(one, {q, k, v, in.initial_state ? &s0 : nullptr},
                                {d_o, g.dht ? &dht : nullptr}, h ? &hn : nullptr);
    std::copy(part.dq.begin(), part.dq.end(), d.dq.begin() + t0 * H * DK);
    std::copy(part.dk.begin(), part.dk.end(), d.dk.begin() + t0 * H * DK);
    std::copy(part.dv.begin(), part.dv.end(), d.dv.begin() + t0 * H * DV);
    std::copy(part.dh0.begin(), part.dh0.end(), d.dh0.begin() + n * state);
  }
  return d;
}

Gradients backward(const Problem& p, const Inputs& in, const GradInputs& g) { return backward_chunked(p, in, g); }

}  // namespace linattn::reference
