// One backward run (kernels/backward.hpp) checked against the fp64 reference
// (reference/backward.hpp) on the same rounded values: dq, dk, dv and dh0,
// outputs poisoned first. Shared by the portable and tensor-core tests.
#pragma once

#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "kernels/backward.hpp"
#include "kernels/forward.hpp"
#include "reference/backward.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace linattn::backward_test {

inline Problem plain(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t DK, std::int64_t DV, std::int64_t C) {
  Problem p;
  p.B = B; p.T = T; p.H = H; p.DK = DK; p.DV = DV; p.chunk = C; p.scale = 0.37;
  return p;
}

inline Problem packed(const std::vector<std::int64_t>& lengths, std::int64_t H, std::int64_t DK, std::int64_t DV, std::int64_t C) {
  Problem p = plain(1, 0, H, DK, DV, C);
  p.cu_seqlens = {0};
  for (std::int64_t n : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + n);
  p.T = p.cu_seqlens.back();
  return p;
}

// One backward run checked against the reference on the same (rounded) values;
// `expected` (unless automatic) is the path that must have run; `extra` is
// added to every output's level (the tensor-core backward's 16-bit operands).
inline void expect_backward_matches(const Problem& p, DType dtype, std::uint64_t seed, bool with_state, bool with_dht,
                             SnapshotMode snaps, bool recompute, bool fp32_out, GemmPath gemm = GemmPath::automatic,
                                    GemmPath expected = GemmPath::automatic, double extra = 0.0) {
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
  if (expected != GemmPath::automatic) EXPECT_EQ(out.gemm, expected);
  const DType stored = out.dq.dtype;
  EXPECT_EQ(stored, fp32_out ? DType::f32 : dtype);
  // dq reads the snapshots: bf16 ones add one bf16 rounding of the state (as o does in the materialized forward).
  const bool bf16_h = !recompute && snaps == SnapshotMode::bf16;
  EXPECT_LE(relative_l2(out.dq.to_double(), ref.dq), output_level(dtype, stored, bf16_h) + extra) << "dq";
  EXPECT_LE(relative_l2(out.dk.to_double(), ref.dk), stored_level(dtype, stored) + extra) << "dk";
  EXPECT_LE(relative_l2(out.dv.to_double(), ref.dv), stored_level(dtype, stored) + extra) << "dv";
  EXPECT_LE(relative_l2(out.dh0.to_double(), ref.dh0), stored_level(dtype, out.dh0.dtype)) << "dh0";
}

}  // namespace linattn::backward_test
