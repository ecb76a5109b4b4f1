// The tensor-core backward (src/kernels/cuda/tensor_core_backward.hpp) against
// the fp64 reference (backward_check.hpp: dq, dk, dv and dh0, outputs poisoned
// first): bf16, fp16 and fp32, DK and DV of 64 and 128 (also unequal) and every
// other head size up to DK 256, DV 512 (padded on chip), ragged T,
// packed lengths 1, 63, 64, 65 and 300 with one sequence holding most tokens,
// initial states and dht, snapshots read as bf16 or fp32 or recomputed. CUDA
// builds only: elsewhere the kernels do not exist and these tests report
// themselves skipped (the same cases on the portable path: test_backward_kernels.cpp).
#include "backward_check.hpp"

#include <gtest/gtest.h>

#include <utility>

namespace linattn {
namespace {

using backward_test::expect_backward_matches;
using backward_test::packed;
using backward_test::plain;

#if defined(KOKKOS_ENABLE_CUDA)
constexpr bool kHaveTensorCores = true;
#else
constexpr bool kHaveTensorCores = false;
#endif

// Every case asks for the tensor-core backward explicitly and checks that it ran.
void expect_tensor_cores_match(const Problem& p, DType dtype, std::uint64_t seed, bool with_state, bool with_dht,
                               SnapshotMode snaps, bool recompute = false) {
  expect_backward_matches(p, dtype, seed, with_state, with_dht, snaps, recompute, false, GemmPath::tensor_core,
                          GemmPath::tensor_core, tensor_core_backward_level(dtype));
}

TEST(TensorCoreBackward, EveryShapeAndTypeMatchesReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  std::uint64_t seed = 5100;
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t DK : {64, 128})
      for (std::int64_t DV : {64, 128})
        expect_tensor_cores_match(plain(2, 300, 2, DK, DV, 64), dtype, ++seed, true, true, SnapshotMode::accumulation);
}

// Every other head size, padded on chip: up to 128 x 128 the whole-head chunk
// kernel on tiles of 64 or 128 (chunk_gradient.hpp, bounded), past either the
// tiled chunk kernels (chunk_gradient_tiled.hpp: 192, 250 x 96, 32 x 512, 256 x 64
// and the rest), and the reverse walks on the 64-, 128- and 256-row DK tiles;
// odd widths move element by element, widths of 4 (mod 8) in 8-byte copies.
TEST(TensorCoreBackward, EveryHeadSizeMatchesReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  std::uint64_t seed = 5600;
  const std::pair<std::int64_t, std::int64_t> heads[] = {{16, 16},   {32, 32},  {48, 48},  {60, 60},  {96, 96},
                                                         {100, 100}, {192, 192}, {256, 256}, {256, 512}, {1, 1},
                                                         {64, 20},   {250, 96},  {32, 512}, {128, 256}, {256, 64}};
  for (DType dtype : {DType::bf16, DType::f16})
    for (auto [DK, DV] : heads)
      expect_tensor_cores_match(plain(2, 150, 2, DK, DV, 64), dtype, ++seed, true, true, SnapshotMode::accumulation);
}

// fp32 inputs: fp32 tiles, three TF32 products per product
// (mma_primitives.hpp, Elem<float>), always on the tiled chunk kernels; dq,
// dk, dv in fp32 at fp32's level (1e-5), every head size, plain and packed,
// fp32, bf16 and recomputed snapshots.
TEST(TensorCoreBackward, Fp32InputsMatchReference) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  std::uint64_t seed = 5800;
  const std::pair<std::int64_t, std::int64_t> heads[] = {{64, 64}, {128, 128}, {128, 64}, {16, 16}, {60, 100},
                                                         {96, 96}, {1, 1},     {256, 512}, {192, 48}};
  for (auto [DK, DV] : heads)
    expect_tensor_cores_match(plain(2, 150, 2, DK, DV, 64), DType::f32, ++seed, true, true, SnapshotMode::accumulation);
  expect_tensor_cores_match(packed({1, 63, 64, 65, 300}, 2, 128, 128, 64), DType::f32, ++seed, true, true,
                            SnapshotMode::accumulation);
  expect_tensor_cores_match(packed({300, 1, 65, 63, 64}, 2, 100, 60, 64), DType::f32, ++seed, true, true,
                            SnapshotMode::bf16);
  expect_tensor_cores_match(plain(2, 130, 2, 64, 128, 64), DType::f32, ++seed, true, false, SnapshotMode::none, true);
  // --out-dtype fp32 with fp32 inputs is the input type: still tensor cores.
  expect_backward_matches(plain(1, 200, 2, 128, 128, 64), DType::f32, ++seed, true, true, SnapshotMode::accumulation,
                          false, true, GemmPath::automatic, GemmPath::tensor_core, tensor_core_backward_level(DType::f32));
}

// The same kernels on packed batches, with bf16 snapshots (converted on the
// way for fp16 inputs) and with recomputed ones.
TEST(TensorCoreBackward, EveryHeadSizePackedAndSnapshotKinds) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  std::uint64_t seed = 5700;
  for (DType dtype : {DType::bf16, DType::f16}) {
    expect_tensor_cores_match(packed({1, 63, 64, 65, 300}, 2, 96, 60, 64), dtype, ++seed, true, true, SnapshotMode::bf16);
    expect_tensor_cores_match(packed({1, 63, 64, 65, 300}, 2, 256, 100, 64), dtype, ++seed, false, true,
                              SnapshotMode::accumulation);
    expect_tensor_cores_match(plain(2, 130, 2, 192, 48, 64), dtype, ++seed, true, false, SnapshotMode::none, true);
    expect_tensor_cores_match(plain(1, 200, 3, 256, 256, 64), dtype, ++seed, true, true, SnapshotMode::bf16);
  }
}

// The reverse walks' blocks of 32 columns on the 256-row DK tile
// (state_gradient_block takes them where the walks' blocks fill about a wave:
// 16 or 32 walks of 256 columns give 128 or 256 blocks, against 132 SMs on an
// H100 or H200), exact and bounded heads, every input type, with dht and
// initial states, snapshots of each kind.
TEST(TensorCoreBackward, WideWalkBlocksAtDK256) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  std::uint64_t seed = 5900;
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    expect_tensor_cores_match(plain(2, 130, 16, 256, 256, 64), dtype, ++seed, true, true, SnapshotMode::accumulation);
    expect_tensor_cores_match(plain(1, 100, 16, 200, 256, 64), dtype, ++seed, false, true, SnapshotMode::bf16);
  }
  expect_tensor_cores_match(plain(1, 70, 16, 256, 512, 64), DType::bf16, ++seed, true, false, SnapshotMode::none, true);
}

TEST(TensorCoreBackward, RaggedLengths) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  std::uint64_t seed = 5200;
  for (std::int64_t T : {1, 63, 64, 65, 130})
    for (DType dtype : {DType::bf16, DType::f16})
      expect_tensor_cores_match(plain(3, T, 2, 128, 64, 64), dtype, ++seed, T % 2 == 1, true, SnapshotMode::accumulation);
}

TEST(TensorCoreBackward, PackedSequences) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  std::uint64_t seed = 5300;
  for (DType dtype : {DType::bf16, DType::f16}) {
    expect_tensor_cores_match(packed({1, 63, 64, 65, 300}, 2, 128, 128, 64), dtype, ++seed, true, true,
                              SnapshotMode::accumulation);
    // One sequence holds 90% of the tokens: the longest reverse walk goes first.
    expect_tensor_cores_match(packed({40, 1800, 7, 64, 89}, 3, 64, 128, 64), dtype, ++seed, false, true,
                              SnapshotMode::bf16);
  }
}

TEST(TensorCoreBackward, SnapshotsReadAsBf16OrRecomputed) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  std::uint64_t seed = 5400;
  const Problem p = plain(2, 200, 2, 128, 128, 64);
  for (DType dtype : {DType::bf16, DType::f16}) {
    expect_tensor_cores_match(p, dtype, ++seed, true, true, SnapshotMode::bf16);
    expect_tensor_cores_match(p, dtype, ++seed, true, false, SnapshotMode::none, true);
    expect_tensor_cores_match(packed({5, 100, 64}, 2, 64, 64, 64), dtype, ++seed, true, true, SnapshotMode::none, true);
  }
}

// Automatic takes the tensor cores for 16-bit outputs; fp32 outputs run on
// kokkoskernels, where an explicit tensorcore request is refused.
TEST(TensorCoreBackward, AutomaticPathAndRefusals) {
  if (!kHaveTensorCores) GTEST_SKIP() << "CUDA backend not enabled: the tensor-core backward is not built";
  const Problem p = plain(1, 100, 2, 64, 64, 64);
  expect_backward_matches(p, DType::bf16, 5501, true, true, SnapshotMode::bf16, false, false, GemmPath::automatic,
                          GemmPath::tensor_core, tensor_core_backward_level(DType::bf16));
  expect_backward_matches(p, DType::bf16, 5502, true, true, SnapshotMode::bf16, false, true, GemmPath::automatic,
                          GemmPath::kokkos_kernels);
  const ProblemInputs in = random_inputs(p, DType::bf16, 5503, false);
  const Tensor d_o = random_tensor(DType::bf16, p.v_shape(), 5504);
  BackwardConfig bc;
  bc.gemm = GemmPath::tensor_core;
  bc.recompute_h = true;
  bc.output_fp32 = true;
  EXPECT_THROW(run_backward(p, bc, in.q, in.k, in.v, nullptr, nullptr, d_o, nullptr), std::invalid_argument);
  bc.output_fp32 = false;
  const Problem chunk32 = plain(1, 100, 2, 64, 64, 32);
  EXPECT_THROW(run_backward(chunk32, bc, in.q, in.k, in.v, nullptr, nullptr, d_o, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace linattn
