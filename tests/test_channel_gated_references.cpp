// The fp64 references for the per-channel decay (reference/channel_gated.hpp,
// GLA's gk, issue 28): gk = 0 is level 1 and gk equal in every channel is the
// scalar gate of gated.hpp, forward and backward (dgk summed over the channels
// is dg); the token recurrence and the chunked form agree for weak, strong and
// mixed per-channel decays, chunk 16/32/64, plain and packed, DK != DV; the
// strongest decays stay finite; the backward (dgk included) matches central
// differences of the fp64 forward; bad gates are refused.
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "reference/channel_gated.hpp"
#include "reference/gated.hpp"
#include "reference_problems.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

namespace linattn {
namespace {

using reference::ChannelGate;
using testing::describe;
using testing::expect_agree;
using testing::packed_problem;
using testing::plain_batch;
using testing::uniform_values;

using Case = testing::GatedCase<ChannelGate>;

std::size_t gate_size(const Problem& p) { return static_cast<std::size_t>(p.B * p.T * p.H * p.DK); }

// Decays uniform in [lo, hi) for every token and channel.
ChannelGate uniform_gate(const Problem& p, double lo, double hi, std::uint64_t seed) {
  return {uniform_values(gate_size(p), lo, hi, seed)};
}

// Mixed: channel i of every token decays only when i is odd (strongly, in
// [-3, -0.01)); the even channels keep their state (gk = 0).
ChannelGate mixed_gate(const Problem& p, std::uint64_t seed) {
  ChannelGate g = uniform_gate(p, -3, -0.01, seed);
  for (std::size_t e = 0; e < g.gk.size(); e += 2) g.gk[e] = 0.0;  // DK is even in every problem here
  return g;
}

struct NamedGate {
  std::string name;
  ChannelGate gate;
};

std::vector<NamedGate> gates(const Problem& p, std::uint64_t seed) {
  return {{"weak", uniform_gate(p, -1.5e-4, -0.5e-4, seed)},
          {"strong", uniform_gate(p, -5, -1, seed + 1)},
          {"mixed per channel", mixed_gate(p, seed + 2)},
          {"moderate", uniform_gate(p, -0.3, -0.001, seed + 3)}};
}

// dgk summed over the DK channels of each token: [B, T, H].
std::vector<double> summed_over_channels(const Problem& p, const std::vector<double>& dgk) {
  std::vector<double> dg(dgk.size() / static_cast<std::size_t>(p.DK), 0.0);
  for (std::size_t e = 0; e < dgk.size(); ++e) dg[e / static_cast<std::size_t>(p.DK)] += dgk[e];
  return dg;
}

TEST(ChannelGatedReference, LevelOneAndTheScalarGateAreSpecialCases) {
  Problem plain = plain_batch();
  plain.chunk = 16;
  for (const Problem& p : {plain, packed_problem()}) {
    SCOPED_TRACE(describe(p));
    // gk = 0: level 1.
    const Case none(p, ChannelGate{std::vector<double>(gate_size(p), 0.0)}, 5);
    const auto level1 = reference::per_sequence(p, none.inputs(), reference::recurrent);
    expect_agree(reference::gla_recurrent(p, none.inputs(), none.gate), level1, 1e-14, "recurrent, gk = 0");
    expect_agree(reference::gla_chunked(p, none.inputs(), none.gate), level1, 1e-13, "chunked, gk = 0");
    const auto back1 = reference::backward_recurrent(p, none.inputs(), none.grads());
    expect_agree(reference::gla_backward_recurrent(p, none.inputs(), none.gate, none.grads()), back1, 1e-13,
                 "backward recurrent, gk = 0");
    expect_agree(reference::gla_backward_chunked(p, none.inputs(), none.gate, none.grads()), back1, 1e-12,
                 "backward chunked, gk = 0");
    // gk equal in every channel: Mamba-2's g per token.
    const std::vector<double> g = uniform_values(static_cast<std::size_t>(p.B * p.T * p.H), -0.5, -0.01, 7);
    ChannelGate broadcast{std::vector<double>(gate_size(p))};
    for (std::size_t e = 0; e < broadcast.gk.size(); ++e) broadcast.gk[e] = g[e / static_cast<std::size_t>(p.DK)];
    const Case c(p, broadcast, 9);
    const reference::Gate scalar = reference::Gate::per_token(g);
    const auto gated = reference::gated_recurrent(p, c.inputs(), scalar);
    expect_agree(reference::gla_recurrent(p, c.inputs(), c.gate), gated, 1e-13, "recurrent, broadcast g");
    expect_agree(reference::gla_chunked(p, c.inputs(), c.gate), gated, 1e-13, "chunked, broadcast g");
    const auto gated_back = reference::gated_backward_recurrent(p, c.inputs(), scalar, c.grads());
    for (const auto& [name, back] :
         {std::pair{"backward recurrent", reference::gla_backward_recurrent(p, c.inputs(), c.gate, c.grads())},
          std::pair{"backward chunked", reference::gla_backward_chunked(p, c.inputs(), c.gate, c.grads())}}) {
      expect_agree(back, gated_back, 1e-12, std::string(name) + ", broadcast g");
      EXPECT_LE(relative_l2(summed_over_channels(p, back.dgk), gated_back.dg), 1e-11)
          << name << ": dgk summed over the channels is dg";
    }
  }
}

TEST(ChannelGatedReference, RecurrentAndChunkedAgree) {
  Problem plain = plain_batch();
  for (std::int64_t chunk : {16, 32, 64}) {
    plain.chunk = chunk;
    Problem packed = packed_problem();
    packed.chunk = chunk;
    for (const Problem& p : {plain, packed})
      for (const NamedGate& g : gates(p, 40 + chunk)) {
        SCOPED_TRACE(describe(p) + ", " + g.name);
        const Case c(p, g.gate, 13);
        expect_agree(reference::gla_chunked(p, c.inputs(), c.gate), reference::gla_recurrent(p, c.inputs(), c.gate),
                     1e-13, "forward chunked vs recurrent");
        const auto back = reference::gla_backward_recurrent(p, c.inputs(), c.gate, c.grads());
        const auto chunked = reference::gla_backward_chunked(p, c.inputs(), c.gate, c.grads());
        expect_agree(chunked, back, 1e-11, "backward chunked vs recurrent");
        EXPECT_LE(relative_l2(chunked.dgk, back.dgk), 1e-11) << "dgk: the identity against the state overlaps";
      }
  }
}

// Decays far beyond what a product exp(b_i) * exp(-b_j) survives (gk = -50 a
// token: -3200 over a chunk of 64): every output finite, the forms agree, and
// each channel forgets or keeps its state as its own decay says.
TEST(ChannelGatedReference, StrongestDecaysStayFiniteAndPerChannel) {
  Problem p = plain_batch();
  p.B = 1; p.H = 1;
  ChannelGate g{std::vector<double>(gate_size(p), -50.0)};
  for (std::size_t e = 0; e < g.gk.size(); e += 2) g.gk[e] = 0.0;  // even channels keep everything
  const Case c(p, g, 31);
  const auto fw = reference::gla_chunked(p, c.inputs(), c.gate);
  for (const auto* x : {&fw.o, &fw.h, &fw.final_state})
    EXPECT_TRUE(std::all_of(x->begin(), x->end(), [](double e) { return std::isfinite(e); }));
  expect_agree(fw, reference::gla_recurrent(p, c.inputs(), c.gate), 1e-13, "gk = -50 in the odd channels");
  const auto back = reference::gla_backward_chunked(p, c.inputs(), c.gate, c.grads());
  for (const auto* x : {&back.dq, &back.dk, &back.dv, &back.dh0, &back.dgk})
    EXPECT_TRUE(std::all_of(x->begin(), x->end(), [](double e) { return std::isfinite(e); }));
  // The final state's odd rows hold only the last token's k v^T; the even rows the whole sum from S0.
  for (std::int64_t i = 0; i < p.DK; ++i) {
    const std::int64_t t = p.T - 1;
    double keep = c.s0[i * p.DV];
    for (std::int64_t s = 0; s < p.T; ++s) keep += c.k[s * p.DK + i] * c.v[s * p.DV];
    const double expected = i % 2 == 0 ? keep : c.k[t * p.DK + i] * c.v[t * p.DV];
    EXPECT_NEAR(fw.final_state[i * p.DV], expected, 1e-12 * std::max(1.0, std::abs(expected))) << "row " << i;
  }
}

TEST(ChannelGatedReference, BadGatesThrow) {
  const Problem p = packed_problem();
  ChannelGate positive = uniform_gate(p, -1, -0.1, 5);
  positive.gk[7] = 0.25;
  ChannelGate inf = uniform_gate(p, -1, -0.1, 6);
  inf.gk[100] = -std::numeric_limits<double>::infinity();
  ChannelGate nan = uniform_gate(p, -1, -0.1, 7);
  nan.gk[3] = std::nan("");
  ChannelGate short_gate{std::vector<double>(10, -0.1)};
  const Case c(p, uniform_gate(p, -1, -0.1, 8), 29);
  for (const ChannelGate* g : {&positive, &inf, &nan, &short_gate}) {
    EXPECT_THROW(reference::gla_chunked(p, c.inputs(), *g), std::invalid_argument);
    EXPECT_THROW(reference::gla_backward_chunked(p, c.inputs(), *g, c.grads()), std::invalid_argument);
    EXPECT_THROW(reference::gla_recurrent(p, c.inputs(), *g), std::invalid_argument);
  }
  try {
    reference::gla_chunked(p, c.inputs(), positive);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gk[7]"), std::string::npos) << e.what();
  }
}

// L = <o, do> + <final_state, dht> through the fp64 chunked forward, summed in
// long double; central differences (step 1e-6: gk enters through exp, whose
// truncation error is about (n step)^2 / 6 relative for n tokens) against the
// chunked backward in seeded random coordinates.
double loss(const Case& c) { return testing::loss_of(reference::gla_chunked(c.p, c.inputs(), c.gate), c.d_o, c.dht); }

void expect_gradients_match_finite_differences(const Case& c) {
  const auto g = reference::gla_backward_chunked(c.p, c.inputs(), c.gate, c.grads());
  using testing::expect_finite_differences;
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.q; }, g.dq, "dq", 1e-6, 101);
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.k; }, g.dk, "dk", 1e-6, 102);
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.v; }, g.dv, "dv", 1e-6, 103);
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.s0; }, g.dh0, "dh0", 1e-6, 104);
  expect_finite_differences(c, loss, [](Case& e) -> std::vector<double>& { return e.gate.gk; }, g.dgk, "dgk", 1e-6,
                            105, 1e-7, 24, true);
}

TEST(ChannelGatedReference, FiniteDifferencesPlainAndPacked) {
  Problem plain;  // ragged last chunk, DK != DV
  plain.B = 2; plain.T = 100; plain.H = 2; plain.DK = 8; plain.DV = 12; plain.chunk = 16; plain.scale = 0.35;
  Problem packed = packed_problem();
  packed.DK = 8; packed.DV = 12; packed.chunk = 32;
  for (const Problem& p : {plain, packed})
    for (const NamedGate& g : gates(p, 70)) {
      SCOPED_TRACE(describe(p) + ", " + g.name);
      expect_gradients_match_finite_differences(Case(p, g.gate, 41));
    }
}

}  // namespace
}  // namespace linattn
