// Context parallel's order of events on one rank, for tests and diagnosis
// (docs/PARALLEL.md, "A CPU node"): with LINATTN_CHAIN_TRACE=PREFIX in the
// environment each rank appends its events, one per line in the order they
// happened, to PREFIX.rank<r>: "receive <from> <bytes>", "send <to> <bytes>
// delivered", "forward start", "forward end". Nothing is written without it.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace linattn::parallel {

class ChainTrace {
 public:
  explicit ChainTrace(int rank);
  void event(const std::string& line);

 private:
  std::ofstream out_;
};

}  // namespace linattn::parallel
