// Seeded random inputs for tests, examples and `linattn generate`: uniform in
// [lo, hi) but never exactly zero, rounded to the tensor's dtype so that the
// fp64 reference sees exactly the values a kernel reads.
#pragma once

#include "core/problem.hpp"
#include "core/tensor.hpp"

#include <cstdint>
#include <vector>

namespace linattn {

Tensor random_tensor(DType t, std::vector<std::int64_t> shape, std::uint64_t seed, double lo = -1.0,
                     double hi = 1.0);

struct ProblemInputs {
  Tensor q, k, v, initial_state;  // initial_state empty unless requested
  Tensor initial_z;               // [N, H, DK]; empty unless requested
};

// q, k, v in dtype t; initial_state [N, H, DK, DV] (when asked for) in t's
// accumulation type. positive: every value uniform in (0, 1) instead of
// (-1, 1), so that normalization's denominators stay away from zero;
// with_initial_z adds a positive initial key sum z0 [N, H, DK] (accumulation type).
ProblemInputs random_inputs(const Problem& p, DType t, std::uint64_t seed, bool with_initial_state,
                            bool positive = false, bool with_initial_z = false);

// A well-mixed seed for item `index` of a run seeded with `seed` (splitmix64),
// so that neighbouring seeds and indices give unrelated streams.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t index);

}  // namespace linattn
