// The host entry point of the backward (README.md "The backward"): takes the
// forward's inputs, its snapshots h (or recomputes them), the output gradient
// do and the final-state gradient dht, runs the reverse chunk scan on Kokkos'
// default execution space, and returns dq, dk, dv and dh0 with timings.
#pragma once

#include "core/dtype.hpp"
#include "core/gate.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "core/tensor_span.hpp"
#include "kernels/path_choice.hpp"

namespace linattn {

struct BackwardConfig {
  GemmPath gemm = GemmPath::automatic;  // auto: hosttile on host backends, kokkoskernels elsewhere
  bool output_fp32 = false;             // dq, dk, dv in fp32 instead of the input type
  bool recompute_h = false;             // recompute the snapshots (fp32) instead of reading them
  int team_size = 0;                    // 0: Kokkos::AUTO
  bool poison_outputs = false;          // NaN-fill the device outputs first, so that an unwritten element shows
  GateKind gate = GateKind::none;       // levels 2 and 3: run_backward then takes the forward's log-decays
};

struct BackwardOutput {
  Tensor dq, dk, dv;  // [B, T, H, DK|DV] in the input type (or fp32)
  Tensor dh0;         // [N, H, DK, DV] in the accumulation type
  Tensor dg;          // gated: dL/dg_t [B, T, H] (g, g_gamma) or dL/dgk_t [B, T, H, DK] (gk) in the accumulation
                      // type; empty for level 1
  Tensor dg_gamma;    // per-head gate: [H], the sum of dg over each head's tokens (in fp64, then rounded)
  double upload_seconds = 0, kernel_seconds = 0, download_seconds = 0;
  GemmPath gemm = GemmPath::kokkos_kernels;  // the path that ran
};

// choose_backward_path (path_choice.hpp) with the facts of this build, for
// problem p with `input` inputs; p null: before any case is known (a batch's
// first check), only what holds for every case is decided.
PathChoice choose_backward_path_here(const BackwardConfig& config, const Problem* p = nullptr,
                                     DType input = DType::f32);

// Checks everything before any device work (std::invalid_argument saying
// why): the problem, the path, the shapes and dtypes. h is the forward's
// snapshots [B or 1, NT or chunks, H, DK, DV] (bf16 or the accumulation type;
// may be null with recompute_h, which reads initial_state instead: h[0] is the
// initial state otherwise); d_o [B, T, H, DV] in the input type; dht
// [N, H, DK, DV] or null (zero); initial_state [N, H, DK, DV] or null;
// gate, with config.gate, the forward's g_gamma [H], g [B, T, H] or gk
// [B, T, H, DK] (any float dtype, every value a finite log-decay <= 0), else null. dg needs nothing
// more for a window of a longer case (its sums stay within each chunk:
// README.md "Gated levels"): dht, the gradient of the state after the window,
// carries what comes after it.
BackwardOutput run_backward(const Problem& p, const BackwardConfig& config, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor* h, const Tensor* initial_state, const Tensor& d_o,
                            const Tensor* dht, const Tensor* gate = nullptr);

// The same inputs as spans over memory the caller holds (the streamed
// backward's page-locked read slots: pipeline/streamed_backward.hpp), read
// where they are; an empty span stands for a null pointer above.
struct BackwardSpans {
  TensorSpan q, k, v, d_o;
  TensorSpan h, initial_state, dht, gate;
};
// Where the kernels' dq, dk, dv and a gate's dg go (the shapes and dtypes of
// BackwardOutput's; dg empty without a gate), allocated by the caller.
struct BackwardTargets {
  TensorSpan dq, dk, dv, dg;
};
// run_backward on spans. With `into`, dq, dk, dv and dg are written there and
// stay empty in the result (dh0 and dg_gamma are returned as always).
BackwardOutput run_backward(const Problem& p, const BackwardConfig& config, const BackwardSpans& in,
                            const BackwardTargets* into = nullptr);

}  // namespace linattn
