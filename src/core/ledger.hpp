// The FLOP and byte ledger (the cost model linattn was specified with): what each forward form
// computes and the minimum data it must move. Counts follow that model's
// conventions: a GEMM of m x k by k x n costs 2mkn, intra-chunk products are
// counted as full C x C tiles, and the causal FlashAttention reference is the
// masked half of the N x N score and output products.
#pragma once

#include "core/dtype.hpp"
#include "core/gate.hpp"
#include "core/problem.hpp"
#include "core/variant.hpp"

#include <cstdint>

namespace linattn {

struct FlopCounts {
  double state_sequential = 0;  // sum_c K_c^T V_c once per chunk: 2 T DK DV          (seed 6.4.2 "sequence out of grid")
  double state_recompute = 0;   // every chunk rebuilds its prefix: sum_c 2 C_prev DK DV (seed 6.3 "step 1")
  double readout = 0;           // Q_c S_c^prev: 2 T DK DV
  double intra = 0;             // tril(Q_c K_c^T) V_c on full C x C tiles: 2 T C (DK + DV)
  double ideal = 0;             // state_sequential + readout + intra = 4 T DK DV + 2 T C (DK + DV)
  double causal_flash_attention = 0;  // T^2 (DK + DV), = 2 N^2 D for DK = DV
  double redundancy = 0;        // state_recompute / state_sequential = (NC - 1) / 2 for full chunks
  double recurrent = 0;         // token by token: 2 T DK DV (update) + 2 T DK DV (readout) = 4 T DK DV
};

// All counts cover the whole problem (summed over B and H; for a packed
// variable-length batch, over its sequences: chunks never cross a sequence
// boundary, so the recompute prefix and the chunk count are per sequence).
FlopCounts count_flops(const Problem& p);

// FLOPs a variant performs (fused and materialized: ideal; recompute: its
// redundant prefix rebuild + readout + intra; recurrent: 4 T DK DV per head).
double variant_flops(const Problem& p, Variant v);

// FLOPs of the chunked reverse scan of the backward (README.md "The backward"),
// in the same conventions: per chunk the four state-sized products dO h^T,
// V dS^T, K dS and Q^T dO (8 T DK DV) and five C x C tile products, dO V^T,
// its product with K and Q, Q K^T and its product with dO (2 T C (3 DK + 2 DV));
// recompute_h adds the forward's state pass (2 T DK DV).
double backward_flops(const Problem& p, bool recompute_h);

// The decay gate's extra work in the chunked forward (levels 2 and 3, README.md
// "Gated levels"), beside the ideal forward's FLOPs: per token and head its
// score row's C decays (full C x C tiles, as intra counts), its output row
// (DV) and key row (DK) scaled, and per chunk the state (DK DV): multiplies;
// C + 2 exponentials per token (its score row's exp(b_i - b_j), exp(b_i) and
// exp(b_L - b_i)) and the cumulative sum (one addition); the gate read once in
// fp32: g [B, T, H] or g_gamma [H]. Per key channel (gk [B, T, H, DK]) every
// factor is taken per channel: per token and head C x DK score factors, Q's and
// K's rows (2 DK), per chunk the state; C DK + 2 DK exponentials per token
// (the devices' form: one per score and channel) and DK per chunk; DK additions.
// Zero for GateKind::none.
struct GateCounts {
  double multiplies = 0, exponentials = 0, additions = 0, bytes = 0;
};
GateCounts count_gate(const Problem& p, GateKind kind);

struct ByteCounts {
  double q = 0, k = 0, v = 0, initial_state = 0, gate = 0;  // read once
  double o = 0, h = 0, final_state = 0;                     // written once
  double total() const { return q + k + v + initial_state + gate + o + h + final_state; }
};

// Minimum bytes moved: inputs read once, outputs written once. snapshot_dtype
// may be null when snapshots are not stored. States count once per sequence
// and h once per chunk of each sequence (varlen: total_chunks). The gate's
// log-decays are fp32 (docs/HDF5.md): gk is as many values as q.
ByteCounts count_bytes(const Problem& p, DType input, DType output, const DType* snapshot_dtype,
                       bool has_initial_state, GateKind gate = GateKind::none);

}  // namespace linattn
