// A type-erased host tensor: the currency between HDF5 I/O, the CLI and the
// kernels' host entry point. Row-major; fp16/bf16 elements are stored as their
// 16-bit patterns.
#pragma once

#include "core/dtype.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

struct Tensor {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;

  Tensor() = default;
  Tensor(DType t, std::vector<std::int64_t> s);

  std::int64_t numel() const;
  bool empty() const { return shape.empty(); }
  template <class T>
  T* data() { return reinterpret_cast<T*>(bytes.data()); }
  template <class T>
  const T* data() const { return reinterpret_cast<const T*>(bytes.data()); }

  // Element i widened to double (exact for every supported type).
  double get(std::int64_t i) const;
  // Store v rounded (to nearest, ties to even) into element i.
  void set(std::int64_t i, double v);

  std::vector<double> to_double() const;
  static Tensor from_double(DType t, std::vector<std::int64_t> s, const std::vector<double>& v);
};

std::string shape_string(const std::vector<std::int64_t>& shape);  // "[2, 64, 4, 32]"

// Throws std::invalid_argument "NAME has shape [..], expected [..]" unless t has `expected`.
void require_shape(const Tensor& t, const std::vector<std::int64_t>& expected, const char* name);

}  // namespace linattn
