// The decays the gated tests run (test_gated_references.cpp,
// test_gated_kernels.cpp): seeded values that are never zero, RetNet's
// per-head gammas, and per-token decays strong, weak and moderate.
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

}  // namespace linattn::testing
