// `linattn verify --per-chunk`: the error of o and h in each chunk of h's
// chunk axis, in one pass over the chunks (finding each chunk's sequence from
// the first one made it O(N^3) in the sequences; docs/ARCHITECTURE.md,
// "Cost per sequence").
#pragma once

#include "core/problem.hpp"

#include <cstdint>
#include <vector>

namespace linattn {

struct ChunkError {
  std::int64_t tokens = 0;  // in the chunk (per batch row)
  double o = 0, h = 0;      // relative L2 errors; h is 0 when there is no h
};

// Chunk g, in the order of h's chunk axis: o over the chunk's tokens (in every
// batch row of a plain batch), h over h[:, g]. o and o_ref are [B, T, H, DV];
// h and h_ref are p.h_shape(), or both empty.
std::vector<ChunkError> chunk_errors(const Problem& p, const std::vector<double>& o, const std::vector<double>& o_ref,
                                     const std::vector<double>& h, const std::vector<double>& h_ref);

}  // namespace linattn
