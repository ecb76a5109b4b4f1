#include "core/dtype.hpp"

#include <stdexcept>

namespace linattn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::f32: return "fp32";
    case DType::f64: return "fp64";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "fp16" || s == "float16" || s == "f16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp32" || s == "float32" || s == "f32" || s == "float") return DType::f32;
  if (s == "fp64" || s == "float64" || s == "f64" || s == "double") return DType::f64;
  throw std::invalid_argument("unknown dtype '" + s + "' (expected fp16, bf16, fp32 or fp64)");
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16: return 2;
    case DType::f32: return 4;
    case DType::f64: return 8;
  }
  return 0;
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    case DType::f32: return 0x1p-24;
    case DType::f64: return 0x1p-53;
  }
  return 1.0;
}

}  // namespace linattn
