// `linattn backward` without the command line: for each forward output (a
// file written by `linattn run`) and its gradient input, the forward's input
// case is checked against the output, and the backward runs on the whole case
// when its working set fits the memory budget, else in windows from the last
// to the first (streamed_backward.hpp), and writes OUTDIR/<forward output
// stem>.grad.h5. A bad case is reported and skipped; the others still run.
// HDF5 is read in this process (no reader process).
#pragma once

#include "core/problem.hpp"
#include "kernels/backward.hpp"

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace linattn {

struct BackwardOptions {
  std::vector<std::string> forwards;  // forward output files
  std::vector<std::string> grads;     // one gradient input per forward output, in the same order
  std::string outdir;
  BackwardConfig backward;       // gemm, output dtype, recompute_h
  bool force = false;            // replace existing outputs
  bool skip_existing = false;    // keep existing outputs (an interrupted batch resumes) and run the other cases
  bool allow_nonfinite = false;  // accept NaN/Inf in the inputs and gradients
  bool allow_external_data = false;  // read external raw storage and virtual datasets from their file's folder
  bool durable = true;           // fsync each output before its rename
  std::int64_t memory_budget = 0;  // bytes for a case's working set; 0: pipeline::default_memory_budget()
  bool progress_bar = true;        // a redrawn bar when stderr is a terminal
  double case_timeout = 1800;      // seconds the reader processes may spend on one case
  int readers = 3;                 // reader processes reading windows ahead, each into a slot of its own
  int writers = 1;                 // threads copying into each mapped output; 1: one writer through HDF5
  std::string reader_exe;          // the program started as the reader process; "": this program
};

struct BackwardCaseResult {
  std::string forward, grad;  // as given
  std::string output;         // once known
  bool ok = false;
  bool skipped = false;  // ok: its output existed (--skip-existing)
  std::string error;  // one line when !ok
  std::optional<Problem> problem;
  DType dtype = DType::f32;
  GateKind gate = GateKind::none;  // the input case's decay gate
  std::string gemm;  // the path that ran
  double kernel_seconds = 0, wall_seconds = 0;
  double warm_up_seconds = 0;  // the kernels' first launch, before this case (once per configuration)
  std::int64_t windows = 0;       // 1: the whole case in one run_backward call
  std::int64_t window_bytes = 0;  // the largest window's working set (backward_window_plan.hpp)
  std::vector<std::string> external_data;  // datasets read from other files (--allow-external-data)
};

// OUTDIR/STEM.grad.h5 for forward output STEM.h5.
std::string grad_output_path(const std::string& outdir, const std::string& forward);

// Runs every case. Prints a line per case to `progress` as it finishes and
// failures (one line each) to `errors`. Throws std::invalid_argument before
// any case runs when the gradient inputs do not pair with the forward outputs
// or the gemm path cannot run; never throws for a bad case.
std::vector<BackwardCaseResult> run_backward_batch(const BackwardOptions& options, std::ostream& progress,
                                                   std::ostream& errors);

// The table of all cases and the closing "cases: N ok, M failed".
void print_backward_summary(std::ostream& out, const std::vector<BackwardCaseResult>& results);

}  // namespace linattn
