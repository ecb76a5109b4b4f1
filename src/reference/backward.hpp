// fp64 host references for the backward pass of the linear-attention forward
// (README.md "The math"). Plain loops, no Kokkos, like references.hpp.
//
// With do = dL/do [B, T, H, DV] and dht = dL/dfinal_state [N, H, DK, DV] (null
// means zero), S_t the state after token t (initial state included):
//   dq_t = scale * S_t do_t
//   dk_s = scale * sum_{t >= s} (do_t . v_s) q_t + dht v_s
//   dv_s = scale * sum_{t >= s} (q_t . k_s) do_t + dht^T k_s
//   dh0  = scale * sum_t q_t do_t^T + dht
// (sums within one sequence). Every form returns dq, dk [B, T, H, DK], dv
// [B, T, H, DV] and dh0 [N, H, DK, DV], always filled, also without an initial state.
//
// Only the unnormalized forward is differentiated: in.initial_z is ignored
// and there is no normalize step (fla's normalize=True is not supported).
//
// Every form takes plain and packed (cu_seqlens) batches: a packed batch runs
// as N independent B = 1 problems (backward_per_sequence), sequence n reading
// initial-state row n and dht row n and writing dh0 row n.
#pragma once

#include "reference/references.hpp"

#include <functional>
#include <vector>

namespace linattn::reference {

struct GradInputs {
  const std::vector<double>& d_o;               // [B, T, H, DV]
  const std::vector<double>* dht = nullptr;     // [N, H, DK, DV]
};

struct Gradients {
  std::vector<double> dq, dk, dv, dh0;  // [B, T, H, DK], [B, T, H, DK], [B, T, H, DV], [N, H, DK, DV]
};

// Token by token (the definition): dq in a forward sweep of S, then dk, dv and
// dh0 from the state gradient accumulated in reverse.
Gradients backward_recurrent(const Problem& p, const Inputs& in, const GradInputs& g);

// The chunked reverse scan. dS, the gradient of the state after chunk c, starts
// at dht; for c = last .. 0 (with h[c] the state before chunk c, tril keeping s <= t):
//   dQ_c = scale * (dO_c h[c]^T + tril(dO_c V_c^T) K_c)
//   dK_c = scale * tril(dO_c V_c^T)^T Q_c + V_c dS^T
//   dV_c = scale * tril(Q_c K_c^T)^T dO_c + K_c dS
//   dS  += scale * Q_c^T dO_c     (after the chunk: its own tokens are in the tril terms)
// and dh0 = dS. h, when given, holds the forward's snapshots in its layout ([B,
// NT, ...] or packed [1, total_chunks, ...]) and is read instead of recomputed.
Gradients backward_chunked(const Problem& p, const Inputs& in, const GradInputs& g,
                           const std::vector<double>* h = nullptr);

// A backward form that takes a plain batch; h as for backward_chunked (may be ignored).
using BackwardForm =
    std::function<Gradients(const Problem&, const Inputs&, const GradInputs&, const std::vector<double>* h)>;

// The backward twin of per_sequence: checks the sizes of every tensor given
// (std::invalid_argument naming it), then runs `form` on each sequence of a
// packed batch as its own B = 1 problem (q, k, v, do, initial-state and dht
// rows, and its chunks of h sliced out) and assembles the gradients in the
// packed layout. A plain batch goes to `form` whole.
Gradients backward_per_sequence(const Problem& p, const Inputs& in, const GradInputs& g, const std::vector<double>* h,
                                const BackwardForm& form);

// The ground truth of a backward run: the chunked form per sequence.
Gradients backward(const Problem& p, const Inputs& in, const GradInputs& g);

namespace detail {

// Zero-filled gradients with a plain batch's shapes (dh0 has N = B rows).
inline Gradients zero_gradients(const Problem& p) {
  Gradients d;
  d.dq.assign(static_cast<std::size_t>(p.B * p.T * p.H * p.DK), 0.0);
  d.dk.assign(d.dq.size(), 0.0);
  d.dv.assign(static_cast<std::size_t>(p.B * p.T * p.H * p.DV), 0.0);
  d.dh0.assign(static_cast<std::size_t>(p.B * p.H * p.DK * p.DV), 0.0);
  return d;
}

}  // namespace detail

}  // namespace linattn::reference
