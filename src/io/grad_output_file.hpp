// The gradient-output schema (docs/HDF5.md, "Gradient outputs"): what
// `linattn backward` writes per forward output, OUTDIR/<stem>.grad.h5 with
// dq, dk [B, T, H, DK] and dv [B, T, H, DV] (layout="BTHD"; the input dtype,
// or fp32), dh0 [N, H, DK, DV] (the accumulation type), for a gated case dg
// [B, T, H] (g), dg_gamma [H] (g_gamma) or dgk [B, T, H, DK] (gk) in the accumulation type, cu_seqlens for packed
// inputs, and the run's attributes (write_run_record's, variant "backward")
// plus where the forward and the gradients came from, so that `linattn
// verify` can redo it from the input case and the gradient file.
#pragma once

#include "core/tensor.hpp"
#include "io/output_file.hpp"

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

struct GradRecord {
  RunRecord run;             // input_file and input_group name the forward's input case
  std::string forward_file;  // the forward output, absolute (older outputs: as given on the command line)
  std::string grad_file;     // the gradient input, absolute (older outputs: as given)
  std::string forward_file_relative, grad_file_relative;  // from the output file's folder; "" in older outputs
  std::string grad_group;    // where do and dht were read: "/" for the root
  bool recompute_h = false;  // the snapshots were recomputed (run.snapshot_dtype is then the accumulation type)
};

struct GradOutputData {
  Tensor dq, dk, dv, dh0;
  Tensor dg;        // gated by g: [B, T, H]; else empty
  Tensor dg_gamma;  // gated by g_gamma: [H]; else empty
  Tensor dgk;       // gated by gk: [B, T, H, DK]; else empty
  std::vector<std::int64_t> cu_seqlens;  // copied from the input; empty for a plain batch
  GradRecord record;
};

// Writes whole tensors to path.partial and renames it to path (replacing an
// existing file); with durable, flushed to disk first (hdf5::NewFile::commit).
// Throws FileError; on failure no file named path is created. Used by the
// tests; `linattn backward` writes window by window (grad_output_stream.hpp).
void write_grad_output_file(const std::string& path, const GradOutputData& out, bool durable = true);

// What every gradient output carries beside the data, shared with the
// streamed writer (grad_output_stream.hpp): the attributes of dq, dk, dv and
// dh0 (which must exist), and the file's (the run record and where the inputs
// came from).
void write_grad_dataset_attributes(hid_t file, const std::string& path, bool packed);
void write_grad_record(hid_t file, const std::string& path, const GradRecord& record);

// True when the file holds dq: a gradient output rather than a forward one.
bool is_grad_output_file(const std::string& path);

// Reads a gradient output back (tensors bit-exact, attributes); FileError when
// a dataset or attribute is missing or malformed.
GradOutputData read_grad_output_file(const std::string& path);

}  // namespace linattn
