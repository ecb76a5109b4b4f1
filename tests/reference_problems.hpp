// The problems and comparisons the fp64 reference tests share
// (test_backward_references, test_gated_references,
// test_channel_gated_references): a plain batch and a packed one that cover
// ragged chunks, DK != DV and sequences around one chunk, and relative-L2
// agreement of every output or gradient.
#pragma once

#include "core/error_metrics.hpp"
#include "core/problem.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "reference/backward.hpp"
#include "reference/references.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace linattn::testing {

inline std::string describe(const Problem& p) {
  return "B=" + std::to_string(p.B) + " T=" + std::to_string(p.T) + " H=" + std::to_string(p.H) +
         " C=" + std::to_string(p.chunk) + " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV) +
         " sequences=" + std::to_string(p.num_sequences());
}

// Sequences 1, 63, 64, 65 and 300 tokens long packed into one row: around one
// chunk of 64, and several chunks with a ragged last one.
inline Problem packed_problem() {
  Problem p;
  p.H = 2; p.DK = 16; p.DV = 24; p.chunk = 64; p.scale = 0.29;
  p.cu_seqlens = {0, 1, 64, 128, 193, 493};
  p.T = p.cu_seqlens.back();
  return p;
}

inline Problem plain_batch() {
  Problem p;  // T % C != 0 for every chunk tested, DK != DV, B and H > 1, scale != 1
  p.B = 2; p.T = 200; p.H = 3; p.DK = 24; p.DV = 40; p.chunk = 64; p.scale = 0.37;
  return p;
}

inline void expect_agree(const reference::Result& x, const reference::Result& ref, double tol, const std::string& what) {
  EXPECT_LE(relative_l2(x.o, ref.o), tol) << what << ": o";
  EXPECT_LE(relative_l2(x.h, ref.h), tol) << what << ": h";
  EXPECT_LE(relative_l2(x.final_state, ref.final_state), tol) << what << ": final_state";
}

inline void expect_agree(const reference::Gradients& x, const reference::Gradients& ref, double tol,
                         const std::string& what) {
  EXPECT_LE(relative_l2(x.dq, ref.dq), tol) << what << ": dq";
  EXPECT_LE(relative_l2(x.dk, ref.dk), tol) << what << ": dk";
  EXPECT_LE(relative_l2(x.dv, ref.dv), tol) << what << ": dv";
  EXPECT_LE(relative_l2(x.dh0, ref.dh0), tol) << what << ": dh0";
}

// One problem's fp64 inputs (with an initial state), a gate of type G and the
// output gradients, seeded.
template <class G>
struct GatedCase {
  Problem p;
  std::vector<double> q, k, v, s0, d_o, dht;
  G gate;

  GatedCase(const Problem& problem, G g, std::uint64_t seed) : p(problem), gate(std::move(g)) {
    const ProblemInputs in = random_inputs(p, DType::f64, seed, true);
    q = in.q.to_double();
    k = in.k.to_double();
    v = in.v.to_double();
    s0 = in.initial_state.to_double();
    d_o = uniform_values(static_cast<std::size_t>(p.B * p.T * p.H * p.DV), -1, 1, derive_seed(seed, 1));
    dht = uniform_values(static_cast<std::size_t>(p.num_sequences() * p.H * p.DK * p.DV), -1, 1, derive_seed(seed, 2));
  }
  reference::Inputs inputs() const { return {q, k, v, &s0}; }
  reference::GradInputs grads() const { return {d_o, &dht}; }
};

// L = <o, do> + <final_state, dht> of a forward result, summed in long double.
inline double loss_of(const reference::Result& r, const std::vector<double>& d_o, const std::vector<double>& dht) {
  long double L = 0;
  for (std::size_t i = 0; i < r.o.size(); ++i) L += static_cast<long double>(r.o[i]) * d_o[i];
  for (std::size_t i = 0; i < r.final_state.size(); ++i) L += static_cast<long double>(r.final_state[i]) * dht[i];
  return static_cast<double>(L);
}

// Central differences of loss(c) in `count` seeded random coordinates of x (a
// member of c) against grad: |fd - g| <= tol * max(|g|, typical), typical =
// RMS of grad. With log_decays, coordinates within `step` of 0 are passed
// over (a log-decay may not turn positive).
template <class Case, class Loss, class Member>
void expect_finite_differences(Case c, const Loss& loss, Member x, const std::vector<double>& grad, const char* name,
                               double step, std::uint64_t seed, double tol = 1e-7, int count = 12,
                               bool log_decays = false) {
  std::vector<double>& values = x(c);
  ASSERT_EQ(values.size(), grad.size()) << name;
  double typical = 0;
  for (double e : grad) typical += e * e;
  typical = std::sqrt(typical / static_cast<double>(grad.size()));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, grad.size() - 1);
  double worst = 0;
  for (int n = 0; n < count; ++n) {
    const std::size_t i = pick(rng);
    const double x0 = values[i];
    if (log_decays && x0 > -step) continue;
    values[i] = x0 + step;
    const double up = loss(c);
    values[i] = x0 - step;
    const double down = loss(c);
    values[i] = x0;
    const double fd = (up - down) / (2 * step), error = std::abs(fd - grad[i]) / std::max(std::abs(grad[i]), typical);
    worst = std::max(worst, error);
    EXPECT_LE(error, tol) << name << "[" << i << "]: finite difference " << fd << ", gradient " << grad[i];
  }
  std::ostringstream worst_text;
  worst_text << std::scientific << std::setprecision(2) << worst;
  ::testing::Test::RecordProperty(std::string("worst_relative_error_") + name, worst_text.str());
}

}  // namespace linattn::testing
