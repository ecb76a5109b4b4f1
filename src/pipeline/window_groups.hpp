// Device windows: consecutive windows of a case gathered on the device and
// computed in one launch. A packed case's windows hold few sequences each
// (windows are sized by the host slots), and launched one by one each walks
// them chunk by chunk with most of the GPU idle: 21 windows of a 65536-token
// case took 4x `bench`'s kernel time on the same cuts (BENCHMARKS.md, "A
// packed case in `run`"). Gathered, one launch walks many sequences at once,
// while the host slots stay small enough for reading and writing to overlap.
//
// The bits do not change: a window's kernels walk each of its sequences
// chunk by chunk from the carried state, wherever the windows are cut
// (window_plan.hpp), so a device window computes what its parts would.
#pragma once

#include "pipeline/window_plan.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace linattn {

// Windows [first, last) of the plan and their merge.
struct WindowGroup {
  std::size_t first = 0, last = 0;
  Window window;
  std::size_t parts() const { return last - first; }
};

struct GroupLimits {
  bool enabled = false;             // gather packed windows (else one group per window)
  std::int64_t device_bytes = 0;    // most bytes of a group's device buffers (window_bytes: in + out + extra)
  std::int64_t walks = 0;           // a group stops growing once it holds this many (sequence, head) walks
  std::int64_t max_parts = 0;       // most windows a group (0: no limit)
  std::int64_t parallel_walks = 0;  // walks a launch runs at once (launch_steps; 0: all of them)
};

// A launch's length in chunk steps: each (sequence, head) walk takes its
// chunks one after another, `parallel_walks` walks at a time (0: all at
// once), so a launch lasts its longest walk or all its walks' chunks spread
// over the parallel ones, whichever is longer. The 65536-token case of
// BENCHMARKS.md ("A packed case in `run`") in 6 launches sums 3.3x the whole
// case's steps in this model, and measured 3.6x its kernel time.
double launch_steps(const Problem& whole, const Window& w, std::int64_t parallel_walks);

// The window covering two adjacent windows of one case (b starts where a ends).
Window merge_windows(const Window& a, const Window& b);

// The plan's windows in groups, in order: plain batches (whose every window
// already walks all B x H sequences) and disabled limits give one group per
// window; a packed case's consecutive windows are gathered while the merge
// fits device_bytes and max_parts, until a group holds `walks` walks. A
// window in which no sequence starts (the middle of a long one) adds no walk,
// only a longer one: it is gathered only while that shortens the launches
// (launch_steps of the merge below the group's plus its own), that is while
// the group's other walks run beside it. Once that sequence is the group's
// longest walk, gathering gains nothing and would hold the group's outputs
// back from the writer, so a case of one long sequence keeps every window.
std::vector<WindowGroup> group_windows(const Problem& whole, const CaseStorage& storage,
                                       const std::vector<Window>& windows, const GroupLimits& limits);

}  // namespace linattn
