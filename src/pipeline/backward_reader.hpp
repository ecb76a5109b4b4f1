// What the streamed backward (streamed_backward.hpp) reads for one window:
// hyperslab blocks of q, k, v (the forward's input case), do and dht (the
// gradient input), h (the forward output) and initial_state rows. The three
// files are opened once per case, in this process (docs/ARCHITECTURE.md,
// "The streamed backward"); their schemas are checked before (inspect_case,
// inspect_grad_case, backward_batch.cpp). NaN and Inf in what the case reads
// from its input and gradient files are refused, naming the window, unless
// allowed.
#pragma once

#include "core/gate.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "io/hdf5_handles.hpp"
#include "pipeline/window_plan.hpp"

#include <string>

namespace linattn {

struct BackwardSources {
  std::string input_file, input_group;  // q, k, v and initial_state ("" group: the root)
  bool has_initial_state = false;
  std::string grad_file, grad_group;  // do and dht
  bool has_dht = false;
  std::string forward_file;  // h, unless read_h is false (recomputed)
  bool read_h = true;
  DType input = DType::f32, accumulation = DType::f32;
  bool allow_nonfinite = false;
  GateKind gate = GateKind::none;  // the input case's g, g_gamma or gk (beside q, k, v)
};

class BackwardReader {
 public:
  BackwardReader(const BackwardSources& sources, const Problem& whole);

  struct Tokens {
    Tensor q, k, v, d_o;  // [rows, t1 - t0, H, DK|DV]; d_o empty unless asked for
  };
  Tokens tokens(const Window& w, bool with_do) const;
  // h's chunks [chunk0, chunk0 + chunks) of every row, in their stored dtype.
  Tensor h(const Window& w) const;
  // Rows [n0, n0 + count) of initial_state and of dht, in the accumulation
  // type; zeros when the file has none.
  Tensor initial_rows(std::int64_t n0, std::int64_t count) const;
  Tensor dht_rows(std::int64_t n0, std::int64_t count) const;
  // The gate of the window: g [rows, t1 - t0, H], gk [rows, t1 - t0, H, DK], or all of g_gamma [H], in
  // the accumulation type, checked as log-decays (finite, <= 0) whatever
  // allow_nonfinite says; empty without a gate.
  Tensor gate(const Window& w) const;
  bool has_initial_state() const { return src_.has_initial_state; }
  bool has_dht() const { return src_.has_dht; }

 private:
  Tensor block(const hdf5::Dataset& ds, const std::string& file, const std::string& path, DType dtype,
               const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& count, bool check,
               const std::string& window) const;
  Tensor rows(const hdf5::Dataset& ds, const std::string& file, const std::string& path, std::int64_t n0,
              std::int64_t count) const;

  BackwardSources src_;
  Problem p_;  // the whole case's shapes (its cu_seqlens are not needed here)
  hdf5::File input_, grad_, forward_;
  hdf5::Dataset q_, k_, v_, initial_, do_, dht_, h_, gate_;
  DType initial_dtype_ = DType::f32, h_dtype_ = DType::f32;
};

}  // namespace linattn
