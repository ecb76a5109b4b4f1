// fp64 host references for the linear-attention forward (seed 000 section 3,
// seed 001 section 3). Plain loops, no Kokkos: they are the ground truth every
// kernel and every output file is checked against.
//
// Inputs are row-major fp64 arrays: q, k [B, T, H, DK], v [B, T, H, DV],
// initial_state [B, H, DK, DV] (null means zero). Every reference returns
// o [B, T, H, DV], h [B, NT, H, DK, DV] (the state before each chunk) and
// final_state [B, H, DK, DV].
#pragma once

#include "core/problem.hpp"

#include <vector>

namespace linattn::reference {

struct Inputs {
  const std::vector<double>& q;
  const std::vector<double>& k;
  const std::vector<double>& v;
  const std::vector<double>* initial_state = nullptr;
};

struct Result {
  std::vector<double> o, h, final_state;
};

// A: token by token, S += k v^T then o = scale * S^T q (the definition).
Result recurrent(const Problem& p, const Inputs& in);

// Where the state update sits relative to the output of a chunk. Only
// after_output is correct; the others reproduce the seed's classic mistakes so
// that tests can prove the checks would catch them.
enum class Ordering { correct, inclusive_prefix };

// B: per-chunk K^T V, exclusive prefix sum ("right shift"), masked intra term.
Result chunked(const Problem& p, const Inputs& in, Ordering ordering = Ordering::correct);

// C: every chunk rebuilds its own prefix state (loop structure of the
// recompute kernel, seed 000 section 4).
Result recompute(const Problem& p, const Inputs& in);

enum class UpdatePlacement { after_output, before_output };

// D: DV split into blocks of block_dv columns, sequential chunk loop, state
// update after the write-back (seed 000 section 6.4.2). The result is bitwise
// independent of block_dv.
Result sequential(const Problem& p, const Inputs& in, std::int64_t block_dv,
                  UpdatePlacement placement = UpdatePlacement::after_output);

// Parallel masked form O = scale * (((Q K^T) .* M) V + Q S0) (seed 001 3.1);
// h and final_state are the direct prefix sums of k v^T.
Result parallel(const Problem& p, const Inputs& in);

}  // namespace linattn::reference
