#include "core/ledger.hpp"

namespace linattn {

FlopCounts count_flops(const Problem& p) {
  const double bh = static_cast<double>(p.B) * static_cast<double>(p.H);
  const double T = static_cast<double>(p.T), C = static_cast<double>(p.chunk);
  const double DK = static_cast<double>(p.DK), DV = static_cast<double>(p.DV);
  FlopCounts f;
  f.state_sequential = bh * 2.0 * T * DK * DV;
  // Per sequence (a plain batch: B sequences of T tokens): the tokens before
  // each chunk in its sequence, and the squared lengths of the causal form.
  double prefix_tokens = 0, squared_lengths = 0;
  for (std::int64_t n = 0; n < p.num_sequences(); ++n) {
    for (std::int64_t c = 0; c < p.sequence_chunks(n); ++c) prefix_tokens += static_cast<double>(c * p.chunk);
    squared_lengths += static_cast<double>(p.sequence_length(n)) * static_cast<double>(p.sequence_length(n));
  }
  const double heads = static_cast<double>(p.H);
  f.state_recompute = heads * 2.0 * prefix_tokens * DK * DV;
  f.readout = bh * 2.0 * T * DK * DV;
  f.intra = bh * 2.0 * T * C * (DK + DV);
  f.ideal = f.state_sequential + f.readout + f.intra;
  f.causal_flash_attention = heads * squared_lengths * (DK + DV);
  f.redundancy = f.state_recompute / f.state_sequential;
  f.recurrent = bh * 4.0 * T * DK * DV;
  return f;
}

double variant_flops(const Problem& p, Variant v) {
  const FlopCounts f = count_flops(p);
  if (v == Variant::recompute) return f.state_recompute + f.readout + f.intra;
  if (v == Variant::recurrent) return f.recurrent;
  return f.ideal;
}

GateCounts count_gate(const Problem& p, GateKind kind) {
  GateCounts g;
  if (kind == GateKind::none) return g;
  const double bth = static_cast<double>(p.B) * static_cast<double>(p.T) * static_cast<double>(p.H);
  const double C = static_cast<double>(p.chunk), DK = static_cast<double>(p.DK), DV = static_cast<double>(p.DV);
  double chunks = 0;  // every (sequence, chunk), times the heads
  for (std::int64_t n = 0; n < p.num_sequences(); ++n) chunks += static_cast<double>(p.sequence_chunks(n));
  chunks *= static_cast<double>(p.H);
  if (kind == GateKind::per_channel) {  // every factor per key channel: the scores' C x DK per row, Q's and K's rows
    g.multiplies = bth * (C * DK + 2.0 * DK) + chunks * DK * DV;
    g.exponentials = bth * (C * DK + 2.0 * DK) + chunks * DK;
    g.additions = bth * DK;
    g.bytes = 4.0 * bth * DK;
    return g;
  }
  g.multiplies = bth * (C + DV + DK) + chunks * DK * DV;
  g.exponentials = bth * (C + 2.0);
  g.additions = bth;
  g.bytes = 4.0 * (kind == GateKind::per_token ? bth : static_cast<double>(p.H));
  return g;
}

double backward_flops(const Problem& p, bool recompute_h) {
  const double bth = static_cast<double>(p.B) * static_cast<double>(p.T) * static_cast<double>(p.H);
  const double C = static_cast<double>(p.chunk), DK = static_cast<double>(p.DK), DV = static_cast<double>(p.DV);
  return bth * (8.0 * DK * DV + 2.0 * C * (3.0 * DK + 2.0 * DV) + (recompute_h ? 2.0 * DK * DV : 0.0));
}

ByteCounts count_bytes(const Problem& p, DType input, DType output, const DType* snapshot_dtype,
                       bool has_initial_state, GateKind gate) {
  const double bth = static_cast<double>(p.B) * static_cast<double>(p.T) * static_cast<double>(p.H);
  const double state = static_cast<double>(p.num_sequences()) * static_cast<double>(p.H) * static_cast<double>(p.DK) *
                       static_cast<double>(p.DV);
  const double acc = static_cast<double>(dtype_size(accumulation_dtype(input)));
  ByteCounts b;
  b.q = bth * p.DK * dtype_size(input);
  b.k = bth * p.DK * dtype_size(input);
  b.v = bth * p.DV * dtype_size(input);
  b.initial_state = has_initial_state ? state * acc : 0.0;
  b.o = bth * p.DV * dtype_size(output);
  const double h_states = static_cast<double>(p.h_shape()[0]) * static_cast<double>(p.total_chunks()) *
                          static_cast<double>(p.H) * static_cast<double>(p.DK) * static_cast<double>(p.DV);
  b.h = snapshot_dtype ? h_states * dtype_size(*snapshot_dtype) : 0.0;
  b.final_state = state * acc;
  double gate_values = gate == GateKind::none ? 0.0 : 1.0;
  for (std::int64_t extent : gate_shape(p, gate)) gate_values *= static_cast<double>(extent);
  b.gate = gate_values * dtype_size(DType::f32);
  return b;
}

}  // namespace linattn
