// The decay gates of levels 2 and 3 (README.md, "Gated levels"): log-decays
// g <= 0 per head (RetNet: g_gamma [H]) or per token and head (Mamba-2:
// g [B, T, H]), or per token, head and key channel (GLA: gk [B, T, H, DK]);
// level 1 is the gate `none`. Its own header so that the
// kernels, the I/O and the references name the kinds alike.
#pragma once

#include "core/problem.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

enum class GateKind { none, per_head, per_token, per_channel };

// Whether the gate decays each key channel on its own (GLA's gk) rather than
// the whole state by one number.
inline bool channel_gate(GateKind k) { return k == GateKind::per_channel; }

// The gate's dataset name: "g_gamma", "g", "gk" ("none" for none).
inline const char* gate_dataset_name(GateKind k) {
  return k == GateKind::per_head ? "g_gamma" : k == GateKind::per_token ? "g" : k == GateKind::per_channel ? "gk" : "none";
}

// Its shape for problem p: [H], [B, T, H] or [B, T, H, DK] (empty for none).
inline std::vector<std::int64_t> gate_shape(const Problem& p, GateKind k) {
  if (k == GateKind::per_head) return {p.H};
  if (k == GateKind::per_token) return {p.B, p.T, p.H};
  if (k == GateKind::per_channel) return {p.B, p.T, p.H, p.DK};
  return {};
}

// The gate's gradient (linattn backward, docs/HDF5.md): "dg_gamma", "dg" or
// "dgk", of the gate's own shape (gate_shape).
inline std::string gate_gradient_name(GateKind k) { return std::string("d") + gate_dataset_name(k); }

// "g_gamma" -> per_head, "g" -> per_token, "gk" -> per_channel, "none" -> none; false for anything else.
inline bool parse_gate_dataset_name(const std::string& name, GateKind& kind) {
  if (name == "g_gamma") kind = GateKind::per_head;
  else if (name == "g") kind = GateKind::per_token;
  else if (name == "gk") kind = GateKind::per_channel;
  else if (name == "none") kind = GateKind::none;
  else return false;
  return true;
}

// RetNet's per-head decays gamma_h = 1 - 2^(-5-h), as log-decays [H].
inline std::vector<double> retnet_log_gammas(std::int64_t H) {
  std::vector<double> g(static_cast<std::size_t>(H));
  for (std::int64_t h = 0; h < H; ++h) g[static_cast<std::size_t>(h)] = std::log1p(-std::exp2(-5.0 - static_cast<double>(h)));
  return g;
}

// The lowest log-decay accepted. exp of it is 0 in every float type, so a
// lower value decays no more; and it keeps a chunk's cumulative sum of 128
// log-decays (-1.28e38, 1.85e38 in the log2 units of the tensor-core kernels)
// inside fp32's range, which is the one bound of the chunked forms
// (docs/NUMERICS.md, "Per-channel decays").
constexpr double kLowestLogDecay = -1e36;

// A log-decay the kernels take: in [kLowestLogDecay, 0] (false for NaN and Inf).
template <class T>
bool is_log_decay(T g) {
  const double x = static_cast<double>(g);
  return x <= 0.0 && x >= kLowestLogDecay;
}

// The index of the first value that is not a log-decay (positive, NaN, Inf,
// below kLowestLogDecay), or -1: the one check every reader of a gate makes.
template <class T>
std::int64_t first_bad_log_decay(const T* g, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!is_log_decay(g[i])) return i;
  return -1;
}
inline std::int64_t first_bad_log_decay(const std::vector<double>& g) {
  return first_bad_log_decay(g.data(), static_cast<std::int64_t>(g.size()));
}

}  // namespace linattn
