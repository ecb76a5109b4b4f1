#include "app/chunk_errors.hpp"

#include "core/error_metrics.hpp"

namespace linattn {
namespace {

// The elements of x [B, T, H, DV] in tokens [t0, t0 + length) of every batch row.
std::vector<double> token_slice(const std::vector<double>& x, const Problem& p, const TokenRange& tokens) {
  const std::int64_t row = p.H * p.DV;  // one token
  std::vector<double> out;
  for (std::int64_t b = 0; b < p.B; ++b) {
    const auto first = x.begin() + (b * p.T + tokens.t0) * row;
    out.insert(out.end(), first, first + tokens.length * row);
  }
  return out;
}

// h[:, g] of h [rows, chunks, H, DK, DV] (shape hs).
std::vector<double> snapshot_slice(const std::vector<double>& h, const std::vector<std::int64_t>& hs, std::int64_t g) {
  const std::int64_t state = hs[2] * hs[3] * hs[4];
  std::vector<double> out;
  for (std::int64_t b = 0; b < hs[0]; ++b) {
    const auto first = h.begin() + (b * hs[1] + g) * state;
    out.insert(out.end(), first, first + state);
  }
  return out;
}

}  // namespace

std::vector<ChunkError> chunk_errors(const Problem& p, const std::vector<double>& o, const std::vector<double>& o_ref,
                                     const std::vector<double>& h, const std::vector<double>& h_ref) {
  const std::vector<TokenRange> ranges = chunk_token_ranges(p);
  const std::vector<std::int64_t> hs = p.h_shape();
  const bool has_h = !h.empty();
  std::vector<ChunkError> errors;
  errors.reserve(ranges.size());
  for (std::size_t g = 0; g < ranges.size(); ++g) {
    ChunkError e;
    e.tokens = ranges[g].length;
    e.o = relative_l2(token_slice(o, p, ranges[g]), token_slice(o_ref, p, ranges[g]));
    if (has_h) {
      const std::int64_t c = static_cast<std::int64_t>(g);
      e.h = relative_l2(snapshot_slice(h, hs, c), snapshot_slice(h_ref, hs, c));
    }
    errors.push_back(e);
  }
  return errors;
}

}  // namespace linattn
