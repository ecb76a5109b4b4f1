// The gated backward (levels 2 and 3) on the TeamPolicy kernel
// (kernels/fused_backward.hpp): kokkoskernels (and hosttile on host backends),
// fp64, fp32, bf16 and fp16, RetNet's per-head gammas and per-token decays
// strong, weak and moderate, plain and packed batches (lengths 1, 63, 64, 65,
// 300), initial states, dht, snapshots in the accumulation type, in bf16 or
// recomputed, DK != DV, chunks 16 and 64, outputs poisoned first: dq, dk, dv,
// dh0 and the gate's gradient (dg per token, dg_gamma per head) against the
// fp64 chunked reference (reference/gated.hpp, itself checked against central
// differences). A gate of zeros gives level 1's bits; bad gates are refused.
// On CUDA builds the same checks run on the tensor-core backward
// (cuda/gate_gradient.hpp) at its levels: bf16, fp16 and fp32, heads of the
// whole-head and the tiled chunk kernels up to DK 256, DV 512.
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "gated_checks.hpp"
#include "kernels/backward.hpp"
#include "kernels/execution.hpp"
#include "kernels/forward.hpp"
#include "reference/gated.hpp"
#include "tensor_core_cases.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace linattn {
namespace {

using testing::packed;
using testing::problem;

std::vector<GemmPath> paths() { return testing::team_policy_paths(); }

using Case = testing::GatedBackwardCase;

// Inputs, the gate in fp32 (as files hold it), and the gated forward's snapshots.
Case make_case(const Problem& p, const testing::GateCase& g, DType dtype, SnapshotMode snaps, std::uint64_t seed,
               bool with_state = true) {
  Case c;
  c.in = random_inputs(p, dtype, seed, true);
  c.d_o = random_tensor(dtype, p.v_shape(), derive_seed(seed, 7));
  c.dht = random_tensor(accumulation_dtype(dtype), p.state_shape(), derive_seed(seed, 8));
  c.gate = Tensor::from_double(DType::f32, gate_shape(p, g.kind), g.values);
  ForwardConfig fc;
  fc.snapshots = snaps;
  fc.gate = g.kind;
  c.fw = run_forward(p, fc, c.in.q, c.in.k, c.in.v, with_state ? &c.in.initial_state : nullptr, nullptr, &c.gate);
  return c;
}


// ||dg - ref.dg|| / ||m||, m_t = sum_{i >= t in t's chunk} (|q_i| |dq_i| + |k_i| |dk_i|) + |D_c|,
// the magnitudes of the terms dg_t sums (README.md "Gated levels"), D_c the chunk's state dot
// (ref.dg at its last token less that token's own term), from the fp64 reference gradients.
double error_against_terms(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                           const reference::GatedGradients& ref, const std::vector<double>& dg) {
  const std::int64_t H = p.H, DK = p.DK;
  std::vector<std::int64_t> starts;  // token rows where sequences start, in [B * T] rows, and the end
  if (p.varlen()) starts = p.cu_seqlens;
  else
    for (std::int64_t b = 0; b <= p.B; ++b) starts.push_back(b * p.T);
  auto dot = [&](const std::vector<double>& x, const std::vector<double>& y, std::int64_t t, std::int64_t h, bool abs) {
    double s = 0, nx = 0, ny = 0;
    for (std::int64_t d = 0; d < DK; ++d) {
      const double a = x[(t * H + h) * DK + d], b = y[(t * H + h) * DK + d];
      s += a * b;
      nx += a * a;
      ny += b * b;
    }
    return abs ? std::sqrt(nx * ny) : s;
  };
  double err = 0, mag = 0;
  for (std::size_t n = 0; n + 1 < starts.size(); ++n)
    for (std::int64_t c0 = starts[n]; c0 < starts[n + 1]; c0 += p.chunk) {
      const std::int64_t last = std::min(c0 + p.chunk, starts[n + 1]) - 1;
      for (std::int64_t h = 0; h < H; ++h) {
        const double own = dot(q, ref.dq, last, h, false) - dot(k, ref.dk, last, h, false);
        double m = std::abs(ref.dg[last * H + h] - own);
        for (std::int64_t t = last; t >= c0; --t) {
          m += dot(q, ref.dq, t, h, true) + dot(k, ref.dk, t, h, true);
          const double e = dg[t * H + h] - ref.dg[t * H + h];
          err += e * e;
          mag += m * m;
        }
      }
    }
  return std::sqrt(err / mag);
}

void expect_gated_backward_matches(const Problem& p, const testing::GateCase& g, DType dtype, GemmPath path,
                                   SnapshotMode snaps, bool recompute, bool with_state, bool with_dht,
                                   std::uint64_t seed) {
  const Case c = make_case(p, g, dtype, snaps, seed, with_state);
  BackwardConfig bc;
  bc.gemm = path;
  bc.recompute_h = recompute;
  bc.poison_outputs = true;
  bc.gate = g.kind;
  const BackwardOutput out = run_backward(p, bc, c.in.q, c.in.k, c.in.v, recompute ? nullptr : &c.fw.h,
                                          with_state ? &c.in.initial_state : nullptr, c.d_o,
                                          with_dht ? &c.dht : nullptr, &c.gate);
  const std::vector<double> q = c.in.q.to_double(), k = c.in.k.to_double(), v = c.in.v.to_double(),
                            s0 = c.in.initial_state.to_double(), go = c.d_o.to_double(), gh = c.dht.to_double();
  const reference::Gate gate = g.kind == GateKind::per_head ? reference::Gate::per_head(c.gate.to_double())
                                                            : reference::Gate::per_token(c.gate.to_double());
  const reference::GatedGradients ref = reference::gated_backward(
      p, {q, k, v, with_state ? &s0 : nullptr}, gate, {go, with_dht ? &gh : nullptr});
  SCOPED_TRACE(g.name + " " + dtype_name(dtype) + " " + gemm_path_name(out.gemm) + " T=" + std::to_string(p.T) +
               " C=" + std::to_string(p.chunk) + " N=" + std::to_string(p.num_sequences()) +
               (with_state ? " s0" : "") + (with_dht ? " dht" : "") +
               (recompute ? " recomputed h" : snaps == SnapshotMode::bf16 ? " bf16 h" : " acc h"));
  EXPECT_EQ(out.gemm, path);
  const bool bf16_h = !recompute && snaps == SnapshotMode::bf16;
  const DType stored = out.dq.dtype;
  // The tensor-core backward rounds its operands once each (accuracy_levels.hpp), as verify allows.
  const bool tc = path == GemmPath::tensor_core;
  const double operands = tc ? tensor_core_backward_level(dtype) : 0.0;
  const double dg_level = tc ? tensor_core_gate_gradient_level(dtype, bf16_h) : gate_gradient_level(dtype, bf16_h);  // dg_gamma
  EXPECT_LE(relative_l2(out.dq.to_double(), ref.dq), output_level(dtype, stored, bf16_h) + operands) << "dq";
  EXPECT_LE(relative_l2(out.dk.to_double(), ref.dk), stored_level(dtype, stored) + operands) << "dk";
  EXPECT_LE(relative_l2(out.dv.to_double(), ref.dv), stored_level(dtype, stored) + operands) << "dv";
  EXPECT_LE(relative_l2(out.dh0.to_double(), ref.dh0), stored_level(dtype, out.dh0.dtype)) << "dh0";
  ASSERT_EQ(out.dg.shape, (std::vector<std::int64_t>{p.B, p.T, p.H}));
  // dg_t sums terms q_i . dq_i - k_i . dk_i and a state dot within its chunk,
  // which cancel as the decay strengthens (at infinite decay dg is zero while
  // the terms are not). Where dq and dk carry the tensor cores' operand
  // errors, those bound dg's error by their level times the terms' magnitudes,
  // whatever dg's own size (bf16 snapshots add their rounding of the state, as
  // on the portable path); the portable path's exact fp32 products keep dg
  // itself at gate_gradient_level.
  if (tc) {
    EXPECT_LE(error_against_terms(p, q, k, ref, out.dg.to_double()), tensor_core_gate_terms_level(dtype, stored, bf16_h))
        << "dg against its terms' magnitudes";
    // For the record (docs/NUMERICS.md): dg's error relative to itself, where cancellation may lift it.
    if (dtype == DType::f32)
      std::printf("[ dg fp32 ] %s%s: against terms %.2e, relative to dg %.2e\n", g.name.c_str(),
                  bf16_h ? " bf16 h" : "", error_against_terms(p, q, k, ref, out.dg.to_double()),
                  relative_l2(out.dg.to_double(), ref.dg));
  } else
    EXPECT_LE(relative_l2(out.dg.to_double(), ref.dg), dg_level) << "dg";
  if (g.kind == GateKind::per_head) {
    ASSERT_EQ(out.dg_gamma.shape, (std::vector<std::int64_t>{p.H}));
    EXPECT_LE(relative_l2(out.dg_gamma.to_double(), ref.dg_gamma), dg_level) << "dg_gamma";
  } else {
    EXPECT_TRUE(out.dg_gamma.empty());
  }
}

TEST(GatedBackward, EveryPathTypeAndGateMatchesReference) {
  const Problem problems[] = {problem(2, 150, 2, 16, 24, 64), packed({1, 63, 64, 65, 300}, 2, 8, 12, 64),
                              problem(1, 70, 3, 12, 8, 16)};
  std::uint64_t seed = 28000;
  for (const Problem& p : problems)
    for (const testing::GateCase& g : testing::gate_cases(p, seed))
      for (GemmPath path : paths())
        for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
          ++seed;
          expect_gated_backward_matches(p, g, dtype, path, SnapshotMode::accumulation, false, true, true, seed);
          expect_gated_backward_matches(p, g, dtype, path, SnapshotMode::accumulation, false, false, false, seed);
        }
}

TEST(GatedBackward, SnapshotsReadAsBf16OrRecomputed) {
  const Problem p = packed({1, 63, 64, 65, 130}, 2, 16, 24, 32);
  std::uint64_t seed = 28500;
  for (const testing::GateCase& g : testing::gate_cases(p, seed)) {
    expect_gated_backward_matches(p, g, DType::bf16, GemmPath::kokkos_kernels, SnapshotMode::bf16, false, true, true, ++seed);
    expect_gated_backward_matches(p, g, DType::f32, GemmPath::kokkos_kernels, SnapshotMode::none, true, true, true, ++seed);
  }
}

// The gated tensor-core backward: whole-head chunk kernels (DK, DV in {64,
// 128}) and tiled ones (every other head, fp32 inputs always), with and
// without initial state and dht, bf16 or accumulation-type snapshots.
TEST(GatedBackward, TensorCoresMatchReference) {
  if (!testing::kHaveTensorCores) GTEST_SKIP() << "no tensor-core backward in this build";
  const Problem problems[] = {problem(2, 300, 2, 64, 64, 64),  problem(1, 200, 2, 128, 128, 64),
                              problem(1, 150, 2, 128, 64, 64), problem(1, 130, 2, 96, 96, 64),
                              problem(1, 100, 2, 60, 20, 64),  problem(1, 70, 1, 256, 512, 64),
                              packed({1, 63, 64, 65, 300}, 2, 64, 64, 64), packed({1, 63, 64, 65, 300}, 2, 48, 80, 64),
                              problem(1, 70, 16, 256, 256, 64)};  // 128 walk blocks of 32 columns (state_gradient_block)
  std::uint64_t seed = 28300;
  for (const Problem& p : problems)
    for (const testing::GateCase& g : testing::gate_cases(p, seed))
      for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
        ++seed;
        expect_gated_backward_matches(p, g, dtype, GemmPath::tensor_core, SnapshotMode::bf16, false, true, true, seed);
        expect_gated_backward_matches(p, g, dtype, GemmPath::tensor_core, SnapshotMode::accumulation, false, false,
                                      false, seed);
      }
}

// log-decays of zero multiply by exp(0) = 1 exactly: level 1's bits.
TEST(GatedBackward, ZeroGateGivesLevelOneBits) {
  const Problem p = packed({1, 63, 64, 65, 130}, 2, 16, 24, 64);
  for (GateKind kind : {GateKind::per_head, GateKind::per_token})
    for (GemmPath path : paths()) {
      SCOPED_TRACE(std::string(gate_dataset_name(kind)) + " " + gemm_path_name(path));
      testing::GateCase zero{"zero", kind, std::vector<double>(static_cast<std::size_t>(kind == GateKind::per_head ? p.H : p.T * p.H), 0.0)};
      const Case c = make_case(p, zero, DType::f32, SnapshotMode::accumulation, 28700);
      BackwardConfig level1;
      level1.gemm = path;
      BackwardConfig gated = level1;
      gated.gate = kind;
      const BackwardOutput a = run_backward(p, level1, c.in.q, c.in.k, c.in.v, &c.fw.h, &c.in.initial_state, c.d_o, &c.dht);
      const BackwardOutput b =
          run_backward(p, gated, c.in.q, c.in.k, c.in.v, &c.fw.h, &c.in.initial_state, c.d_o, &c.dht, &c.gate);
      for (const auto& [name, x, y] : {std::tuple<const char*, const Tensor*, const Tensor*>{"dq", &a.dq, &b.dq},
                                       {"dk", &a.dk, &b.dk}, {"dv", &a.dv, &b.dv}, {"dh0", &a.dh0, &b.dh0}})
        EXPECT_TRUE(x->bytes == y->bytes) << name;
    }
}

// The decay matters: the level-1 backward of the gated forward's inputs is far from the gated reference.
TEST(GatedBackward, IgnoringTheGateIsCaught) {
  const Problem p = problem(1, 200, 2, 16, 16, 64);
  const testing::GateCase g = testing::gate_cases(p, 28800)[3];
  const Case c = make_case(p, g, DType::f64, SnapshotMode::accumulation, 28801);
  const BackwardOutput level1 = run_backward(p, BackwardConfig{}, c.in.q, c.in.k, c.in.v, &c.fw.h, nullptr, c.d_o, &c.dht);
  const std::vector<double> q = c.in.q.to_double(), k = c.in.k.to_double(), v = c.in.v.to_double(),
                            go = c.d_o.to_double(), gh = c.dht.to_double();
  const reference::GatedGradients ref =
      reference::gated_backward(p, {q, k, v, nullptr}, reference::Gate::per_token(c.gate.to_double()), {go, &gh});
  EXPECT_GT(relative_l2(level1.dk.to_double(), ref.dk), 0.1);
  EXPECT_TRUE(level1.dg.empty());
}

TEST(GatedBackward, BadGatesAreRefused) {
  const Problem p = problem(1, 64, 2, 64, 64, 64);
  const testing::GateCase g = testing::gate_cases(p, 28900)[1];
  const Case c = make_case(p, g, DType::bf16, SnapshotMode::bf16, 28901);
  auto message = [&](BackwardConfig bc, const Tensor* gate) {
    try {
      run_backward(p, bc, c.in.q, c.in.k, c.in.v, &c.fw.h, nullptr, c.d_o, nullptr, gate);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  BackwardConfig bc;
  bc.gate = GateKind::per_token;
  EXPECT_NE(message(bc, nullptr).find("the gate 'g' is missing"), std::string::npos);
  const Tensor positive = Tensor::from_double(DType::f32, {1, 64, 2}, std::vector<double>(128, 0.25));
  EXPECT_NE(message(bc, &positive).find("finite, <= 0 and >= -1e36"), std::string::npos);
  const Tensor wrong = Tensor::from_double(DType::f32, {1, 64, 3}, std::vector<double>(192, -0.25));
  EXPECT_FALSE(message(bc, &wrong).empty());
  EXPECT_NE(message(BackwardConfig{}, &c.gate).find("the configuration has no gate"), std::string::npos);
}

}  // namespace
}  // namespace linattn
