#include "parallel/case_assignment.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace linattn::parallel {

std::vector<int> assign_cases(const std::vector<std::int64_t>& costs, int ranks) {
  if (ranks < 1) throw std::invalid_argument("assign_cases: ranks must be at least 1");
  std::vector<std::size_t> order(costs.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  // Each rank's work so far and its number of cases (so that cases of no
  // measured cost, e.g. empty ones, are spread too).
  std::vector<std::pair<std::int64_t, std::int64_t>> load(static_cast<std::size_t>(ranks), {0, 0});
  std::vector<int> owner(costs.size(), 0);
  for (std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equals: the lower rank
    owner[i] = static_cast<int>(least - load.begin());
    least->first += costs[i];
    least->second += 1;
  }
  return owner;
}

}  // namespace linattn::parallel
