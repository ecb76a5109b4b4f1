#include "app/backward_batch.hpp"

#include "app/output_names.hpp"
#include "io/recorded_paths.hpp"
#include "app/report.hpp"
#include "app/text_table.hpp"
#include "core/ledger.hpp"
#include "core/printable.hpp"
#include "io/dataset_storage.hpp"
#include "io/file_error.hpp"
#include "io/grad_input_file.hpp"
#include "io/grad_output_stream.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/backward_case.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "core/gate.hpp"
#include "kernels/backward.hpp"
#include "kernels/execution.hpp"
#include "kernels/forward.hpp"
#include "pipeline/backward_inputs.hpp"
#include "pipeline/backward_window_outputs.hpp"
#include "pipeline/backward_window_plan.hpp"
#include "pipeline/grad_write_stage.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/memory_budget.hpp"
#include "pipeline/progress_reporter.hpp"
#include "pipeline/reader_group.hpp"
#include "pipeline/signal_cleanup.hpp"
#include "pipeline/streamed_backward.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>
#include <set>
#include <stdexcept>

namespace linattn {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// The output name of a case, refused when it clashes with another case's,
// is one of the case's own inputs, or exists (unless --force).
void check_output(const BackwardOptions& opt, std::set<std::string>& outputs, BackwardCaseResult& r) {
  r.output = grad_output_path(opt.outdir, r.forward);
  if (!claim_output(outputs, r.output))
    throw FileError(r.output, "already written by an earlier case of this batch (two forward outputs with one name?)");
  if (same_file(r.output, r.forward) || same_file(r.output, r.grad))
    throw FileError(r.output, "is an input of this case itself; choose another -o");
  if (!opt.force && !opt.skip_existing && fs::exists(r.output))
    throw FileError(r.output, "output exists (pass --force to overwrite, or --skip-existing to keep it)");
}

// The bytes a window reads from q, k, v, do and writes to dq, dk, dv (the progress' GB/s).
std::int64_t window_traffic(const Problem& p, const BackwardStorage& s, const Window& w) {
  const std::int64_t rows = p.varlen() ? 1 : p.B;
  return rows * w.tokens() * p.H *
         ((2 * p.DK + 2 * p.DV) * static_cast<std::int64_t>(dtype_size(s.input)) +
          (2 * p.DK + p.DV) * static_cast<std::int64_t>(dtype_size(s.output)));
}

// The output file's attributes (docs/HDF5.md, "Gradient outputs").
GradRecord grad_record(const BackwardCase& c, const BackwardCaseResult& r, const BackwardStorage& s,
                       const StreamedBackwardResult& res) {
  const Problem& p = c.p;
  GradRecord gr;
  RunRecord& run = gr.run;
  run.chunk_size = p.chunk;
  run.scale = p.scale;
  run.variant = "backward";
  run.gemm_path = gemm_path_name(res.gemm);
  run.input_dtype = dtype_name(s.input);
  run.output_dtype = dtype_name(s.output);
  // The snapshots the backward read (dq's accuracy depends on them): recomputed ones are in the accumulation type.
  run.snapshot_dtype = dtype_name(s.recompute_h ? s.accumulation : s.snapshot);
  run.kokkos_backend = kokkos_backend_name();
  run.kokkos_version = kokkos_version_string();
  run.linattn_version = LINATTN_VERSION;
  run.kernel_seconds = res.kernel_seconds;
  run.upload_seconds = res.upload_seconds;
  run.download_seconds = res.download_seconds;
  run.flops = backward_flops(p, s.recompute_h);
  // Inputs read once (q, k, v, do, dht, and h or the initial state), outputs written once.
  auto size = [](DType t) { return static_cast<std::int64_t>(dtype_size(t)); };
  const std::int64_t tokens = p.B * p.T * p.H, states = p.num_sequences() * p.H * p.DK * p.DV;
  const std::int64_t h_or_initial = !s.recompute_h ? p.h_shape()[0] * p.total_chunks() * p.H * p.DK * p.DV * size(s.snapshot)
                                    : c.has_initial_state ? states * size(s.accumulation)
                                                             : 0;
  run.min_bytes = static_cast<double>(tokens * (2 * p.DK + 2 * p.DV) * size(s.input) +
                                      (c.has_dht ? states * size(s.accumulation) : 0) + h_or_initial +
                                      tokens * (2 * p.DK + p.DV) * size(s.output) + states * size(s.accumulation));
  const RecordedPath input = record_path(c.input_file, r.output), forward = record_path(r.forward, r.output),
                     grad = record_path(r.grad, r.output);
  run.input_file = input.absolute;
  run.input_file_relative = input.relative;
  run.input_group = c.input_group;
  run.num_sequences = p.num_sequences();
  run.gate = gate_dataset_name(s.gate);
  gr.forward_file = forward.absolute;
  gr.forward_file_relative = forward.relative;
  gr.grad_file = grad.absolute;
  gr.grad_file_relative = grad.relative;
  gr.grad_group = c.grad_group.empty() ? "/" : c.grad_group;
  gr.recompute_h = s.recompute_h;
  return gr;
}

// OUT.partial, created so that SIGINT/SIGTERM remove it (signal_cleanup.hpp),
// as run's writer creates its outputs.
std::unique_ptr<GradOutputStream> open_output(const std::string& path, const Problem& p, const BackwardStorage& s,
                                              std::unique_ptr<pipeline::PartialRegistration>& registration) {
  if (!pipeline::creation_begins()) throw std::runtime_error("interrupted");
  try {
    registration = std::make_unique<pipeline::PartialRegistration>(path + ".partial");
    auto out = std::make_unique<GradOutputStream>(path, p, s.output, s.accumulation, s.gate);
    pipeline::creation_ends();
    return out;
  } catch (...) {
    pipeline::creation_ends();
    throw;
  }
}

// The batch's host buffers (docs/ARCHITECTURE.md, "The streamed backward"):
// the reader processes (--readers) and their read slots, each as large as the most
// a window of the case reads (backward_read_slot_bytes), and three output
// slots, as large as the most a window writes (two wait for the writer while
// the kernels fill the third). Both page-locked under CUDA: the kernels read
// and write the windows where they are. Grown between cases when a case needs
// more (the readers restarted on the new region).
class BackwardBuffers {
 public:
  static constexpr int kOutputSlots = 3;
  // `readers` processes, a slot each. They start with one page of slots: they
  // first check a case (metadata only), then grow.
  BackwardBuffers(const std::string& exe, int readers) : readers_(readers), reads_(exe, readers, readers, 4096) {}
  void ensure(std::int64_t read_slot_bytes, std::int64_t output_slot_bytes) {
    reads_.ensure_slot_bytes(read_slot_bytes);
    if (outputs_ && outputs_->pool().slot_bytes() >= output_slot_bytes) return;
    outputs_.reset();  // unmapped before the larger one is made
    outputs_ = std::make_unique<pipeline::SlotRegion>(kOutputSlots, output_slot_bytes, false);
  }
  pipeline::ReaderGroup& reads() { return reads_; }
  pipeline::SlotPool& output_slots() { return outputs_->pool(); }

  // Where the time and memory went, for the pipeline line.
  std::string describe() const {
    auto mib = [](std::int64_t b) { return std::to_string(b >> 20) + " MiB"; };
    return "reader busy " + fixed(reads_.busy_seconds(), 2) + " s (" + std::to_string(readers_) +
           " processes, peak RSS " + std::to_string(peak_rss_ >> 20) + " MiB); " + std::to_string(readers_) +
           " read slots of " + mib(reads_.slot_bytes()) + " + " + std::to_string(kOutputSlots) + " output slots of " +
           mib(outputs_ ? outputs_->pool().slot_bytes() : 0) +
           (reads_.pinned() && outputs_ && outputs_->region().pinned() ? ", page-locked" : "");
  }
  void stop() { peak_rss_ = reads_.stop(); }

 private:
  int readers_;
  pipeline::ReaderGroup reads_;
  std::unique_ptr<pipeline::SlotRegion> outputs_;
  std::int64_t peak_rss_ = 0;
};

// Where the batch's time went, summed over its cases.
struct StageTimes {
  double kernels = 0, upload = 0, download = 0, waiting_for_reads = 0, writing = 0;
  int mapped_files = 0;  // outputs written through a mapping (--writers above 1)
};

// One case, start to finish; throws on the first problem.
// The first launch of a kernel configuration loads its module on the device
// (and unpacks the binary's kernels): in the first case it was 55 ms of
// kernel time against 1.8 ms in the next (H200, BENCHMARKS.md). So each
// configuration (dtypes, head sizes, chunk, gate, snapshots) runs once on a
// tiny case before its first case, timed on its own; with recompute_h the
// forward that carries the start states between windows too. Zero inputs:
// only the launch matters.
double warm_up(const Problem& p, const BackwardConfig& config, const BackwardStorage& s) {
  Kokkos::Timer timer;
  Problem tiny = plain_problem(p, 1, 2 * p.chunk);
  tiny.H = 1;
  const Tensor q(s.input, tiny.qk_shape()), v(s.input, tiny.v_shape());
  const Tensor h(s.snapshot, tiny.h_shape());
  const Tensor dht(s.accumulation, tiny.state_shape());
  const Tensor gate(s.accumulation, gate_shape(tiny, config.gate));
  const Tensor* g = config.gate == GateKind::none ? nullptr : &gate;
  run_backward(tiny, config, q, q, v, config.recompute_h ? nullptr : &h, nullptr, v, &dht, g);
  if (config.recompute_h) {
    ForwardConfig forward;
    forward.snapshots = SnapshotMode::none;
    forward.segments = 1;
    forward.gate = config.gate;
    run_forward(tiny, forward, q, q, v, nullptr, nullptr, g);
  }
  Kokkos::fence();
  return timer.seconds();
}

void run_case(const BackwardOptions& opt, ProgressReporter& progress, const std::string& label,
              BackwardCaseResult& r, std::set<std::string>& warmed, BackwardBuffers& buffers, StageTimes& stages) {
  const Clock::time_point started = Clock::now();
  auto deadline = [&] {
    return Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(opt.case_timeout * 1000));
  };
  // The case's files are first opened in a reader process: a hostile one costs only this case.
  const BackwardCase c = buffers.reads().reader(0).inspect_backward(r.forward, r.grad, opt.backward.recompute_h,
                                                                    opt.allow_external_data, deadline());
  const Problem& p = c.p;
  r.problem = c.p;
  r.dtype = c.dtype;
  r.gate = c.gate;
  r.external_data = c.external_data;

  // Windows: the whole case when it fits the budget.
  BackwardStorage storage;
  storage.input = c.dtype;
  storage.output = opt.backward.output_fp32 ? DType::f32 : c.dtype;
  storage.accumulation = accumulation_dtype(c.dtype);
  storage.snapshot = c.h_dtype;
  storage.recompute_h = opt.backward.recompute_h;
  storage.gate = c.gate;
  const std::int64_t budget = opt.memory_budget > 0 ? opt.memory_budget : pipeline::default_memory_budget();
  const std::int64_t limit = backward_window_limit(p, storage, budget);
  const std::vector<Window> windows = plan_backward_windows(p, storage, limit);
  r.windows = static_cast<std::int64_t>(windows.size());
  std::int64_t traffic = 0, output_slot_bytes = 0;
  for (const Window& w : windows) {
    r.window_bytes = std::max(r.window_bytes, backward_window_bytes(p, storage, w));
    traffic += window_traffic(p, storage, w);
    output_slot_bytes = std::max(output_slot_bytes, backward_window_output_bytes(window_problem(p, w), storage.output,
                                                                                  storage.accumulation, storage.gate));
  }

  BackwardSources src;
  src.input_file = c.input_file;
  src.input_group = c.group();
  src.has_initial_state = c.has_initial_state;
  src.initial_dtype = c.initial_dtype;
  src.grad_file = r.grad;
  src.grad_group = c.grad_group;
  src.has_dht = c.has_dht;
  src.forward_file = r.forward;
  src.read_h = !storage.recompute_h;
  src.h_dtype = c.h_dtype;
  src.input = storage.input;
  src.accumulation = storage.accumulation;
  src.allow_nonfinite = opt.allow_nonfinite;
  src.gate = c.gate;
  std::unique_ptr<pipeline::PartialRegistration> registration;
  const std::unique_ptr<GradOutputStream> out = open_output(r.output, p, storage, registration);

  const std::int64_t rows = p.varlen() ? 1 : p.B;
  const int passes = storage.recompute_h && windows.size() > 1 ? 2 : 1;  // the forward pass for the start states
  progress.start_case(label, passes * rows * p.T, passes * traffic);
  StreamedBackwardResult res;
  try {
    BackwardConfig config = opt.backward;
    config.gate = c.gate;
    const std::string configuration = std::to_string(static_cast<int>(storage.input)) + ":" +
                                      std::to_string(static_cast<int>(storage.snapshot)) + ":" + std::to_string(p.DK) +
                                      "x" + std::to_string(p.DV) + "/" + std::to_string(p.chunk) + ":" +
                                      gate_dataset_name(config.gate);
    if (warmed.insert(configuration).second) r.warm_up_seconds = warm_up(p, config, storage);
    buffers.ensure(backward_read_slot_bytes(limit), output_slot_bytes);
    pipeline::BackwardInputs inputs(buffers.reads().processes(), buffers.reads().slots(), opt.allow_external_data);
    const Clock::time_point until = deadline();
    try {
      // Two windows' outputs may wait for the writer while the kernels run on a third.
      pipeline::GradWriteStage writer(*out, 2, opt.writers);
      stages.mapped_files += writer.mapped() ? 1 : 0;
      try {
        res = run_streamed_backward(p, config, windows, src, inputs, until, buffers.output_slots(), writer,
                                    [&](const Window& w, bool) {
          progress.advance(rows * w.tokens(), window_traffic(p, storage, w));
        });
      } catch (...) {
        stages.writing += writer.busy_seconds();
        throw;
      }
      stages.writing += writer.busy_seconds();
    } catch (...) {
      stages.waiting_for_reads += inputs.waited_seconds();
      inputs.finish();
      throw;
    }
    stages.waiting_for_reads += inputs.waited_seconds();
    inputs.finish();
    stages.kernels += res.kernel_seconds;
    stages.upload += res.upload_seconds;
    stages.download += res.download_seconds;
  } catch (...) {
    progress.end_case();
    throw;
  }
  progress.end_case();
  r.kernel_seconds = res.kernel_seconds;
  r.gemm = gemm_path_name(res.gemm);
  out->finish(grad_record(c, r, storage, res), opt.durable);
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  r.ok = true;
}

std::string progress_line(std::size_t index, std::size_t total, const BackwardCaseResult& r) {
  return case_counter(index, total) + " " + printable(r.forward) + "  " + shape_summary(*r.problem) + " " +
         dtype_name(r.dtype) + (r.problem->varlen() ? " " + std::to_string(r.problem->num_sequences()) + " seqs" : "") +
         (r.gate == GateKind::none ? "" : std::string(" gate ") + gate_dataset_name(r.gate)) +
         "  backward/" + r.gemm + "  scale " + scale_text(r.problem->scale) + "  kernel " + fixed(r.kernel_seconds * 1e3, 3) + " ms  wall " +
         fixed(r.wall_seconds, 2) + " s" +
         (r.warm_up_seconds > 0 ? " (kernels' warm-up before it " + fixed(r.warm_up_seconds, 3) + " s)" : "") + "  " +
         std::to_string(r.windows) + (r.windows == 1 ? " window" : " windows") +
         " (working set " + fixed(static_cast<double>(r.window_bytes) / (1 << 20), 1) + " MiB)" +
         external_data_note(r.external_data) + "  -> " + printable(r.output);
}

}  // namespace

std::string grad_output_path(const std::string& outdir, const std::string& forward) {
  return (fs::path(outdir) / (fs::path(forward).stem().string() + ".grad.h5")).string();
}

std::vector<BackwardCaseResult> run_backward_batch(const BackwardOptions& opt, std::ostream& progress,
                                                   std::ostream& errors) {
  if (opt.grads.size() != opt.forwards.size())
    throw std::invalid_argument(std::to_string(opt.forwards.size()) + " forward output" +
                                (opt.forwards.size() == 1 ? "" : "s") + " but " + std::to_string(opt.grads.size()) +
                                " --grad file" + (opt.grads.size() == 1 ? "" : "s") +
                                ": give --grad once per forward output, in the same order");
  const PathChoice choice = choose_backward_path_here(opt.backward);  // each case's own path: run_backward
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);

  std::string outdir_problem;
  std::error_code ec;
  fs::create_directories(opt.outdir, ec);
  if (ec) outdir_problem = FileError(opt.outdir, "cannot create output directory: " + ec.message()).what();
  else if (!fs::is_directory(opt.outdir)) outdir_problem = FileError(opt.outdir, "is not a directory").what();

  pipeline::install_signal_cleanup();
  const hdf5::ExternalDataScope external(opt.allow_external_data);
  ProgressReporter reporter(progress, errors, opt.progress_bar && &errors == &std::cerr && ::isatty(2));
  const Clock::time_point batch_started = Clock::now();
  BackwardBuffers buffers(opt.reader_exe.empty() ? "/proc/self/exe" : opt.reader_exe, opt.readers);
  StageTimes stages;
  std::vector<BackwardCaseResult> results(opt.forwards.size());
  std::set<std::string> outputs;
  std::set<std::string> warmed;  // the kernel configurations warm_up ran
  for (std::size_t i = 0; i < results.size(); ++i) {
    BackwardCaseResult& r = results[i];
    r.forward = opt.forwards[i];
    r.grad = opt.grads[i];
    r.error = outdir_problem;
    if (r.error.empty()) {
      try {
        check_output(opt, outputs, r);
        if (opt.skip_existing && fs::exists(r.output)) {  // complete: a .partial never has the final name
          r.ok = r.skipped = true;
          reporter.line(case_counter(i + 1, results.size()) + " " + printable(r.forward) + "  skipped: " +
                        printable(r.output) + " exists (--skip-existing)");
          continue;
        }
        run_case(opt, reporter, case_counter(i + 1, results.size()) + " " + printable(r.forward), r, warmed, buffers,
                 stages);
        reporter.line(progress_line(i + 1, results.size(), r));
        continue;
      } catch (const FileError& e) {
        r.error = e.what();
      } catch (const std::exception& e) {
        // Errors from below the I/O layer do not know the case: name it.
        r.error = printable(r.forward + ": " + e.what());
      }
    }
    r.ok = false;
    reporter.line(case_counter(i + 1, results.size()) + " " + printable(r.forward) + "  FAILED: " + printable(r.error),
                  true);
  }
  // Where the time went, as run reports its pipeline (batch_run.cpp).
  buffers.stop();
  auto sec = [](double x) { return fixed(x, 2) + " s"; };
  reporter.line("pipeline: wall " + sec(std::chrono::duration<double>(Clock::now() - batch_started).count()) + "; " +
                buffers.describe() + "; upload " + sec(stages.upload) + ", kernels " + sec(stages.kernels) +
                ", download " + sec(stages.download) + ", waiting for reads " + sec(stages.waiting_for_reads) +
                "; writer busy " + sec(stages.writing) +
                pipeline::mapped_writers_note(opt.writers, stages.mapped_files));
  return results;
}

void print_backward_summary(std::ostream& out, const std::vector<BackwardCaseResult>& results) {
  TextTable table{{"forward output", "shape", "dtype", "ms", "status"}, {false, false, false, true, false}, {}};
  std::size_t ok = 0, skipped = 0;
  for (const BackwardCaseResult& r : results) {
    ok += r.ok;
    skipped += r.skipped;
    table.rows.push_back({printable(r.forward), r.problem ? shape_summary(*r.problem) : "-",
                          r.problem ? dtype_name(r.dtype) : "-", r.ok && !r.skipped ? fixed(r.kernel_seconds * 1e3, 3) : "-",
                          r.skipped ? "skipped" : r.ok ? "ok" : "FAILED"});
  }
  out << table.str() << "cases: " << ok << " ok, " << results.size() - ok << " failed";
  if (skipped > 0) out << " (" << skipped << " of the ok skipped: output exists)";
  out << std::endl;
}

}  // namespace linattn
