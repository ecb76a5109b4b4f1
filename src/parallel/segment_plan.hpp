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

// Each rank's share of the tokens when every rank but the first also runs the
// state pass over the segment before its own, at `carry_cost` of a forward's
// time per token (kernels/state_pass.hpp): shares g_0 = 1, g_r = 1 -
// carry_cost * g_(r-1), divided by their sum, so that every rank's work g_r +
// carry_cost * g_(r-1) is the same (rank 0's: g_0). On 2 ranks rank 0 takes
// 1 / (2 - carry_cost). carry_cost 0, or 1 and more (no cheaper than the
// forward), gives even shares.
std::vector<double> segment_shares(int ranks, double carry_cost);

// One segment per rank, in token order, each holding its share of the G
// chunks of h's chunk axis (plain batch: the NT chunks of every row): rank r
// takes chunks [round(G s_r), round(G s_(r+1))), s_r the shares before it
// (even shares: [r G / ranks, (r + 1) G / ranks)). A chunk is the kernels'
// unit of work, however short. With fewer chunks than ranks some segments are
// empty (chunks == 0, no sequences).
std::vector<Window> plan_segments(const Problem& p, int ranks, double carry_cost = 0.0);

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

// Who computes what in the exchange (docs/PARALLEL.md "Context parallel"):
// rank r runs the state pass over the carried piece of segment `carry_of`, the
// last of its carry_chain (-1: r starts no sequence midway). When the chain is
// longer, r adds that piece's state to the start state of segment carry_of,
// received from rank `start_from` (= carry_of; else -1), so the sum runs in
// chain order. `start_to` is the rank that receives r's start state (-1: none).
struct CarryRoute {
  int carry_of = -1, start_from = -1, start_to = -1;
};
CarryRoute carry_route(const Problem& p, const std::vector<Window>& segments, int r);

}  // namespace linattn::parallel
