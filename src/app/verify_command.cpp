// linattn verify OUTPUT.h5 [--input INPUT.h5] [--per-chunk]: recompute the fp64
// reference for the case an output file was made from and compare. A
// gradient output of `linattn backward` (it holds dq) goes to verify_gradients.
#include "app/chunk_errors.hpp"
#include "app/command.hpp"
#include "io/recorded_paths.hpp"
#include "app/reference_by_head.hpp"
#include "app/report.hpp"
#include "app/text_table.hpp"
#include "app/verify_gradients.hpp"
#include "app/verify_progress.hpp"
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "io/dataset_storage.hpp"
#include "io/file_error.hpp"
#include "io/grad_output_file.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "reference/references.hpp"

#include <iostream>
#include <memory>

namespace linattn {
namespace {

void check_shape(const std::string& file, const char* name, const Tensor& t, const std::vector<std::int64_t>& expected) {
  if (t.shape != expected)
    throw FileError(file, name, "shape " + shape_string(t.shape) + ", but the input case implies " +
                                    shape_string(expected));
}

}  // namespace

Command add_verify_command(CLI::App& parent) {
  struct Options {
    std::string output, input, grad;
    bool per_chunk = false, allow_external_data = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "verify",
      "Recompute the fp64 reference for an output file's input case (per packed sequence when it has "
      "cu_seqlens, normalized when the run was) and print the relative L2 error of o, h, final_state (and "
      "z_state) against the expected level (accumulation + one rounding to the stored dtype). "
      "A gradient output of linattn backward (OUTDIR/<stem>.grad.h5) is checked the same way: the fp64 reference "
      "backward on its input case and gradient input, dq, dk, dv and dh0. "
      "Exit code 1 if any error is above its level.");
  cmd->add_option("output", o->output, "Output file written by linattn run or linattn backward")->required();
  cmd->add_option("--input", o->input, "The input file (default: the input_file attribute of OUTPUT)");
  cmd->add_option("--grad", o->grad,
                  "For a gradient output: the gradient input (default: its grad_file attribute)");
  cmd->add_flag("--per-chunk", o->per_chunk, "Also print the error of o and h per chunk index (checked too)");
  cmd->add_flag("--allow-external-data", o->allow_external_data,
                "Read datasets whose data are in other files (external raw storage, virtual datasets), looking those "
                "files up in the folder of the file that names them only (docs/HDF5.md, \"Data outside the "
                "file\"); refused by default");

  return {cmd, [o] {
            hdf5::set_external_data_allowed(o->allow_external_data);
            if (is_grad_output_file(o->output)) {
              if (o->per_chunk)
                throw std::invalid_argument("--per-chunk applies to forward outputs; " + o->output +
                                            " is a gradient output of linattn backward");
              return verify_grad_output(o->output, o->input, o->grad, std::cout);
            }
            if (!o->grad.empty())
              throw std::invalid_argument("--grad applies to gradient outputs; " + o->output +
                                          " holds no dq (a forward output?)");
            const OutputData out = read_output_file(o->output);
            const RunRecord& rec = out.record;
            // The input as recorded, found from the output's folder first (recorded_paths.hpp), or as given.
            if (!o->input.empty()) refuse_output_as_input(o->output, o->input, "--input");
            const std::string input =
                o->input.empty()
                    ? resolve_recorded_path(o->output, {rec.input_file, rec.input_file_relative}, "input_file")
                    : o->input;
            const std::string group = rec.input_group == "/" ? "" : rec.input_group;
            // The reference runs on the values as stored, whatever they are.
            const CaseData in = read_case(input, group, ReadOptions{true});
            if (rec.input_dtype != dtype_name(in.q.dtype))
              throw FileError(input, dataset_path(group, "q"),
                              std::string("dtype ") + dtype_name(in.q.dtype) + ", but " + o->output + " was made from " +
                                  rec.input_dtype + " inputs (wrong --input?)");
            check_recorded_gate(o->output, rec.gate, input, group, in.gate);
            const bool has_s0 = !in.initial_state.empty(), has_z0 = rec.normalize && !in.initial_z.empty();
            const Problem p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, rec.chunk_size, rec.scale,
                                                  has_s0 ? &in.initial_state.shape : nullptr, in.cu_seqlens);
            if (rec.num_sequences != 0 && rec.num_sequences != p.num_sequences())
              throw FileError(o->output, "attribute 'num_sequences' = " + std::to_string(rec.num_sequences) +
                                             ", but the input case holds " + std::to_string(p.num_sequences()) +
                                             " sequences (wrong --input?)");
            const bool has_h = !out.h.empty();
            check_shape(o->output, "o", out.o, p.o_shape());
            if (has_h) check_shape(o->output, "h", out.h, p.h_shape());
            check_shape(o->output, "final_state", out.final_state, p.state_shape());
            if (rec.normalize) check_shape(o->output, "z_state", out.z_state, p.z_shape());

            const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                                      s0 = in.initial_state.to_double(), z0 = in.initial_z.to_double();
            // The chunked form per sequence and head, then normalization when the run normalized.
            const std::int64_t elements = in.q.numel() + in.k.numel() + in.v.numel();
            const reference::Result ref = with_progress(o->output, p, in.q.dtype, elements, [&](const PieceDone& done) {
              return forward_reference_by_head(p, {q, k, v, has_s0 ? &s0 : nullptr, has_z0 ? &z0 : nullptr},
                                               rec.normalize, done, reference::Gate{in.gate, in.log_decay.to_double()});
            });

            const DType input_dtype = in.q.dtype;
            // The tensor-core path leaves a hi/lo split residue in o, and with gk one
            // rounding of its decayed q and k each (core/accuracy_levels.hpp).
            const bool tensor_cores = rec.gemm_path == "tensorcore";
            const double channel =
                tensor_cores && in.gate == GateKind::per_channel ? tensor_core_channel_level(input_dtype) : 0.0;
            const double o_level = output_level(input_dtype, out.o.dtype,
                                                rec.variant == "materialized" && rec.snapshot_dtype == "bf16") +
                                   (tensor_cores ? tensor_core_split_level(input_dtype) : 0.0) + 2 * channel;
            const double h_level = has_h ? stored_level(input_dtype, out.h.dtype) + channel : 0.0;
            const double s_level = stored_level(input_dtype, out.final_state.dtype) + channel;
            bool ok = true;
            auto pass = [&ok](double error, double level) {
              const bool below = error <= level;  // NaN fails
              ok = ok && below;
              return below;
            };
            auto status = [&pass](double error, double level) { return pass(error, level) ? "ok" : "ABOVE LEVEL"; };

            std::cout << o->output << " against " << input << (group.empty() ? "" : ":" + group) << "  ("
                      << rec.variant << " (" << rec.gemm_path << "), chunk " << p.chunk << ", scale " << p.scale << ", "
                      << dtype_name(input_dtype) << " inputs"
                      << (p.varlen() ? ", " + std::to_string(p.num_sequences()) + " packed sequences" : "")
                      << (rec.normalize ? ", normalized" : "")
                      << (in.gate != GateKind::none ? std::string(", gate ") + gate_dataset_name(in.gate) : "") << ")" << external_data_note(in.external_data) << "\n";
            const std::vector<double> od = out.o.to_double(), hd = out.h.to_double();
            TextTable table{{"tensor", "dtype", "rel_L2", "level", "status"}, {false, false, true, true, false}, {}};
            const double eo = relative_l2(od, ref.o);
            table.rows.push_back({"o", dtype_name(out.o.dtype), scientific(eo, 2), scientific(o_level, 2),
                                  status(eo, o_level)});
            if (has_h) {
              const double eh = relative_l2(hd, ref.h);
              table.rows.push_back({"h", dtype_name(out.h.dtype), scientific(eh, 2), scientific(h_level, 2),
                                    status(eh, h_level)});
            }
            const double es = relative_l2(out.final_state.to_double(), ref.final_state);
            table.rows.push_back({"final_state", dtype_name(out.final_state.dtype), scientific(es, 2),
                                  scientific(s_level, 2), status(es, s_level)});
            if (rec.normalize) {
              const double ez = relative_l2(out.z_state.to_double(), ref.z_state);
              const double z_level = stored_level(input_dtype, out.z_state.dtype);
              table.rows.push_back({"z_state", dtype_name(out.z_state.dtype), scientific(ez, 2), scientific(z_level, 2),
                                    status(ez, z_level)});
            }
            std::cout << table.str();

            if (o->per_chunk) {
              TextTable chunks{{"chunk", "tokens", "o rel_L2", "h rel_L2", "status"},
                               {true, true, true, true, false}, {}};
              const std::vector<ChunkError> errors = chunk_errors(p, od, ref.o, hd, ref.h);
              for (std::size_t c = 0; c < errors.size(); ++c) {
                const ChunkError& e = errors[c];
                const bool below = pass(e.o, o_level) & pass(e.h, h_level);  // & : count both
                chunks.rows.push_back({std::to_string(c), std::to_string(e.tokens), scientific(e.o, 2),
                                       has_h ? scientific(e.h, 2) : "-", below ? "ok" : "ABOVE LEVEL"});
              }
              std::cout << '\n' << chunks.str();
            }
            std::cout << (ok ? "verify: ok" : "verify: FAILED (error above the expected level)") << std::endl;
            return ok ? 0 : 1;
          }};
}

}  // namespace linattn
