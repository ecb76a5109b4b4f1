// The input schema (DESIGN.md section 5): datasets q, k [B, T, H, DK] and
// v [B, T, H, DV], optionally initial_state [N, H, DK, DV], z_state [N, H, DK]
// (the initial key sum of a normalized run) and cu_seqlens (int64 [N + 1],
// packed variable-length sequences, B = 1; without it N = B), at the root or
// in groups; each location holding q, k or v is one case of a batch.
#pragma once

#include "core/tensor.hpp"
#include "io/hdf5_dataset.hpp"

#include <string>
#include <vector>

namespace linattn {

// The cases of an input file, in name order: "" for the root, else the group
// path ("case0", "runs/a"). Throws FileError when the file is missing, is not
// HDF5, cannot be opened, or holds no q, k or v anywhere.
std::vector<std::string> list_cases(const std::string& file);

// "GROUP/NAME", or "NAME" for the root case.
std::string dataset_path(const std::string& group, const std::string& name);

struct CaseData {
  Tensor q, k, v;
  Tensor initial_state;                 // empty when the case has none
  std::vector<std::int64_t> cu_seqlens;  // empty for a plain batch
  Tensor initial_z;                     // dataset z_state; empty when the case has none
};

struct ReadOptions {
  bool allow_nonfinite = false;  // accept NaN and Inf elements
};

// Reads one case and checks it against the schema, so that nothing reaches a
// kernel unchecked. Throws FileError naming the file, the dataset and what is
// wrong: missing q/k/v, not a dataset, unsupported dtype, q/k/v dtypes
// differing, rank, a zero dimension, B/T/H or DK disagreeing, initial_state or
// z_state of the wrong shape, a layout other than BTHD, cu_seqlens that is not
// an integer vector or breaks the rules of validate_sequences (B = 1, starts
// at 0, increasing, ends at T), and NaN or Inf elements unless allowed.
CaseData read_case(const std::string& file, const std::string& group, const ReadOptions& options = {});

// Writes cases in the input schema (q, k, v with layout="BTHD", and
// initial_state, z_state and cu_seqlens when present) to a new file at path, via path.partial. Used by
// `linattn generate` and the tests.
struct NamedCase {
  std::string group;  // "" for the root
  CaseData data;
};
void write_input_file(const std::string& path, const std::vector<NamedCase>& cases,
                      const hdf5::WriteOptions& options = {});

}  // namespace linattn
