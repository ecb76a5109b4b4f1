// Compiled with -fno-trapping-math (CMakeLists.txt), so that GCC may turn the
// clamps into vector blends: without it the loops stay scalar. No other
// result changes: the arithmetic is IEEE, in the written order.
#include "kernels/host_exp.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace linattn {
namespace {

inline float vector_exp(float x) {
  // n = round(x / ln 2) by the 1.5 * 2^23 shifter, r = x - n ln 2 in two
  // parts (ln 2 = 0.693359375 - 2.12194440e-4, the first exact in 9 bits).
  const float xc = std::min(std::max(x, -88.0f), 88.0f);
  const float shifter = 12582912.0f;
  const float n = (xc * 1.44269504088896341f + shifter) - shifter;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * (r * r) + r + 1.0f;
  // 2^n from its exponent bits; n = -127 gives 0 (x <= -88).
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

}  // namespace

void exp_in_place(float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = vector_exp(x[i]);
}

void exp_in_place(double* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

void scale_by_exp(float* __restrict y, const float* __restrict a, const float* __restrict b, int n) {
  if (b)
    for (int i = 0; i < n; ++i) y[i] *= vector_exp(a[i] - b[i]);
  else
    for (int i = 0; i < n; ++i) y[i] *= vector_exp(a[i]);
}

void scale_by_exp(double* __restrict y, const double* __restrict a, const double* __restrict b, int n) {
  if (b)
    for (int i = 0; i < n; ++i) y[i] *= std::exp(a[i] - b[i]);
  else
    for (int i = 0; i < n; ++i) y[i] *= std::exp(a[i]);
}

}  // namespace linattn
