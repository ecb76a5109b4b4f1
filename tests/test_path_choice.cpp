// The one rule that picks the tile-product path (src/kernels/path_choice.hpp),
// case by case. The backend is a fact, so the CUDA cases run on every build.
// Each case starts from facts that take the tensor-core kernel (or, on the
// host, the host tile GEMM) and changes one thing.
#include "kernels/forward.hpp"
#include "kernels/path_choice.hpp"
#include "kernels/path_choice_here.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace linattn {
namespace {

// bf16, fused, chunk 64, DK 128, DV 128, plain batch, on CUDA: the tensor-core kernel's home.
PathFacts on_cuda() {
  PathFacts f;
  f.backend = Backend::cuda;
  f.variant = Variant::fused;
  f.requested = GemmPath::automatic;
  f.input = DType::bf16;
  f.chunk = 64;
  f.DK = 128;
  f.DV = 128;
  f.B = 8;
  f.H = 16;
  return f;
}

PathFacts on_host() {
  PathFacts f = on_cuda();
  f.backend = Backend::host;
  return f;
}

PathFacts asking(PathFacts f, GemmPath requested) {
  f.requested = requested;
  return f;
}

GemmPath path_of(const PathFacts& f) {
  const PathChoice c = choose_path(f);
  EXPECT_TRUE(c.ok()) << c.refusal;
  return c.path;
}

// The refusal's message; fails the test when the facts are not refused.
std::string refusal_of(const PathFacts& f) {
  const PathChoice c = choose_path(f);
  EXPECT_FALSE(c.ok()) << "ran on " << gemm_path_name(c.path);
  return c.refusal;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// --- CUDA, automatic -------------------------------------------------------

TEST(PathChoice, Bf16FusedChunk64Dk128OnCudaTakesTensorCores) {
  EXPECT_EQ(path_of(on_cuda()), GemmPath::tensor_core);
}

TEST(PathChoice, Fp16Dk64OnCudaTakesTensorCores) {
  PathFacts f = on_cuda();
  f.input = DType::f16;
  f.DK = 64;
  f.DV = 96;  // a multiple of 32, not of 64
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, Chunk32OnCudaTakesRegisters) {
  PathFacts f = on_cuda();
  f.chunk = 32;
  EXPECT_EQ(path_of(f), GemmPath::registers);
}

// Heads the tiles pad (cuda/tile_rules.hpp) stay on tensor cores; past DK 256 the register kernels take them.
TEST(PathChoice, Dk32OnCudaTakesTensorCores) {
  PathFacts f = on_cuda();
  f.DK = 32;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, Dv48OnCudaTakesTensorCores) {
  PathFacts f = on_cuda();
  f.DV = 48;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, Dk320OnCudaTakesRegisters) {
  PathFacts f = on_cuda();
  f.DK = 320;
  EXPECT_EQ(path_of(f), GemmPath::registers);
}

// Packed batches (cu_seqlens) run on the tensor-core kernel like plain ones.
TEST(PathChoice, PackedBf16OnCudaTakesTensorCores) {
  PathFacts f = on_cuda();
  f.packed = true;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

// fp32 inputs run on tensor cores (fp32 tiles, three TF32 products) up to DK 128.
TEST(PathChoice, PackedFp32OnCudaTakesTensorCores) {
  PathFacts f = on_cuda();
  f.packed = true;
  f.input = DType::f32;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, Fp32OnCudaTakesTensorCores) {
  PathFacts f = on_cuda();
  f.input = DType::f32;
  for (std::int64_t dk : {1, 60, 64, 100, 128}) {
    f.DK = dk;
    EXPECT_EQ(path_of(f), GemmPath::tensor_core) << "DK " << dk;
  }
}

// Above DK 128 fp32 tiles do not fit in shared memory: an even head runs as
// two halves of its keys on tensor cores (plain and packed, gated too);
// an odd one, or a normalized one, on the portable kernels.
TEST(PathChoice, Fp32EvenHeadsAboveDk128OnCudaTakeTensorCoresAsKeyHalves) {
  PathFacts f = on_cuda();
  f.input = DType::f32;
  for (std::int64_t dk : {130, 192, 250, 256}) {
    f.DK = dk;
    EXPECT_EQ(path_of(f), GemmPath::tensor_core) << "DK " << dk;
  }
  f.packed = true;
  f.gated = true;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.gated = false;
  f.channel_gated = true;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, Fp32OddHeadsAboveDk128OnCudaTakeRegisters) {
  PathFacts f = on_cuda();
  f.input = DType::f32;
  for (std::int64_t dk : {129, 191, 255}) {
    f.DK = dk;
    EXPECT_EQ(path_of(f), GemmPath::registers) << "DK " << dk;
  }
}

TEST(PathChoice, Fp32NormalizedAboveDk128OnCudaTakesRegisters) {
  PathFacts f = on_cuda();
  f.input = DType::f32;
  f.normalize = true;
  f.DK = 128;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.DK = 256;
  EXPECT_EQ(path_of(f), GemmPath::registers);
  f.input = DType::bf16;  // 16-bit heads of 256 keys run whole, normalized too
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, Fp64OnCudaTakesRegisters) {
  PathFacts f = on_cuda();
  f.input = DType::f64;
  EXPECT_EQ(path_of(f), GemmPath::registers);
}

TEST(PathChoice, MaterializedOnCudaTakesRegisters) {
  PathFacts f = on_cuda();
  f.variant = Variant::materialized;
  EXPECT_EQ(path_of(f), GemmPath::registers);
}

TEST(PathChoice, RecomputeOnCudaTakesKokkosKernels) {
  PathFacts f = on_cuda();
  f.variant = Variant::recompute;
  EXPECT_EQ(path_of(f), GemmPath::kokkos_kernels);
}

TEST(PathChoice, RecurrentOnCudaIsRecordedAsKokkosKernels) {
  PathFacts f = on_cuda();
  f.variant = Variant::recurrent;
  EXPECT_EQ(path_of(f), GemmPath::kokkos_kernels);
}

TEST(PathChoice, BlockDv32Or64Or128DividingDvKeepsTensorCores) {
  for (std::int64_t w : {32, 64, 128}) {
    PathFacts f = on_cuda();
    f.block_dv = w;
    EXPECT_EQ(path_of(f), GemmPath::tensor_core) << "block_dv " << w;
  }
}

TEST(PathChoice, BlockDv48OnCudaTakesRegisters) {
  PathFacts f = on_cuda();
  f.block_dv = 48;
  EXPECT_EQ(path_of(f), GemmPath::registers);
}

// The last block's columns past DV are padding on chip: block_dv need not divide DV.
TEST(PathChoice, BlockDv64NotDividingDv96TakesTensorCores) {
  PathFacts f = on_cuda();
  f.DV = 96;
  f.block_dv = 64;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

// The tensor-core grid has one row per (batch, head), at most 65535.
TEST(PathChoice, BTimesH65535KeepsTensorCores) {
  PathFacts f = on_cuda();
  f.B = 4369;
  f.H = 15;  // 65535
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, BTimesH65536IsNotTensorCores) {
  PathFacts f = on_cuda();
  f.B = 4096;
  f.H = 16;  // 65536
  EXPECT_EQ(path_of(f), GemmPath::registers);
}

TEST(PathChoice, RegisterPlanRefusedTakesKokkosKernelsUnderAuto) {
  PathFacts f = on_cuda();
  f.chunk = 32;
  f.register_plan_refusal = "the tiles need more team scratch than the backend offers";
  EXPECT_EQ(path_of(f), GemmPath::kokkos_kernels);
}

// The register plan matters only off the tensor-core kernel.
TEST(PathChoice, RegisterPlanRefusedKeepsTensorCores) {
  PathFacts f = on_cuda();
  f.register_plan_refusal = "the tiles need more team scratch than the backend offers";
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

// --- other devices (HIP, SYCL): no tensor cores, no host tiles ---------------

TEST(PathChoice, OtherDeviceTakesRegisters) {
  PathFacts f = on_cuda();
  f.backend = Backend::other_device;
  EXPECT_EQ(path_of(f), GemmPath::registers);
}

TEST(PathChoice, OtherDeviceRecomputeTakesKokkosKernels) {
  PathFacts f = on_cuda();
  f.backend = Backend::other_device;
  f.variant = Variant::recompute;
  EXPECT_EQ(path_of(f), GemmPath::kokkos_kernels);
}

// --- host backends -----------------------------------------------------------

TEST(PathChoice, HostTakesHostTiles) {
  for (Variant v : {Variant::fused, Variant::materialized, Variant::recompute}) {
    PathFacts f = on_host();
    f.variant = v;
    EXPECT_EQ(path_of(f), GemmPath::host_tile) << variant_name(v);
  }
}

// The register-blocked kernels run on the host only when asked for.
TEST(PathChoice, HostWithRegisterPlanStillTakesHostTiles) {
  PathFacts f = on_host();
  f.input = DType::f32;
  f.chunk = 32;
  EXPECT_EQ(path_of(f), GemmPath::host_tile);
}

TEST(PathChoice, RecurrentOnHostIsRecordedAsHostTiles) {
  PathFacts f = on_host();
  f.variant = Variant::recurrent;
  EXPECT_EQ(path_of(f), GemmPath::host_tile);
}

TEST(PathChoice, HostWithKokkosKernelsTakesKokkosKernels) {
  EXPECT_EQ(path_of(asking(on_host(), GemmPath::kokkos_kernels)), GemmPath::kokkos_kernels);
}

TEST(PathChoice, HostWithRegistersTakesRegisters) {
  EXPECT_EQ(path_of(asking(on_host(), GemmPath::registers)), GemmPath::registers);
}

TEST(PathChoice, HostWithHostTileTakesHostTiles) {
  PathFacts f = asking(on_host(), GemmPath::host_tile);
  f.variant = Variant::recurrent;
  EXPECT_EQ(path_of(f), GemmPath::host_tile);
}

// --- explicit requests run as asked or are refused ---------------------------

TEST(PathChoice, KokkosKernelsOnCudaWhereTensorCoresFit) {
  EXPECT_EQ(path_of(asking(on_cuda(), GemmPath::kokkos_kernels)), GemmPath::kokkos_kernels);
}

TEST(PathChoice, RegistersOnCudaWhereTensorCoresFit) {
  EXPECT_EQ(path_of(asking(on_cuda(), GemmPath::registers)), GemmPath::registers);
}

TEST(PathChoice, TensorCoreOnCudaTakesTensorCores) {
  EXPECT_EQ(path_of(asking(on_cuda(), GemmPath::tensor_core)), GemmPath::tensor_core);
}

TEST(PathChoice, TensorCoreOnHostIsRefusedNamingCuda) {
  const std::string why = refusal_of(asking(on_host(), GemmPath::tensor_core));
  EXPECT_TRUE(contains(why, "--gemm tensorcore is not available")) << why;
  EXPECT_TRUE(contains(why, "CUDA")) << why;
}

TEST(PathChoice, TensorCoreOnOtherDeviceIsRefusedNamingCuda) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.backend = Backend::other_device;
  EXPECT_TRUE(contains(refusal_of(f), "CUDA"));
}

TEST(PathChoice, MaterializedWithTensorCoreIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.variant = Variant::materialized;
  const std::string why = refusal_of(f);
  EXPECT_TRUE(contains(why, "--gemm tensorcore is not available: only the fused variant")) << why;
}

TEST(PathChoice, RecomputeWithTensorCoreIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.variant = Variant::recompute;
  EXPECT_TRUE(contains(refusal_of(f), "only the fused variant"));
}

TEST(PathChoice, RecurrentWithTensorCoreIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.variant = Variant::recurrent;
  EXPECT_TRUE(contains(refusal_of(f), "only the fused variant"));
}

TEST(PathChoice, PackedWithTensorCoreRuns) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.packed = true;
  f.segments = 4;  // long packed sequences are split too
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

// Gates (levels 2 and 3) run on the TeamPolicy kernels (kokkoskernels,
// hosttile), on the register-blocked kernels (fused and materialized, where
// the plan with the gate's decay rows fits) and on tensor cores over whole
// sequences.
TEST(PathChoice, GatesRunOnTeamPolicyRegisterAndTensorCoreKernels) {
  PathFacts f = on_host();
  f.gated = true;
  EXPECT_EQ(path_of(f), GemmPath::host_tile);
  f.requested = GemmPath::kokkos_kernels;
  EXPECT_EQ(path_of(f), GemmPath::kokkos_kernels);
  f.requested = GemmPath::registers;
  EXPECT_EQ(path_of(f), GemmPath::registers);
  f.variant = Variant::materialized;
  EXPECT_EQ(path_of(f), GemmPath::registers);
  f.variant = Variant::recompute;
  EXPECT_TRUE(contains(refusal_of(f), "only the fused and materialized variants")) << refusal_of(f);
  f.variant = Variant::fused;
  f.register_plan_refusal = "the tiles need more team scratch than the backend offers";
  EXPECT_TRUE(contains(refusal_of(f), "the tiles need more team scratch")) << refusal_of(f);
  PathFacts g = on_cuda();
  g.gated = true;
  EXPECT_EQ(path_of(g), GemmPath::tensor_core);
  g.input = DType::f32;
  EXPECT_EQ(path_of(g), GemmPath::tensor_core);
  g.requested = GemmPath::tensor_core;
  g.segments = 1;
  EXPECT_EQ(path_of(g), GemmPath::tensor_core);
  g.segments = 4;  // split sequences: the gated segment sums
  EXPECT_EQ(path_of(g), GemmPath::tensor_core);
  g.requested = GemmPath::automatic;
  EXPECT_EQ(path_of(g), GemmPath::tensor_core);
  g.segments = 0;
  g.input = DType::f64;  // no tensor cores: the register-blocked kernels, as at level 1
  EXPECT_EQ(path_of(g), GemmPath::registers);
  g.register_plan_refusal = "the tiles need more team scratch than the backend offers";  // else the TeamPolicy kernel
  EXPECT_EQ(path_of(g), GemmPath::kokkos_kernels);
}

// GLA's gk: tensor cores over whole or split sequences (the segment sums
// carry its per-channel decays); without tensor cores the register-blocked
// kernels where their plan fits (faster on a GPU; path_choice.cpp), else the
// TeamPolicy kernel.
TEST(PathChoice, ChannelGateRunsOnTensorCoresWholeOrSplit) {
  PathFacts f = on_cuda();
  f.gated = true;
  f.channel_gated = true;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.segments = 1;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.packed = true;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.input = DType::f32;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.segments = 2;  // split sequences: the segment sums carry gk's per-channel decays
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.requested = GemmPath::tensor_core;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.segments = 0;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.requested = GemmPath::automatic;
  f.input = DType::f64;  // no tensor cores: the register-blocked kernels
  EXPECT_EQ(path_of(f), GemmPath::registers);
  f.requested = GemmPath::registers;
  EXPECT_EQ(path_of(f), GemmPath::registers);
  f.register_plan_refusal = "the tiles need more team scratch than the backend offers";
  EXPECT_TRUE(contains(refusal_of(f), "more team scratch")) << refusal_of(f);
  f.requested = GemmPath::automatic;  // where they do not fit, the TeamPolicy kernel
  EXPECT_EQ(path_of(f), GemmPath::kokkos_kernels);
  f.backend = Backend::host;  // on the host, the host tile GEMM
  EXPECT_EQ(path_of(f), GemmPath::host_tile);
}

TEST(PathChoice, Fp64WithTensorCoreIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.input = DType::f64;
  EXPECT_TRUE(contains(refusal_of(f), "fp16, bf16 or fp32 inputs, not fp64")) << refusal_of(f);
}

TEST(PathChoice, Fp32OddAboveDk128WithTensorCoreIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.input = DType::f32;
  f.DK = 255;
  EXPECT_TRUE(contains(refusal_of(f), "fp32 inputs up to DK 128, or an even DK up to 256")) << refusal_of(f);
  EXPECT_TRUE(contains(refusal_of(f), "here DK 255")) << refusal_of(f);
}

TEST(PathChoice, Fp32NormalizedAboveDk128WithTensorCoreIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.input = DType::f32;
  f.DK = 192;
  f.normalize = true;
  EXPECT_TRUE(contains(refusal_of(f), "normalizes fp32 inputs up to DK 128 only")) << refusal_of(f);
}

// Each key half of a 256-key fp32 head is a 128-row DK tile: blocks of at
// most 64 columns; each counts as a grid row.
TEST(PathChoice, Fp32KeyHalvesTakeTheirTilesBlockAndGridLimits) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.input = DType::f32;
  f.DK = 256;
  f.block_dv = 64;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.block_dv = 128;
  EXPECT_TRUE(contains(refusal_of(f), "block_dv 128 is wider than DK 256 with fp32 inputs allows (64)")) << refusal_of(f);
  f.block_dv = 0;
  f.B = 1;
  f.H = 40000;  // 80000 grid rows as halves
  EXPECT_TRUE(contains(refusal_of(f), "(times 2 key halves) exceeds the CUDA grid limit")) << refusal_of(f);
  f.input = DType::bf16;  // whole heads: 40000 rows
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

// fp32 tiles of a 128-row DK tile leave room for blocks of 64 columns, of a 64-row one for 128.
TEST(PathChoice, Fp32BlockDvWiderThanItsTilesAllowIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.input = DType::f32;
  f.DK = 128;
  f.block_dv = 128;
  EXPECT_TRUE(contains(refusal_of(f), "block_dv 128 is wider than DK 128 with fp32 inputs allows (64)")) << refusal_of(f);
  f.block_dv = 64;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.DK = 64;
  f.block_dv = 128;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, Chunk32WithTensorCoreIsRefusedWithTheShapeRule) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.chunk = 32;
  const std::string why = refusal_of(f);
  EXPECT_TRUE(contains(why, "chunk 64, DK in 1..256 and DV in 1..512 (here chunk 32")) << why;
}

TEST(PathChoice, BlockDv48WithTensorCoreIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.block_dv = 48;
  EXPECT_TRUE(contains(refusal_of(f), "block_dv 32, 64 or 128, not 48"));
}

// Every head size up to DK 256 and DV 512 runs on tensor cores, padded on chip
// (tile_rules.hpp), a block_dv that does not divide DV too; past those bounds
// the refusal says the rule.
TEST(PathChoice, EveryHeadSizeUpTo256By512TakesTensorCores) {
  for (std::int64_t dk : {1, 16, 32, 48, 60, 96, 100, 192, 256})
    for (std::int64_t dv : {1, 16, 60, 96, 100, 256, 512}) {
      PathFacts f = asking(on_cuda(), GemmPath::automatic);
      f.DK = dk;
      f.DV = dv;
      EXPECT_EQ(path_of(f), GemmPath::tensor_core) << "DK " << dk << " DV " << dv;
    }
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.DV = 96;
  f.block_dv = 64;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  for (auto [dk, dv] : {std::pair<std::int64_t, std::int64_t>{257, 64}, {64, 513}}) {
    f.DK = dk;
    f.DV = dv;
    f.block_dv = 0;
    EXPECT_TRUE(contains(refusal_of(f), "DK in 1..256 and DV in 1..512 (here chunk 64, DK " + std::to_string(dk)))
        << refusal_of(f);
    f.requested = GemmPath::automatic;
    EXPECT_NE(path_of(f), GemmPath::tensor_core);
    f.requested = GemmPath::tensor_core;
  }
}

// A 256-row DK tile leaves shared memory for blocks of 64 columns only with
// one 16-bit state tile (16-bit o), else 32; 128 never.
TEST(PathChoice, BlockDvWiderThanTheDkTileAllowsIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.DK = 192;
  f.DV = 128;
  f.block_dv = 128;
  EXPECT_TRUE(contains(refusal_of(f), "block_dv 128 is wider than DK 192 allows (64)")) << refusal_of(f);
  f.block_dv = 64;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
  f.one_state_tile = false;  // fp32 o: the state's hi and lo tiles
  EXPECT_TRUE(contains(refusal_of(f), "block_dv 64 is wider than DK 192 allows (32)")) << refusal_of(f);
  f.block_dv = 32;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, BTimesH65536WithTensorCoreIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::tensor_core);
  f.B = 4096;
  f.H = 16;
  EXPECT_TRUE(contains(refusal_of(f), "grid limit"));
}

TEST(PathChoice, HostTileOnCudaIsRefused) {
  EXPECT_TRUE(contains(refusal_of(asking(on_cuda(), GemmPath::host_tile)), "--gemm hosttile is not available"));
}

TEST(PathChoice, HostTileOnOtherDeviceIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::host_tile);
  f.backend = Backend::other_device;
  EXPECT_TRUE(contains(refusal_of(f), "--gemm hosttile is not available"));
}

TEST(PathChoice, RegisterPlanRefusedIsTheRefusalUnderRegisters) {
  PathFacts f = asking(on_cuda(), GemmPath::registers);
  f.register_plan_refusal = "the tiles need more team scratch than the backend offers";
  EXPECT_EQ(refusal_of(f), "--gemm registers is not available: the tiles need more team scratch than the backend offers");
}

TEST(PathChoice, RecomputeWithRegistersIsRefused) {
  PathFacts f = asking(on_host(), GemmPath::registers);
  f.variant = Variant::recompute;
  EXPECT_TRUE(contains(refusal_of(f), "--gemm registers is not available: only the fused and materialized variants"));
}

TEST(PathChoice, RecurrentWithRegistersIsRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::registers);
  f.variant = Variant::recurrent;
  EXPECT_TRUE(contains(refusal_of(f), "only the fused and materialized variants"));
}

// --- segments: only the tensor-core kernel splits sequences ------------------

TEST(PathChoice, SegmentsOnTensorCoresRun) {
  PathFacts f = on_cuda();
  f.segments = 4;
  EXPECT_EQ(path_of(f), GemmPath::tensor_core);
}

TEST(PathChoice, SegmentsOneRunsAnywhere) {
  PathFacts f = on_host();
  f.segments = 1;
  EXPECT_EQ(path_of(f), GemmPath::host_tile);
}

TEST(PathChoice, SegmentsOffTensorCoresAreRefusedWithTheReason) {
  PathFacts f = on_cuda();
  f.chunk = 32;
  f.segments = 2;
  const std::string why = refusal_of(f);
  EXPECT_TRUE(contains(why, "tensor-core kernel only")) << why;
  EXPECT_TRUE(contains(why, "chunk 64")) << why;
}

TEST(PathChoice, SegmentsWithKokkosKernelsOnCudaAreRefused) {
  PathFacts f = asking(on_cuda(), GemmPath::kokkos_kernels);
  f.segments = 2;
  EXPECT_TRUE(contains(refusal_of(f), "--gemm kokkoskernels was asked for"));
}

TEST(PathChoice, SegmentsOnHostAreRefused) {
  PathFacts f = on_host();
  f.segments = 2;
  EXPECT_TRUE(contains(refusal_of(f), "tensor-core kernel only"));
}

// --- the same rule everywhere ----------------------------------------------

// The --gemm help states the tensor-core shape with the words of the refusal.
TEST(PathChoice, HelpStatesTheTensorCoreRule) {
  const std::string help = gemm_option_help();
  EXPECT_TRUE(contains(help, "chunk 64, DK in 1..256 and DV in 1..512")) << help;
  EXPECT_TRUE(contains(help, "B * H <= 65535")) << help;
}

// This build's facts: the backend of Kokkos' default execution space.
TEST(PathChoice, ThisBuildsBackend) {
#if defined(KOKKOS_ENABLE_CUDA)
  EXPECT_EQ(kernel_backend(), Backend::cuda);
#else
  EXPECT_EQ(kernel_backend(), host_execution ? Backend::host : Backend::other_device);
#endif
}

// This build's facts of a problem and its options, each from where it lives.
TEST(PathChoice, ThisBuildsFacts) {
  Problem p;
  p.B = 1; p.T = 100; p.H = 3; p.DK = 64; p.DV = 96; p.chunk = 32;
  p.cu_seqlens = {0, 40, 100};
  ForwardConfig cfg;
  cfg.variant = Variant::materialized;
  cfg.gemm = GemmPath::registers;
  cfg.block_dv = 32;
  cfg.segments = 2;
  const PathFacts f = path_facts_here<bf16_t>(p, cfg);
  EXPECT_EQ(f.backend, kernel_backend());
  EXPECT_EQ(f.variant, Variant::materialized);
  EXPECT_EQ(f.requested, GemmPath::registers);
  EXPECT_EQ(f.input, DType::bf16);
  EXPECT_EQ(f.chunk, 32);
  EXPECT_EQ(f.DK, 64);
  EXPECT_EQ(f.DV, 96);
  EXPECT_EQ(f.B, 1);
  EXPECT_EQ(f.H, 3);
  EXPECT_TRUE(f.packed);
  EXPECT_EQ(f.block_dv, 32);
  EXPECT_EQ(f.segments, 2);
  EXPECT_EQ(f.register_plan_refusal, "");
  EXPECT_EQ(path_facts_here<float>(p, cfg).input, DType::f32);
  EXPECT_EQ(path_facts_here<double>(p, cfg).input, DType::f64);
  EXPECT_EQ(path_facts_here<fp16_t>(p, cfg).input, DType::f16);
  p.cu_seqlens.clear();
  p.B = 2;
  EXPECT_FALSE(path_facts_here<bf16_t>(p, cfg).packed);
  EXPECT_EQ(path_facts_here<bf16_t>(p, cfg).B, 2);
  cfg.team_size = 2;  // too few threads for the register tiles on every backend
  EXPECT_EQ(path_facts_here<bf16_t>(p, cfg).register_plan_refusal,
            (register_tiles::make_plan<bf16_t, float>(p, 32, 2).unavailable));
  EXPECT_NE(path_facts_here<bf16_t>(p, cfg).register_plan_refusal, "");
}

// check_forward (run, bench, run_forward) refuses with choose_path's message.
TEST(PathChoice, CheckForwardThrowsTheRefusal) {
  Problem p;
  p.B = 1; p.T = 64; p.H = 1; p.DK = 64; p.DV = 64; p.chunk = 64;
  ForwardConfig cfg;
  cfg.variant = Variant::materialized;
  cfg.gemm = GemmPath::tensor_core;
  const PathChoice choice = choose_forward_path(p, cfg, DType::bf16);
  ASSERT_FALSE(choice.ok());
  try {
    check_forward(p, cfg, DType::bf16);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), choice.refusal);
  }
}

// --- the backward -----------------------------------------------------------

// bf16 in and out, chunk 64, DK 128, DV 128 on CUDA: the tensor-core backward's home.
BackwardPathFacts backward_on_cuda() {
  BackwardPathFacts f;
  f.backend = Backend::cuda;
  f.input = DType::bf16;
  f.chunk = 64;
  f.DK = 128;
  f.DV = 128;
  return f;
}

GemmPath backward_path_of(const BackwardPathFacts& f) {
  const PathChoice c = choose_backward_path(f);
  EXPECT_TRUE(c.ok()) << c.refusal;
  return c.path;
}

std::string backward_refusal_of(const BackwardPathFacts& f) {
  const PathChoice c = choose_backward_path(f);
  EXPECT_FALSE(c.ok()) << "ran on " << gemm_path_name(c.path);
  return c.refusal;
}

TEST(BackwardPathChoice, Bf16OnCudaTakesTensorCores) {
  EXPECT_EQ(backward_path_of(backward_on_cuda()), GemmPath::tensor_core);
  BackwardPathFacts f = backward_on_cuda();
  f.input = DType::f16;
  f.DK = 64;
  f.DV = 64;
  EXPECT_EQ(backward_path_of(f), GemmPath::tensor_core);
  f.DK = 128;  // DK != DV
  EXPECT_EQ(backward_path_of(f), GemmPath::tensor_core);
  // Every head up to DK 256 and DV 512 (the tiled chunk kernels, tile_rules.hpp).
  for (auto [dk, dv] : {std::pair{96, 96}, {60, 60}, {256, 512}, {1, 1}, {32, 512}, {250, 20}}) {
    f.DK = dk;
    f.DV = dv;
    EXPECT_EQ(backward_path_of(f), GemmPath::tensor_core) << dk << " x " << dv;
  }
}

// fp32 inputs (fp32 tiles, three TF32 products) at every head size, their
// gradients in fp32 whether or not --out-dtype fp32 says so.
// A gated backward takes tensor cores as level 1 does (every head, fp32 too);
// fp64 and a host backend the TeamPolicy backward.
TEST(BackwardPathChoice, GatesTakeTensorCores) {
  BackwardPathFacts f = backward_on_cuda();
  f.gated = true;
  EXPECT_EQ(backward_path_of(f), GemmPath::tensor_core);
  f.input = DType::f32;
  f.DK = 256;
  f.DV = 512;
  EXPECT_EQ(backward_path_of(f), GemmPath::tensor_core);
  f.input = DType::f64;
  EXPECT_EQ(backward_path_of(f), GemmPath::kokkos_kernels);
  BackwardPathFacts h = backward_on_cuda();
  h.backend = Backend::host;
  h.gated = true;
  EXPECT_EQ(backward_path_of(h), GemmPath::host_tile);
}

TEST(BackwardPathChoice, Fp32InputsTakeTensorCores) {
  BackwardPathFacts f = backward_on_cuda();
  f.input = DType::f32;
  for (auto [dk, dv] : {std::pair{128, 128}, {64, 64}, {256, 512}, {60, 100}, {1, 1}}) {
    f.DK = dk;
    f.DV = dv;
    EXPECT_EQ(backward_path_of(f), GemmPath::tensor_core) << dk << " x " << dv;
  }
  f.output_fp32 = true;
  EXPECT_EQ(backward_path_of(f), GemmPath::tensor_core);
  f.output_fp32 = false;
  f.input = DType::f64;
  f.requested = GemmPath::tensor_core;
  EXPECT_TRUE(contains(backward_refusal_of(f), "fp16, bf16 or fp32 inputs, not fp64")) << backward_refusal_of(f);
}

TEST(BackwardPathChoice, WhatTensorCoresCannotRunTakesKokkosKernelsUnderAuto) {
  BackwardPathFacts fp32_out = backward_on_cuda(), fp64_in = backward_on_cuda(), chunk32 = backward_on_cuda(),
                    dk512 = backward_on_cuda(), dv1024 = backward_on_cuda();
  fp32_out.output_fp32 = true;
  fp64_in.input = DType::f64;
  chunk32.chunk = 32;
  dk512.DK = 512;
  dv1024.DV = 1024;
  for (const BackwardPathFacts& f : {fp32_out, fp64_in, chunk32, dk512, dv1024}) {
    EXPECT_EQ(backward_path_of(f), GemmPath::kokkos_kernels);
    BackwardPathFacts asked = f;
    asked.requested = GemmPath::tensor_core;
    EXPECT_TRUE(contains(backward_refusal_of(asked), "--gemm tensorcore is not available for the backward"));
  }
  fp32_out.requested = GemmPath::tensor_core;
  EXPECT_TRUE(contains(backward_refusal_of(fp32_out), "fp32"));
  chunk32.requested = GemmPath::tensor_core;
  EXPECT_TRUE(contains(backward_refusal_of(chunk32), "chunk 32"));
  dk512.requested = GemmPath::tensor_core;
  EXPECT_TRUE(contains(backward_refusal_of(dk512), "DK in 1..256 and DV in 1..512 (here chunk 64, DK 512, DV 128)"));
}

TEST(BackwardPathChoice, ExplicitRequestsRunAsAskedOrAreRefused) {
  BackwardPathFacts f = backward_on_cuda();
  f.requested = GemmPath::kokkos_kernels;
  EXPECT_EQ(backward_path_of(f), GemmPath::kokkos_kernels);
  f.requested = GemmPath::tensor_core;
  EXPECT_EQ(backward_path_of(f), GemmPath::tensor_core);
  f.requested = GemmPath::host_tile;
  EXPECT_TRUE(contains(backward_refusal_of(f), "not a host space"));
  f.requested = GemmPath::registers;
  EXPECT_TRUE(contains(backward_refusal_of(f), "--gemm registers is not available for the backward"));
}

TEST(BackwardPathChoice, HostTakesHostTilesAndOtherDevicesKokkosKernels) {
  BackwardPathFacts f = backward_on_cuda();
  f.backend = Backend::host;
  EXPECT_EQ(backward_path_of(f), GemmPath::host_tile);
  f.requested = GemmPath::tensor_core;
  EXPECT_TRUE(contains(backward_refusal_of(f), "needs the CUDA backend"));
  f.backend = Backend::other_device;
  f.requested = GemmPath::automatic;
  EXPECT_EQ(backward_path_of(f), GemmPath::kokkos_kernels);
}

// Before a case is known (a batch's first check), only what holds for every case is refused.
TEST(BackwardPathChoice, WithoutACaseOnlyCaseFreeFactsDecide) {
  BackwardPathFacts f = backward_on_cuda();
  f.known_case = false;
  f.input = DType::f64;  // ignored without a case
  f.chunk = 16;
  EXPECT_TRUE(choose_backward_path(f).ok());
  f.requested = GemmPath::tensor_core;
  EXPECT_TRUE(choose_backward_path(f).ok());
  f.output_fp32 = true;
  EXPECT_TRUE(contains(backward_refusal_of(f), "fp32"));
  f.output_fp32 = false;
  f.backend = Backend::host;
  EXPECT_TRUE(contains(backward_refusal_of(f), "needs the CUDA backend"));
}

}  // namespace
}  // namespace linattn
