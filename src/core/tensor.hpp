// A type-erased host tensor: the currency between HDF5 I/O, the CLI and the
// kernels' host entry point. Row-major; fp16/bf16 elements are stored as their
// 16-bit patterns.
#pragma once

#include "core/dtype.hpp"

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace linattn {

// std::allocator, except that growing a vector without a value leaves the new
// elements uninitialized: a tensor that a read or a kernel fills whole is not
// zeroed first (on fresh pages that zeroing is a second pass over memory).
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <class T, class U>
bool operator==(const UninitializedAllocator<T>&, const UninitializedAllocator<U>&) { return true; }
template <class T, class U>
bool operator!=(const UninitializedAllocator<T>&, const UninitializedAllocator<U>&) { return false; }

struct Tensor {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char, UninitializedAllocator<unsigned char>> bytes;

  Tensor() = default;
  Tensor(DType t, std::vector<std::int64_t> s);  // zero-filled
  // For a tensor that is written whole before it is read (an HDF5 read, a kernel's output).
  static Tensor uninitialized(DType t, std::vector<std::int64_t> s);

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

// Element i of `bytes` holding elements of type t, widened to double (exact).
double element_as_double(DType t, const unsigned char* bytes, std::int64_t i);

std::string shape_string(const std::vector<std::int64_t>& shape);  // "[2, 64, 4, 32]"
// The bytes of a row-major tensor of type t and this shape.
std::int64_t tensor_bytes(DType t, const std::vector<std::int64_t>& shape);

// Throws std::invalid_argument "NAME has shape [..], expected [..]" unless t has `expected`.
void require_shape(const Tensor& t, const std::vector<std::int64_t>& expected, const char* name);
void require_shape_of(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& expected,
                      const char* name);

}  // namespace linattn
