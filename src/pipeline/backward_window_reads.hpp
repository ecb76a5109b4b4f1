// What the streamed backward (streamed_backward.hpp) reads for one window,
// as block reads (block_read.hpp) into one slot of the shared input region,
// and the tensors they become: hyperslab blocks of q, k, v and the gate (the
// forward's input case), do and dht (the gradient input), h (the forward
// output) and initial_state rows. A reader process does the reads
// (backward_inputs.hpp); the schemas were checked before (inspect_case,
// inspect_grad_case, backward_batch.cpp). NaN and Inf in what the case reads
// from its input and gradient files are refused, naming the window, unless
// allowed; the gate is always checked as log-decays.
#pragma once

#include "core/gate.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "core/tensor_span.hpp"
#include "pipeline/block_read.hpp"
#include "pipeline/window_plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

struct BackwardSources {
  std::string input_file, input_group;  // q, k, v, the gate and initial_state ("" group: the root)
  bool has_initial_state = false;
  DType initial_dtype = DType::f32;  // initial_state as stored
  std::string grad_file, grad_group;  // do and dht
  bool has_dht = false;
  std::string forward_file;  // h, unless read_h is false (recomputed)
  bool read_h = true;
  DType h_dtype = DType::f32;  // h as stored
  DType input = DType::f32, accumulation = DType::f32;
  bool allow_nonfinite = false;
  GateKind gate = GateKind::none;  // the input case's g, g_gamma or gk (beside q, k, v)
};

// Which parts of a window to read. The recomputing forward pass reads q, k,
// v, the gate and start states; the backward pass adds do, h (unless
// recomputed) and dht rows.
struct WindowParts {
  bool d_o = false, h = false;
  std::int64_t initial_row0 = 0, initial_rows = 0;  // rows of initial_state read (0: none)
  std::int64_t dht_row0 = 0, dht_rows = 0;          // rows of dht read (0: none)
};

struct BackwardWindowRead {
  std::vector<pipeline::BlockRead> blocks;  // offsets from the slot's start
  std::int64_t bytes = 0;                   // of the slot they fill
  // Each tensor's block (-1: not read).
  int q = -1, k = -1, v = -1, d_o = -1, h = -1, gate = -1, initial = -1, dht = -1;
};

BackwardWindowRead backward_window_read(const BackwardSources& src, const Problem& whole, const Window& w,
                                        const WindowParts& parts);

struct BackwardWindowData {
  TensorSpan q, k, v, d_o;  // [rows, t1 - t0, H, DK|DV]; d_o empty unless read
  TensorSpan h;             // h's chunks [chunk0, chunk0 + chunks) of every row, as stored; empty unless read
  // g [rows, t1 - t0, H], gk [rows, t1 - t0, H, DK], or all of g_gamma [H], in the accumulation type;
  // empty without a gate.
  TensorSpan gate;
  Tensor initial_rows, dht_rows;  // [count, H, DK, DV] in the accumulation type; empty unless read
};

// The tensors of a read, where it put them in `slot` (so the slot stays
// untouched while they are in use); the few initial_state and dht rows are
// copied out, converted to the accumulation type.
BackwardWindowData unpack(const BackwardWindowRead& read, const BackwardSources& src, unsigned char* slot);

}  // namespace linattn
