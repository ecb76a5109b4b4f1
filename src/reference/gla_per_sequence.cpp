// The per-channel gate's checks, and its packed driver: a packed batch as N
// independent B = 1 problems (per_sequence and backward_per_sequence), each
// with its own tokens' rows of gk, dgk assembled alike.
#include "core/gate.hpp"
#include "reference/gla_per_sequence.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace linattn::reference {
namespace {

// The rows of gk of the tokens [t0, t0 + T) of a packed row (B = 1).
ChannelGate slice(const Problem& p, const ChannelGate& gate, std::int64_t t0, std::int64_t T) {
  const std::int64_t row = p.H * p.DK;
  return {std::vector<double>(gate.gk.begin() + t0 * row, gate.gk.begin() + (t0 + T) * row)};
}

}  // namespace

void check_channel_gate(const Problem& p, const ChannelGate& gate) {
  const std::int64_t expected = p.B * p.T * p.H * p.DK;
  if (static_cast<std::int64_t>(gate.gk.size()) != expected)
    throw std::invalid_argument("per-channel gated reference: gk holds " + std::to_string(gate.gk.size()) +
                                " values, the problem needs " + std::to_string(expected));
  const std::int64_t bad = first_bad_log_decay(gate.gk);
  if (bad >= 0)
    throw std::invalid_argument("per-channel gated reference: gk[" + std::to_string(bad) + "] = " +
                                std::to_string(gate.gk[static_cast<std::size_t>(bad)]) +
                                " is not a finite log-decay <= 0");
}

Result gla_per_sequence(const Problem& p, const Inputs& in, const ChannelGate& gate, const GlaForm& form) {
  validate_shapes(p);
  check_channel_gate(p, gate);
  std::int64_t n = 0;  // per_sequence runs sequence 0, 1, ... in order
  return per_sequence(p, in, [&](const Problem& one, const Inputs& part) {
    return form(one, part, p.varlen() ? slice(p, gate, p.sequence_start(n++), one.T) : gate);
  });
}

ChannelGatedGradients gla_backward_per_sequence(const Problem& p, const Inputs& in, const ChannelGate& gate,
                                                const GradInputs& g, const GlaBackwardForm& form) {
  validate_shapes(p);
  check_channel_gate(p, gate);
  ChannelGatedGradients d;
  d.dgk.assign(gate.gk.size(), 0.0);
  std::int64_t n = 0;
  static_cast<Gradients&>(d) = backward_per_sequence(
      p, in, g, nullptr, [&](const Problem& one, const Inputs& part, const GradInputs& grad, const std::vector<double>*) {
        const std::int64_t t0 = p.varlen() ? p.sequence_start(n++) : 0;
        ChannelGatedGradients r = form(one, part, p.varlen() ? slice(p, gate, t0, one.T) : gate, grad);
        std::copy(r.dgk.begin(), r.dgk.end(), d.dgk.begin() + t0 * p.H * p.DK);
        return static_cast<Gradients>(r);
      });
  return d;
}

}  // namespace linattn::reference
