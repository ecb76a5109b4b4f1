#include "io/hdf5_types.hpp"

#include <stdexcept>
#include <string>

namespace linattn::hdf5 {
namespace {

struct FloatLayout {
  std::size_t size, sign_pos, exp_pos, exp_bits, mant_pos, mant_bits, exp_bias;
};

// The bit layout of each DType (IEEE binary16/32/64 and bfloat16).
FloatLayout layout_of(DType t) {
  switch (t) {
    case DType::f16: return {2, 15, 10, 5, 0, 10, 15};
    case DType::bf16: return {2, 15, 7, 8, 0, 7, 127};
    case DType::f32: return {4, 31, 23, 8, 0, 23, 127};
    case DType::f64: return {8, 63, 52, 11, 0, 52, 1023};
  }
  throw std::invalid_argument("unknown dtype");
}

Datatype checked(hid_t id) {
  if (id < 0) throw std::runtime_error("HDF5 could not build a datatype");
  return Datatype(id);
}

void must(herr_t status) {
  if (status < 0) throw std::runtime_error("HDF5 could not build a datatype");
}

// A 16-bit float type: fields first, then the size, since HDF5 refuses to
// shrink a float type whose fields do not fit the new size.
Datatype half_type(const FloatLayout& l) {
  Datatype t = checked(H5Tcopy(H5T_NATIVE_FLOAT));
  must(H5Tset_fields(t.get(), l.sign_pos, l.exp_pos, l.exp_bits, l.mant_pos, l.mant_bits));
  must(H5Tset_offset(t.get(), 0));
  must(H5Tset_precision(t.get(), 16));
  must(H5Tset_size(t.get(), 2));
  must(H5Tset_ebias(t.get(), l.exp_bias));
  return t;
}

std::string describe_float(hid_t type) {
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
  return std::to_string(8 * H5Tget_size(type)) + "-bit float with sign bit " + std::to_string(spos) +
         ", exponent " + std::to_string(esize) + " bits at " + std::to_string(epos) + " (bias " +
         std::to_string(H5Tget_ebias(type)) + "), mantissa " + std::to_string(msize) + " bits at " +
         std::to_string(mpos);
}

}  // namespace

Datatype datatype_of(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16: return half_type(layout_of(t));
    case DType::f32: return checked(H5Tcopy(H5T_NATIVE_FLOAT));
    case DType::f64: return checked(H5Tcopy(H5T_NATIVE_DOUBLE));
  }
  throw std::invalid_argument("unknown dtype");
}

DType dtype_of(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = 8 * H5Tget_size(type);
  if (cls == H5T_INTEGER)
    throw std::invalid_argument("integer datatype (" + std::to_string(bits) +
                                "-bit) is not supported; expected float16, bfloat16, float32 or float64");
  if (cls != H5T_FLOAT) {
    const char* kind = cls == H5T_STRING ? "string" : cls == H5T_COMPOUND ? "compound" : cls == H5T_ENUM ? "enum"
                       : cls == H5T_ARRAY ? "array" : cls == H5T_BITFIELD ? "bitfield" : cls == H5T_OPAQUE ? "opaque"
                                                                                                          : "non-numeric";
    throw std::invalid_argument(std::string(kind) +
                                " datatype is not supported; expected float16, bfloat16, float32 or float64");
  }
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0)
    throw std::invalid_argument("unreadable floating-point datatype");
  const std::size_t bias = H5Tget_ebias(type);
  for (DType t : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    const FloatLayout l = layout_of(t);
    if (H5Tget_size(type) == l.size && spos == l.sign_pos && epos == l.exp_pos && esize == l.exp_bits &&
        mpos == l.mant_pos && msize == l.mant_bits && bias == l.exp_bias)
      return t;
  }
  throw std::invalid_argument(describe_float(type) +
                              " is not supported; expected float16, bfloat16, float32 or float64");
}

}  // namespace linattn::hdf5
