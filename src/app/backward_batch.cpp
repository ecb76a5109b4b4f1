#include "app/backward_batch.hpp"

#include "app/output_names.hpp"
#include "app/recorded_paths.hpp"
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

std::string describe_sequences(const std::vector<std::int64_t>& cu_seqlens) {
  return cu_seqlens.empty() ? "none" : std::to_string(cu_seqlens.size() - 1) + " sequences";
}

// The output name of a case, refused when it clashes with another case's,
// is one of the case's own inputs, or exists (unless --force).
void check_output(const BackwardOptions& opt, std::set<std::string>& outputs, BackwardCaseResult& r) {
  r.output = grad_output_path(opt.outdir, r.forward);
  if (!claim_output(outputs, r.output))
    throw FileError(r.output, "already written by an earlier case of this batch (two forward outputs with one name?)");
  if (same_file(r.output, r.forward) || same_file(r.output, r.grad))
    throw FileError(r.output, "is an input of this case itself; choose another -o");
  if (!opt.force && fs::exists(r.output)) throw FileError(r.output, "output exists (pass --force to overwrite)");
}

// What the backward needs of a forward output: its attributes, the shapes of
// o and final_state (checked against the input; their data is not needed, and
// o is as large as the inputs), the shape and dtype of its snapshots (read in
// windows later, when not recomputed) and its cu_seqlens.
struct ForwardOutputParts {
  RunRecord record;
  std::vector<std::int64_t> o_shape, final_state_shape, h_shape;  // h_shape empty: no snapshots stored
  DType h_dtype = DType::f32;
  bool h_external = false;  // h's data are in other files (--allow-external-data)
  std::vector<std::int64_t> cu_seqlens;
};

ForwardOutputParts read_forward_parts(const std::string& path) {
  const hdf5::File file = hdf5::open_read_only(path);
  const hid_t f = file.get();
  ForwardOutputParts fw;
  fw.record = read_run_record(f, path);
  fw.o_shape = hdf5::dataset_info(f, path, "o").shape;
  fw.final_state_shape = hdf5::dataset_info(f, path, "final_state").shape;
  if (fw.record.snapshot_dtype != "none") {
    const hdf5::DatasetInfo h = hdf5::dataset_info(f, path, "h");
    fw.h_shape = h.shape;
    fw.h_dtype = h.dtype;
    fw.h_external = hdf5::reads_other_files(hdf5::open_dataset(f, path, "h").get());
  }
  if (hdf5::link_exists(f, "cu_seqlens")) fw.cu_seqlens = hdf5::read_index_vector(f, path, "cu_seqlens");
  return fw;
}

// The forward output against the input case it names: the same shapes and
// sequences, so that its snapshots belong to these q, k and v.
void check_forward_matches(const std::string& forward, const ForwardOutputParts& fw, const std::string& input_file,
                           const Problem& p) {
  const std::string its = "its input case " + input_file + ":" + fw.record.input_group;
  const std::string changed = " (the input changed since the forward?)";
  auto check_shape = [&](const char* name, const std::vector<std::int64_t>& shape,
                         const std::vector<std::int64_t>& expected) {
    if (shape != expected)
      throw FileError(forward, name, "shape " + shape_string(shape) + ", but " + its + " implies " +
                                         shape_string(expected) + " at chunk " + std::to_string(p.chunk) + changed);
  };
  check_shape("o", fw.o_shape, p.o_shape());
  if (fw.record.num_sequences != 0 && fw.record.num_sequences != p.num_sequences())
    throw FileError(forward, "attribute 'num_sequences' = " + std::to_string(fw.record.num_sequences) + ", but " +
                                 its + " holds " + std::to_string(p.num_sequences()) + " sequences" + changed);
  if (fw.cu_seqlens.size() != p.cu_seqlens.size())
    throw FileError(forward, "cu_seqlens (" + describe_sequences(fw.cu_seqlens) + ") differ from those of " + its +
                                 " (" + describe_sequences(p.cu_seqlens) + ")" + changed);
  for (std::size_t i = 0; i < p.cu_seqlens.size(); ++i)
    if (fw.cu_seqlens[i] != p.cu_seqlens[i])
      throw FileError(forward, "cu_seqlens", "entry " + std::to_string(i) + " is " + std::to_string(fw.cu_seqlens[i]) +
                                                 ", but " + its + " has " + std::to_string(p.cu_seqlens[i]) + changed);
  check_shape("final_state", fw.final_state_shape, p.state_shape());
  if (!fw.h_shape.empty()) check_shape("h", fw.h_shape, p.h_shape());
}

// The bytes a window reads from q, k, v, do and writes to dq, dk, dv (the progress' GB/s).
std::int64_t window_traffic(const Problem& p, const BackwardStorage& s, const Window& w) {
  const std::int64_t rows = p.varlen() ? 1 : p.B;
  return rows * w.tokens() * p.H *
         ((2 * p.DK + 2 * p.DV) * static_cast<std::int64_t>(dtype_size(s.input)) +
          (2 * p.DK + p.DV) * static_cast<std::int64_t>(dtype_size(s.output)));
}

// A case checked from metadata only: the forward output against its input
// case and the gradient input, before any data is read.
struct CheckedCase {
  ForwardOutputParts fw;
  CaseSchema in;  // the input case (read_case's checks)
  GradSchema grad;
  Problem p;
  DType dtype = DType::f32;
  std::string group;  // the input case's group, "" for the root
  std::string input_file;  // the forward's input file, found from the forward output (recorded_paths.hpp)
  DType initial_dtype = DType::f32;  // the input case's initial_state as stored
};

CheckedCase check_case(const BackwardOptions& opt, BackwardCaseResult& r) {
  CheckedCase c;
  const bool recompute = opt.backward.recompute_h;
  c.fw = read_forward_parts(r.forward);
  const ForwardOutputParts& fw = c.fw;
  const RunRecord& rec = fw.record;
  if (rec.normalize)
    throw FileError(r.forward, "is a normalized forward (--normalize): the backward takes unnormalized forwards");
  if (fw.h_shape.empty() && !recompute)
    throw FileError(r.forward, "holds no snapshots h (its forward ran with --snapshots none): pass --recompute-h to "
                               "recompute them from the input case");

  c.group = rec.input_group == "/" ? "" : rec.input_group;
  c.input_file = resolve_recorded_path(r.forward, {rec.input_file, rec.input_file_relative}, "input_file");
  {
    const hdf5::File f = hdf5::open_read_only(c.input_file);
    c.in = inspect_case(f.get(), c.input_file, c.group);
    if (c.in.has_initial_state)
      c.initial_dtype = hdf5::dataset_info(f.get(), c.input_file, dataset_path(c.group, "initial_state")).dtype;
  }
  if (rec.gate != gate_dataset_name(c.in.gate))
    throw FileError(r.forward, "was made with gate '" + rec.gate + "', but its input case " + c.input_file + ":" +
                                   rec.input_group + " holds gate '" + gate_dataset_name(c.in.gate) +
                                   "' (the input changed since the forward?)");
  c.dtype = c.in.q.dtype;
  if (rec.input_dtype != dtype_name(c.dtype))
    throw FileError(c.input_file, dataset_path(c.group, "q"),
                    std::string("dtype ") + dtype_name(c.dtype) + ", but " + r.forward + " was made from " +
                        rec.input_dtype + " inputs (the input changed since the forward?)");
  try {
    // inspect_case checked initial_state's shape.
    c.p = problem_from_shapes(c.in.q.shape, c.in.k.shape, c.in.v.shape, rec.chunk_size, rec.scale, nullptr,
                              c.in.cu_seqlens);
    validate(c.p);
  } catch (const std::invalid_argument& e) {
    throw FileError(r.forward, std::string("its input case ") + c.input_file + ":" + rec.input_group +
                                   " and attributes do not make a problem the backward runs: " + e.what());
  }
  r.problem = c.p;
  r.dtype = c.dtype;
  r.gate = c.in.gate;
  check_forward_matches(r.forward, fw, c.input_file, c.p);
  const DType acc = accumulation_dtype(c.dtype);
  if (!recompute && fw.h_dtype != DType::bf16 && fw.h_dtype != acc)
    throw FileError(r.forward, "h", std::string("dtype ") + dtype_name(fw.h_dtype) + ", expected bf16 or " +
                                        dtype_name(acc) + " (the accumulation type of " + dtype_name(c.dtype) +
                                        " inputs)");
  const hdf5::File f = hdf5::open_read_only(r.grad);
  c.grad = inspect_grad_case(f.get(), r.grad, rec.input_group, c.p, c.dtype);
  r.external_data = c.in.external_data;
  r.external_data.insert(r.external_data.end(), c.grad.external_data.begin(), c.grad.external_data.end());
  if (fw.h_external && !recompute) r.external_data.push_back("h");
  return c;
}

// The output file's attributes (docs/HDF5.md, "Gradient outputs").
GradRecord grad_record(const CheckedCase& c, const BackwardCaseResult& r, const BackwardStorage& s,
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
                                    : c.in.has_initial_state ? states * size(s.accumulation)
                                                             : 0;
  run.min_bytes = static_cast<double>(tokens * (2 * p.DK + 2 * p.DV) * size(s.input) +
                                      (c.grad.has_dht ? states * size(s.accumulation) : 0) + h_or_initial +
                                      tokens * (2 * p.DK + p.DV) * size(s.output) + states * size(s.accumulation));
  const RecordedPath input = record_path(c.input_file, r.output), forward = record_path(r.forward, r.output),
                     grad = record_path(r.grad, r.output);
  run.input_file = input.absolute;
  run.input_file_relative = input.relative;
  run.input_group = c.fw.record.input_group;
  run.num_sequences = p.num_sequences();
  run.gate = gate_dataset_name(s.gate);
  gr.forward_file = forward.absolute;
  gr.forward_file_relative = forward.relative;
  gr.grad_file = grad.absolute;
  gr.grad_file_relative = grad.relative;
  gr.grad_group = c.grad.group.empty() ? "/" : c.grad.group;
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
// two reader processes and their two read slots, each as large as the most
// a window of the case reads (backward_read_slot_bytes), and three output
// slots, as large as the most a window writes (two wait for the writer while
// the kernels fill the third). Both page-locked under CUDA: the kernels read
// and write the windows where they are. Grown between cases when a case needs
// more (the readers restarted on the new region).
class BackwardBuffers {
 public:
  static constexpr int kReadSlots = 2, kOutputSlots = 3;
  explicit BackwardBuffers(std::string exe) : exe_(std::move(exe)) {}
  void ensure(std::int64_t read_slot_bytes, std::int64_t output_slot_bytes) {
    if (!reads_) reads_ = std::make_unique<pipeline::ReaderGroup>(exe_, kReadSlots, kReadSlots, read_slot_bytes);
    else reads_->ensure_slot_bytes(read_slot_bytes);
    if (output_slots_ && output_slots_->slot_bytes() >= output_slot_bytes) return;
    output_slots_.reset();
    outputs_.reset();  // unmapped before the larger one is made
    const std::int64_t bytes = (output_slot_bytes + 4095) / 4096 * 4096;
    outputs_ = std::make_unique<pipeline::HostRegion>(kOutputSlots * bytes, false);
    output_slots_ = std::make_unique<pipeline::SlotPool>(*outputs_, kOutputSlots);
  }
  pipeline::ReaderGroup& reads() { return *reads_; }
  pipeline::SlotPool& output_slots() { return *output_slots_; }

  // Where the time and memory went, for the pipeline line.
  std::string describe() const {
    auto mib = [](std::int64_t b) { return std::to_string(b >> 20) + " MiB"; };
    if (!reads_) return "no reads";
    return "reader busy " + fixed(reads_->busy_seconds(), 2) + " s (" + std::to_string(kReadSlots) +
           " processes, peak RSS " + std::to_string(peak_rss_ >> 20) + " MiB); " + std::to_string(kReadSlots) +
           " read slots of " + mib(reads_->slot_bytes()) + " + " + std::to_string(kOutputSlots) + " output slots of " +
           mib(output_slots_->slot_bytes()) + (reads_->pinned() && outputs_->pinned() ? ", page-locked" : "");
  }
  void stop() {
    if (reads_) peak_rss_ = reads_->stop();
  }

 private:
  std::string exe_;
  std::unique_ptr<pipeline::ReaderGroup> reads_;
  std::unique_ptr<pipeline::HostRegion> outputs_;
  std::unique_ptr<pipeline::SlotPool> output_slots_;
  std::int64_t peak_rss_ = 0;
};

// Where the batch's time went, summed over its cases.
struct StageTimes {
  double kernels = 0, upload = 0, download = 0, waiting_for_reads = 0, writing = 0;
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
  const CheckedCase c = check_case(opt, r);
  const Problem& p = c.p;

  // Windows: the whole case when it fits the budget.
  BackwardStorage storage;
  storage.input = c.dtype;
  storage.output = opt.backward.output_fp32 ? DType::f32 : c.dtype;
  storage.accumulation = accumulation_dtype(c.dtype);
  storage.snapshot = c.fw.h_dtype;
  storage.recompute_h = opt.backward.recompute_h;
  storage.gate = c.in.gate;
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
  src.input_group = c.group;
  src.has_initial_state = c.in.has_initial_state;
  src.initial_dtype = c.initial_dtype;
  src.grad_file = r.grad;
  src.grad_group = c.grad.group;
  src.has_dht = c.grad.has_dht;
  src.forward_file = r.forward;
  src.read_h = !storage.recompute_h;
  src.h_dtype = c.fw.h_dtype;
  src.input = storage.input;
  src.accumulation = storage.accumulation;
  src.allow_nonfinite = opt.allow_nonfinite;
  src.gate = c.in.gate;
  std::unique_ptr<pipeline::PartialRegistration> registration;
  const std::unique_ptr<GradOutputStream> out = open_output(r.output, p, storage, registration);

  const std::int64_t rows = p.varlen() ? 1 : p.B;
  const int passes = storage.recompute_h && windows.size() > 1 ? 2 : 1;  // the forward pass for the start states
  progress.start_case(label, passes * rows * p.T, passes * traffic);
  StreamedBackwardResult res;
  try {
    BackwardConfig config = opt.backward;
    config.gate = c.in.gate;
    const std::string configuration = std::to_string(static_cast<int>(storage.input)) + ":" +
                                      std::to_string(static_cast<int>(storage.snapshot)) + ":" + std::to_string(p.DK) +
                                      "x" + std::to_string(p.DV) + "/" + std::to_string(p.chunk) + ":" +
                                      gate_dataset_name(config.gate);
    if (warmed.insert(configuration).second) r.warm_up_seconds = warm_up(p, config, storage);
    buffers.ensure(backward_read_slot_bytes(limit), output_slot_bytes);
    pipeline::BackwardInputs inputs(buffers.reads().processes(), buffers.reads().slots(), opt.allow_external_data);
    const Clock::time_point until =
        Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(opt.case_timeout * 1000));
    try {
      // Two windows' outputs may wait for the writer while the kernels run on a third.
      pipeline::GradWriteStage writer(*out, 2);
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
  BackwardBuffers buffers(opt.reader_exe.empty() ? "/proc/self/exe" : opt.reader_exe);
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
                "; writer busy " + sec(stages.writing));
  return results;
}

void print_backward_summary(std::ostream& out, const std::vector<BackwardCaseResult>& results) {
  TextTable table{{"forward output", "shape", "dtype", "ms", "status"}, {false, false, false, true, false}, {}};
  std::size_t ok = 0;
  for (const BackwardCaseResult& r : results) {
    ok += r.ok;
    table.rows.push_back({printable(r.forward), r.problem ? shape_summary(*r.problem) : "-",
                          r.problem ? dtype_name(r.dtype) : "-", r.ok ? fixed(r.kernel_seconds * 1e3, 3) : "-",
                          r.ok ? "ok" : "FAILED"});
  }
  out << table.str() << "cases: " << ok << " ok, " << results.size() - ok << " failed" << std::endl;
}

}  // namespace linattn
