// The backward of one case in windows (README.md "The backward",
// docs/ARCHITECTURE.md "The streamed backward"). The backward of a window
// [t0, t1) is exactly the backward of that sub-problem with dht := the state
// gradient dS carried from the window after it (the true dht, or zero, for
// the last window), reading the h of its own chunks; the dh0 it returns is the
// dS to carry into the window before it, and after window 0 it is the real
// dh0. So the windows run from the last to the first, one run_backward call
// each, and the carry passes exactly (accumulation type): the results are the
// bits of the whole case in one call. A packed window holds whole chunks of
// its sequences: only a sequence cut at its end takes the carry as dht, only
// one cut at its start hands its dh0 on; the others are whole.
//
// With recompute_h a window needs the forward state at its start: a forward
// pass over the windows in order (run_forward, fused, from the carried final
// state) keeps only those, then each window recomputes its snapshots from its
// start state inside run_backward.
//
// Reading, the kernels and writing overlap: reader processes read the next
// windows (backward_inputs.hpp) and a writer thread writes the last ones
// (grad_write_stage.hpp) while run_backward runs on this one. No window is
// copied on the host: the kernels read it in the read slot the reader filled
// and write their results into an output slot (backward_window_outputs.hpp)
// that the writer writes from; under CUDA both are page-locked.
#pragma once

#include "core/problem.hpp"
#include "kernels/backward.hpp"
#include "pipeline/backward_inputs.hpp"
#include "pipeline/grad_write_stage.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/window_plan.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace linattn {

struct StreamedBackwardResult {
  double upload_seconds = 0, kernel_seconds = 0, download_seconds = 0;  // summed over the windows (and the forward pass)
  GemmPath gemm = GemmPath::kokkos_kernels;                            // the backward's path
};

// Runs the windows (in token order, as plan_backward_windows gives them),
// reading them through `in` (until `deadline`), and writes dq, dk, dv and dh0
// (and the gate's gradient) through `out` window by window, each window's in
// a slot of `output_slots` (as large as backward_window_output_bytes of every
// window) until it is written; drains `out` before it returns. `window_done` is called after each window of each pass
// (forward: false) with the window.
StreamedBackwardResult run_streamed_backward(const Problem& whole, const BackwardConfig& config,
                                             const std::vector<Window>& windows, const BackwardSources& src,
                                             pipeline::BackwardInputs& in, pipeline::Clock::time_point deadline,
                                             pipeline::SlotPool& output_slots, pipeline::GradWriteStage& out,
                                             const std::function<void(const Window&, bool backward)>& window_done);

}  // namespace linattn
