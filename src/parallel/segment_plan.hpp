// Context parallel (docs/PARALLEL.md): every case is cut along T into one
// contiguous segment per rank, and each rank starts its segment from the state
// the segments before it carry. A segment is a Window (pipeline/window_plan.hpp):
// it starts and ends on chunk boundaries of its sequences, so its chunks are
// those of the whole case. Plain arithmetic, the same on every rank.
#pragma once

#include "core/problem.hpp"
#include "pipeline/window_plan.hpp"

#include <vector>

namespace linattn::parallel {

// One segment per rank, in token order, each holding about the same number of
// chunks (a chunk is the kernels' unit of work, however short): rank r takes
// chunks [r G / ranks, (r + 1) G / ranks) of the G chunks of h's chunk axis
// (plain batch: the NT chunks of every row). With fewer chunks than ranks some
// segments are empty (chunks == 0, no sequences).
std::vector<Window> plan_segments(const Problem& p, int ranks);

// The segments whose carried states, added in this order, give the state
// segment r starts its first sequence from: the segment where that sequence
// (plain batch: every row) started, whose carry began from the sequence's own
// initial state, then each later one up to r - 1, whose carry began from
// zero. Empty when segment r starts no sequence midway (!continues).
std::vector<int> carry_chain(const Problem& p, const std::vector<Window>& segments, int r);

// The tokens of segment w whose state it carries out: [max(t0, start of its
// last sequence), t1); `from_start` tells whether they begin at that sequence's
// first token (the carry starts from its initial state) or midway (from zero).
struct CarriedPiece {
  std::int64_t t0 = 0, t1 = 0;
  bool from_start = false;
};
CarriedPiece carried_piece(const Problem& p, const Window& w);

}  // namespace linattn::parallel
