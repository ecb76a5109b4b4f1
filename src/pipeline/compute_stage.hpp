// The compute stage: one window of one case on the device. Uploads the
// window's inputs from its host slot (asynchronous copies on an execution
// space instance of its own, from page-locked memory), starts it from the
// state carried out of the previous window (and z for normalization), runs
// the variant, and downloads o, h and the finished sequences' final rows into
// the output slot. On host backends the kernels read and write the slots
// directly: there is nothing to copy.
//
// Several windows of a packed case may run as one device window
// (window_groups.hpp): uploaded part by part, computed in one launch,
// downloaded part by part.
//
// The tensor-core kernel's split of few long sequences into segments sums the
// state in another order; a window's split would depend on the window, so the
// pipeline never splits (segments = 1), and a case's bits do not depend on
// the memory budget.
#pragma once

#include "kernels/forward.hpp"
#include "pipeline/window_plan.hpp"

#include <memory>

namespace linattn::pipeline {

struct WindowTimes {
  double upload = 0, kernel = 0, download = 0;
  WindowTimes& operator+=(const WindowTimes& t) {
    upload += t.upload;
    kernel += t.kernel;
    download += t.download;
    return *this;
  }
};

struct WindowJob {
  const Problem* whole = nullptr;
  const CaseStorage* storage = nullptr;
  const Window* window = nullptr;
  WindowLayout layout;
  const unsigned char* input = nullptr;  // the input slot
  unsigned char* output = nullptr;       // the output slot
};

class ComputeStage {
 public:
  virtual ~ComputeStage() = default;
  // Runs one window; the first window of a case starts from the case's own
  // initial state, a later one from the state the window before it carried.
  WindowTimes run(const WindowJob& job) {
    begin(job, false);
    WindowTimes t = upload_part(job);
    t += compute();
    t += download_part(job);
    return t;
  }
  // A device window (window_groups.hpp) in steps: begin with the merged
  // window (its input and output null), upload each part from its input
  // slot, compute once, download each part into its output slot. staged:
  // the parts are copied into the stage's own buffers even on host backends
  // (whose single windows the kernels read and write in their slots).
  virtual void begin(const WindowJob& group, bool staged) = 0;
  virtual WindowTimes upload_part(const WindowJob& part) = 0;
  virtual WindowTimes compute() = 0;
  virtual WindowTimes download_part(const WindowJob& part) = 0;
  // Context parallel: the case's next window starts inside it (t0 > 0) from
  // a state computed elsewhere, another rank's segment: its carried rows
  // (every batch row, or a packed case's one sequence) in the accumulation
  // type, state [rows, H, DK, DV] and z [rows, H, DK] (null without --normalize).
  virtual void carry_in(const Problem& whole, const void* state, const void* z) = 0;
  // One tiny run of this case's kernels (module loading, first-launch costs),
  // so that they are not counted as a case's kernel time. Returns seconds.
  virtual double warm_up(const Problem& whole, const CaseStorage& storage) = 0;
  // The tile-product path the last window ran on.
  virtual GemmPath gemm() const = 0;
};

// A stage for one (input, output, snapshot) type combination.
std::unique_ptr<ComputeStage> make_compute_stage(DType input, const ForwardConfig& config);

}  // namespace linattn::pipeline
