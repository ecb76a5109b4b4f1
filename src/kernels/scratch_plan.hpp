// Sizing a kernel's team scratch: which DV block width and which scratch level
// (0: on-chip, 1: device memory on GPUs). Sized from the backend's
// scratch_size_max so that the same kernel fits a CPU team and a GPU block.
#pragma once

#include "kernels/execution.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace linattn {

struct ScratchPlan {
  int level = 0;
  std::int64_t block_dv = 0;
  std::size_t bytes = 0;
};

// Bytes of a set of Acc tiles (rows x cols each), with Kokkos' own alignment.
template <class Acc>
std::size_t tile_bytes(const std::vector<std::pair<std::int64_t, std::int64_t>>& tiles) {
  std::size_t total = 0;
  for (const auto& t : tiles) total += Tile<Acc>::shmem_size(static_cast<std::size_t>(t.first), static_cast<std::size_t>(t.second));
  return total;
}

// Chooses block_dv: the requested width when given (> 0), otherwise the widest
// of DV, 128, 64, 32, 16 (host: DV only) whose tiles fit level 0; when none
// fits level 0, the narrowest candidate on level 1. bytes_for(block_dv)
// returns the tile bytes.
template <class BytesFor>
ScratchPlan plan_scratch(std::int64_t DV, std::int64_t requested_block_dv, const BytesFor& bytes_for) {
  std::vector<std::int64_t> widths;
  if (requested_block_dv > 0) {
    widths.push_back(requested_block_dv < DV ? requested_block_dv : DV);
  } else {
    widths.push_back(DV);
    // On a GPU narrower blocks buy on-chip scratch and more teams; on the host
    // both levels are the same memory, and a narrower block only repeats Q K^T.
    if (!host_execution)
      for (std::int64_t w : {128, 64, 32, 16})
        if (w < DV) widths.push_back(w);
  }
  const std::size_t max0 = static_cast<std::size_t>(TeamPolicy::scratch_size_max(0));
  for (std::int64_t w : widths) {
    const std::size_t bytes = bytes_for(w);
    if (bytes <= max0) return {0, w, bytes};
  }
  const std::int64_t w = widths.back();
  const std::size_t bytes = bytes_for(w);
  const std::size_t max1 = static_cast<std::size_t>(TeamPolicy::scratch_size_max(1));
  if (bytes > max1)
    throw std::invalid_argument("tiles need " + std::to_string(bytes) + " bytes of team scratch, more than the " +
                                std::to_string(max1) + " the backend offers; use a smaller chunk");
  return {1, w, bytes};
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace linattn
