// The state pass (docs/PARALLEL.md "Context parallel"): the state a forward
// over the tokens of p ends in, initial_state + sum K^T V (with normalize also
// z0 + sum k; gated, the decayed sum of README.md "Gated levels"), without q,
// o or h. Context parallel runs it on the tokens of the segment before a
// rank's own, to start that rank's forward without waiting for the forward of
// the segment before it.
#pragma once

#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "kernels/forward.hpp"

namespace linattn {

// Which kernel computes it, on this build, for a forward run with `config`:
enum class StatePassKind {
  tensor_core,  // segment sums on tensor cores (plain batches, gated or not): the forward's arithmetic when it splits a sequence
  fused_tiles,  // the fused TeamPolicy kernel's state update alone: its final state, bitwise (no normalize)
  forward,      // no state kernel for this path: the forward itself, q = k, snapshots off (bitwise, full cost)
};
const char* state_pass_kind_name(StatePassKind k);
StatePassKind state_pass_kind(const Problem& p, const ForwardConfig& config, DType input);
// The same rule for a forward that takes tile-product path `path` (choose_forward_path's answer on some
// build): plain batches on tensor cores get the tensor-core kind, gated or not (the gated segment sums,
// cuda/segment_sums.hpp), packed ones the forward.
StatePassKind state_pass_kind_on(GemmPath path, const Problem& p, const ForwardConfig& config);

// The state pass's kernel time as a fraction of a forward's on the same
// tokens with `config` (BENCHMARKS.md "Several ranks"): on tensor cores both
// are bound by memory, so it is their minimum bytes' ratio (core/ledger.hpp:
// k and v against the forward's q, k, v, o and h) times 0.78, measured; the
// fused tiles' 0.25, measured on the CPU; the forward's 1. Context parallel
// cuts the segments by it (parallel/segment_plan.hpp).
double state_pass_cost(StatePassKind k, const Problem& p, const ForwardConfig& config, DType input);

struct StatePassOutput {
  Tensor final_state;  // [N, H, DK, DV] in the accumulation type
  Tensor z_state;      // [N, H, DK]; empty unless config.normalize
  double upload_seconds = 0, kernel_seconds = 0, download_seconds = 0;
  StatePassKind kind = StatePassKind::forward;
};

// k [B, T, H, DK], v [B, T, H, DV]; initial_state, initial_z and the gate
// (config.gate's log-decays of these tokens: g [B, T, H] or g_gamma [H]) as
// run_forward takes them. Checks what run_forward checks (config's path must run here).
StatePassOutput run_state_pass(const Problem& p, const ForwardConfig& config, const Tensor& k, const Tensor& v,
                               const Tensor* initial_state = nullptr, const Tensor* initial_z = nullptr,
                               const Tensor* gate = nullptr);

}  // namespace linattn
