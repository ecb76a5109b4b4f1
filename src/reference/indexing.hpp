// Row-major offsets of the forward's tensors, shared by the references.
#pragma once

#include "core/problem.hpp"

#include <cstdint>

namespace linattn::reference::detail {

struct Index {
  const Problem& p;
  std::int64_t qk(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) const {
    return ((b * p.T + t) * p.H + h) * p.DK + d;
  }
  std::int64_t vo(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) const {
    return ((b * p.T + t) * p.H + h) * p.DV + d;
  }
  std::int64_t snapshot(std::int64_t b, std::int64_t c, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return (((b * p.num_chunks() + c) * p.H + h) * p.DK + i) * p.DV + j;
  }
  std::int64_t state(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return ((b * p.H + h) * p.DK + i) * p.DV + j;
  }
};

// A zero-filled result with the problem's output shapes.
inline void allocate(const Problem& p, std::vector<double>& o, std::vector<double>& h, std::vector<double>& fs) {
  o.assign(static_cast<std::size_t>(p.B * p.T * p.H * p.DV), 0.0);
  h.assign(static_cast<std::size_t>(p.B * p.num_chunks() * p.H * p.DK * p.DV), 0.0);
  fs.assign(static_cast<std::size_t>(p.B * p.H * p.DK * p.DV), 0.0);
}

// The initial state of (b, h) as a DK x DV row-major matrix (zeros when absent).
inline std::vector<double> initial_state(const Problem& p, const std::vector<double>* s0, std::int64_t b,
                                         std::int64_t h) {
  std::vector<double> S(static_cast<std::size_t>(p.DK * p.DV), 0.0);
  if (s0) {
    Index ix{p};
    for (std::int64_t i = 0; i < p.DK; ++i)
      for (std::int64_t j = 0; j < p.DV; ++j) S[i * p.DV + j] = (*s0)[ix.state(b, h, i, j)];
  }
  return S;
}

}  // namespace linattn::reference::detail
