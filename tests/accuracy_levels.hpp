// The accuracy each output must reach against the fp64 reference (DESIGN.md
// section 6). The kernels read exactly the values the reference reads, so the
// only error sources are accumulation in the accumulation type and one final
// rounding of each stored element, which is bounded by the stored type's unit
// roundoff in relative L2 (|round(x) - x| <= u |x| elementwise).
#pragma once

#include "core/dtype.hpp"

namespace linattn::testing {

// Accumulation error level: fp64 accumulation <= 1e-13, fp32 <= 1e-5.
inline double accumulation_level(DType input) { return input == DType::f64 ? 1e-13 : 1e-5; }

// Level for a tensor stored in `stored` after accumulation in the input's accumulation type.
inline double stored_level(DType input, DType stored) {
  return accumulation_level(input) + unit_roundoff(stored);
}

}  // namespace linattn::testing
