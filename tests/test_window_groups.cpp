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

// Windows of about two chunks each: most sequences are cut.
std::vector<Window> small_windows(const Problem& p, const CaseStorage& s) {
  const std::int64_t limit = 2 * window_bytes(p, s, Window{0, 16, 0, 1, false, true, 0, 1}).input + 2048;
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

// Windows in the middle of a long sequence (no sequence starts in them) add
// no walk: they are not gathered, and the windows around them still are.
TEST(WindowGroups, WindowsInsideOneSequenceStayAlone) {
  const Problem p = packed({20, 12, 400, 9, 30, 7});
  const CaseStorage s = storage();
  const std::vector<Window> windows = small_windows(p, s);
  const std::vector<WindowGroup> groups = group_windows(p, s, windows, unlimited());
  expect_groups_cover(windows, groups);
  std::size_t gathered = 0;
  for (const WindowGroup& g : groups) {
    if (g.parts() > 1) ++gathered;
    for (std::size_t i = g.first + 1; i < g.last; ++i)
      EXPECT_LT(windows[i].fresh_begin(), windows[i].seq_end) << "window " << i << " starts no sequence";
  }
  for (std::size_t i = 0; i < windows.size(); ++i)
    if (windows[i].fresh_begin() == windows[i].seq_end) {
      EXPECT_TRUE(std::any_of(groups.begin(), groups.end(), [&](const WindowGroup& g) { return g.first == i; }))
          << "window " << i << " (inside one sequence) should start a group of its own";
    }
  EXPECT_GE(gathered, 1u) << "the short sequences around the long one should still be gathered";
  EXPECT_GT(groups.size(), 3u);
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
