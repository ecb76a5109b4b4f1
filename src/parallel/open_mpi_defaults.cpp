#include "parallel/open_mpi_defaults.hpp"

#include <cstdlib>

namespace linattn::parallel {

std::vector<std::pair<std::string, std::string>> single_node_mpi_settings(
    const std::function<const char*(const char*)>& getenv) {
  const char* size = getenv("OMPI_COMM_WORLD_SIZE");
  const char* local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!size || !local || std::string(size) != local || getenv("LINATTN_KEEP_MPI_SETTINGS")) return {};
  std::vector<std::pair<std::string, std::string>> set;
  if (!getenv("OMPI_MCA_pml")) set.emplace_back("OMPI_MCA_pml", "ob1");
  return set;
}

void apply_single_node_mpi_settings() {
  for (const auto& [name, value] : single_node_mpi_settings([](const char* n) { return std::getenv(n); }))
    ::setenv(name.c_str(), value.c_str(), 0);
}

}  // namespace linattn::parallel
