// Packed variable-length batches (cu_seqlens, B = 1): every variant on fp64,
// fp32 and bf16 inputs matches the fp64 reference run per sequence, with
// sequence lengths that are not multiples of the chunk (1, 63, 64, 65, 300 at
// C = 64), with and without an initial state per sequence; h has one snapshot
// per chunk of each sequence ([1, total_chunks, H, DK, DV]) and final_state one
// state per sequence. A packed batch of equal lengths gives what the plain
// batch gives.
#include "forward_check.hpp"

#include <gtest/gtest.h>

#include <tuple>

namespace linattn {
namespace {

using testing::expect_matches_reference;
using testing::run_inputs;

Problem packed(const std::vector<std::int64_t>& lengths, std::int64_t H, std::int64_t DK, std::int64_t DV,
               std::int64_t chunk) {
  Problem p;
  p.B = 1;
  p.H = H; p.DK = DK; p.DV = DV; p.chunk = chunk; p.scale = 0.25;
  p.cu_seqlens = {0};
  for (std::int64_t len : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + len);
  p.T = p.cu_seqlens.back();
  return p;
}

TEST(Varlen, ChunkLayoutFollowsFla) {
  const Problem p = packed({1, 63, 64, 65, 300}, 2, 16, 24, 64);
  EXPECT_EQ(p.num_sequences(), 5);
  EXPECT_EQ(p.total_chunks(), 1 + 1 + 1 + 2 + 5);
  EXPECT_EQ(p.chunk_starts(), (std::vector<std::int64_t>{0, 1, 2, 3, 5, 10}));
  EXPECT_EQ(p.h_shape(), (std::vector<std::int64_t>{1, 10, 2, 16, 24}));
  EXPECT_EQ(p.state_shape(), (std::vector<std::int64_t>{5, 2, 16, 24}));
  EXPECT_EQ(p.z_shape(), (std::vector<std::int64_t>{5, 2, 16}));
}

class VarlenMatchesReference : public ::testing::TestWithParam<std::tuple<Variant, DType>> {};

TEST_P(VarlenMatchesReference, LengthsAroundTheChunk) {
  const auto [variant, dtype] = GetParam();
  const Problem p = packed({1, 63, 64, 65, 300}, 2, 32, 48, 64);
  for (bool with_s0 : {false, true}) {
    SCOPED_TRACE(with_s0 ? "initial state per sequence" : "zero initial state");
    const ProblemInputs in = random_inputs(p, dtype, 40 + with_s0, with_s0);
    ForwardConfig cfg;
    cfg.variant = variant;
    expect_matches_reference(p, cfg, in);
    cfg.snapshots = SnapshotMode::bf16;  // fla's snapshot type; materialized reads them back
    cfg.output_fp32 = true;
    cfg.block_dv = 16;  // several DV blocks per sequence
    expect_matches_reference(p, cfg, in);
    cfg.snapshots = SnapshotMode::none;  // materialized keeps them in an internal buffer of the packed layout
    expect_matches_reference(p, cfg, in);
    if (variant == Variant::fused || variant == Variant::materialized) {  // the register-blocked kernels too
      cfg = ForwardConfig{};
      cfg.variant = variant;
      cfg.gemm = GemmPath::registers;
      expect_matches_reference(p, cfg, in);
      cfg.block_dv = 16;
      cfg.snapshots = SnapshotMode::bf16;
      expect_matches_reference(p, cfg, in);
    }
  }
}

TEST_P(VarlenMatchesReference, ShortSequencesAtChunk16) {
  const auto [variant, dtype] = GetParam();
  const Problem p = packed({17, 1, 2, 16, 33, 5}, 3, 8, 12, 16);
  const ProblemInputs in = random_inputs(p, dtype, 50, true);
  ForwardConfig cfg;
  cfg.variant = variant;
  expect_matches_reference(p, cfg, in);
}

INSTANTIATE_TEST_SUITE_P(
    EveryVariant, VarlenMatchesReference,
    ::testing::Combine(::testing::Values(Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent),
                       ::testing::Values(DType::f64, DType::f32, DType::bf16)),
    [](const ::testing::TestParamInfo<VarlenMatchesReference::ParamType>& info) {
      return std::string(variant_name(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param));
    });

TEST(Varlen, EqualLengthsGiveThePlainBatch) {
  Problem plain;
  plain.B = 3; plain.T = 70; plain.H = 2; plain.DK = 16; plain.DV = 8; plain.chunk = 32;
  const ProblemInputs in = random_inputs(plain, DType::f64, 60, true);
  Problem p = plain;
  p.B = 1;
  p.T = 210;
  p.cu_seqlens = {0, 70, 140, 210};
  ProblemInputs packed_in = in;  // [3, 70, H, D] and [1, 210, H, D] share one memory layout
  packed_in.q.shape = p.qk_shape();
  packed_in.k.shape = p.qk_shape();
  packed_in.v.shape = p.v_shape();
  for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent}) {
    ForwardConfig cfg;
    cfg.variant = variant;
    const ForwardOutput a = run_inputs(plain, cfg, in), b = run_inputs(p, cfg, packed_in);
    EXPECT_LE(relative_l2(b.o.to_double(), a.o.to_double()), 1e-13) << variant_name(variant);
    EXPECT_LE(relative_l2(b.h.to_double(), a.h.to_double()), 1e-13) << variant_name(variant);  // [3, 3, ...] vs [1, 9, ...]
    EXPECT_LE(relative_l2(b.final_state.to_double(), a.final_state.to_double()), 1e-13) << variant_name(variant);
  }
}

}  // namespace
}  // namespace linattn
