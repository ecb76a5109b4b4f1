#include "parallel/chain_trace.hpp"

#include <cstdlib>

namespace linattn::parallel {

ChainTrace::ChainTrace(int rank) {
  if (const char* prefix = std::getenv("LINATTN_CHAIN_TRACE"))
    out_.open(std::string(prefix) + ".rank" + std::to_string(rank), std::ios::app);
}

void ChainTrace::event(const std::string& line) {
  if (out_.is_open()) out_ << line << std::endl;
}

}  // namespace linattn::parallel
