// The batch process's side of the reader process (read_process.hpp): starts it
// on first use, sends requests, and waits for replies until a deadline. A
// reader that dies (a crash inside libhdf5 on a corrupt file) or misses its
// deadline (a hang) is killed and reaped; the request fails with ReaderLost
// and the next request starts a fresh reader.
#pragma once

#include "io/backward_case.hpp"
#include "io/input_file.hpp"
#include "pipeline/read_protocol.hpp"

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace linattn::pipeline {

// The reader process crashed or timed out; cause says which (callers decide
// by it, never by the message), what() says which and while doing what.
struct ReaderLost : std::runtime_error {
  enum class Cause { timed_out, crashed, out_of_turn, gone };
  ReaderLost(Cause c, const std::string& why) : std::runtime_error(why), cause(c) {}
  Cause cause;
};

class ReaderProcess {
 public:
  // exe: the program to start as the reader (this program: /proc/self/exe);
  // shared_fd/shared_bytes: the input region it writes windows into.
  ReaderProcess(std::string exe, int shared_fd, std::int64_t shared_bytes);
  ~ReaderProcess();
  ReaderProcess(const ReaderProcess&) = delete;
  ReaderProcess& operator=(const ReaderProcess&) = delete;

  // Synchronous requests. A failure the reader reports is a FileError with its message.
  std::vector<std::string> list_cases(const std::string& file, Clock::time_point deadline);
  // allow_external_data: --allow-external-data (hdf5::set_external_data_allowed in the reader).
  CaseSchema open_case(const std::string& file, const std::string& group, bool allow_nonfinite,
                       bool allow_external_data, Clock::time_point deadline);
  void close_case(Clock::time_point deadline);
  // The backward's checks of one case, from metadata only (io/backward_case.hpp).
  BackwardCase inspect_backward(const std::string& forward, const std::string& grad, bool recompute_h,
                                bool allow_external_data, Clock::time_point deadline);

  // Pipelined window reads: send any number, then collect their replies in order.
  void send_read(const WindowRead& read);
  void send_read(const BlockReads& read);  // needs no open_case; close_case closes what it opened
  void wait_read(Clock::time_point deadline);  // the oldest outstanding one
  // Collects every outstanding reply, ignoring reported errors (after a case failed).
  void drain(Clock::time_point deadline);

  pid_t pid() const { return pid_; }
  // Seconds the reader processes spent reading windows (their own clock).
  double busy_seconds() const { return busy_seconds_; }
  // The largest peak RSS of the reader processes so far (read from /proc
  // before each is stopped: getrusage would count the batch process's memory,
  // which a spawned child shares until its exec). Call stop() first for the last one.
  std::int64_t peak_rss_bytes() const { return peak_rss_bytes_; }
  void stop();                    // kills and reaps the reader (if any)

 private:
  void start();
  void send(MessageKind kind, const std::string& payload);
  std::string wait_reply(MessageKind expected, Clock::time_point deadline, const char* doing);
  [[noreturn]] void lost(ReaderLost::Cause cause, const std::string& why);

  std::string exe_;
  int shared_fd_;
  std::int64_t shared_bytes_;
  pid_t pid_ = -1;
  int socket_ = -1;
  std::size_t outstanding_ = 0;
  double busy_seconds_ = 0;
  std::int64_t peak_rss_bytes_ = 0;
  std::string doing_;  // the file (and dataset) being read, for messages
};

}  // namespace linattn::pipeline
