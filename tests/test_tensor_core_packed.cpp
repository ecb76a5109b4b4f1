// The tensor-core fused kernel on packed batches (cu_seqlens) and with
// normalization in its own pass, against the fp64 reference (forward_check.hpp:
// o, h, final_state and z_state, outputs poisoned first). CUDA builds only:
// elsewhere the kernel does not exist and these tests report themselves
// skipped (the same batches on the portable paths: test_varlen.cpp,
// test_normalize.cpp).
#include "forward_check.hpp"
#include "tensor_core_cases.hpp"

#include <gtest/gtest.h>

namespace linattn {
namespace {

using testing::describe;
using testing::kHaveTensorCores;
using testing::packed_problem;

ForwardConfig tensor_cores(int segments, bool fp32_out, SnapshotMode snaps, bool normalize) {
  return testing::tensor_cores(segments, 0, fp32_out, snaps, normalize);
}

// Ragged lengths 1, 63, 64, 65 and 300 (chunks never cross a sequence, the
// last chunk of each is masked), every output and snapshot type, each
// sequence from its own initial state, whole and split.
TEST(TensorCorePacked, RaggedLengthsMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {packed_problem({1, 63, 64, 65, 300}, 2, 128, 128),
                              packed_problem({65, 1, 300, 64, 63}, 3, 64, 96)};
  std::uint64_t seed = 1300;
  for (const Problem& p : problems)
    for (DType dtype : {DType::bf16, DType::f16})
      for (bool state : {false, true}) {
        const ProblemInputs in = random_inputs(p, dtype, ++seed, state);
        for (int segments : {1, 3})
          for (bool fp32_out : {false, true})
            for (SnapshotMode snaps : {SnapshotMode::accumulation, SnapshotMode::bf16}) {
              const ForwardConfig cfg = tensor_cores(segments, fp32_out, snaps, false);
              SCOPED_TRACE(describe(p, cfg, dtype, state));
              const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
              ASSERT_EQ(out.gemm, GemmPath::tensor_core);
            }
      }
}

// One sequence holds 90% of the tokens: the automatic schedule splits it into
// segments (each starting from its sequence's initial state plus the sums of
// its earlier segments) and the results still match.
TEST(TensorCorePacked, OneSequenceWithNinetyPercentIsSplitAndMatches) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem p = packed_problem({200, 9000, 77, 600, 123}, 2, 128, 64);  // 9000 of 10,000 tokens
  for (bool state : {false, true}) {
    const ProblemInputs in = random_inputs(p, DType::bf16, state ? 1401 : 1400, state);
    for (bool fp32_out : {false, true}) {
      const ForwardConfig cfg = tensor_cores(0, fp32_out, SnapshotMode::bf16, false);
      SCOPED_TRACE(describe(p, cfg, DType::bf16, state));
      const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
      ASSERT_EQ(out.gemm, GemmPath::tensor_core);
      EXPECT_GT(out.segments, 1) << "the 141-chunk sequence should be split";
    }
  }
}

// Lengths 1000x apart, and the automatic path (no --gemm) takes tensor cores for packed batches.
TEST(TensorCorePacked, ThousandfoldLengthsOnTheAutomaticPath) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  std::vector<std::int64_t> lengths;
  for (int i = 0; i < 40; ++i) lengths.push_back(5 + 3 * i);
  lengths.push_back(8000);
  const Problem p = packed_problem(lengths, 4, 64, 64);
  const ProblemInputs in = random_inputs(p, DType::bf16, 1500, true);
  ForwardConfig cfg;
  cfg.snapshots = SnapshotMode::bf16;
  const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
  EXPECT_EQ(out.gemm, GemmPath::tensor_core);
}

// Normalization in the kernel's own pass: z0 + the running key sum, divided
// before o is stored, z_state after each sequence; plain and packed, whole and
// split, DK 64 and 128, every block width.
TEST(TensorCoreNormalize, PlainBatchesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  Problem p;
  p.chunk = 64;
  p.scale = 0.3;
  const std::int64_t shapes[][5] = {{2, 200, 3, 128, 128}, {1, 1000, 2, 64, 64}, {3, 129, 2, 64, 96}};
  std::uint64_t seed = 1600;
  for (const auto& s : shapes) {
    p.B = s[0]; p.T = s[1]; p.H = s[2]; p.DK = s[3]; p.DV = s[4];
    for (DType dtype : {DType::bf16, DType::f16})
      for (bool initial : {false, true}) {
        // Positive keys and queries, as fla's normalize is used (feature maps): a denominator near 0 is not the test.
        const ProblemInputs in = random_inputs(p, dtype, ++seed, initial, true, initial);
        for (int segments : {1, 3})
          for (std::int64_t block_dv : {0, 32, 64})
            for (bool fp32_out : {false, true}) {
              if (block_dv != 0 && p.DV % block_dv != 0) continue;
              ForwardConfig cfg = tensor_cores(segments, fp32_out, SnapshotMode::bf16, true);
              cfg.block_dv = block_dv;
              SCOPED_TRACE(describe(p, cfg, dtype, initial) + " block_dv " + std::to_string(block_dv));
              const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
              ASSERT_EQ(out.gemm, GemmPath::tensor_core);
            }
      }
  }
}

TEST(TensorCoreNormalize, PackedBatchesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem p = packed_problem({1, 63, 64, 65, 300, 2000}, 2, 128, 128);
  std::uint64_t seed = 1700;
  for (DType dtype : {DType::bf16, DType::f16})
    for (bool initial : {false, true}) {
      const ProblemInputs in = random_inputs(p, dtype, ++seed, initial, true, initial);
      for (int segments : {0, 1, 4}) {
        const ForwardConfig cfg = tensor_cores(segments, false, SnapshotMode::accumulation, true);
        SCOPED_TRACE(describe(p, cfg, dtype, initial));
        const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
        ASSERT_EQ(out.gemm, GemmPath::tensor_core);
      }
    }
}

}  // namespace
}  // namespace linattn
