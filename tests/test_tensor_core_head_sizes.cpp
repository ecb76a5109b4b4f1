// The tensor-core forward on every head size up to DK 256 and DV 512
// (src/kernels/cuda/tile_rules.hpp: DK zero-padded on chip to a tile of 64,
// 128 or 256, DV to blocks of 32, 64 or 128 columns), against the fp64
// reference (forward_check.hpp: o, h, final_state and z_state, outputs
// poisoned first): plain and packed batches, initial states, forced segments,
// every output and snapshot type, normalization, explicit block widths. CUDA
// builds only: elsewhere these tests report themselves skipped (the portable
// paths run the same shapes in test_kernels.cpp and test_varlen.cpp).
#include "forward_check.hpp"
#include "tensor_core_cases.hpp"

#include <gtest/gtest.h>

namespace linattn {
namespace {

using testing::describe;
using testing::kHaveTensorCores;
using testing::tensor_cores;
constexpr auto& plain = testing::plain_problem;
constexpr auto& packed = testing::packed_problem;

// The head sizes of issue 25's list, each in a ragged T: padded DK (16, 32,
// 48, 60, 96, 100, 192, 250), padded DV (20, 48, 60, 100), DK != DV, rows
// that start off 16 bytes (60, 100: 8-byte copies; 250: 4-byte; 1: element
// by element), the 256 tile exactly (256 x 256, 256 x 512), and DK = DV = 1.
TEST(TensorCoreHeadSizes, PlainBatchesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {plain(2, 130, 2, 16, 16),  plain(1, 200, 2, 32, 96),   plain(2, 129, 2, 48, 20),
                              plain(1, 150, 3, 60, 60),  plain(2, 100, 2, 96, 96),   plain(1, 130, 2, 100, 60),
                              plain(1, 200, 2, 192, 48), plain(1, 140, 1, 256, 256), plain(1, 70, 1, 256, 512),
                              plain(1, 100, 2, 250, 100), plain(1, 65, 1, 1, 1)};
  std::uint64_t seed = 2500;
  for (const Problem& p : problems)
    for (DType dtype : {DType::bf16, DType::f16})
      for (bool state : {false, true}) {
        const ProblemInputs in = random_inputs(p, dtype, ++seed, state);
        for (int segments : {1, 2})
          for (bool fp32_out : {false, true})
            for (SnapshotMode snaps : {SnapshotMode::accumulation, SnapshotMode::bf16}) {
              const ForwardConfig cfg = tensor_cores(segments, 0, fp32_out, snaps, false);
              SCOPED_TRACE(describe(p, cfg, dtype, state));
              const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
              ASSERT_EQ(out.gemm, GemmPath::tensor_core);
              EXPECT_EQ(out.segments, segments);
            }
      }
}

// Packed sequences of 1, 63, 64, 65 and 300 tokens at padded head sizes, each
// from its own initial state, whole, forced into 3 segments, and as chosen.
TEST(TensorCoreHeadSizes, PackedBatchesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {packed({1, 63, 64, 65, 300}, 2, 100, 60), packed({65, 1, 300, 64, 63}, 1, 256, 96),
                              packed({300, 64, 1, 63, 65}, 2, 48, 130)};
  std::uint64_t seed = 2600;
  for (const Problem& p : problems)
    for (DType dtype : {DType::bf16, DType::f16})
      for (bool state : {false, true}) {
        const ProblemInputs in = random_inputs(p, dtype, ++seed, state);
        for (int segments : {0, 1, 3})
          for (bool fp32_out : {false, true}) {
            const ForwardConfig cfg = tensor_cores(segments, 0, fp32_out, SnapshotMode::bf16, false);
            SCOPED_TRACE(describe(p, cfg, dtype, state));
            const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
            ASSERT_EQ(out.gemm, GemmPath::tensor_core);
          }
      }
}

// Normalization divides in the same pass at padded head sizes: z's padded
// columns stay zero, z_state holds DK columns.
TEST(TensorCoreHeadSizes, NormalizedMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {plain(2, 200, 2, 60, 100), plain(1, 300, 2, 192, 64),
                              packed({1, 63, 64, 65, 300}, 2, 96, 48)};
  std::uint64_t seed = 2700;
  for (const Problem& p : problems)
    for (DType dtype : {DType::bf16, DType::f16})
      for (bool initial : {false, true}) {
        // Positive keys and queries, as feature maps give them: a denominator near 0 is not the test.
        const ProblemInputs in = random_inputs(p, dtype, ++seed, initial, true, initial);
        for (int segments : {1, 3}) {
          const ForwardConfig cfg = tensor_cores(segments, 0, false, SnapshotMode::bf16, true);
          SCOPED_TRACE(describe(p, cfg, dtype, initial));
          const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
          ASSERT_EQ(out.gemm, GemmPath::tensor_core);
        }
      }
}

// An explicit block width that does not divide DV: the last block's columns
// past DV are zero on chip and never stored.
TEST(TensorCoreHeadSizes, BlockWidthsNotDividingDvMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem p = plain(2, 150, 2, 128, 96);
  const Problem q = plain(1, 150, 2, 64, 60);
  std::uint64_t seed = 2800;
  for (const auto& [prob, block_dv] : {std::pair<Problem, std::int64_t>{p, 64}, {p, 128}, {q, 32}, {q, 128}}) {
    const ProblemInputs in = random_inputs(prob, DType::bf16, ++seed, true);
    for (bool fp32_out : {false, true}) {
      const ForwardConfig cfg = tensor_cores(1, block_dv, fp32_out, SnapshotMode::accumulation, false);
      SCOPED_TRACE(describe(prob, cfg, DType::bf16, true));
      const ForwardOutput out = testing::expect_matches_reference(prob, cfg, in);
      ASSERT_EQ(out.gemm, GemmPath::tensor_core);
      EXPECT_EQ(out.block_dv, block_dv);
    }
  }
}

}  // namespace
}  // namespace linattn
