#include "pipeline/backward_window_outputs.hpp"

#include <vector>

namespace linattn {
namespace {

constexpr std::int64_t kAlignment = 256;  // each tensor starts where the device's copies run at full speed

// Lays the targets out from `slot` (null: only counts); returns the bytes.
std::int64_t lay_out(const Problem& wp, DType output, DType accumulation, GateKind gate, unsigned char* slot,
                     BackwardTargets* t) {
  std::int64_t used = 0;
  auto place = [&](TensorSpan& span, DType dtype, std::vector<std::int64_t> shape) {
    span = TensorSpan(dtype, std::move(shape), slot ? slot + used : nullptr);
    used += (static_cast<std::int64_t>(span.size_bytes()) + kAlignment - 1) / kAlignment * kAlignment;
  };
  BackwardTargets local;
  BackwardTargets& out = t ? *t : local;
  place(out.dq, output, wp.qk_shape());
  place(out.dk, output, wp.qk_shape());
  place(out.dv, output, wp.v_shape());
  if (gate != GateKind::none)
    place(out.dg, accumulation, channel_gate(gate) ? wp.qk_shape() : std::vector<std::int64_t>{wp.B, wp.T, wp.H});
  return used;
}

}  // namespace

std::int64_t backward_window_output_bytes(const Problem& wp, DType output, DType accumulation, GateKind gate) {
  return lay_out(wp, output, accumulation, gate, nullptr, nullptr);
}

BackwardTargets backward_window_targets(const Problem& wp, DType output, DType accumulation, GateKind gate,
                                        unsigned char* slot) {
  BackwardTargets t;
  lay_out(wp, output, accumulation, gate, slot, &t);
  return t;
}

}  // namespace linattn
