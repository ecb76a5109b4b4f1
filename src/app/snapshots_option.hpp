// --snapshots of `run` and `bench`: one set of values with one meaning. The
// defaults differ, each for its reason, which each command's help states.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace linattn {

inline CLI::Option* add_snapshots_option(CLI::App* cmd, std::string& value, const std::string& why_its_default) {
  return cmd
      ->add_option("--snapshots", value,
                   "Dtype of the state snapshots h: fp32 (the accumulation type: fp64 for fp64 inputs), bf16, or "
                   "none (h not kept). Default " + value + ": " + why_its_default)
      ->check(CLI::IsMember({"fp32", "bf16", "none"}))
      ->capture_default_str();
}

}  // namespace linattn
