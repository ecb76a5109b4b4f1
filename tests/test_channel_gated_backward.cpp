// The backward with GLA's per-key-channel decay gk (issue 28;
// kernels/channel_gate_backward.hpp) on the TeamPolicy kernel: kokkoskernels
// (and hosttile on host backends), fp64, fp32, bf16 and fp16, weak, strong,
// moderate and mixed per-channel decays, plain and packed batches (lengths 1,
// 63, 64, 65, 300), initial states and dht or neither, snapshots in the
// accumulation type, in bf16 or recomputed, DK != DV, chunks 16, 32 and 64,
// outputs poisoned first: dq, dk, dv, dh0 and dgk against the fp64 chunked
// reference (reference/channel_gated.hpp, itself checked against central
// differences in test_channel_gated_references.cpp). Decays at fp32's range
// stay finite and exact; gk equal in every channel is the scalar gate (dgk
// summed over the channels is its dg); each channel's own decay matters. On
// CUDA builds the same checks run on the tensor-core backward
// (cuda/channel_gate_gradient.hpp): bf16, fp16 and fp32, every head size up
// to DK 256, DV 512.
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "gated_checks.hpp"
#include "kernels/backward.hpp"
#include "kernels/execution.hpp"
#include "kernels/forward.hpp"
#include "reference/channel_gated.hpp"
#include "tensor_core_cases.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace linattn {
namespace {

using testing::channel_cases;
using testing::ChannelCase;
using testing::packed;
using testing::problem;
using testing::uniform_values;

std::vector<GemmPath> paths() { return testing::team_policy_paths(); }

using Case = testing::GatedBackwardCase;

// Inputs, gk in fp32 (as files hold it), and the gated forward's snapshots.
Case make_case(const Problem& p, const std::vector<double>& gk, DType dtype, SnapshotMode snaps, std::uint64_t seed) {
  Case c;
  c.in = random_inputs(p, dtype, seed, true);
  c.d_o = random_tensor(dtype, p.v_shape(), derive_seed(seed, 7));
  c.dht = random_tensor(accumulation_dtype(dtype), p.state_shape(), derive_seed(seed, 8));
  c.gate = Tensor::from_double(DType::f32, gate_shape(p, GateKind::per_channel), gk);
  ForwardConfig fc;
  fc.snapshots = snaps;
  fc.gate = GateKind::per_channel;
  c.fw = run_forward(p, fc, c.in.q, c.in.k, c.in.v, &c.in.initial_state, nullptr, &c.gate);
  return c;
}

BackwardConfig channel_config(GemmPath path, bool recompute) {
  BackwardConfig bc;
  bc.gemm = path;
  bc.recompute_h = recompute;
  bc.poison_outputs = true;
  bc.gate = GateKind::per_channel;
  return bc;
}

// A backward's outputs and the fp64 reference they were checked against.
struct Checked {
  BackwardOutput out;
  reference::ChannelGatedGradients ref;
};

// One backward against the fp64 chunked reference on the values the kernel read.
Checked expect_matches(const Problem& p, const ChannelCase& g, DType dtype, GemmPath path, SnapshotMode snaps,
                              bool recompute, bool with_state_and_dht, std::uint64_t seed) {
  const Case c = make_case(p, g.gk, dtype, snaps, seed);
  const Tensor* s0 = with_state_and_dht ? &c.in.initial_state : nullptr;
  const Tensor* dht = with_state_and_dht ? &c.dht : nullptr;
  // Without an initial state the snapshots must be those of a forward from zero.
  ForwardOutput fw = c.fw;
  if (!with_state_and_dht && !recompute) {
    ForwardConfig fc;
    fc.snapshots = snaps;
    fc.gate = GateKind::per_channel;
    fw = run_forward(p, fc, c.in.q, c.in.k, c.in.v, nullptr, nullptr, &c.gate);
  }
  const BackwardOutput out = run_backward(p, channel_config(path, recompute), c.in.q, c.in.k, c.in.v,
                                          recompute ? nullptr : &fw.h, s0, c.d_o, dht, &c.gate);
  const std::vector<double> q = c.in.q.to_double(), k = c.in.k.to_double(), v = c.in.v.to_double(),
                            s0d = c.in.initial_state.to_double(), go = c.d_o.to_double(), gh = c.dht.to_double();
  const reference::ChannelGatedGradients ref = reference::gla_backward_chunked(
      p, {q, k, v, with_state_and_dht ? &s0d : nullptr}, reference::ChannelGate{c.gate.to_double()},
      {go, with_state_and_dht ? &gh : nullptr});
  const bool bf16_h = !recompute && snaps == SnapshotMode::bf16;
  SCOPED_TRACE(g.name + " " + dtype_name(dtype) + " " + gemm_path_name(out.gemm) + " T=" + std::to_string(p.T) +
               " C=" + std::to_string(p.chunk) + " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV) +
               " N=" + std::to_string(p.num_sequences()) + (with_state_and_dht ? " s0 dht" : "") +
               (recompute ? " recomputed h" : bf16_h ? " bf16 h" : " acc h"));
  EXPECT_EQ(out.gemm, path);
  const DType stored = out.dq.dtype;
  // The tensor-core backward rounds its operands once each (accuracy_levels.hpp), as verify allows.
  const bool tc = path == GemmPath::tensor_core;
  const double operands = tc ? tensor_core_channel_backward_level(dtype) : 0.0;
  EXPECT_LE(relative_l2(out.dq.to_double(), ref.dq), output_level(dtype, stored, bf16_h) + operands) << "dq";
  EXPECT_LE(relative_l2(out.dk.to_double(), ref.dk), stored_level(dtype, stored) + operands) << "dk";
  EXPECT_LE(relative_l2(out.dv.to_double(), ref.dv), stored_level(dtype, stored) + operands) << "dv";
  // dh0 sums the decayed queries' products only (the walk, rounded queries).
  EXPECT_LE(relative_l2(out.dh0.to_double(), ref.dh0),
            stored_level(dtype, out.dh0.dtype) + (tc ? tensor_core_channel_level(dtype) : 0.0))
      << "dh0";
  EXPECT_EQ(out.dg.shape, p.qk_shape());
  // Snapshots of the tensor-core forward (CUDA's automatic path for gk) hold its rounded keys.
  const bool tensor_core_h = !recompute && fw.gemm == GemmPath::tensor_core;
  const double dgk_level = tc              ? tensor_core_channel_gate_gradient_level(dtype, bf16_h)
                           : tensor_core_h ? channel_snapshot_gradient_level(dtype, bf16_h)
                                           : gate_gradient_level(dtype, bf16_h);
  const double dgk_error = relative_l2(out.dg.to_double(), ref.dgk);
  EXPECT_LE(dgk_error, dgk_level) << "dgk";
  if (tc && dtype == DType::f32)  // for the record (docs/NUMERICS.md)
    std::printf("[ dgk tensor cores fp32 ] %s%s: %.2e\n", g.name.c_str(), bf16_h ? " bf16 h" : "", dgk_error);
  EXPECT_TRUE(out.dg_gamma.empty());
  return {out, ref};
}

TEST(ChannelGatedBackward, EveryPathTypeAndDecayMatchesReference) {
  const Problem problems[] = {problem(2, 150, 2, 16, 24, 64), packed({1, 63, 64, 65, 300}, 2, 8, 12, 64),
                              problem(1, 70, 3, 12, 8, 16), packed({1, 63, 64, 65, 300}, 1, 10, 6, 32),
                              packed({1, 63, 64, 65, 300}, 1, 12, 8, 16)};
  std::uint64_t seed = 29000;
  for (const Problem& p : problems)
    for (const ChannelCase& g : channel_cases(p, seed += 10))
      for (GemmPath path : paths())
        for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16})
          for (bool with_state_and_dht : {false, true})
            expect_matches(p, g, dtype, path, SnapshotMode::accumulation, false, with_state_and_dht, ++seed);
}

TEST(ChannelGatedBackward, SnapshotsReadAsBf16OrRecomputed) {
  const Problem p = packed({1, 63, 64, 65, 130}, 2, 16, 24, 32);
  std::uint64_t seed = 29500;
  for (const ChannelCase& g : channel_cases(p, seed))
    for (GemmPath path : paths()) {
      expect_matches(p, g, DType::bf16, path, SnapshotMode::bf16, false, true, ++seed);
      expect_matches(p, g, DType::f32, path, SnapshotMode::none, true, true, ++seed);
    }
}

// GLA's gk on the tensor-core backward (the tiled chunk kernels for every
// head, then cuda/channel_gate_gradient.hpp): heads that fill their tiles and
// padded ones, DK != DV up to 256 x 512, packed lengths 1, 63, 64, 65, 300;
// bf16, fp16 and fp32; initial state and dht with bf16 snapshots, neither with
// snapshots in the accumulation type.
TEST(ChannelGatedBackward, TensorCoresMatchReference) {
  if (!testing::kHaveTensorCores) GTEST_SKIP() << "no tensor-core backward in this build";
  const Problem problems[] = {problem(2, 300, 2, 64, 64, 64),  problem(1, 200, 2, 128, 128, 64),
                              problem(1, 130, 2, 96, 96, 64),  problem(1, 100, 2, 60, 20, 64),
                              problem(1, 90, 2, 128, 64, 64),  problem(1, 70, 1, 256, 512, 64),
                              packed({1, 63, 64, 65, 300}, 2, 64, 64, 64), packed({1, 63, 64, 65, 300}, 1, 48, 100, 64),
                              problem(1, 70, 16, 256, 256, 64)};  // 128 walk blocks of 32 columns (state_gradient_block)
  std::uint64_t seed = 29900;
  for (const Problem& p : problems)
    for (const ChannelCase& g : channel_cases(p, seed += 10))
      for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
        expect_matches(p, g, dtype, GemmPath::tensor_core, SnapshotMode::bf16, false, true, ++seed);
        expect_matches(p, g, dtype, GemmPath::tensor_core, SnapshotMode::accumulation, false, false, seed);
      }
}

// dV's intra-chunk term A^T dO takes gk's scores A at fp32's level, as fla's
// chunk_gla takes them in fp32: with gk in [-1, 0) the state forgets within a
// few tokens, so that term is nearly all of dv, and dv's error stays near the
// rounding of dv itself to the output type (the floor: the fp64 reference
// rounded to bf16). Two roundings would show: A rounded once to bf16 in the
// product (chunk_gradient_tiled.hpp's load_channel_scores splits it hi + lo;
// before, dv was about 1.4x the floor) and A's off-diagonal 16-blocks taken
// over decayed operands rounded to bf16 (the backward's prep splits them,
// tensor_core_backward.hpp's ScoreOperand; before, 1.04x here, where a numpy
// model of this case gives 1.035x, and 1.012x with fla's TF32 operands).
TEST(ChannelGatedBackward, TensorCoreDvKeepsScoresAtFp32Level) {
  if (!testing::kHaveTensorCores) GTEST_SKIP() << "no tensor-core backward in this build";
  const Problem p = problem(1, 512, 2, 128, 128, 64);
  for (DType dtype : {DType::bf16, DType::f16}) {
    const ChannelCase g{"gk in [-1, 0)", uniform_values(testing::channel_gate_size(p), -1.0, -1e-6, 29801)};
    const Checked r =
        expect_matches(p, g, dtype, GemmPath::tensor_core, SnapshotMode::accumulation, false, false, 29802);
    const double floor = relative_l2(Tensor::from_double(dtype, p.v_shape(), r.ref.dv).to_double(), r.ref.dv);
    const double dv = relative_l2(r.out.dv.to_double(), r.ref.dv);
    std::printf("[ dv tensor cores %s ] %.3e, %.2fx its output rounding %.3e\n", dtype_name(dtype), dv,
                dv / floor, floor);
    if (dtype == DType::bf16) EXPECT_LE(dv, 1.025 * floor) << "dv against its output rounding";
  }
}

// As in the forward (test_channel_gated_kernels.cpp): gk at the lowest
// log-decay a run accepts, on every token of some channels (a chunk's sum
// C * kLowestLogDecay, chunks of 64 and 128), gives finite gradients equal to
// the reference, on tensor cores too (chunk 64, their only one).
TEST(ChannelGatedBackward, DecaysAtTheRangeOfFp32StayFiniteAndExact) {
  std::uint64_t seed = 29601;
  for (std::int64_t chunk : {64, 128}) {
    const Problem p = packed({1, 63, 64, 65, 130, 260}, 2, 16, 24, chunk);
    const std::vector<double> gk = testing::decays_at_the_lowest_bound(p, 29600 + chunk);
    std::vector<GemmPath> every = paths();
    if (testing::kHaveTensorCores && chunk == 64) every.push_back(GemmPath::tensor_core);
    for (GemmPath path : every) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      const BackwardOutput out =
          expect_matches(p, {"the lowest log-decays", gk}, DType::f32, path, SnapshotMode::accumulation, false, true, ++seed)
              .out;
      for (const Tensor* t : {&out.dq, &out.dk, &out.dv, &out.dh0, &out.dg})
        for (double x : t->to_double()) ASSERT_TRUE(std::isfinite(x));
    }
  }
}

// gk equal in every channel is the scalar per-token gate: the same gradients,
// and dgk summed over the channels is dg.
TEST(ChannelGatedBackward, ABroadcastGateIsTheScalarGate) {
  const Problem p = packed({1, 63, 64, 65, 300}, 2, 8, 12, 64);
  const std::vector<double> g = testing::per_token_log_decays(p, -0.5, -0.01, 29700);
  std::vector<double> gk(testing::channel_gate_size(p));
  for (std::size_t e = 0; e < gk.size(); ++e) gk[e] = g[e / static_cast<std::size_t>(p.DK)];
  const Case c = make_case(p, gk, DType::f32, SnapshotMode::accumulation, 29701);
  const Tensor g_tensor = Tensor::from_double(DType::f32, gate_shape(p, GateKind::per_token), g);
  for (GemmPath path : paths()) {
    SCOPED_TRACE(gemm_path_name(path));
    BackwardConfig scalar = channel_config(path, false);
    scalar.gate = GateKind::per_token;
    const BackwardOutput a =
        run_backward(p, scalar, c.in.q, c.in.k, c.in.v, &c.fw.h, &c.in.initial_state, c.d_o, &c.dht, &g_tensor);
    const BackwardOutput b = run_backward(p, channel_config(path, false), c.in.q, c.in.k, c.in.v, &c.fw.h,
                                          &c.in.initial_state, c.d_o, &c.dht, &c.gate);
    EXPECT_LE(relative_l2(b.dq.to_double(), a.dq.to_double()), 2e-5) << "dq";
    EXPECT_LE(relative_l2(b.dk.to_double(), a.dk.to_double()), 2e-5) << "dk";
    EXPECT_LE(relative_l2(b.dv.to_double(), a.dv.to_double()), 2e-5) << "dv";
    EXPECT_LE(relative_l2(b.dh0.to_double(), a.dh0.to_double()), 2e-5) << "dh0";
    const std::vector<double> dgk = b.dg.to_double();
    std::vector<double> summed(static_cast<std::size_t>(p.B * p.T * p.H), 0.0);
    for (std::size_t e = 0; e < dgk.size(); ++e) summed[e / static_cast<std::size_t>(p.DK)] += dgk[e];
    EXPECT_LE(relative_l2(summed, a.dg.to_double()), 1e-4) << "dgk summed over channels against dg";
  }
}

// Each channel decays by its own gk: the backward of the channels' mean as
// one per-token gate is far from the per-channel reference.
TEST(ChannelGatedBackward, EachChannelsOwnDecayMatters) {
  const Problem p = problem(1, 200, 2, 16, 16, 64);
  const std::vector<double> gk = testing::mixed_channel_decays(p, 29800);
  const Case c = make_case(p, gk, DType::f64, SnapshotMode::accumulation, 29801);
  std::vector<double> mean(static_cast<std::size_t>(p.B * p.T * p.H), 0.0);
  const std::vector<double> g32 = c.gate.to_double();
  for (std::size_t e = 0; e < g32.size(); ++e) mean[e / static_cast<std::size_t>(p.DK)] += g32[e] / double(p.DK);
  const Tensor mean_gate = Tensor::from_double(DType::f64, gate_shape(p, GateKind::per_token), mean);
  BackwardConfig scalar;
  scalar.gate = GateKind::per_token;
  const BackwardOutput averaged =
      run_backward(p, scalar, c.in.q, c.in.k, c.in.v, &c.fw.h, &c.in.initial_state, c.d_o, &c.dht, &mean_gate);
  const std::vector<double> q = c.in.q.to_double(), k = c.in.k.to_double(), v = c.in.v.to_double(),
                            s0 = c.in.initial_state.to_double(), go = c.d_o.to_double(), gh = c.dht.to_double();
  const reference::ChannelGatedGradients ref =
      reference::gla_backward_chunked(p, {q, k, v, &s0}, reference::ChannelGate{g32}, {go, &gh});
  EXPECT_GT(relative_l2(averaged.dk.to_double(), ref.dk), 0.05);
  const BackwardOutput channels = run_backward(p, channel_config(paths().back(), false), c.in.q, c.in.k, c.in.v,
                                               &c.fw.h, &c.in.initial_state, c.d_o, &c.dht, &c.gate);
  EXPECT_LE(relative_l2(channels.dk.to_double(), ref.dk), 1e-12);
  EXPECT_LE(relative_l2(channels.dg.to_double(), ref.dgk), 1e-11);
}

// The tensor-core backward takes gk (tensor_core_backward.hpp): asked for, it
// runs; auto chooses it on CUDA wherever it chooses it without gk.
TEST(ChannelGatedBackward, TensorCoresTakeGk) {
  BackwardPathFacts f;
  f.backend = Backend::cuda;
  f.input = DType::bf16;
  f.gated = true;
  f.channel_gated = true;
  f.requested = GemmPath::tensor_core;
  EXPECT_TRUE(choose_backward_path(f).ok()) << choose_backward_path(f).refusal;
  f.requested = GemmPath::automatic;
  EXPECT_EQ(choose_backward_path(f).path, GemmPath::tensor_core);
  f.input = DType::f32;
  EXPECT_EQ(choose_backward_path(f).path, GemmPath::tensor_core);
  f.input = DType::f64;  // no tensor cores for fp64: the TeamPolicy kernel
  EXPECT_EQ(choose_backward_path(f).path, GemmPath::kokkos_kernels);
}

}  // namespace
}  // namespace linattn
