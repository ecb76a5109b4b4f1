// The MPI ranks of a run (docs/PARALLEL.md). MPI is started only when the
// process was launched by an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE,
// PMIx and PMI launchers PMIX_RANK / PMI_RANK); otherwise, and in builds
// without MPI (communicator_serial.cpp), the run is one rank and every call
// below is the trivial one. Only the thread that made the Session calls these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace linattn::parallel {

// MPI_Init on construction (when launched by MPI), MPI_Finalize on destruction.
class Session {
 public:
  Session(int& argc, char**& argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

// True in builds with MPI (LINATTN_HAVE_MPI).
bool built_with_mpi();
// True while this process is an MPI rank (the Session started MPI), one rank of one included.
bool started();

int rank();        // in the world communicator; 0 without MPI
int size();        // ranks in the world; 1 without MPI
int local_rank();  // among the ranks of this node (shared-memory communicator)
int local_size();

// Collectives: every rank calls each of them, in the same order.
bool any(bool mine);                                           // true on every rank when any passes true
double max(double mine);                                       // the largest value, on every rank
std::string broadcast(const std::string& from_root);           // rank 0's string, on every rank
std::vector<std::string> gather(const std::string& mine);      // rank 0: every rank's, in rank order; others: {}
std::vector<std::string> all_gather(const std::string& mine);  // every rank's, in rank order, on every rank

// Point to point, between two ranks only (context parallel's start states).
// send returns at once; finish_sends waits until every send so far was
// received. A message over MPI's eager limit moves only while both ranks are
// inside MPI calls, so a caller that computes between the two delays the
// receiver by that long. receive waits for the next message from `from` and
// returns it whole.
void send(int to, std::string bytes);
void finish_sends();
std::string receive(int from);

// Ends every rank's process with `code` (MPI_Abort): for an error that leaves
// the other ranks waiting in a collective call.
[[noreturn]] void abort_all(int code);

// The first non-empty string in rank order, on every rank ("" when all are
// empty): one rank's error makes a collective step fail on all of them.
std::string first_non_empty(const std::string& mine);

}  // namespace linattn::parallel
