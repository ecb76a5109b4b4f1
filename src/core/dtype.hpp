// The element types linattn reads and writes, named once for CLI, HDF5 and reports.
#pragma once

#include <cstddef>
#include <string>

namespace linattn {

enum class DType { f16, bf16, f32, f64 };

const char* dtype_name(DType t);     // "fp16", "bf16", "fp32", "fp64"
DType parse_dtype(const std::string& s);  // accepts fp16/float16/f16, bf16/bfloat16, fp32/float32, fp64/float64
std::size_t dtype_size(DType t);

// Accumulation type for an input type: fp64 for fp64 inputs, fp32 otherwise.
inline DType accumulation_dtype(DType input) { return input == DType::f64 ? DType::f64 : DType::f32; }

// Unit roundoff (half an ulp at 1.0) of a type: the largest relative error of one rounding.
double unit_roundoff(DType t);

}  // namespace linattn
