// Accuracy metrics shared by the tests, `linattn verify` and the benchmark.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace linattn {

// ||x - ref||_2 / ||ref||_2. NaN whenever x holds a NaN or Inf (NaN never passes
// a `<=` check); the absolute error ||x - ref|| when ref is exactly zero.
template <class X>
double relative_l2(const X& x, const std::vector<double>& ref) {
  if (static_cast<std::size_t>(x.size()) != ref.size()) return std::numeric_limits<double>::quiet_NaN();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double xi = static_cast<double>(x[i]);
    if (!std::isfinite(xi)) return std::numeric_limits<double>::quiet_NaN();
    num += (xi - ref[i]) * (xi - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace linattn
