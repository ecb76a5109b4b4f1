// communicator.hpp in a build without MPI: one rank.
#include "parallel/communicator.hpp"

#include <cstdlib>
#include <iostream>
#include <stdexcept>

namespace linattn::parallel {

// Started by mpirun with several processes, each of them would run the whole
// batch alone (and write the same files): say so.
Session::Session(int&, char**&) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* ranks = std::getenv(name);
    if (ranks && std::atoi(ranks) > 1) {
      std::cerr << "linattn: warning: started as " << ranks
                << " MPI processes, but built without MPI: each runs alone (docs/PARALLEL.md)" << std::endl;
      return;
    }
  }
}
Session::~Session() = default;

bool built_with_mpi() { return false; }
bool started() { return false; }
int rank() { return 0; }
int size() { return 1; }
int local_rank() { return 0; }
int local_size() { return 1; }
bool any(bool mine) { return mine; }
double max(double mine) { return mine; }
std::string broadcast(const std::string& from_root) { return from_root; }
std::vector<std::string> gather(const std::string& mine) { return {mine}; }
std::vector<std::string> all_gather(const std::string& mine) { return {mine}; }
std::string first_non_empty(const std::string& mine) { return mine; }

// One rank has no other to talk to.
void send(int, std::string) { throw std::logic_error("parallel::send with one rank"); }
void finish_sends() {}
std::string receive(int) { throw std::logic_error("parallel::receive with one rank"); }

void abort_all(int code) { std::exit(code); }

}  // namespace linattn::parallel
