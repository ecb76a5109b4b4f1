// linattn generate -o FILE --shape B,T,H,DK,DV --dtype bf16 --seed N: random
// input files for examples and tests.
#include "app/command.hpp"
#include "app/report.hpp"
#include "core/random_tensor.hpp"
#include "io/file_error.hpp"
#include "io/input_file.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

namespace linattn {
namespace {

// "B,T,H,DK,DV" -> Problem; throws std::invalid_argument.
Problem parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    long long d = 0;
    try {
      d = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) throw std::invalid_argument("'" + text + "' is not B,T,H,DK,DV");
    dims.push_back(d);
  }
  if (dims.size() != 5) throw std::invalid_argument("'" + text + "' is not B,T,H,DK,DV (five integers)");
  Problem p;
  p.B = dims[0]; p.T = dims[1]; p.H = dims[2]; p.DK = dims[3]; p.DV = dims[4];
  validate_shapes(p);
  return p;
}

}  // namespace

Command add_generate_command(CLI::App& parent) {
  struct Options {
    std::string output;
    std::vector<std::string> shapes, dtypes = {"bf16"};
    std::uint64_t seed = 0;
    std::size_t cases = 0;
    bool initial_state = false, compress = false, force = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "generate",
      "Write random inputs (uniform in [-1, 1], never zero, rounded to the dtype) in groups case0..caseK-1. "
      "--shape and --dtype may be repeated: case i takes the (i mod count)-th of each.");
  cmd->add_option("-o,--output", o->output, "Output HDF5 file")->required();
  cmd->add_option("--shape", o->shapes, "B,T,H,DK,DV (repeatable)")
      ->required()
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
  cmd->add_flag("--initial-state", o->initial_state, "Also write initial_state [B, H, DK, DV] (fp32; fp64 for fp64)");
  cmd->add_flag("--compress", o->compress, "gzip the datasets");
  cmd->add_flag("--force", o->force, "Replace an existing file");

  return {cmd, [o] {
            if (!o->force && std::filesystem::exists(o->output))
              throw FileError(o->output, "exists (pass --force to overwrite)");
            const std::size_t count = o->cases ? o->cases : std::max(o->shapes.size(), o->dtypes.size());
            std::vector<NamedCase> cases;
            for (std::size_t i = 0; i < count; ++i) {
              const Problem p = parse_shape(o->shapes[i % o->shapes.size()]);
              const DType dtype = parse_dtype(o->dtypes[i % o->dtypes.size()]);
              ProblemInputs in = random_inputs(p, dtype, derive_seed(o->seed, i), o->initial_state);
              cases.push_back({"case" + std::to_string(i),
                               CaseData{std::move(in.q), std::move(in.k), std::move(in.v), std::move(in.initial_state)}});
              std::cout << o->output << ":case" << i << "  " << shape_summary(p) << " " << dtype_name(dtype)
                        << (o->initial_state ? "  with initial_state" : "") << '\n';
            }
            write_input_file(o->output, cases, hdf5::WriteOptions{o->compress});
            std::cout << "wrote " << o->output << " (" << count << " case" << (count > 1 ? "s" : "") << ")"
                      << std::endl;
            return 0;
          }};
}

}  // namespace linattn
