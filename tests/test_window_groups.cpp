// Device windows (pipeline/window_groups.hpp): which consecutive windows of a
// case are gathered into one launch, and the window their merge is. The bits
// of gathered windows are tests/test_streaming.cpp's (DeviceWindowsMatchWhole).
#include "pipeline/window_groups.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>

namespace linattn {
namespace {

CaseStorage storage() {
  CaseStorage s;
  s.input = s.output = DType::bf16;
  s.accumulation = s.snapshot = DType::f32;
  s.has_initial_state = true;
  return s;
}

Problem packed(std::vector<std::int64_t> lengths) {
  Problem p;
  p.B = 1; p.H = 2; p.DK = 16; p.DV = 16; p.chunk = 16;
  p.cu_seqlens = {0};
  for (std::int64_t n : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + n);
  p.T = p.cu_seqlens.back();
  return p;
}

// Windows of about two chunks each (or `chunks`): most sequences are cut.
std::vector<Window> small_windows(const Problem& p, const CaseStorage& s, std::int64_t chunks = 2) {
  const std::int64_t limit = chunks * window_bytes(p, s, Window{0, 16, 0, 1, false, true, 0, 1}).input + 2048;
  return plan_windows(p, s, WindowLimits{limit, limit, limit});
}

GroupLimits unlimited() {
  GroupLimits g;
  g.enabled = true;
  g.device_bytes = std::int64_t(1) << 40;
  g.walks = std::int64_t(1) << 40;
  return g;
}

// The groups cover the windows in order, and each group's window is its parts' merge.
void expect_groups_cover(const std::vector<Window>& windows, const std::vector<WindowGroup>& groups) {
  std::size_t next = 0;
  for (const WindowGroup& g : groups) {
    EXPECT_EQ(g.first, next);
    ASSERT_GT(g.last, g.first);
    Window m = windows[g.first];
    for (std::size_t i = g.first + 1; i < g.last; ++i) m = merge_windows(m, windows[i]);
    EXPECT_EQ(g.window.t0, m.t0);
    EXPECT_EQ(g.window.t1, m.t1);
    EXPECT_EQ(g.window.chunks, m.chunks);
    next = g.last;
  }
  EXPECT_EQ(next, windows.size());
}

TEST(WindowGroups, AllOfAPackedCaseMergeIntoItsWholeWindow) {
  // Sequences of at most two chunks: a sequence starts in every window.
  const Problem p = packed({1, 17, 20, 32, 5, 31, 16, 9, 30, 2, 25, 18, 32, 7});
  const CaseStorage s = storage();
  const std::vector<Window> windows = small_windows(p, s);
  ASSERT_GE(windows.size(), 8u);
  const std::vector<WindowGroup> groups = group_windows(p, s, windows, unlimited());
  ASSERT_EQ(groups.size(), 1u);
  expect_groups_cover(windows, groups);
  // The merge is the window the plan makes when the whole case fits.
  const std::vector<Window> whole = plan_windows(p, s, WindowLimits{1 << 30, 1 << 30, 1 << 30});
  ASSERT_EQ(whole.size(), 1u);
  const Window& w = groups[0].window;
  EXPECT_EQ(w.t0, 0);
  EXPECT_EQ(w.t1, p.T);
  EXPECT_EQ(w.seq_begin, 0);
  EXPECT_EQ(w.seq_end, p.num_sequences());
  EXPECT_FALSE(w.continues);
  EXPECT_FALSE(w.carries);
  EXPECT_EQ(w.chunk0, 0);
  EXPECT_EQ(w.chunks, whole[0].chunks);
  EXPECT_EQ(window_layout(p, s, w).output_bytes, window_layout(p, s, whole[0]).output_bytes);
}

TEST(WindowGroups, LimitsEndAGroup) {
  const Problem p = packed({1, 17, 20, 32, 5, 31, 16, 9, 30, 2, 25, 18, 32, 7, 3, 29, 11, 24, 8, 19});
  const CaseStorage s = storage();
  const std::vector<Window> windows = small_windows(p, s);
  // At most three windows a group.
  GroupLimits parts = unlimited();
  parts.max_parts = 3;
  std::vector<WindowGroup> groups = group_windows(p, s, windows, parts);
  expect_groups_cover(windows, groups);
  EXPECT_EQ(groups.size(), (windows.size() + 2) / 3);
  for (const WindowGroup& g : groups) EXPECT_LE(g.parts(), 3u);
  // Device bytes of one window: nothing merges.
  GroupLimits bytes = unlimited();
  bytes.device_bytes = 0;
  groups = group_windows(p, s, windows, bytes);
  EXPECT_EQ(groups.size(), windows.size());
  // Walks: a group stops once its (sequence, head) walks reach the limit, not before.
  GroupLimits walks = unlimited();
  walks.walks = 3 * p.H;
  groups = group_windows(p, s, windows, walks);
  expect_groups_cover(windows, groups);
  EXPECT_GT(groups.size(), 1u);
  for (std::size_t i = 0; i + 1 < groups.size(); ++i) {
    const WindowGroup& g = groups[i];
    EXPECT_GE(g.window.sequences() * p.H, walks.walks) << "group " << i << " closed early";
    if (g.parts() > 1) {  // without its last window it was still open
      Window before = windows[g.first];
      for (std::size_t j = g.first + 1; j + 1 < g.last; ++j) before = merge_windows(before, windows[j]);
      EXPECT_LT(before.sequences() * p.H, walks.walks) << "group " << i << " grew past the limit";
    }
  }
}

Window whole_window(const Problem& p, const CaseStorage& s) {
  const std::vector<Window> whole = plan_windows(p, s, WindowLimits{1 << 30, 1 << 30, 1 << 30});
  EXPECT_EQ(whole.size(), 1u);
  return whole.at(0);
}

bool starts_no_sequence(const Window& w) { return w.fresh_begin() == w.seq_end; }

TEST(WindowGroups, LaunchStepsAreTheLongestWalkOrAllWalksSpread) {
  const Problem p = packed({20, 12, 40});  // 2, 1 and 3 chunks of 16; 2 heads
  const Window w = whole_window(p, storage());
  ASSERT_EQ(w.chunks, 6);
  EXPECT_DOUBLE_EQ(launch_steps(p, w, 0), 3.0);    // all at once: the longest walk
  EXPECT_DOUBLE_EQ(launch_steps(p, w, 100), 3.0);  // 0.12 steps spread, still the longest walk
  EXPECT_DOUBLE_EQ(launch_steps(p, w, 2), 6.0);    // 6 chunks x 2 heads over 2 at a time
  // A window's piece of a sequence counts, not the whole sequence.
  const std::vector<Window> windows = small_windows(p, storage());
  ASSERT_GE(windows.size(), 3u);
  for (const Window& piece : windows) EXPECT_LE(launch_steps(p, piece, 0), double(piece.chunks));
}

// Windows in the middle of a long sequence (no sequence starts in them) add no
// walk: they are gathered only while that shortens the launches, and once the
// long sequence leads its group they stay alone.
TEST(WindowGroups, TheMiddleOfALongSequenceIsGatheredOnlyWhileItShortensTheLaunches) {
  const Problem p = packed({60, 400, 9, 30, 7});
  const CaseStorage s = storage();
  const std::vector<Window> windows = small_windows(p, s, 4);
  const GroupLimits limits = unlimited();
  const std::vector<WindowGroup> groups = group_windows(p, s, windows, limits);
  expect_groups_cover(windows, groups);
  const auto steps = [&](const Window& w) { return launch_steps(p, w, limits.parallel_walks); };
  std::size_t gathered = 0, alone = 0;
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const WindowGroup& g = groups[gi];
    Window before = windows[g.first];
    for (std::size_t i = g.first + 1; i < g.last; ++i) {
      if (starts_no_sequence(windows[i])) {
        EXPECT_LT(steps(merge_windows(before, windows[i])), steps(before) + steps(windows[i])) << "window " << i;
        ++gathered;
      }
      before = merge_windows(before, windows[i]);
    }
    if (gi > 0 && starts_no_sequence(windows[g.first])) {  // the group before was open: no gain, no gather
      const Window& prev = groups[gi - 1].window;
      EXPECT_GE(steps(merge_windows(prev, windows[g.first])), steps(prev) + steps(windows[g.first]))
          << "window " << g.first;
      ++alone;
    }
  }
  EXPECT_GE(gathered, 1u) << "the first pieces of the long sequence run beside the short ones";
  EXPECT_GE(alone, 2u) << "the long sequence's middle should stay in windows of its own";
  // One sequence alone: nothing runs beside it, every window is its own launch.
  const Problem one = packed({500});
  const std::vector<Window> ow = small_windows(one, s);
  ASSERT_GT(ow.size(), 3u);
  EXPECT_EQ(group_windows(one, s, ow, limits).size(), ow.size());
}

// The 65536-token case of BENCHMARKS.md ("A packed case in `run`"), its
// lengths over 4 with chunks of 16 (the same chunks), 16 heads, a GPU of 132
// multiprocessors, about 21 windows: the launches add up to at most 1.3x the
// whole case's steps (cut at every window with no new sequence, they were 3.3x).
TEST(WindowGroups, APackedCaseOfUnevenLengthsLaunchesAboutAsLongAsWhole) {
  const std::vector<std::int64_t> lengths = {1901, 1498, 3284, 737, 2860, 5880, 162, 419, 6756, 869, 588,
                                             5562, 225,  3996, 899, 1978, 3209, 1709, 200, 2518, 3240, 124,
                                             2240, 1260, 2960, 76,  1765, 2127, 1404, 1319, 59,  3712};
  std::vector<std::int64_t> quarter;
  for (std::int64_t n : lengths) quarter.push_back((n + 3) / 4);
  Problem p = packed(quarter);
  p.H = 16;
  const CaseStorage s = storage();
  const Window whole = whole_window(p, s);
  const WindowBytes wb = window_bytes(p, s, whole);
  const std::int64_t limit = std::max({wb.input, wb.output, wb.device_extra}) / 20;
  const std::vector<Window> windows = plan_windows(p, s, WindowLimits{limit, limit, limit});
  ASSERT_GE(windows.size(), 18u);
  ASSERT_LE(windows.size(), 30u);
  GroupLimits gpu = unlimited();
  gpu.walks = 8 * 132;
  gpu.parallel_walks = 132;
  const std::vector<WindowGroup> groups = group_windows(p, s, windows, gpu);
  expect_groups_cover(windows, groups);
  double launched = 0;
  for (const WindowGroup& g : groups) launched += launch_steps(p, g.window, gpu.parallel_walks);
  EXPECT_LE(launched, 1.3 * launch_steps(p, whole, gpu.parallel_walks)) << groups.size() << " launches";
}

TEST(WindowGroups, PlainCasesAndDisabledLimitsKeepEveryWindow) {
  Problem plain;
  plain.B = 2; plain.T = 1000; plain.H = 2; plain.DK = 16; plain.DV = 16; plain.chunk = 16;
  const CaseStorage s = storage();
  const std::vector<Window> windows = small_windows(plain, s);
  ASSERT_GT(windows.size(), 2u);
  EXPECT_EQ(group_windows(plain, s, windows, unlimited()).size(), windows.size());
  const Problem p = packed({300, 17, 130});
  const std::vector<Window> pw = small_windows(p, s);
  GroupLimits off = unlimited();
  off.enabled = false;
  EXPECT_EQ(group_windows(p, s, pw, off).size(), pw.size());
}

TEST(WindowGroups, MergeNeedsAdjacentWindows) {
  const Problem p = packed({100, 100});
  const std::vector<Window> windows = small_windows(p, storage());
  ASSERT_GE(windows.size(), 3u);
  EXPECT_THROW(merge_windows(windows[0], windows[2]), std::logic_error);
  const Window m = merge_windows(windows[0], windows[1]);
  EXPECT_EQ(m.continues, windows[0].continues);
  EXPECT_EQ(m.carries, windows[1].carries);
  EXPECT_EQ(m.seq_end, windows[1].seq_end);
}

}  // namespace
}  // namespace linattn
