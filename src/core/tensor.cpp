#include "core/tensor.hpp"

#include "core/half_types.hpp"

#include <sstream>
#include <stdexcept>

namespace linattn {

Tensor::Tensor(DType t, std::vector<std::int64_t> s) : dtype(t), shape(std::move(s)) {
  bytes.assign(static_cast<std::size_t>(numel()) * dtype_size(dtype), 0);
}

Tensor Tensor::uninitialized(DType t, std::vector<std::int64_t> s) {
  Tensor x;
  x.dtype = t;
  x.shape = std::move(s);
  x.bytes.resize(static_cast<std::size_t>(x.numel()) * dtype_size(t));
  return x;
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return shape.empty() ? 0 : n;
}

double element_as_double(DType t, const unsigned char* bytes, std::int64_t i) {
  switch (t) {
    case DType::f16: return fp16_to_float(reinterpret_cast<const fp16_t*>(bytes)[i]);
    case DType::bf16: return bf16_to_float(reinterpret_cast<const bf16_t*>(bytes)[i]);
    case DType::f32: return reinterpret_cast<const float*>(bytes)[i];
    case DType::f64: return reinterpret_cast<const double*>(bytes)[i];
  }
  return 0.0;
}

double Tensor::get(std::int64_t i) const { return element_as_double(dtype, bytes.data(), i); }

void Tensor::set(std::int64_t i, double v) {
  switch (dtype) {
    case DType::f16: data<fp16_t>()[i] = fp16_from_float(static_cast<float>(v)); break;
    case DType::bf16: data<bf16_t>()[i] = bf16_from_float(static_cast<float>(v)); break;
    case DType::f32: data<float>()[i] = static_cast<float>(v); break;
    case DType::f64: data<double>()[i] = v; break;
  }
}

std::vector<double> Tensor::to_double() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  for (std::int64_t i = 0; i < numel(); ++i) out[i] = get(i);
  return out;
}

Tensor Tensor::from_double(DType t, std::vector<std::int64_t> s, const std::vector<double>& v) {
  Tensor out(t, std::move(s));
  if (static_cast<std::int64_t>(v.size()) != out.numel())
    throw std::invalid_argument("Tensor::from_double: size mismatch");
  for (std::int64_t i = 0; i < out.numel(); ++i) out.set(i, v[i]);
  return out;
}

std::int64_t tensor_bytes(DType t, const std::vector<std::int64_t>& shape) {
  std::int64_t n = static_cast<std::int64_t>(dtype_size(t));
  for (std::int64_t e : shape) n *= e;
  return n;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

void require_shape(const Tensor& t, const std::vector<std::int64_t>& expected, const char* name) {
  require_shape_of(t.shape, expected, name);
}

void require_shape_of(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& expected,
                      const char* name) {
  if (shape != expected)
    throw std::invalid_argument(std::string(name) + " has shape " + shape_string(shape) + ", expected " +
                                shape_string(expected));
}

}  // namespace linattn
