// linattn generate -o FILE --shape B,T,H,DK,DV --dtype bf16 --seed N: random
// input files for examples and tests; with --grad INPUT.h5, the gradient input
// of `linattn backward` for each case of INPUT.h5 instead.
#include "app/command.hpp"
#include "app/integer_list.hpp"
#include "app/report.hpp"
#include "core/gate.hpp"
#include "core/random_tensor.hpp"
#include "io/file_error.hpp"
#include "io/grad_input_file.hpp"
#include "io/hdf5_file.hpp"
#include "io/input_file.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>

namespace linattn {
namespace {

// "B,T,H,DK,DV" -> Problem; throws std::invalid_argument.
Problem parse_shape(const std::string& text) {
  const std::vector<std::int64_t> dims = parse_integer_list(text, "B,T,H,DK,DV");
  if (dims.size() != 5) throw std::invalid_argument("'" + text + "' is not B,T,H,DK,DV (five integers)");
  Problem p;
  p.B = dims[0]; p.T = dims[1]; p.H = dims[2]; p.DK = dims[3]; p.DV = dims[4];
  validate_shapes(p);
  return p;
}

// "1,63,64,65,300" -> the sequence lengths; throws std::invalid_argument.
std::vector<std::int64_t> parse_lengths(const std::string& text) {
  const std::string expected = "a list of positive sequence lengths";
  const std::vector<std::int64_t> lengths = parse_integer_list(text, expected);
  for (std::int64_t n : lengths)
    if (n <= 0) throw std::invalid_argument("'" + text + "' is not " + expected);
  if (lengths.empty()) throw std::invalid_argument("'" + text + "' names no sequence");
  return lengths;
}

// do and dht for every case of an existing input, in its group layout, from
// the cases' metadata alone (inspect_case: the shapes, the dtype, the
// sequences). Case i draws from derive_seed(seed, i), do from one stream of
// it and dht from another.
int generate_grads(const std::string& input, const std::string& output, std::uint64_t seed, bool compress) {
  std::vector<NamedGrad> grads;
  const std::vector<std::string> groups = list_cases(input);
  {
    const hdf5::File file = hdf5::open_read_only(input);
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const CaseSchema c = inspect_case(file.get(), input, groups[i]);
      const DType dtype = c.q.dtype;
      const std::vector<std::int64_t> dht_shape = {c.num_sequences(), c.q.shape[2], c.q.shape[3], c.v.shape[3]};
      const std::uint64_t case_seed = derive_seed(seed, i);
      grads.push_back({groups[i], random_tensor(dtype, c.v.shape, derive_seed(case_seed, 0)),
                       random_tensor(accumulation_dtype(dtype), dht_shape, derive_seed(case_seed, 1))});
      std::cout << output << ":" << (groups[i].empty() ? "/" : groups[i]) << "  do " << shape_string(c.v.shape) << " "
                << dtype_name(dtype) << "  dht " << shape_string(dht_shape) << " "
                << dtype_name(accumulation_dtype(dtype)) << "  for " << input << '\n';
    }
  }
  write_grad_file(output, grads, hdf5::WriteOptions{compress});
  std::cout << "wrote " << output << " (gradients of " << grads.size() << " case" << (grads.size() > 1 ? "s" : "")
            << " of " << input << ")" << std::endl;
  return 0;
}

// The gate of one case (README.md, "Gated levels"): RetNet's gammas, or log-decays
// uniform in [-strength, 0) (never 0) per head, per token or per token and key channel, drawn from its own stream.
Tensor generate_gate(const Problem& p, GateKind kind, double strength, std::uint64_t seed) {
  if (kind == GateKind::per_head && strength <= 0) return Tensor::from_double(DType::f32, {p.H}, retnet_log_gammas(p.H));
  return random_tensor(DType::f32, gate_shape(p, kind), seed, -(strength > 0 ? strength : 1.0), 0.0);
}

}  // namespace

Command add_generate_command(CLI::App& parent) {
  struct Options {
    std::string output, grad_for;
    std::vector<std::string> shapes, dtypes = {"bf16"};
    std::uint64_t seed = 0;
    std::size_t cases = 0;
    std::string seqlens;
    bool initial_state = false, initial_z = false, positive = false, compress = false, force = false;
    std::string gate;
    double gate_strength = 0;  // 0: the default (RetNet's gammas; g in [-1, 0))
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "generate",
      "Write random inputs (uniform in [-1, 1], or (0, 1) with --positive; never zero, rounded to the dtype) in "
      "groups case0..caseK-1. "
      "--shape and --dtype may be repeated: case i takes the (i mod count)-th of each. "
      "With --grad INPUT.h5 it writes instead the gradient input of linattn backward for every case of INPUT.h5.");
  cmd->add_option("-o,--output", o->output, "Output HDF5 file")->required();
  CLI::Option* shape = cmd->add_option("--shape", o->shapes, "B,T,H,DK,DV (repeatable; required unless --grad)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              parse_shape(s);
              return "";
            } catch (const std::exception& e) {
              return e.what();
            }
          },
          "B,T,H,DK,DV"));
  cmd->add_option("--dtype", o->dtypes, "Element type: fp16, bf16, fp32 or fp64 (repeatable)")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32", "fp64"}))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed (each case derives its own)")->capture_default_str();
  cmd->add_option("--cases", o->cases, "Number of cases (default: the larger count of --shape and --dtype)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seqlens", o->seqlens,
                  "Packed variable-length sequences, e.g. 1,63,64,65,300: writes cu_seqlens (int64 [N + 1]) and "
                  "makes every case B = 1, T = the sum (the B and T of --shape are ignored)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              parse_lengths(s);
              return "";
            } catch (const std::exception& e) {
              return e.what();
            }
          },
          "N1,N2,..."));
  cmd->add_flag("--initial-state", o->initial_state,
                "Also write initial_state [N, H, DK, DV] (fp32; fp64 for fp64; N = B, or the sequences of --seqlens)");
  cmd->add_flag("--initial-z", o->initial_z,
                "Also write z_state [N, H, DK]: a positive initial key sum for normalized runs (--normalize)");
  cmd->add_flag("--positive", o->positive,
                "Values uniform in (0, 1) instead of [-1, 1]: positive q and k keep normalization's denominators "
                "away from zero");
  cmd->add_option("--grad", o->grad_for,
                  "Write to -o the gradients for linattn backward of every case of this existing input file, in "
                  "its group layout: do (shaped like v, in the input dtype) and dht ([N, H, DK, DV], fp32; fp64 for "
                  "fp64 inputs), uniform in [-1, 1], never zero, from --seed. Takes no --shape (the input's cases "
                  "give the shapes)")
      ->excludes(shape)
      ->excludes("--dtype", "--cases", "--seqlens", "--initial-state", "--initial-z", "--positive");
  CLI::Option* gate = cmd->add_option("--gate", o->gate,
                  "Also write a decay gate (log-decays <= 0, fp32): 'gamma' writes g_gamma [H] (RetNet's per-head "
                  "decays gamma_h = 1 - 2^(-5-h), as log(gamma_h)), 'g' writes g [B, T, H] (one per token and head, "
                  "Mamba-2's gate), 'gk' writes gk [B, T, H, DK] (one per token, head and key channel, GLA's gate); "
                  "g and gk uniform in [-1, 0)")
      ->check(CLI::IsMember({"gamma", "g", "gk"}))
      ->excludes("--grad");
  cmd->add_option("--gate-strength", o->gate_strength,
                  "With --gate: log-decays uniform in [-S, 0) instead (for gamma too); large S forgets within a few "
                  "tokens, small S is close to no decay (at most 1e36, the lowest log-decay a run accepts)")
      ->check(CLI::Range(std::numeric_limits<double>::min(), -kLowestLogDecay))
      ->needs(gate);
  cmd->add_flag("--compress", o->compress, "gzip the datasets");
  cmd->add_flag("--force", o->force, "Replace an existing file");

  return {cmd, [o] {
            if (!o->force && std::filesystem::exists(o->output))
              throw FileError(o->output, "exists (pass --force to overwrite)");
            if (!o->grad_for.empty()) return generate_grads(o->grad_for, o->output, o->seed, o->compress);
            if (o->shapes.empty()) throw std::invalid_argument("--shape is required (or --grad INPUT.h5)");
            const GateKind gate_kind = o->gate == "gamma" ? GateKind::per_head
                                       : o->gate == "g"   ? GateKind::per_token
                                       : o->gate == "gk"  ? GateKind::per_channel
                                                          : GateKind::none;
            if (gate_kind != GateKind::none && o->initial_z)
              throw std::invalid_argument("--initial-z is for normalized runs, which take no gate (--gate)");
            const std::size_t count = o->cases ? o->cases : std::max(o->shapes.size(), o->dtypes.size());
            std::vector<NamedCase> cases;
            for (std::size_t i = 0; i < count; ++i) {
              Problem p = parse_shape(o->shapes[i % o->shapes.size()]);
              if (!o->seqlens.empty()) {
                p.B = 1;
                p.cu_seqlens = {0};
                for (std::int64_t n : parse_lengths(o->seqlens)) p.cu_seqlens.push_back(p.cu_seqlens.back() + n);
                p.T = p.cu_seqlens.back();
              }
              const DType dtype = parse_dtype(o->dtypes[i % o->dtypes.size()]);
              ProblemInputs in =
                  random_inputs(p, dtype, derive_seed(o->seed, i), o->initial_state, o->positive, o->initial_z);
              CaseData data{std::move(in.q), std::move(in.k), std::move(in.v), std::move(in.initial_state),
                            p.cu_seqlens, std::move(in.initial_z)};
              if (gate_kind != GateKind::none) {
                data.gate = gate_kind;
                data.log_decay = generate_gate(p, gate_kind, o->gate_strength, derive_seed(derive_seed(o->seed, i), 6));
              }
              cases.push_back({"case" + std::to_string(i), std::move(data)});
              std::cout << o->output << ":case" << i << "  " << shape_summary(p) << " " << dtype_name(dtype)
                        << (p.varlen() ? "  " + std::to_string(p.num_sequences()) + " packed sequences" : "")
                        << (o->positive ? "  positive" : "") << (o->initial_state ? "  with initial_state" : "")
                        << (o->initial_z ? "  with z_state" : "")
                        << (gate_kind != GateKind::none ? std::string("  with ") + gate_dataset_name(gate_kind) : "")
                        << '\n';
            }
            write_input_file(o->output, cases, hdf5::WriteOptions{o->compress});
            std::cout << "wrote " << o->output << " (" << count << " case" << (count > 1 ? "s" : "") << ")"
                      << std::endl;
            return 0;
          }};
}

}  // namespace linattn
