// One forward run checked against the fp64 ground truth (reference::forward:
// the chunked form per sequence, then normalization when asked): o, h,
// final_state and z_state within the levels of core/accuracy_levels.hpp.
// Outputs are poisoned (NaN) before the kernels run.
#pragma once

#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "kernels/forward.hpp"
#include "reference/references.hpp"

#include <gtest/gtest.h>

namespace linattn::testing {

// The fp64 values of a run's inputs, kept alive for reference::Inputs.
struct InputValues {
  std::vector<double> q, k, v, s0, z0;
  bool has_s0 = false, has_z0 = false;
  explicit InputValues(const ProblemInputs& in)
      : q(in.q.to_double()), k(in.k.to_double()), v(in.v.to_double()), s0(in.initial_state.to_double()),
        z0(in.initial_z.to_double()), has_s0(!in.initial_state.empty()), has_z0(!in.initial_z.empty()) {}
  reference::Inputs inputs() const { return {q, k, v, has_s0 ? &s0 : nullptr, has_z0 ? &z0 : nullptr}; }
};

inline ForwardOutput run_inputs(const Problem& p, ForwardConfig cfg, const ProblemInputs& in) {
  cfg.poison_outputs = true;
  return run_forward(p, cfg, in.q, in.k, in.v, in.initial_state.empty() ? nullptr : &in.initial_state,
                     in.initial_z.empty() ? nullptr : &in.initial_z);
}

// Runs cfg on `in` and checks every output against the reference; returns the output.
inline ForwardOutput expect_matches_reference(const Problem& p, const ForwardConfig& cfg, const ProblemInputs& in) {
  const DType dtype = in.q.dtype;
  const InputValues values(in);
  const reference::Result ref = reference::forward(p, values.inputs(), cfg.normalize);
  ForwardOutput out = run_inputs(p, cfg, in);
  SCOPED_TRACE(std::string(variant_name(cfg.variant)) + " " + dtype_name(dtype) + (cfg.normalize ? " normalized" : ""));
  EXPECT_EQ(out.o.shape, p.o_shape());
  EXPECT_EQ(out.final_state.shape, p.state_shape());
  const bool reads_bf16 = cfg.variant == Variant::materialized && cfg.snapshots == SnapshotMode::bf16;
  // The tensor-core kernel's split operands add their own small level (accuracy_levels.hpp).
  const double split = out.gemm == GemmPath::tensor_core ? tensor_core_split_level(dtype) : 0.0;
  EXPECT_LE(relative_l2(out.o.to_double(), ref.o), output_level(dtype, out.o.dtype, reads_bf16) + split) << "o";
  if (cfg.snapshots != SnapshotMode::none) {
    EXPECT_EQ(out.h.shape, p.h_shape());
    EXPECT_LE(relative_l2(out.h.to_double(), ref.h), stored_level(dtype, out.h.dtype)) << "h";
  } else {
    EXPECT_TRUE(out.h.empty());
  }
  EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), stored_level(dtype, out.final_state.dtype))
      << "final_state";
  if (cfg.normalize) {
    EXPECT_EQ(out.z_state.shape, p.z_shape());
    EXPECT_LE(relative_l2(out.z_state.to_double(), ref.z_state), stored_level(dtype, out.z_state.dtype)) << "z_state";
  } else {
    EXPECT_TRUE(out.z_state.empty());
  }
  return out;
}

}  // namespace linattn::testing
