#include "app/context_parallel_run.hpp"

#include "app/case_result_message.hpp"
#include "app/report.hpp"
#include "app/text_table.hpp"
#include "core/ledger.hpp"
#include "core/printable.hpp"
#include "io/dataset_storage.hpp"
#include "io/file_error.hpp"
#include "io/hdf5_file.hpp"
#include "io/input_slice.hpp"
#include "io/output_stream.hpp"
#include "kernels/state_pass.hpp"
#include "parallel/chain_trace.hpp"
#include "parallel/communicator.hpp"
#include "parallel/gated_carry.hpp"
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
  template <class Output>  // ForwardOutput or StatePassOutput
  void add(const Output& f) {
    upload += f.upload_seconds;
    kernel += f.kernel_seconds;
    download += f.download_seconds;
  }
};

// Where one rank's wall time of a case goes, in seconds, step by step: the
// kernels' warm-up (once per configuration), its reads, its state pass over
// the carried piece, its wait for the start state, its forward (and the
// kernels' part of it), the wait at the collective step after it (for the
// slowest forward), and the collective writes. Rank 0 prints every rank's.
struct Phases {
  double prepare = 0, read = 0, pass = 0, wait = 0, forward = 0, kernels = 0, sync = 0, write = 0;
  std::string text(int rank) const {
    return "  rank " + std::to_string(rank) + ": warm-up " + fixed(prepare, 3) + " s, read " + fixed(read, 3) +
           " s, state pass " + fixed(pass, 3) + " s, wait for the start state " + fixed(wait, 3) + " s, forward " +
           fixed(forward, 3) + " s (kernels " + fixed(kernels, 3) + " s), wait for the slowest forward " +
           fixed(sync, 3) + " s, write " + fixed(write, 3) + " s";
  }
};

double seconds_since(Clock::time_point& mark) {
  const Clock::time_point now = Clock::now();
  const double s = std::chrono::duration<double>(now - mark).count();
  mark = now;
  return s;
}

// Why this rank starts no forward: a rank before it in the chain failed (its
// own message reaches every rank, first in rank order).
constexpr const char* kChainBroken = "context parallel: a segment before this one failed";

// The first launch of a kernel loads its module on the device (and unpacks the
// binary's kernels), which would land in the first case's kernel time: each
// configuration runs once on a tiny case first, as the pipeline warms its
// compute stages (compute_stage_typed.hpp): the forward whole and split (on
// tensor cores, level 1: a gated one never splits), and the state pass; gated
// with log-decays of 0.
void warm_up(const Problem& p, DType input, const ForwardConfig& config) {
  Problem tiny = plain_problem(p, 1, 2 * p.chunk);
  tiny.H = 1;
  const Tensor q(input, tiny.qk_shape()), v(input, tiny.v_shape());
  const Tensor zeros(accumulation_dtype(input), gate_shape(tiny, config.gate));
  const Tensor* gate = config.gate == GateKind::none ? nullptr : &zeros;
  run_forward(tiny, config, q, q, v, nullptr, nullptr, gate);
  if (config.gate == GateKind::none && choose_forward_path(tiny, config, input).path == GemmPath::tensor_core) {
    ForwardConfig split = config;
    split.segments = 2;
    run_forward(tiny, split, q, q, v);
  }
  run_state_pass(tiny, config, q, v, nullptr, nullptr, gate);
}

// One case on every rank together; sets r.ok, or r.error, alike on all of them.
// After each step that can fail on one rank the ranks agree (failed_anywhere).
void run_shared_case(const RunOptions& opt, CaseResult& r, hid_t file_access, hid_t transfer,
                     std::set<std::string>& warmed) {
  const Clock::time_point started = Clock::now();
  const int rank = parallel::rank();
  hdf5::File file;
  CaseSchema schema;
  Problem p;
  CaseStorage s;
  const auto open_case = [&] {
    file = hdf5::open_read_only(r.input);
    schema = inspect_case(file.get(), r.input, r.group);
    p = case_problem(opt, r, schema);  // refuses --normalize with a gate
    s = case_storage(opt, schema);
  };
  if (failed_anywhere(attempt(r, open_case), r)) return;
  Phases phases;
  Clock::time_point mark = Clock::now();
  r.problem = p;
  r.dtype = s.input;
  r.gate = schema.gate;
  r.external_data = schema.external_data;
  // The segments, cut by what the state pass costs (parallel/segment_plan.hpp).
  // Unlike the pipeline, a rank's forward may split its sequences on tensor cores
  // (choose_segments): its bits differ from one rank's there anyway (docs/PARALLEL.md).
  // A gated forward takes whole sequences there (path_choice.cpp).
  ForwardConfig config = opt.forward;
  config.gate = schema.gate;  // the case's own: the forward, the state pass and the carries decay with it
  double carry_cost = opt.carry_cost;
  const auto prepare_kernels = [&] {  // the state pass's cost, and each configuration warmed up once
    if (carry_cost < 0)
      carry_cost = state_pass_cost(state_pass_kind(plain_problem(p, p.varlen() ? 1 : p.B, p.chunk), config, s.input),
                                   p, config, s.input);
    const std::string shape = std::to_string(static_cast<int>(s.input)) + ":" + std::to_string(p.DK) + "x" +
                              std::to_string(p.DV) + "/" + std::to_string(p.chunk) + ":" +
                              gate_dataset_name(config.gate);
    if (warmed.insert(shape).second) warm_up(p, s.input, config);
  };
  if (failed_anywhere(attempt(r, prepare_kernels), r)) return;
  phases.prepare = seconds_since(mark);
  const std::vector<Window> segments = parallel::plan_segments(p, parallel::size(), carry_cost);
  const Window& w = segments[static_cast<std::size_t>(rank)];
  const bool works = w.chunks > 0;
  const Problem sub = window_problem(p, w);
  const parallel::CarryRoute route = parallel::carry_route(p, segments, rank);

  // 1. This rank's tokens, and the initial rows of the sequences starting in
  // them; and the k and v of the piece of the segment before whose state it
  // computes (with its sequence's initial rows when the piece is its start).
  // With a gate, its log-decays of both (read_slice: g's tokens, or g_gamma whole).
  CaseData in, piece;
  Problem piece_problem;
  const auto read_segment = [&] {
    SliceRequest slice;
    slice.t0 = w.t0;
    slice.t1 = w.t1;
    slice.row0 = p.varlen() ? w.seq_begin : 0;
    slice.rows = !works ? 0 : p.varlen() ? w.sequences() : w.continues ? 0 : p.B;
    slice.accumulation = s.accumulation;
    slice.allow_nonfinite = opt.allow_nonfinite;
    in = read_slice(file.get(), r.input, r.group, schema, slice);
    if (route.carry_of >= 0) {
      const Window& before = segments[static_cast<std::size_t>(route.carry_of)];
      const parallel::CarriedPiece part = parallel::carried_piece(p, before);
      slice.t0 = part.t0;
      slice.t1 = part.t1;
      slice.with_q = false;
      slice.row0 = p.varlen() ? before.seq_end - 1 : 0;
      slice.rows = !part.from_start ? 0 : p.varlen() ? 1 : p.B;
      piece = read_slice(file.get(), r.input, r.group, schema, slice);
      piece_problem = plain_problem(p, p.varlen() ? 1 : p.B, part.t1 - part.t0);
    }
    file.close();
  };
  if (failed_anywhere(attempt(r, read_segment), r)) return;
  phases.read = seconds_since(mark);

  // 2. The start state, without waiting for the forward of the segment
  // before: this rank's state pass over that segment's piece, plus that
  // segment's own start state (received) when the sequence began earlier still,
  // decayed by the piece's tokens when gated (parallel/gated_carry.hpp).
  // The sum runs in chain order, as carry_chain lists it. Ranks send and
  // receive even after a failure, so that none waits forever.
  const std::int64_t carry_rows = p.varlen() ? 1 : p.B;
  ForwardOutput out;
  Carry start;
  Times times;
  parallel::ChainTrace trace(rank);
  // This rank's part of the critical path: its kernels, and its wait for a start state.
  double waited = 0;
  std::string failure;
  if (route.carry_of >= 0) {
    failure = attempt(r, [&] {
      const StatePassOutput y = run_state_pass(piece_problem, config, piece.k, piece.v, present(piece.initial_state),
                                               present(piece.initial_z), present(piece.log_decay));
      times.add(y);
      start = {y.final_state, y.z_state};
    });
  }
  phases.pass = seconds_since(mark);
  if (route.start_from >= 0) {
    const Clock::time_point asked = Clock::now();
    const std::string bytes = parallel::receive(route.start_from);
    trace.event("receive " + std::to_string(route.start_from) + " " + std::to_string(bytes.size()));
    waited = std::chrono::duration<double>(Clock::now() - asked).count();
    if (bytes.empty() && failure.empty()) failure = kChainBroken;
    if (failure.empty()) {
      Carry before = decode(bytes, p, carry_rows, s.accumulation, s.normalize);
      // Gated: the state before the piece decays over its tokens, as the one-rank forward's does (no z: a gate
      // refuses --normalize).
      if (config.gate != GateKind::none)
        parallel::decay_state(before.state, parallel::total_log_decay(config.gate, piece.log_decay, carry_rows,
                                                                      piece_problem.T, p.H));
      add_into(before.state, start.state);
      if (s.normalize) add_into(before.z, start.z);
      start = std::move(before);
    }
  }
  // The start state is delivered before this rank's forward starts. MPI moves a message larger than its eager
  // limit only while both ranks are inside MPI calls: a send left in flight across the forward made the next rank
  // wait for this rank's whole forward, a chain as slow as one rank (docs/PARALLEL.md, "A CPU node").
  if (route.start_to >= 0) {
    const std::string bytes = failure.empty() ? encode(start) : std::string();
    parallel::send(route.start_to, bytes);
    parallel::finish_sends();
    trace.event("send " + std::to_string(route.start_to) + " " + std::to_string(bytes.size()) + " delivered");
  }
  phases.wait = seconds_since(mark);

  // 3. The segment's forward from its start.
  const auto forward_from_start = [&] {
    if (!works) return;
    if (!w.continues) {
      out = run_forward(sub, config, in.q, in.k, in.v, present(in.initial_state), present(in.initial_z),
                        present(in.log_decay));
    } else {
      const Tensor s0 = starting_rows(sub, in.initial_state, start.state, {p.H, p.DK, p.DV}, s.accumulation);
      const Tensor z0 =
          s.normalize ? starting_rows(sub, in.initial_z, start.z, {p.H, p.DK}, s.accumulation) : Tensor();
      out = run_forward(sub, config, in.q, in.k, in.v, &s0, present(z0), present(in.log_decay));
    }
    times.add(out);
    phases.kernels = out.kernel_seconds;
  };
  trace.event("forward start");
  if (failure.empty()) failure = attempt(r, forward_from_start);
  trace.event("forward end");
  phases.forward = seconds_since(mark);
  piece = CaseData();
  if (failed_anywhere(failure, r)) return;
  phases.sync = seconds_since(mark);

  // 4. One output file, every rank writing its slices collectively.
  pipeline::WindowTimes total;
  total.upload = parallel::max(times.upload);
  // The critical path: a rank that waited for its start state counts the wait
  // (copies to and from the device are reported on their own).
  total.kernel = parallel::max(times.kernel + waited);
  total.download = parallel::max(times.download);
  const std::string gemm = parallel::first_non_empty(works ? gemm_path_name(out.gemm) : "");
  r.kernel_seconds = total.kernel;
  r.tile_path = gemm;
  r.windows = std::count_if(segments.begin(), segments.end(), [](const Window& x) { return x.chunks > 0; });
  for (const Window& x : segments) r.segment_chunks += (r.segment_chunks.empty() ? "" : "+") + std::to_string(x.chunks);
  const DType snap = s.snapshot;
  r.min_bytes =
      count_bytes(p, s.input, s.output, s.snapshots ? &snap : nullptr, s.has_initial_state, r.gate).total();
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
  phases.write = seconds_since(mark);
  const std::vector<std::string> every_rank = parallel::gather(phases.text(rank));
  for (const std::string& line : every_rank) r.rank_phases += "\n" + line;
  r.ok = true;
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
}

}  // namespace

std::vector<CaseResult> run_context_parallel(const RunOptions& opt, std::ostream& progress, std::ostream& errors) {
  const bool root = parallel::rank() == 0;
  pipeline::install_signal_cleanup();
  // The inputs are read in this process (no reader process here).
  const hdf5::ExternalDataScope external(opt.allow_external_data);
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
  std::set<std::string> warmed;  // the kernel configurations warm_up ran
  for (std::size_t i = 0; i < results.size(); ++i) {
    CaseResult& r = results[i];
    if (r.error.empty() && !r.skipped) run_shared_case(opt, r, file_access.get(), transfer.get(), warmed);
    if (!root) continue;
    if (r.skipped) progress << skipped_line(i + 1, results.size(), r) << std::endl;
    else if (r.ok)
      progress << progress_line(i + 1, results.size(), r, opt.forward.variant) << r.rank_phases << std::endl;
    else errors << failure_line(i + 1, results.size(), r) << std::endl;
  }
  return results;
}

}  // namespace linattn
