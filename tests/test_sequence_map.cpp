// Where each chunk lies, as the kernels find it on the device (SequenceMap:
// locate_chunk, sequence, chunk_length) and as the host finds it (Problem:
// chunk_starts, total_chunks, chunk_length; chunk_token_ranges). The named
// cases are written out by hand; seeded random packed batches check that the
// chunks tile every sequence and that the one-pass sums give the definition.
// (That they stay one pass: test_many_sequences.cpp.)
#include "core/chunk_length.hpp"
#include "core/problem.hpp"
#include "kernels/execution.hpp"
#include "kernels/sequence_map.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <random>
#include <vector>

namespace linattn {
namespace {

// Global chunk g as the kernels see it.
struct ChunkPlace {
  int n, c;        // sequence, chunk within it
  int b, t0, L;    // batch row, first token in the row, tokens
  int h_b, h_c;    // where its snapshot goes in h
  bool operator==(const ChunkPlace& o) const {
    return n == o.n && c == o.c && b == o.b && t0 == o.t0 && L == o.L && h_b == o.h_b && h_c == o.h_c;
  }
};

}  // namespace

bool operator==(const TokenRange& a, const TokenRange& b) { return a.t0 == b.t0 && a.length == b.length; }
std::ostream& operator<<(std::ostream& os, const TokenRange& r) {
  return os << "{t0 " << r.t0 << ", " << r.length << " tokens}";
}

namespace {

std::ostream& operator<<(std::ostream& os, const ChunkPlace& x) {
  return os << "{n " << x.n << ", c " << x.c << ", b " << x.b << ", t0 " << x.t0 << ", L " << x.L << ", h (" << x.h_b
            << ", " << x.h_c << ")}";
}

// Runs the map on the execution space (its offsets live in device memory) and
// brings the place of every global chunk back.
std::vector<ChunkPlace> chunk_places(const Problem& p) {
  const SequenceMap map = make_sequence_map(p);
  Kokkos::View<int**, Kokkos::LayoutRight, MemSpace> out("linattn::test::chunk_places", map.total_chunks, 7);
  Kokkos::parallel_for(
      "linattn::test::chunk_places", Kokkos::RangePolicy<ExecSpace>(0, map.total_chunks), KOKKOS_LAMBDA(const int g) {
        int n = 0, c = 0;
        map.locate_chunk(g, n, c);
        const Sequence seq = map.sequence(n);
        out(g, 0) = n;
        out(g, 1) = c;
        out(g, 2) = seq.b;
        out(g, 3) = seq.t0 + c * map.C;
        out(g, 4) = chunk_length(c, seq.length, map.C);
        out(g, 5) = seq.h_b;
        out(g, 6) = seq.h_c0 + c;
      });
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  std::vector<ChunkPlace> places;
  for (int g = 0; g < map.total_chunks; ++g)
    places.push_back({host(g, 0), host(g, 1), host(g, 2), host(g, 3), host(g, 4), host(g, 5), host(g, 6)});
  return places;
}

Problem packed(std::vector<std::int64_t> cu_seqlens, std::int64_t chunk) {
  Problem p;
  p.B = 1;
  p.T = cu_seqlens.back();
  p.H = 2;
  p.DK = 8;
  p.DV = 8;
  p.chunk = chunk;
  p.scale = 0.35;
  p.cu_seqlens = std::move(cu_seqlens);
  return p;
}

TEST(ChunkLength, FullChunksThenARaggedLast) {
  EXPECT_EQ(chunk_length(0, 135, 64), 64);
  EXPECT_EQ(chunk_length(1, 135, 64), 64);
  EXPECT_EQ(chunk_length(2, 135, 64), 7);
  EXPECT_EQ(chunk_length(1, 128, 64), 64);  // a last chunk that is full
  EXPECT_EQ(chunk_length(0, 1, 64), 1);
  EXPECT_EQ(chunk_length(0, 63, 16), 16);
  EXPECT_EQ(chunk_length(3, 63, 16), 15);
}

// Sequences of 1, 63, 1 and 135 tokens at chunk 64: one chunk each, then 64 + 64 + 7.
TEST(SequenceMap, PackedBatchChunkPlaces) {
  const Problem p = packed({0, 1, 64, 65, 200}, 64);
  EXPECT_EQ(p.num_sequences(), 4);
  EXPECT_EQ(p.sequence_chunks(0), 1);
  EXPECT_EQ(p.sequence_chunks(1), 1);
  EXPECT_EQ(p.sequence_chunks(2), 1);
  EXPECT_EQ(p.sequence_chunks(3), 3);
  EXPECT_EQ(p.chunk_starts(), (std::vector<std::int64_t>{0, 1, 2, 3, 6}));
  EXPECT_EQ(p.total_chunks(), 6);

  const std::vector<ChunkPlace> expected{
      // n  c  b   t0   L  h_b h_c
      {0, 0, 0, 0, 1, 0, 0},     //
      {1, 0, 0, 1, 63, 0, 1},    //
      {2, 0, 0, 64, 1, 0, 2},    //
      {3, 0, 0, 65, 64, 0, 3},   //
      {3, 1, 0, 129, 64, 0, 4},  //
      {3, 2, 0, 193, 7, 0, 5},   //
  };
  EXPECT_EQ(chunk_places(p), expected);
}

// Two rows of 130 tokens at chunk 64: chunks of 64, 64 and 2 in each row; h
// has a batch axis, so each row's chunks start again at 0.
TEST(SequenceMap, PlainBatchChunkPlaces) {
  Problem p;
  p.B = 2;
  p.T = 130;
  p.H = 3;
  p.DK = 8;
  p.DV = 8;
  p.chunk = 64;
  p.scale = 0.35;
  EXPECT_EQ(p.num_chunks(), 3);
  EXPECT_EQ(p.chunk_length(0), 64);
  EXPECT_EQ(p.chunk_length(1), 64);
  EXPECT_EQ(p.chunk_length(2), 2);
  EXPECT_EQ(p.chunk_starts(), (std::vector<std::int64_t>{0, 0, 3}));  // each row's h starts at chunk 0
  EXPECT_EQ(p.total_chunks(), 3);
  EXPECT_EQ(chunk_token_ranges(p), (std::vector<TokenRange>{{0, 64}, {64, 64}, {128, 2}}));  // in every row

  const std::vector<ChunkPlace> expected{
      // n  c  b   t0   L  h_b h_c
      {0, 0, 0, 0, 64, 0, 0},    //
      {0, 1, 0, 64, 64, 0, 1},   //
      {0, 2, 0, 128, 2, 0, 2},   //
      {1, 0, 1, 0, 64, 1, 0},    //
      {1, 1, 1, 64, 64, 1, 1},   //
      {1, 2, 1, 128, 2, 1, 2},   //
  };
  EXPECT_EQ(chunk_places(p), expected);
}

// Seeded random lengths: the chunks of each sequence follow one another from
// its first token to its last, each 1..C tokens, numbered from chunk_starts()[n].
TEST(SequenceMap, RandomPackedChunksTileEachSequence) {
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<std::int64_t> length(1, 200);
  std::vector<std::int64_t> cu{0};
  for (int n = 0; n < 9; ++n) cu.push_back(cu.back() + length(rng));
  const Problem p = packed(cu, 32);

  const std::vector<ChunkPlace> places = chunk_places(p);
  ASSERT_EQ(static_cast<std::int64_t>(places.size()), p.total_chunks());
  const std::vector<std::int64_t> starts = p.chunk_starts();
  std::size_t g = 0;
  for (int n = 0; n < static_cast<int>(p.num_sequences()); ++n) {
    ASSERT_EQ(static_cast<std::int64_t>(g), starts[n]);
    std::int64_t t = p.cu_seqlens[n];
    for (int c = 0; t < p.cu_seqlens[n + 1]; ++c, ++g) {
      ASSERT_LT(g, places.size());
      const ChunkPlace& x = places[g];
      EXPECT_EQ(x.n, n);
      EXPECT_EQ(x.c, c);
      EXPECT_EQ(x.t0, t);
      EXPECT_GE(x.L, 1);
      EXPECT_LE(x.L, 32);
      EXPECT_EQ(x.h_c, static_cast<int>(g));
      t += x.L;
      EXPECT_TRUE(x.L == 32 || t == p.cu_seqlens[n + 1]) << x;  // only the last chunk is short
    }
    EXPECT_EQ(t, p.cu_seqlens[n + 1]);
  }
  EXPECT_EQ(g, places.size());
}

// Sequence n's first chunk by the definition: the chunks of the sequences before it.
std::int64_t first_chunk_by_definition(const Problem& p, std::int64_t n) {
  std::int64_t chunks = 0;
  for (std::int64_t m = 0; m < n; ++m) chunks += (p.sequence_length(m) + p.chunk - 1) / p.chunk;
  return chunks;
}

// Seeded random lengths around the chunk (1, 63, 64, 65, C - 1, C, C + 1
// among them) at every supported chunk: the running sums (Problem::chunk_starts,
// the map's chunk_starts, chunk_token_ranges) and the device's lookup of each
// chunk against the definition.
TEST(SequenceMap, RunningSumsGiveTheDefinition) {
  std::mt19937_64 rng(20250114);
  for (const std::int64_t C : {16, 32, 64, 128}) {
    std::vector<std::int64_t> lengths{1, 63, 64, 65, C - 1, C, C + 1, 1};
    std::uniform_int_distribution<std::int64_t> length(1, 3 * C);
    for (int n = 0; n < 200; ++n) lengths.push_back(n % 3 == 0 ? 1 : length(rng));
    std::shuffle(lengths.begin(), lengths.end(), rng);
    std::vector<std::int64_t> cu{0};
    for (const std::int64_t len : lengths) cu.push_back(cu.back() + len);
    const Problem p = packed(cu, C);
    SCOPED_TRACE("chunk " + std::to_string(C));

    const std::vector<std::int64_t> starts = p.chunk_starts();
    ASSERT_EQ(starts.size(), cu.size());
    for (std::int64_t n = 0; n <= p.num_sequences(); ++n)
      EXPECT_EQ(starts[n], first_chunk_by_definition(p, n)) << "sequence " << n;
    EXPECT_EQ(p.total_chunks(), starts.back());

    const SequenceMap map = make_sequence_map(p);
    const auto map_starts = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), map.chunk_starts);
    ASSERT_EQ(map_starts.extent(0), starts.size());
    for (std::size_t n = 0; n < starts.size(); ++n) EXPECT_EQ(map_starts(n), starts[n]) << n;

    // Each chunk's sequence (the device's binary search), place and tokens
    // against the definition: chunk g of sequence n lies in [starts[n], starts[n + 1]).
    const std::vector<ChunkPlace> places = chunk_places(p);
    const std::vector<TokenRange> ranges = chunk_token_ranges(p);
    ASSERT_EQ(static_cast<std::int64_t>(places.size()), starts.back());
    ASSERT_EQ(ranges.size(), places.size());
    for (std::int64_t g = 0; g < starts.back(); ++g) {
      const ChunkPlace& x = places[g];
      EXPECT_LE(starts[x.n], g) << x;
      EXPECT_LT(g, starts[x.n + 1]) << x;
      EXPECT_EQ(x.c, g - starts[x.n]) << x;
      EXPECT_EQ(x.t0, cu[x.n] + x.c * C) << x;
      EXPECT_EQ(x.L, std::min(C, cu[x.n + 1] - x.t0)) << x;
      EXPECT_EQ(x.h_c, g) << x;
      EXPECT_EQ(ranges[g], (TokenRange{x.t0, x.L})) << x;
    }
  }
}

}  // namespace
}  // namespace linattn
