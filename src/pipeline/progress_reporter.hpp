// Progress of a batch on stderr. On a terminal, the case in flight redraws one
// line (fraction done, a bar, tokens/s, GB/s of input and output, ETA) at most
// ten times a second; elsewhere (a log file, a pipe) it prints a plain line at
// most every `interval` seconds. Every other line (a case finished, a case
// failed) goes through the reporter too, so that the bar never cuts one.
// Thread-safe: the compute thread starts cases, the writer thread advances them.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>

namespace linattn {

class ProgressReporter {
 public:
  ProgressReporter(std::ostream& lines, std::ostream& bar, bool bar_is_terminal, double interval_seconds = 10.0);

  void start_case(const std::string& label, std::int64_t tokens, std::int64_t bytes);
  // Adds a finished window: its tokens and its bytes (in + out).
  void advance(std::int64_t tokens, std::int64_t bytes);
  // A whole line to `lines` (or to `bar`'s stream with to_bar_stream), after clearing the bar.
  void line(const std::string& text, bool to_bar_stream = false);
  void end_case();

  // "37% |#######.............| 1.23 Mtok/s  2.10 GB/s  ETA 12 s"
  static std::string status(double fraction, double tokens_per_second, double bytes_per_second, double eta_seconds);

 private:
  void draw();
  void clear_bar();
  using Clock = std::chrono::steady_clock;
  std::ostream& lines_;
  std::ostream& bar_;
  bool terminal_;
  double interval_;
  std::mutex mutex_;
  std::string label_;
  std::int64_t total_tokens_ = 0, total_bytes_ = 0, done_tokens_ = 0, done_bytes_ = 0;
  Clock::time_point start_, last_draw_;
  bool active_ = false, drawn_ = false;
};

}  // namespace linattn
