// Each Kokkos forward variant (the recurrent one included) matches the fp64 reference on o, h and
// final_state for fp64, fp32, fp16 and bf16 inputs, with outputs poisoned (NaN)
// before the kernels run, on ragged chunks, DK != DV, B and H > 1, C in
// {16, 32, 64}, with and without an initial state; through both tile GEMM
// paths (automatic: the host tile GEMM on host backends; kokkoskernels: the
// portable KokkosBatched::TeamGemm), so that breaking either fails here.
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "kernels/forward.hpp"
#include "reference/references.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <tuple>

namespace linattn {
namespace {


struct Shape {
  std::int64_t B, T, H, DK, DV, chunk, block_dv;
  bool initial_state;
  double scale;
};

const Shape kShapes[] = {
    {2, 100, 2, 32, 48, 32, 0, true, 0.125},   // ragged last chunk (100 = 3*32 + 4), DK != DV
    {1, 64, 3, 16, 16, 16, 0, false, 1.0},     // exact multiple, C = 16
    {2, 70, 1, 24, 40, 64, 16, true, 0.5},     // C = 64 with T = 70, several DV blocks (16, 16, 8)
    {1, 45, 2, 20, 12, 16, 8, true, 0.3},      // DK 20: the state pass's 8-row tiles overhang DK; DV blocks 8, 4
};

class KernelMatchesReference : public ::testing::TestWithParam<std::tuple<Variant, DType, GemmPath>> {};

TEST_P(KernelMatchesReference, OnEveryShape) {
  const auto [variant, dtype, gemm] = GetParam();
  std::uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    Problem p;
    p.B = s.B; p.T = s.T; p.H = s.H; p.DK = s.DK; p.DV = s.DV; p.chunk = s.chunk; p.scale = s.scale;
    SCOPED_TRACE("B=" + std::to_string(p.B) + " T=" + std::to_string(p.T) + " H=" + std::to_string(p.H) +
                 " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV) + " C=" + std::to_string(p.chunk));
    const auto in = random_inputs(p, dtype, ++seed, s.initial_state);
    const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                              s0 = in.initial_state.to_double();
    const auto ref = reference::chunked(p, {q, k, v, s.initial_state ? &s0 : nullptr});

    for (bool fp32_out : {false, true}) {
      for (SnapshotMode snaps : {SnapshotMode::accumulation, SnapshotMode::bf16}) {
        ForwardConfig cfg;
        cfg.variant = variant;
        cfg.gemm = gemm;
        cfg.output_fp32 = fp32_out;
        cfg.snapshots = snaps;
        cfg.block_dv = s.block_dv;
        cfg.poison_outputs = true;
        const ForwardOutput out =
            run_forward(p, cfg, in.q, in.k, in.v, s.initial_state ? &in.initial_state : nullptr);
        SCOPED_TRACE(std::string("out ") + dtype_name(out.o.dtype) + ", snapshots " + dtype_name(out.h.dtype));
        // The path that ran is the one the rule picks (tests/test_path_choice.cpp tests the rule).
        ASSERT_EQ(out.gemm, choose_forward_path(p, cfg, dtype).path);
        if (gemm != GemmPath::automatic) ASSERT_EQ(out.gemm, gemm);
        ASSERT_EQ(out.o.dtype, fp32_out ? DType::f32 : dtype);
        ASSERT_EQ(out.h.shape, p.h_shape());
        ASSERT_EQ(out.final_state.dtype, accumulation_dtype(dtype));
        const double eo = relative_l2(out.o.to_double(), ref.o);
        const double eh = relative_l2(out.h.to_double(), ref.h);
        const double ef = relative_l2(out.final_state.to_double(), ref.final_state);
        const double o_level = output_level(dtype, out.o.dtype,
                                            variant == Variant::materialized && snaps == SnapshotMode::bf16);
        EXPECT_LE(eo, o_level) << "o";
        EXPECT_LE(eh, stored_level(dtype, out.h.dtype)) << "h";
        EXPECT_LE(ef, stored_level(dtype, out.final_state.dtype)) << "final_state";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllVariantsAllDtypes, KernelMatchesReference,
    ::testing::Combine(::testing::Values(Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent),
                       ::testing::Values(DType::f64, DType::f32, DType::f16, DType::bf16),
                       ::testing::Values(GemmPath::automatic, GemmPath::kokkos_kernels)),
    [](const ::testing::TestParamInfo<KernelMatchesReference::ParamType>& info) {
      return std::string(variant_name(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param)) + "_" +
             gemm_path_name(std::get<2>(info.param));
    });

// The portable register-blocked kernels exist for fused and materialized.
INSTANTIATE_TEST_SUITE_P(
    RegisterBlocked, KernelMatchesReference,
    ::testing::Combine(::testing::Values(Variant::fused, Variant::materialized), ::testing::Values(DType::f64, DType::f32, DType::f16, DType::bf16),
                       ::testing::Values(GemmPath::registers)),
    [](const ::testing::TestParamInfo<KernelMatchesReference::ParamType>& info) {
      return std::string(variant_name(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param)) + "_" +
             gemm_path_name(std::get<2>(info.param));
    });

// The register-blocked kernels at the benchmark's tile shape (chunk 64, DK 128):
// on a GPU a team of 256 threads with one tile each (the state pass: 128
// threads with an 8 x 4 tile each), block widths 32 and 16;
// fp32 inputs stage 4-byte tiles, which no longer fit level 0 there.
TEST(Kernels, RegisterPathAtTheBenchmarkTile) {
  Problem p;
  p.B = 2; p.T = 200; p.H = 2; p.DK = 128; p.DV = 128; p.chunk = 64; p.scale = 0.088;
  for (DType dtype : {DType::bf16, DType::f32}) {
    const auto in = random_inputs(p, dtype, 77, true);
    const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                              s0 = in.initial_state.to_double();
    const auto ref = reference::chunked(p, {q, k, v, &s0});
    for (auto [variant, block_dv] : {std::pair{Variant::fused, 0}, std::pair{Variant::fused, 16},
                                     std::pair{Variant::materialized, 0}, std::pair{Variant::materialized, 16}}) {
      SCOPED_TRACE(std::string(variant_name(variant)) + " " + dtype_name(dtype) + " block_dv " + std::to_string(block_dv));
      ForwardConfig cfg;
      cfg.variant = variant;
      cfg.gemm = GemmPath::registers;
      cfg.block_dv = block_dv;
      cfg.output_fp32 = true;
      cfg.poison_outputs = true;
      const ForwardOutput out = run_forward(p, cfg, in.q, in.k, in.v, &in.initial_state);
      ASSERT_EQ(out.gemm, GemmPath::registers);
      const double level = stored_level(dtype, DType::f32);
      EXPECT_LE(relative_l2(out.o.to_double(), ref.o), level);
      EXPECT_LE(relative_l2(out.h.to_double(), ref.h), level);
      EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), level);
    }
  }
}

// The materialized state pass picks 8-row state tiles for leagues of at least
// one team per 1024 threads the device runs at once, 4-row tiles below that
// (on the host always 8). Both leagues here, so that a GPU runs both tile
// heights; DK 20 makes the 8-row tiles overhang DK.
TEST(Kernels, RegisterStatePassAtBothTileHeights) {
  const std::int64_t many = static_cast<std::int64_t>(Kokkos::DefaultExecutionSpace().concurrency()) / 1024 + 1;
  for (std::int64_t H : {std::int64_t(2), many}) {
    Problem p;
    p.B = 1; p.T = 45; p.H = H; p.DK = 20; p.DV = 12; p.chunk = 16; p.scale = 0.3;
    SCOPED_TRACE("H=" + std::to_string(H));
    const auto in = random_inputs(p, DType::bf16, 91, true);
    const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                              s0 = in.initial_state.to_double();
    const auto ref = reference::chunked(p, {q, k, v, &s0});
    ForwardConfig cfg;
    cfg.variant = Variant::materialized;
    cfg.gemm = GemmPath::registers;
    cfg.output_fp32 = true;
    cfg.poison_outputs = true;
    const ForwardOutput out = run_forward(p, cfg, in.q, in.k, in.v, &in.initial_state);
    const double level = stored_level(DType::bf16, DType::f32);
    EXPECT_LE(relative_l2(out.o.to_double(), ref.o), level);
    EXPECT_LE(relative_l2(out.h.to_double(), ref.h), level);
    EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), level);
  }
}

TEST(Kernels, RegisterPathRefusesOtherVariants) {
  Problem p;
  p.B = 1; p.T = 40; p.H = 1; p.DK = 16; p.DV = 16; p.chunk = 16;
  const auto in = random_inputs(p, DType::f32, 6, false);
  ForwardConfig cfg;
  cfg.variant = Variant::recompute;
  cfg.gemm = GemmPath::registers;
  try {
    run_forward(p, cfg, in.q, in.k, in.v);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("only the fused and materialized variants"), std::string::npos) << e.what();
  }
}

TEST(Kernels, SnapshotsCanBeSkipped) {
  Problem p;
  p.B = 1; p.T = 50; p.H = 2; p.DK = 16; p.DV = 16; p.chunk = 16;
  const auto in = random_inputs(p, DType::f32, 5, false);
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double();
  const auto ref = reference::chunked(p, {q, k, v, nullptr});
  for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent}) {
    ForwardConfig cfg;
    cfg.variant = variant;
    cfg.snapshots = SnapshotMode::none;
    cfg.poison_outputs = true;
    const ForwardOutput out = run_forward(p, cfg, in.q, in.k, in.v);
    EXPECT_TRUE(out.h.empty()) << variant_name(variant);
    EXPECT_LE(relative_l2(out.o.to_double(), ref.o), stored_level(DType::f32, DType::f32)) << variant_name(variant);
    EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), stored_level(DType::f32, DType::f32));
  }
}

TEST(Kernels, VariantsAgreeWithEachOtherInFp64) {
  Problem p;
  p.B = 2; p.T = 130; p.H = 2; p.DK = 20; p.DV = 12; p.chunk = 32;
  const auto in = random_inputs(p, DType::f64, 9, true);
  ForwardConfig cfg;
  cfg.poison_outputs = true;
  const ForwardOutput fused = run_forward(p, cfg, in.q, in.k, in.v, &in.initial_state);
  for (Variant variant : {Variant::materialized, Variant::recompute, Variant::recurrent}) {  // recurrent == chunked
    cfg.variant = variant;
    const ForwardOutput other = run_forward(p, cfg, in.q, in.k, in.v, &in.initial_state);
    EXPECT_LE(relative_l2(other.o.to_double(), fused.o.to_double()), 1e-13) << variant_name(variant);
    EXPECT_LE(relative_l2(other.h.to_double(), fused.h.to_double()), 1e-13) << variant_name(variant);
  }
}

}  // namespace
}  // namespace linattn
