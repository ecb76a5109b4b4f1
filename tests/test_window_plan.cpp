// The pipeline's decisions, unit by unit: how a case is cut into windows
// (contiguous, at chunk boundaries of each sequence, within the byte limits,
// whole output chunks where they fit, the state carried exactly where a
// sequence is cut), the window's own problem, the memory-size parser, the
// text made safe to print, and the progress status line.
#include "core/printable.hpp"
#include "pipeline/memory_budget.hpp"
#include "pipeline/progress_reporter.hpp"
#include "pipeline/window_plan.hpp"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

namespace linattn {
namespace {

using pipeline::parse_memory_size;

CaseStorage storage(bool snapshots = true, bool initial = false, bool normalize = false) {
  CaseStorage s;
  s.input = DType::bf16;
  s.output = DType::bf16;
  s.accumulation = DType::f32;
  s.snapshot = DType::f32;
  s.snapshots = snapshots;
  s.has_initial_state = s.has_initial_z = initial;
  s.normalize = normalize;
  return s;
}

WindowLimits limits(std::int64_t bytes) { return {bytes, bytes, bytes}; }

// The windows tile the tokens in order, start at chunk boundaries of their
// sequence, number the chunks consecutively, and each fits the limits.
void expect_valid_plan(const Problem& p, const CaseStorage& s, const std::vector<Window>& windows,
                       const WindowLimits& l) {
  ASSERT_FALSE(windows.empty());
  std::int64_t t = 0, chunk = 0;
  for (const Window& w : windows) {
    EXPECT_EQ(w.t0, t);
    EXPECT_GT(w.t1, w.t0);
    EXPECT_EQ(w.chunk0, chunk);
    const Problem wp = window_problem(p, w);
    EXPECT_EQ(wp.T, w.tokens());
    EXPECT_EQ(p.varlen() ? wp.total_chunks() : wp.num_chunks(), w.chunks);
    const WindowBytes b = window_bytes(p, s, w);
    EXPECT_LE(b.input, l.input);
    EXPECT_LE(b.output, l.output);
    EXPECT_LE(b.device_extra, l.device_extra);
    if (p.varlen()) {
      // Where the window starts: the start of sequence seq_begin, or a chunk
      // boundary inside it (then its state is carried in).
      const std::int64_t start = p.cu_seqlens[w.seq_begin];
      EXPECT_EQ(w.continues, w.t0 > start);
      EXPECT_EQ((w.t0 - start) % p.chunk, 0);
      EXPECT_EQ(w.carries, w.t1 < p.cu_seqlens[w.seq_end]);
      EXPECT_LT(w.t0, p.cu_seqlens[w.seq_begin + 1]);
      EXPECT_GT(w.t1, p.cu_seqlens[w.seq_end - 1]);
    } else {
      EXPECT_EQ(w.t0 % p.chunk, 0);
      EXPECT_EQ(w.continues, w.t0 > 0);
      EXPECT_EQ(w.carries, w.t1 < p.T);
    }
    t = w.t1;
    chunk += w.chunks;
  }
  EXPECT_EQ(t, p.T);
  EXPECT_EQ(chunk, p.varlen() ? p.total_chunks() : p.num_chunks());
}

TEST(WindowPlan, PlainBatchFillsTheLimitInWholeGranules) {
  Problem p;
  p.B = 2; p.T = 1000; p.H = 2; p.DK = 16; p.DV = 32; p.chunk = 16;  // 62 chunks and 8 tokens
  const CaseStorage s = storage();
  // One chunk of both rows: 2*16*2*64*2 = 8 KiB in; 2*16*2*32*2 + 2*2*16*32*4 = 12 KiB out (+ final rows 8 KiB).
  const WindowLimits l = limits(100 * 1024);
  const std::vector<Window> windows = plan_windows(p, s, l, 3);
  expect_valid_plan(p, s, windows, l);
  for (std::size_t i = 0; i + 1 < windows.size(); ++i) EXPECT_EQ(windows[i].chunks % 3, 0) << i;
  // The fewest windows: one more granule would not fit.
  Window bigger = windows[0];
  bigger.t1 = std::min(p.T, bigger.t1 + 3 * p.chunk);
  bigger.chunks += 3;
  bigger.t0 = 0;
  const WindowBytes b = window_bytes(p, s, bigger);
  EXPECT_TRUE(b.input > l.input || b.output > l.output) << "windows of " << windows[0].chunks << " chunks leave room";
  EXPECT_EQ(windows.back().t1, 1000);
}

TEST(WindowPlan, OneWindowWhenTheCaseFits) {
  Problem p;
  p.B = 3; p.T = 77; p.H = 1; p.DK = 8; p.DV = 8; p.chunk = 32;
  const std::vector<Window> windows = plan_windows(p, storage(), limits(std::int64_t(1) << 30), 4);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].t1, 77);
  EXPECT_FALSE(windows[0].continues);
  EXPECT_FALSE(windows[0].carries);
}

TEST(WindowPlan, GranuleFallsBackToOneChunk) {
  Problem p;
  p.B = 1; p.T = 256; p.H = 1; p.DK = 16; p.DV = 16; p.chunk = 16;
  const CaseStorage s = storage(false);
  // Room for about two chunks: a granule of 8 does not fit, so windows are cut chunk by chunk.
  const std::int64_t one_chunk = window_bytes(p, s, Window{0, 16, 0, 1, false, true, 0, 1}).input;
  const WindowLimits l = limits(2 * one_chunk + 2048);
  const std::vector<Window> windows = plan_windows(p, s, l, 8);
  expect_valid_plan(p, s, windows, l);
  EXPECT_GT(windows.size(), 4u);
  EXPECT_NE(windows[0].chunks % 8, 0);
}

TEST(WindowPlan, PackedWindowsCarryExactlyWhereASequenceIsCut) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    Problem p;
    p.B = 1; p.H = 2; p.DK = 16; p.DV = 16; p.chunk = 16;
    p.cu_seqlens = {0};
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) p.cu_seqlens.push_back(p.cu_seqlens.back() + 1 + static_cast<std::int64_t>(rng() % 150));
    p.T = p.cu_seqlens.back();
    const CaseStorage s = storage(true, trial % 2 == 0, trial % 3 == 0);
    const WindowLimits l = limits(32 * 1024 + static_cast<std::int64_t>(rng() % (64 * 1024)));
    SCOPED_TRACE("trial " + std::to_string(trial));
    const std::vector<Window> windows = plan_windows(p, s, l);
    expect_valid_plan(p, s, windows, l);
    // A sequence cut between two windows is carried out of the first and into the second.
    for (std::size_t i = 0; i + 1 < windows.size(); ++i) EXPECT_EQ(windows[i].carries, windows[i + 1].continues);
  }
}

// Context parallel streams each rank's segment (a Window of the case, cut at
// chunk boundaries of its sequences): the windows of every segment, one
// after the other, are a valid plan of the whole case, continuing and
// carrying across the segments' cuts as across the windows'.
TEST(WindowPlan, TheWindowsOfConsecutivePartsPlanTheWholeCase) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    Problem p;
    p.B = trial % 2 == 0 ? 1 : 3; p.H = 2; p.DK = 16; p.DV = 16; p.chunk = 16;
    if (trial % 2 == 0) {
      p.cu_seqlens = {0};
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < n; ++i) p.cu_seqlens.push_back(p.cu_seqlens.back() + 1 + static_cast<std::int64_t>(rng() % 300));
      p.T = p.cu_seqlens.back();
    } else {
      p.T = 1 + static_cast<std::int64_t>(rng() % 600);
    }
    const CaseStorage s = storage(true, trial % 3 == 0, trial % 4 == 0);
    const WindowLimits l = limits(48 * 1024 + static_cast<std::int64_t>(rng() % (32 * 1024)));
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Parts: a whole-case plan's windows of one chunk each, gathered in runs of random length.
    const std::vector<Window> chunks = plan_windows(p, s, limits(p.H * p.DK * p.DV * 4 * 3 * p.B + 3 * 4096));
    std::vector<Window> windows;
    for (std::size_t i = 0; i < chunks.size();) {
      const std::size_t n = std::min(chunks.size() - i, 1 + static_cast<std::size_t>(rng() % 5));
      Window part = chunks[i];
      part.t1 = chunks[i + n - 1].t1;
      part.seq_end = chunks[i + n - 1].seq_end;
      part.carries = chunks[i + n - 1].carries;
      part.chunks = chunks[i + n - 1].chunk0 + chunks[i + n - 1].chunks - part.chunk0;
      const std::vector<Window> mine = plan_part_windows(p, part, s, l);
      ASSERT_FALSE(mine.empty());
      EXPECT_EQ(mine.front().continues, part.continues);
      EXPECT_EQ(mine.back().carries, part.carries);
      windows.insert(windows.end(), mine.begin(), mine.end());
      i += n;
    }
    expect_valid_plan(p, s, windows, l);
    for (std::size_t i = 0; i + 1 < windows.size(); ++i) EXPECT_EQ(windows[i].carries, windows[i + 1].continues);
  }
}

TEST(WindowPlan, WindowProblemOfAPackedWindowStartsItsPiecesAtZero) {
  Problem p;
  p.B = 1; p.H = 1; p.DK = 8; p.DV = 8; p.chunk = 16;
  p.cu_seqlens = {0, 40, 45, 100};
  p.T = 100;
  Window w{32, 64, 0, 3, true, true, 2, 0};
  w.chunks = 4;  // 32..40 (the end of sequence 0), 40..45, 45..61, 61..64
  const Problem wp = window_problem(p, w);
  EXPECT_EQ(wp.cu_seqlens, (std::vector<std::int64_t>{0, 8, 13, 32}));
  EXPECT_EQ(wp.total_chunks(), 4);
}

// window_problem builds its problem field by field (plain_problem), not from a
// copy of the whole case: nothing but T and the sequences may change.
TEST(WindowPlan, WindowProblemKeepsEverythingElse) {
  Problem p;
  p.B = 3; p.T = 100; p.H = 2; p.DK = 8; p.DV = 24; p.chunk = 32; p.scale = 0.125;
  for (const bool packed : {false, true}) {
    if (packed) {
      p.B = 1;
      p.cu_seqlens = {0, 40, 45, 100};
    }
    const Problem wp = window_problem(p, Window{32, 64, 0, 3, true, true, 1, packed ? 3 : 1});  // tokens 32..64
    EXPECT_EQ(wp.B, p.B);
    EXPECT_EQ(wp.T, 32);
    EXPECT_EQ(wp.H, p.H);
    EXPECT_EQ(wp.DK, p.DK);
    EXPECT_EQ(wp.DV, p.DV);
    EXPECT_EQ(wp.chunk, p.chunk);
    EXPECT_EQ(wp.scale, p.scale);
    EXPECT_EQ(wp.varlen(), packed);
  }
}

TEST(WindowPlan, TooSmallABudgetSaysWhatOneChunkNeeds) {
  Problem p;
  p.B = 8; p.T = 128; p.H = 4; p.DK = 64; p.DV = 64; p.chunk = 64;
  EXPECT_THROW(plan_windows(p, storage(), limits(4096)), BudgetError);
  try {
    plan_windows(p, storage(), limits(4096));
  } catch (const BudgetError& e) {
    EXPECT_NE(std::string(e.what()).find("raise --memory-budget"), std::string::npos);
  }
}

TEST(MemoryBudget, ParsesSizes) {
  EXPECT_EQ(parse_memory_size("512M"), 512ll << 20);
  EXPECT_EQ(parse_memory_size("8G"), 8ll << 30);
  EXPECT_EQ(parse_memory_size("1.5G"), 3ll << 29);
  EXPECT_EQ(parse_memory_size("2GiB"), 2ll << 30);
  EXPECT_EQ(parse_memory_size("64mb"), 64ll << 20);
  EXPECT_EQ(parse_memory_size("2097152"), 2097152);
  for (const char* bad : {"", "G", "12X", "-1G", "1k", "nanG", "1e30T"}) EXPECT_THROW(parse_memory_size(bad), std::invalid_argument) << bad;
}

TEST(MemoryBudget, SplitKeepsSlotsWithinTheBudget) {
  for (bool host : {false, true}) {
    const pipeline::BudgetSplit s = pipeline::split_budget(700ll << 20, host);
    const std::int64_t slots = (s.input_slots + s.output_slots) * s.slot_bytes + s.device_extra;
    EXPECT_LE(slots + s.reserve_bytes, 700ll << 20);
    // A share stays out of the slots for the libraries' own buffers.
    EXPECT_GE((700ll << 20) - slots, s.slot_bytes);
    EXPECT_EQ(s.reserve_bytes, s.slot_bytes);
    EXPECT_EQ(s.slot_bytes % 4096, 0);
  }
  EXPECT_EQ(pipeline::split_budget(64ll << 30, false).slot_bytes, 64ll << 20);  // the window cap
}

TEST(Printable, EscapesWhatATerminalWouldActOn) {
  EXPECT_EQ(printable("case0"), "case0");
  EXPECT_EQ(printable("a\nb\tc"), "a b c");
  EXPECT_EQ(printable(std::string("x\x1b[31my")), "x\\x1b[31my");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");            // valid UTF-8 stays
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");                 // not UTF-8
  EXPECT_EQ(printable("\xc3"), "\\xc3");                          // cut sequence
  EXPECT_EQ(printable("\xc2\x9b" "2J"), "\\xc2\\x9b2J");           // C1 control (CSI)
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");        // a surrogate
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
}

TEST(ProgressReporter, StatusLine) {
  EXPECT_EQ(ProgressReporter::status(0.5, 2.5e6, 3.25e9, 11.2), " 50% |##########..........| 2.50 Mtok/s  3.25 GB/s  ETA 12 s");
  EXPECT_EQ(ProgressReporter::status(0.0, 0, 0, NAN), "  0% |....................| 0.00 Mtok/s  0.00 GB/s  ETA -");
}

// Progress counts every token of every batch row: half the windows of a
// 3-row case are half of it, not a sixth (the bar once stopped at 1/B).
TEST(ProgressReporter, FractionCountsEveryBatchRow) {
  Problem p;
  p.B = 3; p.T = 1024; p.H = 2; p.DK = p.DV = 16; p.chunk = 64;
  const std::vector<Window> windows = plain_windows(p, 4);  // 4 windows of 256 tokens
  ASSERT_EQ(windows.size(), 4u);
  std::int64_t sum = 0;
  for (const Window& w : windows) sum += window_tokens(p, w);
  EXPECT_EQ(sum, case_tokens(p));
  EXPECT_EQ(case_tokens(p), 3 * 1024);

  std::ostringstream lines, bar;
  ProgressReporter progress(lines, bar, /*bar_is_terminal=*/false, /*interval_seconds=*/0);
  progress.start_case("[1/1] in.h5", case_tokens(p), 0);
  progress.advance(window_tokens(p, windows[0]), 0);
  progress.advance(window_tokens(p, windows[1]), 0);
  std::istringstream drawn(bar.str());
  std::string line, last;
  while (std::getline(drawn, line)) last = line;
  EXPECT_EQ(last.rfind("[1/1] in.h5   50% |##########..........|", 0), 0u) << bar.str();

  // A packed batch is one row: its windows add up to T.
  Problem packed = p;
  packed.B = 1;
  packed.T = 300;
  packed.cu_seqlens = {0, 100, 300};
  Window w;
  w.t0 = 64;
  w.t1 = 200;
  EXPECT_EQ(window_tokens(packed, w), 136);
  EXPECT_EQ(case_tokens(packed), 300);
}

}  // namespace
}  // namespace linattn
