// The accuracy each output must reach against the fp64 reference
// (docs/NUMERICS.md), shared by the tests and `linattn verify`. The kernels read
// exactly the values the reference reads, so the only error sources are
// accumulation in the accumulation type and one final rounding of each stored
// element, which is bounded by the stored type's unit roundoff in relative L2
// (|round(x) - x| <= u |x| elementwise).
#pragma once

#include "core/dtype.hpp"

namespace linattn {

// Accumulation error level: fp64 accumulation <= 1e-13, fp32 <= 1e-5.
inline double accumulation_level(DType input) { return input == DType::f64 ? 1e-13 : 1e-5; }

// Level for a tensor stored in `stored` after accumulation in the input's accumulation type.
inline double stored_level(DType input, DType stored) {
  return accumulation_level(input) + unit_roundoff(stored);
}

// Level for o: the materialized variant reads its stored snapshots back (as
// fla's chunk_fwd_o does), so bf16 snapshots add one bf16 rounding of the
// state to the inter-chunk term.
inline double output_level(DType input, DType stored, bool materialized_reads_bf16_snapshots) {
  return stored_level(input, stored) + (materialized_reads_bf16_snapshots ? unit_roundoff(DType::bf16) : 0.0);
}

// The gate's gradient dg_t sums q . dq - k . dk and a state dot within its
// chunk (README.md, "Gated levels"): fp32 accumulation of such sums is held to
// 1e-4 (fp64: 1e-11); bf16 snapshots enter it twice, through dq's inter-chunk
// term and through the state after the chunk rebuilt from its snapshot, each a
// rounding of u_bf16.
inline double gate_gradient_level(DType input, bool bf16_snapshots) {
  return (input == DType::f64 ? 1e-11 : 1e-4) + (bf16_snapshots ? 2 * unit_roundoff(DType::bf16) : 0.0);
}

}  // namespace linattn

namespace linattn {

// The tensor-core kernel splits each 16-bit-rounded operand (the scores, and the
// state when o is fp32) into hi + lo parts; what remains is u16^2 relative per
// split operand. With 16-bit o the state is rounded once instead (as fla does):
// that error shares o's level with o's own rounding (bf16: 2.3e-3 measured on
// the H200 against the level's 3.9e-3).
inline double tensor_core_split_level(DType input) {
  const double u = unit_roundoff(input);
  return 2 * u * u;
}

// GLA's gk on tensor cores rounds the decayed queries q exp(b) and keys
// k exp(b_L - b) to the input type once each (cuda/channel_gate_prep.hpp, as
// fla's chunk_gla does): the state reads the keys, o both (its inter-chunk
// term through the state). fp32 inputs keep them in fp32.
inline double tensor_core_channel_level(DType input) { return input == DType::f32 ? 0.0 : unit_roundoff(input); }

// dgk of a backward that read snapshots made by that tensor-core forward: the
// state's rounded keys reach dgk through dq and the state dot, whose terms
// cancel (docs/NUMERICS.md). Measured on the H100 (tests/test_channel_gated_backward.cpp,
// the portable backward on such snapshots in fp32): bf16 up to 1.3e-3, fp16
// up to 1.9e-4, against 1e-4 from the portable forward's snapshots.
inline double channel_snapshot_gradient_level(DType input, bool bf16_snapshots) {
  return gate_gradient_level(input, bf16_snapshots) + tensor_core_channel_level(input);
}

// The tensor-core backward rounds its 16-bit operands once each, as fla's
// backward does: the scores P = scale tril(dO V^T) and A = scale tril(Q K^T),
// the state gradient dh[c] and the state h[c]. Each output reads two of them
// (dq: P and h; dk: P and dh; dv: A and dh), each a relative error of at most
// u of the input type.
inline double tensor_core_backward_level(DType input) { return 2 * unit_roundoff(input); }

// GLA's gk on the tensor-core backward (cuda/channel_gate_gradient.hpp): the
// reverse walk reads the decayed queries and dv the decayed keys, each rounded
// to the input type once as the forward rounds them (tensor_core_channel_level),
// on top of the operand roundings of tensor_core_backward_level; the products
// that each channel decays on its own are taken in fp32.
inline double tensor_core_channel_backward_level(DType input) {
  return tensor_core_backward_level(input) + tensor_core_channel_level(input);
}

// dg on the tensor-core backward: its terms q . dq and k . dk carry dq's and
// dk's operand roundings (tensor_core_backward_level each), so twice that on
// top of the long sum's level.
inline double tensor_core_gate_gradient_level(DType input, bool bf16_snapshots) {
  return gate_gradient_level(input, bf16_snapshots) + 2 * tensor_core_backward_level(input);
}

// dg on tensor cores measured against the magnitudes of its terms (docs/NUMERICS.md):
// dq's and dk's level, plus, with bf16 snapshots, the two roundings of the state that
// gate_gradient_level allows (through dq's inter-chunk term and the state dot).
inline double tensor_core_gate_terms_level(DType input, DType stored, bool bf16_snapshots) {
  return stored_level(input, stored) + tensor_core_backward_level(input) +
         (bf16_snapshots ? 2 * unit_roundoff(DType::bf16) : 0.0);
}

// dgk on the tensor-core backward: the snapshots' rounded keys
// (channel_snapshot_gradient_level) and, as for dg, dq's and dk's levels
// through the terms q . dq and k . dk.
inline double tensor_core_channel_gate_gradient_level(DType input, bool bf16_snapshots) {
  return channel_snapshot_gradient_level(input, bf16_snapshots) + 2 * tensor_core_channel_backward_level(input);
}

}  // namespace linattn
