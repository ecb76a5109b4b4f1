#include "pipeline/streamed_backward.hpp"

#include "kernels/forward.hpp"

#include <cstring>

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

// The state rows entering a window: `carried` for the rows that continue,
// the file's initial_state rows for the sequences that start in it; empty
// (zero) when the window neither continues nor has a file to read.
Tensor start_states(const Window& w, const Edges& e, const Tensor& carried, const BackwardReader& in,
                    bool file_has_them) {
  if (e.in_rows == 0 && !file_has_them) return Tensor();
  Tensor s = e.in_rows < e.sequences ? in.initial_rows(w.seq_begin, e.sequences) : Tensor();
  if (e.in_rows == 0) return s;
  if (s.empty()) return carried;
  put_rows(s, 0, carried);
  return s;
}

// dht of a window: `carried` (the dS its last rows hand back) for the rows
// that go on, the file's dht rows for the sequences that end in it; empty
// (zero) when the window neither carries nor has a file to read.
Tensor final_gradients(const Window& w, const Edges& e, const Tensor& carried, const BackwardReader& in,
                       bool file_has_them) {
  if (e.out_rows == 0 && !file_has_them) return Tensor();
  Tensor g = e.out_rows < e.sequences ? in.dht_rows(w.seq_begin, e.sequences) : Tensor();
  if (e.out_rows == 0) return g;
  if (g.empty()) return carried;
  put_rows(g, e.sequences - e.out_rows, carried);
  return g;
}

}  // namespace

StreamedBackwardResult run_streamed_backward(const Problem& whole, const BackwardConfig& config,
                                             const std::vector<Window>& windows, const BackwardReader& in,
                                             GradOutputStream& out,
                                             const std::function<void(const Window&, bool backward)>& window_done) {
  StreamedBackwardResult r;
  const bool has_initial = in.has_initial_state(), has_dht = in.has_dht();

  // With recompute_h: the forward state at the start of each window that
  // continues, from a forward pass in token order.
  std::vector<Tensor> starts(windows.size());
  if (config.recompute_h && windows.size() > 1) {
    Tensor carry;
    ForwardConfig forward;
    forward.snapshots = SnapshotMode::none;
    forward.segments = 1;  // never split: the windows' states are then the whole case's bits (kernels/backward.cpp)
    for (std::size_t i = 0; i < windows.size(); ++i) {
      const Window& w = windows[i];
      const Edges e = edges(whole, w);
      starts[i] = carry;
      if (e.out_rows > 0) {  // only what goes on into the next window is needed
        const Problem wp = window_problem(whole, w);
        const Tensor s0 = start_states(w, e, carry, in, has_initial);
        const BackwardReader::Tokens t = in.tokens(w, false);
        const Tensor g = in.gate(w);
        forward.gate = config.gate;
        const ForwardOutput f =
            run_forward(wp, forward, t.q, t.k, t.v, s0.empty() ? nullptr : &s0, nullptr, g.empty() ? nullptr : &g);
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
  DType accumulation = DType::f32;
  for (std::size_t i = windows.size(); i-- > 0;) {
    const Window& w = windows[i];
    const Edges e = edges(whole, w);
    const Problem wp = window_problem(whole, w);
    const BackwardReader::Tokens t = in.tokens(w, true);
    const Tensor h = config.recompute_h ? Tensor() : in.h(w);
    const Tensor s0 = config.recompute_h ? start_states(w, e, starts[i], in, has_initial) : Tensor();
    const Tensor dht = final_gradients(w, e, dS, in, has_dht);
    const Tensor g = in.gate(w);
    const BackwardOutput b =
        run_backward(wp, config, t.q, t.k, t.v, config.recompute_h ? nullptr : &h, s0.empty() ? nullptr : &s0, t.d_o,
                     dht.empty() ? nullptr : &dht, g.empty() ? nullptr : &g);
    r.upload_seconds += b.upload_seconds;
    r.kernel_seconds += b.kernel_seconds;
    r.download_seconds += b.download_seconds;
    r.gemm = b.gemm;
    out.write_tokens(w.t0, b.dq, b.dk, b.dv);
    // dh0 of the sequences that start here is final; that of the rows that
    // continue from the window before is the dS it takes as dht.
    if (e.in_rows < e.sequences)
      out.write_dh0(w.seq_begin + e.in_rows, row_slice(b.dh0, e.in_rows, e.sequences - e.in_rows));
    dS = e.in_rows > 0 ? row_slice(b.dh0, 0, e.in_rows) : Tensor();
    if (config.gate == GateKind::per_token || config.gate == GateKind::per_channel) out.write_dg(w.t0, b.dg);
    accumulation = b.dh0.dtype;
    if (config.gate == GateKind::per_head) {
      const std::vector<double> d = b.dg.to_double();
      for (std::size_t i = 0; i < d.size(); ++i) dg_gamma[i % dg_gamma.size()] += d[i];
    }
    window_done(w, true);
  }
  if (config.gate == GateKind::per_head)
    out.write_dg_gamma(Tensor::from_double(accumulation, {whole.H}, dg_gamma));
  return r;
}

}  // namespace linattn
