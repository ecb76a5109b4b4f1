// The gated forward (levels 2 and 3) on the tensor-core kernel
// (cuda/fused_tensor_core_kernel.hpp, its gated instantiation): RetNet's per-head
// gammas and per-token decays strong, weak and moderate; bf16, fp16 and fp32
// inputs; o in the input type or fp32, h in bf16 or the accumulation type;
// head sizes that fill the tiles and ones padded on chip, DK != DV; plain and
// packed batches (lengths 1, 63, 64, 65, 300) with initial states; outputs
// poisoned first, the path asserted: o, h and final_state against the fp64
// gated reference at the levels verify uses (core/accuracy_levels.hpp); split
// sequences (segments forced) likewise. Skipped where the build has no tensor cores.
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "reference/gated.hpp"
#include "tensor_core_cases.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace linattn {
namespace {

using testing::kHaveTensorCores;

reference::Gate reference_gate(const testing::GateCase& g, const Tensor& values) {
  return g.kind == GateKind::per_head ? reference::Gate::per_head(values.to_double())
                                      : reference::Gate::per_token(values.to_double());
}

// Returns the segments per sequence the launcher used.
int expect_tensor_core_gated(const Problem& p, const testing::GateCase& g, DType dtype, bool fp32_out,
                             SnapshotMode snaps, bool with_state, std::uint64_t seed, int segments = 1) {
  ForwardConfig cfg = testing::tensor_cores(segments, 0, fp32_out, snaps, false);
  cfg.gate = g.kind;
  cfg.poison_outputs = true;
  SCOPED_TRACE(g.name + " " + testing::describe(p, cfg, dtype, with_state));
  const ProblemInputs in = random_inputs(p, dtype, seed, with_state);
  const Tensor gate = Tensor::from_double(DType::f32, gate_shape(p, g.kind), g.values);
  const ForwardOutput out = run_forward(p, cfg, in.q, in.k, in.v, with_state ? &in.initial_state : nullptr, nullptr, &gate);
  EXPECT_EQ(out.gemm, GemmPath::tensor_core);
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                            s0 = in.initial_state.to_double();
  const reference::Result ref =
      reference::gated_chunked(p, {q, k, v, with_state ? &s0 : nullptr}, reference_gate(g, gate));
  const double o_level = output_level(dtype, out.o.dtype, false) + tensor_core_split_level(dtype);
  EXPECT_LE(relative_l2(out.o.to_double(), ref.o), o_level) << "o";
  EXPECT_LE(relative_l2(out.h.to_double(), ref.h), stored_level(dtype, out.h.dtype)) << "h";
  EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), stored_level(dtype, out.final_state.dtype))
      << "final_state";
  return out.segments;
}

TEST(TensorCoreGated, EveryHeadSizeTypeAndGateMatchesReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "no tensor-core kernel in this build";
  const Problem problems[] = {testing::plain_problem(2, 300, 2, 64, 64), testing::plain_problem(1, 200, 2, 128, 128),
                              testing::plain_problem(1, 130, 2, 32, 48), testing::plain_problem(1, 129, 2, 96, 96),
                              testing::plain_problem(1, 100, 2, 60, 20), testing::plain_problem(1, 70, 2, 256, 256),
                              testing::plain_problem(1, 90, 2, 128, 64), testing::plain_problem(1, 65, 1, 64, 256),
                              testing::packed_problem({1, 63, 64, 65, 300}, 2, 64, 64)};
  std::uint64_t seed = 29000;
  for (const Problem& p : problems)
    for (const testing::GateCase& g : testing::gate_cases(p, seed))
      for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
        ++seed;
        expect_tensor_core_gated(p, g, dtype, false, SnapshotMode::bf16, true, seed);
        expect_tensor_core_gated(p, g, dtype, true, SnapshotMode::accumulation, false, seed);
      }
}

// Split sequences (segments forced): each segment starts from the earlier
// segments' sums decayed through the segments after them (segment_sums.hpp).
// Weak decays and RetNet's gammas carry the state across segments, so a
// missing or wrong segment decay shows at every level; packed batches cut
// every sequence of more than one chunk. The segments used are asserted.
TEST(TensorCoreGated, SplitSequencesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "no tensor-core kernel in this build";
  struct Split {
    Problem p;
    int segments;  // asked, and used: plain split_segments, packed the most-split sequence
  };
  const Split splits[] = {{testing::plain_problem(1, 1100, 2, 64, 64), 2},
                          {testing::plain_problem(1, 1100, 2, 64, 64), 5},  // 18 chunks: 4, 4, 4, 4, 2
                          {testing::plain_problem(2, 600, 2, 100, 48), 3},  // padded on chip
                          {testing::plain_problem(1, 700, 2, 128, 128), 4},
                          {testing::plain_problem(1, 600, 1, 256, 64), 2},
                          {testing::packed_problem({1, 63, 700, 65, 1300}, 2, 64, 96), 4}};
  std::uint64_t seed = 29500;
  for (const Split& sp : splits)
    for (const testing::GateCase& g : testing::gate_cases(sp.p, seed))
      for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
        ++seed;
        EXPECT_EQ(expect_tensor_core_gated(sp.p, g, dtype, false, SnapshotMode::bf16, true, seed, sp.segments),
                  sp.segments);
        EXPECT_EQ(expect_tensor_core_gated(sp.p, g, dtype, true, SnapshotMode::accumulation, true, seed, sp.segments),
                  sp.segments);
      }
}

}  // namespace
}  // namespace linattn
