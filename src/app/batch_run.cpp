#include "app/batch_run.hpp"

#include "app/batch.hpp"
#include "app/context_parallel_run.hpp"

#include "app/output_names.hpp"
#include "io/recorded_paths.hpp"

#include "pipeline/progress_reporter.hpp"
#include "app/case_result_message.hpp"
#include "app/report.hpp"
#include "app/text_table.hpp"
#include "core/ledger.hpp"
#include "core/printable.hpp"
#include "io/file_error.hpp"
#include "io/input_file.hpp"
#include "io/output_stream.hpp"
#include "kernels/execution.hpp"
#include "parallel/case_assignment.hpp"
#include "parallel/communicator.hpp"
#include "pipeline/memory_budget.hpp"
#include "pipeline/read_protocol.hpp"
#include "pipeline/signal_cleanup.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>

namespace linattn {

namespace fs = std::filesystem;
using namespace pipeline;

std::string prepare_outdir(const std::string& outdir) {
  std::error_code ec;
  fs::create_directories(outdir, ec);
  if (ec) return FileError(outdir, "cannot create output directory: " + ec.message()).what();
  if (!fs::is_directory(outdir)) return FileError(outdir, "is not a directory").what();
  const fs::path probe = fs::path(outdir) / (".linattn-write-probe-" + std::to_string(::getpid()));
  errno = 0;
  std::ofstream file(probe);
  const int err = errno;  // why opening failed, if it did
  const bool writable = static_cast<bool>(file << 'x' << std::flush);
  file.close();
  fs::remove(probe, ec);
  if (!writable) return FileError(outdir, std::string("output directory is not writable: ") + std::strerror(err)).what();
  return "";
}

FileError case_error(const CaseResult& r, const std::string& what) {
  return FileError(r.input, std::string("case '") + (r.group.empty() ? "/" : r.group) + "': " + what);
}

Problem case_problem(const RunOptions& opt, const CaseResult& r, const CaseSchema& schema) {
  if (schema.has_initial_z && !opt.forward.normalize)
    throw FileError(r.input, dataset_path(r.group, "z_state"),
                    "an initial key sum is only used by normalized runs (pass --normalize, or remove z_state)");
  try {
    const std::vector<std::int64_t> s0_shape = {schema.num_sequences(), schema.q.shape[2], schema.q.shape[3],
                                                schema.v.shape[3]};
    const double scale = opt.scale ? *opt.scale : default_scale(schema.q.shape[3]);
    Problem p = problem_from_shapes(schema.q.shape, schema.k.shape, schema.v.shape, opt.chunk, scale,
                                    schema.has_initial_state ? &s0_shape : nullptr, schema.cu_seqlens);
    ForwardConfig forward = opt.forward;
    forward.gate = schema.gate;  // what the kernels are asked for (a gate changes the paths that can run)
    check_forward(p, forward, schema.q.dtype);
    return p;
  } catch (const std::invalid_argument& e) {
    throw case_error(r, e.what());
  }
}

CaseStorage case_storage(const RunOptions& opt, const CaseSchema& schema) {
  CaseStorage s;
  s.input = schema.q.dtype;
  s.output = output_dtype(s.input, opt.forward);
  s.accumulation = accumulation_dtype(s.input);
  s.snapshots = opt.forward.snapshots != SnapshotMode::none;
  s.snapshot = snapshot_dtype(s.input, opt.forward.snapshots);
  s.has_initial_state = schema.has_initial_state;
  s.has_initial_z = schema.has_initial_z;
  s.normalize = opt.forward.normalize;
  s.gate = schema.gate;
  return s;
}

RunRecord make_record(const RunOptions& opt, const CaseResult& r, const Problem& p, const CaseStorage& s,
                      GemmPath gemm, const WindowTimes& t) {
  RunRecord rec;
  rec.chunk_size = p.chunk;
  rec.scale = p.scale;
  rec.variant = variant_name(opt.forward.variant);
  rec.gemm_path = gemm_path_name(gemm);
  rec.input_dtype = dtype_name(s.input);
  rec.output_dtype = dtype_name(s.output);
  rec.snapshot_dtype = s.snapshots ? dtype_name(s.snapshot) : "none";
  rec.kokkos_backend = kokkos_backend_name();
  rec.kokkos_version = kokkos_version_string();
  rec.linattn_version = LINATTN_VERSION;
  rec.kernel_seconds = t.kernel;
  rec.upload_seconds = t.upload;
  rec.download_seconds = t.download;
  rec.flops = variant_flops(p, opt.forward.variant);
  rec.min_bytes = r.min_bytes;
  const RecordedPath input = record_path(r.input, r.output);
  rec.input_file = input.absolute;
  rec.input_file_relative = input.relative;
  rec.input_group = r.group.empty() ? "/" : r.group;
  rec.normalize = opt.forward.normalize;
  rec.num_sequences = p.num_sequences();
  rec.gate = gate_dataset_name(s.gate);
  return rec;
}


void check_output(const RunOptions& opt, std::set<std::string>& outputs, CaseResult& r) {
  r.output = output_path(opt.outdir, r.input, r.group);
  if (!claim_output(outputs, r.output))
    throw FileError(r.output, "already written by an earlier case of this batch (two inputs with one name?)");
  if (same_file(r.output, r.input)) throw FileError(r.output, "is the input file itself; choose another -o");
  if (!opt.force && !opt.skip_existing && fs::exists(r.output))
    throw FileError(r.output, "output exists (pass --force to overwrite, or --skip-existing to keep it)");
}

std::string output_path(const std::string& outdir, const std::string& input, const std::string& group) {
  std::string name = fs::path(input).stem().string();
  if (!group.empty()) {
    // Group names come from the file: anything but a plain name character
    // becomes '_' (nested groups' '/' becomes '.').
    std::string g = group;
    for (char& c : g) {
      const unsigned char u = static_cast<unsigned char>(c);
      if (c == '/') c = '.';
      else if (!(std::isalnum(u) || c == '-' || c == '_' || c == '.')) c = '_';
    }
    name += "." + g;
  }
  return (fs::path(outdir) / (name + ".h5")).string();
}

namespace {

// Why a case failed, one line: a FileError names its file; errors from below
// the I/O layer do not know the case, so it is named.
std::string case_failure(const CaseResult& r, const std::exception& e) {
  if (dynamic_cast<const FileError*>(&e)) return e.what();
  return printable(r.label() + ": " + e.what());
}

// A batch shared by the MPI ranks (docs/PARALLEL.md). Rank 0 checks every
// case's output name, weighs the cases it will run by their input bytes (from
// their metadata, read by its reader process) and assigns them, largest first,
// to the least loaded rank; every rank receives that plan, runs its own cases
// through Batch::run_case, and rank 0 reports the cases that failed or were
// skipped before being assigned. Returns the rank of each case (-1: none).
std::vector<int> run_shared_batch(const RunOptions& opt, Batch& batch, ProgressReporter& reporter,
                                  const std::string& outdir_problem, std::vector<CaseResult>& results) {
  const int rank = parallel::rank();
  std::vector<std::int64_t> owners;
  if (rank == 0) {
    std::set<std::string> outputs;
    std::vector<std::size_t> to_run;
    std::vector<std::int64_t> costs;
    for (std::size_t i = 0; i < results.size(); ++i) {
      CaseResult& r = results[i];
      if (r.error.empty() && !outdir_problem.empty()) r.error = outdir_problem;
      if (!r.error.empty()) continue;
      try {
        check_output(opt, outputs, r);
        if (opt.skip_existing && fs::exists(r.output)) {
          r.ok = r.skipped = true;
          continue;
        }
        costs.push_back(batch.input_bytes(r));
        to_run.push_back(i);
      } catch (const std::exception& e) {
        r.error = case_failure(r, e);
      }
    }
    owners.assign(results.size(), -1);
    const std::vector<int> assigned = parallel::assign_cases(costs, parallel::size());
    for (std::size_t k = 0; k < to_run.size(); ++k) owners[to_run[k]] = assigned[k];
  }
  std::vector<std::size_t> every(results.size());
  std::iota(every.begin(), every.end(), std::size_t(0));
  const std::string plan = parallel::broadcast(encode_results(results, every));
  const std::string plan_owners = parallel::broadcast(MessageWriter().i64s(owners).bytes());
  if (rank != 0) {
    decode_results(plan, results);
    owners = MessageReader(plan_owners).i64s();
  }

  for (std::size_t i = 0; i < results.size(); ++i) {
    CaseResult& r = results[i];
    if (owners[i] < 0) {
      if (rank == 0) {
        if (r.skipped) reporter.line(skipped_line(i + 1, results.size(), r));
        else reporter.line(failure_line(i + 1, results.size(), r), true);
      }
      continue;
    }
    if (owners[i] != rank) continue;
    try {
      batch.run_case(r, i + 1, results.size());
    } catch (const std::exception& e) {
      r.error = case_failure(r, e);
      reporter.line(failure_line(i + 1, results.size(), r), true);
    }
  }
  return std::vector<int>(owners.begin(), owners.end());
}

}  // namespace

std::vector<CaseResult> list_case_results(const std::vector<std::string>& inputs,
                                          const std::function<std::vector<std::string>(const std::string&)>& list) {
  std::vector<CaseResult> results;
  for (const std::string& input : inputs) {
    try {
      for (const std::string& group : list(input)) {
        CaseResult r;
        r.input = input;
        r.group = group;
        results.push_back(r);
      }
    } catch (const std::exception& e) {
      CaseResult r;
      r.input = input;
      r.error = printable(e.what());
      results.push_back(r);
    }
  }
  return results;
}

std::vector<CaseResult> run_batch(const RunOptions& options, std::ostream& progress, std::ostream& errors,
                                  BatchStats* stats) {
  const Clock::time_point run_started = Clock::now();
  const int ranks = parallel::size();
  // Ranks other than 0 keep their lines for rank 0, which prints them after its own.
  std::ostringstream kept_progress, kept_errors;
  std::ostream& lines = ranks == 1 || parallel::rank() == 0 ? progress : kept_progress;
  std::ostream& problems = ranks == 1 || parallel::rank() == 0 ? errors : kept_errors;
  RunOptions opt = options;
  // The ranks of one node share its memory: each takes its share of the default budget.
  if (ranks > 1 && opt.memory_budget == 0) opt.memory_budget = default_memory_budget() / parallel::local_size();
  if (stats) stats->memory_budget = opt.memory_budget > 0 ? opt.memory_budget : default_memory_budget();
  install_signal_cleanup();
  const std::string outdir_problem = prepare_outdir(opt.outdir);
  // Only rank 0 reports progress while cases run (the others' status lines would arrive late).
  const double status_interval = &lines == &progress ? 10.0 : std::numeric_limits<double>::infinity();
  ProgressReporter reporter(lines, problems, opt.progress_bar && &problems == &std::cerr && ::isatty(2),
                            status_interval);
  std::vector<CaseResult> results;
  std::unique_ptr<Batch> batch;
  std::string start_problem;
  try {
    batch = std::make_unique<Batch>(opt, reporter);
    if (!host_execution && !batch->pinned())
      reporter.line("note: the host buffers could not be page-locked; copies to the device run at pageable speed",
                    true);
  } catch (const std::exception& e) {
    start_problem = e.what();
  }
  start_problem = parallel::first_non_empty(start_problem);
  if (!start_problem.empty()) {
    // No buffers, no reader: every input fails with the reason.
    for (const std::string& input : opt.inputs) {
      CaseResult r;
      r.input = input;
      r.error = "cannot start the pipeline: " + start_problem;
      reporter.line(failure_line(results.size() + 1, opt.inputs.size(), r), true);
      results.push_back(r);
    }
    return results;
  }

  // List every case first (in the reader process), so that progress can say
  // "[i/N]"; an input that cannot be listed is one failed case. Under MPI,
  // rank 0 lists them for every rank.
  if (parallel::rank() == 0) {
    results = list_case_results(opt.inputs, [&](const std::string& input) { return batch->list(input); });
  }

  std::vector<int> owner_of;  // the rank that runs each case (ranks > 1)
  if (opt.context_parallel) {
    run_context_parallel(opt, *batch, reporter, outdir_problem, results);
    owner_of.assign(results.size(), 0);  // every rank ran every case: rank 0 holds their results
  } else if (ranks == 1) {
    std::set<std::string> outputs;
    for (std::size_t i = 0; i < results.size(); ++i) {
      CaseResult& r = results[i];
      if (r.error.empty() && !outdir_problem.empty()) r.error = outdir_problem;
      if (r.error.empty()) {
        try {
          check_output(opt, outputs, r);
          if (opt.skip_existing && fs::exists(r.output)) {
            r.ok = r.skipped = true;
            reporter.line(skipped_line(i + 1, results.size(), r));
            continue;
          }
          batch->run_case(r, i + 1, results.size());
          continue;  // the writer reports it
        } catch (const std::exception& e) {
          r.error = case_failure(r, e);
        }
      }
      reporter.line(failure_line(i + 1, results.size(), r), true);
    }
  } else {
    owner_of = run_shared_batch(opt, *batch, reporter, outdir_problem, results);
  }
  batch->drain();  // every case written and committed
  if (stats) {
    stats->reader_peak_rss = batch->stop_readers();
    stats->resident = resident_memory();
    save_memory_map_if_asked();
  }
  const std::string rank_name = ranks > 1 ? "rank " + std::to_string(parallel::rank()) + " " : "";
  reporter.line(rank_name + batch->stage_report(std::chrono::duration<double>(Clock::now() - run_started).count()),
                true);
  batch.reset();
  if (ranks > 1) {
    // Rank 0 collects every case's result and prints the other ranks' lines.
    std::vector<std::size_t> mine;
    for (std::size_t i = 0; i < results.size(); ++i)
      if (owner_of[i] == parallel::rank()) mine.push_back(i);
    const std::vector<std::string> theirs = parallel::gather(encode_results(results, mine));
    const std::vector<std::string> their_lines = parallel::gather(kept_progress.str());
    const std::vector<std::string> their_problems = parallel::gather(kept_errors.str());
    for (std::size_t r = 1; r < theirs.size(); ++r) {
      decode_results(theirs[r], results);
      progress << their_lines[r] << std::flush;
      errors << their_problems[r] << std::flush;
    }
    if (parallel::rank() != 0) {
      std::vector<CaseResult> own;
      for (std::size_t i : mine) own.push_back(results[i]);
      return own;
    }
  }
  return results;
}

}  // namespace linattn
