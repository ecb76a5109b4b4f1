// Open MPI settings for a job on one node (docs/PARALLEL.md, "A CPU node"),
// set in the environment before MPI_Init unless the user set them. Measured on
// the 16-core H200 host (BENCHMARKS.md, "A CPU node"):
// pml ob1 (shared memory through the vader transport) instead of Debian's
// default UCX: MPI_Init 0.2-0.3 s sooner on every run (a tiny case under
// mpirun: 0.72 -> 0.43 s on 1 rank, 0.70 -> 0.49 s on 16). (linattn does no
// MPI-IO: its ranks write output files with pwrite, write_stage.hpp.)
// Only when every rank is on this node (OMPI_COMM_WORLD_LOCAL_SIZE equals
// OMPI_COMM_WORLD_SIZE): across nodes the interconnect's own transport stays.
// LINATTN_KEEP_MPI_SETTINGS leaves the environment as it is.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace linattn::parallel {

// The (variable, value) pairs to set, given a lookup of the environment
// (nullptr: unset). Plain logic, for tests.
std::vector<std::pair<std::string, std::string>> single_node_mpi_settings(
    const std::function<const char*(const char*)>& getenv);

// Sets them in this process's environment (before MPI_Init).
void apply_single_node_mpi_settings();

}  // namespace linattn::parallel
