// Seeded random test inputs: never zeros, rounded to the tensor's dtype so that
// the fp64 reference sees exactly the values the kernel reads.
#pragma once

#include "core/problem.hpp"
#include "core/tensor.hpp"

#include <random>

namespace linattn::testing {

inline Tensor random_tensor(DType t, std::vector<std::int64_t> shape, std::uint64_t seed, double lo = -1.0,
                            double hi = 1.0) {
  Tensor out(t, std::move(shape));
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    double x = 0;
    while (x == 0) x = dist(gen);
    out.set(i, x);
  }
  return out;
}

struct ProblemInputs {
  Tensor q, k, v, initial_state;
};

inline ProblemInputs random_inputs(const Problem& p, DType t, std::uint64_t seed, bool with_initial_state) {
  ProblemInputs in;
  in.q = random_tensor(t, p.qk_shape(), seed * 4 + 1);
  in.k = random_tensor(t, p.qk_shape(), seed * 4 + 2);
  in.v = random_tensor(t, p.v_shape(), seed * 4 + 3);
  if (with_initial_state) in.initial_state = random_tensor(accumulation_dtype(t), p.state_shape(), seed * 4 + 4);
  return in;
}

}  // namespace linattn::testing
