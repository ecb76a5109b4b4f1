// The gated forward (levels 2 and 3: kernels/chunk_gate.hpp, the gate as a
// policy of the chunk steps) on the TeamPolicy kernels and the register-blocked
// kernels (kernels/register_gate.hpp): every variant on kokkoskernels (and
// hosttile on host backends), fused and materialized on registers, fp64, fp32,
// bf16 and fp16, RetNet's per-head gammas and per-token decays strong, weak and
// moderate, plain and packed batches (lengths 1, 63, 64, 65, 300), initial
// states, DK != DV (and heads that are not whole register tiles), chunks 16
// and 64, outputs poisoned first: o, h and final_state against the fp64
// chunked reference (reference/gated.hpp) at the levels of
// core/accuracy_levels.hpp. A gate of zeros gives level 1's bits; bad gates
// are refused. On CUDA builds the same tests run the kokkoskernels and
// registers paths (the gated tensor-core forward: test_tensor_core_gated.cpp).
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "gated_checks.hpp"
#include "kernels/execution.hpp"
#include "kernels/forward.hpp"
#include "reference/gated.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace linattn {
namespace {

using testing::packed;
using testing::problem;

using TestGate = testing::GateCase;
using testing::gate_cases;

reference::Gate reference_gate(const TestGate& g) {
  return g.kind == GateKind::per_head ? reference::Gate::per_head(g.values) : reference::Gate::per_token(g.values);
}

Tensor gate_tensor(const Problem& p, const TestGate& g) {
  return Tensor::from_double(DType::f32, gate_shape(p, g.kind), g.values);  // the HDF5 contract's fp32
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.shape == b.shape && a.dtype == b.dtype && a.bytes == b.bytes; }

// The tile-product paths that run `variant` on this backend.
std::vector<GemmPath> paths(Variant variant) {
  std::vector<GemmPath> v = {GemmPath::kokkos_kernels};
  if (host_execution)
    v.push_back(GemmPath::host_tile);
  if (variant == Variant::fused || variant == Variant::materialized) v.push_back(GemmPath::registers);
  return v;
}

// One gated run against the reference; returns its output.
ForwardOutput expect_gated_matches(const Problem& p, Variant variant, GemmPath path, DType dtype, const TestGate& g,
                                   bool with_state, std::uint64_t seed) {
  const ProblemInputs in = random_inputs(p, dtype, seed, with_state);
  const Tensor gate = gate_tensor(p, g);
  ForwardConfig cfg;
  cfg.variant = variant;
  cfg.gemm = path;
  cfg.gate = g.kind;
  cfg.poison_outputs = true;
  const ForwardOutput out =
      run_forward(p, cfg, in.q, in.k, in.v, with_state ? &in.initial_state : nullptr, nullptr, &gate);
  // The reference reads the gate as the kernels do: rounded to fp32 once.
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                            s0 = in.initial_state.to_double();
  TestGate g32 = g;
  g32.values = gate.to_double();
  const reference::Result ref =
      reference::gated_chunked(p, {q, k, v, with_state ? &s0 : nullptr}, reference_gate(g32));
  SCOPED_TRACE(std::string(variant_name(variant)) + " " + gemm_path_name(out.gemm) + " " + dtype_name(dtype) + " " +
               g.name + (p.varlen() ? " packed" : "") + (with_state ? " with initial state" : "") + " C=" +
               std::to_string(p.chunk) + " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV));
  testing::expect_gated_forward_matches(out, ref, dtype, path);
  return out;
}

TEST(GatedKernels, EveryVariantPathAndTypeMatchesReference) {
  // The last two: heads that are not whole 4 x 4 register tiles, packed at chunk 16.
  const Problem problems[] = {problem(2, 150, 2, 16, 24, 64), packed({1, 63, 64, 65, 300}, 2, 8, 12, 64),
                              problem(1, 70, 3, 12, 8, 16), packed({1, 63, 64, 65, 300}, 1, 10, 6, 16)};
  std::uint64_t seed = 27000;
  for (const Problem& p : problems)
    for (const TestGate& g : gate_cases(p, seed))
      for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent})
        for (GemmPath path : paths(variant))
          for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16})
            for (bool with_state : {false, true}) expect_gated_matches(p, variant, path, dtype, g, with_state, ++seed);
}

// log-decays of zero are exp(0) = 1 everywhere: the chunked kernels then
// multiply by exactly 1, and give level 1's bits.
TEST(GatedKernels, ZeroGateGivesLevelOneBits) {
  const Problem p = packed({1, 63, 64, 65, 130}, 2, 16, 24, 64);
  for (GateKind kind : {GateKind::per_head, GateKind::per_token})
    for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute})
      for (GemmPath path : paths(variant)) {
        SCOPED_TRACE(std::string(variant_name(variant)) + " " + gemm_path_name(path) + " " + gate_dataset_name(kind));
        const ProblemInputs in = random_inputs(p, DType::f32, 27500, true);
        const std::vector<std::int64_t> shape = gate_shape(p, kind);
        std::int64_t n = 1;
        for (std::int64_t d : shape) n *= d;
        const Tensor zero = Tensor::from_double(DType::f32, shape, std::vector<double>(static_cast<std::size_t>(n), 0.0));
        ForwardConfig level1;
        level1.variant = variant;
        level1.gemm = path;
        ForwardConfig gated = level1;
        gated.gate = kind;
        const ForwardOutput a = run_forward(p, level1, in.q, in.k, in.v, &in.initial_state);
        const ForwardOutput b = run_forward(p, gated, in.q, in.k, in.v, &in.initial_state, nullptr, &zero);
        EXPECT_TRUE(same_bits(a.o, b.o)) << "o";
        EXPECT_TRUE(same_bits(a.h, b.h)) << "h";
        EXPECT_TRUE(same_bits(a.final_state, b.final_state)) << "final_state";
      }
}

// The decay matters: the same inputs without their gate are far from the gated reference.
TEST(GatedKernels, IgnoringTheGateIsCaught) {
  const Problem p = problem(1, 200, 2, 16, 16, 64);
  const TestGate g = gate_cases(p, 27600)[3];
  const ProblemInputs in = random_inputs(p, DType::f64, 27601, false);
  ForwardConfig cfg;
  const ForwardOutput level1 = run_forward(p, cfg, in.q, in.k, in.v);
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double();
  TestGate g32 = g;
  g32.values = gate_tensor(p, g).to_double();
  const reference::Result ref = reference::gated_chunked(p, {q, k, v}, reference_gate(g32));
  EXPECT_GT(relative_l2(level1.o.to_double(), ref.o), 0.1);
}

TEST(GatedKernels, BadGatesAreRefused) {
  const Problem p = problem(1, 10, 2, 4, 4, 16);
  const ProblemInputs in = random_inputs(p, DType::f32, 27700, false);
  ForwardConfig cfg;
  cfg.gate = GateKind::per_token;
  std::vector<double> g(static_cast<std::size_t>(p.B * p.T * p.H), -0.5);
  auto run_with = [&](const std::vector<double>& values, const std::vector<std::int64_t>& shape) {
    const Tensor t = Tensor::from_double(DType::f32, shape, values);
    return run_forward(p, cfg, in.q, in.k, in.v, nullptr, nullptr, &t);
  };
  auto message = [&](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NO_THROW(run_with(g, {1, 10, 2}));
  g[7] = 0.25;
  EXPECT_NE(message([&] { run_with(g, {1, 10, 2}); }).find("element 7"), std::string::npos);
  g[7] = std::nan("");
  EXPECT_NE(message([&] { run_with(g, {1, 10, 2}); }).find("element 7"), std::string::npos);
  g[7] = -0.5;
  EXPECT_NE(message([&] { run_with(std::vector<double>(20, -0.5), {1, 20}); }).find("g"), std::string::npos);
  EXPECT_NE(message([&] { run_forward(p, cfg, in.q, in.k, in.v); }).find("missing"), std::string::npos);
  cfg.normalize = true;
  EXPECT_NE(message([&] { run_with(g, {1, 10, 2}); }).find("normalize with a gate"), std::string::npos);
  cfg.normalize = false;
  cfg.gemm = GemmPath::registers;  // the register-blocked kernels take a gate, and check it as every path does
  EXPECT_EQ(run_with(g, {1, 10, 2}).gemm, GemmPath::registers);
  g[7] = 0.25;
  EXPECT_NE(message([&] { run_with(g, {1, 10, 2}); }).find("element 7"), std::string::npos);
  g[7] = -0.5;
  cfg.gemm = GemmPath::tensor_core;  // chunk 16: never on tensor cores, gated or not
  EXPECT_NE(message([&] { run_with(g, {1, 10, 2}); }).find("not available"), std::string::npos);
}

}  // namespace
}  // namespace linattn
