// `linattn run` without the command line: every q/k/v case of every input is
// read, checked, run and written to its own output file. A bad case is
// reported and skipped; the others still run. Each case streams through the
// pipeline (src/pipeline/): a reader process reads windows, this thread
// computes them, a writer thread writes them.
#pragma once

#include "core/problem.hpp"
#include "io/file_error.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "kernels/forward.hpp"
#include "pipeline/compute_stage.hpp"
#include "pipeline/window_plan.hpp"

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace linattn {

struct RunOptions {
  std::vector<std::string> inputs;
  std::string outdir;
  ForwardConfig forward;  // variant, output dtype, snapshots
  std::int64_t chunk = 64;
  std::optional<double> scale;   // unset: default_scale(DK) of each case (fla's DK^-0.5)
  bool compress = false;         // gzip the output datasets
  bool force = false;            // replace existing output files
  bool allow_nonfinite = false;  // accept NaN/Inf input elements
  bool allow_external_data = false;  // read external raw storage and virtual datasets from the input's folder
  bool skip_existing = false;    // keep complete outputs and run only the other cases
  bool durable = true;           // fsync each output before its rename (--no-fsync turns it off)
  std::int64_t memory_budget = 0;   // host bytes for the run's buffers; 0: a quarter of physical memory
  std::int64_t window_cap = std::int64_t(64) << 20;  // most bytes per window slot (page-locking costs time)
  double case_timeout = 1800;    // seconds the reader may take on one case (listing a file counts as one)
  std::string reader_exe;        // the program started as the reader process; "": this program
  int readers = 2;               // reader processes reading windows side by side
  // Threads writing each output file (mapped, pipeline/mapped_output.hpp); 1:
  // one writer thread through HDF5.
  int writers = 1;
  // Most windows of a packed case gathered into one device window
  // (pipeline/window_groups.hpp). 0: as the device's memory allows, until the
  // GPU's multiprocessors have several walks each; 1: none. Host backends
  // gather only when it is above 1 (tests), as their kernels run in the slots.
  std::int64_t device_window_parts = 0;
  bool progress_bar = true;      // a redrawn bar when stderr is a terminal
  bool context_parallel = false;  // every case split along T over the MPI ranks (context_parallel_run.hpp)
  double carry_cost = -1;  // context parallel: the state pass's time per token over the forward's; < 0: measured one
};

struct CaseResult {
  std::string input, group;  // group "" for a case at the root (or an input that could not be listed)
  std::string output;        // the output file, once known
  bool ok = false;
  bool skipped = false;  // --skip-existing found its output complete
  std::string error;  // one line when !ok
  std::optional<Problem> problem;  // known once the case was read
  DType dtype = DType::f32;
  GateKind gate = GateKind::none;  // the case's decay gate, once read
  double kernel_seconds = 0, min_bytes = 0;
  double wall_seconds = 0;  // from reading its first window to committing its file
  std::int64_t windows = 0;
  std::int64_t device_windows = 0;  // the launches its windows ran in (window_groups.hpp)
  std::string segment_chunks;  // context parallel: each rank's chunks, "9+7" (then windows is not printed)
  std::string rank_phases;     // context parallel, rank 0: a line per rank, its seconds by step
  std::string tile_path;  // the kernel path that ran (gemm_path_name), once computed
  std::vector<std::string> external_data;  // its datasets read from other files (--allow-external-data)

  std::string label() const { return group.empty() ? input : input + ":" + group; }
  double gigabytes_per_second() const { return kernel_seconds > 0 ? min_bytes / kernel_seconds / 1e9 : 0.0; }
};

// OUTDIR/STEM.GROUP.h5 for input STEM.h5 (groups nested with '/' become
// dots); OUTDIR/STEM.h5 for a case at the root.
std::string output_path(const std::string& outdir, const std::string& input, const std::string& group);

// Every case of the inputs, in order, as `list` names them (its groups); an
// input it cannot list is one failed case holding the reason.
std::vector<CaseResult> list_case_results(const std::vector<std::string>& inputs,
                                          const std::function<std::vector<std::string>(const std::string&)>& list);

// Creates OUTDIR when missing and proves it writable with a probe file.
// Returns the one-line reason when it is not usable, "" when it is.
std::string prepare_outdir(const std::string& outdir);

// Sets r.output and throws FileError when it clashes with an earlier case's
// (`outputs` holds theirs), is the input itself, or exists (unless --force or
// --skip-existing).
void check_output(const RunOptions& options, std::set<std::string>& outputs, CaseResult& r);

// A problem of a whole case, named as the file and its group.
FileError case_error(const CaseResult& r, const std::string& what);

// A case's problem from its schema, checked as `run` checks it before any
// device work (FileError naming the case when it cannot run), and the element
// types and optional parts of its output.
Problem case_problem(const RunOptions& options, const CaseResult& r, const CaseSchema& schema);
CaseStorage case_storage(const RunOptions& options, const CaseSchema& schema);

// The attributes of a case's output file (RunRecord) after its run.
RunRecord make_record(const RunOptions& options, const CaseResult& r, const Problem& p, const CaseStorage& s,
                      GemmPath gemm, const pipeline::WindowTimes& t);

// Runs the batch. Prints one progress line per case to `progress` as it
// finishes, and failures (one line each) to `errors`. Never throws for a bad
// case or a bad output directory: each such case is a failed CaseResult.
//
// Under MPI with more than one rank (docs/PARALLEL.md) rank 0 lists the
// cases and shares them out (parallel/case_assignment.hpp); each rank runs its
// own through the same per-case path. Rank 0 prints its cases' lines as they
// finish and the other ranks' after them, and returns every case's result;
// the other ranks print nothing and return their own cases' results.
struct BatchStats {
  std::int64_t reader_peak_rss = 0;  // bytes, the largest of the reader processes
  std::string resident;              // the batch process's resident memory by kind, while its buffers still exist
  std::int64_t memory_budget = 0;    // bytes the run's buffers were planned for (a rank's share under MPI)
};
std::vector<CaseResult> run_batch(const RunOptions& options, std::ostream& progress, std::ostream& errors,
                                  BatchStats* stats = nullptr);

}  // namespace linattn
