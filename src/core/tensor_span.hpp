// A tensor's dtype and shape over bytes that something else owns: a Tensor,
// or a slot of the pipeline's page-locked host regions (pipeline/host_buffers.hpp),
// so that the kernels' entry points read their inputs and write their outputs
// there without a copy. Row-major, as Tensor.
#pragma once

#include "core/tensor.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

namespace linattn {

struct TensorSpan {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;  // empty: no tensor
  unsigned char* bytes = nullptr;

  TensorSpan() = default;
  TensorSpan(DType t, std::vector<std::int64_t> s, unsigned char* b) : dtype(t), shape(std::move(s)), bytes(b) {}
  // A tensor's own bytes. Inputs are never written through a span of a const
  // tensor (the kernels' views of inputs are const).
  TensorSpan(const Tensor& t) : dtype(t.dtype), shape(t.shape), bytes(const_cast<unsigned char*>(t.bytes.data())) {}

  bool empty() const { return shape.empty(); }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return empty() ? 0 : n;
  }
  std::size_t size_bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  template <class T>
  T* data() const {
    return reinterpret_cast<T*>(bytes);
  }
  std::vector<double> to_double() const {
    std::vector<double> out(static_cast<std::size_t>(numel()));
    for (std::int64_t i = 0; i < numel(); ++i) out[static_cast<std::size_t>(i)] = element_as_double(dtype, bytes, i);
    return out;
  }
  // A Tensor holding a copy of the bytes.
  Tensor copy() const {
    Tensor t = Tensor::uninitialized(dtype, shape);
    if (!empty()) std::memcpy(t.bytes.data(), bytes, t.bytes.size());
    return t;
  }
};

inline void require_shape(const TensorSpan& t, const std::vector<std::int64_t>& expected, const char* name) {
  require_shape_of(t.shape, expected, name);
}

}  // namespace linattn
