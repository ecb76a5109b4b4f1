// One rank's part of a case under context parallel (docs/PARALLEL.md): the
// tokens [t0, t1) of q, k, v and g (every batch row) and the initial_state and
// z_state rows [row0, row0 + rows), read as hyperslabs from a file inspected
// with inspect_case. The same checks as the reader process's windows: NaN and
// Inf are refused (naming the element) unless allowed.
#pragma once

#include "io/input_file.hpp"

#include <cstdint>
#include <string>

namespace linattn {

struct SliceRequest {
  std::int64_t t0 = 0, t1 = 0;      // tokens of every batch row; t0 == t1 reads no q, k, v
  std::int64_t row0 = 0, rows = 0;  // initial_state / z_state rows (when the case has them)
  DType accumulation = DType::f32;  // the element type of the state rows in memory
  bool allow_nonfinite = false;
  bool with_q = true;               // false: k and v only (q left empty)
};

// q, k, v [B, t1 - t0, H, D] in the input dtype; initial_state [rows, H, DK, DV]
// and initial_z [rows, H, DK] in the accumulation type, empty when the case has
// none or rows is 0 (cu_seqlens is left empty); the case's gate in the
// accumulation type, as the reader process reads it: g [B, t1 - t0, H] or
// g_gamma [H] whole, its values checked as log-decays always. Throws FileError.
CaseData read_slice(hid_t file, const std::string& file_name, const std::string& group, const CaseSchema& schema,
                    const SliceRequest& request);

}  // namespace linattn
