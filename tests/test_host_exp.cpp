// The host's vectorized exp (src/kernels/host_exp.hpp) against std::exp in
// double, over the range the gates use (x <= 0) and the edges of fp32's; and
// lane_dot (chunk_gate.hpp), the host gate steps' dot product.
#include "kernels/chunk_gate.hpp"
#include "kernels/host_exp.hpp"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace linattn {
namespace {

// ulps of `got` from the true exp(x), in fp32's spacing at the true value
double ulps_off(float got, float x) {
  const double truth = std::exp(static_cast<double>(x));
  const float near = static_cast<float>(truth);
  return std::fabs(got - truth) / (std::nextafter(near, std::numeric_limits<float>::infinity()) - near);
}

TEST(HostExp, Fp32WithinOneUlpAndAHalfOverTheGatesRange) {
  std::mt19937 rng(20261207);
  std::uniform_real_distribution<float> wide(-87.0f, 88.0f), near_zero(-2.0f, 0.0f);
  std::vector<float> x(1 << 16);
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = round == 0 ? near_zero(rng) : wide(rng);
    std::vector<float> y = x;
    exp_in_place(y.data(), static_cast<int>(y.size()));
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps_off(y[i], x[i]));
    EXPECT_LE(worst, 1.5) << (round == 0 ? "x in [-2, 0)" : "x in [-87, 88)");
  }
}

TEST(HostExp, Fp32EdgesAreExact) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -0.0f, -88.0f, -100.0f, -1e36f, -FLT_MAX, -inf, 1.0f, -1.0f};
  std::vector<float> y = x;
  exp_in_place(y.data(), static_cast<int>(y.size()));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  for (int i = 2; i <= 6; ++i) EXPECT_EQ(y[i], 0.0f) << "exp(" << x[i] << ")";
  EXPECT_LE(ulps_off(y[7], 1.0f), 1.0);
  EXPECT_LE(ulps_off(y[8], -1.0f), 1.0);
  // just above FLT_MIN's exponent: a subnormal result, at most 1.2e-38 off
  float tiny = -87.5f;
  exp_in_place(&tiny, 1);
  EXPECT_NEAR(tiny, std::exp(-87.5), 1.2e-38);
}

TEST(HostExp, ScaleByExpIsTheProductWithTheDifferencesExp) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), g(-30.0f, 0.0f);
  const int n = 77;  // not a multiple of any vector width
  std::vector<float> y(n), a(n), b(n);
  for (int i = 0; i < n; ++i) {
    y[i] = u(rng);
    b[i] = g(rng);
    a[i] = b[i] + g(rng) / 4;  // a - b <= 0, as the key decays' b_L - b_j
  }
  std::vector<float> with_b = y, alone = y, e(n), e_a = a;
  for (int i = 0; i < n; ++i) e[i] = a[i] - b[i];
  exp_in_place(e.data(), n);
  exp_in_place(e_a.data(), n);
  scale_by_exp(with_b.data(), a.data(), b.data(), n);
  scale_by_exp(alone.data(), a.data(), nullptr, n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(with_b[i], y[i] * e[i]) << i;
    EXPECT_EQ(alone[i], y[i] * e_a[i]) << i;
  }
  // fp64 is std::exp, element by element
  std::vector<double> yd = {0.5, -2.0}, ad = {-1.0, -3.0}, bd = {0.0, -1.0};
  scale_by_exp(yd.data(), ad.data(), bd.data(), 2);
  EXPECT_EQ(yd[0], 0.5 * std::exp(-1.0));
  EXPECT_EQ(yd[1], -2.0 * std::exp(-2.0));
}

// Every length: none, the tail alone, whole lanes, lanes and a tail; within
// fp32 rounding of the exact sum (the order differs from a running sum).
TEST(LaneDot, IsTheDotProductAtEveryLength) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 64, 100, 256}) {
    std::vector<float> x(n), y(n);
    double exact = 0, magnitude = 0;
    for (int i = 0; i < n; ++i) {
      x[i] = u(rng);
      y[i] = u(rng);
      exact += double(x[i]) * y[i];
      magnitude += std::fabs(double(x[i]) * y[i]);
    }
    EXPECT_NEAR(lane_dot(x.data(), y.data(), n), exact, 4 * FLT_EPSILON * magnitude) << "n " << n;
  }
  const std::vector<double> a = {1.0, 2.0, 3.0}, b = {0.5, 0.25, 2.0};
  EXPECT_EQ(lane_dot(a.data(), b.data(), 3), 7.0);
}

}  // namespace
}  // namespace linattn
