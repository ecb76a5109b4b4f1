#include "app/context_parallel_run.hpp"

#include "app/batch.hpp"
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
#include "pipeline/read_protocol.hpp"
#include "pipeline/write_stage.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <numeric>
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

// Where one rank's wall time of a case goes, in seconds, step by step: the
// kernels' warm-up (once per configuration), its state pass over the carried
// piece (reading it included), its wait for the start state, its forward
// through the pipeline (reads, kernels and writes overlapped; the kernels'
// part of it), and the wait for every rank's writes and the commit.
struct Phases {
  double prepare = 0, pass = 0, wait = 0, forward = 0, kernels = 0, write = 0;
  std::size_t windows = 0;
  std::string text(int rank) const {
    return "  rank " + std::to_string(rank) + ": warm-up " + fixed(prepare, 3) + " s, state pass " + fixed(pass, 3) +
           " s, wait for the start state " + fixed(wait, 3) + " s, forward " + fixed(forward, 3) + " s in " +
           std::to_string(windows) + (windows == 1 ? " window" : " windows") + " (kernels " + fixed(kernels, 3) +
           " s), writes and commit " + fixed(write, 3) + " s";
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

// The state pass's first launch loads its module on the device: it runs once
// on a tiny case first, as the compute stage warms the forward up
// (Batch::stage_for); gated with log-decays of 0.
void warm_up_state_pass(const Problem& p, DType input, const ForwardConfig& config) {
  Problem tiny = plain_problem(p, 1, 2 * p.chunk);
  tiny.H = 1;
  const Tensor k(input, tiny.qk_shape()), v(input, tiny.v_shape());
  const Tensor zeros(accumulation_dtype(input), gate_shape(tiny, config.gate));
  run_state_pass(tiny, config, k, v, nullptr, nullptr, config.gate == GateKind::none ? nullptr : &zeros);
}

// Waits until the write stage has done every job queued so far; the case's error, if its writes failed.
std::string writes_done(pipeline::WriteStage& writer, const std::shared_ptr<pipeline::CaseWrite>& out) {
  writer.drain();
  return out->failed.load() ? out->error : "";
}

// One case on every rank together; sets r.ok, or r.error, alike on all of them.
// After each step that can fail on one rank the ranks agree (failed_anywhere).
void run_shared_case(const RunOptions& opt, Batch& batch, ProgressReporter& reporter, CaseResult& r,
                     std::size_t index, std::size_t total, std::set<std::string>& warmed) {
  const Clock::time_point started = Clock::now();
  const int rank = parallel::rank();
  const int ranks = parallel::size();
  Batch::OpenCase c;
  bool opened = false;
  const auto open = [&] {
    c = batch.open_case(r);  // in the reader processes; refuses --normalize with a gate
    opened = true;
  };
  if (failed_anywhere(attempt(r, open), r)) {
    if (opened) static_cast<void>(attempt(r, [&] { batch.close_case(c); }));
    return;
  }
  const Problem& p = c.p;
  const CaseStorage& s = c.s;
  Phases phases;
  Clock::time_point mark = Clock::now();
  // The segments, cut by what the state pass costs (parallel/segment_plan.hpp).
  // Each rank streams its own through the pipeline's windows, which never
  // split a sequence (compute_stage.hpp), so one rank's output is `run`'s.
  ForwardConfig config = opt.forward;
  config.gate = s.gate;  // the case's own: the forward, the state pass and the carries decay with it
  double carry_cost = opt.carry_cost;
  std::vector<Window> segments, windows;
  const auto prepare = [&] {  // the state pass's cost, each kernel configuration warmed up once, the windows
    if (ranks > 1 && carry_cost < 0)
      carry_cost = state_pass_cost(state_pass_kind(plain_problem(p, p.varlen() ? 1 : p.B, p.chunk), config, s.input),
                                   p, config, s.input);
    batch.stage_for(p, s);
    const std::string shape = std::to_string(static_cast<int>(s.input)) + ":" + std::to_string(p.DK) + "x" +
                              std::to_string(p.DV) + "/" + std::to_string(p.chunk) + ":" +
                              gate_dataset_name(config.gate);
    if (ranks > 1 && warmed.insert(shape).second) warm_up_state_pass(p, s.input, config);
    segments = parallel::plan_segments(p, ranks, std::max(carry_cost, 0.0));
    const Window& w = segments[static_cast<std::size_t>(rank)];
    if (w.chunks > 0) windows = batch.plan(r, c, w);
  };
  if (failed_anywhere(attempt(r, prepare), r)) {
    static_cast<void>(attempt(r, [&] { batch.close_case(c); }));
    return;
  }
  phases.prepare = seconds_since(mark);
  const Window& w = segments[static_cast<std::size_t>(rank)];
  const bool works = w.chunks > 0;
  const parallel::CarryRoute route = parallel::carry_route(p, segments, rank);

  // The output file: rank 0 creates it (its datasets allocated at once), the
  // others write their windows at its datasets' offsets (write_stage.hpp).
  pipeline::WriteStage& writer = batch.writer();
  std::shared_ptr<pipeline::CaseWrite> out;
  std::string created;  // why this rank has no output to write into
  if (rank == 0) created = attempt(r, [&] { out = writer.open(r.output, p, c.layout, opt.durable); });
  if (ranks > 1) {
    // Rank 0 sends the offsets, or nothing when it has none (its own error is the case's).
    RawOffsets at;
    std::string offsets;
    if (rank == 0 && created.empty()) {
      created = writer.share(out, at);
      if (created.empty() && !at.complete(s.snapshots, s.normalize))
        created = FileError(r.output, "context parallel: the output's datasets have no file offsets").what();
      if (created.empty()) offsets = pipeline::MessageWriter().i64s({at.o, at.h, at.final_state, at.z_state}).bytes();
    }
    offsets = parallel::broadcast(offsets);
    if (rank != 0 && offsets.empty()) created = "context parallel: rank 0 has no output file to write into";
    if (rank != 0 && !offsets.empty()) {
      const std::vector<std::int64_t> o = pipeline::MessageReader(offsets).i64s();
      at.o = o.at(0);
      at.h = o.at(1);
      at.final_state = o.at(2);
      at.z_state = o.at(3);
      out = writer.open_raw(r.output + ".partial", p, c.layout, at, opt.durable);
    }
  }
  if (failed_anywhere(created, r)) {
    if (out) writer.abort(out);
    static_cast<void>(attempt(r, [&] { batch.close_case(c); }));
    return;
  }
  phases.prepare += seconds_since(mark);
  phases.windows = windows.size();

  // 1. The start state, without waiting for the forward of the segment before,
  // while the first windows are read: this rank's state pass over that
  // segment's piece, plus that segment's own start state (received) when the
  // sequence began earlier still, decayed by the piece's tokens when gated
  // (parallel/gated_carry.hpp). The sum runs in chain order, as carry_chain
  // lists it. Ranks send and receive even after a failure, so that none waits
  // forever. The piece is read here, in the batch process, in parts of at most
  // an input slot's bytes (the memory budget's), each part's state pass
  // starting from the one before.
  const std::int64_t carry_rows = p.varlen() ? 1 : p.B;
  Carry start;
  double pass_kernels = 0;  // the state pass's kernel seconds
  parallel::ChainTrace trace(rank);
  double waited = 0;  // this rank's part of the critical path: its kernels, and its wait for a start state
  std::string failure;
  bool chained = false;
  const auto chain = [&]() -> Batch::StartState {
    chained = true;
    std::vector<double> piece_decay;  // gated: the piece's total log-decay per row and head (or key channel)
    if (route.carry_of >= 0 && failure.empty()) {
      failure = attempt(r, [&] {
        const hdf5::ExternalDataScope external(opt.allow_external_data);
        const Window& before = segments[static_cast<std::size_t>(route.carry_of)];
        const parallel::CarriedPiece part = parallel::carried_piece(p, before);
        const std::int64_t token_bytes =
            carry_rows * p.H * (p.DK + p.DV) * static_cast<std::int64_t>(dtype_size(s.input));
        const std::int64_t step = std::max<std::int64_t>(1, batch.slot_bytes() / token_bytes / p.chunk) * p.chunk;
        hdf5::File file = hdf5::open_read_only(r.input);
        for (std::int64_t t = part.t0; t < part.t1; t += step) {
          SliceRequest slice;
          slice.t0 = t;
          slice.t1 = std::min(t + step, part.t1);
          slice.with_q = false;
          slice.row0 = p.varlen() ? before.seq_end - 1 : 0;
          slice.rows = t > part.t0 || !part.from_start ? 0 : carry_rows;
          slice.accumulation = s.accumulation;
          slice.allow_nonfinite = opt.allow_nonfinite;
          const CaseData piece = read_slice(file.get(), r.input, r.group, c.schema, slice);
          const Problem piece_problem = plain_problem(p, carry_rows, slice.t1 - slice.t0);
          const bool first = t == part.t0;
          const StatePassOutput y =
              run_state_pass(piece_problem, config, piece.k, piece.v,
                             first ? present(piece.initial_state) : &start.state,
                             first ? present(piece.initial_z) : present(start.z), present(piece.log_decay));
          pass_kernels += y.kernel_seconds;
          start = {y.final_state, y.z_state};
          if (config.gate != GateKind::none) {
            const std::vector<double> d =
                parallel::total_log_decay(config.gate, piece.log_decay, carry_rows, piece_problem.T, p.H);
            piece_decay.resize(d.size(), 0.0);
            for (std::size_t i = 0; i < d.size(); ++i) piece_decay[i] += d[i];
          }
        }
        file.close();
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
        // Gated: the state before the piece decays over its tokens, as the one-rank forward's does (no z: a
        // gate refuses --normalize).
        if (config.gate != GateKind::none) parallel::decay_state(before.state, piece_decay);
        add_into(before.state, start.state);
        if (s.normalize) add_into(before.z, start.z);
        start = std::move(before);
      }
    }
    // The start state is delivered before this rank's forward starts. MPI moves a message larger than its eager
    // limit only while both ranks are inside MPI calls: a send left in flight across the forward made the next
    // rank wait for this rank's whole forward, a chain as slow as one rank (docs/PARALLEL.md, "A CPU node").
    if (route.start_to >= 0) {
      const std::string bytes = failure.empty() ? encode(start) : std::string();
      parallel::send(route.start_to, bytes);
      parallel::finish_sends();
      trace.event("send " + std::to_string(route.start_to) + " " + std::to_string(bytes.size()) + " delivered");
    }
    phases.wait = seconds_since(mark);
    if (!failure.empty()) throw std::runtime_error(failure);
    trace.event("forward start");
    Batch::StartState from;
    if (w.continues) from = {start.state.bytes.data(), s.normalize ? start.z.bytes.data() : nullptr};
    return from;
  };

  // 2. The segment's windows through the pipeline, from that start.
  pipeline::WindowTimes forward;
  batch.start_progress(case_counter(index, total) + " " + printable(r.label()), c, windows);
  const std::string streamed = attempt(r, [&] {
    if (works) {
      forward = batch.stream(r, c, windows, out, chain);
    } else {
      batch.close_case(c);
      chain();
    }
  });
  if (!chained) {  // the stream failed before it asked for the start state: the chain goes on without it
    failure = streamed;
    static_cast<void>(attempt(r, chain));
  }
  trace.event("forward end");
  phases.forward = seconds_since(mark);
  phases.kernels = forward.kernel;
  std::string mine = failure.empty() ? streamed : failure;
  // Every window written: the other ranks' writes made durable and closed, rank 0's done.
  if (rank == 0) {
    const std::string written = writes_done(writer, out);
    if (mine.empty()) mine = written;
  } else {
    std::promise<std::string> closed;
    writer.finish_raw(out, [&closed](const std::string& error) { closed.set_value(error); });
    const std::string written = closed.get_future().get();
    if (mine.empty()) mine = written;
  }
  reporter.end_case();
  if (failed_anywhere(mine, r)) {
    if (rank == 0) writer.abort(out);
    return;
  }

  // 3. Rank 0 finishes the file: the attributes, then the commit.
  pipeline::WindowTimes all;
  all.upload = parallel::max(forward.upload);
  // The critical path: a rank that waited for its start state counts the wait
  // (copies to and from the device are reported on their own).
  all.kernel = parallel::max(pass_kernels + forward.kernel + waited);
  all.download = parallel::max(forward.download);
  r.tile_path = parallel::first_non_empty(works ? r.tile_path : "");
  r.kernel_seconds = all.kernel;
  r.windows = std::count_if(segments.begin(), segments.end(), [](const Window& x) { return x.chunks > 0; });
  r.segment_chunks.clear();
  for (const Window& x : segments) r.segment_chunks += (r.segment_chunks.empty() ? "" : "+") + std::to_string(x.chunks);
  std::string committed;
  if (rank == 0) {
    const RunRecord record = make_record(opt, r, p, s, parse_gemm_path(r.tile_path), all);
    std::promise<std::string> done;
    writer.finish(out, record, [&done](const std::string& error) { done.set_value(error); });
    committed = done.get_future().get();
  }
  phases.write = seconds_since(mark);
  if (failed_anywhere(committed, r)) return;
  const std::vector<std::string> every_rank = parallel::gather(phases.text(rank));
  for (const std::string& line : every_rank) r.rank_phases += "\n" + line;
  r.ok = true;
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
}

}  // namespace

void run_context_parallel(const RunOptions& opt, Batch& batch, ProgressReporter& reporter,
                          const std::string& outdir_problem, std::vector<CaseResult>& results) {
  const bool root = parallel::rank() == 0;
  // Rank 0 checks the cases' outputs (listed by its reader process).
  if (root) {
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

  std::set<std::string> warmed;  // the state pass's configurations warmed up
  for (std::size_t i = 0; i < results.size(); ++i) {
    CaseResult& r = results[i];
    if (r.error.empty() && !r.skipped) run_shared_case(opt, batch, reporter, r, i + 1, results.size(), warmed);
    if (!root) continue;
    if (r.skipped) reporter.line(skipped_line(i + 1, results.size(), r));
    else if (r.ok) reporter.line(progress_line(i + 1, results.size(), r, opt.forward.variant) + r.rank_phases);
    else reporter.line(failure_line(i + 1, results.size(), r), true);
  }
}

}  // namespace linattn
