// The host entry point of the kernels: takes host tensors, runs one variant on
// Kokkos' default execution space, returns host tensors and timings. The
// element types are chosen here, once, and dispatched to a template
// instantiation.
#pragma once

#include "core/dtype.hpp"
#include "core/gate.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "core/tensor_span.hpp"
#include "core/variant.hpp"
#include "kernels/path_choice.hpp"

#include <cstdint>
#include <string>

namespace linattn {

enum class SnapshotMode {
  accumulation,  // h in the accumulation type (fp32; fp64 for fp64 inputs)
  bf16,          // h rounded to bf16 (what fla stores)
  none           // h not returned (materialized still keeps it internally)
};
const char* snapshot_mode_name(SnapshotMode m);
SnapshotMode parse_snapshot_mode(const std::string& s);  // fp32|fp64|acc, bf16, none

struct ForwardConfig {
  Variant variant = Variant::fused;
  GemmPath gemm = GemmPath::automatic;
  bool output_fp32 = false;  // o in fp32 instead of the input type
  SnapshotMode snapshots = SnapshotMode::accumulation;
  std::int64_t block_dv = 0;  // DV block width; 0 chooses from the scratch limit
  int segments = 0;           // tensor-core kernel: N > 1 splits each sequence into N segments, 1 does not, 0 chooses
  int team_size = 0;          // 0: Kokkos::AUTO
  bool poison_outputs = false;  // fill device outputs with NaN first, so that an unwritten element shows
  bool normalize = false;       // fla's normalize=True: o / (scale q . (z0 + cumsum k) + 1e-10), z_state returned
  // Levels 2 and 3 (core/gate.hpp): run_forward then takes the gate's
  // log-decays (g_gamma [H] or g [B, T, H], any float dtype, every value <= 0).
  GateKind gate = GateKind::none;
};

struct ForwardOutput {
  Tensor o, h, final_state;  // h is empty for SnapshotMode::none
  Tensor z_state;            // [N, H, DK] in the accumulation type; empty unless normalize
  double upload_seconds = 0, kernel_seconds = 0, download_seconds = 0;
  std::int64_t block_dv = 0;  // what the scratch plan (or the tensor-core launcher) chose
  int segments = 1;           // segments per sequence the tensor-core kernel walked (1 elsewhere)
  int scratch_level = 0;
  GemmPath gemm = GemmPath::kokkos_kernels;  // the path that ran
};

DType output_dtype(DType input, const ForwardConfig& config);
DType snapshot_dtype(DType input, SnapshotMode mode);  // meaningless for none

// The tile-product path run_variant takes on this build for this problem, or
// why none can: choose_path (path_choice.hpp) over this build's facts.
PathChoice choose_forward_path(const Problem& p, const ForwardConfig& config, DType input);

// The checks of run_forward that need no tensors: the problem, the options,
// and choose_forward_path's refusal (std::invalid_argument saying why).
void check_forward(const Problem& p, const ForwardConfig& config, DType input);

// The checks of the optional initial rows: initial_state [N, H, DK, DV], and
// initial_z [N, H, DK] only with normalize (std::invalid_argument saying why).
void check_initial_rows(const Problem& p, const ForwardConfig& config, const Tensor* initial_state,
                        const Tensor* initial_z);

// The gate's checks: present exactly when `kind` says so, of gate_shape(p,
// kind), every value a log-decay (is_log_decay, core/gate.hpp; std::invalid_argument naming the first
// offending index otherwise). run_forward and run_backward both check with it
// (a gate with normalize is check_forward's refusal).
void check_gate(const Problem& p, GateKind kind, const Tensor* gate);
void check_gate(const Problem& p, GateKind kind, const TensorSpan* gate);

// Validates everything (shapes, dtypes, problem, cu_seqlens) and throws
// std::invalid_argument before any device work when something is wrong.
// initial_state is [N, H, DK, DV] and initial_z [N, H, DK] (N = B for a plain
// batch, the number of sequences for a packed one); initial_z needs normalize;
// gate: the log-decays of config.gate (check_gate).
ForwardOutput run_forward(const Problem& p, const ForwardConfig& config, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor* initial_state = nullptr, const Tensor* initial_z = nullptr,
                          const Tensor* gate = nullptr);

}  // namespace linattn
