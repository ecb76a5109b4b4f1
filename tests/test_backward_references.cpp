// The fp64 backward references (reference/backward.hpp) agree with each other
// (token by token, chunked, packed per sequence, with the forward's stored
// snapshots) and with central finite differences of the fp64 forward. Every
// test compares against an independent form (recurrent or finite differences),
// so a structural mistake in the chunked scan (the diagonal left out of tril,
// dS updated before the chunk) fails each of them.
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "reference/backward.hpp"
#include "reference/references.hpp"
#include "reference_problems.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

namespace linattn {
namespace {

using testing::describe;
using testing::expect_agree;
using testing::packed_problem;

// Uniform in [-1, 1), redrawn when exactly zero (a zero would hide a term).
std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> x(n);
  for (double& e : x) do e = uniform(rng); while (e == 0.0);
  return x;
}

// One problem's fp64 inputs and output gradients, seeded.
struct Case {
  Problem p;
  std::vector<double> q, k, v, s0, d_o, dht;
  bool has_s0 = false, has_dht = false;

  Case(const Problem& problem, std::uint64_t seed, bool with_s0, bool with_dht)
      : p(problem), has_s0(with_s0), has_dht(with_dht) {
    const ProblemInputs in = random_inputs(p, DType::f64, seed, with_s0);
    q = in.q.to_double();
    k = in.k.to_double();
    v = in.v.to_double();
    s0 = in.initial_state.to_double();
    d_o = random_values(static_cast<std::size_t>(p.B * p.T * p.H * p.DV), derive_seed(seed, 1));
    if (with_dht) dht = random_values(static_cast<std::size_t>(p.num_sequences() * p.H * p.DK * p.DV), derive_seed(seed, 2));
  }
  reference::Inputs inputs() const { return {q, k, v, has_s0 ? &s0 : nullptr}; }
  reference::GradInputs grads() const { return {d_o, has_dht ? &dht : nullptr}; }
};

// Largest |x - y| (infinity when the sizes differ): 0 means bitwise equal values.
double max_difference(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

TEST(BackwardReference, RecurrentAndChunkedAgree) {
  Problem p;  // T % C != 0 for every chunk below, DK != DV, scale != 1
  p.B = 2; p.T = 200; p.H = 2; p.DK = 24; p.DV = 40; p.scale = 0.37;
  for (std::int64_t chunk : {16, 32, 64})
    for (bool with_s0 : {false, true})
      for (bool with_dht : {false, true}) {
        p.chunk = chunk;
        SCOPED_TRACE(describe(p) + (with_s0 ? " initial state" : "") + (with_dht ? " dht" : ""));
        const Case c(p, 17, with_s0, with_dht);
        const auto recurrent = reference::backward_recurrent(p, c.inputs(), c.grads());
        expect_agree(reference::backward_chunked(p, c.inputs(), c.grads()), recurrent, 1e-12, "chunked vs recurrent");
        expect_agree(reference::backward(p, c.inputs(), c.grads()), recurrent, 1e-12, "backward vs recurrent");
      }
}

// Each sequence of a packed batch, run as its own plain problem, gives exactly
// the packed driver's gradients (the driver only slices and copies), and the
// packed forms agree with each other.
TEST(BackwardReference, PackedMatchesPlainPerSequence) {
  const Problem p = packed_problem();
  const Case c(p, 23, true, true);
  const auto chunked = reference::backward_chunked(p, c.inputs(), c.grads());
  const auto recurrent = reference::backward_recurrent(p, c.inputs(), c.grads());
  expect_agree(chunked, recurrent, 1e-12, "packed chunked vs packed recurrent");
  expect_agree(reference::backward(p, c.inputs(), c.grads()), recurrent, 1e-12, "packed backward vs recurrent");
  const std::int64_t H = p.H, DK = p.DK, DV = p.DV, state = H * DK * DV;
  for (std::int64_t n = 0; n < p.num_sequences(); ++n) {
    SCOPED_TRACE("sequence " + std::to_string(n) + " of " + std::to_string(p.sequence_length(n)) + " tokens");
    const Problem one = plain_problem(p, 1, p.sequence_length(n));
    const std::int64_t t0 = p.sequence_start(n), t1 = t0 + one.T;
    auto rows = [](const std::vector<double>& x, std::int64_t first, std::int64_t end, std::int64_t row) {
      return std::vector<double>(x.begin() + first * row, x.begin() + end * row);
    };
    const std::vector<double> q = rows(c.q, t0, t1, H * DK), k = rows(c.k, t0, t1, H * DK), v = rows(c.v, t0, t1, H * DV),
                              d_o = rows(c.d_o, t0, t1, H * DV), s0 = rows(c.s0, n, n + 1, state),
                              dht = rows(c.dht, n, n + 1, state);
    const reference::Inputs in{q, k, v, &s0};
    const reference::GradInputs g{d_o, &dht};
    auto expect_slice = [&](const char* name, const reference::Gradients& packed, const reference::Gradients& plain) {
      EXPECT_EQ(0.0, max_difference(rows(packed.dq, t0, t1, H * DK), plain.dq)) << name << ": dq";
      EXPECT_EQ(0.0, max_difference(rows(packed.dk, t0, t1, H * DK), plain.dk)) << name << ": dk";
      EXPECT_EQ(0.0, max_difference(rows(packed.dv, t0, t1, H * DV), plain.dv)) << name << ": dv";
      EXPECT_EQ(0.0, max_difference(rows(packed.dh0, n, n + 1, state), plain.dh0)) << name << ": dh0";
    };
    expect_slice("chunked", chunked, reference::backward_chunked(one, in, g));
    expect_slice("recurrent", recurrent, reference::backward_recurrent(one, in, g));
  }
}

// The forward's snapshots, read instead of recomputed, give the same
// gradients; and they are read (wrong snapshots change dq).
TEST(BackwardReference, StoredSnapshotsMatchRecomputed) {
  Problem plain;
  plain.B = 2; plain.T = 200; plain.H = 2; plain.DK = 24; plain.DV = 40; plain.chunk = 64; plain.scale = 0.37;
  for (const Problem& p : {plain, packed_problem()}) {
    SCOPED_TRACE(describe(p));
    const Case c(p, 29, true, true);
    const std::vector<double> h = reference::forward(p, c.inputs(), false).h;
    const auto stored = reference::backward_chunked(p, c.inputs(), c.grads(), &h);
    expect_agree(stored, reference::backward_chunked(p, c.inputs(), c.grads()), 1e-14, "stored h vs recomputed");
    expect_agree(stored, reference::backward_recurrent(p, c.inputs(), c.grads()), 1e-12, "stored h vs recurrent");
    const std::vector<double> zeros(h.size(), 0.0);
    EXPECT_GT(relative_l2(reference::backward_chunked(p, c.inputs(), c.grads(), &zeros).dq, stored.dq), 0.1)
        << "zero snapshots went unnoticed: h is not read";
  }
}

TEST(BackwardReference, WrongSizesThrow) {
  const Problem p = packed_problem();
  const Case c(p, 31, true, true);
  const std::vector<double> short_do(c.d_o.begin(), c.d_o.end() - 1), one_row(c.dht.begin(), c.dht.begin() + 1);
  EXPECT_THROW(reference::backward(p, c.inputs(), {short_do, nullptr}), std::invalid_argument);
  EXPECT_THROW(reference::backward(p, c.inputs(), {c.d_o, &one_row}), std::invalid_argument);
  EXPECT_THROW(reference::backward_chunked(p, c.inputs(), c.grads(), &one_row), std::invalid_argument);
}

// L(q, k, v, S0) = sum_t do_t . o_t + <dht, final_state> through the fp64
// forward (unnormalized). L is affine in any one coordinate, so a central
// difference has no truncation error, only the rounding of L over 2 * step:
// the sums are kept in long double to keep that well below the tolerance.
double loss(const Case& c) {
  const reference::Result r = reference::forward(c.p, c.inputs(), false);
  long double L = 0;
  for (std::size_t i = 0; i < r.o.size(); ++i) L += static_cast<long double>(r.o[i]) * c.d_o[i];
  if (c.has_dht)
    for (std::size_t i = 0; i < r.final_state.size(); ++i) L += static_cast<long double>(r.final_state[i]) * c.dht[i];
  return static_cast<double>(L);
}

// Central differences of loss in seeded random coordinates of c.*x against
// grad (tests/reference_problems.hpp): step 1e-6 (the inputs are of size 1),
// |fd - g| <= 1e-6 * max(|g|, typical), typical = RMS of grad.
void expect_finite_differences(const Case& c, std::vector<double> Case::*x, const std::vector<double>& grad,
                               const char* name, std::uint64_t seed) {
  testing::expect_finite_differences(c, loss, [x](Case& e) -> std::vector<double>& { return e.*x; }, grad, name, 1e-6,
                                     seed, 1e-6);
}

void expect_gradients_match_finite_differences(const Case& c) {
  const reference::Gradients g = reference::backward(c.p, c.inputs(), c.grads());
  expect_finite_differences(c, &Case::q, g.dq, "dq", 101);
  expect_finite_differences(c, &Case::k, g.dk, "dk", 102);
  expect_finite_differences(c, &Case::v, g.dv, "dv", 103);
  expect_finite_differences(c, &Case::s0, g.dh0, "dh0", 104);
}

TEST(BackwardReference, FiniteDifferencesPlainBatch) {
  Problem p;  // ragged last chunk, DK != DV
  p.B = 2; p.T = 100; p.H = 2; p.DK = 8; p.DV = 12; p.chunk = 16; p.scale = 0.35;
  expect_gradients_match_finite_differences(Case(p, 41, true, true));
}

TEST(BackwardReference, FiniteDifferencesPackedBatch) {
  Problem p = packed_problem();
  p.DK = 8; p.DV = 12;
  expect_gradients_match_finite_differences(Case(p, 43, true, true));
}

}  // namespace
}  // namespace linattn
