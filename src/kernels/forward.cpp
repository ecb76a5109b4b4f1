#include "kernels/forward.hpp"

#include "kernels/forward_typed.hpp"

#include <stdexcept>

namespace linattn {

const char* snapshot_mode_name(SnapshotMode m) {
  switch (m) {
    case SnapshotMode::accumulation: return "acc";
    case SnapshotMode::bf16: return "bf16";
    case SnapshotMode::none: return "none";
  }
  return "?";
}

SnapshotMode parse_snapshot_mode(const std::string& s) {
  if (s == "fp32" || s == "fp64" || s == "acc") return SnapshotMode::accumulation;
  if (s == "bf16") return SnapshotMode::bf16;
  if (s == "none") return SnapshotMode::none;
  throw std::invalid_argument("unknown snapshot mode '" + s + "' (expected fp32, bf16 or none)");
}

DType output_dtype(DType input, const ForwardConfig& config) { return config.output_fp32 ? DType::f32 : input; }

DType snapshot_dtype(DType input, SnapshotMode mode) {
  return mode == SnapshotMode::bf16 ? DType::bf16 : accumulation_dtype(input);
}

namespace {

template <class In, class Out>
ForwardOutput with_snapshot_type(const Problem& p, const ForwardConfig& c, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor* s0, const Tensor* z0, const Tensor* gate) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType od = output_dtype(q.dtype, c), sd = snapshot_dtype(q.dtype, c.snapshots);
  if (c.snapshots == SnapshotMode::bf16) return run_forward_typed<In, Out, bf16_t>(p, c, q, k, v, s0, z0, gate, od, sd);
  return run_forward_typed<In, Out, Acc>(p, c, q, k, v, s0, z0, gate, od, sd);
}

template <class In>
ForwardOutput with_output_type(const Problem& p, const ForwardConfig& c, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor* s0, const Tensor* z0, const Tensor* gate) {
  if (c.output_fp32) return with_snapshot_type<In, float>(p, c, q, k, v, s0, z0, gate);
  return with_snapshot_type<In, In>(p, c, q, k, v, s0, z0, gate);
}

}  // namespace

PathChoice choose_forward_path(const Problem& p, const ForwardConfig& config, DType input) {
  switch (input) {
    case DType::f16: return choose_path_here<fp16_t>(p, config);
    case DType::bf16: return choose_path_here<bf16_t>(p, config);
    case DType::f32: return choose_path_here<float>(p, config);
    case DType::f64: return choose_path_here<double>(p, config);
  }
  throw std::invalid_argument("unsupported dtype");
}

void check_forward(const Problem& p, const ForwardConfig& config, DType input) {
  validate(p);
  if (config.block_dv < 0) throw std::invalid_argument("block_dv must be >= 0");
  if (config.segments < 0 || config.segments > 65535) throw std::invalid_argument("segments must be in 0..65535");
  if (config.normalize && config.gate != GateKind::none)
    throw std::invalid_argument(std::string("normalize with a gate ('") + gate_dataset_name(config.gate) +
                                "') is refused: flash-linear-attention has no such mode");
  const PathChoice choice = choose_forward_path(p, config, input);
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);
}

void check_initial_rows(const Problem& p, const ForwardConfig& config, const Tensor* initial_state,
                        const Tensor* initial_z) {
  if (initial_state) require_shape(*initial_state, p.state_shape(), "initial_state");
  if (initial_z) {
    if (!config.normalize) throw std::invalid_argument("an initial z_state is only used with normalize");
    require_shape(*initial_z, p.z_shape(), "z_state (initial)");
  }
}

void check_gate(const Problem& p, GateKind kind, const Tensor* gate) {
  const TensorSpan span = gate ? TensorSpan(*gate) : TensorSpan();
  check_gate(p, kind, gate ? &span : nullptr);
}

void check_gate(const Problem& p, GateKind kind, const TensorSpan* gate) {
  if (kind == GateKind::none) {
    if (gate) throw std::invalid_argument("a gate tensor was given, but the configuration has no gate");
    return;
  }
  const char* name = gate_dataset_name(kind);
  if (!gate) throw std::invalid_argument(std::string("the gate '") + name + "' is missing");
  require_shape(*gate, gate_shape(p, kind), name);
  // Scanned where it lies (every window of a streamed backward checks its slice):
  // widening a gk window to doubles cost a copy of twice its bytes.
  const std::int64_t n = gate->numel();
  const std::int64_t bad = gate->dtype == DType::f32   ? first_bad_log_decay(gate->data<const float>(), n)
                           : gate->dtype == DType::f64 ? first_bad_log_decay(gate->data<const double>(), n)
                                                       : first_bad_log_decay(gate->to_double());
  if (bad >= 0)
    throw std::invalid_argument(std::string("gate '") + name + "' element " + std::to_string(bad) + " is " +
                                std::to_string(element_as_double(gate->dtype, gate->bytes, bad)) +
                                ": log-decays must be finite, <= 0 and >= -1e36");
}

ForwardOutput run_forward(const Problem& p, const ForwardConfig& config, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor* initial_state, const Tensor* initial_z, const Tensor* gate) {
  check_forward(p, config, q.dtype);
  require_shape(q, p.qk_shape(), "q");
  require_shape(k, p.qk_shape(), "k");
  require_shape(v, p.v_shape(), "v");
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    throw std::invalid_argument(std::string("q, k and v must share one dtype, got ") + dtype_name(q.dtype) + ", " +
                                dtype_name(k.dtype) + ", " + dtype_name(v.dtype));
  check_initial_rows(p, config, initial_state, initial_z);
  check_gate(p, config.gate, gate);
  const std::int64_t chunks = p.h_shape()[0] * p.total_chunks();
  if (p.H * chunks > std::numeric_limits<int>::max() / 2 || p.T > std::numeric_limits<int>::max() / 2)
    throw std::invalid_argument("problem too large for one launch (H * chunks exceeds the league size limit)");
  switch (q.dtype) {
    case DType::f16: return with_output_type<fp16_t>(p, config, q, k, v, initial_state, initial_z, gate);
    case DType::bf16: return with_output_type<bf16_t>(p, config, q, k, v, initial_state, initial_z, gate);
    case DType::f32: return with_output_type<float>(p, config, q, k, v, initial_state, initial_z, gate);
    case DType::f64: return with_output_type<double>(p, config, q, k, v, initial_state, initial_z, gate);
  }
  throw std::invalid_argument("unsupported dtype");
}

}  // namespace linattn
