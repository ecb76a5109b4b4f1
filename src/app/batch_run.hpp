// `linattn run` without the command line: every q/k/v case of every input is
// read, checked, run and written to its own output file. A bad case is
// reported and skipped; the others still run.
#pragma once

#include "core/problem.hpp"
#include "kernels/forward.hpp"

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace linattn {

struct RunOptions {
  std::vector<std::string> inputs;
  std::string outdir;
  ForwardConfig forward;  // variant, output dtype, snapshots
  std::int64_t chunk = 64;
  double scale = 1.0;
  bool compress = false;         // gzip the output datasets
  bool force = false;            // replace existing output files
  bool allow_nonfinite = false;  // accept NaN/Inf input elements
};

struct CaseResult {
  std::string input, group;  // group "" for a case at the root (or an input that could not be listed)
  std::string output;        // the output file, once known
  bool ok = false;
  std::string error;  // one line when !ok
  std::optional<Problem> problem;  // known once the case was read
  DType dtype = DType::f32;
  double kernel_seconds = 0, min_bytes = 0;

  std::string label() const { return group.empty() ? input : input + ":" + group; }
  double gigabytes_per_second() const { return kernel_seconds > 0 ? min_bytes / kernel_seconds / 1e9 : 0.0; }
};

// OUTDIR/STEM.GROUP.h5 for input STEM.h5 (groups nested with '/' become
// dots); OUTDIR/STEM.h5 for a case at the root.
std::string output_path(const std::string& outdir, const std::string& input, const std::string& group);

// Runs the batch. Prints one progress line per case to `progress` as it
// finishes, and failures (one line each) to `errors`. Never throws for a bad
// case or a bad output directory: each such case is a failed CaseResult.
std::vector<CaseResult> run_batch(const RunOptions& options, std::ostream& progress, std::ostream& errors);

}  // namespace linattn
