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
  if (kind == GateKind::per_channel) {  // [rows, H, DK]: each key channel's own total
    const std::int64_t per_token = rows * tokens * H > 0 ? static_cast<std::int64_t>(g.size()) / (rows * tokens * H) : 0;
    if (per_token * rows * tokens * H != static_cast<std::int64_t>(g.size()) || per_token == 0)
      throw std::invalid_argument("total_log_decay: gk is not [rows, tokens, H, DK]");
    std::vector<double> channels(static_cast<std::size_t>(rows * H * per_token), 0.0);
    for (std::int64_t n = 0; n < rows; ++n)
      for (std::int64_t t = 0; t < tokens; ++t)
        for (std::int64_t e = 0; e < H * per_token; ++e) channels[n * H * per_token + e] += g[(n * tokens + t) * H * per_token + e];
    return channels;
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
  // One decay per (row, head) scales its DK x DV block; one per (row, head, key channel) its row of DV.
  const std::int64_t n = static_cast<std::int64_t>(log_decay.size());
  if (state.shape.size() != 4 || (n != state.shape[0] * state.shape[1] && n != state.shape[0] * state.shape[1] * state.shape[2]))
    throw std::invalid_argument("decay_state: the state is not [rows, H, DK, DV] of the decays' rows, heads (and channels)");
  const std::size_t block =
      static_cast<std::size_t>(n == state.shape[0] * state.shape[1] ? state.shape[2] * state.shape[3] : state.shape[3]);
  if (state.dtype == DType::f64) scale_blocks(state.data<double>(), block, log_decay);
  else if (state.dtype == DType::f32) scale_blocks(state.data<float>(), block, log_decay);
  else throw std::invalid_argument("decay_state: a state in the accumulation type (fp32 or fp64)");
}

}  // namespace linattn::parallel
