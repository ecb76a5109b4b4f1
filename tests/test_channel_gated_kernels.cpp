// The forward with GLA's per-key-channel decay gk (issue 28; kernels/chunk_gate.hpp,
// the gate as a policy of the chunk steps) on the TeamPolicy kernels: every
// variant on kokkoskernels (and hosttile on host backends), fused and
// materialized on the register-blocked kernels, fp64, fp32, bf16
// and fp16, weak, strong, moderate and mixed per-channel decays, plain and
// packed batches (lengths 1, 63, 64, 65, 300), initial states, DK != DV,
// chunks 16, 32 and 64, outputs poisoned first: o, h and final_state against
// the fp64 chunked reference (reference/channel_gated.hpp) at the levels of
// core/accuracy_levels.hpp. Decays as strong as fp32's range allows stay
// finite and exact; each channel's own decay matters (its mean is far off);
// the state pass equals the forward's state; bad gates, and tensor cores
// where they cannot run, are refused with the reason (the backward:
// test_channel_gated_backward.cpp).
#include "core/accuracy_levels.hpp"
#include "core/gate.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "gated_checks.hpp"
#include "kernels/execution.hpp"
#include "kernels/forward.hpp"
#include "kernels/path_choice_here.hpp"
#include "kernels/state_pass.hpp"
#include "reference/channel_gated.hpp"
#include "reference/gated.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace linattn {
namespace {

using testing::packed;
using testing::problem;
using testing::uniform_values;

using testing::channel_cases;
using testing::ChannelCase;
using testing::mixed_channel_decays;

std::size_t gate_size(const Problem& p) { return testing::channel_gate_size(p); }

// The HDF5 contract's fp32.
Tensor gate_tensor(const Problem& p, const std::vector<double>& gk) {
  return Tensor::from_double(DType::f32, gate_shape(p, GateKind::per_channel), gk);
}

std::vector<GemmPath> paths() { return testing::team_policy_paths(); }

// The paths that run `variant`: the register-blocked kernels too for fused and materialized.
std::vector<GemmPath> paths(Variant variant) {
  std::vector<GemmPath> v = paths();
  if (variant == Variant::fused || variant == Variant::materialized) v.push_back(GemmPath::registers);
  return v;
}

ForwardConfig channel_config(Variant variant, GemmPath path) {
  ForwardConfig cfg;
  cfg.variant = variant;
  cfg.gemm = path;
  cfg.gate = GateKind::per_channel;
  cfg.poison_outputs = true;
  return cfg;
}

// One run against the reference on the values the kernels read (gk rounded to
// fp32 once): the chunked form for the chunked variants, the token recurrence
// for `recurrent` (they differ only where a chunk's cumulative sums absorb a
// small decay after a huge one: see DecaysAtTheRangeOfFp32StayFiniteAndExact).
ForwardOutput expect_matches(const Problem& p, Variant variant, GemmPath path, DType dtype, const ChannelCase& g,
                             bool with_state, std::uint64_t seed) {
  const ProblemInputs in = random_inputs(p, dtype, seed, with_state);
  const Tensor gate = gate_tensor(p, g.gk);
  const ForwardOutput out = run_forward(p, channel_config(variant, path), in.q, in.k, in.v,
                                        with_state ? &in.initial_state : nullptr, nullptr, &gate);
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                            s0 = in.initial_state.to_double();
  const reference::Inputs ref_in{q, k, v, with_state ? &s0 : nullptr};
  const reference::ChannelGate ref_gate{gate.to_double()};
  const reference::Result ref = variant == Variant::recurrent ? reference::gla_recurrent(p, ref_in, ref_gate)
                                                              : reference::gla_chunked(p, ref_in, ref_gate);
  SCOPED_TRACE(std::string(variant_name(variant)) + " " + gemm_path_name(out.gemm) + " " + dtype_name(dtype) + " " +
               g.name + (p.varlen() ? " packed" : "") + (with_state ? " with initial state" : "") +
               " C=" + std::to_string(p.chunk) + " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV));
  testing::expect_gated_forward_matches(out, ref, dtype, path);
  return out;
}

TEST(ChannelGatedKernels, EveryVariantPathAndTypeMatchesReference) {
  const Problem problems[] = {problem(2, 150, 2, 16, 24, 64), packed({1, 63, 64, 65, 300}, 2, 8, 12, 64),
                              problem(1, 70, 3, 12, 8, 16), packed({1, 63, 64, 65, 300}, 1, 10, 6, 32),
                              packed({1, 63, 64, 65, 300}, 1, 12, 8, 16)};
  std::uint64_t seed = 28000;
  for (const Problem& p : problems)
    for (const ChannelCase& g : channel_cases(p, seed += 10))
      for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent})
        for (GemmPath path : paths(variant))
          for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16})
            for (bool with_state : {false, true}) expect_matches(p, variant, path, dtype, g, with_state, ++seed);
}

// The chunked scheme takes every factor as exp of a difference of cumulative
// sums, so the only bound is fp32's range for a chunk's cumulative sum. Runs
// accept log-decays down to kLowestLogDecay (core/gate.hpp): at that bound on
// every token of a chunk of 64 and of 128 (the largest), a chunk's sum is
// -1.28e38, and the outputs are finite and equal to the reference, where every
// decayed term is exactly zero. (Where a gentle decay follows a huge one in a
// chunk, the cumulative sum absorbs it, in fp64 as in fp32: the chunked form
// then keeps that token's state undecayed, as the chunked reference does,
// while the recurrence decays it. docs/NUMERICS.md, "Per-channel decays".)
TEST(ChannelGatedKernels, DecaysAtTheRangeOfFp32StayFiniteAndExact) {
  std::uint64_t seed = 28101;
  for (std::int64_t chunk : {64, 128}) {
    const Problem p = packed({1, 63, 64, 65, 130, 260}, 2, 16, 24, chunk);
    const std::vector<double> gk = testing::decays_at_the_lowest_bound(p, 28100 + chunk);
    for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent})
      for (GemmPath path : paths(variant)) {
        SCOPED_TRACE("chunk " + std::to_string(chunk));
        // A GPU team holds at most 256 threads, and the register kernels' chunk
        // of 128 needs 1024 (their plan refuses it there); a host team is one thread.
        const bool fits =
            path_facts_here<float>(p, channel_config(variant, path)).register_plan_refusal.empty();
        if (path == GemmPath::registers && !fits) {
          ASSERT_FALSE(host_execution) << "the host runs the register kernels at every chunk";
          continue;
        }
        const ForwardOutput out = expect_matches(p, variant, path, DType::f32, {"the lowest log-decays", gk}, true, ++seed);
        for (double x : out.o.to_double()) ASSERT_TRUE(std::isfinite(x));
        for (double x : out.final_state.to_double()) ASSERT_TRUE(std::isfinite(x));
      }
  }
}

// Each channel decays by its own gk: running the channels' mean as one
// per-token gate (the scalar kernels, correct for it) is far from the
// per-channel reference, and so is ignoring the gate.
TEST(ChannelGatedKernels, EachChannelsOwnDecayMatters) {
  const Problem p = problem(1, 200, 2, 16, 16, 64);
  const std::vector<double> gk = mixed_channel_decays(p, 28200);
  const ProblemInputs in = random_inputs(p, DType::f64, 28201, false);
  const Tensor gate = gate_tensor(p, gk);
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double();
  const reference::Result ref = reference::gla_chunked(p, {q, k, v}, reference::ChannelGate{gate.to_double()});
  std::vector<double> mean(static_cast<std::size_t>(p.B * p.T * p.H), 0.0);
  const std::vector<double> g32 = gate.to_double();
  for (std::size_t e = 0; e < g32.size(); ++e) mean[e / static_cast<std::size_t>(p.DK)] += g32[e] / double(p.DK);
  ForwardConfig scalar;
  scalar.gate = GateKind::per_token;
  const Tensor mean_gate = Tensor::from_double(DType::f64, gate_shape(p, GateKind::per_token), mean);
  const ForwardOutput averaged = run_forward(p, scalar, in.q, in.k, in.v, nullptr, nullptr, &mean_gate);
  EXPECT_GT(relative_l2(averaged.o.to_double(), ref.o), 0.05);
  const ForwardOutput level1 = run_forward(p, ForwardConfig{}, in.q, in.k, in.v);
  EXPECT_GT(relative_l2(level1.o.to_double(), ref.o), 0.1);
  const ForwardOutput channels = run_forward(p, channel_config(Variant::fused, paths().back()), in.q, in.k, in.v,
                                             nullptr, nullptr, &gate);
  EXPECT_LE(relative_l2(channels.o.to_double(), ref.o), 1e-13);
}

// gk equal in every channel is the scalar per-token gate g.
TEST(ChannelGatedKernels, ABroadcastGateIsTheScalarGate) {
  const Problem p = packed({1, 63, 64, 65, 300}, 2, 8, 12, 64);
  const std::vector<double> g = testing::per_token_log_decays(p, -0.5, -0.01, 28300);
  std::vector<double> gk(gate_size(p));
  for (std::size_t e = 0; e < gk.size(); ++e) gk[e] = g[e / static_cast<std::size_t>(p.DK)];
  const ProblemInputs in = random_inputs(p, DType::f32, 28301, true);
  for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent}) {
    SCOPED_TRACE(variant_name(variant));
    ForwardConfig scalar;
    scalar.variant = variant;
    scalar.gate = GateKind::per_token;
    const Tensor g_tensor = Tensor::from_double(DType::f32, gate_shape(p, GateKind::per_token), g);
    const Tensor gk_tensor = gate_tensor(p, gk);
    const ForwardOutput a = run_forward(p, scalar, in.q, in.k, in.v, &in.initial_state, nullptr, &g_tensor);
    const ForwardOutput b = run_forward(p, channel_config(variant, paths().back()), in.q, in.k, in.v,
                                        &in.initial_state, nullptr, &gk_tensor);
    EXPECT_LE(relative_l2(b.o.to_double(), a.o.to_double()), 2e-5);
    EXPECT_LE(relative_l2(b.final_state.to_double(), a.final_state.to_double()), 2e-5);
  }
}

// The state pass (context parallel's first pass) runs the forward's state
// update with the same decays: the forward's final state.
TEST(ChannelGatedKernels, StatePassIsTheForwardsState) {
  const Problem p = packed({1, 63, 64, 65, 300}, 2, 16, 24, 64);
  const ProblemInputs in = random_inputs(p, DType::f32, 28400, true);
  const Tensor gate = gate_tensor(p, channel_cases(p, 28401)[2].gk);
  for (GemmPath path : paths(Variant::fused)) {
    SCOPED_TRACE(gemm_path_name(path));
    ForwardConfig cfg = channel_config(Variant::fused, path);
    const ForwardOutput f = run_forward(p, cfg, in.q, in.k, in.v, &in.initial_state, nullptr, &gate);
    const StatePassOutput s = run_state_pass(p, cfg, in.k, in.v, &in.initial_state, nullptr, &gate);
    EXPECT_EQ(s.final_state.bytes, f.final_state.bytes);
  }
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(ChannelGatedKernels, BadGatesAndPathsWithoutGkAreRefused) {
  const Problem p = problem(1, 10, 2, 4, 4, 16);
  const ProblemInputs in = random_inputs(p, DType::f32, 28500, false);
  ForwardConfig cfg;
  cfg.gate = GateKind::per_channel;
  std::vector<double> gk(gate_size(p), -0.5);
  auto run_with = [&](const std::vector<double>& values, const std::vector<std::int64_t>& shape) {
    const Tensor t = Tensor::from_double(DType::f32, shape, values);
    return run_forward(p, cfg, in.q, in.k, in.v, nullptr, nullptr, &t);
  };
  EXPECT_NO_THROW(run_with(gk, {1, 10, 2, 4}));
  gk[37] = 0.25;
  EXPECT_NE(message_of([&] { run_with(gk, {1, 10, 2, 4}); }).find("element 37"), std::string::npos);
  gk[37] = std::nan("");
  EXPECT_NE(message_of([&] { run_with(gk, {1, 10, 2, 4}); }).find("element 37"), std::string::npos);
  gk[37] = -std::numeric_limits<double>::infinity();
  EXPECT_NE(message_of([&] { run_with(gk, {1, 10, 2, 4}); }).find("element 37"), std::string::npos);
  // Below the lowest log-decay (core/gate.hpp): finite, but a chunk's sum of such values could overflow.
  gk[37] = 2.0 * kLowestLogDecay;
  EXPECT_NE(message_of([&] { run_with(gk, {1, 10, 2, 4}); }).find("element 37"), std::string::npos);
  gk[37] = kLowestLogDecay;  // the bound itself is a log-decay
  EXPECT_NO_THROW(run_with(gk, {1, 10, 2, 4}));
  gk[37] = -0.5;
  EXPECT_NE(message_of([&] { run_with(std::vector<double>(20, -0.5), {1, 10, 2}); }).find("gk"), std::string::npos);
  EXPECT_NE(message_of([&] { run_forward(p, cfg, in.q, in.k, in.v); }).find("missing"), std::string::npos);
  cfg.normalize = true;
  EXPECT_NE(message_of([&] { run_with(gk, {1, 10, 2, 4}); }).find("normalize with a gate"), std::string::npos);
  cfg.normalize = false;
  cfg.gemm = GemmPath::tensor_core;
  EXPECT_NE(message_of([&] { run_with(gk, {1, 10, 2, 4}); }).find("not available"), std::string::npos);
}

}  // namespace
}  // namespace linattn
