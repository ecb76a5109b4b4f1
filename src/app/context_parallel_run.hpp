// `linattn run --context-parallel` under mpirun (docs/PARALLEL.md): every
// case is cut along T into one segment per rank (parallel/segment_plan.hpp),
// rank 0's the largest. All ranks take the cases one after the other, together,
// each streaming its segment through its own pipeline (batch.hpp: reader
// processes, compute stage, writer thread):
//   1. each rank sends its segment's first reads to its readers, and a rank
//      that continues a sequence computes its start state meanwhile, without
//      waiting for anyone's forward: the state pass (kernels/state_pass.hpp)
//      over the previous segment's part of the sequence (read whole, in the
//      batch process), plus that segment's own start state, received from its
//      rank when the sequence began earlier still (carry_route);
//   2. each runs its segment's windows from there (the compute stage carries
//      the state in), and writes them into one output file that rank 0
//      created: every rank pwrites at the datasets' offsets (write_stage.hpp);
//   3. once every rank's writes are done (and durable), rank 0 writes the
//      attributes and publishes the file.
// On one rank this is `run`'s pipeline, bit for bit. A failure on any rank
// fails the case on all of them, and the batch goes on.
#pragma once

#include "app/batch_run.hpp"
#include "pipeline/progress_reporter.hpp"

#include <string>
#include <vector>

namespace linattn {

class Batch;

// Every rank runs every case of `results` (listed by rank 0, whose entries
// hold them; the others' are filled in here), and ends with every case's
// result; only rank 0 prints (one line per case).
void run_context_parallel(const RunOptions& options, Batch& batch, ProgressReporter& reporter,
                          const std::string& outdir_problem, std::vector<CaseResult>& results);

}  // namespace linattn
