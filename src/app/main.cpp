// linattn: the command-line program. Parses the command line, initializes
// Kokkos once, and runs the chosen subcommand.
#include "app/command.hpp"
#include "parallel/communicator.hpp"
#include "parallel/local_device.hpp"
#include "parallel/rank_cpus.hpp"
#include "pipeline/read_process.hpp"

#include <Kokkos_Core.hpp>

#include <iostream>
#include <vector>

namespace {

// Kokkos gets none of linattn's arguments (it would reject them), and its
// start-up warnings are turned off so that they do not interleave with reports.
// Under MPI each rank takes its node's GPU (parallel/local_device.hpp).
#if KOKKOS_VERSION >= 30700
Kokkos::InitializationSettings kokkos_settings() {
  Kokkos::InitializationSettings settings;
  settings.set_disable_warnings(true);
  if (const int device = linattn::parallel::local_device_id(); device >= 0) settings.set_device_id(device);
  return settings;
}
#else
Kokkos::InitArguments kokkos_settings() {
  Kokkos::InitArguments settings;
  settings.disable_warnings = true;
  if (const int device = linattn::parallel::local_device_id(); device >= 0) settings.device_id = device;
  return settings;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  // The reader process of `run` (src/pipeline/read_process.hpp): no Kokkos, no GPU.
  if (linattn::pipeline::is_read_worker(argc, argv)) return linattn::pipeline::read_worker_main(argc, argv);
  CLI::App app{"linattn: the chunkwise forward (and backward) of causal linear attention on Kokkos, HDF5 in and out"};
  app.set_version_flag("--version", LINATTN_VERSION);
  app.require_subcommand(1);
  const std::vector<linattn::Command> commands = {
      linattn::add_run_command(app),
      linattn::add_generate_command(app),
      linattn::add_verify_command(app),
      linattn::add_ledger_command(app),
      linattn::add_bench_command(app),
      linattn::add_backward_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Bare `linattn`: the usage. --help and --version exit 0; every usage
    // error exits 2, as the subcommands' own checks of their options do.
    if (argc == 1) {
      std::cerr << "linattn: a subcommand is required\n\n" << app.help();
      return 2;
    }
    return app.exit(e) == 0 ? 0 : 2;
  }

  // MPI (when launched by mpirun) before Kokkos, which needs the rank's GPU; finalized after it.
  linattn::parallel::Session mpi(argc, argv);
  // Before any reader process is forked (parallel/rank_cpus.hpp); one rank of mpirun too, which
  // Open MPI binds to one core as it binds two (its pipeline on one core: 1.6x the wall time, H100 host).
  if (linattn::parallel::started()) {
    const std::string note =
        linattn::parallel::widen_binding(linattn::parallel::local_rank(), linattn::parallel::local_size());
    if (!note.empty() && linattn::parallel::rank() == 0) std::cerr << "linattn: ranks " << note << std::endl;
  }
  Kokkos::ScopeGuard kokkos(kokkos_settings());
  for (const linattn::Command& command : commands) {
    if (!command.parser->parsed()) continue;
    try {
      return command.run();
    } catch (const std::exception& e) {
      std::cerr << "linattn " << command.parser->get_name() << ": error: " << e.what() << std::endl;
      // The other ranks may be waiting for this one in a collective call.
      if (linattn::parallel::size() > 1) linattn::parallel::abort_all(2);
      return 2;
    }
  }
  return 2;
}
