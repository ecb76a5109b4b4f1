// 16-bit floating-point storage types: IEEE binary16 (fp16) and bfloat16 (bf16).
//
// linattn keeps its own types instead of Kokkos::Experimental::half_t / bhalf_t
// because Debian's Kokkos 3.4 has no bhalf_t and maps half_t to float on the
// Serial backend. These are plain bit patterns with round-to-nearest-even
// conversions that compile for host and device, so every backend rounds
// exactly the same way.
#pragma once

#include <Kokkos_Macros.hpp>

#include <cstdint>
#include <cstring>

namespace linattn {

struct fp16_t {
  std::uint16_t bits;
};
struct bf16_t {
  std::uint16_t bits;
};

namespace detail {

KOKKOS_INLINE_FUNCTION std::uint32_t float_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

KOKKOS_INLINE_FUNCTION float bits_float(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace detail

// float -> bfloat16, round to nearest, ties to even; NaN stays a (quiet) NaN.
KOKKOS_INLINE_FUNCTION bf16_t bf16_from_float(float f) {
  const std::uint32_t u = detail::float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return bf16_t{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  }
  const std::uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<std::uint16_t>((u + bias) >> 16)};
}

KOKKOS_INLINE_FUNCTION float bf16_to_float(bf16_t h) {
  return detail::bits_float(static_cast<std::uint32_t>(h.bits) << 16);
}

// float -> IEEE binary16, round to nearest, ties to even, with subnormals,
// overflow to infinity and NaN preserved.
KOKKOS_INLINE_FUNCTION fp16_t fp16_from_float(float f) {
  const std::uint32_t x = detail::float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // Inf or NaN
    return fp16_t{static_cast<std::uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  }
  if (a >= 0x477ff000u) {  // >= 65520 rounds to infinity
    return fp16_t{static_cast<std::uint16_t>(sign | 0x7c00u)};
  }
  if (a < 0x38800000u) {  // below the smallest normal half (2^-14)
    if (a <= 0x33000000u) return fp16_t{static_cast<std::uint16_t>(sign)};  // <= 2^-25 -> 0
    const std::uint32_t e = a >> 23;
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // value / 2^-24 = m * 2^(e - 126)
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return fp16_t{static_cast<std::uint16_t>(sign | r)};
  }
  std::uint32_t r = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
  const std::uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return fp16_t{static_cast<std::uint16_t>(sign | r)};
}

KOKKOS_INLINE_FUNCTION float fp16_to_float(fp16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t e = (h.bits >> 10) & 0x1fu;
  const std::uint32_t m = h.bits & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (e == 31) return detail::bits_float(sign | 0x7f800000u | (m << 13));
  return detail::bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// Uniform conversions used by kernels and host code: to_acc<Acc>(x) widens a
// stored element to the accumulation type, from_acc<T>(a) rounds back once.
template <class T>
struct storage_traits {
  KOKKOS_INLINE_FUNCTION static double to_double(T x) { return static_cast<double>(x); }
  template <class Acc>
  KOKKOS_INLINE_FUNCTION static T from(Acc a) {
    return static_cast<T>(a);
  }
};
template <>
struct storage_traits<fp16_t> {
  KOKKOS_INLINE_FUNCTION static double to_double(fp16_t x) { return fp16_to_float(x); }
  template <class Acc>
  KOKKOS_INLINE_FUNCTION static fp16_t from(Acc a) {
    return fp16_from_float(static_cast<float>(a));
  }
};
template <>
struct storage_traits<bf16_t> {
  KOKKOS_INLINE_FUNCTION static double to_double(bf16_t x) { return bf16_to_float(x); }
  template <class Acc>
  KOKKOS_INLINE_FUNCTION static bf16_t from(Acc a) {
    return bf16_from_float(static_cast<float>(a));
  }
};

template <class Acc, class T>
KOKKOS_INLINE_FUNCTION Acc to_acc(T x) {
  return static_cast<Acc>(storage_traits<T>::to_double(x));
}
template <>
KOKKOS_INLINE_FUNCTION float to_acc<float, fp16_t>(fp16_t x) {
  return fp16_to_float(x);
}
template <>
KOKKOS_INLINE_FUNCTION float to_acc<float, bf16_t>(bf16_t x) {
  return bf16_to_float(x);
}
template <>
KOKKOS_INLINE_FUNCTION float to_acc<float, float>(float x) {
  return x;
}

template <class T, class Acc>
KOKKOS_INLINE_FUNCTION T from_acc(Acc a) {
  return storage_traits<T>::template from<Acc>(a);
}

}  // namespace linattn
