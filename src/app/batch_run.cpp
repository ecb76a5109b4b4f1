#include "app/batch_run.hpp"

#include "pipeline/progress_reporter.hpp"
#include "app/report.hpp"
#include "app/text_table.hpp"
#include "core/ledger.hpp"
#include "core/printable.hpp"
#include "io/file_error.hpp"
#include "io/input_file.hpp"
#include "io/output_stream.hpp"
#include "kernels/execution.hpp"
#include "pipeline/compute_stage.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/memory_budget.hpp"
#include "pipeline/pinned_memory.hpp"
#include "pipeline/read_stage.hpp"
#include "pipeline/signal_cleanup.hpp"
#include "pipeline/write_stage.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>

namespace linattn {

namespace fs = std::filesystem;
using namespace pipeline;

namespace {

// Creates OUTDIR when missing and proves it writable with a probe file.
// Returns the one-line reason when it is not usable, "" when it is.
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

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

// A problem of a whole case, named as the file and its group.
FileError case_error(const CaseResult& r, const std::string& what) {
  return FileError(r.input, std::string("case '") + (r.group.empty() ? "/" : r.group) + "': " + what);
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
  rec.input_file = r.input;
  rec.input_group = r.group.empty() ? "/" : r.group;
  rec.normalize = opt.forward.normalize;
  rec.num_sequences = p.num_sequences();
  return rec;
}

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
        inputs_(std::int64_t(split_.input_slots) * split_.slot_bytes, true),
        outputs_(std::int64_t(split_.output_slots) * split_.slot_bytes, false),
        input_slots_(inputs_, split_.input_slots),
        output_slots_(outputs_, split_.output_slots),
        writer_(output_slots_, progress) {
    // Several readers read windows side by side (window i: reader i mod n);
    // each is a process of its own, with its own copy of libhdf5.
    const int readers = std::max(1, std::min(opt.readers, split_.input_slots));
    for (int i = 0; i < readers; ++i)
      readers_.push_back(std::make_unique<ReaderProcess>(opt.reader_exe.empty() ? "/proc/self/exe" : opt.reader_exe,
                                                         inputs_.fd(), inputs_.bytes()));
    buffers_ = std::chrono::duration<double>(Clock::now() - created_).count();
  }

  void drain() { writer_.drain(); }
  // Stops the readers; returns their largest peak RSS.
  std::int64_t stop_readers() {
    std::int64_t peak = 0;
    for (auto& r : readers_) {
      r->stop();
      peak = std::max(peak, r->peak_rss_bytes());
    }
    return peak;
  }

  // Where the run's time went, one line: each stage's busy time beside the wall time.
  std::string stage_report(double wall) const {
    const WriteTimes w = writer_.times();
    auto s = [](double x) { return fixed(x, 2) + " s"; };
    return "pipeline: wall " + s(wall) + " (buffers " + s(buffers_) + ", warm-up " + s(startup_) + "); reader busy " +
           s(reader_busy()) + " (" + std::to_string(readers_.size()) + " processes); compute: upload " + s(totals_.upload) + ", kernels " + s(totals_.kernel) +
           ", download " + s(totals_.download) + ", waiting for input " + s(wait_input_) + ", for output slots " +
           s(wait_output_) + "; writer busy " + s(w.writing) + ", making files durable " + s(w.committing) + "; " +
           std::to_string(split_.input_slots) + "+" + std::to_string(split_.output_slots) + " slots of " +
           (split_.slot_bytes >= (1 << 20) ? std::to_string(split_.slot_bytes >> 20) + " MiB"
                                               : std::to_string(split_.slot_bytes >> 10) + " KiB") + (pinned() ? ", page-locked" : "");
  }
  bool pinned() const { return inputs_.pinned() && outputs_.pinned(); }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(opt_.case_timeout * 1000));
  }

  std::vector<std::string> list(const std::string& file) { return readers_[0]->list_cases(file, deadline()); }

  double reader_busy() const {
    double s = 0;
    for (const auto& r : readers_) s += r->busy_seconds();
    return s;
  }

  // One case, start to finish; throws on the first problem (the writer's
  // problems reach r through finish's callback).
  void run_case(CaseResult& r, std::size_t index, std::size_t total) {
    if (hung_files_.count(r.input))
      throw FileError(r.input, "not read: the reader hung on an earlier case of this file (--case-timeout)");
    try {
      run_case_reading(r, index, total);
    } catch (const ReaderLost& e) {
      // A hang costs one timeout per file, not one per case.
      if (std::string(e.what()).rfind("timed out", 0) == 0) hung_files_.insert(r.input);
      throw;
    }
  }

  void run_case_reading(CaseResult& r, std::size_t index, std::size_t total) {
    const Clock::time_point started = Clock::now();
    const Clock::time_point until = deadline();
    const CaseSchema schema = readers_[0]->open_case(r.input, r.group, opt_.allow_nonfinite, until);
    for (std::size_t i = 1; i < readers_.size(); ++i) readers_[i]->open_case(r.input, r.group, opt_.allow_nonfinite, until);
    if (schema.has_initial_z && !opt_.forward.normalize)
      throw FileError(r.input, dataset_path(r.group, "z_state"),
                      "an initial key sum is only used by normalized runs (pass --normalize, or remove z_state)");
    Problem p;
    try {
      const std::vector<std::int64_t> s0_shape = {schema.num_sequences(), schema.q.shape[2], schema.q.shape[3],
                                                  schema.v.shape[3]};
      p = problem_from_shapes(schema.q.shape, schema.k.shape, schema.v.shape, opt_.chunk, opt_.scale,
                              schema.has_initial_state ? &s0_shape : nullptr, schema.cu_seqlens);
      check_forward(p, opt_.forward, schema.q.dtype);
    } catch (const std::invalid_argument& e) {
      throw case_error(r, e.what());
    }
    r.problem = p;
    r.dtype = schema.q.dtype;

    CaseStorage s;
    s.input = schema.q.dtype;
    s.output = output_dtype(s.input, opt_.forward);
    s.accumulation = accumulation_dtype(s.input);
    s.snapshots = opt_.forward.snapshots != SnapshotMode::none;
    s.snapshot = snapshot_dtype(s.input, opt_.forward.snapshots);
    s.has_initial_state = schema.has_initial_state;
    s.has_initial_z = schema.has_initial_z;
    s.normalize = opt_.forward.normalize;
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
    const DType snap = s.snapshot;
    r.min_bytes = count_bytes(p, s.input, s.output, s.snapshots ? &snap : nullptr, s.has_initial_state).total();

    ComputeStage& stage = stage_for(p, s);
    const std::shared_ptr<CaseWrite> out = writer_.open(r.output, p, out_layout, opt_.durable);
    std::int64_t total_bytes = 0;
    std::vector<WindowLayout> layouts;
    for (const Window& w : windows) {
      layouts.push_back(window_layout(p, s, w));
      total_bytes += layouts.back().input_bytes + layouts.back().output_bytes;
    }
    progress_.start_case("[" + std::to_string(index) + "/" + std::to_string(total) + "] " + printable(r.label()),
                         p.T * (p.varlen() ? 1 : p.B), total_bytes);
    WindowTimes times;
    std::size_t next_read = 0;
    auto send_reads = [&](std::size_t computed) {
      // Window i reads into input slot i mod n: at most n reads ahead.
      while (next_read < windows.size() && next_read < computed + static_cast<std::size_t>(split_.input_slots)) {
        const Window& w = windows[next_read];
        const WindowLayout& l = layouts[next_read];
        const std::int64_t base = input_slots_.offset(static_cast<int>(next_read % split_.input_slots));
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
        readers_[next_read % readers_.size()]->send_read(read);
        ++next_read;
      }
    };
    try {
      send_reads(0);
      for (std::size_t i = 0; i < windows.size(); ++i) {
        Clock::time_point waited = Clock::now();
        readers_[i % readers_.size()]->wait_read(until);
        wait_input_ += std::chrono::duration<double>(Clock::now() - waited).count();
        if (out->failed.load()) break;
        waited = Clock::now();
        const int out_slot = output_slots_.acquire();
        wait_output_ += std::chrono::duration<double>(Clock::now() - waited).count();
        WindowJob job{&p, &s, &windows[i], layouts[i], input_slots_.data(static_cast<int>(i % split_.input_slots)),
                      output_slots_.data(out_slot)};
        WindowTimes t;
        try {
          t = stage.run(job);
        } catch (...) {
          output_slots_.release(out_slot);
          throw;
        }
        times += t;
        totals_ += t;
        send_reads(i + 1);
        writer_.write(out, windows[i], layouts[i], out_slot, layouts[i].input_bytes + layouts[i].output_bytes);
      }
      for (auto& reader : readers_) {
        reader->drain(until);  // reads left after a write failure
        reader->close_case(until);
      }
    } catch (...) {
      progress_.end_case();
      for (auto& reader : readers_) reader->drain(until);
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

  ComputeStage& stage_for(const Problem& p, const CaseStorage& s) {
    const int key = static_cast<int>(s.input);
    auto it = stages_.find(key);
    if (it == stages_.end()) it = stages_.emplace(key, make_compute_stage(s.input, opt_.forward)).first;
    // Warm up each kernel configuration once, outside the case's timings.
    const std::string shape = std::to_string(key) + ":" + std::to_string(p.DK) + "x" + std::to_string(p.DV) + "/" +
                              std::to_string(p.chunk) + (p.varlen() ? "p" : "");
    if (warmed_.insert(shape).second) startup_ += it->second->warm_up(p, s);
    return *it->second;
  }

  const RunOptions& opt_;
  ProgressReporter& progress_;
  Clock::time_point created_;
  double buffers_ = 0, wait_input_ = 0, wait_output_ = 0;
  WindowTimes totals_;
  BudgetSplit split_;
  HostRegion inputs_, outputs_;
  SlotPool input_slots_, output_slots_;
  std::vector<std::unique_ptr<ReaderProcess>> readers_;
  WriteStage writer_;
  std::map<int, std::unique_ptr<ComputeStage>> stages_;
  std::set<std::string> hung_files_;
  std::set<std::string> warmed_;
  double startup_ = 0;
};

// The output name of a case, refused when it clashes, is the input itself, or
// exists (unless --force or --skip-existing).
void check_output(const RunOptions& opt, std::set<std::string>& outputs, CaseResult& r) {
  r.output = output_path(opt.outdir, r.input, r.group);
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(r.output, ec);
  if (!outputs.insert(ec ? r.output : canonical.string()).second)
    throw FileError(r.output, "already written by an earlier case of this batch (two inputs with one name?)");
  if (same_file(r.output, r.input)) throw FileError(r.output, "is the input file itself; choose another -o");
  if (!opt.force && !opt.skip_existing && fs::exists(r.output))
    throw FileError(r.output, "output exists (pass --force to overwrite, or --skip-existing to keep it)");
}

}  // namespace

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

std::vector<CaseResult> run_batch(const RunOptions& options, std::ostream& progress, std::ostream& errors,
                                  BatchStats* stats) {
  const Clock::time_point run_started = Clock::now();
  install_signal_cleanup();
  const std::string outdir_problem = prepare_outdir(options.outdir);
  ProgressReporter reporter(progress, errors, options.progress_bar && &errors == &std::cerr && ::isatty(2));
  std::vector<CaseResult> results;
  std::unique_ptr<Batch> batch;
  try {
    batch = std::make_unique<Batch>(options, reporter);
    if (!host_execution && !batch->pinned())
      reporter.line("note: the host buffers could not be page-locked; copies to the device run at pageable speed",
                    true);
  } catch (const std::exception& e) {
    // No buffers, no reader: every input fails with the reason.
    for (const std::string& input : options.inputs) {
      CaseResult r;
      r.input = input;
      r.error = std::string("cannot start the pipeline: ") + e.what();
      reporter.line(failure_line(results.size() + 1, options.inputs.size(), r), true);
      results.push_back(r);
    }
    return results;
  }

  // List every case first (in the reader process), so that progress can say
  // "[i/N]"; an input that cannot be listed is one failed case.
  for (const std::string& input : options.inputs) {
    try {
      for (const std::string& group : batch->list(input)) {
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

  std::set<std::string> outputs;
  for (std::size_t i = 0; i < results.size(); ++i) {
    CaseResult& r = results[i];
    if (r.error.empty() && !outdir_problem.empty()) r.error = outdir_problem;
    if (r.error.empty()) {
      try {
        check_output(options, outputs, r);
        if (options.skip_existing && fs::exists(r.output)) {
          r.ok = r.skipped = true;
          reporter.line("[" + std::to_string(i + 1) + "/" + std::to_string(results.size()) + "] " +
                        printable(r.label()) + "  skipped: " + printable(r.output) + " exists (--skip-existing)");
          continue;
        }
        batch->run_case(r, i + 1, results.size());
        continue;  // the writer reports it
      } catch (const FileError& e) {
        r.error = e.what();
      } catch (const std::exception& e) {
        // Errors from below the I/O layer do not know the case: name it.
        r.error = printable(r.label() + ": " + e.what());
      }
    }
    reporter.line(failure_line(i + 1, results.size(), r), true);
  }
  batch->drain();  // every case written and committed
  if (stats) {
    stats->reader_peak_rss = batch->stop_readers();
    stats->resident = resident_memory();
    save_memory_map_if_asked();
  }
  reporter.line(batch->stage_report(std::chrono::duration<double>(Clock::now() - run_started).count()), true);
  batch.reset();
  return results;
}

}  // namespace linattn
