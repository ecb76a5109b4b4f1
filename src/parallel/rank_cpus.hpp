// The CPUs a rank runs on (docs/PARALLEL.md, "CPU binding"). mpirun binds each
// rank to one core by default with 2 ranks or fewer (Open MPI), and a rank's
// reader processes and writer thread inherit that binding: the whole pipeline
// then shares one core, which halved a rank's throughput on the H200 host.
// Such a rank takes instead its even share of the node's online CPUs. A rank
// bound to more than one CPU keeps its binding (the user chose it), and so does
// every rank with LINATTN_KEEP_BINDING set.
#pragma once

#include <string>
#include <vector>

namespace linattn::parallel {

// The CPUs to widen to: [local_rank * online / local_size, (local_rank + 1) * online /
// local_size), or empty (keep the binding) when the rank is bound to more than one
// CPU or its share would be a single CPU. Plain arithmetic.
std::vector<int> widened_cpus(int bound_cpus, int online_cpus, int local_rank, int local_size);

// Applies widened_cpus to this process (sched_setaffinity), before any reader
// process is forked; returns a note saying so, or "" when the binding is kept.
std::string widen_binding(int local_rank, int local_size);

}  // namespace linattn::parallel
