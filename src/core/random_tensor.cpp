#include "core/random_tensor.hpp"

#include <random>

namespace linattn {

Tensor random_tensor(DType t, std::vector<std::int64_t> shape, std::uint64_t seed, double lo, double hi) {
  Tensor out(t, std::move(shape));
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    double x = 0;
    // Redraw until the value is nonzero after rounding to t, so that no
    // element (and no all-zeros tensor) can hide an unwritten output.
    while (x == 0) {
      out.set(i, dist(gen));
      x = out.get(i);
    }
  }
  return out;
}

ProblemInputs random_inputs(const Problem& p, DType t, std::uint64_t seed, bool with_initial_state, bool positive,
                            bool with_initial_z) {
  const double lo = positive ? 0.0 : -1.0;
  ProblemInputs in;
  in.q = random_tensor(t, p.qk_shape(), seed * 4 + 1, lo);
  in.k = random_tensor(t, p.qk_shape(), seed * 4 + 2, lo);
  in.v = random_tensor(t, p.v_shape(), seed * 4 + 3, lo);
  if (with_initial_state) in.initial_state = random_tensor(accumulation_dtype(t), p.state_shape(), seed * 4 + 4, lo);
  // A key sum of some earlier tokens: positive, of the size of a few keys.
  if (with_initial_z) in.initial_z = random_tensor(accumulation_dtype(t), p.z_shape(), derive_seed(seed, 5), 0.0, 8.0);
  return in;
}

std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace linattn
