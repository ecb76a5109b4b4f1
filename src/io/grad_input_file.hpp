// The gradient-input schema of `linattn backward` (docs/HDF5.md, "Gradient
// inputs"): per case, do [B, T, H, DV] in the input dtype (dL/do) and
// optionally dht [N, H, DK, DV] in the accumulation type (dL/dfinal_state;
// absent: zero), in the group of the forward's input case when the file has
// that group, else at the root (so that one root pair serves a one-case input).
#pragma once

#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/input_file.hpp"

#include <string>
#include <vector>

namespace linattn {

struct GradData {
  Tensor d_o;         // dataset do
  Tensor dht;         // empty when the file has none
  std::string group;  // where they were read: "" for the root
  std::vector<std::string> external_data;  // as in GradSchema
};

// Where the gradients of a case lie, from the metadata alone (the checks of
// read_grad_case before it reads data), for reads in windows.
struct GradSchema {
  std::string group;     // "" for the root
  bool has_dht = false;  // dht absent: zero
  std::vector<std::string> external_data;  // "do", "dht" when read from other files (--allow-external-data)
};
GradSchema inspect_grad_case(hid_t file, const std::string& file_name, const std::string& case_group,
                             const Problem& p, DType input);

// Reads the gradients of the case `case_group` ("" or "/" for a root case) of
// problem p with inputs of dtype `input`, checked before any data is read:
// do present, of p's [B, T, H, DV] and the input dtype; dht, when present, of
// [N, H, DK, DV] and the accumulation type; contiguous data not truncated;
// then NaN and Inf refused unless allowed. Throws FileError naming the file,
// the dataset and what is wrong.
GradData read_grad_case(const std::string& file, const std::string& case_group, const Problem& p, DType input,
                        const ReadOptions& options = {});

// Writes gradient inputs (do with layout="BTHD", dht when not empty) to a new
// file at path, via path.partial. Used by `linattn generate --grad` and the tests.
struct NamedGrad {
  std::string group;  // "" for the root
  Tensor d_o, dht;
};
void write_grad_file(const std::string& path, const std::vector<NamedGrad>& cases,
                     const hdf5::WriteOptions& options = {});

}  // namespace linattn
