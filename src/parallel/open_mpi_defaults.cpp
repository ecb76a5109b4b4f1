#include "parallel/open_mpi_defaults.hpp"

#include <algorithm>
#include <cstdlib>

namespace linattn::parallel {

std::vector<std::pair<std::string, std::string>> single_node_mpi_settings(
    const std::function<const char*(const char*)>& getenv) {
  const char* size = getenv("OMPI_COMM_WORLD_SIZE");
  const char* local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!size || !local || std::string(size) != local || getenv("LINATTN_KEEP_MPI_SETTINGS")) return {};
  std::vector<std::pair<std::string, std::string>> set;
  for (const auto& [name, value] : {std::pair<std::string, std::string>{"OMPI_MCA_pml", "ob1"},
                                    std::pair<std::string, std::string>{"OMPI_MCA_io_romio321_priority", "50"}})
    if (!getenv(name.c_str())) set.emplace_back(name, value);
  // A user's choice of MPI-IO component wins over the priority.
  if (getenv("OMPI_MCA_io"))
    set.erase(std::remove_if(set.begin(), set.end(), [](const auto& s) { return s.first == "OMPI_MCA_io_romio321_priority"; }),
              set.end());
  return set;
}

void apply_single_node_mpi_settings() {
  for (const auto& [name, value] : single_node_mpi_settings([](const char* n) { return std::getenv(n); }))
    ::setenv(name.c_str(), value.c_str(), 0);
}

}  // namespace linattn::parallel
