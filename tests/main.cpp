// One test binary for every backend: Kokkos is initialized once around the suite.
#include "pipeline/read_process.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  // run_batch starts this binary as its reader process.
  if (linattn::pipeline::is_read_worker(argc, argv)) return linattn::pipeline::read_worker_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  return RUN_ALL_TESTS();
}
