// fp16 and bf16 conversions round to nearest, ties to even, exactly like the
// IEEE types (checked against neighbours, exhaustively for decoding).
#include "core/half_types.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

namespace linattn {
namespace {

// decode(bits) for every finite pattern; round(x) must be the nearest
// representable value, with ties going to the even pattern.
template <class Encode, class Decode>
void expect_round_to_nearest_even(Encode encode, Decode decode, std::uint16_t max_finite, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::uint32_t> pattern(0, max_finite);
  std::uniform_real_distribution<double> frac(0.0, 1.0);
  for (int n = 0; n < 200000; ++n) {
    // a random point between two adjacent positive representables, plus exact midpoints
    const std::uint16_t lo = static_cast<std::uint16_t>(pattern(gen) % max_finite);
    const double a = decode(lo), b = decode(static_cast<std::uint16_t>(lo + 1));
    const double t = (n % 7 == 0) ? 0.5 : frac(gen);
    const float x = static_cast<float>(a + t * (b - a));
    const double dx = x;
    const std::uint16_t r = encode(x);
    const double dr = decode(r);
    ASSERT_TRUE(r == lo || r == lo + 1) << "x=" << dx << " lo=" << lo << " got " << r;
    const double err = std::fabs(dr - dx), other = std::fabs((r == lo ? b : a) - dx);
    ASSERT_LE(err, other) << "x=" << dx << " not rounded to nearest";
    if (err == other) ASSERT_EQ(r & 1u, 0u) << "tie at x=" << dx << " not rounded to even";
    ASSERT_EQ(encode(-x), r | 0x8000u) << "sign handling at x=" << dx;
  }
}

TEST(HalfTypes, Fp16DecodeEncodeRoundTripsEveryPattern) {
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const fp16_t h{static_cast<std::uint16_t>(bits)};
    const float f = fp16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(fp16_from_float(f))));
      continue;
    }
    ASSERT_EQ(fp16_from_float(f).bits, h.bits) << "pattern " << bits;
  }
  EXPECT_EQ(fp16_to_float(fp16_t{0x3c00}), 1.0f);
  EXPECT_EQ(fp16_to_float(fp16_t{0x7bff}), 65504.0f);
  EXPECT_EQ(fp16_to_float(fp16_t{0x0001}), std::ldexp(1.0f, -24));
}

TEST(HalfTypes, Bf16DecodeEncodeRoundTripsEveryPattern) {
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const bf16_t h{static_cast<std::uint16_t>(bits)};
    const float f = bf16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(f))));
      continue;
    }
    ASSERT_EQ(bf16_from_float(f).bits, h.bits) << "pattern " << bits;
  }
}

TEST(HalfTypes, Fp16RoundsToNearestEven) {
  expect_round_to_nearest_even([](float x) { return fp16_from_float(x).bits; },
                               [](std::uint16_t b) { return static_cast<double>(fp16_to_float(fp16_t{b})); },
                               0x7bff, 1);
}

TEST(HalfTypes, Bf16RoundsToNearestEven) {
  expect_round_to_nearest_even([](float x) { return bf16_from_float(x).bits; },
                               [](std::uint16_t b) { return static_cast<double>(bf16_to_float(bf16_t{b})); },
                               0x7f7f, 2);
}

TEST(HalfTypes, OverflowUnderflowAndSpecials) {
  EXPECT_EQ(fp16_from_float(65519.0f).bits, 0x7bffu);  // below the midpoint: max finite
  EXPECT_EQ(fp16_from_float(65520.0f).bits, 0x7c00u);  // midpoint ties to even: infinity
  EXPECT_EQ(fp16_from_float(1e30f).bits, 0x7c00u);
  EXPECT_EQ(fp16_from_float(-INFINITY).bits, 0xfc00u);
  EXPECT_EQ(fp16_from_float(std::ldexp(1.0f, -25)).bits, 0x0000u);  // tie to even zero
  EXPECT_EQ(fp16_from_float(std::ldexp(1.5f, -25)).bits, 0x0001u);
  EXPECT_TRUE(std::isnan(fp16_to_float(fp16_from_float(NAN))));
  EXPECT_EQ(bf16_from_float(3.4e38f).bits, 0x7f80u);  // rounds up to infinity
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(NAN))));
  EXPECT_EQ(bf16_from_float(1.00390625f).bits, 0x3f80u);  // 1 + 2^-8: tie, to even (1.0)
  EXPECT_EQ(bf16_from_float(1.01171875f).bits, 0x3f82u);  // 1 + 3*2^-8: tie, to even (1 + 2^-6)
}

}  // namespace
}  // namespace linattn
