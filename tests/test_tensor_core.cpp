// The tensor-core fused kernel (CUDA builds) matches the fp64 reference like
// the portable path does; elsewhere asking for it is a clear error, and the
// portable KokkosBatched path stays selectable and tested everywhere.
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "kernels/forward.hpp"
#include "reference/references.hpp"
#include "tensor_core_cases.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

namespace linattn {
namespace {

constexpr auto& tc_problem = testing::plain_problem;
using testing::kHaveTensorCores;

// Run directly with run_forward (not forward_check.hpp), so the poisoning is asked for here.
ForwardConfig tensor_core_config(std::int64_t block_dv, int segments, bool fp32_out, SnapshotMode snaps) {
  ForwardConfig cfg = testing::tensor_cores(segments, block_dv, fp32_out, snaps, false);
  cfg.poison_outputs = true;
  return cfg;
}

// o, every snapshot and the final state within the levels of core/accuracy_levels.hpp
// (docs/NUMERICS.md).
template <class Reference>
void expect_matches_reference(const ForwardOutput& out, const Reference& ref, DType dtype) {
  EXPECT_LE(relative_l2(out.o.to_double(), ref.o), stored_level(dtype, out.o.dtype) + tensor_core_split_level(dtype))
      << "o, block_dv " << out.block_dv << ", out " << dtype_name(out.o.dtype);
  EXPECT_LE(relative_l2(out.h.to_double(), ref.h), stored_level(dtype, out.h.dtype))
      << "h, snapshots " << dtype_name(out.h.dtype);
  EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), stored_level(dtype, DType::f32));
}

TEST(TensorCore, MatchesReferenceOnGpu) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {tc_problem(2, 200, 3, 128, 96), tc_problem(1, 64, 2, 64, 64), tc_problem(3, 129, 2, 64, 128)};
  std::uint64_t seed = 500;
  for (const Problem& p : problems) {
    for (DType dtype : {DType::bf16, DType::f16}) {
      for (bool with_state : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " T=" + std::to_string(p.T) + " DK=" + std::to_string(p.DK) +
                     " DV=" + std::to_string(p.DV) + (with_state ? " with initial state" : ""));
        const auto in = random_inputs(p, dtype, ++seed, with_state);
        const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                                  s0 = in.initial_state.to_double();
        const auto ref = reference::chunked(p, {q, k, v, with_state ? &s0 : nullptr});
        for (std::int64_t block_dv : {0, 32, 64, 128}) {
          if (p.DV % (block_dv ? block_dv : 32) != 0) continue;
          for (bool fp32_out : {false, true}) {
            for (SnapshotMode snaps : {SnapshotMode::accumulation, SnapshotMode::bf16}) {
              const ForwardConfig cfg = tensor_core_config(block_dv, 0, fp32_out, snaps);
              const ForwardOutput out = run_forward(p, cfg, in.q, in.k, in.v, with_state ? &in.initial_state : nullptr);
              ASSERT_EQ(out.gemm, GemmPath::tensor_core);
              expect_matches_reference(out, ref, dtype);
            }
          }
        }
      }
    }
  }
}

// Split sequences: each segment starts from the initial state plus the K^T V
// sums of the segments before it (a ragged last chunk, segments of one chunk,
// uneven segments, DK 64 and 128, every snapshot and output type); the
// automatic choice splits both problems (16 and 18 chunks, one or two blocks).
TEST(TensorCore, SplitSequencesMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem problems[] = {tc_problem(1, 1000, 2, 128, 128), tc_problem(2, 1100, 1, 64, 64)};
  std::uint64_t seed = 900;
  for (const Problem& p : problems) {
    const std::int64_t NT = (p.T + 63) / 64;
    for (bool with_state : {false, true}) {
      const auto in = random_inputs(p, DType::bf16, ++seed, with_state);
      const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                                s0 = in.initial_state.to_double();
      const auto ref = reference::chunked(p, {q, k, v, with_state ? &s0 : nullptr});
      for (int segments : {0, 3, static_cast<int>(NT)}) {
        for (bool fp32_out : {false, true}) {
          for (SnapshotMode snaps : {SnapshotMode::accumulation, SnapshotMode::bf16}) {
            SCOPED_TRACE("T=" + std::to_string(p.T) + " DK=" + std::to_string(p.DK) + " segments " +
                         std::to_string(segments) + (with_state ? " with initial state" : "") +
                         (fp32_out ? " fp32 o" : "") + (snaps == SnapshotMode::bf16 ? " bf16 h" : ""));
            const ForwardConfig cfg = tensor_core_config(0, segments, fp32_out, snaps);
            const ForwardOutput out = run_forward(p, cfg, in.q, in.k, in.v, with_state ? &in.initial_state : nullptr);
            ASSERT_EQ(out.gemm, GemmPath::tensor_core);
            if (segments == 0) EXPECT_GT(out.segments, 1) << "one or two sequences should be split";
            else EXPECT_EQ(out.segments, segments);
            expect_matches_reference(out, ref, DType::bf16);
          }
        }
      }
    }
  }
}

TEST(TensorCore, SegmentsElsewhereAreAClearError) {
  const Problem p = tc_problem(1, 256, 1, 64, 64);
  const auto in = random_inputs(p, DType::bf16, 3, false);
  ForwardConfig cfg;
  cfg.gemm = GemmPath::kokkos_kernels;
  cfg.segments = 2;
  try {
    run_forward(p, cfg, in.q, in.k, in.v);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-core kernel only"), std::string::npos) << e.what();
  }
  cfg.segments = -1;
  EXPECT_THROW(run_forward(p, cfg, in.q, in.k, in.v), std::invalid_argument);
}

// The state is summed over 256 chunks: it must stay at the fp32 level (1e-5)
// however long the sequence. Carrying it in the mma accumulators (whose fp32
// sums are not IEEE-rounded) measured 1.2e-5 (signed inputs) and 5.7e-5
// (positive inputs, where every chunk adds in the same direction) at this T.
TEST(TensorCore, LongSequenceStateStaysAtFp32Level) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core kernel is not built";
  const Problem p = tc_problem(1, 16384, 1, 128, 128);
  for (bool positive : {false, true}) {
    const auto in = random_inputs(p, DType::bf16, positive ? 71 : 70, false, positive);
    const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double();
    const auto ref = reference::chunked(p, {q, k, v, nullptr});
    for (int segments : {1, 0}) {  // the whole sequence in one block, and split as chosen
      SCOPED_TRACE(std::string(positive ? "positive inputs" : "inputs in [-1, 1]") + ", segments " + std::to_string(segments));
      ForwardConfig cfg;
      cfg.gemm = GemmPath::tensor_core;
      cfg.segments = segments;
      cfg.output_fp32 = true;
      cfg.poison_outputs = true;
      const ForwardOutput out = run_forward(p, cfg, in.q, in.k, in.v);
      ASSERT_EQ(out.gemm, GemmPath::tensor_core);
      const double level = stored_level(DType::bf16, DType::f32);
      EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), level);
      EXPECT_LE(relative_l2(out.h.to_double(), ref.h), level);
      EXPECT_LE(relative_l2(out.o.to_double(), ref.o), level + tensor_core_split_level(DType::bf16));
    }
  }
}

TEST(TensorCore, UnavailableRequestIsAClearError) {
  const Problem p = tc_problem(1, 64, 1, 300, 32);  // DK 300: past every tensor-core tile
  const auto in = random_inputs(p, DType::bf16, 1, false);
  ForwardConfig cfg;
  cfg.gemm = GemmPath::tensor_core;
  try {
    run_forward(p, cfg, in.q, in.k, in.v);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensorcore is not available"), std::string::npos) << e.what();
  }
}

TEST(TensorCore, PortablePathStaysSelectable) {
  // Where tensor cores would be chosen automatically, kokkoskernels still runs the TeamPolicy kernel.
  const Problem p = tc_problem(1, 100, 2, 64, 64);
  const auto in = random_inputs(p, DType::bf16, 2, true);
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                            s0 = in.initial_state.to_double();
  const auto ref = reference::chunked(p, {q, k, v, &s0});
  ForwardConfig cfg;
  cfg.gemm = GemmPath::kokkos_kernels;
  cfg.output_fp32 = true;
  cfg.poison_outputs = true;
  const ForwardOutput out = run_forward(p, cfg, in.q, in.k, in.v, &in.initial_state);
  EXPECT_EQ(out.gemm, GemmPath::kokkos_kernels);
  EXPECT_LE(relative_l2(out.o.to_double(), ref.o), stored_level(DType::bf16, DType::f32));
  cfg.gemm = GemmPath::automatic;
  EXPECT_EQ(run_forward(p, cfg, in.q, in.k, in.v, &in.initial_state).gemm,
            kHaveTensorCores ? GemmPath::tensor_core : GemmPath::host_tile);
}

}  // namespace
}  // namespace linattn
