#include "app/batch_run.hpp"

#include "app/report.hpp"
#include "core/ledger.hpp"
#include "io/file_error.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "kernels/execution.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>

namespace linattn {

namespace fs = std::filesystem;

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

OutputData make_output(ForwardOutput&& fo, const RunOptions& opt, const CaseResult& r, const Problem& p) {
  OutputData out;
  RunRecord& rec = out.record;
  rec.chunk_size = p.chunk;
  rec.scale = p.scale;
  rec.variant = variant_name(opt.forward.variant);
  rec.gemm_path = gemm_path_name(fo.gemm);
  rec.input_dtype = dtype_name(r.dtype);
  rec.output_dtype = dtype_name(fo.o.dtype);
  rec.snapshot_dtype = opt.forward.snapshots == SnapshotMode::none ? "none" : dtype_name(fo.h.dtype);
  rec.kokkos_backend = kokkos_backend_name();
  rec.kokkos_version = kokkos_version_string();
  rec.linattn_version = LINATTN_VERSION;
  rec.kernel_seconds = fo.kernel_seconds;
  rec.upload_seconds = fo.upload_seconds;
  rec.download_seconds = fo.download_seconds;
  rec.flops = variant_flops(p, opt.forward.variant);
  rec.min_bytes = r.min_bytes;
  rec.input_file = r.input;
  rec.input_group = r.group.empty() ? "/" : r.group;
  rec.normalize = opt.forward.normalize;
  rec.num_sequences = p.num_sequences();
  out.o = std::move(fo.o);
  out.h = std::move(fo.h);
  out.final_state = std::move(fo.final_state);
  out.z_state = std::move(fo.z_state);
  out.cu_seqlens = p.cu_seqlens;
  return out;
}

// One case, start to finish; throws on the first problem.
void run_case(const RunOptions& opt, std::set<std::string>& outputs, CaseResult& r) {
  r.output = output_path(opt.outdir, r.input, r.group);
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(r.output, ec);
  if (!outputs.insert(ec ? r.output : canonical.string()).second)
    throw FileError(r.output, "already written by an earlier case of this batch (two inputs with one name?)");
  if (same_file(r.output, r.input)) throw FileError(r.output, "is the input file itself; choose another -o");
  if (!opt.force && fs::exists(r.output)) throw FileError(r.output, "output exists (pass --force to overwrite)");

  const CaseData data = read_case(r.input, r.group, ReadOptions{opt.allow_nonfinite});
  const bool has_s0 = !data.initial_state.empty(), has_z0 = !data.initial_z.empty();
  if (has_z0 && !opt.forward.normalize)
    throw FileError(r.input, dataset_path(r.group, "z_state"),
                    "an initial key sum is only used by normalized runs (pass --normalize, or remove z_state)");
  Problem p;
  try {
    p = problem_from_shapes(data.q.shape, data.k.shape, data.v.shape, opt.chunk, opt.scale,
                            has_s0 ? &data.initial_state.shape : nullptr, data.cu_seqlens);
  } catch (const std::invalid_argument& e) {
    throw FileError(r.input, std::string("case '") + (r.group.empty() ? "/" : r.group) + "': " + e.what());
  }
  r.problem = p;
  r.dtype = data.q.dtype;

  ForwardOutput fo = run_forward(p, opt.forward, data.q, data.k, data.v, has_s0 ? &data.initial_state : nullptr,
                                 has_z0 ? &data.initial_z : nullptr);
  const DType snap = snapshot_dtype(r.dtype, opt.forward.snapshots);
  r.min_bytes = count_bytes(p, r.dtype, fo.o.dtype, opt.forward.snapshots == SnapshotMode::none ? nullptr : &snap,
                            has_s0)
                    .total();
  r.kernel_seconds = fo.kernel_seconds;
  write_output_file(r.output, make_output(std::move(fo), opt, r, p), hdf5::WriteOptions{opt.compress});
}

}  // namespace

std::string output_path(const std::string& outdir, const std::string& input, const std::string& group) {
  std::string name = fs::path(input).stem().string();
  if (!group.empty()) {
    std::string g = group;
    for (char& c : g)
      if (c == '/') c = '.';
    name += "." + g;
  }
  return (fs::path(outdir) / (name + ".h5")).string();
}

std::vector<CaseResult> run_batch(const RunOptions& options, std::ostream& progress, std::ostream& errors) {
  const std::string outdir_problem = prepare_outdir(options.outdir);

  // List every case first, so that progress can say "[i/N]"; an input that
  // cannot be listed is one failed case.
  std::vector<CaseResult> results;
  for (const std::string& input : options.inputs) {
    try {
      for (const std::string& group : list_cases(input)) {
        CaseResult r;
        r.input = input;
        r.group = group;
        results.push_back(r);
      }
    } catch (const std::exception& e) {
      CaseResult r;
      r.input = input;
      r.error = e.what();
      results.push_back(r);
    }
  }

  std::set<std::string> outputs;
  for (std::size_t i = 0; i < results.size(); ++i) {
    CaseResult& r = results[i];
    if (r.error.empty() && !outdir_problem.empty()) r.error = outdir_problem;
    if (r.error.empty()) {
      try {
        run_case(options, outputs, r);
        r.ok = true;
      } catch (const FileError& e) {
        r.error = e.what();
      } catch (const std::exception& e) {
        // Errors from below the I/O layer do not know the case: name it.
        r.error = r.label() + ": " + e.what();
      }
    }
    if (r.ok) {
      progress << progress_line(i + 1, results.size(), r, options.forward.variant) << std::endl;
    } else {
      errors << failure_line(i + 1, results.size(), r) << std::endl;
    }
  }
  return results;
}

}  // namespace linattn
