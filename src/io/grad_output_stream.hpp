// A gradient output (docs/HDF5.md, "Gradient outputs") written window by
// window, as `linattn backward` streams a case: dq, dk, dv and dh0 are created
// full size up front (contiguous, no fill pass), each window's tokens of dq,
// dk and dv and the dh0 rows it finishes are written as blocks, and finish()
// adds the attributes and commits the file (.partial -> final name, with
// fsync when durable). A stream destroyed before finish() removes its
// .partial file. The datasets are allocated when created: offsets() says
// where their bytes lie, so that they can be written without HDF5
// (grad_write_stage.hpp, several writers).
#pragma once

#include "core/gate.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "core/tensor_span.hpp"
#include "io/grad_output_file.hpp"
#include "io/hdf5_file.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

// Byte offsets of the datasets' data in the file (-1: none), and the types
// their bytes are in (dq, dk, dv: tokens; dh0 and the gate's gradient: state).
struct GradOffsets {
  std::int64_t dq = -1, dk = -1, dv = -1, dh0 = -1, dg = -1;
  DType tokens = DType::f32, state = DType::f32;
};

class GradOutputStream {
 public:
  // dq, dk, dv of `tokens` dtype, dh0 (and a gate's dg, dg_gamma or dgk) of `state` dtype; cu_seqlens copied for a
  // packed p.
  GradOutputStream(const std::string& path, const Problem& p, DType tokens, DType state,
                   GateKind gate = GateKind::none);

  // The window [t0, t0 + T') of every batch row: dq, dk [rows, T', H, DK], dv [rows, T', H, DV].
  void write_tokens(std::int64_t t0, const TensorSpan& dq, const TensorSpan& dk, const TensorSpan& dv);
  // dh0 rows [n0, n0 + rows.shape[0]).
  void write_dh0(std::int64_t n0, const Tensor& rows);
  // dg of the window [t0, t0 + T') of every batch row, [rows, T', H] (gate g) or dgk [rows, T', H, DK]
  // (gate gk), and all of dg_gamma [H] (g_gamma).
  void write_dg(std::int64_t t0, const TensorSpan& dg);
  void write_dg_gamma(const Tensor& dg_gamma);

  void finish(const GradRecord& record, bool durable);
  const std::string& path() const { return file_.path(); }
  const std::string& partial_path() const { return file_.partial_path(); }
  const GradOffsets& offsets() const { return offsets_; }
  std::int64_t data_end() const { return data_end_; }  // the end of the last dataset's bytes
  GateKind gate() const { return gate_; }

 private:
  hdf5::NewFile file_;
  GateKind gate_;
  hdf5::Dataset dq_, dk_, dv_, dh0_, dg_;
  GradOffsets offsets_;
  std::int64_t data_end_ = 0;
};

}  // namespace linattn
