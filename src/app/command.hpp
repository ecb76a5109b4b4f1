// A subcommand of the linattn program. Each add_*_command registers its
// options on the parent parser and returns the action to run once parsing is
// done and Kokkos is initialized. Adding a subcommand = one add_*_command
// function and one line in main.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace linattn {

struct Command {
  CLI::App* parser = nullptr;  // the subcommand's parser (parsed() tells whether it was chosen)
  std::function<int()> run;    // returns the exit code
};

Command add_run_command(CLI::App& parent);
Command add_generate_command(CLI::App& parent);
Command add_verify_command(CLI::App& parent);
Command add_ledger_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_backward_command(CLI::App& parent);

}  // namespace linattn
