// The gated fp64 references (reference/gated.hpp, levels 2 and 3): level 1 is
// bitwise today's references; the token recurrence and the chunked form agree
// for per-head (RetNet) and per-token (Mamba-2) decays, strong and weak, plain
// and packed; the wrong update order is caught; and the backward (dg and
// dg_gamma included) matches central differences of the fp64 forward.
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "reference/gated.hpp"

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

using reference::Gate;
using reference::GateKind;

using testing::uniform_values;

Gate retnet_gammas(std::int64_t H) { return Gate::per_head(retnet_log_gammas(H)); }

Gate per_token(const Problem& p, double lo, double hi, std::uint64_t seed) {
  return Gate::per_token(testing::per_token_log_decays(p, lo, hi, seed));
}

struct NamedGate {
  std::string name;
  Gate gate;
};

// testing::gate_cases as reference gates.
std::vector<NamedGate> gates(const Problem& p, std::uint64_t seed) {
  std::vector<NamedGate> out;
  for (testing::GateCase& c : testing::gate_cases(p, seed))
    out.push_back({c.name, c.kind == GateKind::per_head ? Gate::per_head(std::move(c.values))
                                                        : Gate::per_token(std::move(c.values))});
  return out;
}

// One problem's fp64 inputs, gate and output gradients, seeded.
struct Case {
  Problem p;
  std::vector<double> q, k, v, s0, d_o, dht;
  Gate gate;

  Case(const Problem& problem, Gate g, std::uint64_t seed) : p(problem), gate(std::move(g)) {
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

std::string describe(const Problem& p) {
  return "B=" + std::to_string(p.B) + " T=" + std::to_string(p.T) + " H=" + std::to_string(p.H) +
         " C=" + std::to_string(p.chunk) + " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV) +
         " sequences=" + std::to_string(p.num_sequences());
}

// Sequences 1, 63, 64, 65 and 300 tokens long packed into one row.
Problem packed_problem() {
  Problem p;
  p.H = 2; p.DK = 16; p.DV = 24; p.chunk = 64; p.scale = 0.29;
  p.cu_seqlens = {0, 1, 64, 128, 193, 493};
  p.T = p.cu_seqlens.back();
  return p;
}

Problem plain_batch() {
  Problem p;  // T % C != 0 for every chunk tested, DK != DV, B and H > 1, scale != 1
  p.B = 2; p.T = 200; p.H = 3; p.DK = 24; p.DV = 40; p.chunk = 64; p.scale = 0.37;
  return p;
}

void expect_agree(const reference::Result& x, const reference::Result& ref, double tol, const std::string& what) {
  EXPECT_LE(relative_l2(x.o, ref.o), tol) << what << ": o";
  EXPECT_LE(relative_l2(x.h, ref.h), tol) << what << ": h";
  EXPECT_LE(relative_l2(x.final_state, ref.final_state), tol) << what << ": final_state";
}

void expect_agree(const reference::GatedGradients& x, const reference::GatedGradients& ref, double tol,
                  const std::string& what) {
  EXPECT_LE(relative_l2(x.dq, ref.dq), tol) << what << ": dq";
  EXPECT_LE(relative_l2(x.dk, ref.dk), tol) << what << ": dk";
  EXPECT_LE(relative_l2(x.dv, ref.dv), tol) << what << ": dv";
  EXPECT_LE(relative_l2(x.dh0, ref.dh0), tol) << what << ": dh0";
  EXPECT_LE(relative_l2(x.dg, ref.dg), tol) << what << ": dg";
  // dg_gamma sums dg over many tokens of both signs (cancellation): its error
  // is measured against the sums of |dg|, the size of what was added.
  std::vector<double> magnitude(ref.dg_gamma.size(), 0.0);
  for (std::size_t i = 0; i < ref.dg.size(); ++i) magnitude[i % magnitude.size()] += std::abs(ref.dg[i]);
  double error = 0, size = 0;
  for (std::size_t h = 0; h < magnitude.size(); ++h) {
    error += (x.dg_gamma[h] - ref.dg_gamma[h]) * (x.dg_gamma[h] - ref.dg_gamma[h]);
    size += magnitude[h] * magnitude[h];
  }
  EXPECT_LE(std::sqrt(error / size), tol) << what << ": dg_gamma, against the sums of |dg|";
  EXPECT_EQ(x.dg_gamma.size(), ref.dg_gamma.size()) << what << ": dg_gamma";
}

// Level 1 (no gate) gives exactly the bits of the level-1 references, forward
// and backward, plain and packed, with and without the forward's snapshots.
TEST(GatedReference, LevelOneIsBitwiseTheUngatedReferences) {
  Problem plain = plain_batch();
  plain.chunk = 16;
  for (const Problem& p : {plain, packed_problem()}) {
    SCOPED_TRACE(describe(p));
    const Case c(p, Gate::none(), 5);
    const reference::Inputs in = c.inputs();
    const auto recurrent = reference::per_sequence(p, in, reference::recurrent);
    const auto chunked = reference::per_sequence(
        p, in, [](const Problem& one, const reference::Inputs& part) { return reference::chunked(one, part); });
    for (const auto& [name, gated, plain_form] :
         {std::tuple{"recurrent", reference::gated_recurrent(p, in, c.gate), recurrent},
          std::tuple{"chunked", reference::gated_chunked(p, in, c.gate), chunked}}) {
      EXPECT_TRUE(gated.o == plain_form.o) << name << ": o";
      EXPECT_TRUE(gated.h == plain_form.h) << name << ": h";
      EXPECT_TRUE(gated.final_state == plain_form.final_state) << name << ": final_state";
    }
    auto expect_same = [](const char* name, const reference::Gradients& x, const reference::Gradients& y) {
      EXPECT_TRUE(x.dq == y.dq) << name << ": dq";
      EXPECT_TRUE(x.dk == y.dk) << name << ": dk";
      EXPECT_TRUE(x.dv == y.dv) << name << ": dv";
      EXPECT_TRUE(x.dh0 == y.dh0) << name << ": dh0";
    };
    expect_same("backward recurrent", reference::gated_backward_recurrent(p, in, c.gate, c.grads()),
                reference::backward_recurrent(p, in, c.grads()));
    expect_same("backward chunked", reference::gated_backward_chunked(p, in, c.gate, c.grads()),
                reference::backward_chunked(p, in, c.grads()));
    expect_same("backward chunked, stored h", reference::gated_backward_chunked(p, in, c.gate, c.grads(), &chunked.h),
                reference::backward_chunked(p, in, c.grads(), &chunked.h));
  }
}

TEST(GatedReference, RecurrentAndChunkedAgree) {
  Problem plain = plain_batch();
  for (std::int64_t chunk : {16, 32, 64}) {
    plain.chunk = chunk;
    Problem packed = packed_problem();
    packed.chunk = chunk;
    for (const Problem& p : {plain, packed})
      for (const NamedGate& g : gates(p, 40 + chunk)) {
        SCOPED_TRACE(describe(p) + ", " + g.name);
        const Case c(p, g.gate, 13);
        const auto recurrent = reference::gated_recurrent(p, c.inputs(), c.gate);
        const auto chunked = reference::gated_chunked(p, c.inputs(), c.gate);
        expect_agree(chunked, recurrent, 1e-13, "forward chunked vs recurrent");
        expect_agree(reference::gated_forward(p, c.inputs(), c.gate), recurrent, 1e-13, "gated_forward vs recurrent");
        const auto back = reference::gated_backward_recurrent(p, c.inputs(), c.gate, c.grads());
        expect_agree(reference::gated_backward_chunked(p, c.inputs(), c.gate, c.grads()), back, 1e-12,
                     "backward chunked vs recurrent");
        expect_agree(reference::gated_backward_chunked(p, c.inputs(), c.gate, c.grads(), &chunked.h), back, 1e-12,
                     "backward chunked with stored h vs recurrent");
      }
  }
}

// The decay is really applied: a strong one changes o completely, a weak one
// (g near -1e-4) only a little; and h, when given, is read.
TEST(GatedReference, DecayStrengthMatters) {
  const Problem p = packed_problem();
  const Case c(p, Gate::none(), 17);
  const auto level1 = reference::gated_forward(p, c.inputs(), Gate::none());
  const double strong = relative_l2(reference::gated_forward(p, c.inputs(), per_token(p, -5, -1, 3)).o, level1.o);
  const double weak = relative_l2(reference::gated_forward(p, c.inputs(), per_token(p, -1.5e-4, -0.5e-4, 4)).o, level1.o);
  EXPECT_GT(strong, 0.5);
  EXPECT_GT(weak, 1e-5);
  EXPECT_LT(weak, 0.05);
  const Case gated(p, retnet_gammas(p.H), 19);
  const auto fwd = reference::gated_forward(p, gated.inputs(), gated.gate);
  const std::vector<double> zeros(fwd.h.size(), 0.0);
  EXPECT_GT(relative_l2(reference::gated_backward_chunked(p, gated.inputs(), gated.gate, gated.grads(), &zeros).dq,
                        reference::gated_backward(p, gated.inputs(), gated.gate, gated.grads()).dq),
            0.1)
      << "zero snapshots went unnoticed: h is not read";
}

// The state updated before the output (the inter-chunk term reading S_{c+1})
// is far from the recurrence.
TEST(GatedReference, WrongUpdateOrderIsDetected) {
  Problem plain = plain_batch();
  plain.chunk = 16;
  for (const Problem& p : {plain, packed_problem()})
    for (const NamedGate& g : gates(p, 60)) {
      if (g.name.rfind("strong", 0) == 0) continue;  // forgets within a chunk: both orders see almost no state
      SCOPED_TRACE(describe(p) + ", " + g.name);
      const Case c(p, g.gate, 23);
      const auto recurrent = reference::gated_recurrent(p, c.inputs(), c.gate);
      const double early =
          relative_l2(reference::gated_chunked(p, c.inputs(), c.gate, reference::Ordering::inclusive_prefix).o,
                      recurrent.o);
      EXPECT_GT(early, 0.1) << "the update before the output went unnoticed";
    }
}

TEST(GatedReference, BadGatesThrow) {
  const Problem p = packed_problem();
  const Case c(p, Gate::none(), 29);
  Gate positive = per_token(p, -1, -0.1, 5);
  positive.log_decay[7] = 0.25;
  Gate nan = retnet_gammas(p.H);
  nan.log_decay[1] = std::nan("");
  Gate short_gate = Gate::per_head({-0.1});
  for (const Gate* g : {&positive, &nan, &short_gate}) {
    EXPECT_THROW(reference::gated_forward(p, c.inputs(), *g), std::invalid_argument);
    EXPECT_THROW(reference::gated_backward(p, c.inputs(), *g, c.grads()), std::invalid_argument);
  }
}

// L = <o, do> + <final_state, dht> through the fp64 gated forward, summed in
// long double. L is affine in each coordinate of q, k, v and S0 (a central
// difference is exact up to rounding) but not in g (exp): a per-head g scales
// terms by exp(n g) with n up to 300, so the truncation error, about
// (n step)^2 / 6 relative, needs step = 1e-6; the rounding, eps |L| / step,
// stays far below it.
double loss(const Case& c) {
  const reference::Result r = reference::gated_forward(c.p, c.inputs(), c.gate);
  long double L = 0;
  for (std::size_t i = 0; i < r.o.size(); ++i) L += static_cast<long double>(r.o[i]) * c.d_o[i];
  for (std::size_t i = 0; i < r.final_state.size(); ++i) L += static_cast<long double>(r.final_state[i]) * c.dht[i];
  return static_cast<double>(L);
}

// Central differences of loss in `count` seeded random coordinates of x (a
// member of c) against grad: |fd - g| <= tol * max(|g|, typical), typical = RMS of grad.
template <class Member>
void expect_finite_differences(Case c, Member x, const std::vector<double>& grad, const char* name, double step,
                               std::uint64_t seed, double tol = 1e-7, int count = 12) {
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

void expect_gradients_match_finite_differences(const Case& c) {
  const reference::GatedGradients g = reference::gated_backward(c.p, c.inputs(), c.gate, c.grads());
  expect_finite_differences(c, [](Case& e) -> std::vector<double>& { return e.q; }, g.dq, "dq", 1e-6, 101);
  expect_finite_differences(c, [](Case& e) -> std::vector<double>& { return e.k; }, g.dk, "dk", 1e-6, 102);
  expect_finite_differences(c, [](Case& e) -> std::vector<double>& { return e.v; }, g.dv, "dv", 1e-6, 103);
  expect_finite_differences(c, [](Case& e) -> std::vector<double>& { return e.s0; }, g.dh0, "dh0", 1e-6, 104);
  auto gate = [](Case& e) -> std::vector<double>& { return e.gate.log_decay; };
  if (c.gate.kind == GateKind::per_head)
    expect_finite_differences(c, gate, g.dg_gamma, "dg_gamma", 1e-6, 105, 1e-7, static_cast<int>(c.p.H));
  else
    expect_finite_differences(c, gate, g.dg, "dg", 1e-6, 106, 1e-7, 24);
}

TEST(GatedReference, FiniteDifferencesPlainBatch) {
  Problem p;  // ragged last chunk, DK != DV
  p.B = 2; p.T = 100; p.H = 2; p.DK = 8; p.DV = 12; p.chunk = 16; p.scale = 0.35;
  for (const NamedGate& g : gates(p, 70)) {
    SCOPED_TRACE(g.name);
    expect_gradients_match_finite_differences(Case(p, g.gate, 41));
  }
}

TEST(GatedReference, FiniteDifferencesPackedBatch) {
  Problem p = packed_problem();
  p.DK = 8; p.DV = 12; p.chunk = 32;
  for (const NamedGate& g : gates(p, 80)) {
    SCOPED_TRACE(g.name);
    expect_gradients_match_finite_differences(Case(p, g.gate, 43));
  }
}

}  // namespace
}  // namespace linattn
