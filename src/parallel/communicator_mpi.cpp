// communicator.hpp over MPI (builds with LINATTN_HAVE_MPI).
#include "parallel/communicator.hpp"

#include "parallel/open_mpi_defaults.hpp"

#include <mpi.h>

#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>

namespace linattn::parallel {
namespace {

bool active = false;  // MPI was started by this Session
constexpr int kPointToPointTag = 1;

// Sends in flight: each one's bytes stay alive until finish_sends.
struct PendingSend {
  std::string bytes;
  MPI_Request request = MPI_REQUEST_NULL;
};
std::vector<std::unique_ptr<PendingSend>> pending;
int world_rank = 0, world_size = 1, node_rank = 0, node_size = 1;

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name)) return true;
  return false;
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed");
}

std::vector<std::string> split(const std::vector<char>& bytes, const std::vector<int>& counts) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (int n : counts) {
    parts.emplace_back(bytes.data() + at, static_cast<std::size_t>(n));
    at += static_cast<std::size_t>(n);
  }
  return parts;
}

std::vector<int> displacements(const std::vector<int>& counts, std::size_t& total) {
  std::vector<int> displ(counts.size());
  total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    displ[i] = static_cast<int>(total);
    total += static_cast<std::size_t>(counts[i]);
  }
  return displ;
}

}  // namespace

Session::Session(int& argc, char**& argv) {
  if (!launched_by_mpi()) return;
  apply_single_node_mpi_settings();  // read by MPI_Init
  // The main thread alone calls MPI (the writer thread and reader processes never do).
  int provided = 0;
  check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  active = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
}

Session::~Session() {
  if (active) MPI_Finalize();
  active = false;
}

bool built_with_mpi() { return true; }
bool started() { return active; }
int rank() { return world_rank; }
int size() { return world_size; }
int local_rank() { return node_rank; }
int local_size() { return node_size; }

bool any(bool mine) {
  if (!active) return mine;
  int in = mine ? 1 : 0, out = 0;
  check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return out != 0;
}

double max(double mine) {
  if (!active) return mine;
  double out = 0;
  check(MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return out;
}

std::string broadcast(const std::string& from_root) {
  if (!active) return from_root;
  long long n = static_cast<long long>(from_root.size());
  check(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::string s = world_rank == 0 ? from_root : std::string(static_cast<std::size_t>(n), '\0');
  if (n > 0) check(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return s;
}

std::vector<std::string> gather(const std::string& mine) {
  if (!active) return {mine};
  int n = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(world_size));
  check(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  std::size_t total = 0;
  const std::vector<int> displ = displacements(counts, total);
  std::vector<char> bytes(world_rank == 0 ? total : 0);
  check(MPI_Gatherv(mine.data(), n, MPI_CHAR, bytes.data(), counts.data(), displ.data(), MPI_CHAR, 0, MPI_COMM_WORLD),
        "MPI_Gatherv");
  if (world_rank != 0) return {};
  return split(bytes, counts);
}

std::vector<std::string> all_gather(const std::string& mine) {
  if (!active) return {mine};
  int n = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(world_size));
  check(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  std::size_t total = 0;
  const std::vector<int> displ = displacements(counts, total);
  std::vector<char> bytes(total);
  check(MPI_Allgatherv(mine.data(), n, MPI_CHAR, bytes.data(), counts.data(), displ.data(), MPI_CHAR, MPI_COMM_WORLD),
        "MPI_Allgatherv");
  return split(bytes, counts);
}

std::string first_non_empty(const std::string& mine) {
  if (!any(!mine.empty())) return "";
  for (const std::string& e : all_gather(mine))
    if (!e.empty()) return e;
  return "";
}

void send(int to, std::string bytes) {
  if (!active) throw std::logic_error("parallel::send without MPI");
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::length_error("parallel::send: a message over 2 GiB");
  pending.push_back(std::make_unique<PendingSend>());
  PendingSend& s = *pending.back();
  s.bytes = std::move(bytes);
  check(MPI_Isend(s.bytes.data(), static_cast<int>(s.bytes.size()), MPI_CHAR, to, kPointToPointTag, MPI_COMM_WORLD,
                  &s.request),
        "MPI_Isend");
}

void finish_sends() {
  for (auto& s : pending) check(MPI_Wait(&s->request, MPI_STATUS_IGNORE), "MPI_Wait");
  pending.clear();
}

std::string receive(int from) {
  if (!active) throw std::logic_error("parallel::receive without MPI");
  MPI_Status status;
  check(MPI_Probe(from, kPointToPointTag, MPI_COMM_WORLD, &status), "MPI_Probe");
  int n = 0;
  check(MPI_Get_count(&status, MPI_CHAR, &n), "MPI_Get_count");
  std::string bytes(static_cast<std::size_t>(n), '\0');
  check(MPI_Recv(bytes.data(), n, MPI_CHAR, from, kPointToPointTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  return bytes;
}

void abort_all(int code) {
  if (active) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace linattn::parallel
