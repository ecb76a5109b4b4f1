#include "pipeline/streamed_backward.hpp"

#include "kernels/forward.hpp"
#include "pipeline/backward_window_outputs.hpp"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace linattn {
namespace {

// Rows [r0, r0 + count) of a tensor whose first axis holds its rows.
Tensor row_slice(const Tensor& t, std::int64_t r0, std::int64_t count) {
  std::vector<std::int64_t> shape = t.shape;
  shape[0] = count;
  Tensor rows(t.dtype, shape);
  const std::size_t row = t.bytes.size() / static_cast<std::size_t>(t.shape[0]);
  std::memcpy(rows.bytes.data(), t.bytes.data() + static_cast<std::size_t>(r0) * row, rows.bytes.size());
  return rows;
}

void put_rows(Tensor& t, std::int64_t r0, const Tensor& rows) {
  const std::size_t row = t.bytes.size() / static_cast<std::size_t>(t.shape[0]);
  std::memcpy(t.bytes.data() + static_cast<std::size_t>(r0) * row, rows.bytes.data(), rows.bytes.size());
}

// A window's state rows (one per sequence of its sub-problem; row r is
// sequence seq_begin + r) that cross its edges: a plain window carries every
// batch row across both edges, a packed one only the sequence cut there.
struct Edges {
  std::int64_t sequences = 0;  // rows of the sub-problem
  std::int64_t in_rows = 0;    // rows [0, in_rows) continue from the window before
  std::int64_t out_rows = 0;   // rows [sequences - out_rows, sequences) go on into the window after
};

Edges edges(const Problem& whole, const Window& w) {
  Edges e;
  e.sequences = whole.varlen() ? w.sequences() : whole.B;
  const std::int64_t cut = whole.varlen() ? 1 : whole.B;
  e.in_rows = w.continues ? cut : 0;
  e.out_rows = w.carries ? cut : 0;
  return e;
}

Tensor zero_rows(const Problem& p, DType acc, std::int64_t count) { return Tensor(acc, {count, p.H, p.DK, p.DV}); }

// The state rows entering a window: `carried` for the rows that continue,
// the file's initial_state rows (read: `from_file`, or zeros when the file
// has none) for the sequences that start in it; empty (zero) when the window
// neither continues nor has a file to read.
Tensor start_states(const Problem& p, const Edges& e, const Tensor& carried, const Tensor& from_file,
                    bool file_has_them, DType acc) {
  if (e.in_rows == 0 && !file_has_them) return Tensor();
  Tensor s = e.in_rows == e.sequences ? Tensor() : file_has_them ? from_file : zero_rows(p, acc, e.sequences);
  if (e.in_rows == 0) return s;
  if (s.empty()) return carried;
  put_rows(s, 0, carried);
  return s;
}

// dht of a window: `carried` (the dS its last rows hand back) for the rows
// that go on, the file's dht rows (read: `from_file`, or zeros) for the
// sequences that end in it; empty (zero) when the window neither carries nor
// has a file to read.
Tensor final_gradients(const Problem& p, const Edges& e, const Tensor& carried, const Tensor& from_file,
                       bool file_has_them, DType acc) {
  if (e.out_rows == 0 && !file_has_them) return Tensor();
  Tensor g = e.out_rows == e.sequences ? Tensor() : file_has_them ? from_file : zero_rows(p, acc, e.sequences);
  if (e.out_rows == 0) return g;
  if (g.empty()) return carried;
  put_rows(g, e.sequences - e.out_rows, carried);
  return g;
}

// One window of one pass, in the order the passes take them.
struct Step {
  std::size_t window = 0;
  bool backward = false;
};

// What a step reads: q, k, v and the gate always; the start states'
// initial_state rows when it recomputes; do, h (unless recomputed) and the
// final rows' dht in the backward pass. Rows of every sequence of the window,
// as start_states and final_gradients take them.
WindowParts parts_of(const Edges& e, const Window& w, bool backward, bool recompute, const BackwardSources& src) {
  WindowParts parts;
  parts.d_o = backward;
  parts.h = backward && !recompute;
  if ((recompute || !backward) && src.has_initial_state && e.in_rows < e.sequences) {
    parts.initial_row0 = w.seq_begin;
    parts.initial_rows = e.sequences;
  }
  if (backward && src.has_dht && e.out_rows < e.sequences) {
    parts.dht_row0 = w.seq_begin;
    parts.dht_rows = e.sequences;
  }
  return parts;
}

// A window's outputs on their way to the writer: dq, dk, dv (and dg) in an
// output slot, released when the writer is done with them (or skipped them
// after an earlier error).
struct WindowWrites {
  explicit WindowWrites(pipeline::SlotPool& outputs) : slot(outputs) {}
  pipeline::SlotLease slot;
  std::int64_t t0 = 0;
  BackwardTargets grads;
  bool write_dg = false;
  std::int64_t dh0_row0 = 0;
  Tensor dh0;  // rows of the sequences that start in the window; empty when none
};

// Where a window's dq, dk, dv (and dg) go in a mapped output (several
// writers, grad_write_stage.hpp): one run per batch row of each, their slot
// offsets from the window's output slot.
std::vector<pipeline::RawRun> token_runs(const GradOffsets& at, std::int64_t T, const WindowWrites& w) {
  std::vector<pipeline::RawRun> runs;
  const unsigned char* base = w.slot.data();
  auto add = [&](std::int64_t offset, const TensorSpan& s, const char* dataset, DType stored) {
    // Bytes are copied as they are: the file's type must be the tensor's (HDF5 would convert).
    if (s.dtype != stored)
      throw std::logic_error(std::string("mapped backward output: ") + dataset + " is not in its dataset's type");
    const std::int64_t rows = s.shape.at(0), tokens = s.shape.at(1);
    if (rows * tokens == 0) return;
    const std::int64_t token_bytes = s.numel() / (rows * tokens) * static_cast<std::int64_t>(dtype_size(s.dtype));
    for (std::int64_t r = 0; r < rows; ++r)
      runs.push_back({offset + (r * T + w.t0) * token_bytes, (s.bytes - base) + r * tokens * token_bytes,
                      tokens * token_bytes, dataset});
  };
  add(at.dq, w.grads.dq, "dq", at.tokens);
  add(at.dk, w.grads.dk, "dk", at.tokens);
  add(at.dv, w.grads.dv, "dv", at.tokens);
  if (w.write_dg) add(at.dg, w.grads.dg, w.grads.dg.shape.size() == 4 ? "dgk" : "dg", at.state);
  return runs;
}

// One run of a whole tensor's bytes at `offset` (dh0 rows, dg_gamma).
std::vector<pipeline::RawRun> whole_run(const GradOffsets& at, std::int64_t offset, const Tensor& t,
                                        const char* dataset) {
  if (t.dtype != at.state)
    throw std::logic_error(std::string("mapped backward output: ") + dataset + " is not in its dataset's type");
  return {{offset, 0, static_cast<std::int64_t>(t.bytes.size()), dataset}};
}

}  // namespace

StreamedBackwardResult run_streamed_backward(const Problem& whole, const BackwardConfig& config,
                                             const std::vector<Window>& windows, const BackwardSources& src,
                                             pipeline::BackwardInputs& in, pipeline::Clock::time_point deadline,
                                             pipeline::SlotPool& output_slots, pipeline::GradWriteStage& out,
                                             const std::function<void(const Window&, bool backward)>& window_done) {
  StreamedBackwardResult r;
  const bool has_initial = src.has_initial_state, has_dht = src.has_dht;
  const DType acc = src.accumulation, output = config.output_fp32 ? DType::f32 : src.input;

  // The steps, and their reads in that order: with recompute_h (and more
  // than one window) the forward pass over the windows whose state goes on,
  // then the backward from the last window to the first.
  const bool forward_pass = config.recompute_h && windows.size() > 1;
  std::vector<Step> steps;
  for (std::size_t i = 0; forward_pass && i < windows.size(); ++i)
    if (edges(whole, windows[i]).out_rows > 0) steps.push_back({i, false});
  for (std::size_t i = windows.size(); i-- > 0;) steps.push_back({i, true});
  std::vector<BackwardWindowRead> reads;
  for (const Step& s : steps) {
    const Window& w = windows[s.window];
    reads.push_back(backward_window_read(src, whole, w, parts_of(edges(whole, w), w, s.backward,
                                                                   config.recompute_h, src)));
  }
  in.start(src, std::move(reads), deadline);
  std::size_t step = 0;

  // With recompute_h: the forward state at the start of each window that
  // continues, from a forward pass in token order.
  std::vector<Tensor> starts(windows.size());
  if (forward_pass) {
    Tensor carry;
    ForwardConfig forward;
    forward.snapshots = SnapshotMode::none;
    forward.segments = 1;  // never split: the windows' states are then the whole case's bits (kernels/backward.cpp)
    forward.gate = config.gate;
    for (std::size_t i = 0; i < windows.size(); ++i) {
      const Window& w = windows[i];
      const Edges e = edges(whole, w);
      starts[i] = carry;
      if (e.out_rows > 0) {  // only what goes on into the next window is needed
        const BackwardWindowData d = in.next();
        ++step;
        const Problem wp = window_problem(whole, w);
        const Tensor s0 = start_states(whole, e, carry, d.initial_rows, has_initial, acc);
        // run_forward takes tensors: this pass (only with --recompute-h) copies its window out of the slot.
        const Tensor gate = d.gate.copy();
        const ForwardOutput f = run_forward(wp, forward, d.q.copy(), d.k.copy(), d.v.copy(), s0.empty() ? nullptr : &s0,
                                            nullptr, gate.empty() ? nullptr : &gate);
        in.release();
        r.upload_seconds += f.upload_seconds;
        r.kernel_seconds += f.kernel_seconds;
        r.download_seconds += f.download_seconds;
        carry = row_slice(f.final_state, e.sequences - e.out_rows, e.out_rows);
      } else {
        carry = Tensor();
      }
      window_done(w, false);
    }
  }

  // The backward, from the last window to the first, carrying dS (gated: dg
  // sums within each chunk, so dS is all a window needs from the later ones).
  Tensor dS;
  std::vector<double> dg_gamma(static_cast<std::size_t>(whole.H), 0.0);  // g_gamma: dg summed over every token
  for (; step < steps.size(); ++step) {
    const Window& w = windows[steps[step].window];
    const Edges e = edges(whole, w);
    const Problem wp = window_problem(whole, w);
    const BackwardWindowData d = in.next();
    const Tensor s0 =
        config.recompute_h ? start_states(whole, e, starts[steps[step].window], d.initial_rows, has_initial, acc)
                           : Tensor();
    const Tensor dht = final_gradients(whole, e, dS, d.dht_rows, has_dht, acc);
    const BackwardSpans spans{d.q, d.k, d.v, d.d_o, d.h, s0, dht, d.gate};
    // The outputs go into an output slot (waiting for the writer to free one).
    auto writes = std::make_shared<WindowWrites>(output_slots);
    writes->grads = backward_window_targets(wp, output, acc, config.gate, writes->slot.data());
    BackwardOutput b = run_backward(wp, config, spans, &writes->grads);
    in.release();
    r.upload_seconds += b.upload_seconds;
    r.kernel_seconds += b.kernel_seconds;
    r.download_seconds += b.download_seconds;
    r.gemm = b.gemm;
    // dh0 of the sequences that start here is final; that of the rows that
    // continue from the window before is the dS it takes as dht.
    writes->t0 = w.t0;
    if (e.in_rows < e.sequences) {
      writes->dh0_row0 = w.seq_begin + e.in_rows;
      writes->dh0 = row_slice(b.dh0, e.in_rows, e.sequences - e.in_rows);
    }
    dS = e.in_rows > 0 ? row_slice(b.dh0, 0, e.in_rows) : Tensor();
    if (config.gate == GateKind::per_head) {
      const std::vector<double> dg = writes->grads.dg.to_double();
      for (std::size_t j = 0; j < dg.size(); ++j) dg_gamma[j % dg_gamma.size()] += dg[j];
    }
    writes->write_dg = config.gate != GateKind::none && config.gate != GateKind::per_head;
    out.submit([writes, &out, T = whole.T](GradOutputStream& o) {
      if (out.mapped()) {
        const GradOffsets& at = o.offsets();
        out.copy(token_runs(at, T, *writes), writes->slot.data());
        if (!writes->dh0.empty()) {
          const std::int64_t row_bytes = static_cast<std::int64_t>(writes->dh0.bytes.size()) / writes->dh0.shape.at(0);
          out.copy(whole_run(at, at.dh0 + writes->dh0_row0 * row_bytes, writes->dh0, "dh0"), writes->dh0.bytes.data());
        }
        return;
      }
      o.write_tokens(writes->t0, writes->grads.dq, writes->grads.dk, writes->grads.dv);
      if (!writes->dh0.empty()) o.write_dh0(writes->dh0_row0, writes->dh0);
      if (writes->write_dg) o.write_dg(writes->t0, writes->grads.dg);
    });
    window_done(w, true);
  }
  if (config.gate == GateKind::per_head) {
    const Tensor total = Tensor::from_double(acc, {whole.H}, dg_gamma);
    out.submit([total, &out](GradOutputStream& o) {
      if (out.mapped()) out.copy(whole_run(o.offsets(), o.offsets().dg, total, "dg_gamma"), total.bytes.data());
      else o.write_dg_gamma(total);
    });
  }
  out.drain();
  return r;
}

}  // namespace linattn
