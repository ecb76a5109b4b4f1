// The gated twins of per_sequence.cpp and backward_per_sequence.cpp: a packed
// batch as N independent B = 1 problems, each with its own tokens' gate values
// (a per-head gate is the same for every sequence). Also the gate's checks and
// the ground truths of a gated run.
#include "reference/gated.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace linattn::reference {
namespace {

// The gate of the tokens [t0, t0 + T) of a packed row (B = 1).
Gate slice(const Gate& gate, std::int64_t t0, std::int64_t T, std::int64_t H) {
  if (gate.kind != GateKind::per_token) return gate;
  return Gate::per_token(std::vector<double>(gate.log_decay.begin() + t0 * H, gate.log_decay.begin() + (t0 + T) * H));
}

}  // namespace

void sum_dg_per_head(const Problem& p, GatedGradients& d) {
  d.dg_gamma.assign(static_cast<std::size_t>(p.H), 0.0);
  for (std::size_t i = 0; i < d.dg.size(); ++i) d.dg_gamma[i % static_cast<std::size_t>(p.H)] += d.dg[i];
}

void check_gate(const Problem& p, const Gate& gate) {
  const std::int64_t expected = gate.kind == GateKind::none ? 0 : gate.kind == GateKind::per_head ? p.H : p.B * p.T * p.H;
  const char* name = gate.kind == GateKind::per_token ? "g" : "g_gamma";
  if (static_cast<std::int64_t>(gate.log_decay.size()) != expected)
    throw std::invalid_argument(std::string("gated reference: ") + name + " holds " +
                                std::to_string(gate.log_decay.size()) + " values, the problem needs " +
                                std::to_string(expected));
  const std::int64_t bad = first_bad_log_decay(gate.log_decay);
  if (bad >= 0)
    throw std::invalid_argument(std::string("gated reference: ") + name + "[" + std::to_string(bad) + "] = " +
                                std::to_string(gate.log_decay[static_cast<std::size_t>(bad)]) +
                                " is not a finite log-decay <= 0");
}

Result gated_per_sequence(const Problem& p, const Inputs& in, const Gate& gate, const GatedForm& form) {
  validate_shapes(p);
  check_gate(p, gate);
  if (!p.varlen()) return form(p, in, gate);
  const std::int64_t H = p.H, DK = p.DK, DV = p.DV, state = H * DK * DV;
  const std::vector<std::int64_t> chunk_starts = p.chunk_starts();
  Result r;
  r.o.assign(static_cast<std::size_t>(p.T * H * DV), 0.0);
  r.h.assign(static_cast<std::size_t>(chunk_starts.back() * state), 0.0);
  r.final_state.assign(static_cast<std::size_t>(p.num_sequences() * state), 0.0);
  for (std::int64_t n = 0; n < p.num_sequences(); ++n) {
    const Problem one = plain_problem(p, 1, p.sequence_length(n));
    const std::int64_t t0 = p.sequence_start(n);
    auto rows = [](const std::vector<double>& x, std::int64_t first, std::int64_t end, std::int64_t row) {
      return std::vector<double>(x.begin() + first * row, x.begin() + end * row);
    };
    const std::vector<double> q = rows(in.q, t0, t0 + one.T, H * DK), k = rows(in.k, t0, t0 + one.T, H * DK),
                              v = rows(in.v, t0, t0 + one.T, H * DV);
    std::vector<double> s0;
    if (in.initial_state) s0 = rows(*in.initial_state, n, n + 1, state);
    const Result part = form(one, {q, k, v, in.initial_state ? &s0 : nullptr}, slice(gate, t0, one.T, H));
    std::copy(part.o.begin(), part.o.end(), r.o.begin() + t0 * H * DV);
    std::copy(part.h.begin(), part.h.end(), r.h.begin() + chunk_starts[n] * state);
    std::copy(part.final_state.begin(), part.final_state.end(), r.final_state.begin() + n * state);
  }
  return r;
}

GatedGradients gated_backward_per_sequence(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g,
                                           const std::vector<double>* h, const GatedBackwardForm& form) {
  validate_shapes(p);
  check_gate(p, gate);
  // The level-1 driver checks every size and slices each sequence (or hands a
  // plain batch over whole); the gate and dg are sliced here alike.
  GatedGradients d;
  d.dg.assign(static_cast<std::size_t>(p.B * p.T * p.H), 0.0);
  std::int64_t n = 0;  // backward_per_sequence runs sequence 0, 1, ... in order
  static_cast<Gradients&>(d) = backward_per_sequence(
      p, in, g, h,
      [&](const Problem& one, const Inputs& part, const GradInputs& grad, const std::vector<double>* hn) -> Gradients {
        if (p.varlen() && one.T != p.sequence_length(n)) throw std::logic_error("gated reference: sequence order");
        const std::int64_t t0 = p.varlen() ? p.sequence_start(n++) : 0;
        GatedGradients r = form(one, part, p.varlen() ? slice(gate, t0, one.T, p.H) : gate, grad, hn);
        std::copy(r.dg.begin(), r.dg.end(), d.dg.begin() + t0 * p.H);
        return r;
      });
  sum_dg_per_head(p, d);
  return d;
}

Result gated_forward(const Problem& p, const Inputs& in, const Gate& gate) { return gated_chunked(p, in, gate); }

GatedGradients gated_backward(const Problem& p, const Inputs& in, const Gate& gate, const GradInputs& g) {
  return gated_backward_chunked(p, in, gate, g);
}

}  // namespace linattn::reference
