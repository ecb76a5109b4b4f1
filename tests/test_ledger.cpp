// The FLOP/byte ledger reproduces the cost tables linattn was specified with
// (their values are written out below) to the printed digits.
#include "core/ledger.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace linattn {
namespace {

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

Problem seed_problem(std::int64_t N) {  // one (batch, head), D = 64, BC = 64
  Problem p;
  p.B = 1; p.H = 1; p.T = N; p.DK = 64; p.DV = 64; p.chunk = 64;
  return p;
}

TEST(Ledger, ReproducesSeedSection63) {
  struct Row { std::int64_t N, NC; const char *redundancy, *step1, *ideal, *fa, *step1_fa, *ideal_fa; };
  const Row rows[] = {
      {512, 8, "3.5", "0.015", "0.017", "0.034", "0.438", "0.500"},
      {2048, 32, "15.5", "0.260", "0.067", "0.537", "0.484", "0.125"},
      {8192, 128, "63.5", "4.261", "0.268", "8.590", "0.496", "0.031"},
      {16384, 256, "127.5", "17.113", "0.537", "34.360", "0.498", "0.016"},
      {65536, 1024, "511.5", "274.609", "2.147", "549.756", "0.500", "0.004"},
  };
  for (const Row& r : rows) {
    const Problem p = seed_problem(r.N);
    const FlopCounts f = count_flops(p);
    SCOPED_TRACE("N=" + std::to_string(r.N));
    EXPECT_EQ(p.num_chunks(), r.NC);
    EXPECT_EQ(fixed(f.redundancy, 1), r.redundancy);
    EXPECT_EQ(fixed(f.state_recompute / 1e9, 3), r.step1);
    EXPECT_EQ(fixed(f.ideal / 1e9, 3), r.ideal);
    EXPECT_EQ(fixed(f.causal_flash_attention / 1e9, 3), r.fa);
    EXPECT_EQ(fixed(f.state_recompute / f.causal_flash_attention, 3), r.step1_fa);
    EXPECT_EQ(fixed(f.ideal / f.causal_flash_attention, 3), r.ideal_fa);
  }
}

TEST(Ledger, ReproducesSeedSection642) {
  // "sequence out of the grid": one K^T V per chunk; the multiple is (NC - 1) / 2.
  struct Row { std::int64_t N; const char *step1, *sequential, *multiple; };
  const Row rows[] = {{8192, "4.261", "0.067", "63.5"},
                      {16384, "17.113", "0.134", "127.5"},
                      {32768, "68.585", "0.268", "255.5"},
                      {65536, "274.609", "0.537", "511.5"}};
  for (const Row& r : rows) {
    const FlopCounts f = count_flops(seed_problem(r.N));
    EXPECT_EQ(fixed(f.state_recompute / 1e9, 3), r.step1);
    EXPECT_EQ(fixed(f.state_sequential / 1e9, 3), r.sequential);
    EXPECT_EQ(fixed(f.state_recompute / f.state_sequential, 1), r.multiple);
  }
}

TEST(Ledger, SnapshotBytesOfSeedSection643) {
  // B=1, S=32768, H=32, DK=DV=128, chunk 64, bf16: h is 512 MiB, as large as K and V together.
  Problem p;
  p.B = 1; p.T = 32768; p.H = 32; p.DK = 128; p.DV = 128; p.chunk = 64;
  const DType bf16 = DType::bf16;
  const ByteCounts b = count_bytes(p, DType::bf16, DType::bf16, &bf16, false);
  EXPECT_EQ(b.h, 512.0 * 1024 * 1024);
  EXPECT_EQ(b.k + b.v, b.h);
  EXPECT_EQ(b.q, 256.0 * 1024 * 1024);
  EXPECT_EQ(b.final_state, 32.0 * 128 * 128 * 4);
  const ByteCounts none = count_bytes(p, DType::bf16, DType::f32, nullptr, true);
  EXPECT_EQ(none.h, 0.0);
  EXPECT_EQ(none.o, 2 * b.o);
  EXPECT_EQ(none.initial_state, b.final_state);
  EXPECT_EQ(b.gate, 0.0);
}

// The gate's fp32 log-decays are read once: g_gamma one per head, g one per
// token and head, gk one per token, head and key channel (twice bf16 q's bytes).
TEST(Ledger, GateBytesAreItsFp32LogDecays) {
  Problem p;
  p.B = 2; p.T = 4096; p.H = 8; p.DK = 64; p.DV = 32; p.chunk = 64;
  const DType bf16 = DType::bf16;
  const ByteCounts none = count_bytes(p, bf16, bf16, &bf16, false);
  const ByteCounts gamma = count_bytes(p, bf16, bf16, &bf16, false, GateKind::per_head);
  const ByteCounts g = count_bytes(p, bf16, bf16, &bf16, false, GateKind::per_token);
  const ByteCounts gk = count_bytes(p, bf16, bf16, &bf16, false, GateKind::per_channel);
  EXPECT_EQ(gamma.gate, 8.0 * 4);
  EXPECT_EQ(g.gate, 2.0 * 4096 * 8 * 4);
  EXPECT_EQ(gk.gate, 2 * gk.q);
  EXPECT_EQ(gk.total(), none.total() + gk.gate);
}

TEST(Ledger, VariantFlopsMatchTheirForms) {
  Problem p = seed_problem(4096);
  p.B = 2; p.H = 3; p.DV = 32;
  const FlopCounts f = count_flops(p);
  EXPECT_EQ(variant_flops(p, Variant::fused), f.ideal);
  EXPECT_EQ(variant_flops(p, Variant::materialized), f.ideal);
  EXPECT_EQ(variant_flops(p, Variant::recompute), f.state_recompute + f.readout + f.intra);
  EXPECT_EQ(f.ideal, 2.0 * 3 * (4.0 * 4096 * 64 * 32 + 2.0 * 4096 * 64 * (64 + 32)));
}

TEST(Ledger, RecurrentIsFourTDkDvPerHead) {
  Problem p;
  p.B = 2; p.T = 100; p.H = 3; p.DK = 16; p.DV = 24; p.chunk = 32;
  EXPECT_EQ(variant_flops(p, Variant::recurrent), 4.0 * 2 * 3 * 100 * 16 * 24);
  EXPECT_EQ(parse_variant("recurrent"), Variant::recurrent);
  EXPECT_STREQ(variant_name(Variant::recurrent), "recurrent");
}

TEST(Ledger, PackedSequencesCountPerSequence) {
  // Sequences of 1, 63, 64, 65 and 300 tokens at C = 64: 1 + 1 + 1 + 2 + 5 = 10 chunks, and
  // the recompute form rebuilds prefixes only within a sequence (65: 64 tokens; 300: 64 (0+1+2+3+4) tokens).
  Problem p;
  p.B = 1; p.T = 493; p.H = 2; p.DK = 16; p.DV = 8; p.chunk = 64;
  p.cu_seqlens = {0, 1, 64, 128, 193, 493};
  const FlopCounts f = count_flops(p);
  EXPECT_EQ(f.state_recompute, 2.0 * 2 * (64 + 64 * 10) * 16 * 8);
  EXPECT_EQ(f.causal_flash_attention, 2.0 * (1 + 63 * 63 + 64 * 64 + 65 * 65 + 300 * 300) * (16 + 8));
  EXPECT_EQ(f.ideal, 2.0 * (4.0 * 493 * 16 * 8 + 2.0 * 493 * 64 * (16 + 8)));
  const DType f32 = DType::f32;
  const ByteCounts b = count_bytes(p, DType::bf16, DType::bf16, &f32, true);
  EXPECT_EQ(b.h, 10.0 * 2 * 16 * 8 * 4);          // one fp32 snapshot per chunk of each sequence
  EXPECT_EQ(b.final_state, 5.0 * 2 * 16 * 8 * 4);  // one state per sequence
  EXPECT_EQ(b.initial_state, b.final_state);
}

// The gate's extra work, written out for the packed problem above: 493 tokens
// of 2 heads, 10 chunks of each head.
TEST(Ledger, GateCountsItsElementwiseWork) {
  Problem p;
  p.B = 1; p.T = 493; p.H = 2; p.DK = 16; p.DV = 8; p.chunk = 64;
  p.cu_seqlens = {0, 1, 64, 128, 193, 493};
  const GateCounts none = count_gate(p, GateKind::none);
  EXPECT_EQ(none.multiplies + none.exponentials + none.additions + none.bytes, 0.0);
  const GateCounts g = count_gate(p, GateKind::per_token);
  EXPECT_EQ(g.multiplies, 493.0 * 2 * (64 + 8 + 16) + 10.0 * 2 * 16 * 8);
  EXPECT_EQ(g.exponentials, 493.0 * 2 * 66);
  EXPECT_EQ(g.additions, 493.0 * 2);
  EXPECT_EQ(g.bytes, 493.0 * 2 * 4);
  const GateCounts gamma = count_gate(p, GateKind::per_head);
  EXPECT_EQ(gamma.multiplies, g.multiplies);  // the same work; only the gate's bytes differ
  EXPECT_EQ(gamma.bytes, 2.0 * 4);
  // Per key channel: each factor per channel (the scores' 64 x 16 per row, Q's and K's rows), gk read once.
  const GateCounts gk = count_gate(p, GateKind::per_channel);
  EXPECT_EQ(gk.multiplies, 493.0 * 2 * (64 * 16 + 2 * 16) + 10.0 * 2 * 16 * 8);
  EXPECT_EQ(gk.exponentials, 493.0 * 2 * (64 * 16 + 2 * 16) + 10.0 * 2 * 16);
  EXPECT_EQ(gk.additions, 493.0 * 2 * 16);
  EXPECT_EQ(gk.bytes, 493.0 * 2 * 16 * 4);
}

}  // namespace
}  // namespace linattn
