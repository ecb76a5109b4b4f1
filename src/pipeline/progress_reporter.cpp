#include "pipeline/progress_reporter.hpp"

#include <cmath>
#include <cstdio>
#include <ostream>

namespace linattn {

ProgressReporter::ProgressReporter(std::ostream& lines, std::ostream& bar, bool bar_is_terminal, double interval_seconds)
    : lines_(lines), bar_(bar), terminal_(bar_is_terminal), interval_(interval_seconds) {}

std::string ProgressReporter::status(double fraction, double tokens_per_second, double bytes_per_second,
                                     double eta_seconds) {
  constexpr int width = 20;
  fraction = std::fmin(1.0, std::fmax(0.0, fraction));
  const int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  char text[160];
  char eta[32];
  if (std::isfinite(eta_seconds) && eta_seconds >= 0)
    std::snprintf(eta, sizeof eta, "ETA %.0f s", std::ceil(eta_seconds));
  else
    std::snprintf(eta, sizeof eta, "ETA -");
  std::snprintf(text, sizeof text, "%3.0f%% |%s| %.2f Mtok/s  %.2f GB/s  %s", 100.0 * fraction, bar.c_str(),
                tokens_per_second / 1e6, bytes_per_second / 1e9, eta);
  return text;
}

void ProgressReporter::start_case(const std::string& label, std::int64_t tokens, std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  label_ = label;
  total_tokens_ = tokens;
  total_bytes_ = bytes;
  done_tokens_ = done_bytes_ = 0;
  start_ = last_draw_ = Clock::now();
  active_ = true;
}

void ProgressReporter::advance(std::int64_t tokens, std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;
  done_tokens_ += tokens;
  done_bytes_ += bytes;
  draw();
}

void ProgressReporter::end_case() {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_bar();
  active_ = false;
}

void ProgressReporter::line(const std::string& text, bool to_bar_stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_bar();
  (to_bar_stream ? bar_ : lines_) << text << std::endl;
}

void ProgressReporter::clear_bar() {
  if (terminal_ && drawn_) bar_ << "\r\033[2K" << std::flush;
  drawn_ = false;
}

void ProgressReporter::draw() {
  const Clock::time_point now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since < (terminal_ ? 0.1 : interval_)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double fraction = total_tokens_ > 0 ? static_cast<double>(done_tokens_) / static_cast<double>(total_tokens_) : 0;
  const double rate = elapsed > 0 ? static_cast<double>(done_tokens_) / elapsed : 0;
  const double bytes_rate = elapsed > 0 ? static_cast<double>(done_bytes_) / elapsed : 0;
  const double eta = rate > 0 ? static_cast<double>(total_tokens_ - done_tokens_) / rate : NAN;
  const std::string text = label_ + "  " + status(fraction, rate, bytes_rate, eta);
  if (terminal_) {
    bar_ << "\r\033[2K" << text << std::flush;
    drawn_ = true;
  } else {
    bar_ << text << std::endl;
  }
}

}  // namespace linattn
