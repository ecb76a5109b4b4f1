// How an output names the files it was made from (its input case, and for a
// gradient output the forward output and the gradient input), so that verify
// and backward find them from any folder: each is recorded as its absolute
// path and as its path relative to the output's folder (docs/HDF5.md,
// "Output attributes"). Reading, the relative path wins (the output and its
// input moved together), then the absolute one.
#pragma once

#include "core/gate.hpp"

#include <string>

namespace linattn {

struct RecordedPath {
  std::string absolute;  // attribute NAME (older outputs: the path as typed when the output was made)
  std::string relative;  // attribute NAME_relative, from the output's folder ("" in older outputs)
};

// `file` (as typed, from the current folder) as an output at `output` records it.
RecordedPath record_path(const std::string& file, const std::string& output);

// The file `recorded` names, as an output at `output` (as typed) records it:
// relative to the output's folder when that exists, else the absolute path.
// FileError (naming the output and `attribute`) when neither exists, or when
// the file found is the output itself.
std::string resolve_recorded_path(const std::string& output, const RecordedPath& recorded,
                                  const std::string& attribute);

// FileError when `file` (a path given on the command line, such as verify's
// --input) is the output itself.
void refuse_output_as_input(const std::string& output, const std::string& file, const std::string& what);

// verify's check that the input case (input:group) holds the gate `output`
// recorded (its attribute gate): FileError naming both otherwise.
void check_recorded_gate(const std::string& output, const std::string& recorded_gate, const std::string& input,
                         const std::string& group, GateKind input_gate);

}  // namespace linattn
