#include "parallel/gated_carry.hpp"

#include <cmath>
#include <stdexcept>

namespace linattn::parallel {

std::vector<double> total_log_decay(GateKind kind, const Tensor& gate, std::int64_t rows, std::int64_t tokens,
                                    std::int64_t H) {
  if (kind == GateKind::none) return {};
  const std::vector<double> g = gate.to_double();
  std::vector<double> total(static_cast<std::size_t>(rows * H), 0.0);
  if (kind == GateKind::per_head) {
    if (static_cast<std::int64_t>(g.size()) != H) throw std::invalid_argument("total_log_decay: g_gamma is not [H]");
    for (std::int64_t n = 0; n < rows; ++n)
      for (std::int64_t h = 0; h < H; ++h) total[n * H + h] = static_cast<double>(tokens) * g[h];
    return total;
  }
  if (static_cast<std::int64_t>(g.size()) != rows * tokens * H)
    throw std::invalid_argument("total_log_decay: g is not [rows, tokens, H]");
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t h = 0; h < H; ++h) total[n * H + h] += g[(n * tokens + t) * H + h];
  return total;
}

namespace {

template <class Acc>
void scale_blocks(Acc* x, std::size_t block, const std::vector<double>& log_decay) {
  for (std::size_t nh = 0; nh < log_decay.size(); ++nh) {
    const double factor = std::exp(log_decay[nh]);
    for (std::size_t i = 0; i < block; ++i) x[nh * block + i] = static_cast<Acc>(x[nh * block + i] * factor);
  }
}

}  // namespace

void decay_state(Tensor& state, const std::vector<double>& log_decay) {
  if (state.shape.size() != 4 || static_cast<std::int64_t>(log_decay.size()) != state.shape[0] * state.shape[1])
    throw std::invalid_argument("decay_state: the state is not [rows, H, DK, DV] of the decays' rows and heads");
  const std::size_t block = static_cast<std::size_t>(state.shape[2] * state.shape[3]);
  if (state.dtype == DType::f64) scale_blocks(state.data<double>(), block, log_decay);
  else if (state.dtype == DType::f32) scale_blocks(state.data<float>(), block, log_decay);
  else throw std::invalid_argument("decay_state: a state in the accumulation type (fp32 or fp64)");
}

}  // namespace linattn::parallel
