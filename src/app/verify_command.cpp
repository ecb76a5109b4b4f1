// linattn verify OUTPUT.h5 [--input INPUT.h5] [--per-chunk]: recompute the fp64
// reference for the case an output file was made from and compare.
#include "app/command.hpp"
#include "app/text_table.hpp"
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "io/file_error.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "reference/references.hpp"

#include <iostream>
#include <memory>

namespace linattn {
namespace {

// The elements of o [B, T, H, DV] (or v-shaped data) in chunk c.
std::vector<double> o_chunk(const std::vector<double>& o, const Problem& p, std::int64_t c) {
  const std::int64_t row = p.H * p.DV;  // one token
  std::vector<double> out;
  for (std::int64_t b = 0; b < p.B; ++b) {
    const auto first = o.begin() + (b * p.T + c * p.chunk) * row;
    out.insert(out.end(), first, first + p.chunk_length(c) * row);
  }
  return out;
}

// h[:, c] of h [B, NT, H, DK, DV].
std::vector<double> h_chunk(const std::vector<double>& h, const Problem& p, std::int64_t c) {
  const std::int64_t state = p.H * p.DK * p.DV;
  std::vector<double> out;
  for (std::int64_t b = 0; b < p.B; ++b) {
    const auto first = h.begin() + (b * p.num_chunks() + c) * state;
    out.insert(out.end(), first, first + state);
  }
  return out;
}

void check_shape(const std::string& file, const char* name, const Tensor& t, const std::vector<std::int64_t>& expected) {
  if (t.shape != expected)
    throw FileError(file, name, "shape " + shape_string(t.shape) + ", but the input case implies " +
                                    shape_string(expected));
}

}  // namespace

Command add_verify_command(CLI::App& parent) {
  struct Options {
    std::string output, input;
    bool per_chunk = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "verify",
      "Recompute the fp64 reference for an output file's input case and print the relative L2 error of o, h "
      "and final_state against the expected level (accumulation + one rounding to the stored dtype). "
      "Exit code 1 if any error is above its level.");
  cmd->add_option("output", o->output, "Output file written by linattn run")->required();
  cmd->add_option("--input", o->input, "The input file (default: the input_file attribute of OUTPUT)");
  cmd->add_flag("--per-chunk", o->per_chunk, "Also print the error of o and h per chunk index (checked too)");

  return {cmd, [o] {
            const OutputData out = read_output_file(o->output);
            const RunRecord& rec = out.record;
            const std::string input = o->input.empty() ? rec.input_file : o->input;
            const std::string group = rec.input_group == "/" ? "" : rec.input_group;
            // The reference runs on the values as stored, whatever they are.
            const CaseData in = read_case(input, group, ReadOptions{true});
            if (rec.input_dtype != dtype_name(in.q.dtype))
              throw FileError(input, dataset_path(group, "q"),
                              std::string("dtype ") + dtype_name(in.q.dtype) + ", but " + o->output + " was made from " +
                                  rec.input_dtype + " inputs (wrong --input?)");
            const bool has_s0 = !in.initial_state.empty();
            const Problem p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, rec.chunk_size, rec.scale,
                                                  has_s0 ? &in.initial_state.shape : nullptr);
            const bool has_h = !out.h.empty();
            check_shape(o->output, "o", out.o, p.o_shape());
            if (has_h) check_shape(o->output, "h", out.h, p.h_shape());
            check_shape(o->output, "final_state", out.final_state, p.state_shape());

            const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                                      s0 = in.initial_state.to_double();
            const reference::Result ref = reference::chunked(p, {q, k, v, has_s0 ? &s0 : nullptr});

            const DType input_dtype = in.q.dtype;
            // The tensor-core path leaves a hi/lo split residue in o (core/accuracy_levels.hpp).
            const double o_level = output_level(input_dtype, out.o.dtype,
                                                rec.variant == "materialized" && rec.snapshot_dtype == "bf16") +
                                   (rec.gemm_path == "tensorcore" ? tensor_core_split_level(input_dtype) : 0.0);
            const double h_level = has_h ? stored_level(input_dtype, out.h.dtype) : 0.0;
            const double s_level = stored_level(input_dtype, out.final_state.dtype);
            bool ok = true;
            auto pass = [&ok](double error, double level) {
              const bool below = error <= level;  // NaN fails
              ok = ok && below;
              return below;
            };
            auto status = [&pass](double error, double level) { return pass(error, level) ? "ok" : "ABOVE LEVEL"; };

            std::cout << o->output << " against " << input << (group.empty() ? "" : ":" + group) << "  ("
                      << rec.variant << " (" << rec.gemm_path << "), chunk " << p.chunk << ", scale " << p.scale << ", "
                      << dtype_name(input_dtype) << " inputs)\n";
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
            std::cout << table.str();

            if (o->per_chunk) {
              TextTable chunks{{"chunk", "tokens", "o rel_L2", "h rel_L2", "status"},
                               {true, true, true, true, false}, {}};
              for (std::int64_t c = 0; c < p.num_chunks(); ++c) {
                const double eo_c = relative_l2(o_chunk(od, p, c), o_chunk(ref.o, p, c));
                const double eh_c = has_h ? relative_l2(h_chunk(hd, p, c), h_chunk(ref.h, p, c)) : 0.0;
                const bool below = pass(eo_c, o_level) & pass(eh_c, h_level);  // & : count both
                chunks.rows.push_back({std::to_string(c), std::to_string(p.chunk_length(c)), scientific(eo_c, 2),
                                       has_h ? scientific(eh_c, 2) : "-", below ? "ok" : "ABOVE LEVEL"});
              }
              std::cout << '\n' << chunks.str();
            }
            std::cout << (ok ? "verify: ok" : "verify: FAILED (error above the expected level)") << std::endl;
            return ok ? 0 : 1;
          }};
}

}  // namespace linattn
