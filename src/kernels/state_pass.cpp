#include "kernels/state_pass.hpp"

#include "kernels/forward_typed.hpp"
#include "core/ledger.hpp"
#include "kernels/state_pass_run.hpp"

#include <stdexcept>

namespace linattn {

const char* state_pass_kind_name(StatePassKind k) {
  switch (k) {
    case StatePassKind::tensor_core: return "tensorcore";
    case StatePassKind::fused_tiles: return "fused tiles";
    case StatePassKind::forward: return "forward";
  }
  return "?";
}

StatePassKind state_pass_kind(const Problem& p, const ForwardConfig& config, DType input) {
  const PathChoice choice = choose_forward_path(p, config, input);
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);
  return state_pass_kind_on(choice.path, p, config);
}

StatePassKind state_pass_kind_on(GemmPath path, const Problem& p, const ForwardConfig& config) {
  // Packed batches on tensor cores: the forward (the segment sums walk plain
  // rows only); so does gk (the tensor-core state pass does not run its prep).
  if (path == GemmPath::tensor_core)
    return p.varlen() || channel_gate(config.gate) ? StatePassKind::forward : StatePassKind::tensor_core;
  const bool tiles = path == GemmPath::host_tile || path == GemmPath::kokkos_kernels;
  if (config.variant == Variant::fused && tiles && !config.normalize) return StatePassKind::fused_tiles;
  return StatePassKind::forward;
}

double state_pass_cost(StatePassKind k, const Problem& p, const ForwardConfig& config, DType input) {
  switch (k) {
    case StatePassKind::tensor_core: {
      // Measured on the H200 (bench --state-pass): 0.254 of the forward at 1,1048576,16,128 with bf16 h
      // (bytes 1/3), 0.189 at 1,262144,16,128 with fp32 h (bytes 1/4): 0.76 of the bytes' ratio; 0.84 at
      // 1,524288,16,128.
      const DType snap = snapshot_dtype(input, config.snapshots);
      const ByteCounts forward = count_bytes(p, input, output_dtype(input, config),
                                             config.snapshots == SnapshotMode::none ? nullptr : &snap, false);
      return 0.78 * (forward.k + forward.v) / forward.total();
    }
    case StatePassKind::fused_tiles: return 0.25;  // bench --state-pass on the 2-core CPU: 0.20 to 0.28
    case StatePassKind::forward: return 1.0;
  }
  return 1.0;
}

namespace {

template <class In>
StatePassOutput run_state_kernel(const Problem& p, const ForwardConfig& config, StatePassKind kind, const Tensor& k,
                                 const Tensor& v, const Tensor* initial_state, const Tensor* initial_z,
                                 const Tensor* gate) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType acc_dtype = accumulation_dtype(k.dtype);
  StatePassOutput out;
  out.kind = kind;
  Kokkos::Timer timer;
  StatePassViews<In, Acc> views;
  views.k = input_view<DeviceView4<In>>("linattn::k", k);
  views.v = input_view<DeviceView4<In>>("linattn::v", v);
  if (initial_state) views.initial_state = upload4<Acc>("linattn::initial_state", converted(*initial_state, acc_dtype));
  DeviceView3<Acc> z0, z_state;
  if (initial_z) z0 = upload3<Acc>("linattn::initial_z", converted(*initial_z, acc_dtype));
  if (gate) upload_gate<Acc>(views, config.gate, *gate, acc_dtype);
  out.final_state = Tensor::uninitialized(acc_dtype, p.state_shape());
  views.final_state = output_view<DeviceView4<Acc>>("linattn::final_state", out.final_state);
  if (config.normalize) {
    out.z_state = Tensor::uninitialized(acc_dtype, p.z_shape());
    z_state = output_view<DeviceView3<Acc>>("linattn::z_state", out.z_state);
  }
  if (config.poison_outputs) {
    Kokkos::deep_copy(views.final_state, quiet_nan<Acc>());
    if (config.normalize) Kokkos::deep_copy(z_state, quiet_nan<Acc>());
  }
  Kokkos::fence();
  out.upload_seconds = timer.seconds();

  timer.reset();
  run_state_pass_on(p, config, kind, views, z0, z_state);
  Kokkos::fence();
  out.kernel_seconds = timer.seconds();

  timer.reset();
  output_to(out.final_state, views.final_state);
  if (config.normalize) output_to(out.z_state, z_state);
  out.download_seconds = timer.seconds();
  return out;
}

}  // namespace

StatePassOutput run_state_pass(const Problem& p, const ForwardConfig& config, const Tensor& k, const Tensor& v,
                               const Tensor* initial_state, const Tensor* initial_z, const Tensor* gate) {
  const StatePassKind kind = state_pass_kind(p, config, k.dtype);
  if (kind == StatePassKind::forward) {
    // The state does not depend on q: k stands in for it.
    ForwardConfig c = config;
    c.snapshots = SnapshotMode::none;
    const ForwardOutput f = run_forward(p, c, k, k, v, initial_state, initial_z, gate);
    StatePassOutput out;
    out.final_state = f.final_state;
    out.z_state = f.z_state;
    out.upload_seconds = f.upload_seconds;
    out.kernel_seconds = f.kernel_seconds;
    out.download_seconds = f.download_seconds;
    return out;
  }
  check_forward(p, config, k.dtype);
  require_shape(k, p.qk_shape(), "k");
  require_shape(v, p.v_shape(), "v");
  if (v.dtype != k.dtype) throw std::invalid_argument("k and v must share one dtype");
  check_initial_rows(p, config, initial_state, initial_z);
  check_gate(p, config.gate, gate);
  switch (k.dtype) {
    case DType::f16: return run_state_kernel<fp16_t>(p, config, kind, k, v, initial_state, initial_z, gate);
    case DType::bf16: return run_state_kernel<bf16_t>(p, config, kind, k, v, initial_state, initial_z, gate);
    case DType::f32: return run_state_kernel<float>(p, config, kind, k, v, initial_state, initial_z, gate);
    case DType::f64: return run_state_kernel<double>(p, config, kind, k, v, initial_state, initial_z, gate);
  }
  throw std::invalid_argument("unsupported dtype");
}

}  // namespace linattn
