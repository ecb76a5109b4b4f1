// The tensor-core launcher's segment split (docs/ARCHITECTURE.md,
// "Tensor-core segment split"), case by case: the widest block, how many
// segments a sequence is cut into, and how many chunks each holds. Plain
// arithmetic, so the CPU build checks what the CUDA launcher will do.
#include "kernels/cuda/segment_split.hpp"

#include <gtest/gtest.h>

namespace linattn::cuda {
namespace {


// The H200 has 132 SMs. One sequence of 32768 tokens (512 chunks), 32 heads,
// DV 128: 32 blocks, so 132 / 32 = 4 segments (the measured best).
TEST(SegmentSplit, OneLongSequenceIsCutToFillTheSms) {
  EXPECT_EQ(choose_segments(1, 32, 512, 128, 128, 132), 4);
}

// Two sequences of 16384 tokens: 64 blocks, 2 segments.
TEST(SegmentSplit, TwoSequencesAreCutInTwo) {
  EXPECT_EQ(choose_segments(2, 32, 256, 128, 128, 132), 2);
}

// 8 x 32 heads at DV 128 are 256 blocks, already more than the SMs.
TEST(SegmentSplit, ManySequencesAreNotCut) {
  EXPECT_EQ(choose_segments(8, 32, 256, 128, 128, 132), 1);
}

// 4 blocks would allow 33 segments, but a segment holds at least 8 chunks:
// 20 chunks give 2 segments, 15 chunks none.
TEST(SegmentSplit, ShortSequencesKeepEightChunksPerSegment) {
  EXPECT_EQ(choose_segments(1, 4, 20, 128, 64, 132), 2);
  EXPECT_EQ(choose_segments(1, 4, 15, 128, 64, 132), 1);
}

// DV 96 runs in one padded block of 128 (tile_rules.hpp): 8 heads are 8
// blocks, 132 / 8 = 16 segments, but 100 chunks hold 12 segments of 8; DV 80
// in blocks of 32 (three a head): 24 blocks, 132 / 24 = 5 segments.
TEST(SegmentSplit, BlocksCountedAtTheWidestWidth) {
  EXPECT_EQ(choose_segments(1, 8, 100, 128, 96, 132), 12);
  EXPECT_EQ(choose_segments(1, 8, 100, 128, 80, 132), 5);
}

// DK 256 allows blocks of 32 columns only: DV 128 is 4 blocks a head,
// 8 heads 32 blocks, 132 / 32 = 4 segments (DK 128: one block a head, 16).
TEST(SegmentSplit, BlocksCountedAtTheDkTilesWidth) {
  EXPECT_EQ(choose_segments(1, 8, 200, 256, 128, 132), 4);
  EXPECT_EQ(choose_segments(1, 8, 200, 128, 128, 132), 16);
}

// Blocks of 32 columns on a 64-row DK tile: four to an SM. 8,8192,16,32 is
// 128 blocks, 132 * 4 / 128 = 4 segments (the measured best); DK 60's blocks
// of 64 columns fill an SM alone (128 blocks: whole sequences), and so do
// DK 128's blocks of 32 (DV 32: 128 blocks, whole).
TEST(SegmentSplit, SmallBlocksShareAnSm) {
  EXPECT_EQ(blocks_per_sm(32, 32), 4);
  EXPECT_EQ(choose_segments(8, 16, 128, 32, 32, 132), 4);
  EXPECT_EQ(choose_segments(8, 16, 128, 60, 60, 132), 1);
  EXPECT_EQ(choose_segments(8, 16, 128, 128, 32, 132), 1);
  EXPECT_EQ(choose_segments(8, 16, 128, 96, 96, 132), 1);
}

TEST(SegmentSplit, EvenCut) {
  const SegmentSplit s = split_segments(512, 4);
  EXPECT_EQ(s.seg_chunks, 128);
  EXPECT_EQ(s.segments, 4);
}

// 20 chunks in 8: ceil(20 / 8) = 3 chunks each, which needs only 7 segments (3 x 6 + 2).
TEST(SegmentSplit, CountRecomputedSoThatNoSegmentIsEmpty) {
  const SegmentSplit s = split_segments(20, 8);
  EXPECT_EQ(s.seg_chunks, 3);
  EXPECT_EQ(s.segments, 7);
  const SegmentSplit t = split_segments(9, 4);  // 3 + 3 + 3
  EXPECT_EQ(t.seg_chunks, 3);
  EXPECT_EQ(t.segments, 3);
}

TEST(SegmentSplit, LastSegmentShorter) {
  const SegmentSplit s = split_segments(10, 3);  // 4 + 4 + 2
  EXPECT_EQ(s.seg_chunks, 4);
  EXPECT_EQ(s.segments, 3);
}

// More segments asked than chunks (bench --segments): one chunk each.
TEST(SegmentSplit, MoreSegmentsThanChunks) {
  const SegmentSplit s = split_segments(5, 8);
  EXPECT_EQ(s.seg_chunks, 1);
  EXPECT_EQ(s.segments, 5);
}

}  // namespace
}  // namespace linattn::cuda
