// The gated fp64 references (reference/gated.hpp, levels 2 and 3): level 1 is
// bitwise today's references; the token recurrence and the chunked form agree
// for per-head (RetNet) and per-token (Mamba-2) decays, strong and weak, plain
// and packed; the wrong update order is caught; and the backward (dg and
// dg_gamma included) matches central differences of the fp64 forward.
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "reference/gated.hpp"
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

using reference::Gate;
using reference::GateKind;

using testing::describe;
using testing::expect_agree;
using testing::packed_problem;
using testing::plain_batch;
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

using Case = testing::GatedCase<Gate>;

void expect_agree(const reference::GatedGradients& x, const reference::GatedGradients& ref, double tol,
                  const std::string& what) {
  expect_agree(static_cast<const reference::Gradients&>(x), ref, tol, what);
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
double loss(const Case& c) { return testing::loss_of(reference::gated_forward(c.p, c.inputs(), c.gate), c.d_o, c.dht); }

void expect_gradients_match_finite_differences(const Case& c) {
  const reference::GatedGradients g = reference::gated_backward(c.p, c.inputs(), c.gate, c.grads());
  using testing::expect_finite_differences;
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.q; }, g.dq, "dq", 1e-6, 101);
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.k; }, g.dk, "dk", 1e-6, 102);
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.v; }, g.dv, "dv", 1e-6, 103);
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.s0; }, g.dh0, "dh0", 1e-6, 104);
  auto gate = [](Case& e) -> std::vector<double>& { return e.gate.log_decay; };
  if (c.gate.kind == GateKind::per_head)
    expect_finite_differences(c, loss, gate, g.dg_gamma, "dg_gamma", 1e-6, 105, 1e-7, static_cast<int>(c.p.H));
  else
    expect_finite_differences(c, loss, gate, g.dg, "dg", 1e-6, 106, 1e-7, 24);
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
