// chunk_errors (`linattn verify --per-chunk`) finds each chunk's tokens and
// snapshot: one wrong element of o or h shows in its own chunk and in no
// other, for a packed batch (lengths around the chunk) and a plain one (a
// ragged last chunk in every row).
#include "app/chunk_errors.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace linattn {
namespace {

struct Outputs {
  std::vector<double> o, o_ref, h, h_ref;
};

// Outputs equal to their references, each element different.
Outputs equal_outputs(const Problem& p) {
  Outputs x;
  x.o_ref.resize(static_cast<std::size_t>(p.B * p.T * p.H * p.DV));
  x.h_ref.resize(static_cast<std::size_t>(p.h_shape()[0] * p.total_chunks() * p.H * p.DK * p.DV));
  for (std::size_t i = 0; i < x.o_ref.size(); ++i) x.o_ref[i] = 1.0 + static_cast<double>(i % 7);
  for (std::size_t i = 0; i < x.h_ref.size(); ++i) x.h_ref[i] = 2.0 + static_cast<double>(i % 5);
  x.o = x.o_ref;
  x.h = x.h_ref;
  return x;
}

// The chunks whose o (or h) error is not zero.
std::vector<std::size_t> wrong_chunks(const std::vector<ChunkError>& errors, bool of_h) {
  std::vector<std::size_t> wrong;
  for (std::size_t g = 0; g < errors.size(); ++g)
    if ((of_h ? errors[g].h : errors[g].o) != 0.0) wrong.push_back(g);
  return wrong;
}

// Sequences of 1, 63, 64 and 65 tokens at chunk 64: chunks of 1, 63, 64, then 64 and 1.
TEST(ChunkErrors, PackedBatchOneWrongElementShowsInItsChunk) {
  Problem p;
  p.H = 2;
  p.DK = 3;
  p.DV = 4;
  p.chunk = 64;
  p.cu_seqlens = {0, 1, 64, 128, 193};
  p.T = 193;
  Outputs x = equal_outputs(p);
  const std::int64_t token = 192, state = p.H * p.DK * p.DV;  // the last token: chunk 4
  x.o[static_cast<std::size_t>((token * p.H + 1) * p.DV + 2)] += 0.5;
  x.h[static_cast<std::size_t>(2 * state + 5)] -= 0.25;  // h[:, 2]
  const std::vector<ChunkError> errors = chunk_errors(p, x.o, x.o_ref, x.h, x.h_ref);
  ASSERT_EQ(errors.size(), 5u);
  const std::vector<std::int64_t> tokens{1, 63, 64, 64, 1};
  for (std::size_t g = 0; g < errors.size(); ++g) EXPECT_EQ(errors[g].tokens, tokens[g]) << g;
  EXPECT_EQ(wrong_chunks(errors, false), std::vector<std::size_t>{4});
  EXPECT_EQ(wrong_chunks(errors, true), std::vector<std::size_t>{2});
}

// Two rows of 100 tokens at chunk 32: chunks of 32, 32, 32 and 4 in each row;
// chunk c covers both rows, and h has a batch axis.
TEST(ChunkErrors, PlainBatchOneWrongElementShowsInItsChunk) {
  Problem p;
  p.B = 2;
  p.T = 100;
  p.H = 1;
  p.DK = 2;
  p.DV = 3;
  p.chunk = 32;
  Outputs x = equal_outputs(p);
  const std::int64_t state = p.H * p.DK * p.DV, NT = 4;
  x.o[static_cast<std::size_t>(((1 * p.T + 40) * p.H) * p.DV)] += 1.0;  // row 1, token 40: chunk 1
  x.h[static_cast<std::size_t>((1 * NT + 3) * state)] += 1.0;           // h[1, 3]
  const std::vector<ChunkError> errors = chunk_errors(p, x.o, x.o_ref, x.h, x.h_ref);
  ASSERT_EQ(errors.size(), 4u);
  const std::vector<std::int64_t> tokens{32, 32, 32, 4};
  for (std::size_t g = 0; g < errors.size(); ++g) EXPECT_EQ(errors[g].tokens, tokens[g]) << g;
  EXPECT_EQ(wrong_chunks(errors, false), std::vector<std::size_t>{1});
  EXPECT_EQ(wrong_chunks(errors, true), std::vector<std::size_t>{3});
}

// Without h (--snapshots none) every h error is 0.
TEST(ChunkErrors, NoSnapshotsNoHErrors) {
  Problem p;
  p.T = 70;
  p.chunk = 32;
  Outputs x = equal_outputs(p);
  const std::vector<ChunkError> errors = chunk_errors(p, x.o, x.o_ref, {}, x.h_ref);
  ASSERT_EQ(errors.size(), 3u);
  for (const ChunkError& e : errors) EXPECT_EQ(e.h, 0.0);
}

}  // namespace
}  // namespace linattn
