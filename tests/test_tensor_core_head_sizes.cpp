// The tensor-core forward on every head size up to DK 256 and DV 512
// (src/kernels/cuda/tile_rules.hpp: DK zero-padded on chip to a tile of 64,
// 128 or 256, DV to blocks of 32, 64 or 128 columns), against the fp64
// reference (forward_check.hpp: o, h, final_state and z_state, outputs
// poisoned first): plain and packed batches, initial states, forced segments,
// every output and snapshot type, normalization, explicit block widths. CUDA
// builds only: elsewhere these tests report themselves skipped (the portable
// paths run the same shapes in test_kernels.cpp and test_varlen.cpp).
#include "forward_check.hpp"

#include <gtest/gtest.h>

namespace linattn {
namespace {

#if defined(KOKKOS_ENABLE_CUDA)
constexpr bool kHaveTensorCores = true;
#else
constexpr bool kHaveTensorCores = false;
#endif

Problem plain(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t DK, std::int64_t DV) {
  Problem p;
  p.B = B; p.T = T; p.H = H; p.DK = DK; p.DV = DV; p.chunk = 64; p.scale = 0.3;
  return p;
}

Problem packed(const std::vector<std::int64_t>& lengths, std::int64_t H, std::int64_t DK, std::int64_t DV) {
  Problem p = plain(1, 0, H, DK, DV);
  p.cu_seqlens = {0};
  for (std::int64_t n : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + n);
  p.T = p.cu_seqlens.back();
  return p;
}

ForwardConfig tensor_cores(int segments, std::int64_t block_dv, bool fp32_out, SnapshotMode snaps, bool normalize) {
  ForwardConfig cfg;
  cfg.gemm = GemmPath::tensor_core;
  cfg.segments = segments;
  cfg.block_dv = block_dv;
  cfg.output_fp32 = fp32_out;
  cfg.snapshots = snaps;
  cfg.normalize = normalize;
  return cfg;
}

std::string describe(const Problem& p, const ForwardConfig& cfg, DType dtype, bool state) {
  std::string s = std::string(dtype_name(dtype)) + " B=" + std::to_string(p.B) + " T=" + std::to_string(p.T) +
                  " H=" + std::to_string(p.H) + " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV) +
                  (p.varlen() ? " packed N=" + std::to_string(p.num_sequences()) : "") + " segments " +
                  std::to_string(cfg.segments) + " block_dv " + std::to_string(cfg.block_dv);
  if (cfg.output_fp32) s += " fp32 o";
  if (cfg.snapshots == SnapshotMode::bf16) s += " bf16 h";
  if (cfg.normalize) s += " normalized";
  if (state) s += " with initial state";
  return s;
}

// The head sizes of issue 25's list, each in a ragged T: padded DK (16, 32,
// 48, 60, 96, 100, 192, 250), padded DV (20, 48, 60, 100), DK != DV, odd
// sizes whose rows are not 16-byte aligned (60, 100, 250: element-wise
// copies), the 256 tile exactly (256 x 256, 256 x 512), and DK = DV = 1.
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
