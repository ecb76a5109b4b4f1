#include "kernels/execution.hpp"

namespace linattn {

std::string kokkos_backend_name() { return ExecSpace::name(); }

std::string kokkos_version_string() {
  const int v = KOKKOS_VERSION;
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace linattn
