// The portable backward (kernels/fused_backward.hpp) against the fp64
// reference (reference/backward.hpp): dq, dk, dv and dh0 on fp64, fp32, bf16
// and fp16 inputs, outputs poisoned first; ragged T, DK != DV, chunks 16, 32
// and 64, packed lengths 1, 63, 64, 65 and 300; an initial state and dht;
// snapshots read in the accumulation type or bf16, or recomputed; both tile
// GEMMs of the host backends.
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "kernels/backward.hpp"
#include "kernels/forward.hpp"
#include "reference/backward.hpp"

#include <gtest/gtest.h>

namespace linattn {
namespace {

Problem plain(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t DK, std::int64_t DV, std::int64_t C) {
  Problem p;
  p.B = B; p.T = T; p.H = H; p.DK = DK; p.DV = DV; p.chunk = C; p.scale = 0.37;
  return p;
}

Problem packed(const std::vector<std::int64_t>& lengths, std::int64_t H, std::int64_t DK, std::int64_t DV, std::int64_t C) {
  Problem p = plain(1, 0, H, DK, DV, C);
  p.cu_seqlens = {0};
  for (std::int64_t n : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + n);
  p.T = p.cu_seqlens.back();
  return p;
}

// One backward run checked against the reference on the same (rounded) values.
void expect_backward_matches(const Problem& p, DType dtype, std::uint64_t seed, bool with_state, bool with_dht,
                             SnapshotMode snaps, bool recompute, bool fp32_out, GemmPath gemm = GemmPath::automatic) {
  const ProblemInputs in = random_inputs(p, dtype, seed, with_state);
  const Tensor d_o = random_tensor(dtype, p.v_shape(), derive_seed(seed, 7));
  const Tensor dht = random_tensor(accumulation_dtype(dtype), p.state_shape(), derive_seed(seed, 8));
  // The forward's snapshots, as `run` stores them.
  ForwardConfig fc;
  fc.snapshots = snaps;
  const ForwardOutput fw = run_forward(p, fc, in.q, in.k, in.v, with_state ? &in.initial_state : nullptr);

  BackwardConfig bc;
  bc.gemm = gemm;
  bc.recompute_h = recompute;
  bc.output_fp32 = fp32_out;
  bc.poison_outputs = true;
  const BackwardOutput out = run_backward(p, bc, in.q, in.k, in.v, recompute ? nullptr : &fw.h,
                                         with_state ? &in.initial_state : nullptr, d_o, with_dht ? &dht : nullptr);

  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                            s0 = in.initial_state.to_double(), go = d_o.to_double(), gh = dht.to_double();
  const reference::Gradients ref =
      reference::backward(p, {q, k, v, with_state ? &s0 : nullptr}, {go, with_dht ? &gh : nullptr});
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " T=" + std::to_string(p.T) + " C=" + std::to_string(p.chunk) +
               " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV) + " N=" +
               std::to_string(p.num_sequences()) + (with_state ? " s0" : "") + (with_dht ? " dht" : "") +
               (recompute ? " recomputed h" : snaps == SnapshotMode::bf16 ? " bf16 h" : " acc h") +
               (fp32_out ? " fp32 out" : "") + " gemm " + gemm_path_name(out.gemm));
  const DType stored = out.dq.dtype;
  EXPECT_EQ(stored, fp32_out ? DType::f32 : dtype);
  // dq reads the snapshots: bf16 ones add one bf16 rounding of the state (as o does in the materialized forward).
  const bool bf16_h = !recompute && snaps == SnapshotMode::bf16;
  EXPECT_LE(relative_l2(out.dq.to_double(), ref.dq), output_level(dtype, stored, bf16_h)) << "dq";
  EXPECT_LE(relative_l2(out.dk.to_double(), ref.dk), stored_level(dtype, stored)) << "dk";
  EXPECT_LE(relative_l2(out.dv.to_double(), ref.dv), stored_level(dtype, stored)) << "dv";
  EXPECT_LE(relative_l2(out.dh0.to_double(), ref.dh0), stored_level(dtype, out.dh0.dtype)) << "dh0";
}

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
