// GLA's per-key-channel decay gk on the tensor-core forward (issue 28:
// cuda/channel_gate_prep.hpp, then the fused kernel's channel
// instantiation): weak, strong, moderate and mixed per-channel decays; bf16,
// fp16 and fp32 inputs; o in the input type or fp32, h in bf16 or the
// accumulation type; head sizes that fill the tiles and ones padded on chip,
// DK != DV up to 256 x 512; plain and packed batches (lengths 1, 63, 64, 65,
// 300) with and without initial states; decays at fp32's range; split
// sequences (forced segments, whose sums carry the decay per key channel);
// outputs poisoned first, the path and the segments asserted: o, h and
// final_state against the fp64 chunked reference (reference/channel_gated.hpp)
// at the levels of core/accuracy_levels.hpp. Skipped where the build has no
// tensor cores.
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "reference/channel_gated.hpp"
#include "tensor_core_cases.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace linattn {
namespace {

using testing::kHaveTensorCores;

ForwardOutput expect_tensor_core_channel_gated(const Problem& p, const testing::ChannelCase& g, DType dtype,
                                               bool fp32_out, SnapshotMode snaps, bool with_state, std::uint64_t seed,
                                               int segments = 0) {
  ForwardConfig cfg = testing::tensor_cores(segments, 0, fp32_out, snaps, false);
  cfg.gate = GateKind::per_channel;
  cfg.poison_outputs = true;
  SCOPED_TRACE(g.name + " " + testing::describe(p, cfg, dtype, with_state));
  const ProblemInputs in = random_inputs(p, dtype, seed, with_state);
  const Tensor gate = Tensor::from_double(DType::f32, gate_shape(p, GateKind::per_channel), g.gk);
  const ForwardOutput out =
      run_forward(p, cfg, in.q, in.k, in.v, with_state ? &in.initial_state : nullptr, nullptr, &gate);
  EXPECT_EQ(out.gemm, GemmPath::tensor_core);
  if (segments == 0) EXPECT_EQ(out.segments, 1);  // these few chunks: whole sequences
  else EXPECT_GT(out.segments, 1);
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                            s0 = in.initial_state.to_double();
  const reference::Result ref =
      reference::gla_chunked(p, {q, k, v, with_state ? &s0 : nullptr}, reference::ChannelGate{gate.to_double()});
  const double rounding = tensor_core_channel_level(dtype);
  EXPECT_LE(relative_l2(out.o.to_double(), ref.o), output_level(dtype, out.o.dtype, false) +
                                                       tensor_core_split_level(dtype) + 2 * rounding)
      << "o";
  EXPECT_LE(relative_l2(out.h.to_double(), ref.h), stored_level(dtype, out.h.dtype) + rounding) << "h";
  EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state),
            stored_level(dtype, out.final_state.dtype) + rounding)
      << "final_state";
  return out;
}

TEST(TensorCoreChannelGated, EveryHeadSizeTypeAndDecayMatchesReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "no tensor-core kernel in this build";
  const Problem problems[] = {testing::plain_problem(2, 300, 2, 64, 64), testing::plain_problem(1, 200, 2, 128, 128),
                              testing::plain_problem(1, 130, 2, 32, 48), testing::plain_problem(1, 129, 2, 96, 96),
                              testing::plain_problem(1, 100, 2, 60, 20), testing::plain_problem(1, 70, 2, 256, 256),
                              testing::plain_problem(1, 90, 2, 128, 64), testing::plain_problem(1, 65, 1, 64, 256),
                              testing::plain_problem(1, 80, 1, 256, 512),
                              testing::packed_problem({1, 63, 64, 65, 300}, 2, 64, 64),
                              testing::packed_problem({1, 63, 64, 65, 300}, 1, 48, 100)};
  std::uint64_t seed = 28700;
  for (const Problem& p : problems)
    for (const testing::ChannelCase& g : testing::channel_cases(p, seed += 10))
      for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
        ++seed;
        expect_tensor_core_channel_gated(p, g, dtype, false, SnapshotMode::bf16, true, seed);
        expect_tensor_core_channel_gated(p, g, dtype, true, SnapshotMode::accumulation, false, seed);
      }
}

// Split sequences: a segment starts from the earlier segments' own states,
// each decayed per key channel through the segments after it
// (cuda/segment_sums.hpp), plain and packed, with initial states.
TEST(TensorCoreChannelGated, SplitSequencesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "no tensor-core kernel in this build";
  const Problem problems[] = {testing::plain_problem(2, 1100, 2, 64, 64), testing::plain_problem(1, 700, 2, 128, 96),
                              testing::plain_problem(1, 600, 1, 256, 512),
                              testing::packed_problem({1, 63, 640, 65, 1300}, 2, 48, 100)};
  std::uint64_t seed = 28900;
  for (const Problem& p : problems)
    for (const testing::ChannelCase& g : testing::channel_cases(p, seed += 10))
      for (DType dtype : {DType::bf16, DType::f32})
        for (int segments : {2, 3, 5}) {
          ++seed;
          expect_tensor_core_channel_gated(p, g, dtype, true, SnapshotMode::accumulation, true, seed, segments);
        }
}

// Every factor is exp of a difference of cumulative sums (<= 0), so the only
// bound is fp32's range for a chunk's sum, here in log2 units (|b| log2(e) <
// FLT_MAX). gk at the lowest log-decay a run accepts on every token of some
// channels (a chunk's sum 64 * kLowestLogDecay = -6.4e37, 9.2e37 in log2
// units; decays_at_the_lowest_bound) gives finite outputs equal to the reference.
TEST(TensorCoreChannelGated, DecaysAtTheRangeOfFp32StayFiniteAndExact) {
  if (!kHaveTensorCores) GTEST_SKIP() << "no tensor-core kernel in this build";
  const Problem p = testing::packed_problem({1, 63, 64, 65, 130, 260}, 2, 64, 48);
  const std::vector<double> gk = testing::decays_at_the_lowest_bound(p, 28800);
  std::uint64_t seed = 28801;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const ForwardOutput out =
        expect_tensor_core_channel_gated(p, {"the lowest log-decays", gk}, dtype, true, SnapshotMode::accumulation, true, ++seed);
    for (double x : out.o.to_double()) ASSERT_TRUE(std::isfinite(x));
    for (double x : out.final_state.to_double()) ASSERT_TRUE(std::isfinite(x));
  }
}

}  // namespace
}  // namespace linattn
