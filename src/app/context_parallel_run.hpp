// `linattn run --context-parallel` under mpirun (docs/PARALLEL.md): every
// case is cut along T into one segment per rank (parallel/segment_plan.hpp),
// rank 0's the largest. All ranks take the cases one after the other, together:
//   1. each reads its segment (hyperslabs of q, k, v, and the initial rows of
//      its sequences), and a rank that continues a sequence also k and v of
//      the segment before its own;
//   2. such a rank computes its start state without waiting for anyone's
//      forward: the state pass (kernels/state_pass.hpp) over that segment's
//      part of the sequence, plus that segment's own start state, received from
//      its rank when the sequence began earlier still (carry_route);
//   3. each runs the forward on its segment from there, and all write their
//      slices of o, h and the final rows into one output file (parallel HDF5,
//      collective writes), which rank 0 then publishes.
// Each rank holds its whole segment in memory (no streaming windows), and reads
// it in its own process (no reader process). A failure on any rank fails the
// case on all of them, and the batch goes on.
#pragma once

#include "app/batch_run.hpp"

#include <iosfwd>
#include <vector>

namespace linattn {

// Every rank returns every case's result; only rank 0 prints (one line per case).
std::vector<CaseResult> run_context_parallel(const RunOptions& options, std::ostream& progress, std::ostream& errors);

}  // namespace linattn
