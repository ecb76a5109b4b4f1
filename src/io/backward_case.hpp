// What `linattn backward` learns of a case before it reads any data
// (docs/ARCHITECTURE.md, "The streamed backward"): the forward output's
// attributes and shapes, checked against the input case it names and against
// the gradient input. These are the first reads of the case's files, which
// may be hostile: a reader process (pipeline/read_process.cpp) makes them, so
// that a crash or a hang inside libhdf5 costs only the case, as `run`'s reads do.
#pragma once

#include "core/dtype.hpp"
#include "core/gate.hpp"
#include "core/problem.hpp"

#include <string>
#include <vector>

namespace linattn {

struct BackwardCase {
  Problem p;
  DType dtype = DType::f32;          // q, k, v and do
  DType h_dtype = DType::f32;        // h as stored (unused with --recompute-h)
  GateKind gate = GateKind::none;    // the input case's g, g_gamma or gk
  bool has_initial_state = false;
  DType initial_dtype = DType::f32;  // initial_state as stored
  std::string input_file;            // found from the forward output (recorded_paths.hpp)
  std::string input_group;           // as the forward output records it ("/" for the root)
  std::string grad_group;            // the gradient input's group ("" for the root)
  bool has_dht = false;
  // The datasets read from other files (--allow-external-data), for the result line.
  std::vector<std::string> external_data;
  std::string group() const { return input_group == "/" ? "" : input_group; }  // the input case's, "" for the root
};

// Throws FileError naming the file, the dataset and what is wrong: a forward
// output that is normalized, lacks h (unless recompute_h), or does not match
// its input case (shapes, sequences, gate, dtype: the input changed since?);
// a gradient input whose do or dht do not fit the problem.
BackwardCase inspect_backward_case(const std::string& forward, const std::string& grad, bool recompute_h);

}  // namespace linattn
