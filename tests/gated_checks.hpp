// What the gated kernel tests share (test_gated_kernels.cpp, test_gated_backward.cpp,
// test_channel_gated_kernels.cpp, test_channel_gated_backward.cpp): the portable paths every
// gate runs on, a backward case's tensors, and the forward's outputs checked against a gated
// fp64 reference at the levels of core/accuracy_levels.hpp.
#pragma once

#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "kernels/execution.hpp"
#include "kernels/forward.hpp"
#include "reference/references.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace linattn::testing {

// kokkoskernels everywhere, and hosttile on host backends.
inline std::vector<GemmPath> team_policy_paths() {
  std::vector<GemmPath> v = {GemmPath::kokkos_kernels};
  if (host_execution) v.push_back(GemmPath::host_tile);
  return v;
}

// A gated backward case: inputs, do, dht, the gate as files hold it, and the gated forward's outputs.
struct GatedBackwardCase {
  ProblemInputs in;
  Tensor d_o, dht, gate;
  ForwardOutput fw;
};

// o, h and final_state of a gated forward against its reference; `path` the one that must have run.
inline void expect_gated_forward_matches(const ForwardOutput& out, const reference::Result& ref, DType dtype,
                                         GemmPath path) {
  EXPECT_EQ(out.gemm, path);
  EXPECT_LE(relative_l2(out.o.to_double(), ref.o), output_level(dtype, out.o.dtype, false)) << "o";
  EXPECT_LE(relative_l2(out.h.to_double(), ref.h), stored_level(dtype, out.h.dtype)) << "h";
  EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), stored_level(dtype, out.final_state.dtype))
      << "final_state";
}

}  // namespace linattn::testing
