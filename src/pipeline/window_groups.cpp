#include "pipeline/window_groups.hpp"

#include <algorithm>
#include <stdexcept>

namespace linattn {

Window merge_windows(const Window& a, const Window& b) {
  if (b.t0 != a.t1 || b.chunk0 != a.chunk0 + a.chunks)
    throw std::logic_error("merge_windows: the windows are not adjacent");
  Window m = a;
  m.t1 = b.t1;
  m.seq_end = b.seq_end;
  m.carries = b.carries;
  m.chunks = a.chunks + b.chunks;
  return m;
}

double launch_steps(const Problem& whole, const Window& w, std::int64_t parallel_walks) {
  const Problem pieces = window_problem(whole, w);  // the window's pieces of sequences, as its kernels walk them
  std::int64_t longest = 0, chunks = 0;
  for (std::int64_t n = 0; n < pieces.num_sequences(); ++n) {
    longest = std::max(longest, pieces.sequence_chunks(n));
    chunks += pieces.sequence_chunks(n);
  }
  const double spread = parallel_walks > 0 ? double(chunks) * double(whole.H) / double(parallel_walks) : 0.0;
  return std::max(double(longest), spread);
}

std::vector<WindowGroup> group_windows(const Problem& whole, const CaseStorage& storage,
                                       const std::vector<Window>& windows, const GroupLimits& limits) {
  std::vector<WindowGroup> groups;
  const bool gather = limits.enabled && whole.varlen();
  auto bytes = [&](const Window& w) {
    const WindowBytes b = window_bytes(whole, storage, w);
    return b.input + b.output + b.device_extra;
  };
  auto steps = [&](const Window& w) { return launch_steps(whole, w, limits.parallel_walks); };
  for (std::size_t i = 0; i < windows.size(); ++i) {
    if (gather && !groups.empty()) {
      WindowGroup& g = groups.back();
      const bool open = g.window.sequences() * whole.H < limits.walks &&
                        (limits.max_parts == 0 || static_cast<std::int64_t>(g.parts()) < limits.max_parts);
      const bool new_walks = windows[i].fresh_begin() < windows[i].seq_end;
      if (open) {
        const Window merged = merge_windows(g.window, windows[i]);
        const bool shorter = new_walks || steps(merged) < steps(g.window) + steps(windows[i]);
        if (shorter && bytes(merged) <= limits.device_bytes) {
          g.window = merged;
          g.last = i + 1;
          continue;
        }
      }
    }
    groups.push_back(WindowGroup{i, i + 1, windows[i]});
  }
  return groups;
}

}  // namespace linattn
