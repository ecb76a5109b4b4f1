// The decays the gated tests run (test_gated_references.cpp,
// test_gated_kernels.cpp, the channel-gated tests): seeded values that are
// never zero, RetNet's per-head gammas, per-token decays strong, weak and
// moderate, and per-channel ones (GLA's gk) strong, weak, moderate and mixed.
#pragma once

#include "core/gate.hpp"
#include "core/problem.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace linattn::testing {

// The problems the gated tests run (scale 0.3, chunk C); packed: B = 1, the
// sequences of `lengths` along T.
inline Problem problem(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t DK, std::int64_t DV, std::int64_t C) {
  Problem p;
  p.B = B; p.T = T; p.H = H; p.DK = DK; p.DV = DV; p.chunk = C; p.scale = 0.3;
  return p;
}

inline Problem packed(const std::vector<std::int64_t>& lengths, std::int64_t H, std::int64_t DK, std::int64_t DV,
                      std::int64_t C) {
  Problem p = problem(1, 0, H, DK, DV, C);
  p.cu_seqlens = {0};
  for (std::int64_t n : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + n);
  p.T = p.cu_seqlens.back();
  return p;
}

// Uniform in [lo, hi), redrawn when exactly zero (a zero would hide a term).
inline std::vector<double> uniform_values(std::size_t n, double lo, double hi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<double> x(n);
  for (double& e : x) do e = uniform(rng); while (e == 0.0);
  return x;
}

// One g per token and head [B, T, H], uniform in [lo, hi] (both <= 0).
inline std::vector<double> per_token_log_decays(const Problem& p, double lo, double hi, std::uint64_t seed) {
  return uniform_values(static_cast<std::size_t>(p.B * p.T * p.H), lo, hi, seed);
}

struct GateCase {
  std::string name;
  GateKind kind;
  std::vector<double> values;  // g_gamma [H] or g [B, T, H]
};

// The decays every agreement test runs: RetNet's gammas, strong per-token
// decay (the state forgets within a few tokens), weak (close to level 1), and
// one in between.
inline std::vector<GateCase> gate_cases(const Problem& p, std::uint64_t seed) {
  return {{"RetNet gammas", GateKind::per_head, retnet_log_gammas(p.H)},
          {"strong g in [-5, -1]", GateKind::per_token, per_token_log_decays(p, -5.0, -1.0, seed)},
          {"weak g near -1e-4", GateKind::per_token, per_token_log_decays(p, -1.5e-4, -0.5e-4, seed + 1)},
          {"moderate g in [-0.5, -0.01]", GateKind::per_token, per_token_log_decays(p, -0.5, -0.01, seed + 2)}};
}

// GLA's per-key-channel decays gk [B, T, H, DK].
inline std::size_t channel_gate_size(const Problem& p) { return static_cast<std::size_t>(p.B * p.T * p.H * p.DK); }

struct ChannelCase {
  std::string name;
  std::vector<double> gk;  // [B, T, H, DK]
};

// Mixed: the even channels keep their state (gk = 0), the odd ones decay strongly.
inline std::vector<double> mixed_channel_decays(const Problem& p, std::uint64_t seed) {
  std::vector<double> g = uniform_values(channel_gate_size(p), -3.0, -0.01, seed);
  for (std::size_t e = 0; e < g.size(); e += 2) g[e] = 0.0;
  return g;
}

// At the lowest log-decay accepted (kLowestLogDecay, core/gate.hpp): channel
// d % 3 == 2 at exactly the bound on every token (its chunk's cumulative sum
// reaches C * kLowestLogDecay, the strongest decay over a chunk a run can
// meet), d % 3 == 1 gentle (-0.01), d % 3 == 0 alternating from one token to
// the next between [bound, bound / 2) and -0.01 (a gentle decay after a huge
// one: docs/NUMERICS.md, "Per-channel decays").
inline std::vector<double> decays_at_the_lowest_bound(const Problem& p, std::uint64_t seed) {
  std::vector<double> g = uniform_values(channel_gate_size(p), kLowestLogDecay, 0.5 * kLowestLogDecay, seed);
  const std::size_t dk = static_cast<std::size_t>(p.DK), row = dk * static_cast<std::size_t>(p.H);
  for (std::size_t e = 0; e < g.size(); ++e) {
    const std::size_t d = e % dk, token = e / row;
    if (d % 3 == 2) g[e] = kLowestLogDecay;
    else if (d % 3 == 1 || token % 2 == 1) g[e] = -0.01;
  }
  return g;
}

inline std::vector<ChannelCase> channel_cases(const Problem& p, std::uint64_t seed) {
  const std::size_t n = channel_gate_size(p);
  return {{"weak gk near -1e-4", uniform_values(n, -1.5e-4, -0.5e-4, seed)},
          {"strong gk in [-5, -1]", uniform_values(n, -5.0, -1.0, seed + 1)},
          {"moderate gk in [-0.3, -0.001]", uniform_values(n, -0.3, -0.001, seed + 2)},
          {"mixed per channel", mixed_channel_decays(p, seed + 3)}};
}

}  // namespace linattn::testing
