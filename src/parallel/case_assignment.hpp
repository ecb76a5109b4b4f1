// Which rank runs which case of a batch shared by MPI ranks (docs/PARALLEL.md):
// longest processing time first. Cases are taken largest first (ties: the
// earlier case first) and each goes to the rank with the least work so far
// (ties: the rank with fewer cases, then the lower rank). Plain arithmetic, the same on every rank.
#pragma once

#include <cstdint>
#include <vector>

namespace linattn::parallel {

// costs[i] >= 0 is case i's work (its input bytes); returns the rank of each case.
std::vector<int> assign_cases(const std::vector<std::int64_t>& costs, int ranks);

}  // namespace linattn::parallel
