#include "app/verify_gradients.hpp"

#include "io/recorded_paths.hpp"
#include "app/report.hpp"
#include "app/text_table.hpp"
#include "app/verify_progress.hpp"
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "io/file_error.hpp"
#include "io/grad_input_file.hpp"
#include "io/grad_output_file.hpp"
#include "io/hdf5_file.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "kernels/path_choice.hpp"
#include "reference/backward.hpp"

#include <ostream>

namespace linattn {
namespace {

// Whether the forward output the backward read was made on tensor cores (its
// gemm_path attribute); false when it can no longer be found.
bool forward_on_tensor_cores(const GradRecord& gr, const std::string& path) {
  try {
    const std::string forward =
        resolve_recorded_path(path, {gr.forward_file, gr.forward_file_relative}, "forward_file");
    const hdf5::File f = hdf5::open_read_only(forward);
    return read_run_record(f.get(), forward).gemm_path == gemm_path_name(GemmPath::tensor_core);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

int verify_grad_output(const std::string& path, const std::string& input_override, const std::string& grad_override,
                       std::ostream& out) {
  const GradOutputData gd = read_grad_output_file(path);
  const GradRecord& gr = gd.record;
  const RunRecord& rec = gr.run;
  // As recorded, found from the output's folder first (recorded_paths.hpp), or as given.
  if (!input_override.empty()) refuse_output_as_input(path, input_override, "--input");
  if (!grad_override.empty()) refuse_output_as_input(path, grad_override, "--grad");
  const std::string input = input_override.empty()
                                ? resolve_recorded_path(path, {rec.input_file, rec.input_file_relative}, "input_file")
                                : input_override;
  const std::string grad = grad_override.empty()
                               ? resolve_recorded_path(path, {gr.grad_file, gr.grad_file_relative}, "grad_file")
                               : grad_override;
  const std::string group = rec.input_group == "/" ? "" : rec.input_group;
  // The reference runs on the values as stored, whatever they are.
  const CaseData in = read_case(input, group, ReadOptions{true});
  check_recorded_gate(path, rec.gate, input, group, in.gate);
  const DType dtype = in.q.dtype;
  if (rec.input_dtype != dtype_name(dtype))
    throw FileError(input, dataset_path(group, "q"),
                    std::string("dtype ") + dtype_name(dtype) + ", but " + path + " was made from " + rec.input_dtype +
                        " inputs (wrong --input?)");
  const bool has_s0 = !in.initial_state.empty();
  const Problem p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, rec.chunk_size, rec.scale,
                                        has_s0 ? &in.initial_state.shape : nullptr, in.cu_seqlens);
  // The gate's gradient: dg_gamma [H], dg [B, T, H] or dgk [B, T, H, DK], the gate's shape.
  const bool per_head = in.gate == GateKind::per_head, per_channel = in.gate == GateKind::per_channel;
  const Tensor& dg_out = per_head ? gd.dg_gamma : per_channel ? gd.dgk : gd.dg;
  const std::string dg_name = gate_gradient_name(in.gate);
  const std::vector<std::int64_t> dg_shape = gate_shape(p, in.gate);
  if (in.gate != GateKind::none && dg_out.shape != dg_shape)
    throw FileError(path, dg_name,
                    dg_out.empty() ? std::string("missing (the case is gated)")
                                   : "shape " + shape_string(dg_out.shape) + ", expected " + shape_string(dg_shape));
  if (rec.num_sequences != 0 && rec.num_sequences != p.num_sequences())
    throw FileError(path, "attribute 'num_sequences' = " + std::to_string(rec.num_sequences) +
                              ", but the input case holds " + std::to_string(p.num_sequences()) +
                              " sequences (wrong --input?)");
  const std::pair<const char*, const Tensor*> outputs[] = {
      {"dq", &gd.dq}, {"dk", &gd.dk}, {"dv", &gd.dv}, {"dh0", &gd.dh0}};
  const std::vector<std::int64_t> shapes[] = {p.qk_shape(), p.qk_shape(), p.v_shape(), p.state_shape()};
  for (int i = 0; i < 4; ++i)
    if (outputs[i].second->shape != shapes[i])
      throw FileError(path, outputs[i].first, "shape " + shape_string(outputs[i].second->shape) +
                                                  ", but the input case implies " + shape_string(shapes[i]));
  const GradData g = read_grad_case(grad, gr.grad_group, p, dtype, ReadOptions{true});

  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                            s0 = in.initial_state.to_double(), d_o = g.d_o.to_double(), dht = g.dht.to_double();
  const reference::GatedGradients ref = with_progress(
      path, p, dtype, in.q.numel() + in.k.numel() + in.v.numel() + g.d_o.numel(), [&](const PieceDone& done) {
        return backward_reference_by_head(p, {q, k, v, has_s0 ? &s0 : nullptr},
                                          {d_o, g.dht.empty() ? nullptr : &dht}, done,
                                          reference::Gate{in.gate, in.log_decay.to_double()});
      });

  // dq reads the snapshots: bf16 ones add one bf16 rounding of the state, as
  // they do to o in the materialized forward. The tensor-core backward rounds
  // its 16-bit operands once each (accuracy_levels.hpp).
  const bool bf16_snapshots = !gr.recompute_h && rec.snapshot_dtype == "bf16";
  const bool tensor_cores = rec.gemm_path == gemm_path_name(GemmPath::tensor_core);
  const double operands = !tensor_cores                         ? 0.0
                          : in.gate == GateKind::per_channel ? tensor_core_channel_backward_level(dtype)
                                                             : tensor_core_backward_level(dtype);
  const double levels[] = {output_level(dtype, gd.dq.dtype, bf16_snapshots) + operands,
                           stored_level(dtype, gd.dk.dtype) + operands, stored_level(dtype, gd.dv.dtype) + operands,
                           stored_level(dtype, gd.dh0.dtype) +
                               (tensor_cores && in.gate == GateKind::per_channel ? tensor_core_channel_level(dtype) : 0.0)};
  const std::vector<double>* refs[] = {&ref.dq, &ref.dk, &ref.dv, &ref.dh0};

  out << path << " against " << input << (group.empty() ? "" : ":" + group) << " and " << grad
      << (g.group.empty() ? "" : ":" + g.group) << "  (backward (" << rec.gemm_path << "), chunk " << p.chunk
      << ", scale " << p.scale << ", " << dtype_name(dtype) << " inputs"
      << (p.varlen() ? ", " + std::to_string(p.num_sequences()) + " packed sequences" : "")
      << (gr.recompute_h ? ", snapshots recomputed" : ", " + rec.snapshot_dtype + " snapshots")
      << (g.dht.empty() ? ", no dht" : "")
      << (in.gate != GateKind::none ? std::string(", gate ") + gate_dataset_name(in.gate) : "") << ")";
  std::vector<std::string> external = in.external_data;
  external.insert(external.end(), g.external_data.begin(), g.external_data.end());
  out << external_data_note(external) << "\n";
  TextTable table{{"tensor", "dtype", "rel_L2", "level", "status"}, {false, false, true, true, false}, {}};
  bool ok = true;
  for (int i = 0; i < 4; ++i) {
    const double error = relative_l2(outputs[i].second->to_double(), *refs[i]);
    const bool below = error <= levels[i];  // NaN fails
    ok = ok && below;
    table.rows.push_back({outputs[i].first, dtype_name(outputs[i].second->dtype), scientific(error, 3),
                          scientific(levels[i], 2), below ? "ok" : "ABOVE LEVEL"});
  }
  if (in.gate != GateKind::none) {
    // gk's snapshots from the tensor-core forward hold its rounded keys; recomputed ones may
    // start their windows from that forward's states (accuracy_levels.hpp).
    const bool channel_snapshots = in.gate == GateKind::per_channel && (gr.recompute_h || forward_on_tensor_cores(gr, path));
    const double level = tensor_cores && in.gate == GateKind::per_channel
                             ? tensor_core_channel_gate_gradient_level(dtype, bf16_snapshots)
                         : tensor_cores      ? tensor_core_gate_gradient_level(dtype, bf16_snapshots)
                         : channel_snapshots ? channel_snapshot_gradient_level(dtype, bf16_snapshots)
                                             : gate_gradient_level(dtype, bf16_snapshots);
    const double error = relative_l2(dg_out.to_double(), per_head ? ref.dg_gamma : ref.dg);  // dgk: in ref.dg
    const bool below = error <= level;
    ok = ok && below;
    table.rows.push_back({dg_name, dtype_name(dg_out.dtype), scientific(error, 3), scientific(level, 2),
                          below ? "ok" : "ABOVE LEVEL"});
  }
  out << table.str() << (ok ? "verify: ok" : "verify: FAILED (error above the expected level)") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace linattn
