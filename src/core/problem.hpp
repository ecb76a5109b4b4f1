// One forward problem: shapes, chunk length and scale, validated before any
// kernel runs. Shapes follow flash-linear-attention: q, k [B, T, H, DK],
// v [B, T, H, DV], h [B, NT, H, DK, DV], final_state [B, H, DK, DV].
#pragma once

#include <cstdint>
#include <vector>

namespace linattn {

struct Problem {
  std::int64_t B = 1, T = 1, H = 1, DK = 1, DV = 1;
  std::int64_t chunk = 64;
  double scale = 1.0;

  std::int64_t num_chunks() const { return (T + chunk - 1) / chunk; }  // NT, last chunk may be ragged
  std::int64_t chunk_length(std::int64_t c) const {                     // tokens in chunk c
    const std::int64_t rest = T - c * chunk;
    return rest < chunk ? rest : chunk;
  }

  std::vector<std::int64_t> qk_shape() const { return {B, T, H, DK}; }
  std::vector<std::int64_t> v_shape() const { return {B, T, H, DV}; }
  std::vector<std::int64_t> o_shape() const { return {B, T, H, DV}; }
  std::vector<std::int64_t> h_shape() const { return {B, num_chunks(), H, DK, DV}; }
  std::vector<std::int64_t> state_shape() const { return {B, H, DK, DV}; }
};

// Chunk lengths the kernels support (tensor-core friendly multiples of 16).
bool is_supported_chunk(std::int64_t chunk);

// Throws std::invalid_argument naming the problem: zero or negative sizes or
// chunk, non-finite scale. Enough for the host references, which take any chunk.
void validate_shapes(const Problem& p);

// validate_shapes plus the kernels' restriction to supported chunk sizes.
void validate(const Problem& p);

// Builds a Problem from the shapes of q, k and v (and of initial_state when
// given), throwing std::invalid_argument naming the tensor and dimension that
// disagree.
Problem problem_from_shapes(const std::vector<std::int64_t>& q, const std::vector<std::int64_t>& k,
                            const std::vector<std::int64_t>& v, std::int64_t chunk, double scale,
                            const std::vector<std::int64_t>* initial_state = nullptr);

}  // namespace linattn
