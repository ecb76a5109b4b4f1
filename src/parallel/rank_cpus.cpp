#include "parallel/rank_cpus.hpp"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>

namespace linattn::parallel {

std::vector<int> widened_cpus(int bound_cpus, int online_cpus, int local_rank, int local_size) {
  if (bound_cpus != 1 || local_size < 1 || local_rank < 0 || local_rank >= local_size) return {};
  const int first = local_rank * online_cpus / local_size, last = (local_rank + 1) * online_cpus / local_size;
  if (last - first < 2) return {};
  std::vector<int> cpus;
  for (int c = first; c < last; ++c) cpus.push_back(c);
  return cpus;
}

std::string widen_binding(int local_rank, int local_size) {
  if (std::getenv("LINATTN_KEEP_BINDING")) return "";
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return "";
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const std::vector<int> cpus =
      widened_cpus(CPU_COUNT(&mask), static_cast<int>(online > 0 ? online : 1), local_rank, local_size);
  if (cpus.empty()) return "";
  cpu_set_t wide;
  CPU_ZERO(&wide);
  for (int c : cpus) CPU_SET(c, &wide);
  // Outside the job's CPU set the call fails, and the binding stays.
  if (sched_setaffinity(0, sizeof(wide), &wide) != 0) return "";
  return "bound to one CPU by the launcher; runs on CPUs " + std::to_string(cpus.front()) + "-" +
         std::to_string(cpus.back()) + ", its share of the node (LINATTN_KEEP_BINDING=1 keeps the binding)";
}

}  // namespace linattn::parallel
