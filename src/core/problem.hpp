// One forward problem: shapes, chunk length and scale, validated before any
// kernel runs. Shapes follow flash-linear-attention: q, k [B, T, H, DK],
// v [B, T, H, DV], h [B, NT, H, DK, DV], final_state [B, H, DK, DV].
//
// Packed variable-length batches (fla's cu_seqlens, B = 1): N sequences of the
// one batch row, sequence n holding tokens [cu_seqlens[n], cu_seqlens[n+1]).
// Every sequence starts from its own state; chunks never cross a sequence
// boundary; h is [1, total_chunks, H, DK, DV] with the chunks of sequence n
// from chunk_starts()[n] on; final_state is [N, H, DK, DV]. A plain batch is the
// special case of B sequences of length T (sequence n = batch row n), so the
// sequence helpers below serve both.
#pragma once

#include "core/chunk_length.hpp"

#include <cstdint>
#include <vector>

namespace linattn {

// A new field goes into plain_problem (below) too.
struct Problem {
  std::int64_t B = 1, T = 1, H = 1, DK = 1, DV = 1;
  std::int64_t chunk = 64;
  double scale = 1.0;  // the program's default is default_scale(DK) (below); 1.0 keeps hand-made problems plain
  std::vector<std::int64_t> cu_seqlens;  // empty: a plain batch; else N + 1 offsets (validate_sequences)

  bool varlen() const { return !cu_seqlens.empty(); }
  std::int64_t num_sequences() const { return varlen() ? static_cast<std::int64_t>(cu_seqlens.size()) - 1 : B; }
  std::int64_t sequence_batch(std::int64_t n) const { return varlen() ? 0 : n; }             // its batch row
  std::int64_t sequence_start(std::int64_t n) const { return varlen() ? cu_seqlens[n] : 0; }  // first token in the row
  std::int64_t sequence_length(std::int64_t n) const { return varlen() ? cu_seqlens[n + 1] - cu_seqlens[n] : T; }
  std::int64_t sequence_chunks(std::int64_t n) const { return (sequence_length(n) + chunk - 1) / chunk; }
  // [N + 1]: the index of each sequence's first chunk along h's chunk axis,
  // then that axis' length (a plain batch's h has a batch axis: every row
  // starts at 0, and the axis holds NT). One running sum, O(N): ask for it
  // once, never per sequence (docs/ARCHITECTURE.md, "Cost per sequence").
  std::vector<std::int64_t> chunk_starts() const;
  // Length of h's chunk axis: NT for a plain batch, sum_n ceil(len_n / C) for varlen. O(N).
  std::int64_t total_chunks() const;

  std::int64_t num_chunks() const { return (T + chunk - 1) / chunk; }  // NT, last chunk may be ragged
  std::int64_t chunk_length(std::int64_t c) const { return linattn::chunk_length(c, T, chunk); }  // tokens in chunk c of a plain batch row

  std::vector<std::int64_t> qk_shape() const { return {B, T, H, DK}; }
  std::vector<std::int64_t> v_shape() const { return {B, T, H, DV}; }
  std::vector<std::int64_t> o_shape() const { return {B, T, H, DV}; }
  std::vector<std::int64_t> h_shape() const { return {varlen() ? 1 : B, total_chunks(), H, DK, DV}; }
  std::vector<std::int64_t> state_shape() const { return {num_sequences(), H, DK, DV}; }  // initial and final
  std::vector<std::int64_t> z_shape() const { return {num_sequences(), H, DK}; }          // normalization's key sum
};

// The scale `run` and `bench` use when none is given: DK^-0.5, as
// flash-linear-attention's chunk_linear_attn and chunk_simple_gla default to
// (README.md, "The math").
double default_scale(std::int64_t DK);

// Where chunk g of h's chunk axis lies in its batch row: first token and
// length. A plain batch's chunk g covers the same tokens in every row.
struct TokenRange {
  std::int64_t t0 = 0, length = 0;
};
// Every chunk of h's chunk axis in order ([total_chunks]), in one pass over
// the sequences.
std::vector<TokenRange> chunk_token_ranges(const Problem& p);

// p's heads, dimensions, chunk and scale over B rows of T tokens, without
// sequences: the pieces of a packed problem (one sequence, one window) start
// from it. Copying p instead would copy its N + 1 offsets for every piece,
// O(N) each and O(N^2) over all of them.
Problem plain_problem(const Problem& p, std::int64_t B, std::int64_t T);

// Chunk lengths the kernels support (tensor-core friendly multiples of 16).
bool is_supported_chunk(std::int64_t chunk);

// Throws std::invalid_argument naming the problem: zero or negative sizes or
// chunk, non-finite scale, bad cu_seqlens. Enough for the host references,
// which take any chunk.
void validate_shapes(const Problem& p);

// The cu_seqlens rules (nothing to check for a plain batch): B = 1, at least
// one sequence (N >= 1), first entry 0, strictly increasing (every sequence
// holds a token), last entry T. Throws std::invalid_argument naming the rule.
void validate_sequences(const Problem& p);

// validate_shapes plus the kernels' restriction to supported chunk sizes.
void validate(const Problem& p);

// Builds a Problem from the shapes of q, k and v (and of initial_state when
// given), throwing std::invalid_argument naming the tensor and dimension that
// disagree. cu_seqlens (may be empty) makes it a packed variable-length batch.
Problem problem_from_shapes(const std::vector<std::int64_t>& q, const std::vector<std::int64_t>& k,
                            const std::vector<std::int64_t>& v, std::int64_t chunk, double scale,
                            const std::vector<std::int64_t>* initial_state = nullptr,
                            const std::vector<std::int64_t>& cu_seqlens = {});

}  // namespace linattn
