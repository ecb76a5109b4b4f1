// The benchmark engine times every variant it is asked for, on data it makes on
// the device, and checks o against the fp64 reference (so a fast but wrong
// kernel cannot hide behind a good time).
#include "app/text_table.hpp"
#include "benchmark/benchmark.hpp"
#include "core/accuracy_levels.hpp"
#include "core/ledger.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace linattn {
namespace {

TEST(Benchmark, TimesEachVariantAndChecksAccuracy) {
  BenchConfig bc;
  bc.problem.B = 1; bc.problem.T = 130; bc.problem.H = 2; bc.problem.DK = 32; bc.problem.DV = 32; bc.problem.chunk = 32;
  bc.dtype = DType::f32;
  bc.snapshots = SnapshotMode::accumulation;
  bc.reps = 3;
  bc.warmup = 1;
  bc.accuracy_tokens = 100;
  const BenchReport r = run_benchmark(bc);
  EXPECT_GT(r.copy_gbps, 0.0);
  EXPECT_FALSE(r.backend.empty());
  ASSERT_EQ(r.rows.size(), 3u);
  for (const VariantTiming& row : r.rows) {
    SCOPED_TRACE(variant_name(row.variant));
    EXPECT_GT(row.median_ms, 0.0);
    EXPECT_LE(row.min_ms, row.median_ms);
    EXPECT_GT(row.min_bytes, 0.0);
    EXPECT_EQ(row.flops, variant_flops(bc.problem, row.variant));
    EXPECT_NEAR(row.gbps, row.min_bytes / (row.median_ms * 1e-3) / 1e9, 1e-9 * row.gbps);
    EXPECT_LE(row.o_rel_l2, stored_level(DType::f32, DType::f32));  // NaN fails too
  }
}

// `bench --seqlens --normalize`: a packed, normalized batch is timed on the
// path `run` takes (tensor cores on CUDA builds, for the fused variant) and its
// o checked against the fp64 reference of the slice's sequences (a reference
// that ignored the cuts or the normalization would be far off).
TEST(Benchmark, PackedAndNormalizedBatchesAreCheckedAgainstTheirReference) {
  BenchConfig bc;
  bc.problem.B = 1; bc.problem.T = 700; bc.problem.H = 2; bc.problem.DK = 64; bc.problem.DV = 64; bc.problem.chunk = 64;
  bc.problem.cu_seqlens = {0, 1, 64, 130, 500, 700};
  bc.dtype = DType::bf16;
  bc.variants = {Variant::fused, Variant::materialized};
  bc.snapshots = SnapshotMode::bf16;
  bc.output_fp32 = true;
  bc.reps = 2;
  bc.warmup = 1;
  bc.accuracy_tokens = 600;  // cuts the fourth sequence
  for (bool normalize : {false, true}) {
    bc.normalize = normalize;
    const BenchReport r = run_benchmark(bc);
    ASSERT_EQ(r.rows.size(), 2u);
    for (const VariantTiming& row : r.rows) {
      SCOPED_TRACE(std::string(variant_name(row.variant)) + (normalize ? " normalized" : ""));
      EXPECT_GT(row.median_ms, 0.0);
      // materialized reads its bf16 snapshots back; tensor cores add their split level (docs/NUMERICS.md)
      EXPECT_LE(row.o_rel_l2, stored_level(DType::bf16, DType::f32) + unit_roundoff(DType::bf16));
    }
  }
}

// `bench --backward`: one backward row, timed on data made on the device, its
// dq, dk and dv on the (b = 0, h = 0) row checked against the fp64 reference
// (plain and packed; a kernel that wrote nothing would show the NaN poison).
// `bench --gate`: plain and packed batches with g or g_gamma, every variant,
// o checked against the gated fp64 reference of the slice (level 1's o would
// be far off at these decays).
TEST(Benchmark, GatedRowsAreCheckedAgainstTheGatedReference) {
  for (GateKind gate : {GateKind::per_head, GateKind::per_token, GateKind::per_channel})
    for (bool packed : {false, true}) {
      SCOPED_TRACE(std::string(gate_dataset_name(gate)) + (packed ? " packed" : ""));
      BenchConfig bc;
      bc.problem.B = packed ? 1 : 2; bc.problem.T = 300; bc.problem.H = 3; bc.problem.DK = 16; bc.problem.DV = 24;
      bc.problem.chunk = 32;
      if (packed) bc.problem.cu_seqlens = {0, 1, 64, 130, 300};
      bc.dtype = DType::f32;
      bc.snapshots = SnapshotMode::accumulation;
      bc.gate = gate;
      bc.variants = {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent};
      bc.reps = 2;
      bc.warmup = 1;
      bc.accuracy_tokens = 200;
      const BenchReport r = run_benchmark(bc);
      ASSERT_EQ(r.rows.size(), 4u);
      for (const VariantTiming& row : r.rows) {
        SCOPED_TRACE(variant_name(row.variant));
        EXPECT_LE(row.o_rel_l2, stored_level(DType::f32, DType::f32));
      }
    }
}

TEST(Benchmark, BackwardRowIsCheckedAgainstTheReference) {
  BenchConfig bc;
  bc.problem.B = 1; bc.problem.T = 300; bc.problem.H = 2; bc.problem.DK = 32; bc.problem.DV = 48; bc.problem.chunk = 32;
  bc.dtype = DType::f32;
  bc.snapshots = SnapshotMode::accumulation;
  bc.backward = true;
  bc.reps = 2;
  bc.warmup = 1;
  bc.accuracy_tokens = 200;
  for (bool packed : {false, true}) {
    bc.problem.cu_seqlens = packed ? std::vector<std::int64_t>{0, 1, 64, 130, 300} : std::vector<std::int64_t>{};
    const BenchReport r = run_benchmark(bc);
    ASSERT_EQ(r.rows.size(), 1u);
    const VariantTiming& row = r.rows[0];
    EXPECT_TRUE(row.backward);
    EXPECT_GT(row.median_ms, 0.0);
    EXPECT_GT(row.min_bytes, 0.0);
    EXPECT_LE(row.o_rel_l2, stored_level(DType::f32, DType::f32)) << (packed ? "packed" : "plain");
    EXPECT_LE(row.dk_rel_l2, stored_level(DType::f32, DType::f32)) << (packed ? "packed" : "plain");
    EXPECT_LE(row.dv_rel_l2, stored_level(DType::f32, DType::f32)) << (packed ? "packed" : "plain");
  }
  bc.normalize = true;
  EXPECT_THROW(run_benchmark(bc), std::invalid_argument);
}

// `bench --accuracy-tokens 0`: the rows are timed and not checked (the whole
// row's fp64 reference of a large gk backward takes minutes); their errors are
// NaN, which the table prints as "-", never a number that looks measured.
TEST(Benchmark, AccuracyTokensZeroTimesWithoutChecking) {
  BenchConfig bc;
  bc.problem.B = 1; bc.problem.T = 200; bc.problem.H = 2; bc.problem.DK = 32; bc.problem.DV = 16; bc.problem.chunk = 32;
  bc.dtype = DType::f32;
  bc.snapshots = SnapshotMode::accumulation;
  bc.reps = 1;
  bc.warmup = 0;
  bc.accuracy_tokens = 0;
  bc.gate = GateKind::per_channel;
  for (bool backward : {false, true}) {
    bc.backward = backward;
    bc.variants = {Variant::fused};
    const BenchReport r = run_benchmark(bc);
    ASSERT_EQ(r.rows.size(), 1u);
    const VariantTiming& row = r.rows[0];
    EXPECT_GT(row.median_ms, 0.0);
    EXPECT_TRUE(std::isnan(row.o_rel_l2)) << (backward ? "backward" : "forward");
    if (backward) {
      EXPECT_TRUE(std::isnan(row.dk_rel_l2));
      EXPECT_TRUE(std::isnan(row.dv_rel_l2));
      EXPECT_TRUE(std::isnan(row.dg_rel_l2));
    }
  }
  // With a check, the same rows carry finite errors.
  bc.accuracy_tokens = 64;
  for (bool backward : {false, true}) {
    bc.backward = backward;
    const BenchReport r = run_benchmark(bc);
    ASSERT_EQ(r.rows.size(), 1u);
    EXPECT_TRUE(std::isfinite(r.rows[0].o_rel_l2)) << (backward ? "backward" : "forward");
    if (backward) EXPECT_TRUE(std::isfinite(r.rows[0].dg_rel_l2));
  }
  EXPECT_EQ(scientific(std::nan(""), 2), "-");
}

// `bench --gate --backward`: the gated forward stores h, the gated backward is
// timed; dq, dk, dv and dg of the (b = 0, h = 0) row against the gated fp64
// reference (level 1's gradients would be far off at these decays; an
// unwritten dg would show the NaN poison), plain and packed, g, g_gamma and gk (dgk).
TEST(Benchmark, GatedBackwardRowIsCheckedAgainstTheGatedReference) {
  for (GateKind gate : {GateKind::per_head, GateKind::per_token, GateKind::per_channel})
    for (bool packed : {false, true}) {
      SCOPED_TRACE(std::string(gate_dataset_name(gate)) + (packed ? " packed" : ""));
      BenchConfig bc;
      bc.problem.B = packed ? 1 : 2; bc.problem.T = 300; bc.problem.H = 3; bc.problem.DK = 16; bc.problem.DV = 24;
      bc.problem.chunk = 32;
      if (packed) bc.problem.cu_seqlens = {0, 1, 64, 130, 300};
      bc.dtype = DType::f32;
      bc.snapshots = SnapshotMode::accumulation;
      bc.backward = true;
      bc.gate = gate;
      bc.reps = 2;
      bc.warmup = 1;
      const BenchReport r = run_benchmark(bc);
      ASSERT_EQ(r.rows.size(), 1u);
      const VariantTiming& row = r.rows[0];
      EXPECT_TRUE(row.backward);
      EXPECT_GT(row.median_ms, 0.0);
      EXPECT_LE(row.o_rel_l2, stored_level(DType::f32, DType::f32)) << "dq";
      EXPECT_LE(row.dk_rel_l2, stored_level(DType::f32, DType::f32)) << "dk";
      EXPECT_LE(row.dv_rel_l2, stored_level(DType::f32, DType::f32)) << "dv";
      EXPECT_LE(row.dg_rel_l2, gate_gradient_level(DType::f32, false)) << "dg";
      EXPECT_GT(row.dg_rel_l2, 0.0) << "dg compared at all";
    }
}

// `bench --gate --state-pass` on the TeamPolicy tiles: the gated state pass
// row's final state is the gated fused forward's, bit for bit (its column 0).
TEST(Benchmark, GatedStatePassRowIsTheForwardsFinalState) {
  for (GateKind gate : {GateKind::per_head, GateKind::per_token, GateKind::per_channel}) {
    SCOPED_TRACE(gate_dataset_name(gate));
    BenchConfig bc;
    bc.problem.B = 2; bc.problem.T = 300; bc.problem.H = 3; bc.problem.DK = 16; bc.problem.DV = 24; bc.problem.chunk = 32;
    bc.dtype = DType::f32;
    bc.gemm = GemmPath::kokkos_kernels;  // the fused tiles' state pass on every backend
    bc.snapshots = SnapshotMode::accumulation;
    bc.variants = {Variant::fused};
    bc.state_pass = true;
    bc.gate = gate;
    bc.reps = 2;
    bc.warmup = 1;
    const BenchReport r = run_benchmark(bc);
    ASSERT_EQ(r.rows.size(), 2u);
    EXPECT_TRUE(r.rows[1].state_pass);
    EXPECT_EQ(r.rows[1].o_rel_l2, 0.0);
    EXPECT_LE(r.rows[0].o_rel_l2, stored_level(DType::f32, DType::f32));
  }
}

// An explicit path that cannot run for one of the variants is refused before
// any is timed, with the message `run` gives (it once ran materialized on the
// portable kernels under --gemm tensorcore).
TEST(Benchmark, RefusesAPathThatCannotRun) {
  BenchConfig bc;
  bc.problem.B = 1; bc.problem.T = 128; bc.problem.H = 1; bc.problem.DK = 64; bc.problem.DV = 64; bc.problem.chunk = 64;
  bc.dtype = DType::bf16;
  bc.variants = {Variant::fused, Variant::materialized};
  bc.gemm = GemmPath::tensor_core;
  bc.reps = 1;
  bc.warmup = 0;
  try {
    run_benchmark(bc);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--gemm tensorcore is not available"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace linattn
