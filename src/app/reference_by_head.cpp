#include "app/reference_by_head.hpp"

#include "reference/channel_gated.hpp"

#include <stdexcept>
#include <vector>

namespace linattn {
namespace {

// Sequence n, head hh of a case: where its tokens and its state rows lie.
struct Piece {
  const Problem& p;
  std::int64_t n, hh;
  std::int64_t row() const { return p.sequence_batch(n); }
  std::int64_t t0() const { return p.sequence_start(n); }
  std::int64_t length() const { return p.sequence_length(n); }

  // Token t of the piece in a [rows, T, H, D] tensor.
  std::int64_t token(std::int64_t t, std::int64_t D) const { return ((row() * p.T + t0() + t) * p.H + hh) * D; }
  std::vector<double> gather_tokens(const std::vector<double>& x, std::int64_t D) const {
    std::vector<double> out(static_cast<std::size_t>(length() * D));
    for (std::int64_t t = 0; t < length(); ++t)
      for (std::int64_t d = 0; d < D; ++d) out[t * D + d] = x[token(t, D) + d];
    return out;
  }
  void scatter_tokens(const std::vector<double>& part, std::int64_t D, std::vector<double>& x) const {
    for (std::int64_t t = 0; t < length(); ++t)
      for (std::int64_t d = 0; d < D; ++d) x[token(t, D) + d] = part[t * D + d];
  }
  // The piece's row of an [N, H, DK, DV] state tensor.
  std::int64_t state() const { return (n * p.H + hh) * p.DK * p.DV; }
  std::vector<double> gather_state(const std::vector<double>& x) const {
    return std::vector<double>(x.begin() + state(), x.begin() + state() + p.DK * p.DV);
  }
  void scatter_state(const std::vector<double>& part, std::vector<double>& x) const {
    std::copy(part.begin(), part.end(), x.begin() + state());
  }
  // The one-row, one-head problem of the piece.
  Problem problem() const {
    Problem one = plain_problem(p, 1, length());
    one.H = 1;
    return one;
  }
  // The piece's log-decays: g_gamma[hh], or g of its tokens for head hh as [1, L, 1].
  reference::Gate gate_of(const reference::Gate& gate) const {
    if (gate.kind == GateKind::per_head) return reference::Gate::per_head({gate.log_decay[static_cast<std::size_t>(hh)]});
    if (gate.kind != GateKind::per_token) return gate;
    std::vector<double> g(static_cast<std::size_t>(length()));
    for (std::int64_t t = 0; t < length(); ++t) g[t] = gate.log_decay[token(t, 1)];
    return reference::Gate::per_token(std::move(g));
  }
  // Its share of the case's tokens: the sequence's tokens split over the heads.
  std::int64_t tokens() const { return length() * (hh + 1) / p.H - length() * hh / p.H; }
  std::int64_t elements() const { return length() * (2 * p.DK + p.DV); }
};

template <class Visit>
void for_each_piece(const Problem& p, Visit visit) {
  for (std::int64_t n = 0; n < p.num_sequences(); ++n)
    for (std::int64_t hh = 0; hh < p.H; ++hh) visit(Piece{p, n, hh});
}

}  // namespace

reference::Result forward_reference_by_head(const Problem& p, const reference::Inputs& in, bool normalized,
                                            const PieceDone& done, const reference::Gate& gate) {
  validate_shapes(p);
  const std::int64_t DK = p.DK, DV = p.DV, state = DK * DV;
  const std::vector<std::int64_t> chunk_starts = p.chunk_starts();  // once: O(N)
  reference::Result r;
  r.o.assign(static_cast<std::size_t>(p.B * p.T * p.H * DV), 0.0);
  r.h.assign(static_cast<std::size_t>((p.varlen() ? 1 : p.B) * p.total_chunks() * p.H * state), 0.0);
  r.final_state.assign(static_cast<std::size_t>(p.num_sequences() * p.H * state), 0.0);
  for_each_piece(p, [&](const Piece& piece) {
    const std::vector<double> q = piece.gather_tokens(in.q, DK), k = piece.gather_tokens(in.k, DK),
                              v = piece.gather_tokens(in.v, DV);
    std::vector<double> s0;
    if (in.initial_state) s0 = piece.gather_state(*in.initial_state);
    const Problem one = piece.problem();
    const reference::Inputs piece_in{q, k, v, in.initial_state ? &s0 : nullptr};
    const reference::Result part =
        gate.kind == GateKind::none          ? reference::chunked(one, piece_in)
        : gate.kind == GateKind::per_channel ? reference::gla_chunked(one, piece_in, {piece.gather_tokens(gate.log_decay, DK)})
                                             : reference::gated_chunked(one, piece_in, piece.gate_of(gate));
    piece.scatter_tokens(part.o, DV, r.o);
    // h [rows, chunks, H, DK, DV]: a plain row's chunks from 0, a packed sequence's from its first chunk.
    const std::int64_t first = p.varlen() ? chunk_starts[piece.n] : piece.row() * p.total_chunks();
    for (std::int64_t c = 0; c < one.num_chunks(); ++c)
      std::copy(part.h.begin() + c * state, part.h.begin() + (c + 1) * state,
                r.h.begin() + ((first + c) * p.H + piece.hh) * state);
    piece.scatter_state(part.final_state, r.final_state);
    done(piece.tokens(), piece.elements());
  });
  if (normalized) reference::normalize(p, in, r);
  return r;
}

reference::GatedGradients backward_reference_by_head(const Problem& p, const reference::Inputs& in,
                                                     const reference::GradInputs& g, const PieceDone& done,
                                                     const reference::Gate& gate) {
  validate_shapes(p);
  const std::int64_t DK = p.DK, DV = p.DV;
  reference::GatedGradients d;
  const bool gated = gate.kind != GateKind::none, channels = gate.kind == GateKind::per_channel;
  const std::int64_t gate_width = channels ? DK : 1;  // dg per token, or dgk per token and key channel
  if (gated) d.dg.assign(static_cast<std::size_t>(p.B * p.T * p.H * gate_width), 0.0);
  d.dq.assign(static_cast<std::size_t>(p.B * p.T * p.H * DK), 0.0);
  d.dk.assign(d.dq.size(), 0.0);
  d.dv.assign(static_cast<std::size_t>(p.B * p.T * p.H * DV), 0.0);
  d.dh0.assign(static_cast<std::size_t>(p.num_sequences() * p.H * DK * DV), 0.0);
  for_each_piece(p, [&](const Piece& piece) {
    const std::vector<double> q = piece.gather_tokens(in.q, DK), k = piece.gather_tokens(in.k, DK),
                              v = piece.gather_tokens(in.v, DV), d_o = piece.gather_tokens(g.d_o, DV);
    std::vector<double> s0, dht;
    if (in.initial_state) s0 = piece.gather_state(*in.initial_state);
    if (g.dht) dht = piece.gather_state(*g.dht);
    const reference::Inputs piece_in{q, k, v, in.initial_state ? &s0 : nullptr};
    const reference::GradInputs piece_grad{d_o, g.dht ? &dht : nullptr};
    reference::GatedGradients part;
    if (channels) {
      part = reference::as_gated_gradients(reference::gla_backward_chunked(
          piece.problem(), piece_in, {piece.gather_tokens(gate.log_decay, DK)}, piece_grad));
    } else {
      part = gated ? reference::gated_backward_chunked(piece.problem(), piece_in, piece.gate_of(gate), piece_grad)
                   : reference::GatedGradients{reference::backward_chunked(piece.problem(), piece_in, piece_grad), {}, {}};
    }
    if (gated) piece.scatter_tokens(part.dg, gate_width, d.dg);
    piece.scatter_tokens(part.dq, DK, d.dq);
    piece.scatter_tokens(part.dk, DK, d.dk);
    piece.scatter_tokens(part.dv, DV, d.dv);
    piece.scatter_state(part.dh0, d.dh0);
    done(piece.tokens(), piece.elements() + piece.length() * DV);  // and do
  });
  if (gate.kind == GateKind::per_head) reference::sum_dg_per_head(p, d);
  return d;
}

}  // namespace linattn
