#include "core/problem.hpp"

#include "core/tensor.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace linattn {

std::vector<std::int64_t> Problem::chunk_starts() const {
  const std::int64_t N = num_sequences();
  std::vector<std::int64_t> starts(static_cast<std::size_t>(N + 1), 0);
  if (!varlen()) {
    starts[N] = num_chunks();
    return starts;
  }
  for (std::int64_t n = 0; n < N; ++n) starts[n + 1] = starts[n] + sequence_chunks(n);
  return starts;
}

std::int64_t Problem::total_chunks() const {
  if (!varlen()) return num_chunks();
  std::int64_t chunks = 0;
  for (std::int64_t n = 0; n < num_sequences(); ++n) chunks += sequence_chunks(n);
  return chunks;
}

std::vector<TokenRange> chunk_token_ranges(const Problem& p) {
  std::vector<TokenRange> ranges;
  // A plain batch: the chunks of one row (they are the same in every row).
  const std::int64_t sequences = p.varlen() ? p.num_sequences() : 1;
  for (std::int64_t n = 0; n < sequences; ++n) {
    const std::int64_t t0 = p.sequence_start(n), length = p.sequence_length(n);
    for (std::int64_t c = 0; c * p.chunk < length; ++c)
      ranges.push_back({t0 + c * p.chunk, chunk_length(c, length, p.chunk)});
  }
  return ranges;
}

Problem plain_problem(const Problem& p, std::int64_t B, std::int64_t T) {
  Problem piece;
  piece.B = B;
  piece.T = T;
  piece.H = p.H;
  piece.DK = p.DK;
  piece.DV = p.DV;
  piece.chunk = p.chunk;
  piece.scale = p.scale;
  return piece;
}

double default_scale(std::int64_t DK) { return 1.0 / std::sqrt(static_cast<double>(DK)); }

bool is_supported_chunk(std::int64_t chunk) {
  return chunk == 16 || chunk == 32 || chunk == 64 || chunk == 128;
}

void validate_shapes(const Problem& p) {
  auto positive = [](std::int64_t v, const char* name) {
    if (v <= 0) throw std::invalid_argument(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive(p.B, "batch size B");
  positive(p.T, "sequence length T");
  positive(p.H, "head count H");
  positive(p.DK, "key dimension DK");
  positive(p.DV, "value dimension DV");
  positive(p.chunk, "chunk size");
  if (!std::isfinite(p.scale)) throw std::invalid_argument("scale must be finite");
  validate_sequences(p);
}

void validate_sequences(const Problem& p) {
  if (!p.varlen()) return;
  const auto& cu = p.cu_seqlens;
  if (cu.size() < 2)
    throw std::invalid_argument("cu_seqlens must hold N + 1 >= 2 entries (at least one sequence), got " +
                                std::to_string(cu.size()));
  if (p.B != 1)
    throw std::invalid_argument("cu_seqlens needs B = 1 (sequences packed along T), got B = " + std::to_string(p.B));
  if (cu.front() != 0) throw std::invalid_argument("cu_seqlens must start at 0, got " + std::to_string(cu.front()));
  for (std::size_t i = 1; i < cu.size(); ++i)
    if (cu[i] <= cu[i - 1])
      throw std::invalid_argument("cu_seqlens is not increasing: entry " + std::to_string(i) + " = " +
                                  std::to_string(cu[i]) + " after " + std::to_string(cu[i - 1]) +
                                  " (every sequence needs at least one token)");
  if (cu.back() != p.T)
    throw std::invalid_argument("cu_seqlens ends at " + std::to_string(cu.back()) + ", but T = " + std::to_string(p.T) +
                                " (the last entry must be T)");
}

void validate(const Problem& p) {
  validate_shapes(p);
  if (!is_supported_chunk(p.chunk))
    throw std::invalid_argument("chunk size " + std::to_string(p.chunk) + " is not supported (use 16, 32, 64 or 128)");
}

Problem problem_from_shapes(const std::vector<std::int64_t>& q, const std::vector<std::int64_t>& k,
                            const std::vector<std::int64_t>& v, std::int64_t chunk, double scale,
                            const std::vector<std::int64_t>* initial_state,
                            const std::vector<std::int64_t>& cu_seqlens) {
  auto rank4 = [](const std::vector<std::int64_t>& s, const char* name) {
    if (s.size() != 4)
      throw std::invalid_argument(std::string(name) + " must have rank 4 [B, T, H, D], got shape " + shape_string(s));
  };
  rank4(q, "q");
  rank4(k, "k");
  rank4(v, "v");
  const char* dims[] = {"B", "T", "H"};
  for (int d = 0; d < 3; ++d) {
    if (k[d] != q[d])
      throw std::invalid_argument(std::string("k and q disagree in ") + dims[d] + ": q " + shape_string(q) + ", k " + shape_string(k));
    if (v[d] != q[d])
      throw std::invalid_argument(std::string("v and q disagree in ") + dims[d] + ": q " + shape_string(q) + ", v " + shape_string(v));
  }
  if (k[3] != q[3])
    throw std::invalid_argument("q and k disagree in DK: q " + shape_string(q) + ", k " + shape_string(k));
  Problem p;
  p.B = q[0];
  p.T = q[1];
  p.H = q[2];
  p.DK = q[3];
  p.DV = v[3];
  p.chunk = chunk;
  p.scale = scale;
  p.cu_seqlens = cu_seqlens;
  validate(p);
  if (initial_state && *initial_state != p.state_shape())
    throw std::invalid_argument("initial_state must have shape " + shape_string(p.state_shape()) + ", got " +
                                shape_string(*initial_state));
  return p;
}

}  // namespace linattn
