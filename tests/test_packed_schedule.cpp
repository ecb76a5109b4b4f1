// The tensor-core kernel's work list for packed batches (packed_schedule.hpp,
// docs/ARCHITECTURE.md "Packed batches on tensor cores"): every chunk of every
// sequence walked exactly once, walks inside one sequence, longest first, long
// sequences split with the sums their later segments need. Plain arithmetic,
// so the CPU build checks what the CUDA launcher will do.
#include "kernels/cuda/packed_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

namespace linattn::cuda {
namespace {

constexpr int kSms = 132;  // the H200's

std::vector<std::int64_t> offsets(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> cu{0};
  for (std::int64_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

int chunks(std::int64_t length) { return static_cast<int>((length + 63) / 64); }

// The invariants every schedule keeps, whatever the split.
void expect_covers_every_chunk_once(const std::vector<std::int64_t>& cu, const PackedSchedule& s) {
  const int N = static_cast<int>(cu.size()) - 1;
  std::vector<std::vector<int>> seen(N);
  std::int64_t h0 = 0;
  std::vector<std::int64_t> h_chunk0(N);
  for (int n = 0; n < N; ++n) {
    seen[n].assign(chunks(cu[n + 1] - cu[n]), 0);
    h_chunk0[n] = h0;
    h0 += chunks(cu[n + 1] - cu[n]);
  }
  std::vector<int> walks_of(N, 0);
  for (const TensorCoreWork& w : s.walks) {
    ASSERT_GE(w.seq, 0);
    ASSERT_LT(w.seq, N);
    EXPECT_EQ(w.token0, cu[w.seq]);
    EXPECT_EQ(w.length, cu[w.seq + 1] - cu[w.seq]);
    EXPECT_EQ(w.h_chunk0, h_chunk0[w.seq]);
    EXPECT_LE(0, w.c_begin);
    EXPECT_LE(w.c_begin, w.c_end);
    EXPECT_LE(w.c_end, chunks(w.length));
    for (int c = w.c_begin; c < w.c_end; ++c) ++seen[w.seq][c];
    ++walks_of[w.seq];
  }
  for (int n = 0; n < N; ++n) {
    EXPECT_GE(walks_of[n], 1) << "sequence " << n << " has no block (its final state would stay unwritten)";
    for (std::size_t c = 0; c < seen[n].size(); ++c) EXPECT_EQ(seen[n][c], 1) << "sequence " << n << " chunk " << c;
  }
  for (std::size_t i = 1; i < s.walks.size(); ++i)
    EXPECT_GE(s.walks[i - 1].c_end - s.walks[i - 1].c_begin, s.walks[i].c_end - s.walks[i].c_begin) << "longest first";
  // Segment j > 0 of a sequence reads sums sum_base .. sum_base + j - 1: the sums of its
  // segments 0 .. j - 1, each computed once, over exactly those chunks.
  std::map<int, const TensorCoreWork*> sum_at;
  for (const TensorCoreWork& w : s.sums) {
    const int row = w.sum_base + w.seg;
    EXPECT_TRUE(sum_at.emplace(row, &w).second) << "sum row " << row << " written twice";
    EXPECT_LT(row, s.sum_rows);
  }
  EXPECT_EQ(static_cast<int>(sum_at.size()), s.sum_rows);
  for (const TensorCoreWork& w : s.walks)
    for (int j = 0; j < w.seg; ++j) {
      const auto it = sum_at.find(w.sum_base + j);
      ASSERT_NE(it, sum_at.end()) << "segment " << w.seg << " of sequence " << w.seq << " lacks the sum of segment " << j;
      EXPECT_EQ(it->second->seq, w.seq);
      EXPECT_EQ(it->second->seg, j);
      EXPECT_LE(it->second->c_end, w.c_begin);
    }
}

// fla's ragged shapes: lengths 1, 63, 64, 65 and 300 give 1, 1, 1, 2 and 5 chunks.
TEST(PackedSchedule, RaggedLengthsTakeWholeChunks) {
  const auto cu = offsets({1, 63, 64, 65, 300});
  const PackedSchedule s = schedule_packed(cu, 64, 4, 128, 64, kSms, 0);
  expect_covers_every_chunk_once(cu, s);
  EXPECT_EQ(s.walks.size(), 5u);  // far below a wave: nothing to split
  EXPECT_EQ(s.sum_rows, 0);
  EXPECT_EQ(s.walks.front().seq, 4);  // the 5-chunk sequence first
  EXPECT_EQ(s.walks.front().h_chunk0, 1 + 1 + 1 + 2);
}

// The measured batches of BENCHMARKS.md ("Packed batches"), uniform random
// cuts: 8 sequences of 32,768 tokens at H 32, D 64 are left whole (splitting
// the longest, 153 chunks, measured slower: 0.33 against 0.30 ms); 32 of
// 65,536 at H 16, D 128 are split (its longest, 175 chunks, is above the
// 128 steps per SM: 0.61-0.63 against 0.69 ms whole).
TEST(PackedSchedule, MeasuredBatchesSplitWhereItPaid) {
  const std::vector<std::int64_t> eight = {1583, 791, 2570, 5668, 2326, 8392, 9730, 1708};
  const auto cu8 = offsets(eight);
  const PackedSchedule s8 = schedule_packed(cu8, 64, 32, 128, 64, kSms, 0);
  expect_covers_every_chunk_once(cu8, s8);
  EXPECT_EQ(s8.max_segments, 1);
  EXPECT_EQ(s8.walks.front().c_end, 153);

  const std::vector<std::int64_t> thirty_two = {2458, 707,  637,  72,   705,  169,  885,   312,  224,  1945, 1773,
                                                4184, 560,  1142, 5450, 2743, 1910, 1530,  416,  598,  4836, 1864,
                                                994,  944,  1136, 4466, 11164, 365, 5430, 2474, 27,   3416};
  const auto cu32 = offsets(thirty_two);
  const PackedSchedule s32 = schedule_packed(cu32, 64, 16, 128, 128, kSms, 0);
  expect_covers_every_chunk_once(cu32, s32);
  EXPECT_GT(s32.max_segments, 1);
  const int longest_walk = s32.walks.front().c_end - s32.walks.front().c_begin;
  EXPECT_LE(longest_walk, 128) << "the longest walk should come down to the steps per SM";
}

// One sequence holds 90% of the tokens: it is cut well below its 563 chunks,
// to about the batch's steps per SM, so that it no longer sets the time alone.
TEST(PackedSchedule, OneSequenceWithNinetyPercentIsSplit) {
  const auto cu = offsets({2000, 36000, 1000, 1000});  // 40,000 tokens, 8 heads, DV 64: 627 chunks, 38 steps per SM
  const PackedSchedule s = schedule_packed(cu, 64, 8, 128, 64, kSms, 0);
  expect_covers_every_chunk_once(cu, s);
  EXPECT_GE(s.max_segments, 8);
  for (const TensorCoreWork& w : s.walks) EXPECT_LE(w.c_end - w.c_begin, 2 * 38);
}

// Lengths 1000x apart: the longest walk comes down from the longest sequence's
// 1000 chunks to below the batch's 166 steps per SM.
TEST(PackedSchedule, ThousandfoldLengthsAreBalanced) {
  std::vector<std::int64_t> lengths;
  for (int i = 0; i < 200; ++i) lengths.push_back(64 + i % 7);
  lengths.push_back(64000);
  lengths.push_back(70);
  const auto cu = offsets(lengths);
  const PackedSchedule s = schedule_packed(cu, 64, 16, 128, 128, kSms, 0);
  expect_covers_every_chunk_once(cu, s);
  EXPECT_GT(s.max_segments, 1);
  for (const TensorCoreWork& w : s.walks) EXPECT_LE(w.c_end - w.c_begin, 166);
}

// The model's choice, case by case: no split when every sequence is short
// against the batch's steps per SM; whole and split costs as the comment of
// choose_packed_split states them.
TEST(PackedSchedule, SplitModel) {
  EXPECT_EQ(choose_packed_split({}, 4, 128, 64, kSms), 0);
  EXPECT_EQ(choose_packed_split(std::vector<int>(500, 20), 16, 128, 128, kSms), 0);  // 20 chunks each, 1212 steps per SM
  // 15 chunks alone: whole 15 t; in two (8 + 7): 8 + 0.5 * 8 = 12 t. Segments keep 8 chunks: no finer cut.
  EXPECT_EQ(choose_packed_split({15}, 1, 128, 64, kSms), 8);
  // One sequence of 1000 chunks on 16 heads (16,000 steps, 121 per SM): whole 1000 t; in 10
  // pieces of 100, max(100, 121) + 0.5 * max(100, 9 * 100 * 16 / 132) = 175.5 t, the cheapest
  // (9 pieces of 112: 177 t; 64 pieces of 16: 182 t, the sum pass's steps grow).
  EXPECT_EQ(choose_packed_split({1000}, 16, 128, 128, kSms), 100);
}

// segments = 1 never splits; N > 1 cuts every sequence into N (fewer when shorter).
TEST(PackedSchedule, ExplicitSegmentCounts) {
  const auto cu = offsets({64 * 20, 64 * 2, 5});
  const PackedSchedule one = schedule_packed(cu, 64, 2, 128, 64, kSms, 1);
  expect_covers_every_chunk_once(cu, one);
  EXPECT_EQ(one.walks.size(), 3u);
  EXPECT_EQ(one.sum_rows, 0);
  const PackedSchedule eight = schedule_packed(cu, 64, 2, 128, 64, kSms, 8);
  expect_covers_every_chunk_once(cu, eight);
  EXPECT_EQ(eight.max_segments, 7);  // 20 chunks in 8: 7 segments of 3 (split_segments)
  EXPECT_EQ(eight.walks.size(), 7u + 2u + 1u);
  EXPECT_EQ(eight.sum_rows, 6 + 1);
}

// An empty sequence still gets a block: it writes its final state (the initial one).
TEST(PackedSchedule, EmptySequenceStillHasAWalk) {
  const auto cu = offsets({100, 0, 30});
  const PackedSchedule s = schedule_packed(cu, 64, 1, 128, 32, kSms, 0);
  expect_covers_every_chunk_once(cu, s);
  EXPECT_EQ(s.walks.size(), 3u);
}

}  // namespace
}  // namespace linattn::cuda
