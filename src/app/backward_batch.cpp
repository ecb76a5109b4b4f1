#include "app/backward_batch.hpp"

#include "app/report.hpp"
#include "app/text_table.hpp"
#include "core/ledger.hpp"
#include "core/printable.hpp"
#include "io/file_error.hpp"
#include "io/grad_input_file.hpp"
#include "io/grad_output_file.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "kernels/execution.hpp"

#include <chrono>
#include <filesystem>
#include <ostream>
#include <set>
#include <stdexcept>

namespace linattn {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::string counter(std::size_t index, std::size_t total) {
  return "[" + std::to_string(index) + "/" + std::to_string(total) + "]";
}

std::string describe_sequences(const std::vector<std::int64_t>& cu_seqlens) {
  return cu_seqlens.empty() ? "none" : std::to_string(cu_seqlens.size() - 1) + " sequences";
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

// The output name of a case, refused when it clashes with another case's,
// is one of the case's own inputs, or exists (unless --force).
void check_output(const BackwardOptions& opt, std::set<std::string>& outputs, BackwardCaseResult& r) {
  r.output = grad_output_path(opt.outdir, r.forward);
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(r.output, ec);
  if (!outputs.insert(ec ? r.output : canonical.string()).second)
    throw FileError(r.output, "already written by an earlier case of this batch (two forward outputs with one name?)");
  if (same_file(r.output, r.forward) || same_file(r.output, r.grad))
    throw FileError(r.output, "is an input of this case itself; choose another -o");
  if (!opt.force && fs::exists(r.output)) throw FileError(r.output, "output exists (pass --force to overwrite)");
}

// What the backward needs of a forward output: its attributes, the shapes of
// o and final_state (checked against the input; their data is not needed, and
// o is as large as the inputs), its snapshots (not read when they will be
// recomputed) and its cu_seqlens.
struct ForwardOutputParts {
  RunRecord record;
  std::vector<std::int64_t> o_shape, final_state_shape, h_shape;  // h_shape empty: no snapshots stored
  Tensor h;                                                       // read only when asked for
  std::vector<std::int64_t> cu_seqlens;
};

ForwardOutputParts read_forward_parts(const std::string& path, bool read_h) {
  const hdf5::File file = hdf5::open_read_only(path);
  const hid_t f = file.get();
  ForwardOutputParts fw;
  fw.record = read_run_record(f, path);
  fw.o_shape = hdf5::dataset_info(f, path, "o").shape;
  fw.final_state_shape = hdf5::dataset_info(f, path, "final_state").shape;
  if (fw.record.snapshot_dtype != "none") {
    fw.h_shape = hdf5::dataset_info(f, path, "h").shape;
    if (read_h) fw.h = hdf5::read_tensor(f, path, "h");
  }
  if (hdf5::link_exists(f, "cu_seqlens")) fw.cu_seqlens = hdf5::read_index_vector(f, path, "cu_seqlens");
  return fw;
}

// The forward output against the input case it names: the same shapes and
// sequences, so that its snapshots belong to these q, k and v.
void check_forward_matches(const std::string& forward, const ForwardOutputParts& fw, const Problem& p) {
  const std::string its = "its input case " + fw.record.input_file + ":" + fw.record.input_group;
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

// One case, start to finish; throws on the first problem.
void run_case(const BackwardOptions& opt, BackwardCaseResult& r) {
  const Clock::time_point started = Clock::now();
  const bool recompute = opt.backward.recompute_h;
  const ForwardOutputParts fw = read_forward_parts(r.forward, !recompute);
  const RunRecord& rec = fw.record;
  if (rec.normalize)
    throw FileError(r.forward, "is a normalized forward (--normalize): the backward takes unnormalized forwards");
  if (fw.h_shape.empty() && !recompute)
    throw FileError(r.forward, "holds no snapshots h (its forward ran with --snapshots none): pass --recompute-h to "
                               "recompute them from the input case");

  const std::string group = rec.input_group == "/" ? "" : rec.input_group;
  const CaseData in = read_case(rec.input_file, group, ReadOptions{opt.allow_nonfinite});
  const DType dtype = in.q.dtype;
  if (rec.input_dtype != dtype_name(dtype))
    throw FileError(rec.input_file, dataset_path(group, "q"),
                    std::string("dtype ") + dtype_name(dtype) + ", but " + r.forward + " was made from " +
                        rec.input_dtype + " inputs (the input changed since the forward?)");
  Problem p;
  try {
    p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, rec.chunk_size, rec.scale,
                            in.initial_state.empty() ? nullptr : &in.initial_state.shape, in.cu_seqlens);
    validate(p);
  } catch (const std::invalid_argument& e) {
    throw FileError(r.forward, std::string("its input case ") + rec.input_file + ":" + rec.input_group +
                                   " and attributes do not make a problem the backward runs: " + e.what());
  }
  r.problem = p;
  r.dtype = dtype;
  check_forward_matches(r.forward, fw, p);
  const bool read_h = !recompute;
  if (read_h && fw.h.dtype != DType::bf16 && fw.h.dtype != accumulation_dtype(dtype))
    throw FileError(r.forward, "h", std::string("dtype ") + dtype_name(fw.h.dtype) + ", expected bf16 or " +
                                        dtype_name(accumulation_dtype(dtype)) + " (the accumulation type of " +
                                        dtype_name(dtype) + " inputs)");

  const GradData g = read_grad_case(r.grad, rec.input_group, p, dtype, ReadOptions{opt.allow_nonfinite});

  const BackwardOutput out =
      run_backward(p, opt.backward, in.q, in.k, in.v, read_h ? &fw.h : nullptr,
                   in.initial_state.empty() ? nullptr : &in.initial_state, g.d_o, g.dht.empty() ? nullptr : &g.dht);
  r.kernel_seconds = out.kernel_seconds;
  r.gemm = gemm_path_name(out.gemm);

  GradOutputData data;
  data.dq = out.dq;
  data.dk = out.dk;
  data.dv = out.dv;
  data.dh0 = out.dh0;
  data.cu_seqlens = p.cu_seqlens;
  GradRecord& gr = data.record;
  RunRecord& run = gr.run;
  run.chunk_size = p.chunk;
  run.scale = p.scale;
  run.variant = "backward";
  run.gemm_path = r.gemm;
  run.input_dtype = dtype_name(dtype);
  run.output_dtype = dtype_name(out.dq.dtype);
  // The snapshots the backward read (dq's accuracy depends on them): recomputed ones are in the accumulation type.
  run.snapshot_dtype = dtype_name(read_h ? fw.h.dtype : accumulation_dtype(dtype));
  run.kokkos_backend = kokkos_backend_name();
  run.kokkos_version = kokkos_version_string();
  run.linattn_version = LINATTN_VERSION;
  run.kernel_seconds = out.kernel_seconds;
  run.upload_seconds = out.upload_seconds;
  run.download_seconds = out.download_seconds;
  run.flops = backward_flops(p, recompute);
  // Inputs read once (q, k, v, do, dht, and h or the initial state), outputs written once.
  const Tensor* read[] = {&in.q, &in.k, &in.v, &g.d_o, &g.dht, read_h ? &fw.h : &in.initial_state};
  const Tensor* written[] = {&out.dq, &out.dk, &out.dv, &out.dh0};
  for (const Tensor* t : read) run.min_bytes += static_cast<double>(t->bytes.size());
  for (const Tensor* t : written) run.min_bytes += static_cast<double>(t->bytes.size());
  run.input_file = rec.input_file;
  run.input_group = rec.input_group;
  run.num_sequences = p.num_sequences();
  gr.forward_file = r.forward;
  gr.grad_file = r.grad;
  gr.grad_group = g.group.empty() ? "/" : g.group;
  gr.recompute_h = recompute;
  write_grad_output_file(r.output, data, opt.durable);
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  r.ok = true;
}

std::string progress_line(std::size_t index, std::size_t total, const BackwardCaseResult& r) {
  return counter(index, total) + " " + printable(r.forward) + "  " + shape_summary(*r.problem) + " " +
         dtype_name(r.dtype) + (r.problem->varlen() ? " " + std::to_string(r.problem->num_sequences()) + " seqs" : "") +
         "  backward/" + r.gemm + "  kernel " + fixed(r.kernel_seconds * 1e3, 3) + " ms  wall " +
         fixed(r.wall_seconds, 2) + " s  -> " + printable(r.output);
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

  std::vector<BackwardCaseResult> results(opt.forwards.size());
  std::set<std::string> outputs;
  for (std::size_t i = 0; i < results.size(); ++i) {
    BackwardCaseResult& r = results[i];
    r.forward = opt.forwards[i];
    r.grad = opt.grads[i];
    r.error = outdir_problem;
    if (r.error.empty()) {
      try {
        check_output(opt, outputs, r);
        run_case(opt, r);
        progress << progress_line(i + 1, results.size(), r) << std::endl;
        continue;
      } catch (const FileError& e) {
        r.error = e.what();
      } catch (const std::exception& e) {
        // Errors from below the I/O layer do not know the case: name it.
        r.error = printable(r.forward + ": " + e.what());
      }
    }
    r.ok = false;
    errors << counter(i + 1, results.size()) << " " << printable(r.forward) << "  FAILED: " << printable(r.error)
           << std::endl;
  }
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
