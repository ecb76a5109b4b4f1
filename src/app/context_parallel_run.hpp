// `linattn run --context-parallel` under mpirun (docs/PARALLEL.md): every
// case is cut along T into one segment per rank (parallel/segment_plan.hpp).
// All ranks take the cases one after the other, together:
//   1. each reads its segment (hyperslabs of q, k, v, and the initial rows of
//      its sequences);
//   2. each computes the state (and key sum z) its segment carries out to the
//      next, by the forward on its last sequence's part, from that sequence's
//      initial state when it starts in the segment, else from zero;
//   3. the carries are gathered by every rank, and each adds those of the
//      segments before it in rank order (carry_chain) to get its start state;
//   4. each runs the forward on its segment from there, and all write their
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
