#include "app/context_parallel_run.hpp"

#include "app/case_result_message.hpp"
#include "app/report.hpp"
#include "core/ledger.hpp"
#include "core/printable.hpp"
#include "io/file_error.hpp"
#include "io/hdf5_file.hpp"
#include "io/input_slice.hpp"
#include "io/output_stream.hpp"
#include "parallel/communicator.hpp"
#include "parallel/segment_plan.hpp"
#include "parallel/shared_hdf5_file.hpp"
#include "pipeline/signal_cleanup.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <ostream>
#include <set>

namespace linattn {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Runs `step` and returns why it failed, worded as the batch words a failed
// case ("" when it did not).
template <class Step>
std::string attempt(const CaseResult& r, Step&& step) {
  try {
    step();
    return "";
  } catch (const FileError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return printable(r.label() + ": " + e.what());
  }
}

// Every rank learns the first failing rank's reason; true (r.error set) when one failed.
bool failed_anywhere(const std::string& mine, CaseResult& r) {
  const std::string error = parallel::first_non_empty(mine);
  if (error.empty()) return false;
  r.error = error;
  return true;
}

const Tensor* present(const Tensor& t) { return t.empty() ? nullptr : &t; }

// Tokens [offset, offset + length) of a one-row tensor [1, T, H, D].
Tensor token_range(const Tensor& t, std::int64_t offset, std::int64_t length) {
  Tensor out(t.dtype, {1, length, t.shape[2], t.shape[3]});
  const std::size_t token = static_cast<std::size_t>(t.shape[2] * t.shape[3]) * dtype_size(t.dtype);
  std::memcpy(out.bytes.data(), t.bytes.data() + offset * token, static_cast<std::size_t>(length) * token);
  return out;
}

// Rows [row0, row0 + rows) of a tensor whose first axis counts rows.
Tensor row_range(const Tensor& t, std::int64_t row0, std::int64_t rows) {
  std::vector<std::int64_t> shape = t.shape;
  shape[0] = rows;
  Tensor out(t.dtype, shape);
  const std::size_t row = out.bytes.size() / static_cast<std::size_t>(rows);
  std::memcpy(out.bytes.data(), t.bytes.data() + row0 * row, out.bytes.size());
  return out;
}

// What a segment carries out to the next: the state after its last token of
// the sequence that goes on (plain batch: of every row; packed: one row), and
// the key sum z with --normalize. In the accumulation type.
struct Carry {
  Tensor state, z;
};

std::string encode(const Carry& c) {
  std::string bytes(c.state.bytes.begin(), c.state.bytes.end());
  bytes.append(c.z.bytes.begin(), c.z.bytes.end());
  return bytes;
}

Carry decode(const std::string& bytes, const Problem& p, std::int64_t rows, DType acc, bool normalize) {
  Carry c{Tensor(acc, {rows, p.H, p.DK, p.DV}), normalize ? Tensor(acc, {rows, p.H, p.DK}) : Tensor()};
  if (bytes.size() != c.state.bytes.size() + c.z.bytes.size())
    throw std::logic_error("context parallel: a carried state of the wrong size");
  std::memcpy(c.state.bytes.data(), bytes.data(), c.state.bytes.size());
  std::memcpy(c.z.bytes.data(), bytes.data() + c.state.bytes.size(), c.z.bytes.size());
  return c;
}

// a += b, element by element in the accumulation type (fp32 or fp64).
void add_into(Tensor& a, const Tensor& b) {
  if (a.dtype == DType::f64) {
    for (std::int64_t i = 0; i < a.numel(); ++i) a.data<double>()[i] += b.data<double>()[i];
  } else {
    for (std::int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] += b.data<float>()[i];
  }
}

// The state segment w carries out, for a segment that starts midway through a
// sequence (so its own forward cannot run yet): the forward on the part of
// its last sequence that lies in it, from that sequence's initial state when
// the part is its beginning, else from zero.
Carry carry_of_piece(const Problem& p, const Window& w, const CaseData& in, ForwardConfig config) {
  config.snapshots = SnapshotMode::none;  // only the final state and z are kept
  const parallel::CarriedPiece piece = parallel::carried_piece(p, w);
  ForwardOutput f;
  if (!p.varlen()) {
    f = run_forward(plain_problem(p, p.B, w.tokens()), config, in.q, in.k, in.v);
  } else {
    const std::int64_t offset = piece.t0 - w.t0, length = piece.t1 - piece.t0;
    const std::int64_t row = w.seq_end - 1 - w.seq_begin;  // its row among the segment's initial rows
    const Tensor s0 = piece.from_start && !in.initial_state.empty() ? row_range(in.initial_state, row, 1) : Tensor();
    const Tensor z0 = piece.from_start && !in.initial_z.empty() ? row_range(in.initial_z, row, 1) : Tensor();
    f = run_forward(plain_problem(p, 1, length), config, token_range(in.q, offset, length),
                    token_range(in.k, offset, length), token_range(in.v, offset, length), present(s0), present(z0));
  }
  return {f.final_state, f.z_state};
}

// The initial rows of the sequences of a segment that continues one: the
// start state for that first one (plain batch: every row), the file's rows (or
// zeros) for those that start in the segment.
Tensor starting_rows(const Problem& sub, const Tensor& from_file, const Tensor& start,
                     std::vector<std::int64_t> row_shape, DType acc) {
  row_shape.insert(row_shape.begin(), sub.num_sequences());
  Tensor rows = from_file.empty() ? Tensor(acc, row_shape) : from_file;
  std::memcpy(rows.bytes.data(), start.bytes.data(), start.bytes.size());
  return rows;
}

struct Times {
  double upload = 0, kernel = 0, download = 0;
  void add(const ForwardOutput& f) {
    upload += f.upload_seconds;
    kernel += f.kernel_seconds;
    download += f.download_seconds;
  }
};

// One case on every rank together; sets r.ok, or r.error, alike on all of them.
// After each step that can fail on one rank the ranks agree (failed_anywhere).
void run_shared_case(const RunOptions& opt, CaseResult& r, hid_t file_access, hid_t transfer) {
  const Clock::time_point started = Clock::now();
  const int rank = parallel::rank();
  hdf5::File file;
  CaseSchema schema;
  Problem p;
  CaseStorage s;
  const auto open_case = [&] {
    file = hdf5::open_read_only(r.input);
    schema = inspect_case(file.get(), r.input, r.group);
    p = case_problem(opt, r, schema);
    s = case_storage(opt, schema);
  };
  if (failed_anywhere(attempt(r, open_case), r)) return;
  r.problem = p;
  r.dtype = s.input;
  const std::vector<Window> segments = parallel::plan_segments(p, parallel::size());
  const Window& w = segments[static_cast<std::size_t>(rank)];
  const bool works = w.chunks > 0;
  const Problem sub = window_problem(p, w);

  // 1. This rank's tokens, and the initial rows of the sequences starting in them.
  CaseData in;
  const auto read_segment = [&] {
    SliceRequest slice;
    slice.t0 = w.t0;
    slice.t1 = w.t1;
    slice.row0 = p.varlen() ? w.seq_begin : 0;
    slice.rows = !works ? 0 : p.varlen() ? w.sequences() : w.continues ? 0 : p.B;
    slice.accumulation = s.accumulation;
    slice.allow_nonfinite = opt.allow_nonfinite;
    in = read_slice(file.get(), r.input, r.group, schema, slice);
    file.close();
  };
  if (failed_anywhere(attempt(r, read_segment), r)) return;

  // 2. What the segment carries out. A segment that starts no sequence midway
  // runs its forward now, and its carry is that forward's state.
  ForwardConfig config = opt.forward;
  config.segments = 1;  // never split, as the pipeline (src/pipeline/compute_stage.hpp)
  const std::int64_t carry_rows = p.varlen() ? 1 : p.B;
  ForwardOutput out;
  bool have_out = false;
  Carry carry;
  Times times;
  // The compute phase's clock: its wall time, waits for the carried states included, is the
  // kernel time this rank reports (docs/PARALLEL.md "Cost").
  const Clock::time_point compute_started = Clock::now();
  const auto carry_out = [&] {
    if (!works) return;
    if (!w.continues) {
      out = run_forward(sub, config, in.q, in.k, in.v, present(in.initial_state), present(in.initial_z));
      times.add(out);
      have_out = true;
      if (w.carries) {
        const std::int64_t last = sub.num_sequences() - carry_rows;
        carry.state = row_range(out.final_state, last, carry_rows);
        if (s.normalize) carry.z = row_range(out.z_state, last, carry_rows);
      }
    } else if (w.carries) {
      carry = carry_of_piece(p, w, in, config);
    }
  };
  if (failed_anywhere(attempt(r, carry_out), r)) return;

  // 3. Every carry to every rank; this segment's start is the sum, in rank
  // order, of the carries of its chain (parallel/segment_plan.hpp).
  const std::vector<std::string> carries = parallel::all_gather(works && w.carries ? encode(carry) : "");
  Carry start;
  if (works && w.continues) {
    for (int j : parallel::carry_chain(p, segments, rank)) {
      const Carry c = decode(carries[static_cast<std::size_t>(j)], p, carry_rows, s.accumulation, s.normalize);
      if (start.state.empty()) {
        start = c;
      } else {
        add_into(start.state, c.state);
        if (s.normalize) add_into(start.z, c.z);
      }
    }
  }

  // 4. The segment's forward from its start.
  const auto forward_from_start = [&] {
    if (!works || have_out) return;
    const Tensor s0 = starting_rows(sub, in.initial_state, start.state, {p.H, p.DK, p.DV}, s.accumulation);
    const Tensor z0 =
        s.normalize ? starting_rows(sub, in.initial_z, start.z, {p.H, p.DK}, s.accumulation) : Tensor();
    out = run_forward(sub, config, in.q, in.k, in.v, &s0, present(z0));
    times.add(out);
  };
  if (failed_anywhere(attempt(r, forward_from_start), r)) return;
  const double compute_wall = std::chrono::duration<double>(Clock::now() - compute_started).count();

  // 5. One output file, every rank writing its slices collectively.
  pipeline::WindowTimes total;
  total.upload = parallel::max(times.upload);
  // The critical path, not the sum of this rank's kernels: a rank that waited for a carry
  // counts the wait (copies to and from the device are reported on their own).
  total.kernel = parallel::max(std::max(times.kernel, compute_wall - times.upload - times.download));
  total.download = parallel::max(times.download);
  const std::string gemm = parallel::first_non_empty(works ? gemm_path_name(out.gemm) : "");
  r.kernel_seconds = total.kernel;
  r.tile_path = gemm;
  r.windows = std::count_if(segments.begin(), segments.end(), [](const Window& x) { return x.chunks > 0; });
  const DType snap = s.snapshot;
  r.min_bytes = count_bytes(p, s.input, s.output, s.snapshots ? &snap : nullptr, s.has_initial_state).total();
  const RunRecord record = make_record(opt, r, p, s, parse_gemm_path(gemm), total);
  const OutputLayout layout =
      output_layout(p, s.output, s.snapshot, s.accumulation, s.snapshots, s.normalize, opt.compress);
  std::optional<OutputStream> stream;
  const auto create = [&] { stream.emplace(r.output, p, layout, file_access, transfer); };
  if (failed_anywhere(attempt(r, create), r)) return;
  const int cleanup = rank == 0 ? pipeline::register_partial(stream->partial_path()) : -1;
  const auto write_slices = [&] {
    stream->write_o(w.t0, w.t1, out.o.bytes.data());
    stream->write_h(w.chunk0, w.chunks, out.h.bytes.data());
    // The sequences that end in the segment (plain batch: every row, in the last segment).
    const std::int64_t finished = !works ? 0 : p.varlen() ? w.finished_end() - w.seq_begin : w.carries ? 0 : p.B;
    stream->write_final(p.varlen() ? w.seq_begin : 0, finished, out.final_state.bytes.data(),
                        out.z_state.bytes.data());
  };
  const auto close = [&] { stream->close(record); };
  const auto publish = [&] {
    if (rank == 0) stream->publish(opt.durable);
    else stream->leave_to_publisher();
  };
  const bool failed = failed_anywhere(attempt(r, write_slices), r) || failed_anywhere(attempt(r, close), r) ||
                      failed_anywhere(attempt(r, publish), r);
  if (cleanup >= 0) pipeline::unregister_partial(cleanup);
  if (failed) return;
  r.ok = true;
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
}

}  // namespace

std::vector<CaseResult> run_context_parallel(const RunOptions& opt, std::ostream& progress, std::ostream& errors) {
  const bool root = parallel::rank() == 0;
  pipeline::install_signal_cleanup();
  // Rank 0 lists the cases (in this process: no reader process here) and checks their outputs.
  std::vector<CaseResult> results;
  if (root) {
    results = list_case_results(opt.inputs, list_cases);
    const std::string outdir_problem = prepare_outdir(opt.outdir);
    std::set<std::string> outputs;
    for (CaseResult& r : results) {
      if (r.error.empty() && !outdir_problem.empty()) r.error = outdir_problem;
      if (!r.error.empty()) continue;
      try {
        check_output(opt, outputs, r);
        if (opt.skip_existing && fs::exists(r.output)) r.ok = r.skipped = true;
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    }
  }
  std::vector<std::size_t> every(results.size());
  std::iota(every.begin(), every.end(), std::size_t(0));
  const std::string plan = parallel::broadcast(encode_results(results, every));
  if (!root) decode_results(plan, results);

  const hdf5::PropertyList file_access = parallel::shared_file_access();
  const hdf5::PropertyList transfer = parallel::collective_transfer();
  for (std::size_t i = 0; i < results.size(); ++i) {
    CaseResult& r = results[i];
    if (r.error.empty() && !r.skipped) run_shared_case(opt, r, file_access.get(), transfer.get());
    if (!root) continue;
    if (r.skipped) progress << skipped_line(i + 1, results.size(), r) << std::endl;
    else if (r.ok) progress << progress_line(i + 1, results.size(), r, opt.forward.variant) << std::endl;
    else errors << failure_line(i + 1, results.size(), r) << std::endl;
  }
  return results;
}

}  // namespace linattn
