// fp64 host references for the linear-attention forward (the recurrences of
// README.md "The math"). Plain loops, no Kokkos: they are the ground truth every
// kernel and every output file is checked against.
//
// Inputs are row-major fp64 arrays: q, k [B, T, H, DK], v [B, T, H, DV],
// initial_state [B, H, DK, DV] (null means zero). Every reference returns
// o [B, T, H, DV], h [B, NT, H, DK, DV] (the state before each chunk) and
// final_state [B, H, DK, DV].
//
// The forms above take a plain batch; per_sequence runs any of them on a
// packed variable-length batch (cu_seqlens), and normalize applies fla's
// normalize=True division as a separate step, so each stays obviously correct.
#pragma once

#include "core/problem.hpp"

#include <functional>
#include <vector>

namespace linattn::reference {

struct Inputs {
  const std::vector<double>& q;
  const std::vector<double>& k;
  const std::vector<double>& v;
  const std::vector<double>* initial_state = nullptr;  // [N, H, DK, DV] (N = B for a plain batch)
  const std::vector<double>* initial_z = nullptr;      // [N, H, DK], only read by normalize
};

struct Result {
  std::vector<double> o, h, final_state;
  std::vector<double> z_state;  // [N, H, DK], only filled by normalize
};

// A: token by token, S += k v^T then o = scale * S^T q (the definition).
Result recurrent(const Problem& p, const Inputs& in);

// Where the state update sits relative to the output of a chunk. Only
// after_output is correct; the others reproduce the classic mistakes the specification warns of so
// that tests can prove the checks would catch them.
enum class Ordering { correct, inclusive_prefix };

// B: per-chunk K^T V, exclusive prefix sum ("right shift"), masked intra term.
Result chunked(const Problem& p, const Inputs& in, Ordering ordering = Ordering::correct);

// C: every chunk rebuilds its own prefix state (loop structure of the
// recompute kernel).
Result recompute(const Problem& p, const Inputs& in);

enum class UpdatePlacement { after_output, before_output };

// D: DV split into blocks of block_dv columns, sequential chunk loop, state
// update after the write-back (the chunk recurrence of README.md "The math"). The result is bitwise
// independent of block_dv.
Result sequential(const Problem& p, const Inputs& in, std::int64_t block_dv,
                  UpdatePlacement placement = UpdatePlacement::after_output);

// Parallel masked form O = scale * (((Q K^T) .* M) V + Q S0) (the token recurrence summed in closed form);
// h and final_state are the direct prefix sums of k v^T.
Result parallel(const Problem& p, const Inputs& in);

// A form that takes a plain batch (recurrent, chunked, ...).
using Form = std::function<Result(const Problem&, const Inputs&)>;

// Runs `form` on every sequence of p as its own B = 1 problem (sliced q, k, v
// and initial state) and assembles the results in the packed layout: o
// [1, T, H, DV], h [1, total_chunks, H, DK, DV], final_state [N, H, DK, DV].
// A plain batch goes to `form` whole.
Result per_sequence(const Problem& p, const Inputs& in, const Form& form);

// fla's normalize=True on an unnormalized result r (o including scale):
//   z_t = z0 + sum_{s <= t} k_s   (inclusive, per sequence and head; z0 = in.initial_z or 0)
//   o_t = o_t / (scale * q_t . z_t + 1e-10)
// r.z_state = z after each sequence's last token. h and final_state are unchanged.
void normalize(const Problem& p, const Inputs& in, Result& r);

// The ground truth of a run: the chunked form per sequence, then normalize when asked.
Result forward(const Problem& p, const Inputs& in, bool normalized);

}  // namespace linattn::reference
