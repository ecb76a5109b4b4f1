// DType <-> HDF5 datatype. fp32 and fp64 are the native IEEE types; fp16 and
// bf16 are user-defined 16-bit floats built from the native float type:
//   fp16: sign bit 15, exponent bits 10-14 (bias 15),  mantissa bits 0-9
//   bf16: sign bit 15, exponent bits 7-14  (bias 127), mantissa bits 0-6
// h5py reads both (bf16 as float32 through HDF5's conversion).
#pragma once

#include "core/dtype.hpp"
#include "io/hdf5_handles.hpp"

#include <hdf5.h>

namespace linattn::hdf5 {

// A fresh copy of the datatype storing `t` (used both in files and in memory,
// so that reading a file written by linattn involves no conversion).
Datatype datatype_of(DType t);

// The DType of a dataset's datatype. Throws std::invalid_argument saying what
// is unsupported: integers, strings and other classes, or float layouts other
// than the four above.
DType dtype_of(hid_t type);

}  // namespace linattn::hdf5
