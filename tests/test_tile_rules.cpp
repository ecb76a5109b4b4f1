// The tensor-core kernels' tile rules (src/kernels/cuda/tile_rules.hpp), case
// by case: which DK tile a head runs in, how wide its DV blocks may be, how
// DV is padded, and when the exact (unchecked) kernels apply. Plain
// arithmetic, so the CPU build checks what the CUDA launcher will do.
#include "kernels/cuda/tile_rules.hpp"

#include <gtest/gtest.h>

namespace linattn::cuda {
namespace {

TEST(TileRules, DkTileIsTheSmallestThatHoldsTheHead) {
  EXPECT_EQ(dk_tile(1), 64);
  EXPECT_EQ(dk_tile(16), 64);
  EXPECT_EQ(dk_tile(60), 64);
  EXPECT_EQ(dk_tile(64), 64);
  EXPECT_EQ(dk_tile(65), 128);
  EXPECT_EQ(dk_tile(100), 128);
  EXPECT_EQ(dk_tile(128), 128);
  EXPECT_EQ(dk_tile(192), 256);
  EXPECT_EQ(dk_tile(256), 256);
  EXPECT_EQ(dk_tile(257), 0);
  EXPECT_EQ(dk_tile(0), 0);
}

// fp32 heads the kernels take whole (1), as two halves of their keys (2, even
// DK past 128), or not at all (0: odd past 128, or past 256).
TEST(TileRules, Fp32KeyParts) {
  EXPECT_EQ(fp32_key_parts(1), 1);
  EXPECT_EQ(fp32_key_parts(100), 1);
  EXPECT_EQ(fp32_key_parts(128), 1);
  EXPECT_EQ(fp32_key_parts(129), 0);
  EXPECT_EQ(fp32_key_parts(130), 2);
  EXPECT_EQ(fp32_key_parts(192), 2);
  EXPECT_EQ(fp32_key_parts(255), 0);
  EXPECT_EQ(fp32_key_parts(256), 2);
  EXPECT_EQ(fp32_key_parts(258), 0);
  // each half fits the 128-row tile, whose fp32 tiles allow blocks of 64
  EXPECT_EQ(dk_tile(256 / fp32_key_parts(256)), 128);
  EXPECT_EQ(max_block_dv(dk_tile(192 / fp32_key_parts(192)), true, true), 64);
}

// A 256-row tile leaves room for two groups of 32 columns a block with one
// 16-bit state tile, one group with two (fp32 o: hi and lo).
TEST(TileRules, WidestBlockTheDkTileAllows) {
  EXPECT_EQ(max_block_dv(64, false), 128);
  EXPECT_EQ(max_block_dv(128, true), 128);
  EXPECT_EQ(max_block_dv(256, true), 64);
  EXPECT_EQ(max_block_dv(256, false), 32);
}

// fp32 inputs keep fp32 tiles: 128 columns beside a 64-row DK tile, 64
// beside a 128-row one, none beside a 256-row one (its Q and K alone do not fit).
TEST(TileRules, WidestBlockWithFp32Tiles) {
  EXPECT_EQ(max_block_dv(64, true, true), 128);
  EXPECT_EQ(max_block_dv(128, true, true), 64);
  EXPECT_EQ(max_block_dv(128, false, true), 64);
  EXPECT_EQ(max_block_dv(256, true, true), 0);
  EXPECT_EQ(choose_block_dv(8, 16, 128, 128, 132, true, true), 64);  // 16-bit: 128
  EXPECT_EQ(choose_block_dv(8, 8, 128, 64, 132, true, true), 32);    // 64 blocks of 64: too few
  EXPECT_EQ(choose_block_dv(8, 16, 64, 128, 132, true, true), 128);
  EXPECT_EQ(choose_block_dv(8, 16, 100, 60, 132, true, true), 64);  // DV 60 in one block of 64
  EXPECT_EQ(widest_block_within(128, 64), 64);   // split sequences at the fp32 limit
  EXPECT_EQ(widest_block_within(128, 128), 128);
  EXPECT_EQ(widest_block_within(60, 128), 64);
}

// At most a third of a block's columns padding, unless groups of 32 need it anyway.
TEST(TileRules, WidestBlockCoversDv) {
  EXPECT_EQ(widest_block_dv(128, 256), 128);
  EXPECT_EQ(widest_block_dv(128, 128), 128);
  EXPECT_EQ(widest_block_dv(128, 192), 128);  // 2 x 128 pads 64 of 256: a quarter
  EXPECT_EQ(widest_block_dv(64, 64), 64);
  EXPECT_EQ(widest_block_dv(128, 96), 128);   // 32 of 128 padding
  EXPECT_EQ(widest_block_dv(64, 32), 32);
  EXPECT_EQ(widest_block_dv(64, 60), 64);
  EXPECT_EQ(widest_block_dv(100, 100), 128);
  EXPECT_EQ(widest_block_dv(64, 16), 32);     // half of 32 padding: groups of 32 need it anyway
  EXPECT_EQ(widest_block_dv(64, 130), 64);    // 2 x 128 would pad 126 of 256
  EXPECT_EQ(widest_block_dv(256, 512), 32);   // the DK tile's limit without a state tile
  EXPECT_EQ(widest_block_dv(192, 256), 32);
  EXPECT_TRUE(covers_dv(96, 128));
  EXPECT_FALSE(covers_dv(80, 128));           // 48 of 128
  EXPECT_TRUE(covers_dv(80, 32));
}

TEST(TileRules, DvPaddedToGroupsOf32) {
  EXPECT_EQ(padded_dv(1), 32);
  EXPECT_EQ(padded_dv(32), 32);
  EXPECT_EQ(padded_dv(60), 64);
  EXPECT_EQ(padded_dv(100), 128);
  EXPECT_EQ(padded_dv(512), 512);
  EXPECT_EQ(dv_blocks(60, 32), 2);
  EXPECT_EQ(dv_blocks(96, 64), 2);
  EXPECT_EQ(dv_blocks(512, 32), 16);
}

// A padded head's rows or columns past its size are zero in the tile: the
// kernels skip the steps of 16 past live_steps, and a warp or group wholly
// past the head (size <= 0 after its offset) skips them all.
TEST(TileRules, LiveStepsCoverThePaddedHead) {
  EXPECT_EQ(live_steps(96), 6);   // DK 96 in a 128 tile: 2 of 8 steps skipped
  EXPECT_EQ(live_steps(60), 4);   // the last step holds 12 live rows
  EXPECT_EQ(live_steps(100), 7);
  EXPECT_EQ(live_steps(1), 1);
  EXPECT_EQ(live_steps(16), 1);
  EXPECT_EQ(live_steps(17), 2);
  EXPECT_EQ(live_steps(0), 0);
  EXPECT_EQ(live_steps(-32), 0);  // 96 - 128: a warp past the head
}

TEST(TileRules, ExactTilesOnlyWhereNothingIsPadded) {
  EXPECT_TRUE(exact_tiles(128, 128, 128));
  EXPECT_TRUE(exact_tiles(64, 96, 32));
  EXPECT_TRUE(exact_tiles(256, 512, 32));
  EXPECT_FALSE(exact_tiles(96, 96, 32));   // DK padded to 128
  EXPECT_FALSE(exact_tiles(128, 96, 64));  // the second block's last 32 columns
  EXPECT_FALSE(exact_tiles(64, 60, 64));
}

TEST(TileRules, CopiesAsWideAsEveryRowStartAllows) {
  EXPECT_EQ(row_copy_bytes(64, 64), 16);
  EXPECT_EQ(row_copy_bytes(96, 48), 16);
  EXPECT_EQ(row_copy_bytes(60, 64), 8);
  EXPECT_EQ(row_copy_bytes(64, 100), 8);
  EXPECT_EQ(row_copy_bytes(250, 40), 4);
  EXPECT_EQ(row_copy_bytes(1, 1), 2);
  EXPECT_EQ(row_copy_bytes(64, 33), 2);
  // fp32 rows: 4 elements per 16 bytes, never less than one element
  EXPECT_EQ(row_copy_bytes(64, 64, 4), 16);
  EXPECT_EQ(row_copy_bytes(60, 64, 4), 16);
  EXPECT_EQ(row_copy_bytes(30, 64, 4), 8);
  EXPECT_EQ(row_copy_bytes(1, 1, 4), 4);
  EXPECT_EQ(row_copy_bytes(64, 33, 4), 4);
}

// The block width the launcher picks: the widest the tile rules allow that
// still gives about a block per SM (132 SMs, the H200).
TEST(TileRules, BlockDvChoice) {
  EXPECT_EQ(choose_block_dv(8, 16, 128, 128, 132, true), 128);  // 128 blocks
  EXPECT_EQ(choose_block_dv(1, 16, 128, 128, 132, true), 32);   // 16 blocks at 128: too few
  EXPECT_EQ(choose_block_dv(4, 16, 256, 256, 132, true), 64);   // the DK tile's limit with one state tile
  EXPECT_EQ(choose_block_dv(4, 16, 256, 256, 132, false), 32);  // and with two
  EXPECT_EQ(choose_block_dv(8, 16, 96, 96, 132, true), 128);    // one padded block of 128: 128 blocks
  EXPECT_EQ(choose_block_dv(8, 16, 60, 60, 132, true), 64);     // 60 pads to one block of 64
  EXPECT_EQ(choose_block_dv(2, 16, 96, 96, 132, true), 32);     // 32 blocks at 128: too few, 96 at 32
}

// ---- the backward

TEST(TileRules, WholeHeadGradientForHeadsUpTo128) {
  EXPECT_TRUE(whole_head_gradient(64, 64));
  EXPECT_TRUE(whole_head_gradient(128, 64));
  EXPECT_TRUE(whole_head_gradient(64, 128));
  EXPECT_TRUE(whole_head_gradient(128, 128));
  EXPECT_TRUE(whole_head_gradient(96, 128));  // padded on chip to 128 x 128
  EXPECT_TRUE(whole_head_gradient(60, 60));   // to 64 x 64
  EXPECT_TRUE(whole_head_gradient(128, 32));  // to 128 x 64
  EXPECT_TRUE(whole_head_gradient(1, 1));
  EXPECT_FALSE(whole_head_gradient(256, 256));
  EXPECT_FALSE(whole_head_gradient(129, 64));
  EXPECT_FALSE(whole_head_gradient(64, 129));
  EXPECT_FALSE(whole_head_gradient(128, 128, true));  // fp32 tiles of a whole head do not fit: tiled
  EXPECT_EQ(whole_head_tile(1), 64);
  EXPECT_EQ(whole_head_tile(64), 64);
  EXPECT_EQ(whole_head_tile(65), 128);
  EXPECT_EQ(whole_head_tile(128), 128);
  EXPECT_EQ(gradient_rows(128, 128, true), 128);
  EXPECT_EQ(gradient_rows(100, 60, true), 112);
  EXPECT_EQ(gradient_cols(100, 60, true), 64);
}

// dh's padded shape: DK and DV rounded up to 16 for every chunk kernel (what
// the memory budget counts), not the whole-head kernel's tiles.
TEST(TileRules, StateGradientScratchShape) {
  EXPECT_EQ(gradient_rows(128, 128), 128);
  EXPECT_EQ(gradient_cols(128, 128), 128);
  EXPECT_EQ(gradient_rows(64, 128), 64);
  EXPECT_EQ(gradient_rows(256, 512), 256);
  EXPECT_EQ(gradient_cols(256, 512), 512);
  EXPECT_EQ(gradient_rows(96, 96), 96);   // the whole-head kernel pads it to 128 on chip only
  EXPECT_EQ(gradient_cols(32, 32), 32);
  EXPECT_EQ(gradient_rows(60, 100), 64);
  EXPECT_EQ(gradient_cols(60, 100), 112);
  EXPECT_EQ(gradient_rows(1, 1), 16);
  EXPECT_EQ(gradient_cols(1, 1), 16);
  EXPECT_EQ(gradient_cols(128, 20), 32);
}

// The reverse walks' DV block: the register cap of the DK tile, halved while
// the walks give fewer than two blocks per SM (132 SMs), and dividing dh's columns.
TEST(TileRules, StateGradientBlock) {
  EXPECT_EQ(state_gradient_block(64, 64, 8 * 16, 132), 16);    // 128 walks: 128 and 256 blocks are too few
  EXPECT_EQ(state_gradient_block(64, 128, 8 * 16, 132), 32);   // 256 blocks of 64 too few, 512 of 32 enough
  EXPECT_EQ(state_gradient_block(64, 128, 64 * 16, 132), 64);
  EXPECT_EQ(state_gradient_block(128, 128, 8 * 16, 132), 32);  // the cap of the 128 tile
  EXPECT_EQ(state_gradient_block(256, 512, 2 * 8, 132), 32);   // the 256 tile: 256 blocks of 32 fill a wave
  EXPECT_EQ(state_gradient_block(256, 256, 2 * 8, 132), 32);   // 128 blocks: about one a SM
  EXPECT_EQ(state_gradient_block(256, 256, 8, 132), 16);       // 64 blocks of 32 would leave half the SMs idle
  EXPECT_EQ(state_gradient_block(256, 240, 64, 132), 16);      // 240 columns: no whole blocks of 32
  EXPECT_EQ(state_gradient_block(60, 64, 1, 132), 16);         // few walks: the narrowest
  EXPECT_EQ(state_gradient_block(96, 128, 1024, 132), 32);
}

}  // namespace
}  // namespace linattn::cuda
