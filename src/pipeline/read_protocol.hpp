// The messages between the batch process and its reader process (one request,
// one reply, in order, over a Unix socket pair): a 4-byte kind, an 8-byte
// length, then the payload: 64-bit integers and length-prefixed strings.
#pragma once

#include "io/backward_case.hpp"
#include "io/input_file.hpp"
#include "pipeline/block_read.hpp"

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace linattn::pipeline {

enum class MessageKind : std::uint32_t {
  list_cases = 1,   // request: file                      -> reply cases: count, names
  open_case = 2,    // request: file, group, allow nonfinite, allow external data -> reply schema (read_process.cpp)
  read_window = 3,  // request: WindowRead                -> reply done
  close_case = 4,   // request: nothing                   -> reply done
  read_blocks = 5,  // request: BlockReads                -> reply done (any job's window: block_read.hpp)
  inspect_backward = 6,  // request: forward output, gradient input, recompute h, allow external data
                         //   -> reply backward_case (io/backward_case.hpp)
  cases = 11,
  schema = 12,
  done = 13,
  failed = 14,      // reply: the one-line error
  backward_case = 15,
};

class MessageWriter {
 public:
  MessageWriter& i64(std::int64_t v);
  MessageWriter& str(const std::string& s);
  MessageWriter& i64s(const std::vector<std::int64_t>& v);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Reads back what a MessageWriter wrote; throws std::runtime_error on a short
// or malformed payload.
class MessageReader {
 public:
  explicit MessageReader(const std::string& bytes) : bytes_(bytes) {}
  std::int64_t i64();
  std::string str();
  std::vector<std::int64_t> i64s();

 private:
  void need(std::size_t n) const;
  const std::string& bytes_;
  std::size_t pos_ = 0;
};

// Raised when the other side is gone (EOF, a broken socket) or a deadline passed.
struct ChannelClosed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ChannelTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Clock = std::chrono::steady_clock;

void send_message(int fd, MessageKind kind, const std::string& payload);
// Waits for a whole message until `deadline` (Clock::time_point::max(): no limit).
MessageKind receive_message(int fd, std::string& payload, Clock::time_point deadline = Clock::time_point::max());

// One window's reads: blocks of q, k, v along T (all rows), rows of
// initial_state and z_state, and the gate (g's block along T, or all of
// g_gamma), the last three converted to the accumulation type, each to a byte
// offset of the shared input region.
struct WindowRead {
  std::int64_t t0 = 0, t1 = 0;
  std::int64_t state_row0 = 0, state_rows = 0, z_row0 = 0, z_rows = 0;
  std::int64_t q_offset = 0, k_offset = 0, v_offset = 0, state_offset = 0, z_offset = 0;
  std::int64_t accumulation_dtype = 0;  // DType of the state rows and the gate in memory
  std::int64_t gate = 0;                // GateKind of the case: 0 none (nothing read)
  std::int64_t gate_offset = 0;
};
std::string encode(const WindowRead& r);
WindowRead decode_window_read(const std::string& payload);

// A window's block reads, with the batch's --allow-external-data for the
// datasets they open.
struct BlockReads {
  bool allow_external_data = false;
  std::vector<BlockRead> blocks;
};
std::string encode(const BlockReads& r);
BlockReads decode_block_reads(const std::string& payload);

std::string encode(const CaseSchema& s);
CaseSchema decode_case_schema(const std::string& payload);

std::string encode(const BackwardCase& c);
BackwardCase decode_backward_case(const std::string& payload);

}  // namespace linattn::pipeline
