#include "pipeline/window_plan.hpp"

#include <algorithm>
#include <string>

namespace linattn {
namespace {

// Per-part byte counts of one case, so that a window's bytes are sums of products.
struct UnitBytes {
  std::int64_t in_token, out_token;   // per token of one row
  std::int64_t in_window;             // per window (g_gamma) and its alignment
  std::int64_t h_chunk;               // per chunk of one row (0 without snapshots)
  std::int64_t fresh_row, final_row;  // per sequence starting / ending in the window (host slots)
  std::int64_t device_row;            // per sequence in the window (device states and key sums)
  std::int64_t device_token;          // per token of one row (unnormalized o)
  std::int64_t device_chunk;          // per chunk (normalization's key sums)
};

UnitBytes unit_bytes(const Problem& p, const CaseStorage& s) {
  const std::int64_t in = static_cast<std::int64_t>(dtype_size(s.input));
  const std::int64_t out = static_cast<std::int64_t>(dtype_size(s.output));
  const std::int64_t acc = static_cast<std::int64_t>(dtype_size(s.accumulation));
  const std::int64_t state = p.H * p.DK * p.DV * acc, z = p.H * p.DK * acc;
  UnitBytes u{};
  u.in_token = p.H * (2 * p.DK + p.DV) * in + (s.gate == GateKind::per_token     ? p.H * acc
                                                : s.gate == GateKind::per_channel ? p.H * p.DK * acc
                                                                                  : 0);
  u.in_window = s.gate == GateKind::per_head ? (p.H * acc + 255) / 256 * 256 : 0;
  u.out_token = p.H * p.DV * out;
  u.h_chunk = s.snapshots ? p.H * p.DK * p.DV * static_cast<std::int64_t>(dtype_size(s.snapshot)) : 0;
  u.fresh_row = (s.has_initial_state ? state : 0) + (s.has_initial_z ? z : 0);
  u.final_row = state + (s.normalize ? z : 0);
  u.device_row = 2 * state + (s.normalize ? 2 * z : 0) + 16;
  u.device_token = s.normalize && s.output != s.accumulation ? p.H * p.DV * acc : 0;
  u.device_chunk = s.normalize ? z : 0;
  return u;
}

// The bytes of a window of `tokens` tokens and `chunks` chunks per row over
// `rows` batch rows, `sequences` sequences of which `fresh` start and
// `finished` end in it.
WindowBytes bytes_of(const UnitBytes& u, std::int64_t rows, std::int64_t tokens, std::int64_t chunks,
                     std::int64_t sequences, std::int64_t fresh, std::int64_t finished, std::int64_t carried) {
  WindowBytes b;
  b.input = rows * tokens * u.in_token + fresh * u.fresh_row + u.in_window;
  b.output = rows * (tokens * u.out_token + chunks * u.h_chunk) + finished * u.final_row;
  b.device_extra = (sequences + carried) * u.device_row + rows * (tokens * u.device_token + chunks * u.device_chunk);
  return b;
}

bool fits(const WindowBytes& b, const WindowLimits& l) {
  return b.input <= l.input && b.output <= l.output && b.device_extra <= l.device_extra;
}

std::string mib(std::int64_t bytes) {
  if (bytes < (std::int64_t(1) << 20)) return std::to_string((bytes + 1023) >> 10) + " KiB";
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

[[noreturn]] void too_small(const WindowBytes& need, const WindowLimits& l) {
  throw BudgetError("the memory budget is too small for this case: one chunk of every sequence needs " +
                    mib(need.input) + " of input and " + mib(need.output) + " of output buffers and " +
                    mib(need.device_extra) + " beside them, the budget gives " + mib(l.input) + ", " +
                    mib(l.output) + " and " + mib(l.device_extra) + " (raise --memory-budget)");
}

std::vector<Window> plan_plain(const Problem& p, const CaseStorage& s, const WindowLimits& l, std::int64_t granule) {
  const UnitBytes u = unit_bytes(p, s);
  const std::int64_t NT = p.num_chunks();
  // Bound every window by the first's and the last's extras together (initial
  // rows in, final rows out), so that one length serves them all.
  auto cost = [&](std::int64_t chunks) {
    const std::int64_t tokens = std::min(p.T, chunks * p.chunk);
    return bytes_of(u, p.B, tokens, chunks, p.B, p.B, p.B, p.B);
  };
  std::int64_t step = std::max<std::int64_t>(1, std::min(granule, NT));
  if (!fits(cost(step), l)) step = 1;
  if (!fits(cost(step), l)) too_small(cost(1), l);
  std::int64_t lo = 1, hi = (NT + step - 1) / step;  // in steps; lo fits
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (fits(cost(mid * step), l)) lo = mid;
    else hi = mid - 1;
  }
  const std::int64_t chunks = std::min(NT, lo * step);
  return plain_windows(p, chunks);
}

}  // namespace

std::int64_t case_tokens(const Problem& whole) { return (whole.varlen() ? 1 : whole.B) * whole.T; }

std::int64_t window_tokens(const Problem& whole, const Window& w) { return (whole.varlen() ? 1 : whole.B) * w.tokens(); }

std::vector<Window> plain_windows(const Problem& p, std::int64_t chunks) {
  const std::int64_t NT = p.num_chunks();
  std::vector<Window> windows;
  for (std::int64_t c0 = 0; c0 < NT; c0 += chunks) {
    Window w;
    w.t0 = c0 * p.chunk;
    w.t1 = std::min(p.T, (c0 + chunks) * p.chunk);
    w.seq_begin = 0;
    w.seq_end = p.B;
    w.continues = w.t0 > 0;
    w.carries = w.t1 < p.T;
    w.chunk0 = c0;
    w.chunks = std::min(chunks, NT - c0);
    windows.push_back(w);
  }
  return windows;
}

namespace {

std::vector<Window> plan_packed(const Problem& p, const CaseStorage& s, const WindowLimits& l) {
  const UnitBytes u = unit_bytes(p, s);
  const std::int64_t N = p.num_sequences();
  std::vector<Window> windows;
  Window w;  // the open window; empty while w.chunks == 0
  std::int64_t fresh = 0, finished = 0;
  std::int64_t global_chunk = 0;
  auto window_cost = [&](const Window& x, std::int64_t f, std::int64_t e) {
    return bytes_of(u, 1, x.tokens(), x.chunks, x.sequences(), f, e, 1);
  };
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t start = p.cu_seqlens[n], end = p.cu_seqlens[n + 1];
    for (std::int64_t t = start; t < end; t += p.chunk, ++global_chunk) {
      const std::int64_t t_next = std::min(end, t + p.chunk);
      const bool first = t == start, last = t_next == end;
      // The open window with this chunk added.
      Window grown = w;
      if (grown.chunks == 0) {
        grown = Window{};
        grown.t0 = t;
        grown.seq_begin = n;
        grown.continues = !first;
        grown.chunk0 = global_chunk;
        grown.seq_end = n;
      }
      if (grown.seq_end == n) grown.seq_end = n + 1;
      grown.t1 = t_next;
      grown.chunks += 1;
      grown.carries = !last;
      const std::int64_t grown_fresh = fresh + (first ? 1 : 0), grown_finished = finished + (last ? 1 : 0);
      if (fits(window_cost(grown, grown_fresh, grown_finished), l)) {
        w = grown;
        fresh = grown_fresh;
        finished = grown_finished;
        continue;
      }
      if (w.chunks == 0) too_small(window_cost(grown, grown_fresh, grown_finished), l);
      windows.push_back(w);
      // Start a new window with this chunk alone.
      Window alone;
      alone.t0 = t;
      alone.t1 = t_next;
      alone.seq_begin = n;
      alone.seq_end = n + 1;
      alone.continues = !first;
      alone.carries = !last;
      alone.chunk0 = global_chunk;
      alone.chunks = 1;
      fresh = first ? 1 : 0;
      finished = last ? 1 : 0;
      if (!fits(window_cost(alone, fresh, finished), l)) too_small(window_cost(alone, fresh, finished), l);
      w = alone;
    }
  }
  if (w.chunks > 0) windows.push_back(w);
  return windows;
}

}  // namespace

WindowBytes window_bytes(const Problem& p, const CaseStorage& s, const Window& w) {
  const UnitBytes u = unit_bytes(p, s);
  if (!p.varlen()) {
    const std::int64_t fresh = w.t0 == 0 ? p.B : 0, finished = w.t1 == p.T ? p.B : 0;
    return bytes_of(u, p.B, w.tokens(), w.chunks, p.B, fresh, finished, p.B);
  }
  return bytes_of(u, 1, w.tokens(), w.chunks, w.sequences(), w.seq_end - w.fresh_begin(),
                  w.finished_end() - w.seq_begin, 1);
}

WindowLayout window_layout(const Problem& p, const CaseStorage& s, const Window& w) {
  WindowLayout l;
  l.rows = p.varlen() ? 1 : p.B;
  l.states = p.varlen() ? w.sequences() : p.B;
  if (p.varlen()) {
    l.fresh_row0 = w.fresh_begin();
    l.fresh_rows = w.seq_end - w.fresh_begin();
    l.finished_row0 = w.seq_begin;
    l.finished_rows = w.finished_end() - w.seq_begin;
  } else {
    l.fresh_rows = w.t0 == 0 ? p.B : 0;
    l.finished_rows = w.t1 == p.T ? p.B : 0;
  }
  const std::int64_t in = static_cast<std::int64_t>(dtype_size(s.input));
  const std::int64_t out = static_cast<std::int64_t>(dtype_size(s.output));
  const std::int64_t acc = static_cast<std::int64_t>(dtype_size(s.accumulation));
  const std::int64_t snap = static_cast<std::int64_t>(dtype_size(s.snapshot));
  const std::int64_t tokens = l.rows * w.tokens() * p.H;
  std::int64_t at = 0;
  auto place = [&at](std::int64_t bytes) {
    const std::int64_t here = at;
    at += (bytes + 255) / 256 * 256;
    return here;
  };
  l.q = place(tokens * p.DK * in);
  l.k = place(tokens * p.DK * in);
  l.v = place(tokens * p.DV * in);
  l.initial_state = place(s.has_initial_state ? l.fresh_rows * p.H * p.DK * p.DV * acc : 0);
  l.initial_z = place(s.has_initial_z ? l.fresh_rows * p.H * p.DK * acc : 0);
  l.gate = place(s.gate == GateKind::per_token     ? tokens * acc
                 : s.gate == GateKind::per_channel ? tokens * p.DK * acc
                 : s.gate == GateKind::per_head    ? p.H * acc
                                                   : 0);
  l.input_bytes = at;
  at = 0;
  l.o = place(tokens * p.DV * out);
  l.h = place(s.snapshots ? l.rows * w.chunks * p.H * p.DK * p.DV * snap : 0);
  l.final_state = place(l.finished_rows * p.H * p.DK * p.DV * acc);
  l.final_z = place(s.normalize ? l.finished_rows * p.H * p.DK * acc : 0);
  l.output_bytes = at;
  return l;
}

std::vector<Window> plan_windows(const Problem& whole, const CaseStorage& storage, const WindowLimits& limits,
                                 std::int64_t granule) {
  return whole.varlen() ? plan_packed(whole, storage, limits) : plan_plain(whole, storage, limits, granule);
}

Window whole_case_window(const Problem& whole) {
  Window w;
  w.t0 = 0;
  w.t1 = whole.T;
  w.seq_begin = 0;
  w.seq_end = whole.num_sequences();
  w.chunk0 = 0;
  w.chunks = whole.total_chunks();
  return w;
}

std::vector<Window> plan_part_windows(const Problem& whole, const Window& part, const CaseStorage& storage,
                                      const WindowLimits& limits, std::int64_t granule) {
  std::vector<Window> windows = plan_windows(window_problem(whole, part), storage, limits, granule);
  for (Window& w : windows) {
    w.t0 += part.t0;
    w.t1 += part.t0;
    w.chunk0 += part.chunk0;
    if (whole.varlen()) {  // a plain batch's windows hold every row
      w.seq_begin += part.seq_begin;
      w.seq_end += part.seq_begin;
    }
  }
  if (!windows.empty()) {
    windows.front().continues = windows.front().continues || part.continues;
    windows.back().carries = part.carries;
  }
  return windows;
}

Problem window_problem(const Problem& whole, const Window& w) {
  // Only the window's own offsets: a copy of the whole's would cost O(N) per window.
  Problem p = plain_problem(whole, whole.B, w.tokens());
  if (whole.varlen()) {
    p.cu_seqlens.reserve(static_cast<std::size_t>(w.sequences() + 1));
    p.cu_seqlens.push_back(0);
    for (std::int64_t n = w.seq_begin; n < w.seq_end; ++n)
      p.cu_seqlens.push_back(std::min(whole.cu_seqlens[n + 1], w.t1) - w.t0);
  }
  return p;
}

}  // namespace linattn
