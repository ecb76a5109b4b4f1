#include "parallel/segment_plan.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace linattn::parallel {

namespace {

// A state pass that is free, or no cheaper than the forward, gains nothing from uneven shares.
bool splits_evenly(double carry_cost) { return carry_cost == 0.0 || carry_cost >= 1.0; }

}  // namespace

std::vector<double> segment_shares(int ranks, double carry_cost) {
  if (ranks < 1) throw std::invalid_argument("segment_shares: ranks must be at least 1");
  if (!(carry_cost >= 0.0)) throw std::invalid_argument("segment_shares: the carry cost must be at least 0");
  const bool even = splits_evenly(carry_cost);
  std::vector<double> g(static_cast<std::size_t>(ranks), 1.0);
  for (std::size_t r = 1; r < g.size() && !even; ++r) g[r] = 1.0 - carry_cost * g[r - 1];
  double sum = 0.0;
  for (double x : g) sum += x;
  for (double& x : g) x /= sum;
  return g;
}

std::vector<Window> plan_segments(const Problem& p, int ranks, double carry_cost) {
  if (ranks < 1) throw std::invalid_argument("plan_segments: ranks must be at least 1");
  const std::int64_t G = p.varlen() ? p.total_chunks() : p.num_chunks();
  const std::vector<std::int64_t> starts = p.chunk_starts();  // first chunk of each sequence, then G
  // The first chunk of each segment, then G: integer arithmetic for even shares.
  std::vector<std::int64_t> cuts(static_cast<std::size_t>(ranks) + 1, G);
  const std::vector<double> shares = segment_shares(ranks, carry_cost);
  const bool even = splits_evenly(carry_cost);
  double before = 0.0;
  for (int r = 0; r < ranks; ++r) {
    cuts[static_cast<std::size_t>(r)] =
        even ? r * G / ranks : std::min<std::int64_t>(G, std::llround(before * static_cast<double>(G)));
    before += shares[static_cast<std::size_t>(r)];
  }
  std::vector<Window> segments;
  for (int r = 0; r < ranks; ++r) {
    const std::int64_t g0 = cuts[static_cast<std::size_t>(r)], g1 = cuts[static_cast<std::size_t>(r) + 1];
    Window w;
    w.chunk0 = g0;
    w.chunks = g1 - g0;
    if (w.chunks == 0) {  // t0 = t1 = 0, no sequences
      segments.push_back(w);
      continue;
    }
    if (!p.varlen()) {
      w.t0 = g0 * p.chunk;
      w.t1 = std::min(p.T, g1 * p.chunk);
      w.seq_begin = 0;
      w.seq_end = p.B;
      w.continues = w.t0 > 0;
      w.carries = w.t1 < p.T;
    } else {
      // The sequences holding the first and the last chunk.
      const auto sequence_of = [&](std::int64_t g) {
        return static_cast<std::int64_t>(std::upper_bound(starts.begin(), starts.end() - 1, g) - starts.begin()) - 1;
      };
      const std::int64_t first = sequence_of(g0), last = sequence_of(g1 - 1);
      w.t0 = p.cu_seqlens[first] + (g0 - starts[first]) * p.chunk;
      w.t1 = std::min(p.cu_seqlens[last + 1], p.cu_seqlens[last] + (g1 - starts[last]) * p.chunk);
      w.seq_begin = first;
      w.seq_end = last + 1;
      w.continues = w.t0 > p.cu_seqlens[first];
      w.carries = w.t1 < p.cu_seqlens[last + 1];
    }
    segments.push_back(w);
  }
  return segments;
}

std::vector<int> carry_chain(const Problem& p, const std::vector<Window>& segments, int r) {
  const Window& w = segments[static_cast<std::size_t>(r)];
  std::vector<int> chain;
  if (w.chunks == 0 || !w.continues) return chain;
  for (int j = r - 1; j >= 0; --j) {
    const Window& before = segments[static_cast<std::size_t>(j)];
    if (before.chunks == 0) continue;  // an empty segment carries nothing
    if (!before.carries || (p.varlen() && before.seq_end - 1 != w.seq_begin))
      throw std::logic_error("carry_chain: segment " + std::to_string(j) + " does not carry into segment " +
                             std::to_string(r));
    chain.insert(chain.begin(), j);
    // The sequence started inside segment j: its carry began from the initial state.
    if (!before.continues || before.seq_begin != w.seq_begin) break;
  }
  return chain;
}

CarriedPiece carried_piece(const Problem& p, const Window& w) {
  CarriedPiece piece;
  piece.t1 = w.t1;
  const std::int64_t last_start = p.varlen() ? p.cu_seqlens[w.seq_end - 1] : 0;
  piece.t0 = std::max(w.t0, last_start);
  piece.from_start = piece.t0 == last_start;
  return piece;
}

CarryRoute carry_route(const Problem& p, const std::vector<Window>& segments, int r) {
  CarryRoute route;
  const std::vector<int> chain = carry_chain(p, segments, r);
  if (!chain.empty()) {
    route.carry_of = chain.back();
    if (chain.size() > 1) route.start_from = chain.back();
  }
  for (int q = r + 1; q < static_cast<int>(segments.size()) && route.start_to < 0; ++q) {
    const std::vector<int> later = carry_chain(p, segments, q);
    if (later.size() > 1 && later.back() == r) route.start_to = q;
  }
  return route;
}

}  // namespace linattn::parallel
