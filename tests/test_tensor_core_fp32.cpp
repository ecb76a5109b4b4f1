// fp32 inputs on the tensor-core forward (src/kernels/cuda/mma_primitives.hpp,
// Elem<float>: fp32 tiles in shared memory, three TF32 products per
// product), against the fp64 reference at fp32's level (forward_check.hpp:
// 1e-5 relative L2 for o, h, final_state and z_state, outputs poisoned
// first): every head size up to DK 128 and DV 512, even ones up to DK 256
// as two halves of their keys, plain and packed batches,
// initial states, forced segments, fp32 and bf16 snapshots, normalization,
// explicit block widths, and the state pass. CUDA builds only: elsewhere
// these tests report themselves skipped.
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

// Exact tiles (64, 128) and padded ones (16, 32, 48, 60, 96, 100; DV 20,
// 100, 512), DK != DV, rows off 16 bytes (DK 30, DV 50: 8-byte copies; 1:
// 4-byte), each in a ragged T.
TEST(TensorCoreFp32, PlainBatchesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {plain(2, 130, 2, 64, 64),  plain(1, 200, 2, 128, 128), plain(2, 129, 2, 16, 16),
                              plain(1, 150, 2, 32, 96),  plain(2, 100, 2, 48, 20),   plain(1, 150, 3, 60, 60),
                              plain(1, 130, 2, 96, 512), plain(1, 140, 2, 100, 100), plain(1, 100, 2, 30, 50),
                              plain(1, 65, 1, 1, 1),     plain(1, 90, 2, 128, 64),   plain(1, 90, 2, 64, 128)};
  std::uint64_t seed = 3500;
  for (const Problem& p : problems)
    for (bool state : {false, true}) {
      const ProblemInputs in = random_inputs(p, DType::f32, ++seed, state);
      for (int segments : {1, 2})
        for (SnapshotMode snaps : {SnapshotMode::accumulation, SnapshotMode::bf16}) {
          const ForwardConfig cfg = tensor_cores(segments, 0, false, snaps, false);
          SCOPED_TRACE(describe(p, cfg, DType::f32, state));
          const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
          ASSERT_EQ(out.gemm, GemmPath::tensor_core);
          EXPECT_EQ(out.o.dtype, DType::f32);
          EXPECT_EQ(out.segments, segments);
        }
    }
}

// Packed sequences of 1, 63, 64, 65 and 300 tokens, each from its own
// initial state, whole, forced into 3 segments, and as chosen.
TEST(TensorCoreFp32, PackedBatchesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {packed({1, 63, 64, 65, 300}, 2, 128, 128), packed({65, 1, 300, 64, 63}, 2, 100, 60),
                              packed({300, 64, 1, 63, 65}, 2, 48, 130)};
  std::uint64_t seed = 3600;
  for (const Problem& p : problems)
    for (bool state : {false, true}) {
      const ProblemInputs in = random_inputs(p, DType::f32, ++seed, state);
      for (int segments : {0, 1, 3}) {
        const ForwardConfig cfg = tensor_cores(segments, 0, false, SnapshotMode::accumulation, false);
        SCOPED_TRACE(describe(p, cfg, DType::f32, state));
        const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
        ASSERT_EQ(out.gemm, GemmPath::tensor_core);
      }
    }
}

// Normalization divides in the same pass (plain and packed, segments).
TEST(TensorCoreFp32, NormalizedMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {plain(2, 200, 2, 64, 128), plain(1, 300, 2, 128, 64), plain(1, 150, 2, 60, 100),
                              packed({1, 63, 64, 65, 300}, 2, 96, 48)};
  std::uint64_t seed = 3700;
  for (const Problem& p : problems)
    for (bool initial : {false, true}) {
      // Positive keys and queries, as feature maps give them: a denominator near 0 is not the test.
      const ProblemInputs in = random_inputs(p, DType::f32, ++seed, initial, true, initial);
      for (int segments : {1, 3}) {
        const ForwardConfig cfg = tensor_cores(segments, 0, false, SnapshotMode::accumulation, true);
        SCOPED_TRACE(describe(p, cfg, DType::f32, initial));
        const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
        ASSERT_EQ(out.gemm, GemmPath::tensor_core);
      }
    }
}

// Every block width the fp32 tiles allow (DK 64: 32, 64, 128; DK 128: 32
// with groups of 16 columns, 64 with scores kept per group).
TEST(TensorCoreFp32, EveryBlockWidthMatchesReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  std::uint64_t seed = 3800;
  for (const auto& [p, block_dv] : {std::pair<Problem, std::int64_t>{plain(2, 150, 2, 64, 256), 32},
                                    {plain(2, 150, 2, 64, 256), 64},
                                    {plain(2, 150, 2, 64, 256), 128},
                                    {plain(1, 150, 2, 60, 96), 128},
                                    {plain(2, 150, 2, 128, 96), 32},
                                    {plain(2, 150, 2, 128, 96), 64},
                                    {plain(1, 150, 2, 100, 60), 64}}) {
    const ProblemInputs in = random_inputs(p, DType::f32, ++seed, true);
    const ForwardConfig cfg = tensor_cores(1, block_dv, false, SnapshotMode::accumulation, false);
    SCOPED_TRACE(describe(p, cfg, DType::f32, true));
    const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
    ASSERT_EQ(out.gemm, GemmPath::tensor_core);
    EXPECT_EQ(out.block_dv, block_dv);
  }
}

// Even heads past DK 128 run as two halves of their keys (tile_rules.hpp,
// fp32_key_parts; fused_tensor_core.hpp, run_fp32_key_halves): halves that
// fill their tiles (256) and padded ones (192: 96, 130: 65, 250: 125), DV
// from 17 (element-wise copies of v and sums of o) to 512, plain batches
// whole and forced into segments, packed ones whole, split and as chosen,
// fp32 and bf16 snapshots, with and without initial states, and the block
// widths a half's 128-row tile allows. The state and h rows of both halves
// are the head's, so h and final_state are checked whole.
TEST(TensorCoreFp32, KeyHalvesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {plain(2, 130, 2, 256, 256), plain(1, 200, 2, 192, 80), plain(1, 100, 2, 130, 512),
                              plain(1, 150, 3, 250, 64), plain(1, 129, 2, 256, 17)};
  std::uint64_t seed = 3950;
  for (const Problem& p : problems)
    for (bool state : {false, true}) {
      const ProblemInputs in = random_inputs(p, DType::f32, ++seed, state);
      for (int segments : {1, 2})  // 2 chunks or more each
        for (SnapshotMode snaps : {SnapshotMode::accumulation, SnapshotMode::bf16}) {
          const ForwardConfig cfg = tensor_cores(segments, 0, false, snaps, false);
          SCOPED_TRACE(describe(p, cfg, DType::f32, state));
          const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
          ASSERT_EQ(out.gemm, GemmPath::tensor_core);
          EXPECT_EQ(out.o.dtype, DType::f32);
          EXPECT_EQ(out.segments, segments);
        }
    }
  const Problem packed_problems[] = {packed({1, 63, 64, 65, 300}, 2, 256, 96), packed({300, 64, 1, 63, 65}, 1, 160, 48)};
  for (const Problem& p : packed_problems)
    for (bool state : {false, true}) {
      const ProblemInputs in = random_inputs(p, DType::f32, ++seed, state);
      for (int segments : {0, 1, 3}) {
        const ForwardConfig cfg = tensor_cores(segments, 0, false, SnapshotMode::accumulation, false);
        SCOPED_TRACE(describe(p, cfg, DType::f32, state));
        const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
        ASSERT_EQ(out.gemm, GemmPath::tensor_core);
      }
    }
  for (std::int64_t block_dv : {32, 64}) {
    const Problem p = plain(2, 150, 2, 256, 128);
    const ProblemInputs in = random_inputs(p, DType::f32, ++seed, true);
    const ForwardConfig cfg = tensor_cores(1, block_dv, false, SnapshotMode::accumulation, false);
    SCOPED_TRACE(describe(p, cfg, DType::f32, true));
    const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
    ASSERT_EQ(out.gemm, GemmPath::tensor_core);
    EXPECT_EQ(out.block_dv, block_dv);
  }
}

// Normalized fp32 heads past DK 128 divide by the whole head's q . z, which
// the key halves do not have: auto takes the portable kernels, still right.
TEST(TensorCoreFp32, NormalizedPastDk128TakesThePortableKernels) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem p = plain(1, 130, 2, 256, 64);
  const ProblemInputs in = random_inputs(p, DType::f32, 3990, true, true, true);
  ForwardConfig cfg = tensor_cores(0, 0, false, SnapshotMode::accumulation, true);
  cfg.gemm = GemmPath::automatic;
  const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
  EXPECT_NE(out.gemm, GemmPath::tensor_core);
}

// Long sequences: the state is carried over 64 chunks in fp32 (the
// accumulation rule of fused_tensor_core_kernel.hpp), still at fp32's level.
TEST(TensorCoreFp32, LongSequencesStayAtFp32Level) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem p = plain(1, 4096, 1, 128, 128);
  const ProblemInputs in = random_inputs(p, DType::f32, 3900, true);
  const ForwardConfig cfg = tensor_cores(1, 0, false, SnapshotMode::accumulation, false);
  const ForwardOutput out = testing::expect_matches_reference(p, cfg, in);
  ASSERT_EQ(out.gemm, GemmPath::tensor_core);
}

}  // namespace
}  // namespace linattn
