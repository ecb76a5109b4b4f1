#include "app/batch_run.hpp"

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
#include "pipeline/compute_stage.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/memory_budget.hpp"
#include "pipeline/pinned_memory.hpp"
#include "pipeline/read_protocol.hpp"
#include "pipeline/read_stage.hpp"
#include "pipeline/reader_group.hpp"
#include "pipeline/signal_cleanup.hpp"
#include "pipeline/window_groups.hpp"
#include "pipeline/write_stage.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
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

namespace {


// A problem of a whole case, named as the file and its group.
FileError case_error(const CaseResult& r, const std::string& what) {
  return FileError(r.input, std::string("case '") + (r.group.empty() ? "/" : r.group) + "': " + what);
}

}  // namespace

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

namespace {

// Everything one batch shares: the buffers, the reader process, the writer
// thread, the compute stages (one per type combination, warmed up once).
class Batch {
 public:
  Batch(const RunOptions& opt, ProgressReporter& progress)
      : opt_(opt),
        progress_(progress),
        created_(Clock::now()),
        split_(split_budget(opt.memory_budget > 0 ? opt.memory_budget : default_memory_budget(), host_execution,
                            opt.window_cap)),
        // Several readers read windows side by side (window i: reader i mod n);
        // each is a process of its own, with its own copy of libhdf5.
        reads_(opt.reader_exe.empty() ? "/proc/self/exe" : opt.reader_exe, split_.input_slots,
               std::max(1, std::min(opt.readers, split_.input_slots)), split_.slot_bytes),
        outputs_(split_.output_slots, split_.slot_bytes, false),
        writer_(outputs_.pool(), progress) {
    buffers_ = std::chrono::duration<double>(Clock::now() - created_).count();
  }

  void drain() { writer_.drain(); }
  // Stops the readers; returns their largest peak RSS.
  std::int64_t stop_readers() { return reads_.stop(); }

  // Where the run's time went, one line: each stage's busy time beside the wall time.
  std::string stage_report(double wall) const {
    const WriteTimes w = writer_.times();
    auto s = [](double x) { return fixed(x, 2) + " s"; };
    return "pipeline: wall " + s(wall) + " (buffers " + s(buffers_) + ", warm-up " + s(startup_) + "); reader busy " +
           s(reader_busy()) + " (" + std::to_string(reads_.size()) + " processes); compute: upload " + s(totals_.upload) + ", kernels " + s(totals_.kernel) +
           ", download " + s(totals_.download) + ", waiting for input " + s(wait_input_) + ", for output slots " +
           s(wait_output_) + "; writer busy " + s(w.writing) + ", making files durable " + s(w.committing) + "; " +
           std::to_string(split_.input_slots) + "+" + std::to_string(split_.output_slots) + " slots of " +
           (split_.slot_bytes >= (1 << 20) ? std::to_string(split_.slot_bytes >> 20) + " MiB"
                                               : std::to_string(split_.slot_bytes >> 10) + " KiB") + (pinned() ? ", page-locked" : "");
  }
  bool pinned() const { return reads_.pinned() && outputs_.region().pinned(); }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(opt_.case_timeout * 1000));
  }

  std::vector<std::string> list(const std::string& file) { return reads_.reader(0).list_cases(file, deadline()); }

  double reader_busy() const { return reads_.busy_seconds(); }

  // One case, start to finish; throws on the first problem (the writer's
  // problems reach r through finish's callback).
  void run_case(CaseResult& r, std::size_t index, std::size_t total) {
    if (hung_files_.count(r.input))
      throw FileError(r.input, "not read: the reader hung on an earlier case of this file (--case-timeout)");
    try {
      run_case_reading(r, index, total);
    } catch (const ReaderLost& e) {
      // A hang costs one timeout per file, not one per case.
      if (e.cause == ReaderLost::Cause::timed_out) hung_files_.insert(r.input);
      throw;
    }
  }

  // The bytes of a case's q, k and v, from its metadata (its weight when
  // ranks share the batch); fails as run_case would on a case that cannot be opened.
  std::int64_t input_bytes(const CaseResult& r) {
    if (hung_files_.count(r.input))
      throw FileError(r.input, "not read: the reader hung on an earlier case of this file (--case-timeout)");
    try {
      const CaseSchema schema =
          reads_.reader(0).open_case(r.input, r.group, opt_.allow_nonfinite, opt_.allow_external_data, deadline());
      reads_.reader(0).close_case(deadline());
      std::int64_t elements = 0;
      for (const hdf5::DatasetInfo* d : {&schema.q, &schema.k, &schema.v})
        elements += std::accumulate(d->shape.begin(), d->shape.end(), std::int64_t(1), std::multiplies<>());
      return elements * static_cast<std::int64_t>(dtype_size(schema.q.dtype));
    } catch (const ReaderLost& e) {
      if (e.cause == ReaderLost::Cause::timed_out) hung_files_.insert(r.input);
      throw;
    }
  }

  void run_case_reading(CaseResult& r, std::size_t index, std::size_t total) {
    const Clock::time_point started = Clock::now();
    const Clock::time_point until = deadline();
    const CaseSchema schema =
        reads_.reader(0).open_case(r.input, r.group, opt_.allow_nonfinite, opt_.allow_external_data, until);
    for (std::size_t i = 1; i < reads_.size(); ++i)
      reads_.reader(i).open_case(r.input, r.group, opt_.allow_nonfinite, opt_.allow_external_data, until);
    const Problem p = case_problem(opt_, r, schema);
    r.problem = p;
    r.dtype = schema.q.dtype;
    r.gate = schema.gate;
    r.external_data = schema.external_data;
    const CaseStorage s = case_storage(opt_, schema);
    const OutputLayout out_layout = output_layout(p, s.output, s.snapshot, s.accumulation, s.snapshots, s.normalize,
                                                  opt_.compress);
    // Plain windows cover whole chunks of o and h (a multiple of both extents).
    const std::int64_t granule = std::lcm(out_layout.o_tokens / p.chunk, out_layout.h_chunks);
    WindowLimits limits;
    limits.input = limits.output = split_.slot_bytes - 4096;  // the layout's alignment padding
    limits.device_extra = device_extra_limit();
    std::vector<Window> windows;
    try {
      windows = plan_windows(p, s, limits, granule);
    } catch (const BudgetError& e) {
      throw case_error(r, e.what());
    }
    r.windows = static_cast<std::int64_t>(windows.size());
    const std::vector<WindowGroup> groups = group_windows(p, s, windows, group_limits(p));
    r.device_windows = static_cast<std::int64_t>(groups.size());
    const DType snap = s.snapshot;
    r.min_bytes =
        count_bytes(p, s.input, s.output, s.snapshots ? &snap : nullptr, s.has_initial_state, r.gate).total();

    ComputeStage& stage = stage_for(p, s);
    const std::shared_ptr<CaseWrite> out = writer_.open(r.output, p, out_layout, opt_.durable);
    std::int64_t total_bytes = 0;
    std::vector<WindowLayout> layouts;
    for (const Window& w : windows) {
      layouts.push_back(window_layout(p, s, w));
      total_bytes += layouts.back().input_bytes + layouts.back().output_bytes;
    }
    progress_.start_case(case_counter(index, total) + " " + printable(r.label()), case_tokens(p), total_bytes);
    WindowTimes times;
    std::size_t next_read = 0;
    auto send_reads = [&](std::size_t computed) {
      // Window i reads into input slot i mod n: at most n reads ahead.
      while (next_read < windows.size() && next_read < computed + static_cast<std::size_t>(split_.input_slots)) {
        const Window& w = windows[next_read];
        const WindowLayout& l = layouts[next_read];
        const std::int64_t base = reads_.slots().offset(static_cast<int>(next_read % split_.input_slots));
        WindowRead read;
        read.t0 = w.t0;
        read.t1 = w.t1;
        read.q_offset = base + l.q;
        read.k_offset = base + l.k;
        read.v_offset = base + l.v;
        read.state_row0 = read.z_row0 = l.fresh_row0;
        read.state_rows = s.has_initial_state ? l.fresh_rows : 0;
        read.z_rows = s.has_initial_z ? l.fresh_rows : 0;
        read.state_offset = base + l.initial_state;
        read.z_offset = base + l.initial_z;
        read.accumulation_dtype = static_cast<std::int64_t>(s.accumulation);
        read.gate = static_cast<std::int64_t>(s.gate);
        read.gate_offset = base + l.gate;
        reads_.reader(next_read).send_read(read);
        ++next_read;
      }
    };
    auto add = [&](const WindowTimes& t) {
      times += t;
      totals_ += t;
    };
    auto wait_read = [&](std::size_t i) {
      const Clock::time_point waited = Clock::now();
      reads_.reader(i).wait_read(until);
      wait_input_ += std::chrono::duration<double>(Clock::now() - waited).count();
    };
    auto output_slot = [&] {
      const Clock::time_point waited = Clock::now();
      const int slot = outputs_.pool().acquire();
      wait_output_ += std::chrono::duration<double>(Clock::now() - waited).count();
      return slot;
    };
    auto input_slot = [&](std::size_t i) { return reads_.slots().data(static_cast<int>(i % split_.input_slots)); };
    auto write = [&](std::size_t i, int out_slot) {
      writer_.write(out, windows[i], layouts[i], out_slot, layouts[i].input_bytes + layouts[i].output_bytes);
    };
    try {
      send_reads(0);
      for (const WindowGroup& g : groups) {
        if (g.parts() == 1) {  // one window: its output slot is where host backends' kernels write
          const std::size_t i = g.first;
          wait_read(i);
          if (out->failed.load()) break;
          const int out_slot = output_slot();
          WindowJob job{&p, &s, &windows[i], layouts[i], input_slot(i), outputs_.pool().data(out_slot)};
          try {
            add(stage.run(job));
          } catch (...) {
            outputs_.pool().release(out_slot);
            throw;
          }
          send_reads(i + 1);
          write(i, out_slot);
          continue;
        }
        // A device window: its parts uploaded as they arrive (each input slot
        // free for the next read at once), one launch, then each part
        // downloaded into an output slot and written.
        stage.begin(WindowJob{&p, &s, &g.window, window_layout(p, s, g.window), nullptr, nullptr}, true);
        for (std::size_t i = g.first; i < g.last && !out->failed.load(); ++i) {
          wait_read(i);
          add(stage.upload_part(WindowJob{&p, &s, &windows[i], layouts[i], input_slot(i), nullptr}));
          send_reads(i + 1);
        }
        if (out->failed.load()) break;
        add(stage.compute());
        for (std::size_t i = g.first; i < g.last; ++i) {
          const int out_slot = output_slot();
          try {
            add(stage.download_part(WindowJob{&p, &s, &windows[i], layouts[i], nullptr, outputs_.pool().data(out_slot)}));
          } catch (...) {
            outputs_.pool().release(out_slot);
            throw;
          }
          write(i, out_slot);
        }
      }
      for (ReaderProcess* reader : reads_.processes()) {
        reader->drain(until);  // reads left after a write failure
        reader->close_case(until);
      }
    } catch (...) {
      progress_.end_case();
      for (ReaderProcess* reader : reads_.processes()) reader->drain(until);
      writer_.abort(out);
      throw;
    }
    r.kernel_seconds = times.kernel;
    r.tile_path = gemm_path_name(stage.gemm());
    const RunRecord record = make_record(opt_, r, p, s, stage.gemm(), times);
    writer_.finish(out, record, [this, &r, index, total, started](const std::string& error) {
      r.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
      progress_.end_case();
      if (error.empty()) {
        r.ok = true;
        progress_.line(progress_line(index, total, r, opt_.forward.variant));
      } else {
        r.error = error;
        progress_.line(failure_line(index, total, r), true);
      }
    });
  }

 private:
  // Device bytes a window may take beside its q, k, v, o and h: on host
  // backends a share of the budget; on a GPU, what free device memory leaves
  // after those (about half of it: the window's own copies of the slots).
  std::int64_t device_extra_limit() const {
    if (host_execution) return split_.device_extra;
    std::size_t free_bytes = 0, total = 0;
    device_memory(free_bytes, total);
    const std::int64_t usable = static_cast<std::int64_t>(free_bytes) * 8 / 10 - 2 * split_.slot_bytes;
    return std::max<std::int64_t>(usable, 0);
  }

  // How far a packed case's windows are gathered on the device
  // (pipeline/window_groups.hpp): within half of the device's free memory,
  // until every multiprocessor has 8 (sequence, head) walks, where a launch
  // no longer leaves the GPU idle while it walks long sequences; the middle
  // of a long sequence only while that shortens the launches.
  GroupLimits group_limits(const Problem& p) const {
    GroupLimits g;
    g.max_parts = opt_.device_window_parts;
    g.enabled = p.varlen() && (host_execution ? opt_.device_window_parts > 1 : opt_.device_window_parts != 1);
    if (!g.enabled) return g;
    std::size_t free_bytes = 0, total = 0;
    device_memory(free_bytes, total);
    g.device_bytes = host_execution ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(free_bytes / 2);
    const int sms = device_multiprocessors();
    g.walks = sms > 0 ? 8 * std::int64_t(sms) : std::numeric_limits<std::int64_t>::max();
    // About one walk per multiprocessor (a DK-128 block fills one); host backends
    // gather only when asked (--device-windows N), and then as if all walks ran at once.
    g.parallel_walks = host_execution ? 0 : std::max<std::int64_t>(sms, 1);
    return g;
  }

  ComputeStage& stage_for(const Problem& p, const CaseStorage& s) {
    const int key = static_cast<int>(s.input);
    auto it = stages_.find(key);
    if (it == stages_.end()) it = stages_.emplace(key, make_compute_stage(s.input, opt_.forward)).first;
    // Warm up each kernel configuration once, outside the case's timings.
    const std::string shape = std::to_string(key) + ":" + std::to_string(p.DK) + "x" + std::to_string(p.DV) + "/" +
                              std::to_string(p.chunk) + (p.varlen() ? "p" : "") + ":" + gate_dataset_name(s.gate);
    if (warmed_.insert(shape).second) startup_ += it->second->warm_up(p, s);
    return *it->second;
  }

  const RunOptions& opt_;
  ProgressReporter& progress_;
  Clock::time_point created_;
  double buffers_ = 0, wait_input_ = 0, wait_output_ = 0;
  WindowTimes totals_;
  BudgetSplit split_;
  ReaderGroup reads_;
  SlotRegion outputs_;  // output slots: outputs_.pool()
  WriteStage writer_;
  std::map<int, std::unique_ptr<ComputeStage>> stages_;
  std::set<std::string> hung_files_;
  std::set<std::string> warmed_;
  double startup_ = 0;
};

}  // namespace

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
  if (ranks == 1) {
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
