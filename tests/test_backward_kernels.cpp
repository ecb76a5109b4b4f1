// The portable backward (kernels/fused_backward.hpp) against the fp64
// reference (reference/backward.hpp): dq, dk, dv and dh0 on fp64, fp32, bf16
// and fp16 inputs, outputs poisoned first; ragged T, DK != DV, chunks 16, 32
// and 64, packed lengths 1, 63, 64, 65 and 300; an initial state and dht;
// snapshots read in the accumulation type or bf16, or recomputed; both tile
// GEMMs of the host backends.
#include "backward_check.hpp"

#include <gtest/gtest.h>

namespace linattn {
namespace {

using backward_test::expect_backward_matches;
using backward_test::packed;
using backward_test::plain;

TEST(BackwardKernel, EveryDtypeMatchesReference) {
  std::uint64_t seed = 2100;
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16})
    for (bool with_state : {false, true})
      expect_backward_matches(plain(2, 200, 2, 32, 48, 64), dtype, ++seed, with_state, true,
                              SnapshotMode::accumulation, false, false);
}

TEST(BackwardKernel, ChunksAndRaggedLengths) {
  std::uint64_t seed = 2200;
  for (std::int64_t C : {16, 32, 64})
    for (std::int64_t T : {1, 63, 64, 65, 130})
      expect_backward_matches(plain(1, T, 2, 16, 24, C), DType::f32, ++seed, true, true, SnapshotMode::accumulation,
                              false, false);
}

TEST(BackwardKernel, PackedSequences) {
  std::uint64_t seed = 2300;
  for (DType dtype : {DType::f32, DType::bf16})
    for (std::int64_t C : {16, 64})
      expect_backward_matches(packed({1, 63, 64, 65, 300}, 2, 32, 16, C), dtype, ++seed, true, true,
                              SnapshotMode::accumulation, false, false);
}

TEST(BackwardKernel, SnapshotsReadAsBf16OrRecomputed) {
  std::uint64_t seed = 2400;
  const Problem p = plain(2, 150, 2, 32, 32, 32);
  for (DType dtype : {DType::f32, DType::bf16}) {
    expect_backward_matches(p, dtype, ++seed, true, true, SnapshotMode::bf16, false, false);
    expect_backward_matches(p, dtype, ++seed, true, true, SnapshotMode::none, true, false);
    expect_backward_matches(p, dtype, ++seed, false, false, SnapshotMode::none, true, true);
  }
  expect_backward_matches(packed({5, 100, 64}, 1, 16, 32, 16), DType::bf16, ++seed, true, false, SnapshotMode::none,
                          true, true);
}

TEST(BackwardKernel, BothTileGemms) {
  std::uint64_t seed = 2500;
  for (GemmPath gemm : {GemmPath::kokkos_kernels, GemmPath::automatic})
    expect_backward_matches(plain(1, 100, 2, 32, 64, 32), DType::f32, ++seed, true, true, SnapshotMode::accumulation,
                            false, true, gemm);
}

TEST(BackwardKernel, RefusesWhatItCannotRun) {
  const Problem p = plain(1, 64, 1, 16, 16, 16);
  const ProblemInputs in = random_inputs(p, DType::f32, 1, false);
  const Tensor d_o = random_tensor(DType::f32, p.v_shape(), 2);
  BackwardConfig bc;
  EXPECT_THROW(run_backward(p, bc, in.q, in.k, in.v, nullptr, nullptr, d_o, nullptr), std::invalid_argument)
      << "no snapshots and no recompute";
  bc.gemm = GemmPath::tensor_core;
  bc.recompute_h = true;
  EXPECT_THROW(run_backward(p, bc, in.q, in.k, in.v, nullptr, nullptr, d_o, nullptr), std::invalid_argument);
  bc.gemm = GemmPath::automatic;
  const Tensor wrong = random_tensor(DType::f32, {1, 64, 1, 15}, 3);
  EXPECT_THROW(run_backward(p, bc, in.q, in.k, in.v, nullptr, nullptr, wrong, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace linattn
