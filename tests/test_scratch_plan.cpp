// Scratch planning, case by case (docs/ARCHITECTURE.md, "Scratch plans"):
// which DV block width, scratch level and team size plan_scratch and
// register_tiles::make_plan choose, and when they give up. Expected values are
// worked out by hand from the rules and written down.
#include "core/half_types.hpp"
#include "core/problem.hpp"
#include "kernels/execution.hpp"
#include "kernels/register_tiles.hpp"
#include "kernels/scratch_plan.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace linattn {
namespace {

// The byte counts below are checked against the level-0 limits of the backends
// linattn runs on: 32768 bytes for Serial and OpenMP, 40936 for CUDA on the
// H200 (docs/ARCHITECTURE.md, "Scratch plans"); level 1 is 20 MiB on both.
constexpr std::size_t kHostLevel0 = 32768, kCudaLevel0 = 40936, kLevel1 = 20u << 20;

// Empty when this backend has the limits the cases were written for, else why they do not apply.
std::string unknown_limits() {
  const auto max0 = static_cast<std::size_t>(TeamPolicy::scratch_size_max(0));
  const auto max1 = static_cast<std::size_t>(TeamPolicy::scratch_size_max(1));
  if (max0 == (host_execution ? kHostLevel0 : kCudaLevel0) && max1 == kLevel1) return {};
  return "team scratch limits " + std::to_string(max0) + " / " + std::to_string(max1) +
         " bytes are not the ones these cases were worked out for";
}

#define SKIP_UNLESS_KNOWN_LIMITS()                            \
  if (const std::string why = unknown_limits(); !why.empty()) \
  GTEST_SKIP() << why

void expect_plan(const ScratchPlan& plan, int level, std::int64_t block_dv, std::size_t bytes) {
  EXPECT_EQ(plan.level, level);
  EXPECT_EQ(plan.block_dv, block_dv);
  EXPECT_EQ(plan.bytes, bytes);
}

// --- plan_scratch: the widths it tries, the level-0 threshold, the fallbacks.
// Each case's byte function stands for a kernel's tile bytes at block width w.

TEST(PlanScratch, FullDvFitsLevelZero) {
  const ScratchPlan plan = plan_scratch(64, 0, [](std::int64_t w) { return std::size_t(100 * w); });
  expect_plan(plan, 0, 64, 6400);
}

TEST(PlanScratch, TilesOfExactlyTheLevelZeroLimitFitLevelZero) {
  const std::size_t max0 = static_cast<std::size_t>(TeamPolicy::scratch_size_max(0));
  const ScratchPlan plan = plan_scratch(64, 0, [&](std::int64_t) { return max0; });
  expect_plan(plan, 0, 64, max0);
}

// 400 bytes per column: DV 128 needs 51200 bytes (above both level-0 limits),
// 64 columns 25600 (below both). GPUs narrow the block; the host keeps DV on
// level 1, where narrower blocks would only repeat Q K^T.
TEST(PlanScratch, GpusNarrowTheBlockHostsMoveToLevelOne) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const ScratchPlan plan = plan_scratch(128, 0, [](std::int64_t w) { return std::size_t(400 * w); });
  if (host_execution) expect_plan(plan, 1, 128, 51200);
  else expect_plan(plan, 0, 64, 25600);
}

// DV 96 is not one of 128, 64, 32, 16: the GPU candidates are 96, 64, 32, 16.
TEST(PlanScratch, GpuCandidatesBelowDvOnly) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const ScratchPlan plan = plan_scratch(96, 0, [](std::int64_t w) {
    if (w == 96) return std::size_t(60000);
    if (w == 64) return std::size_t(50000);
    return std::size_t(400 * w);
  });
  if (host_execution) expect_plan(plan, 1, 96, 60000);
  else expect_plan(plan, 0, 32, 12800);
}

// Nothing fits level 0: the narrowest candidate goes to level 1 (GPU: 16; host: DV).
TEST(PlanScratch, NothingFitsLevelZeroNarrowestOnLevelOne) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const ScratchPlan plan = plan_scratch(128, 0, [](std::int64_t w) { return std::size_t(50000 + w); });
  if (host_execution) expect_plan(plan, 1, 128, 50128);
  else expect_plan(plan, 1, 16, 50016);
}

TEST(PlanScratch, RequestedWidthIsClampedToDv) {
  const ScratchPlan plan = plan_scratch(48, 64, [](std::int64_t w) { return std::size_t(100 * w); });
  expect_plan(plan, 0, 48, 4800);
}

// An explicit width is kept even when it misses level 0 (no narrower candidates).
TEST(PlanScratch, RequestedWidthIsKeptOnLevelOne) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const ScratchPlan plan = plan_scratch(128, 128, [](std::int64_t w) { return std::size_t(400 * w); });
  expect_plan(plan, 1, 128, 51200);
}

TEST(PlanScratch, TilesAboveLevelOneAreRefused) {
  SKIP_UNLESS_KNOWN_LIMITS();
  try {
    plan_scratch(64, 0, [](std::int64_t) { return std::size_t(30) << 20; });
    FAIL() << "31457280 bytes of tiles were planned";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("31457280 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use a smaller chunk"), std::string::npos) << e.what();
  }
}

// --- register_tiles::make_plan: real layouts (bf16 or fp32 staged, fp32
// accumulated). The byte counts are the three scratch regions of
// register_tiles.hpp plus 16 bytes of alignment slack; a host team is one
// thread holding 256 state, 1024 score and 256 output tiles, a GPU thread one
// of each (teams up to 256).

Problem shape(std::int64_t chunk, std::int64_t DK, std::int64_t DV) {
  Problem p;
  p.B = 2;
  p.T = 300;
  p.H = 3;
  p.chunk = chunk;
  p.DK = DK;
  p.DV = DV;
  p.scale = 0.125;
  return p;
}

void expect_plan(const register_tiles::Plan& plan, int level, std::int64_t block_dv, std::size_t bytes, int team) {
  EXPECT_EQ(plan.unavailable, "");
  expect_plan(plan.scratch, level, block_dv, bytes);
  EXPECT_EQ(plan.team_size, team);
}

// bf16, chunk 64, DK 64, DV 64: 64 columns take 43536 bytes (above both
// level-0 limits), 32 columns 31248 (below both).
TEST(RegisterPlan, Bf16Chunk64Dk64Dv64TakesHalfTheColumnsOnLevelZero) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<bf16_t, float>(shape(64, 64, 64), 0, 0);
  expect_plan(plan, 0, 32, 31248, host_execution ? 1 : 256);
}

// bf16, chunk 64, DK 128, DV 128: a host thread holds the state tiles of at
// most 32 columns, a GPU team of 256 the same; 32 columns take 40464 bytes,
// above the host's level 0 and below the H200's.
TEST(RegisterPlan, Bf16Chunk64Dk128Dv128) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<bf16_t, float>(shape(64, 128, 128), 0, 0);
  if (host_execution) expect_plan(plan, 1, 32, 40464, 1);
  else expect_plan(plan, 0, 32, 40464, 256);
}

// fp32, chunk 64, DK 64, DV 64: fp32 staging is twice the bytes. On the host
// no width fits 32768 bytes (4 columns still take 35856), so the widest goes to
// level 1; on the H200 16 columns fit (39952 bytes).
TEST(RegisterPlan, Fp32Chunk64Dk64Dv64) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<float, float>(shape(64, 64, 64), 0, 0);
  if (host_execution) expect_plan(plan, 1, 64, 52240, 1);
  else expect_plan(plan, 0, 16, 39952, 256);
}

// A requested width wider than DV is clamped to DV and not narrowed to fit level 0.
TEST(RegisterPlan, RequestedWidthIsClampedNotNarrowed) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<bf16_t, float>(shape(64, 64, 64), 256, 0);
  expect_plan(plan, 1, 64, 43536, host_execution ? 1 : 256);
}

// 128 columns at DK 128 need 1024 state tiles: 4 host threads' worth, 1024 GPU threads.
TEST(RegisterPlan, RequestedWidthNeedingTooLargeATeamIsUnavailable) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<bf16_t, float>(shape(64, 128, 128), 128, 0);
  EXPECT_EQ(plan.team_size, 0);
  expect_plan(plan.scratch, 0, 0, 0);
  EXPECT_EQ(plan.unavailable, host_execution
                                  ? "block_dv 128 at chunk 64, DK 128 needs a team of 4 threads (a host team is one thread)"
                                  : "block_dv 128 at chunk 64, DK 128 needs a team of 1024 threads, more than 256");
}

// An explicit team of 64: a GPU plan at 32 columns needs 256 threads; a host team is one thread.
TEST(RegisterPlan, ExplicitTeamTooSmallOrTooLargeIsUnavailable) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<bf16_t, float>(shape(64, 64, 64), 32, 64);
  EXPECT_EQ(plan.team_size, 0);
  if (host_execution)
    EXPECT_NE(plan.unavailable.find("(a host team is one thread)"), std::string::npos) << plan.unavailable;
  else
    EXPECT_EQ(plan.unavailable, "block_dv 32 at chunk 64, DK 64 needs a team of 256 threads, more than 64");
}

// A gate adds its decay rows (4 x chunk accumulation-type values, 1024 bytes at
// chunk 64 in fp32) after the three regions: bf16, chunk 64, DK 64, DV 64 still
// fits level 0 at 32 columns (31248 + 1024 bytes).
TEST(RegisterPlan, GateAddsItsDecayRows) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<bf16_t, float>(shape(64, 64, 64), 0, 0, DecayForm::scalar);
  expect_plan(plan, 0, 32, 32272, host_execution ? 1 : 256);
  using register_tiles::make_layout;
  using register_tiles::make_state_pass_layout;
  const register_tiles::Layout plain = make_layout<bf16_t, float>(64, 64, 32),
                               gated = make_layout<bf16_t, float>(64, 64, 32, DecayForm::scalar);
  EXPECT_EQ(gated.bytes, plain.bytes + 1024);
  EXPECT_EQ(gated.r3, plain.r3);
  std::vector<char> team(gated.bytes);  // the rows are the layout's last bytes: where level 1's layout ends
  EXPECT_EQ(reinterpret_cast<char*>(register_tiles::decay_tile_at<float>(team.data(), gated, DecayForm::scalar, 64, 64).data()),
            team.data() + plain.bytes);
  const register_tiles::Layout pass_plain = make_state_pass_layout<bf16_t, float>(64, 64, 32),
                               pass_gated = make_state_pass_layout<bf16_t, float>(64, 64, 32, DecayForm::scalar);
  EXPECT_EQ(pass_gated.bytes, pass_plain.bytes + 1024);
}

// bf16, chunk 64, DK 128, DV 128 with a gate: 32 columns take 41488 bytes,
// past the H200's level 0 (40936), so there 16 columns run on level 0 (38416);
// the host keeps 32 columns on level 1.
TEST(RegisterPlan, GateCanNarrowTheWidth) {
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<bf16_t, float>(shape(64, 128, 128), 0, 0, DecayForm::scalar);
  if (host_execution) expect_plan(plan, 1, 32, 41488, 1);
  else expect_plan(plan, 0, 16, 38416, 256);
}

// GLA's gk: the decay tile is b itself, chunk x DK accumulation-type values
// (on the host 3 chunk x DK: chunk_decay's running factors), after the three
// regions as the scalar rows are: 16 KB at chunk 64, DK 64 in fp32 (48 KB on
// the host), which moves bf16 at DK 64, DV 64 past level 0 on the H200 at
// every width: 64 columns on level 1.
TEST(RegisterPlan, ChannelGateAddsItsDecayTile) {
  using register_tiles::make_layout;
  using register_tiles::make_state_pass_layout;
  const std::size_t tile = (host_execution ? 3 : 1) * 64 * 64 * sizeof(float);
  const register_tiles::Layout plain = make_layout<bf16_t, float>(64, 64, 32),
                               channels = make_layout<bf16_t, float>(64, 64, 32, DecayForm::channels);
  EXPECT_EQ(channels.bytes, plain.bytes + tile);
  EXPECT_EQ(channels.r3, plain.r3);
  std::vector<char> team(channels.bytes);
  const Tile<float> b = register_tiles::decay_tile_at<float>(team.data(), channels, DecayForm::channels, 64, 64);
  EXPECT_EQ(reinterpret_cast<char*>(b.data()), team.data() + plain.bytes);
  EXPECT_EQ(b.extent(0), (host_execution ? 3u : 1u) * 64u);
  EXPECT_EQ(b.extent(1), 64u);
  const std::size_t pass_plain = make_state_pass_layout<bf16_t, float>(64, 64, 32).bytes,
                    pass_channels = make_state_pass_layout<bf16_t, float>(64, 64, 32, DecayForm::channels).bytes;
  EXPECT_EQ(pass_channels, pass_plain + tile);
  // DK 12 (not a multiple of 4): 64 x 12 floats, a multiple of 16 bytes already.
  const std::size_t narrow_plain = make_layout<bf16_t, float>(64, 12, 8).bytes,
                    narrow_channels = make_layout<bf16_t, float>(64, 12, 8, DecayForm::channels).bytes;
  EXPECT_EQ(narrow_channels, narrow_plain + (host_execution ? 3 : 1) * 64 * 12 * sizeof(float));
  SKIP_UNLESS_KNOWN_LIMITS();
  const register_tiles::Plan plan = register_tiles::make_plan<bf16_t, float>(shape(64, 64, 64), 0, 0, DecayForm::channels);
  EXPECT_EQ(plan.unavailable, "");
  EXPECT_EQ(plan.scratch.block_dv, 64);
  const std::size_t wide = make_layout<bf16_t, float>(64, 64, 64, DecayForm::channels).bytes;
  EXPECT_EQ(plan.scratch.bytes, wide + 16);
  if (!host_execution) EXPECT_EQ(plan.scratch.level, 1);  // 43008 bytes at 4 columns already
}

}  // namespace
}  // namespace linattn
